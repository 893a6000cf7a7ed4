//! What a request's session costs on the request path (`wire::session::session`): an agent's
//! conversation with a 20 KiB system prompt and 40 turns, keyed by its header, by its client's
//! hint (read with the rest of the body) and by the hash of its first turns. Figures go to
//! docs/BENCHMARKS.md.
//!
//! `cargo bench --bench session`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use switchyard::canonical::Dialect;
use switchyard::wire::session::session;
use switchyard::wire::{ChatRequest, Forms};

/// An agent's request: a long system prompt, then `turns` user/assistant pairs.
fn agent_body(hint: bool, turns: usize) -> bytes::Bytes {
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": "You are a careful coding agent. ".repeat(640)}),
    ];
    for i in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": format!("step {i}: run the tests and fix what fails, then report")}));
        messages.push(serde_json::json!({"role": "assistant", "content": "Ran them; two failures fixed. ".repeat(20)}));
    }
    let mut body = serde_json::json!({"model": "agent", "messages": messages});
    if hint {
        body["prompt_cache_key"] = "conversation-1234".into();
    }
    bytes::Bytes::from(body.to_string())
}

fn sessions(c: &mut Criterion) {
    let mut group = c.benchmark_group("session");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let plain = agent_body(false, 40);
    let hinted = agent_body(true, 40);
    let plain_forms = Forms::openai(ChatRequest::parse(plain.clone()).unwrap());
    let hinted_forms = Forms::openai(ChatRequest::parse(hinted.clone()).unwrap());
    let header = http::HeaderValue::from_static("task-42");
    group.bench_function("header", |b| {
        b.iter(|| session(Some(black_box(&header)), Dialect::OpenAi, &plain_forms))
    });
    group.bench_function("client hint", |b| {
        b.iter(|| session(None, Dialect::OpenAi, black_box(&hinted_forms)))
    });
    group.bench_function("first turns hashed", |b| {
        b.iter(|| session(None, Dialect::OpenAi, black_box(&plain_forms)))
    });
    // For scale: what reading the same body for the inner form costs already.
    group.bench_function("ChatRequest::parse (for scale)", |b| {
        b.iter(|| ChatRequest::parse(black_box(plain.clone())).unwrap())
    });
    group.finish();
}

criterion_group!(benches, sessions);
criterion_main!(benches);

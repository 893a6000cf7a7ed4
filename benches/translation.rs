//! Translation cost: a request parsed in one dialect and written in another (every pair, a
//! small and an agent-sized conversation), a stream event decoded from one dialect and
//! encoded into another (every pair, per event), and the scan for Gemini signatures carried
//! in tool-call ids that every body for a target other than Gemini goes through. Figures go
//! to docs/BENCHMARKS.md.
//!
//! `cargo bench --bench translation`
// A benchmark's setup reads fixtures it ships with; failing loudly is what we want there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use switchyard::canonical::context::{self, TokenCounter};
use switchyard::canonical::gemini::signature;
use switchyard::canonical::{ChatRequest, Dialect, Message, StreamEvent};

const DIALECTS: [Dialect; 3] = [Dialect::OpenAi, Dialect::Anthropic, Dialect::Gemini];

fn request_fixture(dialect: Dialect) -> &'static [u8] {
    match dialect {
        Dialect::OpenAi => include_bytes!("../tests/fixtures/openai/request_tools.json"),
        Dialect::Anthropic => include_bytes!("../tests/fixtures/anthropic/request_tools.json"),
        Dialect::Gemini => include_bytes!("../tests/fixtures/gemini/request_tools.json"),
        Dialect::Responses => unreachable!("no Responses fixture yet: not in DIALECTS"),
    }
}

fn stream_fixture(dialect: Dialect) -> &'static [u8] {
    match dialect {
        Dialect::OpenAi => include_bytes!("../tests/fixtures/openai/stream_tool_call.sse"),
        Dialect::Anthropic => include_bytes!("../tests/fixtures/anthropic/stream_tool_call.sse"),
        Dialect::Gemini => include_bytes!("../tests/fixtures/gemini/stream_function_call.sse"),
        Dialect::Responses => unreachable!("no Responses fixture yet: not in DIALECTS"),
    }
}

/// The fixture's conversation repeated to `copies` times its length (an agent's long run).
fn grown(dialect: Dialect, copies: usize) -> Vec<u8> {
    let req = dialect.parse_request(request_fixture(dialect)).unwrap();
    let mut big = ChatRequest {
        messages: Vec::new(),
        ..req.clone()
    };
    for _ in 0..copies {
        big.messages.extend(req.messages.iter().cloned());
    }
    dialect.write_request(&big, "bench-model").unwrap()
}

fn label(d: Dialect) -> &'static str {
    d.label()
}

fn requests(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for (size, copies) in [("small", 1), ("agent", 20)] {
        for from in DIALECTS {
            let body = grown(from, copies);
            group.throughput(Throughput::Bytes(body.len() as u64));
            for to in DIALECTS {
                let id = BenchmarkId::new(size, format!("{}->{}", label(from), label(to)));
                group.bench_with_input(id, &body, |b, body| {
                    b.iter(|| {
                        let req = from.parse_request(black_box(body)).unwrap();
                        black_box(to.write_request(&req, "target-model").unwrap())
                    });
                });
            }
        }
    }
    group.finish();
}

/// A transcript's events as (event name, data).
fn events(bytes: &[u8]) -> Vec<(Option<String>, Vec<u8>)> {
    let text = String::from_utf8(bytes.to_vec())
        .unwrap()
        .replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.extend_from_slice(d.as_bytes());
                }
            }
            (name, data)
        })
        .collect()
}

fn streams(c: &mut Criterion) {
    let mut group = c.benchmark_group("stream");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for from in DIALECTS {
        let transcript = events(stream_fixture(from));
        group.throughput(Throughput::Elements(transcript.len() as u64));
        for to in DIALECTS {
            let id = BenchmarkId::new("event", format!("{}->{}", label(from), label(to)));
            group.bench_with_input(id, &transcript, |b, transcript| {
                let mut decoded: Vec<StreamEvent> = Vec::with_capacity(8);
                let mut out = Vec::with_capacity(4096);
                b.iter(|| {
                    let mut decoder = from.decoder();
                    let mut encoder = to.encoder(true);
                    out.clear();
                    for (name, data) in transcript {
                        decoded.clear();
                        decoder.decode(name.as_deref(), data, &mut decoded).unwrap();
                        for event in &decoded {
                            encoder.encode(event, &mut out);
                        }
                    }
                    encoder.finish(&mut out);
                    black_box(out.len())
                });
            });
        }
    }
    group.finish();
}

fn trimming(c: &mut Criterion) {
    let mut group = c.benchmark_group("context");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let req = Dialect::OpenAi
        .parse_request(&grown(Dialect::OpenAi, 20))
        .unwrap();
    for (name, counter) in [
        (
            "o200k_base",
            TokenCounter::for_target(Dialect::OpenAi, "gpt-4o"),
        ),
        (
            "estimate",
            TokenCounter::for_target(Dialect::Anthropic, "claude"),
        ),
    ] {
        let need = context::estimate_tokens(&req, &counter);
        group.bench_function(BenchmarkId::new("trim_agent_to_half", name), |b| {
            b.iter(|| black_box(context::trim_to_fit(&req, need / 2, 0, &counter)))
        });
    }
    group.finish();
}

/// `signature::strip` on the agent-sized OpenAI body: as it is (no signature: the scan every
/// body for a target other than Gemini pays), and with a 2 KB signature carried in every
/// call's id (a conversation a Gemini target served: the ids are cut).
fn signatures(c: &mut Criterion) {
    let mut group = c.benchmark_group("signatures");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    let plain = grown(Dialect::OpenAi, 20);
    let mut req = Dialect::OpenAi.parse_request(&plain).unwrap();
    let carried = "A".repeat(2048);
    for message in &mut req.messages {
        match message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    assert!(signature::embed(&mut call.id, &carried));
                }
            }
            Message::Tool(result) => {
                assert!(signature::embed(&mut result.tool_call_id, &carried));
            }
            Message::User { .. } => {}
        }
    }
    let signed = Dialect::OpenAi.write_request(&req, "bench-model").unwrap();
    for (name, body) in [("agent_plain", &plain), ("agent_signed", &signed)] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_with_input(BenchmarkId::new("strip", name), body, |b, body| {
            b.iter(|| black_box(signature::strip(black_box(body))))
        });
    }
    group.finish();
}

criterion_group!(benches, requests, streams, trimming, signatures);
criterion_main!(benches);

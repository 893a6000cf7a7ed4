//! Hostile upstreams: an answer, a stream head, an error body or an SSE event larger than the
//! gateway holds is an attempt failure (or is cut), counted in `switchyard_limits_total`, and a
//! record's fields a client fills are stored cut to their size.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

/// An answer larger than `max_response_body` is an attempt failure of its own kind
/// (`too_large`): it fails over, and is counted.
#[tokio::test]
async fn an_answer_over_max_response_body_fails_over() {
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        words: 5_000, // about 50 KB
        ..Default::default()
    });
    let toml = with_server(&config(&m, ""), "max_response_body = \"16KiB\"");
    let state = build(&toml);
    let gw = Gateway::serve(state.clone(), None).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    assert_eq!(limit_count(&state, "max_response_body").await, 1);
    let text = metrics(&gw).await;
    assert!(
        text.contains("from=\"p0/model-0\",to=\"p1/model-1\",reason=\"too_large\"} 1"),
        "{text}"
    );
    gw.stop().await;
}

/// A stream that sends more than `max_response_body` before its first content (here: filler
/// events while it makes the client wait) fails over the same way.
#[tokio::test]
async fn a_stream_head_over_max_response_body_fails_over() {
    let m = mocks(2).await;
    let filler = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": ""}, "pad": "x".repeat(1000)}]})
    );
    m[0].set_plan(FaultPlan {
        first_token_ms: 5_000,
        keepalive_ms: 5,
        keepalive_event: Some(filler),
        ..Default::default()
    });
    let toml = with_server(&config(&m, ""), "max_response_body = \"16KiB\"");
    let state = build(&toml);
    let gw = Gateway::serve(state.clone(), None).await;
    let t0 = std::time::Instant::now();
    let resp = gw.chat(chat_body(true)).await;
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(limit_count(&state, "max_response_body").await, 1);
    gw.stop().await;
}

/// An error body is read only as far as classifying it needs (64 KiB): a provider's client
/// error returned as is comes back cut there, and the cut is counted.
#[tokio::test]
async fn an_error_body_is_read_at_most_64_kib() {
    let m = mocks(1).await;
    let huge = format!(
        "{{\"error\":{{\"message\":\"bad request\",\"detail\":\"{}\"}}}}",
        "x".repeat(1 << 20)
    );
    m[0].set_plan(FaultPlan {
        status: Some(400),
        error_body: Some(huge),
        ..Default::default()
    });
    let state = build(&config(&m, ""));
    let gw = Gateway::serve(state.clone(), None).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 400);
    let body = resp.bytes().await.unwrap();
    assert_eq!(body.len(), 64 * 1024);
    assert!(body.starts_with(b"{\"error\":{\"message\":\"bad request\""));
    assert_eq!(limit_count(&state, "error_body").await, 1);
    gw.stop().await;
}

/// An upstream SSE event that grows without end (`data:` lines and never the blank line that
/// ends the event) is cut at 4 MiB: before the first content the attempt fails and the next
/// target answers; after it, the stream is continued elsewhere. Counted either way. (Before:
/// the event's data grew in memory for as long as the upstream sent.)
#[tokio::test]
async fn an_endless_sse_event_is_an_attempt_failure() {
    let line = format!("data: {}\n", "x".repeat(64 * 1024));
    for committed in [false, true] {
        let m = mocks(2).await;
        m[0].set_plan(FaultPlan {
            first_token_ms: if committed { 0 } else { 60_000 },
            stall_after_chunks: committed.then_some(2),
            keepalive_ms: 1,
            keepalive_event: Some(line.clone()),
            ..Default::default()
        });
        let state = build(&config(&m, "[routes.hedge]\nenabled = false"));
        let gw = Gateway::serve(state.clone(), None).await;
        let resp = gw.chat(chat_body(true)).await;
        assert_eq!(resp.status(), 200);
        let events = sse_events(&resp.text().await.unwrap());
        assert_eq!(stream_text(&events), canonical_text(12, 0), "{committed}");
        assert_eq!(events.last().unwrap(), "[DONE]");
        assert_eq!(limit_count(&state, "sse_event").await, 1, "{committed}");
        assert_eq!(
            user_requests(&m[1]),
            1,
            "{committed}: the next target answered"
        );
        gw.stop().await;
    }
}

/// A model name a client made 4 MiB long is stored cut to 256 bytes as `route`, and the error
/// that quotes it cut to 1 KiB, each ending in the marker, and counted. (Before: stored whole,
/// twice per record; ten such requests grew the database by 149 MB.)
#[tokio::test]
async fn audit_fields_are_stored_cut_to_their_size() {
    let m = mocks(1).await;
    let store = support::audit::TestStore::sqlite();
    let toml = with_audit(&config(&m, ""), &store.url(), "").replace("64KiB", "8MiB");
    let state = build(&toml);
    let gw = Gateway::serve(state.clone(), None).await;
    let mut body = chat_body(false);
    body["model"] = "m".repeat(4 << 20).into();
    let resp = gw.chat(body).await;
    assert_eq!(resp.status(), 404);
    drop(resp); // its 4 MiB answer unread would hold the drain
    gw.stop().await;
    let records = store.all().await;
    assert_eq!(records.len(), 1);
    let marker = switchyard::audit::TRUNCATED;
    let route = &records[0].route;
    assert_eq!(route.len(), 256);
    assert!(
        route.ends_with(marker) && route.starts_with("mmmm"),
        "{route}"
    );
    let error = records[0].error.as_deref().unwrap();
    assert_eq!(error.len(), 1024);
    assert!(error.ends_with(marker), "{error}");
    assert!(error.starts_with("the model `mmm"), "{error}");
    assert_eq!(
        limit_count(&state, "audit_field").await,
        2,
        "the route, the error"
    );
    store.cleanup().await;
}

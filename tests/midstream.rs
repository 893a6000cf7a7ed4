//! Mid-stream continuation: a committed stream that breaks is finished by another target, and
//! the client sees one seamless answer, or a clear error when that cannot be done honestly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

const WORDS: usize = 12;

async fn stream(gw: &Gateway) -> Vec<Value> {
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    sse_events(&resp.text().await.unwrap())
}

fn done(events: &[Value]) -> bool {
    events.last() == Some(&Value::String("[DONE]".into()))
}

fn assert_whole(events: &[Value]) {
    assert_eq!(
        stream_text(events),
        canonical_text(WORDS, 0),
        "every word exactly once"
    );
    assert!(done(events), "ends like a complete stream");
    let finishes: Vec<_> = events
        .iter()
        .filter_map(|e| e["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finishes, ["stop"], "one finish");
    let ids: std::collections::HashSet<_> =
        events.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), 1, "one stream id: {ids:?}");
    let roles = events
        .iter()
        .filter(|e| e["choices"][0]["delta"]["role"].is_string())
        .count();
    assert_eq!(roles, 1, "one role delta");
}

fn last_message(m: &switchyard::mock::MockServer) -> Value {
    let req = m.requests().last().cloned().unwrap();
    req.body["messages"]
        .as_array()
        .unwrap()
        .last()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn a_cut_stream_is_continued_on_the_backup_with_a_prefill() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert_whole(&events);
    let prefill = last_message(&m[1]);
    assert_eq!(prefill["role"], "assistant");
    assert_eq!(prefill["content"], "alpha-1 bravo-2 charlie-3");
    let metrics = metrics(&gw).await;
    assert!(metrics.contains(
        "switchyard_failovers_total{route=\"chat\",from=\"p0/model-0\",to=\"p1/model-1\",reason=\"mid_stream\"} 1"
    ));
}

#[tokio::test]
async fn an_in_band_error_after_the_first_token_is_continued() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        inband_error_after: Some(5),
        ..Default::default()
    });
    assert_whole(&stream(&gw).await);
}

#[tokio::test(start_paused = true)]
async fn a_stall_past_idle_timeout_is_continued() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "idle_timeout = \"3s\"")).await;
    m[0].set_plan(FaultPlan {
        stall_after_chunks: Some(4),
        ..Default::default()
    });
    let t0 = tokio::time::Instant::now();
    let events = stream(&gw).await;
    assert!(t0.elapsed() >= Duration::from_secs(3) && t0.elapsed() < Duration::from_secs(4));
    assert_whole(&events);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(m[0].stats().cancelled, 1, "the stalled upstream is closed");
}

#[tokio::test]
async fn a_backup_that_rejects_prefill_restarts_and_the_duplicate_prefix_is_skipped() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(5),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        reject_prefill: true,
        ..Default::default()
    });
    assert_whole(&stream(&gw).await);
    assert_eq!(
        m[1].stats().requests,
        2,
        "a rejected prefill, then a restart"
    );
    assert_eq!(
        last_message(&m[1])["role"],
        "user",
        "the restart has no prefill"
    );
}

#[tokio::test]
async fn a_target_configured_without_prefill_restarts_at_once() {
    let m = mocks(2).await;
    let toml = config(&m, "").replace(
        "{ provider = \"p1\", model = \"model-1\" }",
        "{ provider = \"p1\", model = \"model-1\", prefill = false }",
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(2),
        ..Default::default()
    });
    assert_whole(&stream(&gw).await);
    assert_eq!(m[1].stats().requests, 1);
    assert_eq!(last_message(&m[1])["role"], "user");
}

#[tokio::test]
async fn a_restart_that_diverges_ends_with_an_honest_error() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        reject_prefill: true,
        variant: 1,
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert!(!done(&events));
    assert_eq!(
        stream_text(&events),
        "alpha-1 bravo-2 charlie-3",
        "nothing of the other answer"
    );
    let err = events.last().unwrap();
    assert_eq!(err["error"]["code"], "stream_interrupted");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("differs"),
        "{err}"
    );
}

#[tokio::test]
async fn a_tool_call_in_progress_is_not_continued() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        tool_call: true,
        cut_after_chunks: Some(2),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert!(!done(&events));
    assert_eq!(
        events.last().unwrap()["error"]["code"],
        "stream_interrupted"
    );
    assert_eq!(
        m[1].stats().requests,
        0,
        "no continuation of a half-streamed tool call"
    );
}

#[tokio::test]
async fn with_no_healthy_target_left_the_original_cut_is_reported() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert!(!done(&events));
    let msg = events.last().unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("p0/model-0") && msg.contains("closed before"),
        "{msg}"
    );
}

/// A target whose retry budget is spent is passed over for the continuation too: after ten
/// good requests the first backup took its one failed retry (20% of what it was sent, no
/// floor), so a stream cut on the primary is continued on the second backup without a call to
/// it.
#[tokio::test]
async fn a_continuation_passes_over_a_target_whose_retry_budget_is_spent() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, &budget_only(0.2, 0))).await;
    for _ in 0..10 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    m[0].set_plan(down());
    m[1].set_plan(down());
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p2/model-2");
    assert_eq!(m[1].stats().requests, 1);
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert_whole(&events);
    assert_eq!(m[1].stats().requests, 1, "not asked to continue");
    assert_eq!(last_message(&m[2])["content"], "alpha-1 bravo-2 charlie-3");
}

/// The continuation picks its target by the first attempt's rules: a target parked by a 429's
/// `Retry-After` is passed over, not asked again. The first target is parked, the stream fails
/// over to the second, which is cut mid-answer; the third continues it.
#[tokio::test]
async fn a_continuation_never_asks_a_target_parked_by_retry_after() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, "mid_stream = \"continue\"")).await;
    m[0].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(60),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert_whole(&events);
    assert_eq!(m[1].stats().requests, 1);
    assert_eq!(m[2].stats().requests, 1, "the third target continues");
    assert_eq!(last_message(&m[2])["content"], "alpha-1 bravo-2 charlie-3");
    assert_eq!(
        m[0].stats().requests,
        1,
        "parked by its Retry-After: not asked to continue"
    );
}

/// A target that answers a continuation with a 429's `Retry-After` is parked, as after any
/// attempt, so the next requests go elsewhere meanwhile.
#[tokio::test]
async fn a_continuation_answered_with_retry_after_parks_its_target() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, "mid_stream = \"continue\"")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(60),
        ..Default::default()
    });
    let events = stream(&gw).await;
    assert_whole(&events);
    assert_eq!(m[1].stats().requests, 1);
    assert_eq!(last_message(&m[2])["content"], "alpha-1 bravo-2 charlie-3");
    let status = status(&gw).await;
    let parked = |i: usize| status["targets"][i]["parked_ms"].clone();
    assert!(
        parked(1).as_f64().is_some_and(|ms| ms > 50_000.0),
        "{status}"
    );
    assert!(parked(2).is_null(), "{status}");
}

//! Latency retries on tokio's paused clock: stalls are abandoned at their timeout and the
//! request moves on well inside `request_timeout`. Times are virtual, so the assertions on
//! elapsed time are exact, not performance goals.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan, MockServer};
use tokio::time::Instant;

/// Hedging is off: these tests are about abandoning stalls, which a hedge would pre-empt.
const POLICY: &str = "attempt_timeout = \"5s\"\nfirst_token_timeout = \"2s\"\nidle_timeout = \"3s\"\nrequest_timeout = \"20s\"\n[routes.hedge]\nenabled = false";

#[tokio::test(start_paused = true)]
async fn a_stalled_attempt_is_abandoned_at_attempt_timeout() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    let resp = stall_then_chat(&gw, &m).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    // The abandoned call's connection was closed.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(m[0].stats().cancelled, 1);
}

/// An answer's attempt timer is kept for the next attempt on the thread and moved to its
/// deadline: a stall after an answer is abandoned at its own `attempt_timeout`, not at the
/// deadline the kept timer had.
#[tokio::test(start_paused = true)]
async fn an_attempt_after_an_answer_is_abandoned_at_its_own_timeout() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stall_then_chat(&gw, &m).await.status(), 200);
}

/// The first mock set to stall, then a whole-answer request: the second mock answers it once
/// the stalled attempt is abandoned, `attempt_timeout` (5 s) after it was sent.
async fn stall_then_chat(gw: &Gateway, m: &[MockServer]) -> reqwest::Response {
    m[0].set_plan(FaultPlan {
        stall: true,
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    let elapsed = t0.elapsed();
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert!(
        elapsed >= Duration::from_secs(5) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    resp
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_token_is_a_stall() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    m[0].set_plan(FaultPlan {
        first_token_ms: 60_000,
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_goes_quiet_after_the_first_token_ends_with_an_error() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(
        &m,
        &POLICY.replace("[routes.hedge]", "mid_stream = \"error\"\n[routes.hedge]"),
    ))
    .await;
    m[0].set_plan(FaultPlan {
        stall_after_chunks: Some(2),
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(true)).await;
    let events = sse_events(&resp.text().await.unwrap());
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    assert_eq!(stream_text(&events), "alpha-1 bravo-2");
    assert_eq!(
        events.last().unwrap()["error"]["code"],
        "stream_interrupted"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(m[0].stats().cancelled, 1, "the stalled upstream is closed");
}

#[tokio::test(start_paused = true)]
async fn a_stream_without_done_is_closed_promptly() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    m[0].set_plan(FaultPlan {
        omit_done: true,
        hold_open_ms: 600_000,
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(true)).await;
    let events = sse_events(&resp.text().await.unwrap());
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn the_request_deadline_ends_the_path_with_504() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    for mock in &m {
        mock.set_plan(FaultPlan {
            stall: true,
            ..Default::default()
        });
    }
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 504);
    assert_eq!(t0.elapsed().as_secs(), 15, "three attempts of 5 s each");
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("p2/model-2: timeout"),
        "{body}"
    );

    // The client's own deadline is shorter.
    let t0 = Instant::now();
    let resp = gw
        .chat_with(chat_body(false), &[("x-switchyard-timeout", "7s")])
        .await;
    assert_eq!(resp.status(), 504);
    assert_eq!(t0.elapsed().as_secs(), 7);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
}

#[tokio::test(start_paused = true)]
async fn a_bad_timeout_header_is_a_client_error() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    let resp = gw
        .chat_with(chat_body(false), &[("x-switchyard-timeout", "soon")])
        .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(m[0].stats().requests, 0);
}

#[tokio::test(start_paused = true)]
async fn with_no_other_target_a_retry_after_is_waited_out() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    m[0].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(3),
        ..Default::default()
    });
    // The provider is back after a second (through the mock's control API).
    let plan_url = format!("{}/mock/plan", m[0].root_url());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        client().put(plan_url).body("{}").send().await.unwrap();
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
}

/// Durations the config refuses (past a year) can still reach a `Config` built in code, and a
/// client's `x-switchyard-timeout` can be any length: no deadline made from them may overflow
/// the clock (`Instant + Duration` panics, which dropped every request's connection). Here
/// every timeout and hold is `Duration::MAX`: requests, streams, failovers and a breaker that
/// trips (its hold is added to the clock) all answer.
#[tokio::test]
async fn durations_past_the_clock_never_panic_a_request() {
    let m = mocks(2).await;
    m[0].set_plan(down());
    let env = |name: &str| (name == "TEST_KEY").then(|| "sk-test-secret".to_owned());
    let mut config = switchyard::config::Config::from_toml(&config(&m, ""), &env).unwrap();
    let route = std::sync::Arc::make_mut(&mut config.routes[0]);
    let f = &mut route.failover;
    f.attempt_timeout = Duration::MAX;
    f.first_token_timeout = Duration::MAX;
    f.idle_timeout = Duration::MAX;
    f.request_timeout = Duration::MAX;
    f.retry_after_wait = Duration::MAX;
    let b = &mut route.breaker;
    b.open_for = Duration::MAX;
    b.open_for_max = Duration::MAX;
    b.probe_interval = Duration::MAX;
    b.window = Duration::MAX;
    b.ramp = Duration::MAX;
    route.hedge.delay = switchyard::config::HedgeDelay::Fixed(Duration::MAX);
    let gw = Gateway::serve(switchyard::app::build_state(config).unwrap(), None).await;
    for i in 0..8 {
        let stream = i % 2 == 1;
        let mut req = client()
            .post(gw.url("/v1/chat/completions"))
            .json(&chat_body(stream));
        if i >= 4 {
            req = req.header("x-switchyard-timeout", "18446744073709551615s");
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} got no answer: {e}"));
        assert_eq!(resp.status(), 200, "request {i}");
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
        let text = resp.text().await.unwrap();
        if stream {
            assert_eq!(stream_text(&sse_events(&text)), canonical_text(12, 0));
        }
    }
    // The failures opened p0's breaker, with a hold of `Duration::MAX`.
    assert_eq!(breaker_state(&status(&gw).await, "p0/model-0"), "open");
    gw.stop().await;
}

/// Liveness is measured on content: an upstream that, after its first tokens, sends only
/// `: keepalive` comments, or only empty chunks, stalls out at `idle_timeout` all the same.
/// (Before: each comment reset the idle timer, and the stream never ended.)
#[tokio::test(start_paused = true)]
async fn keepalives_and_empty_chunks_do_not_keep_a_stalled_stream_alive() {
    let empty = "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n";
    for keepalive in [None, Some(empty.to_owned())] {
        let m = mocks(2).await;
        let policy = POLICY.replace("[routes.hedge]", "mid_stream = \"error\"\n[routes.hedge]");
        let gw = Gateway::start(&config(&m, &policy)).await;
        m[0].set_plan(FaultPlan {
            stall_after_chunks: Some(2),
            keepalive_ms: 500,
            keepalive_event: keepalive.clone(),
            ..Default::default()
        });
        let t0 = Instant::now();
        let read = async { gw.chat(chat_body(true)).await.text().await.unwrap() };
        let body = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .unwrap_or_else(|_| panic!("never stalled out ({keepalive:?})"));
        let elapsed = t0.elapsed();
        assert!(
            elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(4),
            "{keepalive:?}: {elapsed:?}"
        );
        let events = sse_events(&body);
        assert_eq!(stream_text(&events), "alpha-1 bravo-2");
        let last = events.last().unwrap();
        assert_eq!(last["error"]["code"], "stream_interrupted", "{body}");
        let message = last["error"]["message"].as_str().unwrap();
        assert!(message.contains("no content for 3000 ms"), "{message}");
    }
}

/// `request_timeout` bounds the whole request, a stream included: one that keeps sending
/// content past it ends there with the error chunk and event (not continued elsewhere: there is
/// no time left), its audit record says why, and it is counted. (Before: the deadline stopped
/// applying at the first token.)
#[tokio::test(start_paused = true)]
async fn request_timeout_bounds_the_whole_stream() {
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        chunk_delay_ms: 1_000,
        words: 100,
        ..Default::default()
    });
    let store = support::audit::TestStore::sqlite();
    let policy = POLICY.replace("request_timeout = \"20s\"", "request_timeout = \"10s\"");
    let toml = with_audit(&config(&m, &policy), &store.url(), "");
    let state = build(&toml);
    let gw = Gateway::serve(state.clone(), None).await;
    let t0 = Instant::now();
    let body = gw.chat(chat_body(true)).await.text().await.unwrap();
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(10) && elapsed < Duration::from_secs(11),
        "{elapsed:?}"
    );
    let events = sse_events(&body);
    assert_eq!(
        stream_text(&events).split(' ').count(),
        10,
        "a word a second"
    );
    let finish = &events[events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "error", "{body}");
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted", "{body}");
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("request_timeout"),
        "{body}"
    );
    assert_eq!(user_requests(&m[1]), 0, "no continuation past the deadline");
    let (_, text) = get_in_process(&state, "/metrics").await;
    assert!(
        text.contains("switchyard_limits_total{limit=\"stream_deadline\"} 1"),
        "{text}"
    );
    gw.stop().await;
    let records = store.all().await;
    assert_eq!(records.len(), 1);
    let error = records[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("request_timeout"), "{error}");
    assert_eq!(records[0].path[0].outcome, "timeout");
    store.cleanup().await;
}

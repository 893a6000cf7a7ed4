//! Streams: nothing reaches the client before the first content, so everything before it can
//! fail over; after it, a broken stream ends with an error, never a truncated "success".
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

async fn stream(gw: &Gateway, body: Value) -> (reqwest::Response, Vec<Value>) {
    let resp = gw.chat(body).await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    // Rebuild a response-like pair: status/headers checked by callers via the first value.
    let events = sse_events(&text);
    let mut fake = http::Response::new(text);
    *fake.status_mut() = status;
    *fake.headers_mut() = headers;
    (reqwest::Response::from(fake), events)
}

fn done(events: &[Value]) -> bool {
    events.last() == Some(&Value::String("[DONE]".into()))
}

#[tokio::test]
async fn a_healthy_stream_passes_through_whole() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let (resp, events) = stream(&gw, chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "text/event-stream");
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert!(done(&events));
    assert!(
        events
            .iter()
            .all(|e| e.get("usage").is_none_or(Value::is_null)),
        "no usage chunk the client did not ask for"
    );
    // Upstream was asked for usage anyway (accounting).
    let sent = &m[0].requests()[0].body;
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(sent["model"], "model-0");
}

/// A target keeps the shapes its stream's chunks were read by, for its next stream to start
/// with, and that stream reads as the first did.
#[tokio::test]
async fn a_target_keeps_its_streams_shapes_for_the_next() {
    let m = mocks(1).await;
    let state = build(&config(&m, ""));
    let gw = Gateway::serve(state.clone(), None).await;
    let kept = || {
        let routing = state.routing.load();
        let target = routing.target("p0/model-0").expect("the target");
        target.shapes.holds(switchyard::canonical::Dialect::OpenAi)
    };
    assert!(!kept());
    let (_, first) = stream(&gw, chat_body(true)).await;
    assert!(kept(), "the first stream's shapes kept");
    let (_, next) = stream(&gw, chat_body(true)).await;
    assert_eq!(stream_text(&next), stream_text(&first));
    assert_eq!(stream_text(&next), canonical_text(12, 0));
    assert!(done(&next));
}

#[tokio::test]
async fn the_usage_chunk_is_kept_when_asked_for() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let mut body = chat_body(true);
    body["stream_options"] = json!({"include_usage": true});
    let (_, events) = stream(&gw, body).await;
    let usage: Vec<_> = events.iter().filter(|e| e["usage"].is_object()).collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(usage[0]["usage"]["completion_tokens"], 12);
    assert!(done(&events));
}

#[tokio::test]
async fn errors_before_the_first_token_fail_over() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    for plan in [
        FaultPlan {
            status: Some(503),
            ..Default::default()
        },
        FaultPlan {
            inband_error_after: Some(0),
            ..Default::default()
        },
        FaultPlan {
            cut_after_chunks: Some(0),
            ..Default::default()
        },
    ] {
        m[0].reset();
        m[1].reset();
        m[0].set_plan(plan.clone());
        let (resp, events) = stream(&gw, chat_body(true)).await;
        assert_eq!(resp.status(), 200, "{plan:?}");
        assert_eq!(
            header(&resp, "x-switchyard-target"),
            "p1/model-1",
            "{plan:?}"
        );
        assert_eq!(stream_text(&events), canonical_text(12, 0), "{plan:?}");
        assert!(done(&events));
        assert_eq!(m[1].stats().requests, 1);
    }
}

/// The stream the route's first target cuts after three chunks, checked to end as a broken
/// stream does (three words, no `[DONE]`, one `finish_reason: "error"`, an error event last);
/// that event's message.
async fn cut_after_three(gw: &Gateway, first: &switchyard::mock::MockServer) -> String {
    first.set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let (resp, events) = stream(gw, chat_body(true)).await;
    assert_eq!(resp.status(), 200, "headers went out at the first token");
    let text = stream_text(&events);
    assert!(
        canonical_text(12, 0).starts_with(&text) && text.split(' ').count() == 3,
        "{text}"
    );
    assert!(
        !done(&events),
        "a broken stream must not end like a complete one"
    );
    let finish: Vec<_> = events
        .iter()
        .filter_map(|e| e["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["error"]);
    let err = events.last().unwrap();
    assert_eq!(err["error"]["code"], "stream_interrupted");
    err["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_cut_after_the_first_token_ends_with_an_error_not_a_short_answer() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "mid_stream = \"error\"")).await;
    let message = cut_after_three(&gw, &m[0]).await;
    assert!(message.contains("p0/model-0"), "{message}");
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains(
            "switchyard_requests_total{route=\"chat\",target=\"p0/model-0\",outcome=\"error\"} 1"
        ),
        "a broken stream is not counted a success"
    );
    assert!(metrics.contains(
        "switchyard_requests_total{route=\"chat\",target=\"p0/model-0\",outcome=\"ok\"} 0"
    ));
}

/// A route of one target has no other to continue a broken stream on: with continuation on
/// (the default) its stream ends as it does with continuation off.
#[tokio::test]
async fn a_one_target_route_ends_a_cut_stream_as_without_continuation() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let message = cut_after_three(&gw, &m[0]).await;
    assert!(
        message.starts_with("the answer from p0/model-0 is incomplete"),
        "{message}"
    );
    assert_eq!(
        m[0].requests().len(),
        1,
        "no second call for a continuation"
    );
}

#[tokio::test]
async fn an_in_band_error_after_the_first_token_is_reported() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "mid_stream = \"error\"")).await;
    m[0].set_plan(FaultPlan {
        inband_error_after: Some(2),
        ..Default::default()
    });
    let (_, events) = stream(&gw, chat_body(true)).await;
    assert!(!done(&events));
    assert_eq!(
        events.last().unwrap()["error"]["code"],
        "stream_interrupted"
    );
    assert!(events.last().unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Overloaded"));
}

#[tokio::test]
async fn a_malformed_chunk_is_skipped_and_the_stream_goes_on() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        malformed_chunk_at: Some(2),
        ..Default::default()
    });
    let (_, events) = stream(&gw, chat_body(true)).await;
    assert!(
        events.iter().all(|e| !e.is_null()),
        "the bad chunk is not forwarded"
    );
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert!(done(&events));
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_upstream_call() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        words: 200,
        chunk_delay_ms: 50,
        ..Default::default()
    });
    let mut resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.chunk().await.unwrap().is_some());
    drop(resp);
    for _ in 0..100 {
        if m[0].stats().cancelled == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let stats = m[0].stats();
    assert_eq!((stats.cancelled, stats.completed), (1, 0));
    let metrics = metrics(&gw).await;
    assert!(metrics.contains(
        "switchyard_requests_total{route=\"chat\",target=\"p0/model-0\",outcome=\"cancelled\"} 1"
    ));
}

#[tokio::test]
async fn finished_streams_leave_their_upstream_connection_for_reuse() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    // First the upstream's body ends a while after its last event: the client's answer is
    // complete before that, and the connection is only reusable if the gateway still reads to
    // the end. Then the body's end comes with its last event, and is read to it in place.
    let held = FaultPlan {
        omit_done: true,
        hold_open_ms: 50,
        ..Default::default()
    };
    for (round, (plan, pause)) in [(held, 150), (FaultPlan::default(), 0)]
        .into_iter()
        .enumerate()
    {
        m[0].set_plan(plan);
        for _ in 0..10 {
            let resp = gw.chat(chat_body(true)).await;
            let events = sse_events(&resp.text().await.unwrap());
            assert_eq!(stream_text(&events), canonical_text(12, 0));
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
        let (streams, round) = (10 * (round as u64 + 1), round as u64);
        let stats = m[0].stats();
        assert_eq!(stats.completed, streams);
        assert!(
            stats.connections <= round + 2,
            "{} connections for {streams} sequential streams",
            stats.connections
        );
    }
}

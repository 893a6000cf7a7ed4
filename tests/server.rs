//! `switchyard serve`'s own server threads (`app::Server`): several listeners on one port, each
//! thread with its own runtime and upstream connections. Answers, streams, the audit log and a
//! drain on shutdown work as on one runtime; a taken address is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::audit::TestStore;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test]
async fn many_connections_over_two_threads_are_all_answered_and_streams_whole() {
    let m = mocks(2).await;
    let gw = Gateway::start_threads(&config(&m, ""), 2).await;
    m[0].set_plan(down());
    // Each request on a connection of its own, so the kernel spreads them over both threads.
    let calls = (0..40).map(|i| {
        let url = gw.url("/v1/chat/completions");
        async move {
            let resp = reqwest::Client::new()
                .post(url)
                .json(&chat_body(i % 2 == 0))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
            let text = resp.text().await.unwrap();
            if i % 2 == 0 {
                assert_eq!(stream_text(&sse_events(&text)), canonical_text(12, 0));
            } else {
                let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(completion_text(&body), canonical_text(12, 0));
            }
        }
    });
    futures_util::future::join_all(calls).await;
    assert_eq!(m[1].stats().requests, 40);
    let text = metrics(&gw).await;
    assert!(text.contains(
        "switchyard_requests_total{route=\"chat\",target=\"p1/model-1\",outcome=\"ok\"} 40"
    ));
    gw.stop().await;
}

/// Shutdown waits for what is in flight on every thread, then flushes the audit log.
#[tokio::test]
async fn shutdown_drains_every_thread_and_flushes_the_audit_log() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 300,
        ..Default::default()
    });
    let store = TestStore::sqlite();
    let gw = Gateway::start_threads(&with_audit(&config(&m, ""), &store.url(), ""), 2).await;
    let url = gw.url("/v1/chat/completions");
    let in_flight: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                reqwest::Client::new()
                    .post(url)
                    .json(&chat_body(false))
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        })
        .collect();
    // Stop once all eight are upstream (the mock holds each for 300 ms).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while m[0].stats().requests < 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "the requests never arrived"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gw.stop().await;
    for call in in_flight {
        assert_eq!(call.await.unwrap(), 200, "answered through the drain");
    }
    assert_eq!(store.all().await.len(), 8, "every record written");
    store.cleanup().await;
}

#[tokio::test]
async fn an_address_in_use_is_refused_even_by_a_server_sharing_ports() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = switchyard::app::Server::bind(addr, 2).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    assert!(
        err.to_string().contains(&addr.to_string()),
        "names the address: {err}"
    );
    drop(taken);
    let first = switchyard::app::Server::bind(addr, 2).unwrap();
    assert_eq!(first.local_addr(), addr);
    let err = switchyard::app::Server::bind(addr, 2).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
}

/// `/readyz` over `state`, asked in this process: it answers whether or not a listener serves.
async fn readyz(state: &switchyard::api::AppState) -> (u16, String) {
    get_in_process(state, "/readyz").await
}

/// Until the gateway serves, `/readyz` says it is starting (503) while `/healthz` is 200; once
/// `serve` runs, both are 200, over the wire and on the same state.
#[tokio::test]
async fn readyz_is_starting_until_serve_runs_then_ready() {
    let m = mocks(1).await;
    let state = build(&config(&m, ""));
    assert_eq!(readyz(&state).await, (503, "starting".to_owned()));
    assert_eq!(get_in_process(&state, "/healthz").await.0, 200, "alive");
    let gw = Gateway::serve(state.clone(), None).await;
    let resp = client().get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "ready");
    assert_eq!(readyz(&state).await, (200, "ready".to_owned()));
    gw.stop().await;
}

/// The same with the server's own threads: ready once every thread serves.
#[tokio::test]
async fn readyz_is_starting_until_every_server_thread_runs_then_ready() {
    let m = mocks(1).await;
    let state = build(&config(&m, ""));
    assert_eq!(readyz(&state).await, (503, "starting".to_owned()));
    let gw = Gateway::serve(state.clone(), Some(2)).await;
    // The threads start after `serve` returns: on a busy machine one may answer (503,
    // starting) before the other runs. Ready within a bound, then ready on every thread.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while readyz(&state).await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Each on a connection of its own, so both threads are asked.
    for _ in 0..4 {
        let resp = reqwest::Client::new()
            .get(gw.url("/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.unwrap(), "ready");
    }
    assert_eq!(readyz(&state).await, (200, "ready".to_owned()));
    gw.stop().await;
}

/// A request the mock holds, sent on a task of its own: its status and body once answered.
fn slow_request(gw: &Gateway) -> tokio::task::JoinHandle<(u16, String)> {
    let url = gw.url("/v1/chat/completions");
    tokio::spawn(async move {
        let resp = reqwest::Client::new()
            .post(url)
            .json(&chat_body(false))
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    })
}

/// Waits (in steps of 1 ms, at most `limit` of them) until `done`.
async fn until(limit: u32, what: &str, mut done: impl FnMut() -> bool) {
    let mut left = limit;
    while !done() {
        assert!(left > 0, "never: {what}");
        left -= 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// From the shutdown signal on, `/readyz` says draining (503) while a request still in flight
/// is answered 200; `/healthz` stays 200. On the paused clock: the mock holds the request 10
/// virtual seconds, which pass only once the test waits for it.
#[tokio::test(start_paused = true)]
async fn readyz_is_draining_from_the_shutdown_signal_while_requests_finish() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 10_000,
        ..Default::default()
    });
    let state = build(&config(&m, ""));
    let mut gw = Gateway::serve(state.clone(), None).await;
    let slow = slow_request(&gw);
    until(1_000, "the request reaches the mock", || {
        user_requests(&m[0]) == 1
    })
    .await;
    assert_eq!(readyz(&state).await, (200, "ready".to_owned()));
    gw.signal_stop();
    until(1_000, "draining", || {
        state.readiness.phase() == switchyard::api::readiness::Phase::Draining
    })
    .await;
    assert_eq!(readyz(&state).await, (503, "draining".to_owned()));
    assert_eq!(get_in_process(&state, "/healthz").await.0, 200, "alive");
    assert_eq!(m[0].stats().completed, 0, "the request is still in flight");
    assert!(!slow.is_finished());
    let (status, body) = slow.await.unwrap();
    assert_eq!(status, 200, "answered through the drain: {body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    gw.stop().await;
}

/// The same with the server's own threads (their runtimes keep real time: the mock holds the
/// request 2 s, far longer than the signal takes).
#[tokio::test]
async fn readyz_is_draining_on_every_thread_from_the_shutdown_signal() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 2_000,
        ..Default::default()
    });
    let state = build(&config(&m, ""));
    let mut gw = Gateway::serve(state.clone(), Some(2)).await;
    let slow = slow_request(&gw);
    until(10_000, "the request reaches the mock", || {
        user_requests(&m[0]) == 1
    })
    .await;
    assert_eq!(readyz(&state).await, (200, "ready".to_owned()));
    gw.signal_stop();
    until(1_000, "draining", || {
        state.readiness.phase() == switchyard::api::readiness::Phase::Draining
    })
    .await;
    assert_eq!(readyz(&state).await, (503, "draining".to_owned()));
    assert_eq!(m[0].stats().completed, 0, "the request is still in flight");
    let (status, body) = slow.await.unwrap();
    assert_eq!(status, 200, "answered through the drain: {body}");
    gw.stop().await;
}

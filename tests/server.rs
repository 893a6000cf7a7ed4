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

//! Hostile clients and hostile upstreams: every `[server]` bound acts, and says so in
//! `switchyard_limits_total`. A slow client cannot hold a connection open forever, an idle one
//! is closed, connections and requests beyond their caps are refused at once (never queued),
//! and an upstream cannot make the gateway hold more of its answer than `max_response_body`.
//! Timeouts run on tokio's paused clock: the elapsed times asserted are virtual and exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::FaultPlan;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Reads from `tcp` until the gateway closes it (EOF or reset), for at most `limit`; what was
/// read, or `None` if it stayed open.
async fn read_until_closed(tcp: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response to a `GET /healthz` (its body is `ok`).
async fn read_healthz(tcp: &mut TcpStream) -> String {
    let mut got = Vec::new();
    while !got.ends_with(b"ok") {
        let mut buf = [0u8; 1024];
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n";

/// A request head sent a byte a second never completes: the connection is closed at
/// `header_timeout` from its accept, and counted. (Before: it stayed open as long as the
/// client liked; ~1,100 of them exhausted 1,024 file descriptors.)
#[tokio::test(start_paused = true)]
async fn a_request_head_sent_a_byte_a_second_is_closed_at_header_timeout() {
    let m = mocks(1).await;
    let state = build(&with_server(&config(&m, ""), "header_timeout = \"3s\""));
    let gw = Gateway::serve(state.clone(), None).await;
    let t0 = Instant::now();
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    let head =
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n";
    let mut closed_after = None;
    for byte in head.iter().cycle().take(60) {
        if tcp.write_all(&[*byte]).await.is_err() {
            closed_after = Some(t0.elapsed());
            break;
        }
        if read_until_closed(&mut tcp, Duration::from_secs(1))
            .await
            .is_some()
        {
            closed_after = Some(t0.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("the connection stayed open for a minute");
    assert!(
        closed_after >= Duration::from_secs(3) && closed_after < Duration::from_secs(4),
        "{closed_after:?}"
    );
    assert_eq!(limit_count(&state, "header_timeout").await, 1);
    assert_eq!(m[0].stats().requests, 0);
    gw.stop().await;
}

/// A kept-alive connection waiting for its next request is closed at `idle_timeout` (not at
/// the much shorter `header_timeout`), and a next request that starts but never completes is
/// closed at `header_timeout` from its first byte.
#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_at_idle_timeout_and_a_stalled_next_head_at_header_timeout() {
    let m = mocks(1).await;
    let state = build(&with_server(
        &config(&m, ""),
        "header_timeout = \"2s\"\nidle_timeout = \"10s\"",
    ));
    let gw = Gateway::serve(state.clone(), None).await;

    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(HEALTHZ).await.unwrap();
    assert!(read_healthz(&mut tcp).await.starts_with("HTTP/1.1 200"));
    let t0 = Instant::now();
    assert_eq!(
        read_until_closed(&mut tcp, Duration::from_secs(9)).await,
        None,
        "open while idle for less than idle_timeout"
    );
    assert!(read_until_closed(&mut tcp, Duration::from_secs(2))
        .await
        .is_some());
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
    assert_eq!(limit_count(&state, "idle_timeout").await, 1);
    assert_eq!(limit_count(&state, "header_timeout").await, 0);

    // The next request starts after 5 s idle, then stops half-way.
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(HEALTHZ).await.unwrap();
    read_healthz(&mut tcp).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    tcp.write_all(b"GET /healthz HTT").await.unwrap();
    let t0 = Instant::now();
    assert!(read_until_closed(&mut tcp, Duration::from_secs(30))
        .await
        .is_some());
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(limit_count(&state, "header_timeout").await, 1);
    gw.stop().await;
}

/// Each request on a kept-alive connection moves its idle deadline: requests 6 s apart keep
/// one open past `idle_timeout` (10 s), and it closes 10 s after the last answer, not 10 s
/// after the first (the connection's timer is moved when it fires early, not per request).
#[tokio::test(start_paused = true)]
async fn each_request_moves_the_idle_deadline() {
    let m = mocks(1).await;
    let state = build(&with_server(
        &config(&m, ""),
        "header_timeout = \"2s\"\nidle_timeout = \"10s\"",
    ));
    let gw = Gateway::serve(state.clone(), None).await;

    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    for _ in 0..3 {
        tcp.write_all(HEALTHZ).await.unwrap();
        assert!(read_healthz(&mut tcp).await.starts_with("HTTP/1.1 200"));
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    // 6 s after the last answer: 4 s are left.
    let t0 = Instant::now();
    assert!(read_until_closed(&mut tcp, Duration::from_secs(30))
        .await
        .is_some());
    assert_eq!(t0.elapsed(), Duration::from_secs(4));
    assert_eq!(limit_count(&state, "idle_timeout").await, 1);
    assert_eq!(limit_count(&state, "header_timeout").await, 0);
    gw.stop().await;
}

/// Beyond `max_connections` (over every server thread) a connection is accepted and closed at
/// once, and counted; once one closes, a new one is served.
#[tokio::test]
async fn connections_beyond_max_connections_are_closed_at_once() {
    let m = mocks(1).await;
    let state = build(&with_server(&config(&m, ""), "max_connections = 2"));
    let gw = Gateway::serve(state.clone(), Some(2)).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
        tcp.write_all(HEALTHZ).await.unwrap();
        read_healthz(&mut tcp).await;
        held.push(tcp);
    }
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    let _ = third.write_all(HEALTHZ).await;
    let got = read_until_closed(&mut third, Duration::from_secs(5)).await;
    assert_eq!(got.as_deref(), Some(""), "closed without an answer");
    assert_eq!(limit_count(&state, "max_connections").await, 1);
    drop(held.pop());
    // The gateway sees the close and gives its place back.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
        let _ = tcp.write_all(HEALTHZ).await;
        match read_until_closed(&mut tcp, Duration::from_millis(200)).await {
            // Kept alive (no close within the wait) or answered: served.
            None => break,
            Some(got) if got.starts_with("HTTP/1.1 200") => break,
            Some(_) => {
                assert!(std::time::Instant::now() < deadline, "never served again");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(held);
    gw.stop().await;
}

/// Beyond `max_in_flight`, a client API request gets 503 at once with `Retry-After`, in its
/// own dialect's envelope (never queued), while `/healthz` still answers; once the request in
/// flight ends, requests are served again.
#[tokio::test(start_paused = true)]
async fn requests_beyond_max_in_flight_get_503_with_retry_after_in_their_dialect() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 10_000,
        ..Default::default()
    });
    let state = build(&with_server(&config(&m, ""), "max_in_flight = 1"));
    let gw = Gateway::serve(state.clone(), None).await;
    let url = gw.url("/v1/chat/completions");
    let slow = tokio::spawn(async move {
        client()
            .post(url)
            .json(&chat_body(false))
            .send()
            .await
            .unwrap()
            .status()
    });
    while user_requests(&m[0]) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(t0.elapsed(), Duration::ZERO, "refused at once, not queued");
    assert_eq!(resp.status(), 503);
    assert_eq!(header(&resp, "retry-after"), "1");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_overloaded", "{body}");

    let resp = client()
        .post(gw.url("/v1/messages"))
        .json(&json!({"model": "chat", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(header(&resp, "retry-after"), "1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's envelope: {body}");
    assert_eq!(body["error"]["type"], "overloaded_error", "{body}");

    let resp = client()
        .post(gw.url("/v1/responses"))
        .json(&json!({"model": "chat", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503, "the Responses API is counted too");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_overloaded", "{body}");

    let health = client().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "operations endpoints are not counted");
    assert_eq!(limit_count(&state, "max_in_flight").await, 3);
    assert_eq!(
        user_requests(&m[0]),
        1,
        "the refused ones never went upstream"
    );

    assert_eq!(slow.await.unwrap(), 200);
    m[0].set_plan(FaultPlan::default());
    assert_eq!(
        gw.chat(chat_body(false)).await.status(),
        200,
        "its place is free"
    );
    gw.stop().await;
}

/// A stream holds its place under `max_in_flight` until it ends, not only until its head.
#[tokio::test(start_paused = true)]
async fn a_stream_holds_its_place_until_it_ends() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        chunk_delay_ms: 1_000,
        ..Default::default()
    });
    let state = build(&with_server(&config(&m, ""), "max_in_flight = 1"));
    let gw = Gateway::serve(state.clone(), None).await;
    let mut stream = gw.chat(chat_body(true)).await;
    assert_eq!(stream.status(), 200);
    stream.chunk().await.unwrap();
    assert_eq!(
        gw.chat(chat_body(false)).await.status(),
        503,
        "still streaming"
    );
    let rest = stream.text().await.unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    gw.stop().await;
}

/// The drain after the shutdown signal lasts at most `shutdown_timeout`, even for an upstream
/// stream that would go on for a quarter of an hour and a request whose upstream answers in a
/// minute. Then the stream ends with the error chunk and event, the request gets 503
/// `shutting_down`, and both audit records say why, written before the log is flushed.
/// (Before: the gateway waited as long as the stream went on.)
#[tokio::test(start_paused = true)]
async fn the_drain_lasts_at_most_shutdown_timeout_then_ends_what_is_open() {
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        chunk_delay_ms: 1_000,
        words: 1_000,
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        latency_ms: 60_000,
        ..Default::default()
    });
    let store = support::audit::TestStore::sqlite();
    let toml = with_server(&config(&m, ""), "shutdown_timeout = \"5s\"")
        + "\n[[routes]]\nname = \"slow\"\ntargets = [{ provider = \"p1\", model = \"model-1\" }]\n";
    let state = build(&with_audit(&toml, &store.url(), ""));
    let mut gw = Gateway::serve(state.clone(), None).await;
    let mut stream = gw.chat(chat_body(true)).await;
    assert_eq!(stream.status(), 200);
    stream.chunk().await.unwrap();
    let url = gw.url("/v1/chat/completions");
    let slow = tokio::spawn(async move {
        let mut body = chat_body(false);
        body["model"] = "slow".into();
        let resp = client().post(url).json(&body).send().await.unwrap();
        (resp.status(), resp.json::<Value>().await.unwrap())
    });
    while user_requests(&m[1]) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let t0 = Instant::now();
    gw.signal_stop();
    let rest = tokio::spawn(async move { stream.text().await.unwrap() });
    gw.stop().await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "ended at shutdown_timeout, not held to its grace: {took:?}"
    );
    let events = sse_events(&rest.await.unwrap());
    let finish = &events[events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "error");
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("shutting down"), "{message}");
    let (status, body) = slow.await.unwrap();
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "shutting_down", "{body}");
    assert_eq!(
        limit_count(&state, "shutdown_timeout").await,
        2,
        "two connections"
    );

    let records = store.all().await;
    assert_eq!(records.len(), 2, "{records:#?}");
    let stream_rec = records.iter().find(|r| r.stream).unwrap();
    assert_eq!(stream_rec.status, 200);
    assert!(stream_rec
        .error
        .as_deref()
        .unwrap()
        .contains("shutting down"));
    assert_eq!(stream_rec.path.last().unwrap().outcome, "shutdown");
    let slow_rec = records.iter().find(|r| !r.stream).unwrap();
    assert_eq!(slow_rec.status, 503);
    assert!(slow_rec.error.as_deref().unwrap().contains("shutting down"));
    assert_eq!(slow_rec.path[0].outcome, "shutdown");
    store.cleanup().await;
}

/// A gateway with `body_timeout = "3s"` and a connection to it that has sent `head` (a request
/// whose body is not whole), sent at the returned instant.
async fn sending_slowly(
    head: &[u8],
) -> (
    Vec<switchyard::mock::MockServer>,
    switchyard::api::AppState,
    Gateway,
    Instant,
    TcpStream,
) {
    let m = mocks(1).await;
    let state = build(&with_server(&config(&m, ""), "body_timeout = \"3s\""));
    let gw = Gateway::serve(state.clone(), None).await;
    let t0 = Instant::now();
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(head).await.unwrap();
    (m, state, gw, t0, tcp)
}

/// A request body sent too slowly gets 408 at `body_timeout` from its head, reaches no
/// provider, and is counted. (Before: a body sent a byte a second held its connection and its
/// place under `max_in_flight` for as long as the client liked.)
#[tokio::test(start_paused = true)]
async fn a_request_body_not_whole_within_body_timeout_gets_408() {
    let (m, state, gw, t0, mut tcp) = sending_slowly(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\":").await;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("request_timeout") {
        let n = tokio::time::timeout(Duration::from_secs(60), tcp.read(&mut buf))
            .await
            .expect("an answer within a minute")
            .unwrap();
        assert!(
            n > 0,
            "closed without an answer: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let elapsed = t0.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("x-switchyard-attempts: 0"), "{text}");
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(4),
        "{elapsed:?}"
    );
    assert_eq!(limit_count(&state, "body_timeout").await, 1);
    assert_eq!(m[0].stats().requests, 0);
    gw.stop().await;
}

/// The breaker override's body is bounded as the client API's is: sent too slowly, it gets
/// 408 at `body_timeout` and the breaker is not touched. (Before: a body sent a byte a second
/// held its connection for as long as the client liked.)
#[tokio::test(start_paused = true)]
async fn an_admin_body_not_whole_within_body_timeout_gets_408() {
    let (_mocks, state, gw, t0, mut tcp) = sending_slowly(b"POST /admin/targets/p0/model-0/breaker HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 18\r\n\r\n{\"action\":").await;
    let mut trickle = b"\"open\"}".iter();
    let got = loop {
        if let Some(got) = read_until_closed(&mut tcp, Duration::from_secs(1)).await {
            break got;
        }
        // A byte a second, one short of the whole body.
        if let Some(byte) = trickle.next().filter(|_| trickle.len() > 0) {
            tcp.write_all(&[*byte]).await.unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "still open");
    };
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("request_timeout"), "{got}");
    let elapsed = t0.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert_eq!(limit_count(&state, "body_timeout").await, 1);
    let status = get_in_process(&state, "/admin/status").await.1;
    assert!(status.contains("\"state\":\"closed\""), "{status}");
    gw.stop().await;
}

/// A request refused for `max_in_flight` has its audit record: status 503, no route, no
/// attempt, under the request id the client got. (Before: it was refused unrecorded.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_refused_for_max_in_flight_is_in_the_audit_log() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 2_000,
        ..Default::default()
    });
    let store = support::audit::TestStore::sqlite();
    let toml = with_audit(
        &with_server(&config(&m, ""), "max_in_flight = 1"),
        &store.url(),
        "",
    );
    let gw = Gateway::start(&toml).await;
    let url = gw.url("/v1/chat/completions");
    let slow = tokio::spawn(async move {
        client()
            .post(url)
            .json(&chat_body(false))
            .send()
            .await
            .unwrap()
            .status()
    });
    while user_requests(&m[0]) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 503);
    let id = header(&resp, "x-switchyard-request-id");
    assert_eq!(slow.await.unwrap(), 200);
    gw.stop().await;
    let records = store.all().await;
    let refused = records
        .iter()
        .find(|r| r.request_id == id)
        .expect("the refused request's record");
    assert_eq!(refused.status, 503);
    assert!(refused.path.is_empty());
    assert!(
        refused
            .error
            .as_deref()
            .unwrap_or("")
            .contains("max_in_flight"),
        "{refused:?}"
    );
    assert_eq!(records.len(), 2, "the served one and the refused one");
    store.cleanup().await;
}

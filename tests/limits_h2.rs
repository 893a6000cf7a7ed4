//! The `[server]` connection bounds over HTTP/2 (h2c, prior knowledge), as over HTTP/1:
//! `header_timeout` for every request head (not only the first), `idle_timeout` for a
//! connection with no stream open (pings and settings do not keep it open), and the body
//! deadline. A client here writes HTTP/2 frames by hand where a real client would not
//! misbehave as the test needs. Timeouts run on tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One frame: its 9-byte header and `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The HPACK block of a request head: `method` and `path` on `http://gw` (literals without
/// indexing: no dynamic table to keep).
fn head_block(method: &str, path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    let literal = |b: &mut Vec<u8>, index: u8, value: &str| {
        b.push(index);
        b.push(u8::try_from(value.len()).unwrap());
        b.extend_from_slice(value.as_bytes());
    };
    literal(&mut b, 2, method); // :method
    b.push(0x86); // :scheme http
    literal(&mut b, 4, path); // :path
    literal(&mut b, 1, "gw"); // :authority
    b
}

/// A connection that has sent its preface and settings.
async fn h2_connect(gw: &Gateway) -> TcpStream {
    let mut tcp = TcpStream::connect(gw.addr).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    tcp.write_all(&hello).await.unwrap();
    tcp
}

/// Frames read from `tcp` (each frame's kind, and when it came), until the gateway closes it
/// (`Some`) or `limit` passes (`None`).
async fn frames_until_closed(tcp: &mut TcpStream, limit: Duration) -> Option<Vec<(u8, Instant)>> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut frames = Vec::new();
    loop {
        while got.len() >= 9 {
            let len = usize::from(got[0]) << 16 | usize::from(got[1]) << 8 | usize::from(got[2]);
            if got.len() < 9 + len {
                break;
            }
            frames.push((got[3], Instant::now()));
            got.drain(..9 + len);
        }
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(frames),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A GET of `/healthz` on stream `id`, whole.
fn healthz(id: u32) -> Vec<u8> {
    frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        id,
        &head_block("GET", "/healthz"),
    )
}

/// An HTTP/2 connection with no stream open is closed at `idle_timeout` after its last
/// request, with a GOAWAY, even while the client pings it; a new one that never sends a
/// request is closed at `header_timeout`.
#[tokio::test(start_paused = true)]
async fn an_idle_h2_connection_is_closed_at_idle_timeout_even_while_pinged() {
    let m = mocks(1).await;
    let state = build(&with_server(
        &config(&m, ""),
        "header_timeout = \"2s\"\nidle_timeout = \"10s\"",
    ));
    let gw = Gateway::serve(state.clone(), None).await;
    let mut tcp = h2_connect(&gw).await;
    tcp.write_all(&healthz(1)).await.unwrap();
    let t0 = Instant::now();
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tcp.write_all(&frame(PING, 0, 0, &[0; 8])).await.unwrap();
    }
    let frames = frames_until_closed(&mut tcp, Duration::from_secs(30))
        .await
        .expect("closed");
    let goaway = frames.iter().find(|(kind, _)| *kind == GOAWAY);
    let (_, at) = goaway.unwrap_or_else(|| panic!("no GOAWAY: {frames:?}"));
    assert_eq!(*at - t0, Duration::from_secs(10));
    assert_eq!(limit_count(&state, "idle_timeout").await, 1);
    assert_eq!(limit_count(&state, "header_timeout").await, 0);
    gw.stop().await;
}

/// A request head that starts after an HTTP/2 connection's first request and never ends
/// (HEADERS without END_HEADERS, then a CONTINUATION a second) is closed at `header_timeout`
/// from its first frame, as over HTTP/1, not at `idle_timeout`.
#[tokio::test(start_paused = true)]
async fn a_later_h2_request_head_never_finished_is_closed_at_header_timeout() {
    let m = mocks(1).await;
    let state = build(&with_server(
        &config(&m, ""),
        "header_timeout = \"2s\"\nidle_timeout = \"60s\"",
    ));
    let gw = Gateway::serve(state.clone(), None).await;
    let mut tcp = h2_connect(&gw).await;
    tcp.write_all(&healthz(1)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let block = head_block("GET", "/healthz");
    tcp.write_all(&frame(HEADERS, 0, 3, &block[..2]))
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut closed = None;
    for byte in block[2..].iter().cycle().take(100) {
        if let Some(kinds) = frames_until_closed(&mut tcp, Duration::from_secs(1)).await {
            closed = Some(kinds);
            break;
        }
        if tcp
            .write_all(&frame(CONTINUATION, 0, 3, &[*byte]))
            .await
            .is_err()
        {
            closed = Some(Vec::new());
            break;
        }
    }
    closed.expect("the connection stayed open");
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(limit_count(&state, "header_timeout").await, 1);
    gw.stop().await;
}

/// A real HTTP/2 client (reqwest, prior knowledge) whose request body stops half-way gets 408
/// at `body_timeout` in its dialect's envelope, and no provider is asked; its connection then
/// serves the next request.
#[tokio::test(start_paused = true)]
async fn an_h2_request_body_not_whole_within_body_timeout_gets_408() {
    use futures_util::StreamExt as _;
    let m = mocks(1).await;
    let state = build(&with_server(&config(&m, ""), "body_timeout = \"3s\""));
    let gw = Gateway::serve(state.clone(), None).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let half = futures_util::stream::once(async {
        Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"{\"model\":"))
    })
    .chain(futures_util::stream::pending());
    let t0 = Instant::now();
    let resp = h2
        .post(gw.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(half))
        .send()
        .await
        .unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 408);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's envelope: {body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(limit_count(&state, "body_timeout").await, 1);
    assert_eq!(m[0].stats().requests, 0);
    let next = h2.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(next.status(), 200);
    gw.stop().await;
}

/// A real HTTP/2 client (hyper, prior knowledge) that keeps its connection after a request
/// sees it closed by the gateway at `idle_timeout`.
#[tokio::test(start_paused = true)]
async fn a_real_h2_client_connection_is_closed_at_idle_timeout() {
    use http_body_util::{BodyExt as _, Empty};
    let m = mocks(1).await;
    let state = build(&with_server(&config(&m, ""), "idle_timeout = \"10s\""));
    let gw = Gateway::serve(state.clone(), None).await;
    let tcp = TcpStream::connect(gw.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::get(gw.url("/healthz"))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"ok");
    let t0 = Instant::now();
    tokio::time::timeout(Duration::from_secs(60), conn)
        .await
        .expect("closed within a minute")
        .unwrap()
        .unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
    assert_eq!(limit_count(&state, "idle_timeout").await, 1);
    gw.stop().await;
}

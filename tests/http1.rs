//! The client connection's HTTP/1.1 on the wire, byte by byte: what the gateway serves itself
//! (`app::conn::h1`: pipelined requests, a body that arrives after its head, a stream sent in
//! chunks, a client that goes away, a request that asks to close) and what it hands to hyper
//! from the request where it begins (chunked bodies, `expect`, HTTP/1.0, `HEAD`, a head too
//! long or not HTTP at all), each followed by another request on the same connection where the
//! protocol keeps it open.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use support::*;
use switchyard::mock::FaultPlan;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One response as read off the wire.
#[derive(Debug)]
struct Resp {
    status: u16,
    /// The head's fields, names lowercased.
    fields: Vec<(String, String)>,
    body: String,
    /// Whether the body was chunked.
    chunked: bool,
}

impl Resp {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection with what it has read and not yet used.
struct Client {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(gw: &Gateway) -> Client {
        Client {
            tcp: TcpStream::connect(gw.addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.tcp.write_all(bytes).await.unwrap();
    }

    /// Read more; false at the connection's end.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), self.tcp.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// The next response (a `HEAD` request's has no body).
    async fn response(&mut self, head_only: bool) -> Resp {
        let (status, fields, len) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut parsed = httparse::Response::new(&mut slots);
            if let httparse::Status::Complete(len) = parsed.parse(&self.buf).unwrap() {
                let fields = parsed
                    .headers
                    .iter()
                    .map(|h| {
                        let value = String::from_utf8(h.value.to_vec()).unwrap();
                        (h.name.to_ascii_lowercase(), value)
                    })
                    .collect::<Vec<_>>();
                break (parsed.code.unwrap(), fields, len);
            }
            assert!(self.fill().await, "closed before a response head");
        };
        self.buf.drain(..len);
        let mut resp = Resp {
            status,
            fields,
            body: String::new(),
            chunked: false,
        };
        if head_only || status < 200 || status == 204 || status == 304 {
            return resp;
        }
        if let Some(len) = resp.field("content-length") {
            let len: usize = len.parse().unwrap();
            while self.buf.len() < len {
                assert!(self.fill().await, "closed inside a body");
            }
            resp.body = String::from_utf8(self.buf.drain(..len).collect()).unwrap();
        } else if resp.field("transfer-encoding") == Some("chunked") {
            resp.chunked = true;
            let mut body = Vec::new();
            loop {
                let line = loop {
                    if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        break at;
                    }
                    assert!(self.fill().await, "closed inside a chunk size");
                };
                let size = std::str::from_utf8(&self.buf[..line]).unwrap();
                let size = usize::from_str_radix(size, 16).unwrap();
                while self.buf.len() < line + 2 + size + 2 {
                    assert!(self.fill().await, "closed inside a chunk");
                }
                body.extend_from_slice(&self.buf[line + 2..line + 2 + size]);
                assert_eq!(&self.buf[line + 2 + size..line + 4 + size], b"\r\n");
                self.buf.drain(..line + 4 + size);
                if size == 0 {
                    break;
                }
            }
            resp.body = String::from_utf8(body).unwrap();
        } else {
            while self.fill().await {}
            resp.body = String::from_utf8(std::mem::take(&mut self.buf)).unwrap();
        }
        resp
    }

    /// Whether the gateway closed the connection (within 5 s) with nothing more sent.
    async fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.tcp.read(&mut chunk)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    async fn healthz(&mut self) {
        self.send(HEALTHZ).await;
        let resp = self.response(false).await;
        assert_eq!((resp.status, resp.body.as_str()), (200, "ok"), "{resp:?}");
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n";

fn chat(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn chat_json(stream: bool) -> String {
    chat_body(stream).to_string()
}

async fn gateway() -> (Vec<switchyard::mock::MockServer>, Gateway) {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    (m, gw)
}

/// Requests sent back to back in one write are answered in order, each framed by its length
/// and dated, and the connection stays open.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (_m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    let mut bytes = chat(&chat_json(false));
    bytes.extend_from_slice(HEALTHZ);
    bytes.extend_from_slice(&chat(&chat_json(false)));
    c.send(&bytes).await;
    for i in 0..3 {
        let resp = c.response(false).await;
        assert_eq!(resp.status, 200, "{resp:?}");
        assert!(!resp.chunked, "{resp:?}");
        assert!(resp.field("date").unwrap().ends_with(" GMT"), "{resp:?}");
        if i == 1 {
            assert_eq!(resp.body, "ok");
        } else {
            let answer: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
            assert!(!completion_text(&answer).is_empty(), "{answer}");
            assert!(resp.field("x-switchyard-request-id").is_some(), "{resp:?}");
        }
    }
    c.healthz().await;
    gw.stop().await;
}

/// A body that arrives in pieces after its head is read whole before the request is routed,
/// and the next request on the connection is read where the body ended.
#[tokio::test]
async fn a_body_arriving_after_its_head_is_read_whole() {
    let (m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    // A body long enough to matter: a 40 KiB message.
    let mut body = chat_body(false);
    body["messages"][0]["content"] = serde_json::Value::String("word ".repeat(8 * 1024));
    let bytes = chat(&body.to_string());
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    for piece in [
        &bytes[..head_end + 10],
        &bytes[head_end + 10..head_end + 20_000],
    ] {
        c.send(piece).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The rest together with the next request.
    let mut rest = bytes[head_end + 20_000..].to_vec();
    rest.extend_from_slice(HEALTHZ);
    c.send(&rest).await;
    let resp = c.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let answer: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
    assert!(!completion_text(&answer).is_empty(), "{answer}");
    assert_eq!(user_requests(&m[0]), 1);
    let resp = c.response(false).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "ok"));
    gw.stop().await;
}

/// A client that stops sending its body midway and closes: nothing reaches the provider.
#[tokio::test]
async fn a_body_cut_short_by_the_client_reaches_no_provider() {
    let (m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    let bytes = chat(&chat_json(false));
    c.send(&bytes[..bytes.len() - 5]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(c);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(user_requests(&m[0]), 0);
    let mut c = Client::connect(&gw).await;
    c.healthz().await;
    gw.stop().await;
}

/// A stream goes out in chunks, the last one empty, and the connection is kept.
#[tokio::test]
async fn a_stream_is_sent_in_chunks_and_the_connection_kept() {
    let (_m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    c.send(&chat(&chat_json(true))).await;
    let resp = c.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.chunked, "{resp:?}");
    assert_eq!(resp.field("content-length"), None);
    assert!(resp.body.ends_with("data: [DONE]\n\n"), "{}", resp.body);
    let events = sse_events(&resp.body);
    assert!(!stream_text(&events).is_empty(), "{}", resp.body);
    c.healthz().await;
    gw.stop().await;
}

/// A client that closes its connection while its request waits on the provider: the
/// provider's call is cancelled, not left to run.
#[tokio::test]
async fn a_client_gone_mid_request_cancels_the_call() {
    let (m, gw) = gateway().await;
    m[0].set_plan(FaultPlan {
        latency_ms: 30_000,
        ..Default::default()
    });
    let mut c = Client::connect(&gw).await;
    c.send(&chat(&chat_json(false))).await;
    let started =
        support::audit::eventually(5, || async { (user_requests(&m[0]) == 1).then_some(()) }).await;
    assert!(started.is_some(), "the call reached the provider");
    drop(c);
    let cancelled =
        support::audit::eventually(5, || async { (m[0].stats().cancelled == 1).then_some(()) })
            .await;
    assert!(cancelled.is_some(), "the provider's call was cancelled");
    gw.stop().await;
}

/// A chunked body, `expect: 100-continue`, `HEAD` and HTTP/1.0 are served by hyper, from the
/// request on, on the same connection as requests before them.
#[tokio::test]
async fn what_the_gateway_does_not_serve_itself_hyper_serves() {
    let (_m, gw) = gateway().await;

    // A chunked body after a request served by the gateway, then more requests.
    let mut c = Client::connect(&gw).await;
    c.healthz().await;
    let json = chat_json(false);
    let (a, b) = json.split_at(json.len() / 2);
    let chunked = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    c.send(chunked.as_bytes()).await;
    let resp = c.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.body.contains("choices"), "{resp:?}");
    // hyper writes the gateway's fields as the gateway's own writer does.
    for name in ["x-switchyard-request-id", "x-switchyard-target"] {
        assert!(resp.field(name).is_some(), "{name}: {resp:?}");
    }
    assert_eq!(resp.field("x-switchyard-attempts"), Some("1"), "{resp:?}");
    assert_eq!(
        resp.field("content-type"),
        Some("application/json"),
        "{resp:?}"
    );
    c.healthz().await;
    c.send(&chat(&json)).await;
    assert_eq!(c.response(false).await.status, 200);

    // `expect: 100-continue`: the interim answer, then the answer.
    let mut c = Client::connect(&gw).await;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        json.len()
    );
    c.send(head.as_bytes()).await;
    assert_eq!(c.response(false).await.status, 100);
    c.send(json.as_bytes()).await;
    let resp = c.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    c.healthz().await;

    // `HEAD`: the head alone.
    let mut c = Client::connect(&gw).await;
    c.send(b"HEAD /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await;
    let resp = c.response(true).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    c.healthz().await;

    // HTTP/1.0: answered as HTTP/1.0 and closed.
    let mut c = Client::connect(&gw).await;
    c.send(b"GET /healthz HTTP/1.0\r\n\r\n").await;
    let resp = c.response(false).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "ok"), "{resp:?}");
    assert!(c.closed().await);
    gw.stop().await;
}

/// A request that asks to close (`connection: close`) is answered with `connection: close`,
/// then its connection is closed: after a request that did not ask, and as a connection's
/// first request (a completion).
#[tokio::test]
async fn a_request_that_asks_to_close_is_answered_then_closed() {
    let (_m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    c.healthz().await;
    c.send(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .await;
    let resp = c.response(false).await;
    assert_eq!(
        (resp.status, resp.field("connection")),
        (200, Some("close"))
    );
    assert!(c.closed().await);

    let json = chat_json(false);
    let mut c = Client::connect(&gw).await;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         Connection: Close\r\ncontent-length: {}\r\n\r\n{json}",
        json.len()
    );
    c.send(request.as_bytes()).await;
    let resp = c.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert!(resp.body.contains("choices"), "{resp:?}");
    assert_eq!(resp.field("connection"), Some("close"), "{resp:?}");
    assert!(c.closed().await);
    gw.stop().await;
}

/// A head over 64 KiB (hyper takes up to ~400 KiB) is still served, and what is not HTTP is
/// refused with 400.
#[tokio::test]
async fn a_long_head_is_served_and_garbage_refused() {
    let (_m, gw) = gateway().await;
    let mut c = Client::connect(&gw).await;
    c.healthz().await;
    let long = format!(
        "GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-long: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    c.send(long.as_bytes()).await;
    let resp = c.response(false).await;
    assert_eq!((resp.status, resp.body.as_str()), (200, "ok"), "{resp:?}");
    c.healthz().await;

    let mut c = Client::connect(&gw).await;
    c.send(b"GET /healthz HTTP/1.1\r\nbad header\r\n\r\n").await;
    assert_eq!(c.response(false).await.status, 400);
    assert!(c.closed().await);
    gw.stop().await;
}

/// The shutdown signal closes an idle kept-alive connection; a request in flight is answered
/// with `connection: close` first.
#[tokio::test]
async fn the_drain_closes_idle_connections_and_answers_those_in_flight() {
    let (m, mut gw) = gateway().await;
    m[0].set_plan(FaultPlan {
        latency_ms: 300,
        ..Default::default()
    });
    let mut idle = Client::connect(&gw).await;
    idle.healthz().await;
    let mut busy = Client::connect(&gw).await;
    busy.send(&chat(&chat_json(false))).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    gw.signal_stop();
    assert!(idle.closed().await, "the idle connection was closed");
    let resp = busy.response(false).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.field("connection"), Some("close"));
    assert!(busy.closed().await);
    gw.stop().await;
}

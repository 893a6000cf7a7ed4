//! Unit tests of the request head's reading and the response's writing.

use http::{HeaderName, HeaderValue, Method, StatusCode};

use super::request::{known_name, Known};
use super::*;

fn parsed(head: &str) -> Parse {
    parse(head.as_bytes(), &mut Vec::new(), 1000)
}

#[test]
fn a_plain_request_is_served_here() {
    let head = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\
                X-Stainless-Lang: js\r\n\r\n{\"model\":12}";
    let mut fields = Vec::new();
    let Parse::Head(h) = parse(head.as_bytes(), &mut fields, 1000) else {
        panic!("not served here");
    };
    assert_eq!(h.len, head.len() - 12);
    assert_eq!(h.method, Method::POST);
    assert_eq!(&head[h.target.0..h.target.1], "/v1/chat/completions?x=1");
    assert_eq!(h.body, 12);
    let fields: Vec<_> = fields
        .iter()
        .map(|f| {
            (
                &head[f.name.0..f.name.1],
                f.known,
                &head[f.value.0..f.value.1],
            )
        })
        .collect();
    assert_eq!(
        fields,
        [
            ("Host", Some(Known::Host), "a"),
            ("Content-Length", Some(Known::ContentLength), "12"),
            ("X-Stainless-Lang", None, "js")
        ]
    );
    assert!(matches!(parsed("GET /healthz HTTP/1.1\r\n\r\n"), Parse::Head(h) if h.body == 0));
    assert!(matches!(
        parsed("GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n"),
        Parse::Head(h) if !h.close
    ));
    // Asked to close: served here, and closed after the answer.
    assert!(matches!(
        parsed("POST / HTTP/1.1\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n"),
        Parse::Head(h) if h.close
    ));
}

/// A field name clients send most is taken from the table, in any case, as `http` reads it;
/// another of the same length and first letter is not mistaken for it.
#[test]
fn known_field_names_read_as_http_reads_them() {
    for name in [
        "host",
        "accept",
        "user-agent",
        "content-type",
        "authorization",
        "content-length",
        "accept-encoding",
        "x-api-key",
        "anthropic-version",
        "anthropic-beta",
        "connection",
        "traceparent",
        "origin",
        "openai-beta",
        "x-switchyard-failover",
        "x-switchyard-timeout",
        "x-switchyard-session",
    ] {
        let mixed: String = (name.chars().enumerate())
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for spelled in [name.to_owned(), name.to_ascii_uppercase(), mixed] {
            let http = HeaderName::from_bytes(spelled.as_bytes()).unwrap();
            let known = known_name(spelled.as_bytes()).map(|known| known.name());
            assert_eq!(known, Some(&http), "{spelled}");
        }
    }
    for other in [
        "hast",
        "accept-language",
        "content-typo",
        "x-api-kex",
        "anthropic-versio",
        "x-stainless-lang",
        "x-switchyard-sessian",
        "x-switchyard-timeoat",
        "x-switchyard-xession",
        "",
    ] {
        assert_eq!(known_name(other.as_bytes()), None, "{other}");
    }
}

/// A target that is one of the client API's endpoints takes the `Uri` made for it once; any
/// other is parsed: either way the request's `Uri` is its target.
#[test]
fn the_uri_is_the_target_whether_known_or_not() {
    for target in [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/responses",
        "/v1/responses?x=1",
        "/v1/messages/count_tokens",
        "/v1/chat",
        "/healthz",
    ] {
        let head = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut fields = Vec::new();
        let Parse::Head(h) = parse(head.as_bytes(), &mut fields, 1000) else {
            panic!("not served here: {head}");
        };
        let bytes = Bytes::from(head.clone());
        let (uri, headers) = uri_and_fields(&mut fields, &h, &bytes).unwrap();
        assert_eq!(uri.path_and_query().map(|p| p.as_str()), Some(target));
        assert_eq!(headers["host"], "a");
    }
}

/// The fields the client API reads are the known ones it is given (a reader of another
/// field would find it missing from a request served here).
#[test]
fn the_fields_the_client_api_reads_are_known() {
    for name in crate::api::headers::READ {
        let known = known_name(name.as_str().as_bytes());
        assert!(known.is_some_and(Known::read_by_client_api), "{name}");
    }
    for name in [
        "accept",
        "user-agent",
        "content-type",
        "content-length",
        "accept-encoding",
        "connection",
    ] {
        let known = known_name(name.as_bytes()).unwrap();
        assert!(!known.read_by_client_api(), "{name}");
        assert!(!crate::api::headers::READ.iter().any(|r| r == name));
    }
}

/// A `POST` to the client API is given the fields it reads, in the order sent; any other
/// request (another method, another path) every field.
#[test]
fn a_client_api_request_gets_only_the_fields_it_reads() {
    let fields = "Host: a\r\nUser-Agent: OpenAI/Python 1.99.9\r\nX-Stainless-Lang: python\r\n\
                  Authorization: Bearer k\r\nAnthropic-Beta: b1\r\nanthropic-beta: b2\r\n\
                  X-Switchyard-Session: s\r\nContent-Length: 0\r\n";
    let read = |line: &str| {
        let head = format!("{line}\r\n{fields}\r\n");
        let mut parsed = Vec::new();
        let Parse::Head(h) = parse(head.as_bytes(), &mut parsed, 1000) else {
            panic!("not served here: {head}");
        };
        let (_, map) = uri_and_fields(&mut parsed, &h, &Bytes::from(head)).unwrap();
        map.iter()
            .map(|(n, v)| format!("{n}: {}", v.to_str().unwrap()))
            .collect::<Vec<_>>()
    };
    let api = [
        "host: a",
        "authorization: Bearer k",
        "anthropic-beta: b1",
        "anthropic-beta: b2",
        "x-switchyard-session: s",
    ];
    for line in [
        "POST /v1/chat/completions HTTP/1.1",
        "POST /v1/messages?beta=true HTTP/1.1",
        "POST /v1/responses HTTP/1.1",
    ] {
        assert_eq!(read(line), api, "{line}");
    }
    for line in [
        "GET /v1/responses HTTP/1.1",
        "POST /v1/messages/count_tokens HTTP/1.1",
        "POST /admin/targets/a/b/reset HTTP/1.1",
    ] {
        let all = read(line);
        assert_eq!(all.len(), 8, "{line}: {all:?}");
        assert!(
            all.contains(&"x-stainless-lang: python".to_owned()),
            "{line}"
        );
        assert!(
            all.contains(&"user-agent: OpenAI/Python 1.99.9".to_owned()),
            "{line}"
        );
    }
}

#[test]
fn a_head_not_yet_whole_is_partial() {
    assert!(matches!(
        parsed("POST /v1/messages HTTP/1.1\r\nHost"),
        Parse::Partial
    ));
    assert!(matches!(parsed("P"), Parse::Partial));
}

#[test]
fn what_this_path_does_not_serve_is_hyper_s() {
    for head in [
        "GET / HTTP/1.0\r\n\r\n",
        "HEAD /healthz HTTP/1.1\r\n\r\n",
        "CONNECT a:443 HTTP/1.1\r\n\r\n",
        "GET http://a/ HTTP/1.1\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
        "POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
        "GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: close, te\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: upgrade\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
        "\x16\x03\x01\x02\x00\x01",
    ] {
        assert!(matches!(parsed(head), Parse::Hyper), "{head:?}");
    }
}

#[test]
fn chunk_sizes_are_hex() {
    let mut out = [0; 18];
    assert_eq!(chunk_size(&mut out, 0), b"0\r\n");
    assert_eq!(chunk_size(&mut out, 255), b"ff\r\n");
    assert_eq!(chunk_size(&mut out, 0x1_0000), b"10000\r\n");
    assert_eq!(chunk_size(&mut out, usize::MAX), b"ffffffffffffffff\r\n");
}

#[test]
fn a_head_says_its_framing_and_a_date_once() {
    let mut resp = http::Response::new(());
    resp.headers_mut()
        .insert("content-length", HeaderValue::from_static("999"));
    resp.headers_mut()
        .insert("x-a", HeaderValue::from_static("b"));
    let (parts, ()) = resp.into_parts();
    let mut head = Vec::new();
    encode_head(&mut head, &parts, None, false, Some(5), false);
    let text = String::from_utf8(head.clone()).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\nx-a: b\r\ndate: "),
        "{text}"
    );
    assert!(
        text.ends_with(" GMT\r\ncontent-length: 5\r\n\r\n"),
        "{text}"
    );
    // A client API answer's gateway fields follow the response's own.
    let stamp = crate::api::Stamp::default();
    encode_head(&mut head, &parts, Some(stamp), false, Some(5), false);
    let text = String::from_utf8(head.clone()).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\nx-a: b\r\nx-switchyard-attempts: 0\r\ndate: "),
        "{text}"
    );
    encode_head(&mut head, &parts, None, false, None, true);
    let text = String::from_utf8(head.clone()).unwrap();
    assert!(
        text.ends_with("transfer-encoding: chunked\r\nconnection: close\r\n\r\n"),
        "{text}"
    );

    let mut resp = http::Response::new(());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp.headers_mut()
        .insert("date", HeaderValue::from_static("then"));
    let (parts, ()) = resp.into_parts();
    encode_head(&mut head, &parts, None, true, Some(0), false);
    assert_eq!(head, b"HTTP/1.1 204 No Content\r\ndate: then\r\n\r\n");
}

/// A connection's I/O that keeps the writes made on it.
struct Counted {
    io: tokio::io::DuplexStream,
    writes: Vec<String>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.writes.push(String::from_utf8_lossy(buf).into_owned());
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // One write of them all, as writev makes (the duplex takes one slice a call).
        let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.writes.push(String::from_utf8_lossy(&all).into_owned());
        Pin::new(&mut self.io).poll_write(cx, &all)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// `frames` written as the response to one request by a connection over [`Counted`]: the
/// bytes the client read and the writes made.
async fn respond_with(frames: Vec<Result<Frame<Bytes>, axum::Error>>) -> (String, Vec<String>) {
    let body = Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )));
    respond_with_body(body).await
}

/// [`respond_with`] a body.
async fn respond_with_body(body: Body) -> (String, Vec<String>) {
    let (io, mut client) = tokio::io::duplex(1 << 20);
    let mut conn = Conn {
        tcp: Counted {
            io,
            writes: Vec::new(),
        },
        room: Room::default(),
    };
    let resp = http::Response::new(super::super::Tracked {
        body,
        done: None,
        stamp: None,
    });
    let mut feed = Feed { left: 0, to: None };
    assert!(conn.respond(resp, true, &mut feed).await, "written whole");
    drop(conn.tcp.io);
    let mut read = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut client, &mut read)
        .await
        .unwrap();
    (read, conn.tcp.writes)
}

/// The frames ready together leave with the head in one write (an upstream read holds
/// several stream events), not one write each; what waits goes out as soon as the body has
/// nothing ready; a large frame is written from where it is, not copied.
#[tokio::test]
async fn the_frames_ready_together_leave_with_the_head_in_one_write() {
    let event = |i: usize| Ok(Frame::data(Bytes::from(format!("data: {i}\n\n"))));
    let expected: String = (0..12)
        .map(|i| {
            let event = format!("data: {i}\n\n");
            format!("{:x}\r\n{event}\r\n", event.len())
        })
        .chain(["0\r\n\r\n".to_owned()])
        .collect();
    let (read, writes) = respond_with((0..12).map(event).collect()).await;
    assert_eq!(writes.len(), 1, "{writes:?}");
    let (head, body) = read.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(body, expected);

    // The first event, then nothing ready for a while: the head and that event go out
    // before the rest is awaited.
    let mut frames = (0..12).map(event);
    let mut waited = false;
    let body = futures_util::stream::poll_fn(move |cx| {
        if !waited && frames.len() == 11 {
            waited = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(frames.next())
    });
    let (read, writes) = respond_with_body(Body::new(http_body_util::StreamBody::new(body))).await;
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes[0].ends_with("\r\n\r\n9\r\ndata: 0\n\n\r\n"),
        "{writes:?}"
    );
    assert!(writes[1].starts_with("9\r\ndata: 1\n\n\r\n"), "{writes:?}");
    assert_eq!(read.split_once("\r\n\r\n").unwrap().1, expected);

    let x = "x".repeat(COALESCE + 1);
    let frames = vec![
        event(0),
        event(1),
        Ok(Frame::data(Bytes::from(x.clone()))),
        event(2),
    ];
    let (read, writes) = respond_with(frames).await;
    // The head and the first two events with the big frame (from its own buffer); the last
    // event and the body's end.
    assert_eq!(
        writes.len(),
        2,
        "{:?}",
        writes.iter().map(String::len).collect::<Vec<_>>()
    );
    assert!(
        writes[0].ends_with(&format!(
            "\r\n\r\n9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n{:x}\r\n{x}\r\n",
            x.len()
        )),
        "{:.300}",
        writes[0]
    );
    assert_eq!(writes[1], "9\r\ndata: 2\n\n\r\n0\r\n\r\n");
    assert!(read.ends_with(&writes[1]));

    // A whole answer: its head and body in one write.
    let big = "y".repeat(COALESCE * 2);
    let (read, writes) = respond_with_body(Body::from(big.clone())).await;
    assert_eq!(writes.len(), 1);
    assert!(
        read.contains(&format!("content-length: {}\r\n", big.len())),
        "{read:.300}"
    );
    assert!(read.ends_with(&format!("\r\n\r\n{big}")));
}

/// `f` run on a thread of its own: with no spare rooms but those it keeps.
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

/// A closed connection's room (its read buffer, head and fields) serves the thread's next
/// connection, emptied; the last kept is taken first.
#[test]
fn a_closed_connection_s_room_serves_the_next_one() {
    on_own_thread(|| {
        let fresh = Room::take();
        assert_eq!(
            fresh.buf.capacity(),
            0,
            "the buffer is made at the first read"
        );
        assert!(fresh.head.capacity() >= HEAD_ROOM && fresh.fields.capacity() >= FIELDS_ROOM);

        let mut first = Room::take();
        first.buf.reserve(READ);
        first.buf.extend_from_slice(b"POST / HTTP/1.1\r\n");
        first.head.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        let first_at = first.buf.as_ptr();
        let mut second = Room::take();
        second.buf.reserve(READ);
        let second_at = second.buf.as_ptr();
        first.keep();
        second.keep();

        let again = Room::take();
        assert_eq!(again.buf.as_ptr(), second_at, "the last kept first");
        let again = Room::take();
        assert_eq!(again.buf.as_ptr(), first_at);
        assert!(again.buf.is_empty() && again.buf.capacity() >= READ);
        assert!(again.head.is_empty() && again.fields.is_empty());
        assert_eq!(Room::take().buf.capacity(), 0, "none left: a new room");
    });
}

/// What would hold memory a connection does not usually need is not kept: a buffer grown
/// for a large body, one whose bytes are all still held elsewhere (no room of its own), a
/// head grown for a stream's frames (it is shrunk), and more than `SPARES` rooms.
#[test]
fn only_a_usual_room_is_kept_and_only_so_many() {
    on_own_thread(|| {
        let mut grown = Room::take();
        grown.buf.reserve(SPARE_READ + 1);
        grown.keep();
        assert_eq!(Room::take().buf.capacity(), 0, "a grown buffer is let go");

        let mut streamed = Room::take();
        streamed.buf.reserve(READ);
        streamed.head.reserve(4 * COALESCE);
        streamed.keep();
        let kept = Room::take();
        assert!(kept.buf.capacity() >= READ, "kept");
        assert!((HEAD_ROOM..=SPARE_HEAD).contains(&kept.head.capacity()));
        drop(kept);

        let mut held = Room::take();
        held.buf.reserve(READ);
        held.buf.resize(held.buf.capacity(), b'x');
        let body = held.buf.split().freeze();
        held.keep();
        assert_eq!(Room::take().buf.capacity(), 0, "its bytes are still in use");
        drop(body);

        // Each its own allocation: all are made before any is kept.
        let rooms: Vec<Room> = (0..SPARES + 3)
            .map(|_| {
                let mut room = Room::take();
                room.buf.reserve(READ);
                room
            })
            .collect();
        rooms.into_iter().for_each(Room::keep);
        let kept = std::iter::from_fn(|| Some(Room::take()))
            .take_while(|r| r.buf.capacity() > 0)
            .count();
        assert_eq!(kept, SPARES);
    });
}

/// A connection that ends keeps its room for the next.
#[tokio::test]
async fn a_connection_that_ends_keeps_its_room() {
    let (io, _client) = tokio::io::duplex(64);
    let mut buf = BytesMut::with_capacity(READ);
    buf.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let at = buf.as_ptr();
    let conn = Conn {
        tcp: io,
        room: Room {
            buf,
            ..Room::default()
        },
    };
    assert!(matches!(
        conn.end(Ended::IdleTimeout),
        Outcome::Ended(Ended::IdleTimeout)
    ));
    assert_eq!(Room::take().buf.as_ptr(), at);
}

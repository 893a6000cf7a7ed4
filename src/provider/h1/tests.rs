//! The HTTP/1.1 client connection against scripted upstreams: what it writes, how it reads
//! every framing in pieces of every size, when it keeps a connection, and what it refuses.

use std::collections::VecDeque;

use super::script::Script;
use super::*;

fn post() -> Request<Bytes> {
    let mut req = Request::new(Bytes::from_static(b"{\"a\":1}"));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = Uri::from_static("http://up.example:8080/v1/chat?x=1");
    req
}

use http::Uri;

/// `answer` cut into pieces of `size` bytes.
fn pieces(answer: &[u8], size: usize) -> Vec<Vec<u8>> {
    answer.chunks(size).map(<[u8]>::to_vec).collect()
}

/// The response to one POST over `script`: its status, body and whether the connection
/// came back for another request.
async fn exchange(script: Script) -> Result<(u16, Vec<u8>, Option<Box<Conn<Script>>>), Error> {
    let resp = Conn::new(script)
        .send(&post(), &Defaults::default())
        .await
        .map_err(|e| e.error)?;
    let status = resp.status.as_u16();
    let mut body = resp.body;
    let mut read = Vec::new();
    while let Some(piece) = poll_fn(|cx| body.poll_data(cx)).await {
        read.extend_from_slice(&piece?);
    }
    assert!(body.is_end_stream());
    Ok((status, read, body.take_idle()))
}

/// The same answer read in pieces of every size from 1 byte to all of it at once, each
/// also with a pause between pieces: all read alike.
async fn read_every_way(answer: &[u8]) -> Result<(u16, Vec<u8>, bool), Error> {
    let whole = exchange(Script::reading([answer.to_vec()])).await;
    let whole = whole.map(|(status, body, idle)| (status, body, idle.is_some()));
    for size in 1..answer.len() {
        for pause in [false, true] {
            let mut reads: VecDeque<_> = VecDeque::new();
            for piece in pieces(answer, size) {
                if pause {
                    reads.push_back(None);
                }
                reads.push_back(Some(piece));
            }
            let script = Script {
                reads,
                written: Vec::new(),
            };
            let got = exchange(script).await;
            let got = got.map(|(status, body, idle)| (status, body, idle.is_some()));
            assert_eq!(
                format!("{got:?}"),
                format!("{whole:?}"),
                "pieces of {size} (pause {pause})"
            );
        }
    }
    whole
}

/// What sending `req` with `defaults` writes.
async fn written(req: &Request<Bytes>, defaults: &Defaults) -> String {
    let mut conn = Conn::new(Script::default());
    conn.encode_head(req, defaults);
    assert!(conn.write_all(req.body(), false).await.unwrap().is_none());
    String::from_utf8(conn.io.written).unwrap()
}

#[tokio::test]
async fn a_request_is_written_in_origin_form_with_its_length() {
    let mut req = post();
    req.headers_mut()
        .insert("authorization", HeaderValue::from_static("Bearer k"));
    // The client's own framing headers are not ours to send on.
    req.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from_static("999"));
    req.headers_mut()
        .insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    assert_eq!(
        written(&req, &Defaults::default()).await,
        "POST /v1/chat?x=1 HTTP/1.1\r\nhost: up.example:8080\r\nauthorization: Bearer k\r\n\
         content-length: 7\r\n\r\n{\"a\":1}"
    );
    // A Host given is the one sent.
    let mut req = post();
    req.headers_mut()
        .insert(HOST, HeaderValue::from_static("other"));
    *req.uri_mut() = Uri::from_static("/");
    *req.body_mut() = Bytes::new();
    assert_eq!(
        written(&req, &Defaults::default()).await,
        "POST / HTTP/1.1\r\nhost: other\r\ncontent-length: 0\r\n\r\n"
    );
}

#[tokio::test]
async fn defaults_go_with_a_request_that_has_none_of_their_names() {
    let mut key = HeaderValue::from_static("Bearer sk-secret");
    key.set_sensitive(true);
    let defaults = Defaults::new(vec![
        (HOST, HeaderValue::from_static("api.example")),
        (http::header::AUTHORIZATION, key),
        (
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        ),
    ]);
    // All of them, and the host is not taken from the URI.
    assert_eq!(
        written(&post(), &defaults).await,
        "POST /v1/chat?x=1 HTTP/1.1\r\nhost: api.example\r\nauthorization: Bearer sk-secret\r\n\
         anthropic-version: 2023-06-01\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
    );
    // A request's own header of a default's name replaces it; the others still go.
    let mut req = post();
    req.headers_mut()
        .append("anthropic-version", HeaderValue::from_static("2024-01-01"));
    req.headers_mut()
        .append("x-other", HeaderValue::from_static("1"));
    assert_eq!(
        written(&req, &defaults).await,
        "POST /v1/chat?x=1 HTTP/1.1\r\nhost: api.example\r\nauthorization: Bearer sk-secret\r\n\
         anthropic-version: 2024-01-01\r\nx-other: 1\r\ncontent-length: 7\r\n\r\n{\"a\":1}"
    );
    // Their values hold credentials: never shown, nor a connection's last head.
    let shown = format!("{defaults:?}");
    assert_eq!(shown, r#"["host", "authorization", "anthropic-version"]"#);
    let mut conn = Conn::new(Script::default());
    conn.encode_head(&post(), &defaults);
    assert_eq!(
        format!("{conn:?}"),
        format!("Conn {{ buffered: 0, read_size: {FIRST_READ}, .. }}")
    );
}

/// Every framing, read in pieces of any size: its status, its body and whether the connection
/// is kept.
#[tokio::test]
async fn every_framing_reads_alike_in_any_pieces() {
    let cases = [
        (
            "a known length: the connection kept",
            &b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 11\r\n\r\n\
              {\"ok\":true}"[..],
            200,
            &b"{\"ok\":true}"[..],
            true,
        ),
        (
            "chunks with extensions and trailers",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
              5;name=v\r\nhello\r\n1\r\n \r\nA \r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n",
            200,
            b"hello 0123456789",
            true,
        ),
        (
            "no length: the body ends with the connection",
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it",
            200,
            b"all of it",
            false,
        ),
        (
            "informational heads skipped",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: <x>\r\n\r\n\
              HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
            201,
            b"ok",
            true,
        ),
    ];
    for (case, answer, status, body, kept) in cases {
        let read = read_every_way(answer).await.unwrap();
        assert_eq!(read, (status, body.to_vec(), kept), "{case}");
    }
}

#[tokio::test]
async fn connections_are_kept_only_when_the_upstream_means_to() {
    let kept = |answer: &'static [u8]| async move {
        exchange(Script::reading([answer.to_vec()]))
            .await
            .unwrap()
            .2
            .is_some()
    };
    assert!(!kept(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n").await);
    assert!(!kept(b"HTTP/1.1 200 OK\r\nConnection: x, Close\r\ncontent-length: 0\r\n\r\n").await);
    assert!(!kept(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").await);
    assert!(kept(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n").await);
    // Something after the body: the connection is out of step.
    assert!(!kept(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nxy").await);
    // Both framings: chunked wins, and the connection is not trusted again.
    let (_, body, idle) = exchange(Script::reading([
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\
            transfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            .to_vec(),
    ]))
    .await
    .unwrap();
    assert_eq!((&body[..], idle.is_some()), (&b"ok"[..], false));
}

#[tokio::test]
async fn no_body_is_read_after_204_304_or_a_head_request() {
    for answer in [
        &b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n"[..],
        b"HTTP/1.1 304 Not Modified\r\ntransfer-encoding: chunked\r\n\r\n",
    ] {
        let (_, body, idle) = exchange(Script::reading([answer.to_vec()])).await.unwrap();
        assert_eq!((body.len(), idle.is_some()), (0, true));
    }
    let mut req = post();
    *req.method_mut() = Method::HEAD;
    *req.body_mut() = Bytes::new();
    let script = Script::reading([b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_vec()]);
    let resp = Conn::new(script)
        .send(&req, &Defaults::default())
        .await
        .unwrap();
    let mut body = resp.body;
    assert!(poll_fn(|cx| body.poll_data(cx)).await.is_none());
    assert!(body.take_idle().is_some());
}

#[tokio::test]
async fn the_body_s_length_is_known_from_its_head() {
    let script = Script::reading([b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_vec()]);
    let resp = Conn::new(script)
        .send(&post(), &Defaults::default())
        .await
        .unwrap();
    assert_eq!(resp.body.exact_len(), Some(5));
    let script =
        Script::reading([b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()]);
    let resp = Conn::new(script)
        .send(&post(), &Defaults::default())
        .await
        .unwrap();
    assert_eq!(resp.body.exact_len(), None);
}

/// The pieces `reads` (a chunked answer) give, each piece's bytes and whether the body had
/// ended after it; then the error the body ended with, if any.
async fn chunked_pieces(reads: &[&[u8]]) -> (Vec<(String, bool)>, Option<String>) {
    let mut all = vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()];
    all.extend(reads.iter().map(|r| r.to_vec()));
    let mut body = Conn::new(Script::reading(all))
        .send(&post(), &Defaults::default())
        .await
        .unwrap()
        .body;
    let mut pieces = Vec::new();
    while let Some(piece) = poll_fn(|cx| body.poll_data(cx)).await {
        match piece {
            Ok(p) => pieces.push((String::from_utf8(p.to_vec()).unwrap(), body.is_end_stream())),
            Err(e) => return (pieces, Some(e.to_string())),
        }
    }
    (pieces, None)
}

/// The chunks one read brings go on as one piece (a stream's events, a chunk each, through
/// every layer once); what is not read yet is not waited for, and an error after them is
/// reported once they are out.
#[tokio::test]
async fn the_chunks_read_together_are_one_piece() {
    let piece = |s: &str, ended| (s.to_owned(), ended);
    // Three chunks and the body's end in one read: one piece, the body ended with it.
    let (pieces, error) = chunked_pieces(&[b"2\r\nab\r\n3\r\ncde\r\n1\r\nf\r\n0\r\n\r\n"]).await;
    assert_eq!((pieces, error), (vec![piece("abcdef", true)], None));
    // A chunk read in part joins what came before it; its rest is the next piece.
    let (pieces, error) = chunked_pieces(&[b"2\r\nab\r\n4\r\ncd", b"ef\r\n0\r\n\r\n"]).await;
    assert_eq!(
        (pieces, error),
        (vec![piece("abcd", false), piece("ef", true)], None)
    );
    // A chunk-size line read in part, or trailers: the piece ends before them.
    let (pieces, error) = chunked_pieces(&[
        b"2\r\nab\r\n1",
        b"0\r\n0123456789abcdef\r\n0\r\nx: 1\r",
        b"\n\r\n",
    ])
    .await;
    assert_eq!(
        (pieces, error),
        (
            vec![piece("ab", false), piece("0123456789abcdef", false)],
            None
        )
    );
    // A bad chunk after good ones: they go on, then the error.
    let (pieces, error) = chunked_pieces(&[b"2\r\nab\r\nzz\r\ncd\r\n"]).await;
    assert_eq!(pieces, vec![piece("ab", false)]);
    assert!(error.is_some_and(|e| e.contains("chunk size")));
}

/// The error reading `answer` (in one piece).
async fn refusal(answer: &[u8]) -> String {
    match exchange(Script::reading([answer.to_vec()])).await {
        Ok(read) => panic!("read: {read:?}"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn what_the_upstream_cannot_send_is_an_error() {
    let closed = "upstream closed the connection before";
    let invalid = "upstream sent an invalid response:";
    for (answer, kind, why) in [
        (&b""[..], closed, "a response"),
        (
            b"HTTP/1.1 200 OK\r\n",
            closed,
            "the end of the response head",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab",
            closed,
            "the end of the body",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab",
            closed,
            "the end of a chunk",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n",
            closed,
            "the end of a chunked body",
        ),
        (b"SSH-2.0-OpenSSH\r\n\r\n", invalid, "not HTTP/1"),
        (
            b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
            invalid,
            "a malformed head",
        ),
        (
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            invalid,
            "an unasked protocol switch",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1x\r\n\r\n",
            invalid,
            "a content-length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            invalid,
            "a content-length",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n",
            invalid,
            "content-lengths that differ",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            invalid,
            "a chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n11111111111111111\r\n",
            invalid,
            "a chunk size",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nabc",
            invalid,
            "a chunk not ended by CRLF",
        ),
    ] {
        assert_eq!(refusal(answer).await, format!("{kind} {why}"), "{answer:?}");
    }
    // What an upstream could make it hold.
    let mut many = b"HTTP/1.1 200 OK\r\n".to_vec();
    many.extend(b"x: y\r\n".repeat(MAX_FIELDS + 1));
    many.extend(b"\r\n");
    assert_eq!(
        refusal(&many).await,
        format!("{invalid} over 128 header fields")
    );
    let mut long = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
    long.resize(MAX_HEAD + 10, b'y');
    assert_eq!(
        refusal(&long).await,
        format!("{invalid} a head over 64 KiB")
    );
    let mut line = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;".to_vec();
    line.resize(line.len() + 5000, b'e');
    assert_eq!(
        refusal(&line).await,
        format!("{invalid} a chunk-size line over 4 KiB")
    );
    let mut trailers = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n".to_vec();
    trailers.extend(b"x-t: 1234567890\r\n".repeat(1100));
    assert_eq!(
        refusal(&trailers).await,
        format!("{invalid} trailers over 16 KiB")
    );
}

#[tokio::test]
async fn an_idle_connection_is_open_until_its_upstream_closes_or_speaks() {
    // Nothing to read yet: open.
    let mut conn = Conn::new(Script {
        reads: VecDeque::from([None]),
        written: Vec::new(),
    });
    assert!(conn.is_open());
    // Closed.
    assert!(!Conn::new(Script::default()).is_open());
    // Sent something unasked.
    assert!(!Conn::new(Script::reading([b"HTTP/1.1 408 x\r\n\r\n".to_vec()])).is_open());
}

#[tokio::test]
async fn a_kept_connection_takes_the_next_request() {
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n";
    let script = Script::reading([[&answer[..], b"a"].concat(), [&answer[..], b"b"].concat()]);
    let (_, first, idle) = exchange(script).await.unwrap();
    let conn = idle.unwrap();
    let resp = conn.send(&post(), &Defaults::default()).await.unwrap();
    let mut body = resp.body;
    let second = poll_fn(|cx| body.poll_data(cx)).await.unwrap().unwrap();
    assert_eq!((&first[..], &second[..]), (&b"a"[..], &b"b"[..]));
    assert!(poll_fn(|cx| body.poll_data(cx)).await.is_none());
    let conn = body.take_idle().unwrap();
    let written = String::from_utf8(conn.io.written).unwrap();
    assert_eq!(written.matches("POST /v1/chat?x=1 HTTP/1.1\r\n").count(), 2);
}

#[tokio::test]
async fn the_head_s_fields_are_a_map_when_asked() {
    let answer = b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\
        Retry-After: 3\r\nX-Dup: a\r\nx-dup: b\r\ncontent-length: 2\r\n\r\n{}";
    let script = Script::reading([answer.to_vec()]);
    let resp = Conn::new(script)
        .send(&post(), &Defaults::default())
        .await
        .unwrap();
    assert_eq!(resp.status, 429);
    assert_eq!(resp.head.content_type(), Some(&b"application/json"[..]));
    let map = resp.head.map();
    assert_eq!(map.len(), 5);
    assert_eq!(map["retry-after"], "3");
    assert_eq!(map["content-type"], "application/json");
    let dup: Vec<_> = map.get_all("x-dup").iter().collect();
    assert_eq!(dup, ["a", "b"]);
    // No content-type: none.
    let script = Script::reading([b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()]);
    let resp = Conn::new(script)
        .send(&post(), &Defaults::default())
        .await
        .unwrap();
    assert_eq!(resp.head.content_type(), None);
}

/// An upstream that answers a large request before reading its body, and then reads no more
/// of it (as servers refusing a body do): its answer is taken while the body is still being
/// written, the rest is not sent, and the connection is not kept.
#[tokio::test(start_paused = true)]
async fn an_answer_sent_before_the_body_was_read_is_taken() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (client, mut upstream) = tokio::io::duplex(4096);
    let serve = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut piece = [0; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = upstream.read(&mut piece).await.unwrap();
            seen.extend_from_slice(&piece[..n]);
        }
        upstream
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 5\r\n\r\nlarge")
            .await
            .unwrap();
        // Held open, never read again.
        std::future::pending::<()>().await;
    });
    let mut req = post();
    *req.body_mut() = Bytes::from(vec![b'x'; 1 << 20]);
    let defaults = Defaults::default();
    let send = Conn::new(client).send(&req, &defaults);
    let resp = tokio::time::timeout(std::time::Duration::from_secs(60), send)
        .await
        .expect("the answer is taken without waiting for the body to be read")
        .unwrap();
    assert_eq!(resp.status, 413);
    let mut body = resp.body;
    let data = poll_fn(|cx| body.poll_data(cx)).await.unwrap().unwrap();
    assert_eq!(&data[..], b"large");
    assert!(poll_fn(|cx| body.poll_data(cx)).await.is_none());
    assert!(body.take_idle().is_none(), "half a request was sent on it");
    serve.abort();
}

//! An HTTP/1.1 client connection driven by the request that uses it.
//!
//! hyper's client connection is a task of its own that the request talks to through a
//! channel: the request is handed over, the task writes it, reads the head, and hands the
//! response and each body frame back, waking the request's task every time. An upstream call
//! here is one request and one response on a connection that nothing else uses meanwhile, so
//! the request's own task writes the request and reads the answer: no task, channel or
//! hand-off (together ~14,000 of the gateway's ~57,000 instructions per request,
//! `bench/instructions`). HTTP/2 stays hyper's (a multiplexed connection needs its task).
//!
//! What it speaks: a request with a body of known length (`content-length`); a response
//! framed by `content-length`, `transfer-encoding: chunked` or the connection's close, `1xx`
//! heads skipped, no body after `HEAD`, `204` and `304`. A connection is reused when the
//! response was HTTP/1.1 without `connection: close`, was framed by its length or chunks, and
//! was read to its end with nothing after it. Limits on what an upstream can make it hold: a
//! head of 64 KiB and 128 fields, a chunk-size line of 4 KiB, trailers of 16 KiB (read and
//! dropped, as hyper's client did).

mod body;
#[cfg(any(test, fuzzing))]
mod script;
#[cfg(test)]
mod tests;

#[cfg(fuzzing)]
pub use self::script::fuzz_response;

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use tokio::io::{AsyncRead, AsyncWrite};

pub(crate) use self::body::Body;
use self::body::Framing;

/// The most a response head (status line and fields) may take.
const MAX_HEAD: usize = 64 * 1024;
/// The most fields a response head may have.
const MAX_FIELDS: usize = 128;
/// The first read's size; doubled while reads fill it, up to `MAX_READ`, halved (down to this)
/// after a read of less than a quarter of it.
const FIRST_READ: usize = 8 * 1024;
const MAX_READ: usize = 256 * 1024;
/// A read is made into the buffer's room when at least this much is left, else into new room.
const MIN_ROOM: usize = 1024;

/// Why a call on a connection failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("upstream connection: {0}")]
    Io(#[from] io::Error),
    #[error("upstream closed the connection before {0}")]
    Closed(&'static str),
    #[error("upstream sent an invalid response: {0}")]
    Invalid(&'static str),
}

/// A failed request write: `written` when some of it may have reached the upstream (it is
/// not sent again).
#[derive(Debug)]
pub(crate) struct WriteError {
    pub(crate) error: Error,
    pub(crate) written: bool,
}

/// One HTTP/1.1 connection over `T`, between calls.
pub(crate) struct Conn<T> {
    io: T,
    /// Bytes read and not yet used; its spare room takes the next read.
    buf: BytesMut,
    /// The request head being written, kept for its allocation.
    head: Vec<u8>,
    read_size: usize,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    /// Boxed: a connection moves with each call, into its response's body and back to a
    /// pool, and over TLS it is over 1 KiB.
    pub(crate) fn new(io: T) -> Box<Conn<T>> {
        Box::new(Conn {
            io,
            buf: BytesMut::new(),
            head: Vec::new(),
            read_size: FIRST_READ,
        })
    }

    /// Whether an idle connection can take a request: the upstream has neither closed it nor
    /// sent anything unasked. Never waits; costs no system call when the last read emptied
    /// the socket (tokio remembers it was drained).
    pub(crate) fn is_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        let mut probe = tokio::io::ReadBuf::new(&mut probe);
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Send `req` (its URI in origin form or absolute: the path and query are sent; a missing
    /// `Host` is taken from its authority) and read the response head. The body is read from
    /// the response, which owns the connection until then.
    pub(crate) async fn send(
        mut self: Box<Self>,
        req: &Request<Bytes>,
        defaults: &Defaults,
    ) -> Result<Response<Body<T>>, WriteError> {
        self.encode_head(req, defaults);
        let wrote = self.write_all(req.body()).await;
        // The head holds credentials: kept for its allocation only.
        self.head.clear();
        wrote?;
        let written = |error| WriteError {
            error,
            written: true,
        };
        let head = self.read_head().await.map_err(written)?;
        head.into_response(self, req.method() == Method::HEAD)
            .map_err(written)
    }

    fn encode_head(&mut self, req: &Request<Bytes>, defaults: &Defaults) {
        let head = &mut self.head;
        head.clear();
        head.extend_from_slice(req.method().as_str().as_bytes());
        head.push(b' ');
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        head.extend_from_slice(if path.is_empty() { "/" } else { path }.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        let headers = req.headers();
        defaults.encode(head, headers);
        if !headers.contains_key(HOST) && !defaults.has(&HOST) {
            if let Some(authority) = req.uri().authority() {
                field(head, "host", authority.as_str().as_bytes());
            }
        }
        for (name, value) in headers {
            // The body's length is ours to say.
            if name != CONTENT_LENGTH && name != TRANSFER_ENCODING {
                field(head, name.as_str(), value.as_bytes());
            }
        }
        let len = req.body().len();
        if len > 0 || !matches!(*req.method(), Method::GET | Method::HEAD) {
            field(
                head,
                "content-length",
                itoa::Buffer::new().format(len).as_bytes(),
            );
        }
        head.extend_from_slice(b"\r\n");
    }

    /// Write the encoded head and `body` (in one system call when they fit the socket).
    async fn write_all(&mut self, body: &[u8]) -> Result<(), WriteError> {
        let (mut head_at, mut body_at) = (0, 0);
        let wrote = poll_fn(|cx| {
            while head_at < self.head.len() || body_at < body.len() {
                let bufs = [
                    IoSlice::new(&self.head[head_at..]),
                    IoSlice::new(&body[body_at..]),
                ];
                let n = match Pin::new(&mut self.io).poll_write_vectored(cx, &bufs) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero)))
                    }
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                };
                let to_head = n.min(self.head.len() - head_at);
                head_at += to_head;
                body_at += n - to_head;
            }
            Pin::new(&mut self.io).poll_flush(cx)
        })
        .await;
        wrote.map_err(|e| WriteError {
            error: Error::Io(e),
            written: head_at > 0 || body_at > 0,
        })
    }

    /// Read until a final response head (`1xx` heads skipped) has been parsed.
    async fn read_head(&mut self) -> Result<Head, Error> {
        poll_fn(|cx| loop {
            if !self.buf.is_empty() {
                match parse_head(&mut self.buf)? {
                    Some(head) if head.status.is_informational() => {
                        if head.status == StatusCode::SWITCHING_PROTOCOLS {
                            return Poll::Ready(Err(Error::Invalid("an unasked protocol switch")));
                        }
                        continue;
                    }
                    Some(head) => return Poll::Ready(Ok(head)),
                    None if self.buf.len() >= MAX_HEAD => {
                        return Poll::Ready(Err(Error::Invalid("a head over 64 KiB")))
                    }
                    None => {}
                }
            }
            let empty = self.buf.is_empty();
            if ready!(self.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(Error::Closed(if empty {
                    "a response"
                } else {
                    "the end of the response head"
                })));
            }
        })
        .await
    }

    /// Read what the upstream sent into the buffer: the count read, 0 at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < MIN_ROOM {
            self.buf.reserve(self.read_size);
        }
        let room = self.buf.capacity() - self.buf.len();
        let n = ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.buf
        ))?;
        if n == room && self.read_size < MAX_READ {
            self.read_size *= 2;
        } else if n < self.read_size / 4 && self.read_size > FIRST_READ {
            self.read_size /= 2;
        }
        Poll::Ready(Ok(n))
    }
}

/// Headers every request on a client carries unless it has its own of the same name (a
/// provider's `host`, credential, `content-type`...): encoded once, so that a call builds no
/// map of them and writes them in one copy.
#[derive(Default)]
pub(crate) struct Defaults {
    fields: Vec<(HeaderName, HeaderValue)>,
    /// `fields` as a head has them.
    encoded: Vec<u8>,
}

impl Defaults {
    pub(crate) fn new(fields: Vec<(HeaderName, HeaderValue)>) -> Defaults {
        let mut encoded = Vec::new();
        for (name, value) in &fields {
            field(&mut encoded, name.as_str(), value.as_bytes());
        }
        Defaults { fields, encoded }
    }

    pub(crate) fn fields(&self) -> &[(HeaderName, HeaderValue)] {
        &self.fields
    }

    fn has(&self, name: &http::HeaderName) -> bool {
        self.fields.iter().any(|(n, _)| n == name)
    }

    /// Those of them `headers` has none of, onto a head.
    fn encode(&self, head: &mut Vec<u8>, headers: &HeaderMap) {
        if headers.is_empty() || !self.fields.iter().any(|(n, _)| headers.contains_key(n)) {
            head.extend_from_slice(&self.encoded);
            return;
        }
        for (name, value) in &self.fields {
            if !headers.contains_key(name) {
                field(head, name.as_str(), value.as_bytes());
            }
        }
    }
}

/// Names only: the values hold credentials.
impl std::fmt::Debug for Defaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.fields.iter().map(|(name, _)| name))
            .finish()
    }
}

/// What was sent and read is not shown: a request head holds credentials.
impl<T> std::fmt::Debug for Conn<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("buffered", &self.buf.len())
            .field("read_size", &self.read_size)
            .finish_non_exhaustive()
    }
}

/// `name: value\r\n` onto a head.
fn field(head: &mut Vec<u8>, name: &str, value: &[u8]) {
    head.extend_from_slice(name.as_bytes());
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// A parsed response head.
#[derive(Debug)]
struct Head {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
}

/// Parse a response head from the start of `buf`, taking it out of `buf`: `None` while it is
/// incomplete. Field values share the head's bytes (no copy per field).
fn parse_head(buf: &mut BytesMut) -> Result<Option<Head>, Error> {
    // Where each field's name and value lie in `buf`, to be taken after the parse's borrow.
    let mut spans = [(0u32, 0u32, 0u32, 0u32); MAX_FIELDS];
    let (len, code, minor, fields) = {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
        let mut resp = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut resp,
            buf,
            &mut fields,
        );
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(Error::Invalid("over 128 header fields"))
            }
            Err(httparse::Error::Version) => return Err(Error::Invalid("not HTTP/1")),
            Err(_) => return Err(Error::Invalid("a malformed head")),
        };
        let base = buf.as_ptr() as usize;
        let at = |s: &[u8]| (s.as_ptr() as usize - base) as u32;
        for (span, f) in spans.iter_mut().zip(resp.headers.iter()) {
            *span = (
                at(f.name.as_bytes()),
                f.name.len() as u32,
                at(f.value),
                f.value.len() as u32,
            );
        }
        let code = resp.code.unwrap_or(0);
        (len, code, resp.version.unwrap_or(1), resp.headers.len())
    };
    let head = buf.split_to(len).freeze();
    let status = StatusCode::from_u16(code).map_err(|_| Error::Invalid("a status code"))?;
    let mut headers = HeaderMap::with_capacity(fields);
    for &(name_at, name_len, value_at, value_len) in &spans[..fields] {
        let name = &head[name_at as usize..(name_at + name_len) as usize];
        let name =
            HeaderName::from_bytes(name).map_err(|_| Error::Invalid("a header field name"))?;
        let value = head.slice(value_at as usize..(value_at + value_len) as usize);
        let value = HeaderValue::from_maybe_shared(value)
            .map_err(|_| Error::Invalid("a header field value"))?;
        headers.append(name, value);
    }
    let version = if minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    Ok(Some(Head {
        status,
        version,
        headers,
    }))
}

impl Head {
    /// The response with its body, framed as its head says (RFC 9112 section 6.3).
    fn into_response<T>(
        self,
        conn: Box<Conn<T>>,
        head_only: bool,
    ) -> Result<Response<Body<T>>, Error> {
        let mut reuse = self.version == Version::HTTP_11;
        for value in self.headers.get_all(CONNECTION) {
            for token in value.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    reuse = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive")
                    && self.version == Version::HTTP_10
                {
                    reuse = true;
                }
            }
        }
        let status = self.status;
        let framing = if head_only
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            Framing::Length(0)
        } else if self.headers.contains_key(TRANSFER_ENCODING) {
            if self.headers.contains_key(CONTENT_LENGTH) {
                // Both: the length is ignored, and the connection not trusted again.
                reuse = false;
            }
            if chunked_last(&self.headers) {
                Framing::chunked()
            } else {
                reuse = false;
                Framing::Close
            }
        } else if let Some(len) = content_length(&self.headers)? {
            Framing::Length(len)
        } else {
            reuse = false;
            Framing::Close
        };
        let mut resp = Response::new(Body::new(conn, framing, reuse));
        *resp.status_mut() = status;
        *resp.version_mut() = self.version;
        *resp.headers_mut() = self.headers;
        Ok(resp)
    }
}

/// Whether `chunked` is the last transfer coding.
fn chunked_last(headers: &HeaderMap) -> bool {
    let last = headers.get_all(TRANSFER_ENCODING).iter().next_back();
    last.and_then(|v| v.as_bytes().rsplit(|&b| b == b',').next())
        .is_some_and(|coding| coding.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// The `content-length`: every value (and every comma-separated one) the same number.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, Error> {
    let mut len = None;
    for value in headers.get_all(CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(Error::Invalid("a content-length"));
            }
            let n = part.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            if len.is_some_and(|l| l != n) {
                return Err(Error::Invalid("content-lengths that differ"));
            }
            len = Some(n);
        }
    }
    Ok(len)
}

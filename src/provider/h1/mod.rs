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
mod head;
#[cfg(any(test, fuzzing))]
mod script;
#[cfg(test)]
mod tests;

#[cfg(fuzzing)]
pub use self::script::fuzz_response;

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use http::header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};

pub(crate) use self::body::Body;
pub(crate) use self::head::RawHead;

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
    /// `Host` is taken from its authority) with the `defaults` it has none of, and read the
    /// response head. The body is read from the answer, which owns the connection until then.
    pub(crate) async fn send(
        mut self: Box<Self>,
        req: &Request<Bytes>,
        defaults: &Defaults,
    ) -> Result<Answer<T>, WriteError> {
        self.encode_head(req, defaults);
        let head_only = req.method() == Method::HEAD;
        let wrote = self.write_all(req.body(), head_only).await;
        // The head holds credentials: kept for its allocation only.
        self.head.clear();
        let parsed = match wrote? {
            // Answered before the whole request was sent: the upstream may not read the rest,
            // and the connection cannot take another request.
            Some(parsed) => head::Parsed {
                reuse: false,
                ..parsed
            },
            None => poll_fn(|cx| self.poll_head(cx, head_only))
                .await
                .map_err(|error| WriteError {
                    error,
                    written: true,
                })?,
        };
        Ok(Answer {
            status: parsed.status,
            head: parsed.head,
            body: Body::new(self, parsed.framing, parsed.reuse),
        })
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
    ///
    /// While the socket takes no more, what the upstream sent is read: an upstream may answer
    /// before it has read the whole body (a `413`, a `401`) and then read no more of it, and a
    /// request that waited for the socket to drain would wait for its deadline. Such an
    /// answer's head is returned, the rest of the body unsent.
    async fn write_all(
        &mut self,
        body: &[u8],
        head_only: bool,
    ) -> Result<Option<head::Parsed>, WriteError> {
        let (mut head_at, mut body_at) = (0, 0);
        let wrote = poll_fn(|cx| {
            while head_at < self.head.len() || body_at < body.len() {
                let bufs = [
                    IoSlice::new(&self.head[head_at..]),
                    IoSlice::new(&body[body_at..]),
                ];
                let n = match Pin::new(&mut self.io).poll_write_vectored(cx, &bufs) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(Error::Io(io::ErrorKind::WriteZero.into())))
                    }
                    Poll::Ready(Ok(n)) => n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::Io(e))),
                    Poll::Pending => return self.poll_head(cx, head_only).map(|h| h.map(Some)),
                };
                let to_head = n.min(self.head.len() - head_at);
                head_at += to_head;
                body_at += n - to_head;
            }
            Pin::new(&mut self.io)
                .poll_flush(cx)
                .map(|flushed| flushed.map(|()| None).map_err(Error::Io))
        })
        .await;
        wrote.map_err(|error| WriteError {
            error,
            written: head_at > 0 || body_at > 0,
        })
    }

    /// Read until a final response head (`1xx` heads skipped) has been parsed: after the
    /// request was written, or, while it is still being written, an answer sent early. An
    /// upstream that closes the connection before it is complete is an error.
    fn poll_head(
        &mut self,
        cx: &mut Context<'_>,
        head_only: bool,
    ) -> Poll<Result<head::Parsed, Error>> {
        loop {
            if let Some(head) = self.parsed_head(head_only)? {
                return Poll::Ready(Ok(head));
            }
            let empty = self.buf.is_empty();
            if ready!(self.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(Error::Closed(if empty {
                    "a response"
                } else {
                    "the end of the response head"
                })));
            }
        }
    }

    /// A final head parsed from the bytes read so far (`1xx` heads taken out and skipped).
    fn parsed_head(&mut self, head_only: bool) -> Result<Option<head::Parsed>, Error> {
        while !self.buf.is_empty() {
            match head::parse(&mut self.buf, head_only)? {
                Some(head) if head.status.is_informational() => {
                    if head.status == StatusCode::SWITCHING_PROTOCOLS {
                        return Err(Error::Invalid("an unasked protocol switch"));
                    }
                }
                Some(head) => return Ok(Some(head)),
                None if self.buf.len() >= MAX_HEAD => {
                    return Err(Error::Invalid("a head over 64 KiB"))
                }
                None => break,
            }
        }
        Ok(None)
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

    fn has(&self, name: &HeaderName) -> bool {
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

/// An upstream's answer: its status, its head as it came and its body (which holds the
/// connection).
#[derive(Debug)]
pub(crate) struct Answer<T> {
    pub(crate) status: StatusCode,
    pub(crate) head: RawHead,
    pub(crate) body: Body<T>,
}

//! A client connection's HTTP/1.1, served by the connection's own task.
//!
//! hyper's server connection is a dispatcher between the socket and the service: it parses
//! the head, hands the body over a channel, polls the service's future and the response body
//! from its own state machine and buffers what it writes (~14,000 of the gateway's ~42,000
//! instructions for a whole answer, `bench/instructions`). The common request here is a head
//! with a body of known length, most often arrived whole with it, and one response at a time:
//! this path reads it, calls the service, and writes the answer from the connection's task
//! with no channel (a body that has not arrived whole is fed to the service through one) and
//! the response head and a whole body in one system call.
//!
//! What it serves: HTTP/1.1 requests in origin form whose body, if any, is framed by one
//! `content-length` no larger than `max_body`, without `expect`, `upgrade`, or `connection`
//! other than `keep-alive` or `close` (answered, then closed); a head of at most
//! [`MAX_HEAD`] and [`MAX_FIELDS`] fields.
//! Anything else (HTTP/1.0, chunked bodies, `expect: 100-continue`, `HEAD`, `CONNECT`, a head
//! that does not parse, HTTP/2's preface) hands the connection to hyper from that request on,
//! with the bytes already read: hyper's answers to what it refuses stay what they were.
//!
//! Its bounds are the connection's ([`super`]): `header_timeout` from a head's first byte,
//! `idle_timeout` between requests, the drain; `body_timeout` is the service's. A client that
//! closes its connection while its request is in flight has its request dropped (as hyper
//! does without half-close): the request's stream or race ends and says so in its audit
//! record.

use std::cell::RefCell;
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::task::{ready, Context, Poll};

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::{Request, StatusCode, Version};
use hyper::body::{Body as _, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::PollSender;

use super::{Ended, Svc, Tracked};

mod request;
mod response;
#[cfg(test)]
mod tests;

#[cfg(fuzzing)]
pub use self::request::fuzz_request;
use self::request::{parse, uri_and_fields, Field, Head, Parse};
use self::response::{chunk_size, encode_head};

/// The most a request head (request line and fields) may take here; a longer one is hyper's.
pub(super) const MAX_HEAD: usize = 64 * 1024;
/// The most fields a request head may have here (hyper's own limit).
const MAX_FIELDS: usize = 100;
/// A read is made into the buffer's room when at least this much is left, else into new room
/// of `READ`.
const MIN_ROOM: usize = 1024;
const READ: usize = 8 * 1024;
/// The room a connection's response head starts with (a gateway's answer head is ~300 bytes).
const HEAD_ROOM: usize = 512;
/// The room a connection's request fields start with (most clients send fewer; an official
/// SDK ~17).
const FIELDS_ROOM: usize = 16;
/// A body frame up to this long is copied behind what waits to be written, to leave with
/// the frames ready after it in one write; what waits is written once it is this long.
const COALESCE: usize = 16 * 1024;
/// The most rooms of closed connections a server thread keeps for its next connections.
const SPARES: usize = 64;
/// A closed connection's read buffer is kept only when, emptied, it has at least `READ` of
/// room of its own and at most this much (one grown for a large body is let go).
const SPARE_READ: usize = 2 * READ;
/// A closed connection's head buffer is kept as it is up to this long.
const SPARE_HEAD: usize = 4 * 1024;

thread_local! {
    /// The rooms of this thread's closed connections, the last closed on top (its lines the
    /// likeliest to be in cache still), for the thread's next connections.
    static SPARE: RefCell<Vec<Room>> = const { RefCell::new(Vec::new()) };
}

/// How serving a connection here ended.
pub(super) enum Outcome {
    Ended(Ended),
    /// A request this path does not serve arrived: hyper serves the connection from it on,
    /// starting with these bytes (read and not yet used).
    Hyper(TcpStream, Bytes),
}

/// Serve `tcp` until it closes, a bound ends it, the drain finds it idle, or a request this
/// path does not serve arrives.
pub(super) async fn serve(
    tcp: TcpStream,
    svc: &Svc,
    draining: &mut watch::Receiver<bool>,
) -> Outcome {
    let state = &svc.conn;
    let max_body = state.slot.0.max_body;
    let mut conn = Conn {
        tcp,
        room: Room::take(),
    };
    // Whether the drain began is read from a second receiver (an atomic load); the future
    // is polled once, for the connection's task to be woken when it begins (a poll takes a
    // lock: ~200 instructions, four times a request when it was polled at each turn).
    let begun = draining.clone();
    let draining_now = || begun.has_changed().unwrap_or(true);
    let mut drain = pin!(draining.wait_for(|d| *d));
    let mut woken_by_drain = false;
    let mut shutting_down = false;
    let mut armed = super::Armed::new(state);
    let mut timer = pin!(tokio::time::sleep_until(armed.at));
    loop {
        // A read into an idle connection began a head; its deadline is marked only when the
        // head is not whole after that read (a clock reading and two stores a request saved:
        // most heads arrive in one read).
        let mut head_begun = false;
        // The next request's head, within `header_timeout` of its first byte (or of the
        // accept), `idle_timeout` of the last response, or until the drain.
        let next = poll_fn(|cx| loop {
            shutting_down = shutting_down || draining_now();
            if !conn.room.buf.is_empty() {
                match parse(&conn.room.buf, &mut conn.room.fields, max_body) {
                    Parse::Partial if conn.room.buf.len() < MAX_HEAD => {
                        if std::mem::take(&mut head_begun) {
                            state.head_begins();
                        }
                    }
                    Parse::Partial | Parse::Hyper => return Poll::Ready(Turn::Hyper),
                    Parse::Head(head) => return Poll::Ready(Turn::Head(head)),
                }
            }
            if shutting_down {
                return Poll::Ready(Turn::End(Ended::Served));
            }
            let idle = conn.room.buf.is_empty();
            match conn.poll_fill(cx) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(Turn::End(Ended::Served)),
                Poll::Ready(Ok(_)) => {
                    head_begun = idle;
                    continue;
                }
                Poll::Pending => {}
            }
            if !woken_by_drain {
                woken_by_drain = true;
                if drain.as_mut().poll(cx).is_ready() {
                    shutting_down = true;
                    continue;
                }
            }
            return state
                .poll_due(timer.as_mut(), &mut armed, cx)
                .map(Turn::End);
        })
        .await;
        let head = match next {
            Turn::Head(head) => head,
            Turn::Hyper => return Outcome::Hyper(conn.tcp, conn.room.buf.freeze()),
            Turn::End(ended) => return conn.end(ended),
        };
        let asked_close = head.close;
        let Some((request, mut feed)) = conn.request(head) else {
            return Outcome::Hyper(conn.tcp, conn.room.buf.freeze());
        };

        let mut routed = svc.route(request, true);
        let answer = poll_fn(|cx| {
            if let Poll::Ready(Ok(resp)) = Pin::new(&mut routed).poll(cx) {
                return Poll::Ready(Some(resp));
            }
            match conn.poll_watch(cx, &mut feed) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        drop(routed);
        // The client went away: its request is dropped with the future.
        let Some(resp) = answer else {
            return conn.end(Ended::Served);
        };
        shutting_down = shutting_down || draining_now();
        let close = shutting_down || asked_close;
        if !conn.respond(resp, close, &mut feed).await || close || feed.left > 0 {
            let _ = poll_fn(|cx| Pin::new(&mut conn.tcp).poll_shutdown(cx)).await;
            return conn.end(Ended::Served);
        }
    }
}

/// What the head phase found.
enum Turn {
    Head(Head),
    Hyper,
    End(Ended),
}

/// What a response waits for next.
enum Next {
    Frame(Option<Result<Frame<Bytes>, axum::Error>>),
    /// Nothing is ready and the head or small frames wait to be written.
    Flush,
    /// The client closed its connection.
    Gone,
}

/// One client connection between requests (over a `TcpStream` but in tests).
struct Conn<T = TcpStream> {
    tcp: T,
    room: Room,
}

/// What a connection reads into and writes from, kept when it closes for the thread's next
/// connection. A new connection's first allocations otherwise come from pages the allocator
/// has handed back to the kernel after a second unused (mimalloc's `purge_delay`): each one a
/// page fault on its first request, ~16 µs run cold on a virtual machine (docs/BENCHMARKS.md).
#[derive(Default)]
struct Room {
    /// Bytes read and not yet used; its spare room takes the next read.
    buf: BytesMut,
    /// What is to be written next: the response head, and small body frames after it (kept
    /// for its allocation).
    head: Vec<u8>,
    /// The fields of the head being parsed, kept for the allocation.
    fields: Vec<Field>,
}

impl Room {
    /// A closed connection's room, or a new one: the buffer allocated at the first read, the
    /// head and the fields with room for what most requests and answers take (grown from
    /// nothing, the head was reallocated six times on a new connection's first answer).
    fn take() -> Room {
        let spare = SPARE.try_with(|spare| spare.try_borrow_mut().ok()?.pop());
        spare.ok().flatten().unwrap_or_else(|| Room {
            buf: BytesMut::new(),
            head: Vec::with_capacity(HEAD_ROOM),
            fields: Vec::with_capacity(FIELDS_ROOM),
        })
    }

    /// Keep the room, emptied, for the thread's next connection: unless the thread keeps
    /// [`SPARES`] already, or its buffer has not `READ` of room of its own (what was read
    /// into it is still held elsewhere) or was grown past [`SPARE_READ`]. A head grown past
    /// [`SPARE_HEAD`] (a stream's frames gather in it) goes back to [`HEAD_ROOM`]: a thread
    /// keeps at most `SPARES` times ~24 KiB. What is not kept is freed here.
    fn keep(mut self) {
        // Not kept on a thread whose spares are gone (it is ending).
        let _ = SPARE.try_with(|spare| {
            let Ok(mut spare) = spare.try_borrow_mut() else {
                return;
            };
            self.buf.clear();
            if spare.len() == SPARES
                || !self.buf.try_reclaim(READ)
                || self.buf.capacity() > SPARE_READ
            {
                return;
            }
            self.head.clear();
            if self.head.capacity() > SPARE_HEAD {
                self.head.shrink_to(HEAD_ROOM);
            }
            self.fields.clear();
            spare.push(self);
        });
    }
}

/// A request body still arriving, fed to the service as it does.
struct Feed {
    /// Its bytes not yet read.
    left: usize,
    /// `None` once the service dropped the body: the rest is read and dropped.
    to: Option<PollSender<io::Result<Bytes>>>,
}

impl<T> Conn<T> {
    /// The connection ended: its room is kept for the thread's next one.
    fn end(self, ended: Ended) -> Outcome {
        self.room.keep();
        Outcome::Ended(ended)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Conn<T> {
    /// Read what the client sent into the buffer: the count read, 0 at its end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.room.buf.capacity() - self.room.buf.len() < MIN_ROOM {
            self.room.buf.reserve(READ);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.tcp), cx, &mut self.room.buf)
    }

    /// The request `head` describes (its bytes taken from the buffer, with its body's when they
    /// have arrived), and the body still to come. `None` (nothing taken) when its target or a
    /// field value is not one `http` takes: hyper's to refuse.
    fn request(&mut self, head: Head) -> Option<(Request<Body>, Feed)> {
        let bytes = self.room.buf.split_to(head.len).freeze();
        let Some((uri, headers)) = uri_and_fields(&mut self.room.fields, &head, &bytes) else {
            // Put the head back: hyper reads it from the start (a refusal is rare: httparse
            // allows in a field value what `http` does, and most targets `Uri` takes).
            let mut back = BytesMut::with_capacity(bytes.len() + self.room.buf.len());
            back.extend_from_slice(&bytes);
            back.extend_from_slice(&self.room.buf);
            self.room.buf = back;
            return None;
        };
        let arrived = head.body.min(self.room.buf.len());
        let (body, feed) = if head.body == 0 {
            (Body::empty(), None)
        } else if arrived == head.body {
            (Body::from(self.room.buf.split_to(arrived).freeze()), None)
        } else {
            let (tx, rx) = mpsc::channel(1);
            if arrived > 0 {
                // The channel is empty: room for one.
                let _ = tx.try_send(Ok(self.room.buf.split_to(arrived).freeze()));
            }
            let fed = Fed {
                rx,
                left: head.body as u64,
            };
            (Body::new(fed), Some(PollSender::new(tx)))
        };
        let feed = Feed {
            left: head.body - arrived,
            to: feed,
        };
        let mut request = Request::new(body);
        *request.method_mut() = head.method;
        *request.uri_mut() = uri;
        *request.version_mut() = Version::HTTP_11;
        *request.headers_mut() = headers;
        Some((request, feed))
    }

    /// While a request is in flight: feed its body to the service as it arrives, then watch
    /// for the client's close (reading what it sends next, up to a head's worth). Ready when the
    /// client closed or its connection failed.
    fn poll_watch(&mut self, cx: &mut Context<'_>, feed: &mut Feed) -> Poll<()> {
        loop {
            if feed.left > 0 {
                if let Some(to) = &mut feed.to {
                    match to.poll_reserve(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(_)) => {
                            feed.to = None;
                            continue;
                        }
                        Poll::Pending => return Poll::Pending,
                    }
                }
                if self.room.buf.is_empty() {
                    let error = match ready!(self.poll_fill(cx)) {
                        Ok(0) => io::Error::from(io::ErrorKind::UnexpectedEof),
                        Ok(_) => continue,
                        Err(e) => e,
                    };
                    if let Some(to) = &mut feed.to {
                        let _ = to.send_item(Err(error));
                    }
                    return Poll::Ready(());
                }
                let n = feed.left.min(self.room.buf.len());
                let chunk = self.room.buf.split_to(n).freeze();
                feed.left -= n;
                if let Some(to) = &mut feed.to {
                    let _ = to.send_item(Ok(chunk));
                }
                if feed.left == 0 {
                    feed.to = None; // the body's end
                }
                continue;
            }
            if self.room.buf.len() >= MAX_HEAD {
                return Poll::Pending;
            }
            match ready!(self.poll_fill(cx)) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {}
            }
        }
    }

    /// Write `resp` (with `connection: close` when `close`), watching for the client's close
    /// meanwhile; whether it was written whole.
    async fn respond(
        &mut self,
        resp: http::Response<Tracked>,
        close: bool,
        feed: &mut Feed,
    ) -> bool {
        let (parts, mut body) = resp.into_parts();
        let bodiless = parts.status.is_informational()
            || parts.status == StatusCode::NO_CONTENT
            || parts.status == StatusCode::NOT_MODIFIED;
        let length = body.size_hint().exact();
        let chunked = !bodiless && length.is_none();
        // What a body framed by its length has still to send: more is cut, less closes the
        // connection (the client sees a body cut short, as hyper's would).
        let mut owed = length.unwrap_or(0);
        encode_head(
            &mut self.room.head,
            &parts,
            body.stamp.take(),
            bodiless,
            length,
            close || feed.left > 0,
        );
        loop {
            let next = poll_fn(|cx| {
                if let Poll::Ready(frame) = Pin::new(&mut body).poll_frame(cx) {
                    return Poll::Ready(Next::Frame(frame));
                }
                if !self.room.head.is_empty() {
                    // Nothing ready: what waits goes out now, then the next frame is awaited.
                    return Poll::Ready(Next::Flush);
                }
                match self.poll_watch(cx, feed) {
                    Poll::Ready(()) => Poll::Ready(Next::Gone),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            let frame = match next {
                Next::Frame(frame) => frame,
                Next::Flush => {
                    if self.write(&[]).await.is_err() {
                        return false;
                    }
                    continue;
                }
                Next::Gone => return false, // the client went away
            };
            // Small frames wait with the head until nothing more is ready: the events one
            // upstream read brought leave in one write, not one each, and that write is the
            // last thing done before the thread waits again. (A client on the same host is
            // woken onto the writer's core, so work done after a write delays its read: a
            // stream's first event written at once and the rest after it reached the client
            // ~20 µs later, measured with `bench/hops`.)
            let data = match frame {
                None => {
                    let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
                    return self.write(&[end]).await.is_ok() && (chunked || bodiless || owed == 0);
                }
                Some(Err(_)) => return false, // the body failed: the response is cut short
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue, // trailers: not sent
                },
            };
            if bodiless || data.is_empty() {
                continue;
            }
            let mut size = [0u8; 18];
            let (framing, data, cut): (&[u8], &[u8], bool) = if chunked {
                (chunk_size(&mut size, data.len()), &data, false)
            } else {
                let n = usize::try_from(owed).unwrap_or(usize::MAX).min(data.len());
                owed -= n as u64;
                (b"", &data[..n], n < data.len())
            };
            let tail: &[u8] = if chunked { b"\r\n" } else { b"" };
            if body.is_end_stream() && !cut {
                // The last frame (a whole answer's only one): written from where it is, with
                // what waits and the body's end.
                let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
                return self.write(&[framing, data, tail, end]).await.is_ok()
                    && (chunked || owed == 0);
            }
            if data.len() <= COALESCE {
                self.room.head.extend_from_slice(framing);
                self.room.head.extend_from_slice(data);
                self.room.head.extend_from_slice(tail);
                if (cut || self.room.head.len() >= COALESCE) && self.write(&[]).await.is_err() {
                    return false;
                }
            } else if self.write(&[framing, data, tail]).await.is_err() {
                return false;
            }
            if cut {
                return false; // more than its length: the rest is not sent
            }
        }
    }

    /// Write what waits (the head, small frames; emptied once written) and then `parts` (at
    /// most four), in one system call when they fit the socket.
    async fn write(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut done = 0; // bytes written of the head and parts together
        let total = self.room.head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        let head = std::mem::take(&mut self.room.head);
        let wrote = poll_fn(|cx| {
            while done < total {
                let mut bufs = [IoSlice::new(&[]); 5];
                let mut skip = done;
                let mut n = 0;
                for part in std::iter::once(&head[..]).chain(parts.iter().copied()) {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    bufs[n] = IoSlice::new(&part[skip..]);
                    skip = 0;
                    n += 1;
                }
                match ready!(Pin::new(&mut self.tcp).poll_write_vectored(cx, &bufs[..n])) {
                    Ok(0) => return Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero))),
                    Ok(wrote) => done += wrote,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            Poll::Ready(Ok(()))
        })
        .await;
        self.room.head = head;
        self.room.head.clear();
        wrote
    }
}

/// A request body fed by the connection's task as it arrives.
struct Fed {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    /// Its bytes not yet received.
    left: u64,
}

impl hyper::body::Body for Fed {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match ready!(self.rx.poll_recv(cx)) {
            Some(Ok(data)) => {
                self.left -= data.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None if self.left > 0 => Poll::Ready(Some(Err(io::ErrorKind::UnexpectedEof.into()))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

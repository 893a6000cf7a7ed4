//! A response body, read from its connection as the caller polls it: each piece is handed out
//! as it arrives (a stream's events are not held back to fill a chunk), sharing the bytes
//! read (no copy).

use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Conn, Error};

/// The most a chunk-size line (with its extensions) may take.
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// The most the trailer section may take.
const MAX_TRAILERS: usize = 16 * 1024;
/// The most one piece of a chunked body joins of the chunks read ([`join_read`]).
const JOIN: usize = 16 * 1024;

/// How the body's end is known.
#[derive(Debug, Clone, Copy)]
pub(super) enum Framing {
    /// This many bytes are left.
    Length(u64),
    Chunked(Chunk),
    /// It ends when the upstream closes the connection.
    Close,
    Done,
}

/// Where a chunked body's reading is.
#[derive(Debug, Clone, Copy)]
pub(super) enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk, with this many bytes left.
    Data(u64),
    /// After a chunk's data, before its CRLF.
    DataEnd,
    /// After the last chunk, with this many trailer bytes read.
    Trailers(usize),
}

impl Framing {
    pub(super) fn chunked() -> Framing {
        Framing::Chunked(Chunk::Size)
    }
}

/// A response body on its connection, which it gives back once read to its end.
#[derive(Debug)]
pub(crate) struct Body<T> {
    conn: Option<Box<Conn<T>>>,
    framing: Framing,
    /// Whether the connection can take another request after this body.
    reuse: bool,
}

impl<T> Body<T> {
    pub(super) fn new(conn: Box<Conn<T>>, framing: Framing, reuse: bool) -> Body<T> {
        Body {
            conn: Some(conn),
            framing,
            reuse,
        }
    }

    /// Once the body has been read to its end: its connection, when it can take another
    /// request (nothing came after the body).
    pub(crate) fn take_idle(&mut self) -> Option<Box<Conn<T>>> {
        let idle = matches!(self.framing, Framing::Done)
            && self.reuse
            && self.conn.as_ref().is_some_and(|c| c.buf.is_empty());
        if idle {
            self.conn.take()
        } else {
            None
        }
    }

    /// Whether nothing is left to read.
    pub(crate) fn is_end_stream(&self) -> bool {
        matches!(self.framing, Framing::Done | Framing::Length(0))
    }

    /// The bytes left, when they are known.
    pub(crate) fn exact_len(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(n) => Some(n),
            Framing::Done => Some(0),
            Framing::Chunked(_) | Framing::Close => None,
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Body<T> {
    /// The next piece of the body; `None` at its end. After an error, the body has ended
    /// and its connection is not used again.
    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let read = self.poll_read(cx);
        if let Poll::Ready(Err(_)) = read {
            self.framing = Framing::Done;
            self.reuse = false;
        }
        read.map(Result::transpose)
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, Error>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Ok(None));
        };
        loop {
            match self.framing {
                Framing::Done => return Poll::Ready(Ok(None)),
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    return Poll::Ready(Ok(None));
                }
                Framing::Length(left) => {
                    if let Some(data) = take(conn, left) {
                        self.framing = Framing::Length(left - data.len() as u64);
                        return Poll::Ready(Ok(Some(data)));
                    }
                    if ready!(conn.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(Error::Closed("the end of the body")));
                    }
                }
                Framing::Close => {
                    if !conn.buf.is_empty() {
                        return Poll::Ready(Ok(Some(conn.buf.split().freeze())));
                    }
                    if ready!(conn.poll_fill(cx))? == 0 {
                        self.framing = Framing::Done;
                        return Poll::Ready(Ok(None));
                    }
                }
                Framing::Chunked(Chunk::Data(left)) => {
                    if let Some(data) = take(conn, left) {
                        let left = left - data.len() as u64;
                        if left > 0 {
                            self.framing = Framing::Chunked(Chunk::Data(left));
                            return Poll::Ready(Ok(Some(data)));
                        }
                        let (data, framing) = join_read(conn, data);
                        self.framing = framing;
                        return Poll::Ready(Ok(Some(data)));
                    }
                    if ready!(conn.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(Error::Closed("the end of a chunk")));
                    }
                }
                Framing::Chunked(chunk) => match step(conn, chunk)? {
                    Some(Framing::Done) => {
                        self.framing = Framing::Done;
                        return Poll::Ready(Ok(None));
                    }
                    Some(next) => self.framing = next,
                    None => {
                        if ready!(conn.poll_fill(cx))? == 0 {
                            return Poll::Ready(Err(Error::Closed("the end of a chunked body")));
                        }
                    }
                },
            }
        }
    }
}

/// `first`, a chunk's data read to its end, and the data of the chunks already read after
/// it (the last perhaps in part), as one piece, with where the reading is then. An upstream
/// sends each event of a stream as a chunk of its own, so an upstream read holding several
/// events went on as a piece each, through every layer above (~400 instructions a piece,
/// bench/instructions STREAM=1); a copy of a few hundred bytes costs less. Stops, leaving the
/// rest for the next poll, at bytes not read yet, at a framing error (the next poll reports
/// it), at [`JOIN`] bytes, or at the body's end, which the piece then ends.
fn join_read<T>(conn: &mut Conn<T>, first: Bytes) -> (Bytes, Framing) {
    let mut joined = BytesMut::new();
    let mut chunk = Chunk::DataEnd;
    let framing = loop {
        match chunk {
            Chunk::Data(left) => {
                let len = first.len().max(joined.len());
                let n = usize::try_from(left)
                    .unwrap_or(usize::MAX)
                    .min(conn.buf.len())
                    .min(JOIN.saturating_sub(len));
                if n == 0 {
                    break Framing::Chunked(chunk);
                }
                if joined.is_empty() {
                    joined.reserve((len + conn.buf.len()).min(JOIN));
                    joined.extend_from_slice(&first);
                }
                joined.extend_from_slice(&conn.buf[..n]);
                conn.buf.advance(n);
                let left = left - n as u64;
                if left > 0 {
                    break Framing::Chunked(Chunk::Data(left));
                }
                chunk = Chunk::DataEnd;
            }
            _ => match step(conn, chunk) {
                Ok(Some(Framing::Chunked(next))) => chunk = next,
                Ok(Some(_)) => break Framing::Done,
                Ok(None) | Err(_) => break Framing::Chunked(chunk),
            },
        }
    };
    let piece = if joined.is_empty() {
        first
    } else {
        joined.freeze()
    };
    (piece, framing)
}

/// Up to `left` of the bytes read, when there are any.
fn take<T>(conn: &mut Conn<T>, left: u64) -> Option<Bytes> {
    if conn.buf.is_empty() {
        return None;
    }
    let n = usize::try_from(left).map_or(conn.buf.len(), |left| left.min(conn.buf.len()));
    Some(conn.buf.split_to(n).freeze())
}

/// One step of a chunked body outside a chunk's data, over the bytes read: the state after
/// it, or `None` when more must be read first.
fn step<T>(conn: &mut Conn<T>, chunk: Chunk) -> Result<Option<Framing>, Error> {
    let buf = &mut conn.buf;
    match chunk {
        Chunk::Size => {
            let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                if buf.len() > MAX_CHUNK_LINE {
                    return Err(Error::Invalid("a chunk-size line over 4 KiB"));
                }
                return Ok(None);
            };
            if end > MAX_CHUNK_LINE {
                return Err(Error::Invalid("a chunk-size line over 4 KiB"));
            }
            let size = chunk_size(&buf[..end])?;
            buf.advance(end + 1);
            Ok(Some(Framing::Chunked(if size == 0 {
                Chunk::Trailers(0)
            } else {
                Chunk::Data(size)
            })))
        }
        Chunk::DataEnd => {
            let after = match &buf[..] {
                [b'\r', b'\n', ..] => 2,
                [b'\n', ..] => 1,
                [] | [b'\r'] => return Ok(None),
                _ => return Err(Error::Invalid("a chunk not ended by CRLF")),
            };
            buf.advance(after);
            Ok(Some(Framing::chunked()))
        }
        Chunk::Trailers(seen) => {
            let Some(end) = buf.iter().position(|&b| b == b'\n') else {
                if seen + buf.len() > MAX_TRAILERS {
                    return Err(Error::Invalid("trailers over 16 KiB"));
                }
                return Ok(None);
            };
            let blank = matches!(&buf[..end], [] | [b'\r']);
            buf.advance(end + 1);
            if blank {
                return Ok(Some(Framing::Done));
            }
            let seen = seen + end + 1;
            if seen > MAX_TRAILERS {
                return Err(Error::Invalid("trailers over 16 KiB"));
            }
            Ok(Some(Framing::Chunked(Chunk::Trailers(seen))))
        }
        Chunk::Data(_) => Ok(Some(Framing::Chunked(chunk))),
    }
}

/// The size on a chunk-size line (hex digits; extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<u64, Error> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let digits = line
        .iter()
        .position(|&b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = line[digits..].trim_ascii_start();
    if digits == 0 || digits > 16 || !(rest.is_empty() || rest[0] == b';') {
        return Err(Error::Invalid("a chunk size"));
    }
    Ok(line[..digits].iter().fold(0u64, |n, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => d - b'A' + 10,
        };
        n << 4 | u64::from(v)
    }))
}

//! Where on the wire a client's next request head begins, so `header_timeout` can run from
//! there over both protocols.
//!
//! - HTTP/1: a request is the next bytes after the last response; any byte starts a head.
//! - HTTP/2 (h2c, prior knowledge): frames arrive between requests (PING, SETTINGS,
//!   WINDOW_UPDATE) and say nothing about a request; a head begins with a HEADERS frame. So
//!   the bytes are read as frames, by their 9-byte headers only (the payloads are skipped,
//!   never looked into), and a HEADERS frame is what starts a head.
//!
//! Which protocol a connection speaks is seen from its first 24 bytes, as hyper's own
//! detection sees it: HTTP/2's connection preface, or anything else.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::ConnState;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The HTTP/2 frame type that opens a request (RFC 9113 §6.2).
const HEADERS: u8 = 0x1;

/// Where a connection's byte stream is, as far as request heads go.
#[derive(Debug)]
enum Sniff {
    /// This many bytes of the HTTP/2 preface have arrived, nothing else yet.
    Preface(usize),
    Http1,
    Http2(Frames),
}

/// An HTTP/2 frame stream read by its frame headers.
#[derive(Debug, Default)]
struct Frames {
    /// The part of the next frame header that has arrived.
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to come.
    skip: usize,
}

impl Frames {
    /// Read `data` on; whether a HEADERS frame began in it.
    fn scan(&mut self, mut data: &[u8]) -> bool {
        let mut heads = false;
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let n = (self.header.len() - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have == self.header.len() {
                self.have = 0;
                let [a, b, c, kind, ..] = self.header;
                self.skip = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
                heads |= kind == HEADERS;
            }
        }
        heads
    }
}

impl Sniff {
    /// Read `data` on; whether a request head may have begun in it.
    fn scan(&mut self, data: &[u8]) -> bool {
        match self {
            Sniff::Http1 => true,
            Sniff::Http2(frames) => frames.scan(data),
            Sniff::Preface(matched) => {
                let n = (PREFACE.len() - *matched).min(data.len());
                if data[..n] != PREFACE[*matched..*matched + n] {
                    *self = Sniff::Http1;
                    return true;
                }
                *matched += n;
                if *matched < PREFACE.len() {
                    // A new connection owes its first head from its accept on anyway.
                    return false;
                }
                let mut frames = Frames::default();
                let heads = frames.scan(&data[n..]);
                *self = Sniff::Http2(frames);
                heads
            }
        }
    }
}

/// A connection's socket, noting where each request head begins.
pub(super) struct Watched {
    io: TcpStream,
    /// Bytes read from `io` before it was watched, read first.
    read: Bytes,
    state: Arc<ConnState>,
    sniff: Sniff,
}

impl Watched {
    pub(super) fn new(io: TcpStream, read: Bytes, state: Arc<ConnState>) -> Watched {
        Watched {
            io,
            read,
            state,
            sniff: Sniff::Preface(0),
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let read = if this.read.is_empty() {
            Pin::new(&mut this.io).poll_read(cx, buf)
        } else {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(n));
            Poll::Ready(Ok(()))
        };
        if buf.filled().len() > before && this.sniff.scan(&buf.filled()[before..]) {
            this.state.head_begins();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload_len: usize) -> Vec<u8> {
        let len = u32::try_from(payload_len).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 1];
        f.resize(9 + payload_len, kind);
        f
    }

    /// Feeds `bytes` in pieces of `step`; which pieces said a head began.
    fn heads(bytes: &[u8], step: usize) -> Vec<usize> {
        let mut sniff = Sniff::Preface(0);
        bytes
            .chunks(step)
            .enumerate()
            .filter_map(|(i, piece)| sniff.scan(piece).then_some(i))
            .collect()
    }

    #[test]
    fn http1_bytes_each_may_begin_a_head() {
        assert_eq!(heads(b"GET / HTTP/1.1\r\n", 4), vec![0, 1, 2, 3]);
        // A prefix of the preface that turns out to be something else is HTTP/1 at once.
        assert_eq!(heads(b"PRI * HTTP/1.1\r\n", 16), vec![0]);
    }

    #[test]
    fn http2_heads_begin_at_headers_frames_only_however_the_bytes_are_split() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 6)); // SETTINGS
        bytes.extend(frame(0x6, 8)); // PING
        let headers_at = bytes.len();
        bytes.extend(frame(HEADERS, 300));
        bytes.extend(frame(0x0, 70_000)); // DATA, longer than 16 bits
        bytes.extend(frame(0x8, 4)); // WINDOW_UPDATE
        let second_at = bytes.len();
        bytes.extend(frame(HEADERS, 1));
        for step in [1, 2, 7, 9, 24, 100, 4096, bytes.len()] {
            let got = heads(&bytes, step);
            let want: Vec<usize> = [headers_at, second_at]
                .iter()
                // The piece holding the frame header's last byte.
                .map(|at| (at + 8) / step)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            assert_eq!(got, want, "step {step}");
        }
    }

    #[test]
    fn a_headers_frame_in_the_same_read_as_the_preface_is_seen() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 10));
        assert_eq!(heads(&bytes, bytes.len()), vec![0]);
        assert_eq!(heads(&bytes[..PREFACE.len()], 24), Vec::<usize>::new());
    }
}

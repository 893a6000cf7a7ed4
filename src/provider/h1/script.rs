//! A scripted upstream for the tests and the fuzz target (`fuzz/fuzz_targets/h1_response.rs`):
//! its answers arrive as the scripted reads, what is written to it is kept.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(fuzzing)]
pub use self::fuzzing::fuzz_response;

/// An upstream whose answers arrive as the scripted reads (`None`: nothing yet, once), then
/// its close.
#[derive(Debug, Default)]
pub(crate) struct Script {
    pub(crate) reads: VecDeque<Option<Vec<u8>>>,
    pub(crate) written: Vec<u8>,
}

impl Script {
    pub(crate) fn reading(pieces: impl IntoIterator<Item = Vec<u8>>) -> Script {
        Script {
            reads: pieces.into_iter().map(Some).collect(),
            written: Vec::new(),
        }
    }
}

impl AsyncRead for Script {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.reads.pop_front() {
            None => Poll::Ready(Ok(())),
            Some(None) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(Some(mut piece)) => {
                let n = piece.len().min(buf.remaining());
                buf.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.reads.push_front(Some(piece.split_off(n)));
                }
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl AsyncWrite for Script {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(fuzzing)]
mod fuzzing {
    use std::future::{poll_fn, Future};
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use http::{Method, Request};

    use super::Script;
    use crate::provider::h1::{Conn, Defaults, Error};

    /// Run `f` to its end on this thread (a script never waits on anything outside it).
    fn run<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    /// Fuzzing: what a request (`HEAD` or `POST`) reads from an upstream that sends `answer` in
    /// reads of `piece` bytes: the status, the header fields (as a map, and the content-type),
    /// the body and whether the connection is kept, or the error. The same answer must read
    /// the same in any pieces.
    pub fn fuzz_response(answer: &[u8], piece: usize, head: bool) -> String {
        let mut req = Request::new(Bytes::new());
        *req.method_mut() = if head { Method::HEAD } else { Method::POST };
        let script = Script::reading(answer.chunks(piece.max(1)).map(<[u8]>::to_vec));
        let read = run(async {
            let resp = Conn::new(script)
                .send(&req, &Defaults::default())
                .await
                .map_err(|e| e.error)?;
            let status = resp.status;
            let fields = resp.head.map();
            let content_type = resp.head.content_type().map(<[u8]>::to_vec);
            let mut body = resp.body;
            let mut read = Vec::new();
            while let Some(data) = poll_fn(|cx| body.poll_data(cx)).await {
                read.extend_from_slice(&data?);
            }
            // Kept, with nothing sent after the answer (which, read in pieces, may come
            // after the body's end was seen: the next checkout finds it).
            let kept = body
                .take_idle()
                .is_some_and(|conn| conn.io.reads.iter().flatten().all(Vec::is_empty));
            Ok::<_, Error>((status, fields, content_type, read, kept))
        });
        if let Ok((_, _, _, body, _)) = &read {
            assert!(body.len() <= answer.len(), "more body than was sent");
        }
        format!("{read:?}")
    }
}

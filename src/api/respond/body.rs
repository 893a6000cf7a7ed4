//! A client request's body, read within the gateway's bounds.

use std::future::Future;
use std::task::Poll;

use axum::body::Body;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt;

use crate::api::error::ApiError;
use crate::api::AppState;

/// Read a request body within `[server] max_body` (413 past it) and `body_timeout` (408 when
/// it has not arrived whole by then: a client sending a byte a second holds its connection
/// and its place under `max_in_flight` only this long). Every handler that reads a body reads
/// it here.
pub(in crate::api) async fn read_body(state: &AppState, body: Body) -> Result<Bytes, ApiError> {
    let max = state.max_body;
    let mut read = std::pin::pin!(collect(body, max));
    // Most bodies arrived with their head: read them without arming a timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
    let read = match first {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(state.body_timeout, read).await,
    };
    match read {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(BodyError::TooLarge)) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("request body is larger than the gateway's max_body ({max} bytes)"),
        )),
        Ok(Err(BodyError::Failed)) => Err(ApiError::bad_request(
            "body_read_error",
            "could not read the request body",
        )),
        Err(_) => {
            crate::metrics::bump(&state.shared.limits.body_timeout);
            Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_timeout",
                format!(
                    "the request body did not arrive within the gateway's body_timeout ({} s)",
                    state.body_timeout.as_secs_f64()
                ),
            ))
        }
    }
}

/// Why a body could not be read.
#[derive(Debug, PartialEq)]
enum BodyError {
    /// Over `max_body`.
    TooLarge,
    /// The body failed (the client's connection, its framing).
    Failed,
}

/// The most room a body's join is given before its bytes arrive: a client that says a large
/// length and sends little gets room as it sends.
const JOIN_ROOM: usize = 1 << 20;

/// A body's bytes, at most `max` of them (see [`Join`]).
async fn collect(mut body: Body, max: usize) -> Result<Bytes, BodyError> {
    let said = hyper::body::Body::size_hint(&body).lower();
    if said > max as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut join = Join::new(said);
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|_| BodyError::Failed)?.into_data() else {
            continue; // trailers: not part of the body
        };
        len = len.saturating_add(data.len());
        if len > max {
            return Err(BodyError::TooLarge);
        }
        join.push(data);
    }
    Ok(join.finish())
}

/// A body's frames joined. A body of one frame (one that arrived with its head) is that
/// frame, with nothing copied; one of several is copied into room for its whole length (as
/// its head said it, up to [`JOIN_ROOM`]) when its second frame comes, each byte once (an
/// agent's turn of 60 KB, grown by doubling, was copied twice over: ~110,000 instructions,
/// `BODY=... bench/instructions`).
struct Join {
    first: Option<Bytes>,
    joined: bytes::BytesMut,
    room: usize,
}

impl Join {
    /// For a body whose head said it is `said` bytes long (at least).
    fn new(said: u64) -> Join {
        Join {
            first: None,
            joined: bytes::BytesMut::new(),
            room: usize::try_from(said).map_or(JOIN_ROOM, |said| said.min(JOIN_ROOM)),
        }
    }

    fn push(&mut self, data: Bytes) {
        if self.first.is_none() && self.joined.is_empty() {
            self.first = Some(data);
            return;
        }
        if let Some(first) = self.first.take() {
            self.joined.reserve(self.room.max(first.len() + data.len()));
            self.joined.extend_from_slice(&first);
        }
        self.joined.extend_from_slice(&data);
    }

    fn finish(self) -> Bytes {
        self.first.unwrap_or_else(|| self.joined.freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body is its frames joined, within `max`: a frame past it, or a size hint past it,
    /// is too large; a failed frame fails it.
    #[tokio::test]
    async fn a_body_is_its_frames_within_max() {
        let frames = |parts: Vec<Result<&'static str, ()>>| {
            let frames = parts.into_iter().map(|p| {
                p.map(|s| hyper::body::Frame::data(Bytes::from_static(s.as_bytes())))
                    .map_err(|()| axum::Error::new("cut"))
            });
            Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
                frames,
            )))
        };
        assert_eq!(
            collect(Body::from("whole"), 5).await,
            Ok(Bytes::from("whole"))
        );
        assert_eq!(
            collect(Body::from("whole"), 4).await,
            Err(BodyError::TooLarge)
        );
        assert_eq!(collect(Body::empty(), 0).await, Ok(Bytes::new()));
        assert_eq!(
            collect(frames(vec![Ok("ab"), Ok(""), Ok("cd"), Ok("e")]), 5).await,
            Ok(Bytes::from("abcde"))
        );
        assert_eq!(
            collect(frames(vec![Ok("ab"), Ok("cd")]), 3).await,
            Err(BodyError::TooLarge)
        );
        assert_eq!(
            collect(frames(vec![Ok("ab"), Err(())]), 9).await,
            Err(BodyError::Failed)
        );
    }

    /// A body of several frames is copied once into room for the length its head said (up to
    /// `JOIN_ROOM`): the join does not move as its frames come.
    #[test]
    fn a_body_is_joined_into_room_for_its_length() {
        let mut join = Join::new(10);
        join.push(Bytes::from_static(b"ab"));
        assert!(join.joined.is_empty(), "one frame is not copied");
        join.push(Bytes::from_static(b"cde"));
        let at = join.joined.as_ptr();
        assert!(join.joined.capacity() >= 10);
        join.push(Bytes::from_static(b"fghij"));
        assert_eq!(join.joined.as_ptr(), at, "the join moved");
        assert_eq!(join.finish(), Bytes::from_static(b"abcdefghij"));
        // A length said past the bound gets the bound's room, then grows as bytes come.
        let mut join = Join::new(u64::MAX);
        join.push(Bytes::from_static(b"ab"));
        join.push(Bytes::from_static(b"cd"));
        assert!(join.joined.capacity() >= JOIN_ROOM && join.joined.capacity() < 2 * JOIN_ROOM);
        // One that said less than came still joins all of it.
        let mut join = Join::new(1);
        join.push(Bytes::from_static(b"ab"));
        join.push(Bytes::from_static(b"cd"));
        assert_eq!(join.finish(), Bytes::from_static(b"abcd"));
    }
}

//! One upstream call. Every way it can fail is classified here, where it is born, into an
//! [`AttemptError`]; the failover loop never looks at messages or transport details.

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderValue, Response};
use serde::de::IgnoredAny;
use serde::Deserialize;
use tokio::time::Instant;

use super::classify::{parse_retry_after, status_error, AttemptError};
use super::Target;
use crate::canonical::Dialect;
use crate::metrics::bump;
use crate::provider::{self, read_at_most, Body, ByteStream, SendError};
use crate::wire::chunks::{ChunkAction, ChunkTracker};
use crate::wire::sse::SseDecoder;
use crate::wire::{transcode, Usage};

/// A stream that passed its commit point, ready to be relayed.
pub struct Committed {
    pub upstream: ByteStream,
    pub decoder: SseDecoder,
    pub tracker: ChunkTracker,
    /// Events already read (up to and including the first content), to send first.
    pub head: Vec<Bytes>,
}

/// A failure to get a response: connect (refused, unreachable, TLS) or a reset after it.
fn send_error(e: &SendError) -> AttemptError {
    match e {
        SendError::Connect(_) => AttemptError::Connect,
        SendError::Http(_) => AttemptError::Reset,
    }
}

/// A failure reading a body: the connection broke.
fn body_error(_: hyper::Error) -> AttemptError {
    AttemptError::Reset
}

/// The most of an error body read: enough for any provider's error envelope and the message a
/// classification reads (context-length wording, codes); an upstream that sends megabytes of
/// HTML with its 502 is read no further.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// Marks synthetic health probes, so providers' logs (and our mock) can tell them apart.
pub const PROBE_HEADER: &str = "x-switchyard-probe";

/// Send the request and wait for a success status; error statuses are read whole.
async fn send(
    target: &Target,
    body: Vec<u8>,
    probe: bool,
    stream: bool,
) -> Result<Response<Body>, AttemptError> {
    let url = if stream {
        &target.stream_url
    } else {
        &target.url
    };
    let mut req = target.provider.post(url, body);
    if probe {
        req.headers_mut()
            .insert(PROBE_HEADER, HeaderValue::from_static("1"));
    }
    let resp = target
        .provider
        .client
        .request(req)
        .await
        .map_err(|e| send_error(&e))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = parse_retry_after(resp.headers());
    let body = match read_at_most(resp.into_body(), MAX_ERROR_BODY).await {
        Ok((body, truncated)) => {
            if truncated {
                bump(&target.limits.error_body);
            }
            body
        }
        Err(_) => Bytes::new(),
    };
    Err(status_error(target.dialect, status, retry_after, body))
}

/// A non-streamed answer: the body must be a chat completion (a `choices` field), else the reply
/// is malformed and another target is asked. `probe` marks a synthetic health probe.
pub async fn call_full(
    target: &Target,
    body: Vec<u8>,
    deadline: Instant,
    probe: bool,
) -> Result<(Bytes, Option<Usage>), AttemptError> {
    #[derive(Deserialize)]
    struct Completion {
        /// Only its presence is checked (skipped, not captured: a borrowed `RawValue` would
        /// also check the UTF-8 of its every byte).
        #[allow(dead_code, reason = "only its presence is checked")]
        choices: IgnoredAny,
        #[serde(default)]
        usage: Option<Usage>,
    }
    let call = async {
        let resp = send(target, body, probe, false).await?;
        let (bytes, truncated) = read_at_most(resp.into_body(), target.max_response_body)
            .await
            .map_err(body_error)?;
        if truncated {
            bump(&target.limits.max_response_body);
            return Err(AttemptError::TooLarge);
        }
        if target.dialect != Dialect::OpenAi {
            return transcode::response_to_openai(target.dialect, &bytes)
                .map_err(|_| AttemptError::Malformed);
        }
        let usage = serde_json::from_slice::<Completion>(&bytes)
            .map_err(|_| AttemptError::Malformed)?
            .usage;
        Ok((bytes, usage))
    };
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or(Err(AttemptError::Timeout))
}

/// A streamed answer, read up to its commit point (the first content). Until then nothing has
/// reached the client, so any failure here can still move to another target.
pub async fn call_stream(
    target: &Target,
    body: Vec<u8>,
    client_wants_usage: bool,
    first_token_deadline: Instant,
) -> Result<Committed, AttemptError> {
    let call = async {
        let resp = send(target, body, false, true).await?;
        let is_sse = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            return Err(AttemptError::Malformed);
        }
        let mut upstream = provider::stream(resp.into_body());
        if target.dialect != Dialect::OpenAi {
            upstream = transcode::stream_to_openai(
                upstream,
                target.dialect,
                target.limits.sse_event.clone(),
            );
        }
        // Bounded lines and events: one over the bound reads as an in-band error.
        let mut decoder = SseDecoder::counting(target.limits.sse_event.clone());
        let mut tracker = ChunkTracker::new(client_wants_usage);
        let mut head = Vec::new();
        // Bytes read before the commit point: an upstream sending endless role-only chunks or
        // comments before its first content is held to `max_response_body`.
        let mut read = 0usize;
        loop {
            while let Some(ev) = decoder.next_event() {
                match tracker.on_event(&ev) {
                    ChunkAction::Forward(bytes) => head.push(bytes),
                    ChunkAction::Skip => {}
                    ChunkAction::Done => return Err(AttemptError::EmptyStream),
                    ChunkAction::Error(message) => return Err(AttemptError::InBand { message }),
                }
                if tracker.committed {
                    return Ok(Committed {
                        upstream,
                        decoder,
                        tracker,
                        head,
                    });
                }
            }
            match upstream.next().await {
                Some(Ok(bytes)) => {
                    read = read.saturating_add(bytes.len());
                    if read > target.max_response_body {
                        bump(&target.limits.max_response_body);
                        return Err(AttemptError::TooLarge);
                    }
                    decoder.push(&bytes);
                }
                Some(Err(e)) => return Err(body_error(e)),
                None => return Err(AttemptError::EmptyStream),
            }
        }
    };
    tokio::time::timeout_at(first_token_deadline, call)
        .await
        .unwrap_or(Err(AttemptError::FirstTokenTimeout))
}

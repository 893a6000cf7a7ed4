//! One upstream call. Every way it can fail is classified here, where it is born, into an
//! [`AttemptError`]; the failover loop never looks at messages or transport details.

use std::future::Future;
use std::task::Poll;

use bytes::Bytes;
use futures_util::StreamExt;
use http::HeaderValue;
use tokio::time::Instant;

use super::classify::{parse_retry_after, status_error, AttemptError};
use super::spare_timer::Kind;
use super::Target;
use crate::canonical::Dialect;
use crate::metrics::bump;
use crate::provider::{read_at_most, Answer, ByteStream, SendError};
use crate::wire::chunks::{ChunkAction, ChunkTracker};
use crate::wire::sse::SseDecoder;
use crate::wire::trace::{Trace, TraceParent, TRACEPARENT};
use crate::wire::{transcode, ClientWire, Usage};

/// A stream that passed its commit point, ready to be relayed.
pub struct Committed {
    pub upstream: ByteStream,
    pub decoder: SseDecoder,
    pub tracker: ChunkTracker,
    /// Events already read (up to and including the first content), to send first.
    pub head: Vec<Bytes>,
    /// The text of those events (kept when the stream may be continued).
    pub head_text: String,
}

/// What an attempt carries of the client's own request: a target of the client's dialect
/// gets its protocol headers and query, and with `native` its body as it came, whose answer
/// is then passed on in that dialect instead of read into the inner one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Forward<'a> {
    client: Option<&'a ClientWire>,
    native: bool,
    /// A traced request's trace id and this call's span: sent as its `traceparent`.
    trace: Option<(u128, u64)>,
}

impl<'a> Forward<'a> {
    /// For an attempt on `target`; `native` when its body is the client's own.
    pub fn of(client: &'a ClientWire, target: &Target, native: bool) -> Forward<'a> {
        Forward {
            client: target.speaks(client.dialect).then_some(client),
            native,
            trace: None,
        }
    }

    /// The same, sent as span `span` of `trace` (when the request is traced).
    pub fn traced(self, trace: Option<&Trace>, span: u64) -> Forward<'a> {
        Forward {
            trace: trace.map(|t| (t.trace_id, span)),
            ..self
        }
    }

    /// The dialect the attempt's answer is passed on in: the client's for its own body, else
    /// the inner one.
    pub fn answer_dialect(&self) -> Dialect {
        match self.client {
            Some(client) if self.native => client.dialect,
            _ => Dialect::OpenAi,
        }
    }

    /// The dialect the target is spoken to in: the client's for its own body (an OpenAI target
    /// takes a Responses API body at its `/responses`), else the target's own.
    pub fn wire_dialect(&self, target: &Target) -> Dialect {
        match self.client {
            Some(client) if self.native => client.dialect,
            _ => target.dialect,
        }
    }
}

/// A failure to get a response: connect (refused, unreachable, TLS) or a reset after it.
fn send_error(e: &SendError) -> AttemptError {
    match e {
        SendError::Connect(_) => AttemptError::Connect,
        SendError::Http(_) => AttemptError::Reset,
    }
}

/// `url` with the client's query string (`beta=true`) added to its own.
fn with_query(url: &http::Uri, query: &str) -> Result<http::Uri, http::uri::InvalidUri> {
    let joined = match url.query() {
        Some(_) => format!("{url}&{query}"),
        None => format!("{url}?{query}"),
    };
    joined.parse()
}

/// A failure reading a body: the connection broke.
fn body_error(_: crate::provider::BoxError) -> AttemptError {
    AttemptError::Reset
}

/// The most of an error body read: enough for any provider's error envelope and the message a
/// classification reads (context-length wording, codes); an upstream that sends megabytes of
/// HTML with its 502 is read no further.
pub const MAX_ERROR_BODY: usize = 64 * 1024;

/// Marks synthetic health probes, so providers' logs (and our mock) can tell them apart.
pub const PROBE_HEADER: &str = "x-switchyard-probe";

/// Send the request and wait for a success status; error statuses are read whole.
/// Not an `async fn` of its own: the call's future is `send_to`'s, one level less to store
/// and move on every attempt.
fn send<'a>(
    target: &'a Target,
    body: Vec<u8>,
    probe: bool,
    stream: bool,
    forward: Forward<'a>,
) -> impl std::future::Future<Output = Result<Answer, AttemptError>> + 'a {
    let url = match &target.responses_url {
        Some(url) if forward.wire_dialect(target) == Dialect::Responses => url,
        _ if stream => &target.stream_url,
        _ => &target.url,
    };
    send_to(target, url, body, probe, forward)
}

async fn send_to(
    target: &Target,
    url: &http::Uri,
    body: Vec<u8>,
    probe: bool,
    forward: Forward<'_>,
) -> Result<Answer, AttemptError> {
    use crate::provider::{vertex::auth::Bearer, Credential};
    let queried = (forward.client)
        .and_then(|c| c.query.as_deref())
        .filter(|_| target.provider.takes_client_query())
        .and_then(|query| with_query(url, query).ok());
    let url = queried.as_ref().unwrap_or(url);
    let client_headers = forward.client.map_or(&[][..], |c| c.headers.as_slice());
    let bearer = match target.provider.credential() {
        Credential::Fixed => None,
        Credential::Bearer(Bearer::Ready(value)) => Some(value),
        // Boxed: rare, and a fetch is a large future.
        Credential::Bearer(Bearer::Fetch(tokens)) => Some(
            Box::pin(async move { tokens.wait().await })
                .await
                .map_err(|message| AttemptError::Credentials { message })?,
        ),
    };
    let model = &target.config.model;
    let mut req = target
        .provider
        .post(url, model, body, client_headers, bearer)
        .map_err(|message| AttemptError::Credentials { message })?;
    if probe {
        req.headers_mut()
            .insert(PROBE_HEADER, HeaderValue::from_static("1"));
    }
    if let Some((trace_id, span)) = forward.trace {
        req.headers_mut()
            .insert(TRACEPARENT, TraceParent::header(trace_id, span));
    }
    let resp = target
        .provider
        .client
        .request(req)
        .await
        .map_err(|e| send_error(&e))?;
    let status = resp.status();
    // An HTTP/1 answer's fields are parsed when asked: asked once, and only when read.
    let watch = |headers: &http::HeaderMap| {
        if let Some(share) = super::select::limits::headroom(headers) {
            target.health.set_headroom(share);
        }
    };
    if status.is_success() {
        if target.watch_limits {
            watch(&resp.headers());
        }
        return Ok(resp);
    }
    let headers = resp.headers().into_owned();
    if target.watch_limits {
        watch(&headers);
    }
    let retry_after = parse_retry_after(&headers);
    let body = resp.into_body();
    let body = match read_at_most(body, MAX_ERROR_BODY).await {
        Ok((body, truncated)) => {
            if truncated {
                bump(&target.limits.error_body);
            }
            body
        }
        Err(_) => Bytes::new(),
    };
    let (status, body) = target.provider.error_answer(model, status, &headers, body);
    Err(status_error(
        forward.wire_dialect(target),
        status,
        retry_after,
        body,
        forward.native,
    ))
}

/// A non-streamed answer: the body must be a chat completion (a `choices` field), else the reply
/// is malformed and another target is asked. `probe` marks a synthetic health probe.
pub async fn call_full(
    target: &Target,
    body: Vec<u8>,
    deadline: Instant,
    probe: bool,
    forward: Forward<'_>,
) -> Result<(Bytes, Option<Usage>), AttemptError> {
    let timer = super::spare_timer::timer(Kind::Attempt, deadline);
    // Made where it is polled (`pin!` of the block itself): a future built first and pinned
    // after is copied whole (~220 instructions of `memcpy` here, ~280 for a stream's).
    let call = std::pin::pin!(async {
        let resp = send(target, body, probe, false, forward).await?;
        let (bytes, truncated) = read_at_most(resp.into_body(), target.max_response_body)
            .await
            .map_err(body_error)?;
        if truncated {
            bump(&target.limits.max_response_body);
            return Err(AttemptError::TooLarge);
        }
        if !forward.native && target.dialect != Dialect::OpenAi {
            return transcode::response_to_openai(target.dialect, &bytes)
                .map_err(|_| AttemptError::Malformed);
        }
        // Passed on as it came, or an OpenAI answer: only checked and its usage read.
        let dialect = if forward.native {
            forward.wire_dialect(target)
        } else {
            Dialect::OpenAi
        };
        let usage = match dialect {
            // Read by the shape of the target's last answer.
            Dialect::OpenAi => transcode::openai_usage(&bytes, &target.shapes),
            _ => transcode::native_usage(dialect, &bytes),
        };
        Ok((bytes, usage.map_err(|_| AttemptError::Malformed)?))
    });
    before(call, timer, || AttemptError::Timeout).await
}

/// What `call` gives, unless `timer` fires first (then `late()`). The timer is one an earlier
/// attempt left when it can be, and is left for the next (see `spare_timer`).
async fn before<T>(
    mut call: std::pin::Pin<&mut impl Future<Output = Result<T, AttemptError>>>,
    mut timer: super::spare_timer::Timer,
    late: impl Fn() -> AttemptError,
) -> Result<T, AttemptError> {
    let answer = std::future::poll_fn(|cx| {
        if let Poll::Ready(answer) = call.as_mut().poll(cx) {
            return Poll::Ready(answer);
        }
        timer.sleep.as_mut().poll(cx).map(|()| Err(late()))
    })
    .await;
    super::spare_timer::keep(timer);
    answer
}

/// Anthropic's token count (`POST /v1/messages/count_tokens`) of the client's own body, from
/// an Anthropic target: its answer as it came.
pub async fn call_count_tokens(
    target: &Target,
    client: &ClientWire,
    deadline: Instant,
) -> Result<Bytes, AttemptError> {
    let untranslatable = || AttemptError::Untranslatable {
        message: "only an Anthropic target counts an Anthropic request's tokens".into(),
    };
    let body = client
        .native_body(
            target.dialect,
            &target.provider.config.name,
            &target.model_json,
        )
        .ok_or_else(untranslatable)?;
    // Gemini's thought signatures carried in tool-call ids are Gemini's alone.
    let body = crate::canonical::gemini::signature::strip(&body).unwrap_or(body);
    let url = format!("{}/count_tokens", target.url.path())
        .parse::<http::uri::PathAndQuery>()
        .ok()
        .and_then(|path| {
            let mut parts = target.url.clone().into_parts();
            parts.path_and_query = Some(path);
            http::Uri::from_parts(parts).ok()
        })
        .ok_or_else(untranslatable)?;
    let forward = Forward {
        client: Some(client),
        native: true,
        trace: None,
    };
    let call = async {
        let resp = send_to(target, &url, body, false, forward).await?;
        let (bytes, truncated) = read_at_most(resp.into_body(), target.max_response_body)
            .await
            .map_err(body_error)?;
        if truncated {
            bump(&target.limits.max_response_body);
            return Err(AttemptError::TooLarge);
        }
        Ok(bytes)
    };
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or(Err(AttemptError::Timeout))
}

/// A streamed answer, read up to its commit point (the first content). Until then nothing has
/// reached the client, so any failure here can still move to another target. `capture` keeps
/// the text read so far (the stream may be continued).
pub async fn call_stream(
    target: &Target,
    body: Vec<u8>,
    client_wants_usage: bool,
    first_token_deadline: Instant,
    forward: Forward<'_>,
    capture: bool,
) -> Result<Committed, AttemptError> {
    let timer = super::spare_timer::timer(Kind::FirstToken, first_token_deadline);
    let call = std::pin::pin!(async {
        let resp = send(target, body, false, true, forward).await?;
        let Some(mut upstream) = target.provider.stream_of(resp) else {
            return Err(AttemptError::Malformed);
        };
        let (wire, dialect) = (forward.wire_dialect(target), forward.answer_dialect());
        if wire != dialect {
            upstream = transcode::stream_to_openai(upstream, wire, target.limits.sse_event.clone());
        }
        // Bounded lines and events: one over the bound reads as an in-band error.
        let mut decoder = SseDecoder::counting(target.limits.sse_event.clone());
        let mut tracker =
            ChunkTracker::for_dialect(dialect, client_wants_usage).learning(&target.shapes);
        tracker.set_capture(capture);
        let mut head = Vec::new();
        let mut head_text = String::new();
        // Bytes read before the commit point: an upstream sending endless role-only chunks or
        // comments before its first content is held to `max_response_body`.
        let mut read = 0usize;
        loop {
            while let Some(ev) = decoder.next_event() {
                match tracker.on_event(&ev) {
                    ChunkAction::Forward(bytes) => {
                        head_text.push_str(tracker.last_text());
                        head.push(bytes);
                    }
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
                        head_text,
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
                    decoder.push_bytes(bytes);
                }
                Some(Err(e)) => return Err(body_error(e)),
                None => return Err(AttemptError::EmptyStream),
            }
        }
    });
    before(call, timer, || AttemptError::FirstTokenTimeout).await
}

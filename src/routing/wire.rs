//! Dialects on the request path. Internally a request travels in the OpenAI shape: the client's
//! own OpenAI body when it sent one (passed through with byte splices), or its Anthropic body
//! translated at the edge. A target that speaks the OpenAI dialect (OpenAI, Azure, compatible
//! servers) gets those bytes; an Anthropic or Gemini target gets the request written in its own
//! dialect from the canonical model (`canonical`), and its answer, whole or streamed, comes back
//! translated into OpenAI chunks, so the failover loop, the relay and continuation work the same
//! for every target.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};

use super::failover::AttemptError;
use super::stream::Usage;
use crate::api::chat_request::ChatRequest;
use crate::api::sse::SseDecoder;
use crate::canonical::{self, Dialect, ErrorClass, StreamDecoder, StreamEncoder};
use crate::config::ProviderKind;
use crate::provider::ByteStream;

/// The dialect a provider kind speaks.
pub fn dialect_of(kind: ProviderKind) -> Dialect {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible | ProviderKind::Azure => {
            Dialect::OpenAi
        }
        ProviderKind::Anthropic => Dialect::Anthropic,
        ProviderKind::Gemini => Dialect::Gemini,
    }
}

/// The canonical form of a request, made once and only if a target needs it.
#[derive(Debug, Default)]
pub struct Canonical(OnceLock<Option<canonical::ChatRequest>>);

impl Canonical {
    /// Already known (the edge parsed a non-OpenAI body).
    pub fn known(req: canonical::ChatRequest) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(Some(req));
        Canonical(cell)
    }

    /// The canonical request, parsed from the OpenAI body on first use.
    pub fn get(&self, chat: &ChatRequest) -> Option<&canonical::ChatRequest> {
        self.0
            .get_or_init(|| canonical::openai::parse_request(chat.body()).ok())
            .as_ref()
    }
}

/// The body for a target of `dialect`, optionally asking it to continue `prefill`.
pub fn request_body(
    target: &super::Target,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
) -> Result<Vec<u8>, AttemptError> {
    let (dialect, model) = (target.dialect, &target.config.model);
    if dialect == Dialect::OpenAi {
        let messages = prefill.map(|p| super::continuation::prefill_messages(chat, p));
        return Ok(chat.upstream_body(&target.model_json, messages.as_deref()));
    }
    let untranslatable = |message: String| AttemptError::Untranslatable { message };
    let req = canonical
        .get(chat)
        .ok_or_else(|| untranslatable("the request could not be read for translation".into()))?;
    let owned;
    let req = match prefill {
        Some(p) => {
            owned = canonical::with_prefill(req, p);
            &owned
        }
        None => req,
    };
    dialect
        .write_request(req, model)
        .map_err(|e| untranslatable(e.to_string()))
}

/// Output tokens kept free when trimming, unless the request names its `max_tokens`.
const DEFAULT_RESERVE: u32 = 1024;
/// An output reserve no request is expected to exceed, for the no-count shortcut.
const RESERVE_BOUND: u64 = 32_768;

/// The body for a target, trimmed to its `context_window` when the conversation does not fit
/// (`on_overflow = "trim_oldest"`): the oldest turns go, the system prompt and the newest turns
/// stay, and a tool call keeps its result. Returns the body and how many turns were dropped.
/// A body whose bytes plus a generous output reserve fit the window cannot exceed it in tokens
/// (a token is at least a byte), so most requests are not even counted.
pub fn fitted_body(
    target: &super::Target,
    context: &crate::config::ContextPolicy,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
) -> Result<(Vec<u8>, usize), AttemptError> {
    let model = &target.config.model;
    let trim = context.on_overflow == crate::config::OnOverflow::TrimOldest;
    let window = match target.config.context_window {
        Some(w)
            if trim
                && chat.body().len() as u64
                    + prefill.map_or(0, |p| p.len() as u64)
                    + RESERVE_BOUND
                    > u64::from(w) =>
        {
            w
        }
        _ => return request_body(target, chat, canonical, prefill).map(|b| (b, 0)),
    };
    let Some(req) = canonical.get(chat) else {
        return request_body(target, chat, canonical, prefill).map(|b| (b, 0));
    };
    let counter = canonical::context::TokenCounter::for_target(target.dialect, model);
    let reserve = req.max_tokens.unwrap_or(DEFAULT_RESERVE);
    if canonical::context::estimate_tokens(req, &counter).saturating_add(reserve) <= window {
        return request_body(target, chat, canonical, prefill).map(|b| (b, 0));
    }
    let (trimmed, dropped) = canonical::context::trim_to_fit(req, window, reserve, &counter)
        .map_err(|e| AttemptError::Untranslatable {
            message: format!(
                "the conversation does not fit {}'s context window ({e:?})",
                target.id()
            ),
        })?;
    let trimmed = match prefill {
        Some(p) => canonical::with_prefill(&trimmed, p),
        None => trimmed,
    };
    let body = target.dialect.write_request(&trimmed, model).map_err(|e| {
        AttemptError::Untranslatable {
            message: e.to_string(),
        }
    })?;
    Ok((body, dropped))
}

/// A non-streamed answer of `dialect` as an OpenAI chat completion, with its usage.
pub fn response_to_openai(
    dialect: Dialect,
    body: &[u8],
) -> Result<(Bytes, Option<Usage>), AttemptError> {
    let resp = dialect
        .parse_response(body)
        .map_err(|_| AttemptError::Malformed)?;
    let out = canonical::openai::write_response(&resp).map_err(|_| AttemptError::Malformed)?;
    let usage = resp.usage.map(|u| Usage {
        prompt_tokens: u.input,
        completion_tokens: u.output,
    });
    Ok((Bytes::from(out), usage))
}

/// An error answer of `dialect`, classified: the OpenAI `error.code` the failover loop reads,
/// the body rewritten in the OpenAI shape (for a client error returned as is), and a retry
/// delay the body names.
pub fn classify_error(
    dialect: Dialect,
    status: u16,
    body: &[u8],
) -> (Option<String>, Bytes, Option<Duration>) {
    let err = dialect.parse_error(status, body);
    let code = match err.class {
        ErrorClass::ContextLength => Some("context_length_exceeded".to_owned()),
        ErrorClass::ContentFilter => Some("content_filter".to_owned()),
        _ => err.code.clone(),
    };
    (
        code,
        Bytes::from(canonical::openai::write_error(&err)),
        err.retry_delay,
    )
}

struct Recode<E> {
    body: BoxStream<'static, Result<Bytes, E>>,
    sse: SseDecoder,
    decoder: StreamDecoder,
    encoder: StreamEncoder,
    ended: bool,
}

/// An SSE stream of one dialect re-encoded in another. It ends with the target dialect's
/// terminator only when the source said it was complete: a cut stays a cut.
fn recode<E: Send + 'static>(
    body: BoxStream<'static, Result<Bytes, E>>,
    from: Dialect,
    to: Dialect,
) -> BoxStream<'static, Result<Bytes, E>> {
    let state = Recode {
        body,
        sse: SseDecoder::new(),
        decoder: from.decoder(),
        encoder: to.encoder(true),
        ended: false,
    };
    futures_util::stream::unfold(state, |mut r| async move {
        loop {
            if r.ended {
                return None;
            }
            let bytes = match r.body.next().await? {
                Ok(bytes) => bytes,
                Err(e) => return Some((Err(e), r)),
            };
            r.sse.push(&bytes);
            let mut events = Vec::new();
            while let Some(ev) = r.sse.next_event() {
                // An event that cannot be read is skipped; the stream goes on.
                let _ = r.decoder.decode(ev.event.as_deref(), &ev.data, &mut events);
            }
            let mut out = Vec::new();
            for ev in &events {
                r.encoder.encode(ev, &mut out);
            }
            if r.decoder.is_done() {
                r.encoder.finish(&mut out);
                r.ended = true;
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), r));
            }
        }
    })
    .boxed()
}

/// An upstream stream of `dialect` as OpenAI SSE bytes (with the usage chunk).
pub fn stream_to_openai(upstream: ByteStream, dialect: Dialect) -> ByteStream {
    recode(upstream, dialect, Dialect::OpenAi)
}

/// The relay's OpenAI SSE bytes re-encoded for a client of another dialect.
pub fn stream_from_openai(
    body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
    dialect: Dialect,
) -> BoxStream<'static, Result<Bytes, std::convert::Infallible>> {
    recode(body, Dialect::OpenAi, dialect)
}

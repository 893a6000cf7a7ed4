//! The body an attempt sends: the request in the target's dialect, fitted to its context window,
//! optionally asking it to continue a partial answer (mid-stream continuation).

use std::sync::Arc;

use super::classify::AttemptError;
use super::Target;
use crate::canonical::{self, Dialect};
use crate::config::{ContextPolicy, OnOverflow};
use crate::metrics::bump;
use crate::wire::transcode::Canonical;
use crate::wire::ChatRequest;

/// The body for a target of `dialect`, optionally asking it to continue `prefill`.
pub fn request_body(
    target: &Target,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
) -> Result<Vec<u8>, AttemptError> {
    let (dialect, model) = (target.dialect, &target.config.model);
    if dialect == Dialect::OpenAi {
        let messages = prefill.map(|p| chat.prefill_messages(p));
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
///
/// One that is counted is counted on the blocking pool, not on the server thread: reading a
/// long conversation into the canonical model and tokenizing it take long enough (seconds, for
/// a hostile body) to hold every other request of the thread. The count itself is bounded and
/// cannot panic (`canonical::context`); a byte estimate used in its place is counted as
/// `switchyard_limits_total{limit="token_count"}`.
pub async fn fitted_body(
    target: &Arc<Target>,
    context: &ContextPolicy,
    chat: &ChatRequest,
    canonical: &Arc<Canonical>,
    prefill: Option<&str>,
) -> Result<(Vec<u8>, usize), AttemptError> {
    let trim = context.on_overflow == OnOverflow::TrimOldest;
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
    let (target, chat, canonical) = (target.clone(), chat.clone(), canonical.clone());
    let prefill = prefill.map(str::to_owned);
    let counted = tokio::task::spawn_blocking(move || {
        fit(&target, window, &chat, &canonical, prefill.as_deref())
    });
    match counted.await {
        Ok(fitted) => fitted,
        // Not expected (the tokenizer's panics are caught where it runs); the attempt fails
        // over rather than the request.
        Err(e) => Err(AttemptError::Untranslatable {
            message: format!("the conversation could not be counted: {e}"),
        }),
    }
}

/// [`fitted_body`]'s count and trim, on a blocking thread.
fn fit(
    target: &Target,
    window: u32,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
) -> Result<(Vec<u8>, usize), AttemptError> {
    let model = &target.config.model;
    let Some(req) = canonical.get(chat) else {
        return request_body(target, chat, canonical, prefill).map(|b| (b, 0));
    };
    let counter = canonical::context::TokenCounter::for_target(target.dialect, model);
    let reserve = req.max_tokens.unwrap_or(DEFAULT_RESERVE);
    let fitting = canonical::context::fit(req, window, reserve, &counter);
    if fitting.estimated {
        bump(&target.limits.token_count);
    }
    let (trimmed, dropped) = match fitting.outcome {
        Ok(None) => return request_body(target, chat, canonical, prefill).map(|b| (b, 0)),
        Ok(Some(trimmed)) => trimmed,
        Err(e) => {
            return Err(AttemptError::Untranslatable {
                message: format!(
                    "the conversation does not fit {}'s context window ({e:?})",
                    target.id()
                ),
            })
        }
    };
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

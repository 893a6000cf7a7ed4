//! The body an attempt sends: the request in the target's dialect, fitted to its context window,
//! optionally asking it to continue a partial answer (mid-stream continuation).

use super::classify::AttemptError;
use super::Target;
use crate::canonical::{self, Dialect};
use crate::config::{ContextPolicy, OnOverflow};
use crate::wire::transcode::Canonical;
use crate::wire::{ChatRequest, ClientWire};

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

/// An attempt's body and what it took to make it.
#[derive(Debug)]
pub struct Fitted {
    pub body: Vec<u8>,
    /// Turns dropped to fit the target's context window.
    pub turns_dropped: usize,
    /// The client's own body (same dialect, not the inner one): the answer comes back in the
    /// client's dialect and is passed on as it came.
    pub native: bool,
}

/// The body for a target, trimmed to its `context_window` when the conversation does not fit
/// (`on_overflow = "trim_oldest"`): the oldest turns go, the system prompt and the newest turns
/// stay, and a tool call keeps its result. A conversation that fits goes as the client sent it
/// to a target of its own dialect (`client`), else written for the target.
pub fn fitted_body(
    target: &Target,
    context: &ContextPolicy,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Result<Fitted, AttemptError> {
    let Some((trimmed, turns_dropped)) = trimmed(target, context, chat, canonical, prefill)? else {
        let native = prefill
            .is_none()
            .then(|| client?.native_body(target.dialect, &target.model_json))
            .flatten();
        return Ok(match native {
            Some(body) => Fitted {
                body,
                turns_dropped: 0,
                native: true,
            },
            None => Fitted {
                body: request_body(target, chat, canonical, prefill)?,
                turns_dropped: 0,
                native: false,
            },
        });
    };
    let trimmed = match prefill {
        Some(p) => canonical::with_prefill(&trimmed, p),
        None => trimmed,
    };
    let body = (target.dialect)
        .write_request(&trimmed, &target.config.model)
        .map_err(|e| AttemptError::Untranslatable {
            message: e.to_string(),
        })?;
    Ok(Fitted {
        body,
        turns_dropped,
        native: false,
    })
}

/// The conversation trimmed to the target's window, with the turns dropped; `None` when it
/// fits as it is. A body whose bytes plus a generous output reserve fit the window cannot
/// exceed it in tokens (a token is at least a byte), so most requests are not even counted.
fn trimmed(
    target: &Target,
    context: &ContextPolicy,
    chat: &ChatRequest,
    canonical: &Canonical,
    prefill: Option<&str>,
) -> Result<Option<(canonical::ChatRequest, usize)>, AttemptError> {
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
        _ => return Ok(None),
    };
    let Some(req) = canonical.get(chat) else {
        return Ok(None);
    };
    let counter =
        canonical::context::TokenCounter::for_target(target.dialect, &target.config.model);
    let reserve = req.max_tokens.unwrap_or(DEFAULT_RESERVE);
    if canonical::context::estimate_tokens(req, &counter).saturating_add(reserve) <= window {
        return Ok(None);
    }
    canonical::context::trim_to_fit(req, window, reserve, &counter)
        .map(Some)
        .map_err(|e| AttemptError::Untranslatable {
            message: format!(
                "the conversation does not fit {}'s context window ({e:?})",
                target.id()
            ),
        })
}

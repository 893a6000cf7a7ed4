//! The body an attempt sends: the request in the target's dialect, fitted to its context window,
//! optionally asking it to continue a partial answer (mid-stream continuation). A body for a
//! target that is not Gemini has the Gemini thought signatures carried in its tool-call ids cut
//! out (`canonical::gemini::signature`): they are Gemini's alone.

use std::sync::Arc;

use super::classify::AttemptError;
use super::Target;
use crate::canonical::{self, gemini, Dialect};
use crate::config::{ContextPolicy, OnOverflow};
use crate::metrics::bump;
use crate::wire::{ClientWire, Forms};

/// The body for a target of `dialect`, optionally asking it to continue `prefill`.
pub fn request_body(
    target: &Target,
    forms: &Forms,
    prefill: Option<&str>,
) -> Result<Vec<u8>, AttemptError> {
    let (dialect, model) = (target.dialect, &target.config.model);
    let unreadable =
        |why: &str| AttemptError::untranslatable(format!("the request could not be read: {why}"));
    if dialect == Dialect::OpenAi {
        let chat = forms.chat().map_err(unreadable)?;
        let messages = prefill.map(|p| chat.prefill_messages(p));
        return Ok(chat.upstream_body(&target.model_json, messages.as_deref()));
    }
    let untranslatable = |message: String| AttemptError::Untranslatable { message };
    let req = forms.canonical().map_err(unreadable)?;
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
/// to a target of its own dialect (`client`), else written for the target. A body whose bytes
/// plus a generous output reserve fit the window cannot exceed it in tokens (a token is at least
/// a byte), so most requests are not even counted.
///
/// One that is counted is counted on the blocking pool, not on the server thread: reading a
/// long conversation into the canonical model and tokenizing it take long enough (seconds, for
/// a hostile body) to hold every other request of the thread. The count itself is bounded and
/// cannot panic (`canonical::context`); a byte estimate used in its place is counted as
/// `switchyard_limits_total{limit="token_count"}`.
pub async fn fitted_body(
    target: &Arc<Target>,
    context: &ContextPolicy,
    forms: &Arc<Forms>,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Result<Fitted, AttemptError> {
    let fitted = match plan(target, context, forms, prefill, client) {
        Plan::AtOnce(fitted) => fitted,
        Plan::Count(window) => count(target, window, forms, prefill, client).await,
    };
    fitted.map(|f| unsigned(target, f))
}

/// [`fitted_body`] when the body needs no count, which is most of them: `None` when it does.
/// (The launch of every attempt asks: awaiting `fitted_body` for a body made at once cost it
/// twice the instructions.)
pub fn fitted_at_once(
    target: &Target,
    context: &ContextPolicy,
    forms: &Forms,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Option<Result<Fitted, AttemptError>> {
    match plan(target, context, forms, prefill, client) {
        Plan::AtOnce(fitted) => Some(fitted.map(|f| unsigned(target, f))),
        Plan::Count(_) => None,
    }
}

/// A body for a target other than Gemini without Gemini's thought signatures.
fn unsigned(target: &Target, mut fitted: Fitted) -> Fitted {
    if target.dialect != Dialect::Gemini {
        if let Some(stripped) = gemini::signature::strip(&fitted.body) {
            fitted.body = stripped;
        }
    }
    fitted
}

/// What a body takes: made at once, or counted against the target's window first.
enum Plan {
    AtOnce(Result<Fitted, AttemptError>),
    Count(u32),
}

fn plan(
    target: &Target,
    context: &ContextPolicy,
    forms: &Forms,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Plan {
    if let Some(reason) = client.and_then(|c| c.native_only.as_deref()) {
        // Only the client's own body to a target of its dialect will do: no translation,
        // no trimming (which writes the request anew).
        return Plan::AtOnce(
            match client.filter(|c| target.speaks(c.dialect) && prefill.is_none()) {
                Some(_) => as_sent(target, forms, prefill, client),
                None => Err(AttemptError::Unsupported {
                    message: format!("{} cannot serve this request: {reason}", target.id()),
                }),
            },
        );
    }
    let trim = context.on_overflow == OnOverflow::TrimOldest;
    match target.config.context_window {
        Some(w)
            if trim
                && forms.len() as u64 + prefill.map_or(0, |p| p.len() as u64) + RESERVE_BOUND
                    > u64::from(w) =>
        {
            Plan::Count(w)
        }
        _ => Plan::AtOnce(as_sent(target, forms, prefill, client)),
    }
}

/// The count (and trim) of a body that may not fit `window`, on the blocking pool.
async fn count(
    target: &Arc<Target>,
    window: u32,
    forms: &Arc<Forms>,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Result<Fitted, AttemptError> {
    let (t, f) = (target.clone(), forms.clone());
    let owned = prefill.map(str::to_owned);
    let counted = tokio::task::spawn_blocking(move || fit(&t, window, &f, owned.as_deref())).await;
    match counted {
        Ok(Ok(Some((body, turns_dropped)))) => Ok(Fitted {
            body,
            turns_dropped,
            native: false,
        }),
        Ok(Ok(None)) => as_sent(target, forms, prefill, client),
        Ok(Err(e)) => Err(e),
        // Not expected (the tokenizer's panics are caught where it runs); the attempt fails
        // over rather than the request.
        Err(e) => Err(AttemptError::Untranslatable {
            message: format!("the conversation could not be counted: {e}"),
        }),
    }
}

/// The body of a conversation that fits as it is: the client's own to a target of its dialect
/// (not for a prefill), else written for the target.
fn as_sent(
    target: &Target,
    forms: &Forms,
    prefill: Option<&str>,
    client: Option<&ClientWire>,
) -> Result<Fitted, AttemptError> {
    let native = prefill
        .is_none()
        .then(|| {
            let client = client.filter(|c| target.speaks(c.dialect))?;
            client.native_body(
                client.dialect,
                &target.provider.config.name,
                &target.model_json,
            )
        })
        .flatten();
    Ok(match native {
        Some(body) => Fitted {
            body,
            turns_dropped: 0,
            native: true,
        },
        None => Fitted {
            body: request_body(target, forms, prefill)?,
            turns_dropped: 0,
            native: false,
        },
    })
}

/// [`fitted_body`]'s count and trim, on a blocking thread: the trimmed body and the turns
/// dropped, or `None` when the conversation fits as it is.
fn fit(
    target: &Target,
    window: u32,
    forms: &Forms,
    prefill: Option<&str>,
) -> Result<Option<(Vec<u8>, usize)>, AttemptError> {
    let model = &target.config.model;
    let Ok(req) = forms.canonical() else {
        return Ok(None);
    };
    let counter = canonical::context::TokenCounter::for_target(target.dialect, model);
    let reserve = req.max_tokens.unwrap_or(DEFAULT_RESERVE);
    let fitting = canonical::context::fit(req, window, reserve, &counter);
    if fitting.estimated {
        bump(&target.limits.token_count);
    }
    let (trimmed, dropped) = match fitting.outcome {
        Ok(None) => return Ok(None),
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
    Ok(Some((body, dropped)))
}

//! Google Vertex AI: Gemini models (`publishers/google/models/{m}:generateContent`, or
//! `:streamGenerateContent?alt=sse` for streams) and Anthropic models
//! (`publishers/anthropic/models/{m}:rawPredict`, or `:streamRawPredict`), under
//! `{base_url}/v1/projects/{project}/locations/{location}`, with an OAuth 2 access token as a
//! bearer (`auth.rs`: from a service-account key or a user's application-default credentials,
//! cached and refreshed, or one given as it is).
//!
//! A model whose name starts with `claude` is Anthropic's; any other is Google's. The bodies
//! are the publishers' own with Vertex's changes ([`body`]): an Anthropic body has no `model`
//! (it is in the path) and Vertex's `anthropic_version`, and keeps `stream`; a Gemini body is
//! the Gemini API's (with a `role` on every content, as Vertex requires and the gateway's
//! Gemini writer always writes). Vertex's own errors (a quota, a missing model, bad
//! credentials) are Google's envelope, sometimes inside an array: the Gemini dialect reads them
//! as they are, and [`error_answer`] rewrites them into Anthropic's for an Anthropic model, so
//! each is classified by its dialect's rules.

pub mod auth;

use http::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::fields::{member, Fields};
use crate::config::ProviderConfig;

/// The `anthropic_version` Vertex's Anthropic models take.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// ...as a JSON string, written into every Claude body.
const VERSION_JSON: &str = "\"vertex-2023-10-16\"";

/// Whose model a target names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publisher {
    Google,
    Anthropic,
}

impl Publisher {
    /// The publisher of `model` (`claude-sonnet-4-5@20250929` is Anthropic's).
    pub fn of(model: &str) -> Publisher {
        if model.starts_with("claude") {
            Publisher::Anthropic
        } else {
            Publisher::Google
        }
    }
}

pub(super) fn chat_url(config: &ProviderConfig, model: &str, stream: bool) -> String {
    let (project, location) = config
        .vertex
        .as_ref()
        .map_or(("", ""), |v| (v.project.as_str(), v.location.as_str()));
    let (publisher, op) = match (Publisher::of(model), stream) {
        (Publisher::Anthropic, false) => ("anthropic", "rawPredict"),
        (Publisher::Anthropic, true) => ("anthropic", "streamRawPredict"),
        (Publisher::Google, false) => ("google", "generateContent"),
        (Publisher::Google, true) => ("google", "streamGenerateContent?alt=sse"),
    };
    format!(
        "{}/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}:{op}",
        config.base_url.trim_end_matches('/'),
    )
}

/// A publisher's request body as Vertex takes it. A Gemini body is the Gemini API's (the
/// gateway writes a role on every content, which Vertex requires); a body that is not a JSON
/// object is sent as it is (Vertex answers it).
pub fn body(publisher: Publisher, body: Vec<u8>) -> Vec<u8> {
    match publisher {
        Publisher::Anthropic => anthropic_body(&body).unwrap_or(body),
        Publisher::Google => body,
    }
}

/// Without `model`, with Vertex's `anthropic_version` first; everything else as it came.
fn anthropic_body(body: &[u8]) -> Option<Vec<u8>> {
    let Fields(fields) = serde_json::from_slice(body).ok()?;
    let mut out = Vec::with_capacity(body.len() + 40);
    out.push(b'{');
    member(&mut out, "anthropic_version", VERSION_JSON.as_bytes());
    for (key, value) in &fields {
        if !matches!(key.as_ref(), "model" | "anthropic_version") {
            member(&mut out, key, value.get().as_bytes());
        }
    }
    out.push(b'}');
    Some(out)
}

/// An error answer for an Anthropic model as its dialect reads it: Google's envelope (Vertex's
/// own refusals, perhaps inside an array) rewritten into Anthropic's, with the status Anthropic
/// would use. Anthropic's own errors, and every error for a Gemini model (the Gemini dialect
/// reads Google's envelope, wrapped or not), pass as they came (`None`).
pub fn error_answer(
    publisher: Publisher,
    status: StatusCode,
    body: &[u8],
) -> Option<(StatusCode, Vec<u8>)> {
    #[derive(Deserialize)]
    struct Envelope<'a> {
        #[serde(borrow)]
        error: Google<'a>,
    }
    #[derive(Deserialize)]
    struct Google<'a> {
        #[serde(default)]
        code: Option<u16>,
        #[serde(borrow, default)]
        message: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        status: Option<std::borrow::Cow<'a, str>>,
    }
    if publisher == Publisher::Google {
        return None;
    }
    let body = body.trim_ascii();
    let inner = if body.first() == Some(&b'[') {
        let list: Vec<&RawValue> = serde_json::from_slice(body).ok()?;
        list.first()?.get().as_bytes()
    } else {
        body
    };
    let google = serde_json::from_slice::<Envelope<'_>>(inner).ok()?.error;
    // Anthropic's own envelope has `error.type`, not `code` or `status`.
    if google.code.is_none() && google.status.is_none() {
        return None;
    }
    let word = google.status.as_deref().unwrap_or("");
    let (status, kind) = match word {
        "RESOURCE_EXHAUSTED" => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
        "UNAVAILABLE" => (StatusCode::SERVICE_UNAVAILABLE, "overloaded_error"),
        "UNAUTHENTICATED" => (StatusCode::UNAUTHORIZED, "authentication_error"),
        "PERMISSION_DENIED" => (StatusCode::FORBIDDEN, "permission_error"),
        "NOT_FOUND" => (StatusCode::NOT_FOUND, "not_found_error"),
        "DEADLINE_EXCEEDED" => (StatusCode::GATEWAY_TIMEOUT, "api_error"),
        "INTERNAL" | "UNKNOWN" => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => {
            (StatusCode::BAD_REQUEST, "invalid_request_error")
        }
        _ => match status.as_u16() {
            429 => (status, "rate_limit_error"),
            401 => (status, "authentication_error"),
            403 => (status, "permission_error"),
            404 => (status, "not_found_error"),
            503 | 529 => (status, "overloaded_error"),
            s if s >= 500 => (status, "api_error"),
            _ => (status, "invalid_request_error"),
        },
    };
    let message = google.message.as_deref().unwrap_or("");
    let message = if word.is_empty() {
        message.to_owned()
    } else {
        format!("{word}: {message}")
    };
    let envelope = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message},
    });
    Some((status, serde_json::to_vec(&envelope).unwrap_or_default()))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

//! Errors of translation, and upstream errors classified for the failover loop.
//!
//! Each dialect's `parse_error` reads that provider's error body (and its in-band stream error
//! events) into one [`UpstreamError`] whose [`ErrorClass`] is what the failover loop needs: is it
//! the prompt's length (try a larger window), a refusal (return it, never retry), the provider's
//! load or quota (go elsewhere), bad credentials (go elsewhere), or something else (decide by
//! status). Anthropic and Gemini give a context-length error no code of its own, so their
//! classifiers read the message: that is the one place a message is matched, where the error is
//! born.

use std::borrow::Cow;
use std::time::Duration;

/// A body that is not what its dialect's schema says.
#[derive(Debug, thiserror::Error)]
pub enum TranslateError {
    /// Not JSON, or JSON of the wrong shape.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON of the right syntax with a value the dialect does not allow.
    #[error("{0}")]
    Invalid(Cow<'static, str>),
}

impl TranslateError {
    /// An invalid-value error.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        TranslateError::Invalid(message.into())
    }
}

/// What kind of failure an upstream error is, as far as routing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The prompt does not fit the model's context window: a larger window may succeed.
    ContextLength,
    /// A safety system refused the request: return it, never retry it.
    ContentFilter,
    /// Rate limit or quota (429, Gemini `RESOURCE_EXHAUSTED`).
    RateLimited,
    /// The provider is overloaded or unavailable (Anthropic `overloaded_error`, 503, 529).
    Overloaded,
    /// The provider refused our credentials: a configuration problem at this target only.
    Auth,
    /// Anything else: decide by the status.
    Other,
}

impl ErrorClass {
    /// A low-cardinality label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            ErrorClass::ContextLength => "context_length",
            ErrorClass::ContentFilter => "content_filter",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Overloaded => "overloaded",
            ErrorClass::Auth => "auth",
            ErrorClass::Other => "other",
        }
    }

    /// The class a bare HTTP status implies, for bodies that say nothing more.
    pub fn from_status(status: u16) -> Self {
        match status {
            401 | 403 => ErrorClass::Auth,
            429 => ErrorClass::RateLimited,
            503 | 529 => ErrorClass::Overloaded,
            _ => ErrorClass::Other,
        }
    }
}

/// An upstream error, parsed from any dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// The HTTP status; 0 for an error event inside a 200 stream.
    pub status: u16,
    /// What routing needs to know.
    pub class: ErrorClass,
    /// The provider's own type or status word (`overloaded_error`, `RESOURCE_EXHAUSTED`,
    /// `invalid_request_error`), when it sent one.
    pub kind: Option<String>,
    /// The provider's machine-readable code (OpenAI `error.code`), when it sent one.
    pub code: Option<String>,
    /// The provider's message.
    pub message: String,
    /// How long the provider asks us to wait, when the body says (Gemini `RetryInfo`).
    pub retry_delay: Option<Duration>,
}

impl UpstreamError {
    /// An error of `class` with a message, for writing in a dialect.
    pub fn new(status: u16, class: ErrorClass, message: impl Into<String>) -> Self {
        UpstreamError {
            status,
            class,
            kind: None,
            code: None,
            message: message.into(),
            retry_delay: None,
        }
    }

    /// The error of a body that is not the dialect's error JSON: classified by status alone,
    /// the start of the body as the message.
    pub(crate) fn unparsed(status: u16, body: &[u8]) -> Self {
        const MAX_MESSAGE: usize = 200;
        let text = String::from_utf8_lossy(body);
        let mut end = text.len().min(MAX_MESSAGE);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let message = if text.trim().is_empty() {
            format!("upstream answered {status} with no error body")
        } else {
            text[..end].trim().to_owned()
        };
        UpstreamError::new(status, ErrorClass::from_status(status), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsed_bodies_are_classified_by_status() {
        let e = UpstreamError::unparsed(503, b"<html>Service Unavailable</html>");
        assert_eq!(e.class, ErrorClass::Overloaded);
        assert_eq!(e.message, "<html>Service Unavailable</html>");
        let e = UpstreamError::unparsed(429, b"");
        assert_eq!(e.class, ErrorClass::RateLimited);
        assert!(e.message.contains("429"));
        let long = "é".repeat(300);
        let e = UpstreamError::unparsed(500, long.as_bytes());
        assert_eq!(e.class, ErrorClass::Other);
        assert!(e.message.len() <= 200);
    }
}

//! Gemini's error envelope, `{"error":{"code","message","status","details"}}`, read and written.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::canonical::error::{ErrorClass, UpstreamError};

#[derive(Deserialize)]
struct WireErrorBody<'a> {
    #[serde(borrow)]
    error: WireError<'a>,
}

#[derive(Deserialize)]
pub(super) struct WireError<'a> {
    #[serde(default)]
    code: Option<u16>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    details: Vec<WireDetail<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDetail<'a> {
    #[serde(default, borrow)]
    reason: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    retry_delay: Option<Cow<'a, str>>,
}

/// Reads `{"error":{"code","message","status","details"}}` (also wrapped in an array, as a
/// non-SSE stream sends it); anything else is classified by status.
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    let parsed = if body.trim_ascii_start().starts_with(b"[") {
        serde_json::from_slice::<Vec<WireErrorBody<'_>>>(body)
            .ok()
            .and_then(|v| v.into_iter().next())
    } else {
        serde_json::from_slice::<WireErrorBody<'_>>(body).ok()
    };
    match parsed {
        Some(wire) => from_wire(status, wire.error),
        None => UpstreamError::unparsed(status, body),
    }
}

/// An error object, from a body or a stream chunk.
pub(super) fn from_wire(status: u16, wire: WireError<'_>) -> UpstreamError {
    let message = wire.message.map(Cow::into_owned).unwrap_or_default();
    let http = if status == 0 {
        wire.code.unwrap_or(0)
    } else {
        status
    };
    let bad_key = wire
        .details
        .iter()
        .any(|d| d.reason.as_deref() == Some("API_KEY_INVALID"));
    let retry_delay = wire
        .details
        .iter()
        .find_map(|d| d.retry_delay.as_deref().and_then(parse_delay));
    let kind = wire.status.map(Cow::into_owned);
    let class = match kind.as_deref() {
        _ if bad_key => ErrorClass::Auth,
        Some("RESOURCE_EXHAUSTED") => ErrorClass::RateLimited,
        Some("UNAVAILABLE") => ErrorClass::Overloaded,
        Some("UNAUTHENTICATED" | "PERMISSION_DENIED") => ErrorClass::Auth,
        // "The input token count (N) exceeds the maximum number of tokens allowed (M)."
        Some("INVALID_ARGUMENT")
            if message.contains("token count") && message.contains("exceeds") =>
        {
            ErrorClass::ContextLength
        }
        _ => ErrorClass::from_status(http),
    };
    UpstreamError {
        status,
        class,
        kind,
        code: wire.code.map(|c| c.to_string()),
        message,
        retry_delay,
    }
}

/// `"22s"`, `"8.94s"`.
fn parse_delay(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// Gemini's HTTP code and status word for an error.
pub(super) fn status_of(err: &UpstreamError) -> (u16, &'static str) {
    match err.class {
        ErrorClass::RateLimited => (429, "RESOURCE_EXHAUSTED"),
        ErrorClass::Overloaded => (503, "UNAVAILABLE"),
        ErrorClass::Auth => (403, "PERMISSION_DENIED"),
        ErrorClass::ContextLength | ErrorClass::ContentFilter => (400, "INVALID_ARGUMENT"),
        ErrorClass::Other => match err.status {
            400 => (400, "INVALID_ARGUMENT"),
            404 => (404, "NOT_FOUND"),
            504 => (504, "DEADLINE_EXCEEDED"),
            s if (400..500).contains(&s) => (s, "FAILED_PRECONDITION"),
            s if (500..600).contains(&s) => (s, "INTERNAL"),
            _ => (500, "INTERNAL"),
        },
    }
}

#[derive(Serialize)]
pub(super) struct OutErrorBody<'a> {
    pub(super) error: OutError<'a>,
}

#[derive(Serialize)]
pub(super) struct OutError<'a> {
    pub(super) code: u16,
    pub(super) message: &'a str,
    pub(super) status: &'a str,
}

/// The error object written for `err`.
pub(super) fn out_error(err: &UpstreamError) -> OutErrorBody<'_> {
    let (code, status) = status_of(err);
    OutErrorBody {
        error: OutError {
            code: if err.status == 0 { code } else { err.status },
            message: &err.message,
            status,
        },
    }
}

/// Writes `err` as Gemini's error envelope.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    serde_json::to_vec(&out_error(err)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errors() {
        let quota = br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}"#;
        let e = parse_error(429, quota);
        assert_eq!(e.class, ErrorClass::RateLimited);
        assert_eq!(e.retry_delay, Some(Duration::from_secs(22)));
        let long = br#"[{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#;
        assert_eq!(parse_error(400, long).class, ErrorClass::ContextLength);
        let key = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#;
        assert_eq!(parse_error(400, key).class, ErrorClass::Auth);
        let busy = br#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#;
        assert_eq!(parse_error(503, busy).class, ErrorClass::Overloaded);
    }
}

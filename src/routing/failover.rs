//! What an attempt's failure means for the request: every upstream error is classified where it
//! is born into an [`AttemptError`], and the failover loop reads only [`AttemptError::next_step`].

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;

use super::health::Verdict;
use crate::config::FailoverPolicy;

/// How one upstream call failed.
#[derive(Debug, Clone)]
pub enum AttemptError {
    /// The connection could not be made: the provider never saw the request.
    Connect,
    /// The connection broke after the request was sent and before a response arrived.
    Reset,
    /// No complete answer within `attempt_timeout`.
    Timeout,
    /// A stream that produced no content within `first_token_timeout`.
    FirstTokenTimeout,
    /// The provider answered with an error status.
    Status {
        status: StatusCode,
        /// From `retry-after-ms` or `retry-after` (seconds).
        retry_after: Option<Duration>,
        /// The provider's machine-readable `error.code`, when it sent one.
        code: Option<String>,
        /// The provider's body, returned as is for client errors.
        body: Bytes,
    },
    /// A success status with a body that is not what the wire format says.
    Malformed,
    /// A stream that carried an error event before its first content.
    InBand { message: String },
    /// A stream that ended before its first content.
    EmptyStream,
    /// The request could not be written in this target's dialect.
    Untranslatable { message: String },
}

/// What the failover loop does after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// A client error that would fail anywhere: hand the provider's answer to the client.
    ReturnAsIs,
    /// Try the next target.
    NextTarget,
    /// The prompt is too long for this target: try the next target with a larger window.
    NextLargerWindow,
    /// The provider never saw the request: one more try on the same target is safe.
    RetryNotSent,
    /// A quick failure (5xx, reset): the same target may be retried (`same_target_retries`).
    RetryQuick,
    /// 429 with `Retry-After`: wait here if short enough, else park the target and move on.
    RetryAfter(Duration),
}

/// The OpenAI (and Azure) error code of a prompt that exceeds the model's context window.
const CONTEXT_LENGTH_CODE: &str = "context_length_exceeded";

impl AttemptError {
    /// A low-cardinality label for logs, metrics and the audit path.
    pub fn kind(&self) -> &'static str {
        match self {
            AttemptError::Connect => "connect",
            AttemptError::Reset => "reset",
            AttemptError::Timeout => "timeout",
            AttemptError::FirstTokenTimeout => "first_token_timeout",
            AttemptError::Status { .. } => "status",
            AttemptError::Malformed => "malformed",
            AttemptError::InBand { .. } => "in_band_error",
            AttemptError::EmptyStream => "empty_stream",
            AttemptError::Untranslatable { .. } => "untranslatable",
        }
    }

    /// The upstream status, when there was one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            AttemptError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether this counts against the target's breaker and SLIs: 5xx, 429, 401/403/404/408,
    /// timeouts, stalls, transport errors and malformed replies do; other 4xx (the client's
    /// doing, a context-length error included) do not.
    pub fn verdict(&self) -> Verdict {
        match self {
            AttemptError::Status { status, .. } => match status.as_u16() {
                401 | 403 | 404 | 408 | 429 | 500..=599 => Verdict::Failed,
                _ => Verdict::Neutral,
            },
            // Our limitation, not the target's.
            AttemptError::Untranslatable { .. } => Verdict::Neutral,
            _ => Verdict::Failed,
        }
    }

    /// True for failures that are about time (they map to 504 when every attempt timed out).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            AttemptError::Timeout | AttemptError::FirstTokenTimeout
        )
    }

    /// A short human description for the error message's path.
    pub fn describe(&self) -> String {
        match self {
            AttemptError::Status {
                status,
                code: Some(code),
                ..
            } => format!("{} ({code})", status.as_u16()),
            AttemptError::Status { status, .. } => status.as_u16().to_string(),
            AttemptError::InBand { message } => format!("error event: {message}"),
            AttemptError::Untranslatable { message } => format!("cannot translate: {message}"),
            other => other.kind().replace('_', " "),
        }
    }

    /// Decide what the failover loop does next, given the route's policy.
    pub fn next_step(&self, policy: &FailoverPolicy) -> NextStep {
        match self {
            AttemptError::Connect => NextStep::RetryNotSent,
            AttemptError::Reset => NextStep::RetryQuick,
            AttemptError::Timeout
            | AttemptError::FirstTokenTimeout
            | AttemptError::Malformed
            | AttemptError::InBand { .. }
            | AttemptError::EmptyStream
            | AttemptError::Untranslatable { .. } => NextStep::NextTarget,
            AttemptError::Status {
                status,
                retry_after,
                code,
                ..
            } => {
                if *status == StatusCode::BAD_REQUEST
                    && code.as_deref() == Some(CONTEXT_LENGTH_CODE)
                {
                    return NextStep::NextLargerWindow;
                }
                if !policy.on_status.contains(&status.as_u16()) {
                    return NextStep::ReturnAsIs;
                }
                match (status.as_u16(), retry_after) {
                    (429, Some(wait)) => NextStep::RetryAfter(*wait),
                    (500..=599, _) => NextStep::RetryQuick,
                    _ => NextStep::NextTarget,
                }
            }
        }
    }
}

/// Read `retry-after-ms` (OpenAI) or `retry-after` in seconds; HTTP dates are ignored.
pub fn parse_retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let num = |name: &str| -> Option<f64> {
        let v: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v)
    };
    let secs = num("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| num("retry-after"))?;
    Duration::try_from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64())).ok()
}

/// A `Retry-After` longer than this is read as this: a target that long gone is the breaker's
/// business, not a park's.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(20 * 60);

/// The machine-readable `error.code` of an OpenAI-shaped error body.
pub fn error_code(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: Option<Inner>,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: Option<serde_json::Value>,
    }
    let env: Envelope = serde_json::from_slice(body).ok()?;
    match env.error?.code? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::num::NonZeroU32;

    fn policy() -> FailoverPolicy {
        FailoverPolicy {
            on_status: vec![401, 403, 404, 408, 429, 500, 502, 503, 504, 529],
            max_attempts: NonZeroU32::new(3).unwrap(),
            same_target_retries: 0,
            retry_after_wait: Duration::ZERO,
            mid_stream: crate::config::MidStream::Continue,
            attempt_timeout: Duration::from_secs(30),
            first_token_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(120),
        }
    }

    fn status(code: u16, err_code: Option<&str>, retry_after: Option<u64>) -> AttemptError {
        AttemptError::Status {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after: retry_after.map(Duration::from_secs),
            code: err_code.map(str::to_owned),
            body: Bytes::new(),
        }
    }

    #[test]
    fn client_errors_are_returned_as_is() {
        let p = policy();
        for code in [400, 413, 422] {
            assert_eq!(status(code, None, None).next_step(&p), NextStep::ReturnAsIs);
        }
        assert_eq!(
            status(400, Some("content_filter"), None).next_step(&p),
            NextStep::ReturnAsIs
        );
        assert_eq!(status(501, None, None).next_step(&p), NextStep::ReturnAsIs);
    }

    #[test]
    fn failover_statuses_and_transport_errors_move_on() {
        let p = policy();
        assert_eq!(
            status(400, Some("context_length_exceeded"), None).next_step(&p),
            NextStep::NextLargerWindow
        );
        assert_eq!(status(503, None, None).next_step(&p), NextStep::RetryQuick);
        assert_eq!(status(401, None, None).next_step(&p), NextStep::NextTarget);
        assert_eq!(status(429, None, None).next_step(&p), NextStep::NextTarget);
        assert_eq!(
            status(429, None, Some(2)).next_step(&p),
            NextStep::RetryAfter(Duration::from_secs(2))
        );
        assert_eq!(AttemptError::Connect.next_step(&p), NextStep::RetryNotSent);
        assert_eq!(AttemptError::Timeout.next_step(&p), NextStep::NextTarget);
        assert_eq!(
            AttemptError::FirstTokenTimeout.next_step(&p),
            NextStep::NextTarget
        );
    }

    #[test]
    fn only_the_targets_own_failures_count_against_it() {
        for code in [401, 403, 404, 408, 429, 500, 503, 529] {
            assert_eq!(
                status(code, None, None).verdict(),
                Verdict::Failed,
                "{code}"
            );
        }
        for code in [400, 413, 422] {
            assert_eq!(
                status(code, None, None).verdict(),
                Verdict::Neutral,
                "{code}"
            );
        }
        assert_eq!(AttemptError::Timeout.verdict(), Verdict::Failed);
        assert_eq!(AttemptError::Connect.verdict(), Verdict::Failed);
    }

    #[test]
    fn reads_retry_after_and_error_codes() {
        let mut h = http::HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(1500)));
        h.clear();
        h.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), None);
        assert_eq!(
            error_code(br#"{"error":{"message":"x","code":"context_length_exceeded"}}"#).as_deref(),
            Some("context_length_exceeded")
        );
        assert_eq!(error_code(b"<html>"), None);
    }
}

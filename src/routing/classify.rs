//! What an upstream failure means, decided in one place: every error is classified where it is
//! born into an [`AttemptError`] (an error status by its dialect's [`ErrorClass`], see
//! [`status_error`]); from it follow the failover step ([`AttemptError::next_step`]), the
//! breaker's verdict ([`AttemptError::verdict`]), how a returned provider error counts
//! ([`returned_outcome`]) and the status the client gets when nothing worked
//! ([`final_status`]). Nothing else reads a status code or a message to decide.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;

use super::health::Verdict;
use super::path::{AttemptOutcome, RequestOutcome};
use crate::canonical::{self, Dialect, ErrorClass};
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
        /// What kind of failure the provider's dialect says it is.
        class: ErrorClass,
        /// From `retry-after-ms` or `retry-after` (seconds), or the body (Gemini `RetryInfo`).
        retry_after: Option<Duration>,
        /// The provider's machine-readable code, when it sent one (for the error message).
        code: Option<String>,
        /// The provider's body, returned for client errors: as it came from a target of the
        /// inner dialect or of a client's own passed through, else in the inner (OpenAI) shape.
        body: Bytes,
        /// The dialect `body` is in.
        dialect: Dialect,
    },
    /// A success status with a body that is not what the wire format says.
    Malformed,
    /// An answer larger than `max_response_body` (a stream: before its first content).
    TooLarge,
    /// A stream that carried an error event before its first content.
    InBand { message: String },
    /// A stream that ended before its first content.
    EmptyStream,
    /// The request could not be written in this target's dialect.
    Untranslatable { message: String },
    /// The request needs what only a target of the client's dialect taking its body as it came
    /// has (a Responses API built-in tool), and this target is not one: it was not asked.
    Unsupported { message: String },
    /// The call could not be given its credentials: a token that could not be fetched, a
    /// signature that could not be made. It was not sent.
    Credentials { message: String },
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

/// An upstream error status whose own failure it is (it counts against the target's breaker
/// and SLIs): bad credentials, a missing model or deployment, a request timeout, rate limits and
/// server errors. Other 4xx are the client's doing and would fail anywhere.
pub fn target_at_fault(status: StatusCode) -> bool {
    matches!(status.as_u16(), 401 | 403 | 404 | 408 | 429 | 500..=599)
}

/// An error answer from a target of `dialect`, classified by that dialect's rules; its body
/// is kept as it came from an OpenAI-dialect target or when the request was the client's own
/// (`native`: the client speaks that dialect), and written in the OpenAI shape (the inner
/// form) for the others.
pub fn status_error(
    dialect: Dialect,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Bytes,
    native: bool,
) -> AttemptError {
    let err = dialect.parse_error(status.as_u16(), &body);
    let (body, dialect) = if dialect == Dialect::OpenAi || native {
        (body, dialect)
    } else {
        let inner = Bytes::from(canonical::openai::write_error(&err));
        (inner, Dialect::OpenAi)
    };
    AttemptError::Status {
        status,
        class: err.class,
        retry_after: retry_after.or(err.retry_delay),
        code: err.code,
        body,
        dialect,
    }
}

/// How a provider's error that is returned to the client as is counts for the request.
pub fn returned_outcome(status: StatusCode) -> RequestOutcome {
    if target_at_fault(status) {
        RequestOutcome::Error
    } else {
        RequestOutcome::ClientError
    }
}

/// The status and error code the client gets when no attempt succeeded: 400 when no target
/// could take the request as it is, 504 when time ran out (or every attempt timed out), 503
/// when every target was overloaded or rate-limited or a retry budget stopped the retries,
/// else 502.
pub fn final_status(
    errors: &[AttemptError],
    out_of_time: bool,
    budget_stopped: bool,
) -> (StatusCode, &'static str) {
    let unsupported = |e: &&AttemptError| matches!(e, AttemptError::Unsupported { .. });
    if !errors.is_empty() && errors.iter().all(|e| unsupported(&e)) {
        // No target can take the request as it is (a built-in tool only the provider's own
        // Responses API has): the client's to change, not a provider failure.
        return (StatusCode::BAD_REQUEST, "unsupported_request");
    }
    // The targets that could not take the request say nothing of the providers' state.
    let tried = || errors.iter().filter(|e| !unsupported(e));
    let all_timeouts = tried().all(AttemptError::is_timeout);
    let all_overloaded = tried().all(|e| {
        matches!(
            e.class(),
            Some(ErrorClass::RateLimited | ErrorClass::Overloaded)
        )
    });
    if out_of_time || all_timeouts {
        (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
    } else if all_overloaded || budget_stopped {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream_unavailable")
    } else {
        (StatusCode::BAD_GATEWAY, "upstream_failed")
    }
}

impl AttemptError {
    /// The request could not be written for a target: why.
    pub fn untranslatable(message: impl Into<String>) -> AttemptError {
        AttemptError::Untranslatable {
            message: message.into(),
        }
    }

    /// What this makes of the attempt, for logs, metrics and the audit path.
    pub fn outcome(&self) -> AttemptOutcome {
        match self {
            AttemptError::Connect => AttemptOutcome::Connect,
            AttemptError::Reset => AttemptOutcome::Reset,
            AttemptError::Timeout => AttemptOutcome::Timeout,
            AttemptError::FirstTokenTimeout => AttemptOutcome::FirstTokenTimeout,
            AttemptError::Status { .. } => AttemptOutcome::Status,
            AttemptError::Malformed => AttemptOutcome::Malformed,
            AttemptError::TooLarge => AttemptOutcome::TooLarge,
            AttemptError::InBand { .. } => AttemptOutcome::InBandError,
            AttemptError::EmptyStream => AttemptOutcome::EmptyStream,
            AttemptError::Untranslatable { .. } => AttemptOutcome::Untranslatable,
            AttemptError::Unsupported { .. } => AttemptOutcome::Unsupported,
            AttemptError::Credentials { .. } => AttemptOutcome::Credentials,
        }
    }

    /// A low-cardinality label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        self.outcome().label()
    }

    /// The class of an error status.
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            AttemptError::Status { class, .. } => Some(*class),
            _ => None,
        }
    }

    /// The upstream status, when there was one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            AttemptError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether this counts against the target's breaker and SLIs: statuses that are the
    /// target's fault ([`target_at_fault`]), timeouts, stalls, transport errors and malformed
    /// replies do; other 4xx (the client's doing, a context-length error included) do not.
    pub fn verdict(&self) -> Verdict {
        match self {
            AttemptError::Status { status, .. } if target_at_fault(*status) => Verdict::Failed,
            AttemptError::Status { .. } => Verdict::Neutral,
            // Our limitation, not the target's.
            AttemptError::Untranslatable { .. } | AttemptError::Unsupported { .. } => {
                Verdict::Neutral
            }
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
            AttemptError::Unsupported { message } => format!("not asked: {message}"),
            AttemptError::Credentials { message } => format!("credentials: {message}"),
            AttemptError::TooLarge => "answer larger than max_response_body".into(),
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
            | AttemptError::TooLarge
            | AttemptError::InBand { .. }
            | AttemptError::EmptyStream
            | AttemptError::Untranslatable { .. }
            | AttemptError::Unsupported { .. }
            | AttemptError::Credentials { .. } => NextStep::NextTarget,
            AttemptError::Status {
                status,
                retry_after,
                class,
                ..
            } => {
                match class {
                    // Whatever the status, never resent to the same model; a larger window
                    // may take it.
                    ErrorClass::ContextLength if status.is_client_error() => {
                        return NextStep::NextLargerWindow
                    }
                    // A refusal is the answer: returned with its reason, never retried.
                    ErrorClass::ContentFilter => return NextStep::ReturnAsIs,
                    _ => {}
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
            builtin_tools: crate::config::BuiltinTools::Native,
            attempt_timeout: Duration::from_secs(30),
            first_token_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(120),
        }
    }

    /// An OpenAI error answer of status `code`, with `err_code` as its `error.code`.
    fn status(code: u16, err_code: Option<&str>, retry_after: Option<u64>) -> AttemptError {
        let body = serde_json::json!({"error": {"message": "m", "code": err_code}}).to_string();
        status_error(
            Dialect::OpenAi,
            StatusCode::from_u16(code).unwrap(),
            retry_after.map(Duration::from_secs),
            Bytes::from(body),
            false,
        )
    }

    fn code(err: &AttemptError) -> Option<&str> {
        match err {
            AttemptError::Status { code, .. } => code.as_deref(),
            _ => None,
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
        let error_code = |body: &'static [u8]| {
            let err = status_error(
                Dialect::OpenAi,
                StatusCode::BAD_REQUEST,
                None,
                body.into(),
                false,
            );
            code(&err).map(str::to_owned)
        };
        assert_eq!(
            error_code(br#"{"error":{"message":"x","code":"context_length_exceeded"}}"#).as_deref(),
            Some("context_length_exceeded")
        );
        assert_eq!(error_code(b"<html>"), None);
    }
}

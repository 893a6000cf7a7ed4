//! A request's path: what each upstream call came to ([`AttemptOutcome`]), one record per call
//! ([`Attempt`], kept by the race, the relay and, converted once, the audit record), and what
//! the request came to ([`RequestOutcome`], the `outcome` of `switchyard_requests_total`).

use std::sync::Arc;
use std::time::Duration;

use super::select::Picked;
use super::Target;
use crate::audit::{millis, AuditAttempt};

/// How one upstream call ended, or why a target was passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// It answered (for a stream: it committed, and then ended complete).
    Ok,
    /// Another attempt answered first; this one was cancelled.
    HedgeLost,
    /// The request ended (a client error returned, the client went away) while it ran.
    Cancelled,
    /// Passed over: the target's breaker was open.
    SkippedBreaker,
    /// Passed over: the target's retry budget was spent.
    SkippedBudget,
    /// The connection could not be made.
    Connect,
    /// The connection broke before a response.
    Reset,
    /// No answer within `attempt_timeout`.
    Timeout,
    /// No first content within `first_token_timeout`.
    FirstTokenTimeout,
    /// An error status.
    Status,
    /// A success status with a body that is not what the wire format says.
    Malformed,
    /// An answer over `max_response_body` (a stream: before its first content).
    TooLarge,
    /// An error event inside a stream.
    InBandError,
    /// A stream that ended before its first content.
    EmptyStream,
    /// The request could not be written in the target's dialect.
    Untranslatable,
    /// Not asked: the request needs what only a provider's own API has (a Responses API
    /// built-in tool) and the target would get it translated.
    Unsupported,
    /// A committed stream whose connection closed before the answer was complete.
    Cut,
    /// A committed stream that sent no content for `idle_timeout`.
    Stall,
    /// Ended by the shutdown: its drain ran out of time (`shutdown_timeout`).
    Shutdown,
    /// A restarted continuation whose answer differed from what the client had.
    Diverged,
    /// A continuation whose target refused the prefill (it was asked again from the start).
    PrefillRejected,
    /// The call could not be given its credentials (an access token, a signature).
    Credentials,
}

impl AttemptOutcome {
    /// The label in logs, metrics and the audit path.
    pub const fn label(self) -> &'static str {
        match self {
            AttemptOutcome::Ok => "ok",
            AttemptOutcome::HedgeLost => "hedge_lost",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::SkippedBreaker => "skipped_breaker",
            AttemptOutcome::SkippedBudget => "skipped_budget",
            AttemptOutcome::Connect => "connect",
            AttemptOutcome::Reset => "reset",
            AttemptOutcome::Timeout => "timeout",
            AttemptOutcome::FirstTokenTimeout => "first_token_timeout",
            AttemptOutcome::Status => "status",
            AttemptOutcome::Malformed => "malformed",
            AttemptOutcome::TooLarge => "too_large",
            AttemptOutcome::InBandError => "in_band_error",
            AttemptOutcome::EmptyStream => "empty_stream",
            AttemptOutcome::Untranslatable => "untranslatable",
            AttemptOutcome::Unsupported => "unsupported",
            AttemptOutcome::Cut => "cut",
            AttemptOutcome::Stall => "stall",
            AttemptOutcome::Shutdown => "shutdown",
            AttemptOutcome::Diverged => "diverged",
            AttemptOutcome::PrefillRejected => "prefill_rejected",
            AttemptOutcome::Credentials => "credentials",
        }
    }
}

/// One upstream call made for a request (or a target passed over), with what came of it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub target: Arc<Target>,
    /// Since the request started.
    pub start: Duration,
    pub duration: Duration,
    pub outcome: AttemptOutcome,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
    /// Mid-stream continuation: characters of the answer this call was asked to continue.
    pub carried_chars: Option<usize>,
    /// Why it went to its target; `None` for a target passed over.
    pub picked: Option<Picked>,
    /// Its span in the request's trace (the parent id of the `traceparent` it sent); 0 when
    /// the request is not traced, or for a target passed over.
    pub span: u64,
}

impl Attempt {
    /// A target passed over without a call.
    pub fn skipped(target: &Arc<Target>, outcome: AttemptOutcome) -> Attempt {
        Attempt {
            target: target.clone(),
            start: Duration::ZERO,
            duration: Duration::ZERO,
            outcome,
            status: None,
            carried_chars: None,
            picked: None,
            span: 0,
        }
    }

    /// The entry of the audit record's path.
    pub fn audit(&self) -> AuditAttempt {
        AuditAttempt {
            target: self.target.id().to_owned(),
            start_ms: millis(self.start),
            duration_ms: millis(self.duration),
            outcome: self.outcome.label().to_owned(),
            status: self.status,
            carried_chars: self.carried_chars.map(|c| c as u64),
            picked: self.picked.map(|p| p.label().to_owned()),
        }
    }
}

/// What a client request came to, as `switchyard_requests_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// An answer (a stream: one that ended complete).
    Ok,
    /// The provider's client error, returned as is.
    ClientError,
    /// No answer: every attempt failed, or the target's own failure was returned.
    Error,
    /// The client went away before the answer ended.
    Cancelled,
}

impl RequestOutcome {
    /// Every outcome, in label order.
    pub const ALL: [RequestOutcome; 4] = [
        RequestOutcome::Ok,
        RequestOutcome::ClientError,
        RequestOutcome::Error,
        RequestOutcome::Cancelled,
    ];

    /// The `outcome` label.
    pub const fn label(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::ClientError => "client_error",
            RequestOutcome::Error => "error",
            RequestOutcome::Cancelled => "cancelled",
        }
    }

    /// Position in [`RequestOutcome::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

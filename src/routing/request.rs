//! What goes into the failover loop and what comes out: a client [`Request`] on its way through
//! a route, and its [`Outcome`]: an [`Answer`] or a [`Failure`], with the path that led there.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use http::StatusCode;

use super::classify::{final_status, AttemptError};
use super::path::{Attempt, AttemptOutcome};
use super::relay::StreamReport;
use super::{Route, Target};
use crate::canonical::Dialect;
use crate::wire::{ClientWire, Forms, Usage};

/// A client request on its way through a route.
#[derive(Debug)]
pub struct Request {
    pub id: String,
    /// The client asked for SSE.
    pub stream: bool,
    /// The client wants the final usage of a stream (an OpenAI client that asked for it; every
    /// other dialect reports it always).
    pub client_wants_usage: bool,
    /// `x-switchyard-failover: off` makes exactly one attempt on the first target.
    pub failover: bool,
    /// `x-switchyard-timeout`: shortens the route's `request_timeout`.
    pub timeout: Option<Duration>,
    /// The inner and canonical forms, for targets of another dialect than the client's,
    /// trimming and continuation (made on first use).
    pub forms: Arc<Forms>,
    /// What targets of the client's own dialect get as the client sent it.
    pub client: ClientWire,
    /// The conversation it belongs to (with the audit log on, or where the route keeps
    /// sessions on one target).
    pub session: Option<crate::wire::session::Session>,
    /// For the audit record (made only with the audit log on): the trace id of the request's
    /// trace, or of the client's `traceparent`.
    pub trace_id: Option<String>,
    /// Its ids when it is traced (`[telemetry]`): attempts send their `traceparent` upstream.
    pub trace: Option<crate::wire::trace::Trace>,
}

/// What the client gets. Each body is in the inner (OpenAI) dialect, or in the client's own
/// when a target of that dialect answered a request passed through (`dialect` says which); the
/// edge converts what is not in the client's.
pub enum Answer {
    /// A whole answer.
    Full {
        body: Bytes,
        usage: Option<Usage>,
        dialect: Dialect,
    },
    /// A committed stream of SSE bytes.
    Stream {
        body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
        /// How the stream ended; closed unsent if the client went away.
        report: tokio::sync::oneshot::Receiver<StreamReport>,
        dialect: Dialect,
    },
    /// A client error that would fail anywhere: the provider's own status and body.
    Upstream {
        status: StatusCode,
        body: Bytes,
        dialect: Dialect,
    },
}

/// The outcome of a request: an answer or a failure, and the path that led there.
pub struct Outcome {
    pub result: Result<Answer, Failure>,
    /// A hedge produced the answer.
    pub hedged: bool,
    /// Turns dropped to fit the serving target's context window.
    pub turns_dropped: usize,
    /// The entry of `path` whose target answered (also a client error returned as is).
    pub served: Option<usize>,
    /// Attempts made, in order.
    pub path: Vec<Attempt>,
    /// Targets passed over because their breaker was open.
    pub skipped: Vec<Arc<Target>>,
    /// Targets passed over because their retry budget was spent.
    pub budget_skipped: Vec<Arc<Target>>,
}

impl Outcome {
    /// The target that produced the answer, if one did.
    pub fn served_by(&self) -> Option<&Arc<Target>> {
        self.served
            .and_then(|i| self.path.get(i))
            .map(|a| &a.target)
    }

    /// Take the whole path: targets passed over (breaker open, then retry budget spent), then
    /// the attempts; and the entry of the attempt that answered. (`path` and the skips are
    /// left empty.)
    pub fn take_path(&mut self) -> (Vec<Attempt>, Option<usize>) {
        let skips = self.skipped.len() + self.budget_skipped.len();
        let mut path = Vec::with_capacity(skips + self.path.len());
        path.extend(
            (self.skipped.drain(..)).map(|t| Attempt::skipped(&t, AttemptOutcome::SkippedBreaker)),
        );
        path.extend(
            (self.budget_skipped.drain(..))
                .map(|t| Attempt::skipped(&t, AttemptOutcome::SkippedBudget)),
        );
        let served = self.served.take().map(|i| skips + i);
        path.append(&mut self.path);
        (path, served)
    }
}

/// Every attempt failed, or none could be made.
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Failure {
    /// The client-visible error when no attempt succeeded: it names every step of the path.
    /// `errors` are the failed attempts' errors, in path order.
    pub fn of_path(
        route: &Route,
        path: &[Attempt],
        errors: &[AttemptError],
        out_of_time: bool,
        budget_spent: bool,
        budget_skipped: &[Arc<Target>],
    ) -> Failure {
        if path.is_empty() {
            return Failure {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "no_target_available",
                message: format!(
                    "no target of route {} can take the request now (all are parked by Retry-After)",
                    route.config.name
                ),
            };
        }
        let steps: Vec<String> = path
            .iter()
            .filter(|a| a.outcome != AttemptOutcome::Ok)
            .zip(errors)
            .map(|(a, e)| {
                format!(
                    "{}: {} after {} ms",
                    a.target.id(),
                    e.describe(),
                    a.duration.as_millis()
                )
            })
            .collect();
        let (status, code) = final_status(
            errors,
            out_of_time,
            budget_spent || !budget_skipped.is_empty(),
        );
        let mut budget_note = String::new();
        if budget_spent {
            budget_note.push_str(" (no retry: the route's retry budget is spent)");
        }
        if !budget_skipped.is_empty() {
            let ids: Vec<&str> = budget_skipped.iter().map(|t| t.id()).collect();
            budget_note.push_str(&format!(
                " (not retried on {}: retry budget spent)",
                ids.join(", ")
            ));
        }
        Failure {
            status,
            code,
            message: format!(
                "route {}: all {} attempt(s) failed{budget_note}: {}",
                route.config.name,
                errors.len(),
                steps.join("; ")
            ),
        }
    }
}

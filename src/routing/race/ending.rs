//! How a race ends: with an answer or a provider's error returned as is ([`Race::finish`]),
//! when the gateway shuts down ([`Race::shut_down`]), or with nothing left to try
//! ([`Race::give_up`]); and what each end counts.

use std::sync::Arc;

use tokio::time::Instant;

use super::super::classify::{returned_outcome, AttemptError, NextStep};
use super::super::path::{AttemptOutcome, RequestOutcome};
use super::super::request::{Answer, Failure, Outcome};
use super::super::Route;
use super::Race;

impl Race<'_> {
    pub(super) fn finish(
        &mut self,
        result: Result<Answer, Failure>,
        hedged: bool,
        served: Option<usize>,
        served_idx: usize,
        now: Instant,
    ) -> Outcome {
        let outcome = Outcome {
            result,
            hedged,
            turns_dropped: 0,
            served,
            path: std::mem::take(&mut self.path),
            skipped: std::mem::take(&mut self.skipped),
            budget_skipped: std::mem::take(&mut self.budget_skipped),
        };
        count(self.route, &outcome, self.started, served_idx, now);
        outcome
    }

    /// The shutdown's drain ran out of time (`shutdown_timeout`) with this request in flight:
    /// its attempts are ended and the client gets a 503 that says why (so does its audit
    /// record). Not held against any target: the gateway is going away, not the provider.
    pub(super) fn shut_down(&mut self) -> Outcome {
        let now = Instant::now();
        self.record_running(AttemptOutcome::Shutdown, now);
        let failure = Failure {
            status: http::StatusCode::SERVICE_UNAVAILABLE,
            code: "shutting_down",
            message: format!(
                "route {}: the gateway is shutting down and its drain (shutdown_timeout) ran out \
                 with this request in flight",
                self.route.config.name
            ),
        };
        self.route
            .count_request(None, RequestOutcome::Error, now - self.started);
        Outcome {
            result: Err(failure),
            hedged: false,
            turns_dropped: 0,
            served: None,
            path: std::mem::take(&mut self.path),
            skipped: std::mem::take(&mut self.skipped),
            budget_skipped: std::mem::take(&mut self.budget_skipped),
        }
    }

    /// Nothing more to try: the client gets an error that lists the path. A context-length
    /// error that found no larger window is the client's to handle (trim and retry), so it is
    /// returned as the provider gave it.
    pub(super) fn give_up(&mut self) -> Outcome {
        let now = Instant::now();
        let policy = &self.route.config.failover;
        if let Some(AttemptError::Status {
            status,
            body,
            dialect,
            ..
        }) = self
            .errors
            .last()
            .filter(|e| e.next_step(policy) == NextStep::NextLargerWindow)
        {
            let answer = Answer::Upstream {
                status: *status,
                body: body.clone(),
                dialect: *dialect,
            };
            let served = Some(self.path.len() - 1);
            let last = self.path.last().map(|a| a.target.clone());
            let idx = last
                .and_then(|t| self.route.targets.iter().position(|x| Arc::ptr_eq(x, &t)))
                .unwrap_or(0);
            return self.finish(Ok(answer), false, served, idx, now);
        }
        let out_of_time = now >= self.deadline;
        let f = Failure::of_path(
            self.route,
            &self.path,
            &self.errors,
            out_of_time,
            self.budget_spent,
            &self.budget_skipped,
        );
        let idx = self.cur.idx;
        self.finish(Err(f), false, None, idx, now)
    }
}

/// Metrics and the request SLI of the target the request started on.
fn count(route: &Route, outcome: &Outcome, started: Instant, served_idx: usize, now: Instant) {
    let (request_outcome, served) = match &outcome.result {
        // A provider's own error passed on (failover off, or a client error).
        Ok(Answer::Upstream { status, .. }) => (returned_outcome(*status), Some(served_idx)),
        Ok(_) => (RequestOutcome::Ok, Some(served_idx)),
        Err(_) => (RequestOutcome::Error, None),
    };
    if matches!(outcome.result, Ok(Answer::Stream { .. })) {
        // How a stream ends is counted by the relay when it does.
        route.observe_duration(now - started);
    } else {
        route.count_request(served, request_outcome, now - started);
    }
    let first = outcome
        .skipped
        .first()
        .or(outcome.path.first().map(|a| &a.target));
    if let Some(first) = first {
        first
            .health
            .request(now, request_outcome != RequestOutcome::Error);
    }
}

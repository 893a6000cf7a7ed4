//! The failover loop, top to bottom: pick the next usable target (breaker closed, not parked),
//! start an attempt, and while it runs wait for whichever comes first: its answer, its failure
//! (the error's classification decides whether to retry here, move on, or hand the provider's
//! answer back), or the hedge delay (a second attempt races the first on the next healthy
//! target; the first good answer wins and the others are dropped, which closes their
//! connections). The client sees one answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, FuturesUnordered};
use futures_util::StreamExt;
use http::StatusCode;
use tokio::time::Instant;

use super::launch::Done;
use super::race::{Launch, Race};
use super::relay::StreamReport;
use super::stream::Usage;
use super::wire::Canonical;
use super::{Route, Target};
use crate::api::chat_request::ChatRequest;
use crate::audit::{millis, AuditAttempt};

/// A client request on its way through a route.
#[derive(Debug)]
pub struct Request {
    pub id: String,
    pub chat: ChatRequest,
    /// `x-switchyard-failover: off` makes exactly one attempt on the first target.
    pub failover: bool,
    /// `x-switchyard-timeout`: shortens the route's `request_timeout`.
    pub timeout: Option<Duration>,
    /// The canonical form, for targets of another dialect (made on first use).
    pub canonical: Arc<Canonical>,
}

/// One upstream call made for a request.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub target: Arc<Target>,
    /// Since the request started.
    pub start: Duration,
    pub duration: Duration,
    /// `ok` or an [`super::failover::AttemptError::kind`].
    pub outcome: &'static str,
    pub status: Option<u16>,
}

/// What the client gets.
pub enum Answer {
    /// A whole chat completion.
    Full { body: Bytes, usage: Option<Usage> },
    /// A committed stream of SSE bytes.
    Stream {
        body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
        /// How the stream ended; closed unsent if the client went away.
        report: tokio::sync::oneshot::Receiver<StreamReport>,
    },
    /// A client error that would fail anywhere: the provider's own status and body.
    Upstream { status: StatusCode, body: Bytes },
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
    pub path: Vec<AttemptRecord>,
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

    /// The path as the audit log keeps it: targets passed over (breaker open, then retry budget
    /// spent), then the attempts.
    pub fn audit_path(&self) -> Vec<AuditAttempt> {
        let skip = |t: &Arc<Target>, outcome: &str| AuditAttempt {
            target: t.id().to_owned(),
            start_ms: 0.0,
            duration_ms: 0.0,
            outcome: outcome.into(),
            status: None,
            carried_chars: None,
        };
        let skipped = (self.skipped.iter().map(|t| skip(t, "skipped_breaker"))).chain(
            self.budget_skipped
                .iter()
                .map(|t| skip(t, "skipped_budget")),
        );
        let attempts = self.path.iter().map(|a| AuditAttempt {
            target: a.target.id().to_owned(),
            start_ms: millis(a.start),
            duration_ms: millis(a.duration),
            outcome: a.outcome.to_owned(),
            status: a.status,
            carried_chars: None,
        });
        skipped.chain(attempts).collect()
    }
}

/// Every attempt failed, or none could be made.
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// Serve a request on a route with soft failover and hedging.
pub async fn dispatch(route: &Arc<Route>, req: &Request) -> Outcome {
    let mut race = Race::new(route, req);
    let mut in_flight: FuturesUnordered<BoxFuture<'_, Done>> = FuturesUnordered::new();
    loop {
        // Start what is due now without a timer: a timer rounds up to the next millisecond.
        let can_launch = race.can_launch();
        if !can_launch {
            race.next_at = None;
        }
        if can_launch && race.next_at.is_some_and(|t| t <= Instant::now()) {
            match race.launch_next(&mut in_flight) {
                Launch::Started | Launch::Later => continue,
                Launch::Stop if race.running.is_empty() => break,
                Launch::Stop => {}
            }
        }
        if race.running.is_empty() && !(race.can_launch() && race.next_at.is_some()) {
            break;
        }
        tokio::select! {
            Some(done) = in_flight.next(), if !race.running.is_empty() => {
                if let Some(outcome) = race.on_done(done) {
                    return outcome;
                }
            }
            () = until(race.next_at), if race.next_at.is_some() => {}
            () = until(race.hedge_at), if race.hedge_at.is_some() && !race.running.is_empty() => {
                race.fire_hedge(&mut in_flight);
            }
            else => break,
        }
    }
    race.give_up()
}

/// Sleep until `at`, or forever.
async fn until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

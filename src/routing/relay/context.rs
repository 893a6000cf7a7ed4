//! What a relay is given (who is relaying, for what request) and what it reports: why a
//! committed stream broke, and how it ended.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::routing::continuation::Continuation;
use crate::routing::path::{Attempt, AttemptOutcome};
use crate::routing::select::Picked;
use crate::routing::Route;
use crate::wire::Usage;

/// Who is relaying: for the log lines a broken stream writes, the target's health (which learns
/// how the attempt ended when the stream does), and continuation.
#[derive(Debug)]
pub struct RelayContext {
    pub request_id: String,
    pub route: Arc<Route>,
    /// The index in the route of the target that committed.
    pub target_idx: usize,
    /// Why the committed attempt went to its target.
    pub picked: Picked,
    pub attempt_start: Instant,
    /// The committed attempt's span in the request's trace (0 untraced).
    pub span: u64,
    /// When the client request started.
    pub request_start: Instant,
    /// The request's deadline (`request_timeout`, or the client's shorter
    /// `x-switchyard-timeout`): the stream ends there, whatever it is doing.
    pub deadline: Instant,
    /// `Some` when `mid_stream = "continue"`.
    pub continuation: Option<Continuation>,
    /// Told how the stream ended; dropped unsent when the client went away first.
    pub report: Option<tokio::sync::oneshot::Sender<StreamReport>>,
}

/// Why a committed stream broke.
#[derive(Debug, Clone)]
pub enum StreamCut {
    /// The connection failed or closed before the answer was complete.
    Cut,
    /// No content for `idle_timeout`.
    Stall(Duration),
    /// The upstream sent an error event.
    InBand(String),
    /// The request's deadline passed.
    Deadline(Duration),
    /// The gateway is shutting down and its drain ran out of time.
    Shutdown,
}

impl StreamCut {
    /// A human description for the error event.
    pub fn describe(&self) -> String {
        match self {
            StreamCut::Cut => "upstream connection closed before the answer was complete".into(),
            StreamCut::Stall(d) => format!("upstream sent no content for {} ms", d.as_millis()),
            StreamCut::InBand(m) => format!("upstream error: {m}"),
            StreamCut::Deadline(d) => format!(
                "the request's deadline (request_timeout) passed after {} ms",
                d.as_millis()
            ),
            StreamCut::Shutdown => "the gateway is shutting down (shutdown_timeout)".into(),
        }
    }

    /// What it makes of the attempt that was streaming.
    pub fn outcome(&self) -> AttemptOutcome {
        match self {
            StreamCut::Cut => AttemptOutcome::Cut,
            StreamCut::Stall(_) => AttemptOutcome::Stall,
            StreamCut::InBand(_) => AttemptOutcome::InBandError,
            StreamCut::Deadline(_) => AttemptOutcome::Timeout,
            StreamCut::Shutdown => AttemptOutcome::Shutdown,
        }
    }
}

/// How a relayed stream ended.
#[derive(Debug, Clone)]
pub struct StreamReport {
    /// Why the stream did not end complete (`None`: it did).
    pub error: Option<String>,
    pub usage: Option<Usage>,
    /// Every upstream call that streamed this answer (or tried to continue it), the committed
    /// one first.
    pub attempts: Vec<Attempt>,
}

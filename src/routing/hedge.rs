//! Delayed parallel retries (hedging): when the first attempt has not answered (first content,
//! for streams) within the hedge delay, a second attempt starts on the next healthy target and
//! the first good answer wins. The delay is a fixed duration or a percentile of the target's
//! recent latency (time to first token for streams), with a fixed fallback until the window
//! holds enough samples; hedges are capped by the route's hedge budget and share its retry
//! budget, so slowness never multiplies load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Target;
use crate::config::{FailoverPolicy, HedgeDelay, HedgePolicy};
use crate::metrics::{names, Registry};

/// Samples needed in a target's window before its percentile replaces the fallback delay.
pub const MIN_SAMPLES: u64 = 20;
/// The delay used until a target has enough samples.
pub const FALLBACK_DELAY: Duration = Duration::from_secs(2);
/// No hedge fires sooner than this after its attempt started.
pub const MIN_DELAY: Duration = Duration::from_millis(10);

/// Outcome labels of `switchyard_hedges_total`.
pub const OUTCOMES: [&str; 5] = [
    "fired",
    "won",
    "lost",
    "skipped_budget",
    "skipped_no_target",
];

/// A hedge outcome, indexing [`OUTCOMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgeOutcome {
    Fired = 0,
    Won = 1,
    Lost = 2,
    SkippedBudget = 3,
    SkippedNoTarget = 4,
}

/// A route's hedge counters.
#[derive(Debug)]
pub struct HedgeMetrics {
    counters: [Arc<AtomicU64>; 5],
}

impl HedgeMetrics {
    /// The counters of route `route`.
    pub fn new(registry: &Registry, route: &str) -> Self {
        HedgeMetrics {
            counters: OUTCOMES
                .map(|o| registry.counter(names::HEDGES, &[("route", route), ("outcome", o)])),
        }
    }

    /// Count one outcome.
    pub fn count(&self, outcome: HedgeOutcome) {
        self.counters[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// How long to let an attempt on `target` run before hedging it.
pub fn delay(
    policy: &HedgePolicy,
    failover: &FailoverPolicy,
    target: &Target,
    stream: bool,
    now: Instant,
) -> Duration {
    let ceiling = if stream {
        failover.first_token_timeout.min(failover.attempt_timeout)
    } else {
        failover.attempt_timeout
    } / 2;
    let d = match policy.delay {
        HedgeDelay::Fixed(d) => d,
        HedgeDelay::Percentile(q) => target
            .health
            .hedge_delay(now, stream, q, MIN_SAMPLES)
            .unwrap_or(FALLBACK_DELAY),
    };
    d.clamp(MIN_DELAY, ceiling.max(MIN_DELAY))
}

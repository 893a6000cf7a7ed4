//! Per-target SLIs over rolling time windows: attempt success rate (before failover), request
//! success rate (after failover, for requests that started on the target), latency and
//! time-to-first-token percentiles from HDR histograms. The same windows feed the hedge delay.

mod rolling;

use std::time::Duration;

use tokio::time::Instant;

pub use rolling::{histogram, RollingCounts, RollingHistogram, MAX_MICROS};

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// What `/admin/status` shows of a target's SLIs.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SliSnapshot {
    /// Successful attempts / attempts, before failover.
    pub attempt_success_rate: Option<f64>,
    pub attempts_in_window: u64,
    /// Requests that started on this target and got an answer (from any target) / those requests.
    pub request_success_rate: Option<f64>,
    pub requests_in_window: u64,
    /// Successful attempts, full answer (non-streamed) or whole stream.
    pub latency_ms: Option<Percentiles>,
    /// Streams: time to the first content.
    pub ttft_ms: Option<Percentiles>,
}

/// The rolling SLIs of one target.
#[derive(Debug)]
pub struct Sli {
    attempts: RollingCounts,
    requests: RollingCounts,
    latency: RollingHistogram,
    ttft: RollingHistogram,
}

/// Slots in every rolling window: the window moves in steps of window/6.
const SLOTS: usize = 6;

impl Sli {
    /// Empty SLIs over `window`.
    pub fn new(window: Duration, now: Instant) -> Self {
        Sli {
            attempts: RollingCounts::new(window, SLOTS, now),
            requests: RollingCounts::new(window, SLOTS, now),
            latency: RollingHistogram::new(window, SLOTS, now),
            ttft: RollingHistogram::new(window, SLOTS, now),
        }
    }

    /// One attempt's outcome; `latency` of successful ones.
    pub fn attempt(&mut self, now: Instant, ok: bool, latency: Option<Duration>) {
        self.attempts.add(now, ok);
        if let Some(l) = latency {
            self.latency.record(now, l);
        }
    }

    /// A stream's time to first content.
    pub fn first_token(&mut self, now: Instant, ttft: Duration) {
        self.ttft.record(now, ttft);
    }

    /// A request that started here ended, answered or not.
    pub fn request(&mut self, now: Instant, ok: bool) {
        self.requests.add(now, ok);
    }

    /// A percentile of recent latency (`stream`: of time to first token), if there are at least
    /// `min_samples`.
    pub fn latency_percentile(
        &mut self,
        now: Instant,
        stream: bool,
        q: f64,
        min_samples: u64,
    ) -> Option<Duration> {
        let h = if stream {
            &mut self.ttft
        } else {
            &mut self.latency
        };
        h.percentile(now, q, min_samples)
    }

    /// For `/admin/status`.
    pub fn snapshot(&mut self, now: Instant) -> SliSnapshot {
        let (a_ok, a_n) = self.attempts.counts(now);
        let (r_ok, r_n) = self.requests.counts(now);
        let rate = |ok: u64, n: u64| (n > 0).then(|| ok as f64 / n as f64);
        SliSnapshot {
            attempt_success_rate: rate(a_ok, a_n),
            attempts_in_window: a_n,
            request_success_rate: rate(r_ok, r_n),
            requests_in_window: r_n,
            latency_ms: self.latency.percentiles(now),
            ttft_ms: self.ttft.percentiles(now),
        }
    }
}

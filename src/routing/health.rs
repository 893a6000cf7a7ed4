//! What the gateway knows about one target's health, kept across reloads: its circuit breaker,
//! its SLIs and its metric handles. One short lock per attempt; transitions are logged and
//! counted here, so callers only report outcomes.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Breaker, Manual, Snapshot, State, Transition};
use super::events::Events;
use crate::config::BreakerPolicy;
use crate::metrics::{names, AtomicHistogram, Registry};
use crate::stats::{Sli, SliSnapshot};

/// How an attempt ended, as far as health is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The target answered properly.
    Ok,
    /// The target failed (5xx, 429, 401/403/404, timeouts, stalls, transport, malformed).
    Failed,
    /// Not the target's doing (a client error, a cancelled call): not counted.
    Neutral,
}

struct Inner {
    breaker: Breaker,
    sli: Sli,
    /// Hedge delays (non-stream, stream) computed at `.0`, reused for a second: a percentile
    /// merges the window's histograms, too much work for every request.
    hedge_cache: Option<(Instant, f64, [Option<Duration>; 2])>,
}

/// How long a computed hedge delay is reused.
const HEDGE_CACHE_FOR: Duration = Duration::from_secs(1);

/// Health of one target.
pub struct Health {
    id: String,
    inner: Mutex<Inner>,
    registry: Arc<Registry>,
    state_gauge: Arc<AtomicI64>,
    upstream_ok: Arc<AtomicHistogram>,
    upstream_failed: Arc<AtomicHistogram>,
    ttft: Arc<AtomicHistogram>,
    events: Arc<Events>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// Fresh health for target `id`.
    pub fn new(
        id: &str,
        policy: BreakerPolicy,
        registry: Arc<Registry>,
        events: Arc<Events>,
    ) -> Health {
        let now = Instant::now();
        let target = [("target", id)];
        Health {
            id: id.to_owned(),
            inner: Mutex::new(Inner {
                sli: Sli::new(policy.window, now),
                breaker: Breaker::new(policy, now),
                hedge_cache: None,
            }),
            state_gauge: registry.gauge(names::BREAKER_STATE, &target),
            upstream_ok: registry.histogram(
                names::UPSTREAM_DURATION,
                &[("target", id), ("outcome", "ok")],
            ),
            upstream_failed: registry.histogram(
                names::UPSTREAM_DURATION,
                &[("target", id), ("outcome", "failed")],
            ),
            ttft: registry.histogram(names::TTFT, &target),
            registry,
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take a reloaded policy, keeping state.
    pub fn set_policy(&self, policy: BreakerPolicy) {
        self.lock().breaker.set_policy(policy);
    }

    fn transition(&self, t: Option<Transition>) {
        let Some(t) = t else { return };
        self.state_gauge
            .store(i64::from(t.to.gauge()), Ordering::Relaxed);
        self.registry.inc(
            names::BREAKER_TRANSITIONS,
            &[("target", &self.id), ("to", t.to.as_str())],
        );
        self.events
            .push("breaker", None, &self.id, t.to.as_str(), t.reason.as_str());
        tracing::warn!(
            target = %self.id, from = t.from.as_str(), to = t.to.as_str(), reason = t.reason.as_str(),
            "breaker transition"
        );
    }

    /// May a user request go here now?
    pub fn admit(&self, now: Instant) -> bool {
        let (ok, t) = self.lock().breaker.admit(now, fastrand::f64());
        self.transition(t);
        ok
    }

    /// Is a synthetic probe due? (Also moves an elapsed hold to half-open.)
    pub fn probe_due(&self, now: Instant) -> bool {
        let (due, t) = self.lock().breaker.probe_due(now);
        self.transition(t);
        due
    }

    /// How long until the target takes traffic again.
    pub fn recovery_eta(&self, now: Instant) -> Duration {
        self.lock().breaker.recovery_eta(now)
    }

    /// One attempt (or probe) ended after `elapsed`.
    pub fn attempt(&self, now: Instant, verdict: Verdict, elapsed: Duration) {
        self.record(now, verdict, elapsed, true);
    }

    /// A stream attempt ended after `elapsed`: counted like an attempt, but its length (the
    /// answer's, not the target's speed) stays out of the latency SLI; its time to first token
    /// was recorded at the commit point.
    pub fn stream_ended(&self, now: Instant, verdict: Verdict, elapsed: Duration) {
        self.record(now, verdict, elapsed, false);
    }

    fn record(&self, now: Instant, verdict: Verdict, elapsed: Duration, latency: bool) {
        let t = {
            let mut inner = self.lock();
            match verdict {
                Verdict::Neutral => None,
                Verdict::Ok => {
                    inner.sli.attempt(now, true, latency.then_some(elapsed));
                    inner.breaker.record(now, false)
                }
                Verdict::Failed => {
                    inner.sli.attempt(now, false, None);
                    inner.breaker.record(now, true)
                }
            }
        };
        match verdict {
            Verdict::Ok => self.upstream_ok.observe(elapsed),
            Verdict::Failed => self.upstream_failed.observe(elapsed),
            Verdict::Neutral => {}
        }
        self.transition(t);
    }

    /// A stream attempt's time to first content.
    pub fn first_token(&self, now: Instant, ttft: Duration) {
        self.lock().sli.first_token(now, ttft);
        self.ttft.observe(ttft);
    }

    /// A request that started on this target ended.
    pub fn request(&self, now: Instant, ok: bool) {
        self.lock().sli.request(now, ok);
    }

    /// A percentile of recent latency (streams: time to first token), with enough samples.
    pub fn latency_percentile(
        &self,
        now: Instant,
        stream: bool,
        q: f64,
        min_samples: u64,
    ) -> Option<Duration> {
        self.lock()
            .sli
            .latency_percentile(now, stream, q, min_samples)
    }

    /// A percentile `q` of recent latency (streams: time to first token) as a hedge delay,
    /// with at least `min_samples`; recomputed at most once a second.
    pub fn hedge_delay(
        &self,
        now: Instant,
        stream: bool,
        q: f64,
        min_samples: u64,
    ) -> Option<Duration> {
        let mut inner = self.lock();
        let fresh = inner
            .hedge_cache
            .filter(|(at, cq, _)| *cq == q && now.saturating_duration_since(*at) < HEDGE_CACHE_FOR);
        let delays = match fresh {
            Some((_, _, d)) => d,
            None => {
                let d = [
                    inner.sli.latency_percentile(now, false, q, min_samples),
                    inner.sli.latency_percentile(now, true, q, min_samples),
                ];
                inner.hedge_cache = Some((now, q, d));
                d
            }
        };
        delays[usize::from(stream)]
    }

    /// An operator's override; returns the state after it.
    pub fn manual(&self, now: Instant, action: Manual) -> State {
        let mut inner = self.lock();
        let t = inner.breaker.manual(now, action);
        let state = inner.breaker.state(now);
        drop(inner);
        self.transition(t);
        state
    }

    /// Breaker and SLIs for `/admin/status`.
    pub fn snapshot(&self, now: Instant) -> (Snapshot, SliSnapshot) {
        let mut inner = self.lock();
        let b = inner.breaker.snapshot(now);
        (b, inner.sli.snapshot(now))
    }
}

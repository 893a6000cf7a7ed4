//! What the gateway knows about one target's health, kept across reloads: its circuit breaker,
//! its SLIs and its metric handles. One short lock per attempt; transitions are logged and
//! counted here, so callers only report outcomes.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::breaker::{Adopt, Breaker, Manual, Remote, Snapshot, State, Transition, TripReason};
use super::events::Events;
use crate::clock::wall_ms;
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
    /// A state this replica decided (at this wall time, ms) and the cluster has not been told
    /// of yet.
    unpublished: Option<(u64, Adopt)>,
    /// When (wall time, ms) this replica last decided a state itself: a state decided
    /// elsewhere before that is stale here and not taken over.
    decided_at: u64,
    /// Kept only for a target of an adaptive route ([`Health::watch`]).
    signals: Option<Box<Signals>>,
}

/// What adaptive selection reads of a target: its attempts and latencies since it was first
/// watched. A reader keeps its last read and takes the difference.
#[derive(Debug, Clone)]
pub struct Signals {
    pub ok: u64,
    pub failed: u64,
    /// Full answers' latency, microseconds.
    pub latency: hdrhistogram::Histogram<u64>,
    /// Streams' time to first content, microseconds.
    pub ttft: hdrhistogram::Histogram<u64>,
}

impl Signals {
    fn new() -> Signals {
        Signals {
            ok: 0,
            failed: 0,
            latency: crate::stats::histogram(),
            ttft: crate::stats::histogram(),
        }
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, crate::stats::MAX_MICROS)
}

/// No rate-limit headroom reported yet.
const NO_HEADROOM: u64 = u64::MAX;

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
    /// Wakes the cluster sync when there is a state to publish.
    publish: Arc<Notify>,
    /// Wakes the health prober when the breaker leaves `closed`.
    probe: Arc<Notify>,
    /// The lowest remaining/limit share of the provider's rate-limit headers in the last
    /// answer that had them (`f64` bits), [`NO_HEADROOM`] before one did.
    headroom: AtomicU64,
}

/// What the cluster sync takes from a target at each round.
#[derive(Debug, Clone, Copy)]
pub struct ClusterReport {
    /// A state to publish, with the wall time (ms) it was decided at (this replica's breaker
    /// changed since the last round).
    pub state: Option<(u64, Adopt)>,
    /// This replica's own counts.
    pub counts: Remote,
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
        publish: Arc<Notify>,
        probe: Arc<Notify>,
    ) -> Health {
        let now = Instant::now();
        let target = [("target", id)];
        Health {
            id: id.to_owned(),
            inner: Mutex::new(Inner {
                sli: Sli::new(policy.window, now),
                breaker: Breaker::new(policy, now),
                hedge_cache: None,
                unpublished: None,
                decided_at: 0,
                signals: None,
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
            publish,
            probe,
            headroom: AtomicU64::new(NO_HEADROOM),
        }
    }

    /// Keep [`Signals`] from now on (a route that reads them names this target).
    pub fn watch(&self) {
        let mut inner = self.lock();
        if inner.signals.is_none() {
            inner.signals = Some(Box::new(Signals::new()));
        }
    }

    /// The signals so far, if watched.
    pub fn signals(&self) -> Option<Signals> {
        self.lock().signals.as_deref().cloned()
    }

    /// An answer reported `share` of its rate limit remaining.
    pub fn set_headroom(&self, share: f64) {
        self.headroom.store(share.to_bits(), Ordering::Relaxed);
    }

    /// The headroom the last answer that had rate-limit headers reported, if any did.
    pub fn headroom(&self) -> Option<f64> {
        let bits = self.headroom.load(Ordering::Relaxed);
        (bits != NO_HEADROOM).then(|| f64::from_bits(bits))
    }

    /// The share of user traffic the breaker admits now: 0 open or half-open, below 1 while
    /// it ramps a recovered target back in.
    pub fn traffic_share(&self, now: Instant) -> f64 {
        self.lock().breaker.snapshot(now).traffic_share
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take a reloaded policy, keeping state.
    pub fn set_policy(&self, policy: BreakerPolicy) {
        self.lock().breaker.set_policy(policy);
    }

    /// Count and log a transition (after the lock is released).
    fn transition(&self, t: Option<Transition>) {
        let Some(t) = t else { return };
        if t.to != State::Closed {
            // A permit is kept when the prober is not waiting yet: no trip is missed.
            self.probe.notify_one();
        }
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

    /// After a transition this replica decided (a trip, a failed test, a recovery), keep its
    /// state for the cluster: an elapsed hold is not published (every replica sees the time
    /// pass), nor is a state taken over from another replica.
    fn mark_unpublished(&self, inner: &mut Inner, now: Instant, t: Option<Transition>) {
        if t.is_some_and(|t| !matches!(t.reason, TripReason::HoldElapsed | TripReason::Cluster)) {
            let state = inner.breaker.to_adopt(now);
            self.decided(inner, state);
        }
    }

    /// This replica decided `state` now: keep it for the cluster and wake the sync.
    fn decided(&self, inner: &mut Inner, state: Adopt) {
        let at = wall_ms().max(inner.decided_at);
        inner.decided_at = at;
        inner.unpublished = Some((at, state));
        self.publish.notify_one();
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

    /// Whether the breaker is open or half-open, as its last transition left it.
    pub fn held(&self) -> bool {
        self.state_gauge.load(Ordering::Relaxed) != i64::from(State::Closed.gauge())
    }

    /// How long until the target takes traffic again.
    pub fn recovery_eta(&self, now: Instant) -> Duration {
        self.lock().breaker.recovery_eta(now)
    }

    /// One attempt (or probe), started at `start`, ended at `now`.
    pub fn attempt(&self, start: Instant, now: Instant, verdict: Verdict) {
        self.record(start, now, verdict, true);
    }

    /// A stream attempt, started at `start`, ended at `now`: counted like an attempt, but its
    /// length (the answer's, not the target's speed) stays out of the latency SLI; its time to
    /// first token was recorded at the commit point.
    pub fn stream_ended(&self, start: Instant, now: Instant, verdict: Verdict) {
        self.record(start, now, verdict, false);
    }

    fn record(&self, start: Instant, now: Instant, verdict: Verdict, latency: bool) {
        let elapsed = now.saturating_duration_since(start);
        let t = {
            let mut inner = self.lock();
            let t = match verdict {
                Verdict::Neutral => None,
                Verdict::Ok => {
                    inner.sli.attempt(now, true, latency.then_some(elapsed));
                    if let Some(s) = inner.signals.as_deref_mut() {
                        s.ok += 1;
                        if latency {
                            s.latency.saturating_record(micros(elapsed));
                        }
                    }
                    inner.breaker.record(start, now, false)
                }
                Verdict::Failed => {
                    inner.sli.attempt(now, false, None);
                    if let Some(s) = inner.signals.as_deref_mut() {
                        s.failed += 1;
                    }
                    inner.breaker.record(start, now, true)
                }
            };
            self.mark_unpublished(&mut inner, now, t);
            t
        };
        match verdict {
            Verdict::Ok => self.upstream_ok.observe(elapsed),
            Verdict::Failed => self.upstream_failed.observe(elapsed),
            Verdict::Neutral => {}
        }
        self.transition(t);
    }

    /// An attempt that lost a hedge race was dropped after `elapsed` without an answer: for
    /// adaptive selection that is a latency (for streams, a time to first content) of at least
    /// `elapsed`, and counting it as one keeps a slow target's signal from being censored by
    /// the hedges that beat it. The breaker and the SLIs do not see it (nothing failed).
    pub fn outpaced(&self, elapsed: Duration, stream: bool) {
        let mut inner = self.lock();
        if let Some(s) = inner.signals.as_deref_mut() {
            let histogram = if stream { &mut s.ttft } else { &mut s.latency };
            histogram.saturating_record(micros(elapsed));
        }
    }

    /// A stream attempt's time to first content.
    pub fn first_token(&self, now: Instant, ttft: Duration) {
        let mut inner = self.lock();
        inner.sli.first_token(now, ttft);
        if let Some(s) = inner.signals.as_deref_mut() {
            s.ttft.saturating_record(micros(ttft));
        }
        drop(inner);
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
        // Published even when nothing changed here (a reset of a closed breaker): the operator
        // acts on the target, not on this replica.
        let published = match action {
            Manual::Reset => Adopt::Reset,
            Manual::Close => Adopt::Close { ramp: false },
            Manual::Open => inner.breaker.to_adopt(now),
        };
        self.decided(&mut inner, published);
        drop(inner);
        self.transition(t);
        state
    }

    /// This replica's counts, and its new state if it has one to publish (taken: it is
    /// published once).
    pub fn cluster_report(&self, now: Instant) -> ClusterReport {
        let mut inner = self.lock();
        ClusterReport {
            state: inner.unpublished.take(),
            counts: inner.breaker.local_counts(now),
        }
    }

    /// Take a state another replica decided at wall time `.0` (ms), unless this replica
    /// decided one since; then the other replicas' counts.
    pub fn cluster_apply(&self, now: Instant, state: Option<(u64, Adopt)>, remote: Remote) {
        let (adopted, tripped) = {
            let mut inner = self.lock();
            let adopted = state
                .filter(|(at, _)| *at >= inner.decided_at)
                .and_then(|(_, s)| inner.breaker.adopt(now, s));
            let tripped = inner.breaker.set_remote(now, remote);
            self.mark_unpublished(&mut inner, now, tripped);
            (adopted, tripped)
        };
        self.transition(adopted);
        self.transition(tripped);
    }

    /// The breaker's state to publish again if it is open (the cluster lost its record).
    pub fn open_state(&self, now: Instant) -> Option<Adopt> {
        let inner = self.lock();
        (inner.breaker.state(now) == State::Open).then(|| inner.breaker.to_adopt(now))
    }

    /// The breaker's state now.
    pub fn breaker_state(&self, now: Instant) -> State {
        self.lock().breaker.state(now)
    }

    /// Breaker and SLIs for `/admin/status`.
    pub fn snapshot(&self, now: Instant) -> (Snapshot, SliSnapshot) {
        let mut inner = self.lock();
        let b = inner.breaker.snapshot(now);
        (b, inner.sli.snapshot(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        health_with(BreakerPolicy::default())
    }

    fn health_with(policy: BreakerPolicy) -> Health {
        Health::new(
            "p/m",
            policy,
            Registry::new(),
            Arc::default(),
            Arc::default(),
            Arc::default(),
        )
    }

    fn state(h: &Health, now: Instant) -> State {
        h.snapshot(now).0.state
    }

    #[test]
    fn an_attempt_is_judged_by_when_it_started() {
        let h = health_with(BreakerPolicy {
            half_open_probes: std::num::NonZeroU32::MIN,
            ..BreakerPolicy::default()
        });
        let sent = Instant::now();
        let tripped = sent + Duration::from_secs(1);
        for _ in 0..20 {
            h.attempt(tripped, tripped, Verdict::Failed);
        }
        assert_eq!(state(&h, tripped), State::Open);
        let probed = tripped + Duration::from_secs(30);
        assert!(h.probe_due(probed));
        // A request sent before the trip answers while the probe is in flight: its success
        // does not close the breaker, the probe's does.
        let answered = probed + Duration::from_millis(5);
        h.attempt(sent, answered, Verdict::Ok);
        assert_eq!(state(&h, answered), State::HalfOpen);
        h.attempt(probed, answered, Verdict::Ok);
        assert_eq!(state(&h, answered), State::Closed);
    }

    #[test]
    fn a_state_decided_here_is_not_replaced_by_an_older_one_from_elsewhere() {
        let h = health();
        let now = Instant::now();
        // An operator opens the target here while another replica's older recovery is on its
        // way (decided 50 ms before, read by the sync after).
        h.manual(now, Manual::Open);
        let older = wall_ms() - 50;
        h.cluster_apply(
            now,
            Some((older, Adopt::Close { ramp: true })),
            Remote::default(),
        );
        assert_eq!(state(&h, now), State::Open);
        // A later decision elsewhere is taken over.
        let later = wall_ms() + 1_000;
        h.cluster_apply(
            now,
            Some((later, Adopt::Close { ramp: false })),
            Remote::default(),
        );
        assert_eq!(state(&h, now), State::Closed);
    }

    #[test]
    fn an_operators_close_is_published_as_a_close_not_a_reset() {
        let h = health();
        let now = Instant::now();
        h.manual(now, Manual::Open);
        assert!(matches!(
            h.cluster_report(now).state,
            Some((
                _,
                Adopt::Open {
                    remaining: None,
                    ..
                }
            ))
        ));
        h.manual(now, Manual::Close);
        let report = h.cluster_report(now);
        assert_eq!(
            report.state.map(|s| s.1),
            Some(Adopt::Close { ramp: false })
        );
        // Taken: published once.
        assert_eq!(h.cluster_report(now).state, None);
        h.manual(now, Manual::Reset);
        assert_eq!(h.cluster_report(now).state.map(|s| s.1), Some(Adopt::Reset));
    }
}

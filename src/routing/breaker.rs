//! The circuit breaker kept per target: a pure state machine. The current time is passed in,
//! nothing here sleeps or spawns, and every transition names one [`TripReason`].
//!
//! Closed: outcomes go into a time-based sliding window of buckets. It opens when
//! - the window holds at least `min_requests` and its failure share reaches `failure_rate`; or
//! - the last few seconds alone hold four times `min_requests` at that failure share (a sudden
//!   hard outage after a long healthy history, at volume); or
//! - `consecutive_failures` arrive in a row and such a run is out of character for the target:
//!   its failure rate before the run would produce one less than once in a hundred windows. A
//!   hard outage after a healthy history trips on exactly that many failures, at any volume; a
//!   run on a target that fails now and then anyway is noise and never trips it alone (the
//!   share rules decide there).
//!
//! Open: no user traffic for the hold, then half-open: probes (or, with `probe = false`, one
//! user request at a time) test the target every `probe_interval`, and once one succeeds the
//! rest follow quickly, so a target that simply stays down returns within about one interval of
//! recovering. `half_open_probes` successes close it; a failure holds it open for another
//! interval. After closing, traffic ramps from 10% to 100% over `ramp`; a failure share above
//! `ramp_failure_rate` in the ramp reopens it. Reopening within `ramp + window` of closing is a
//! flip-flop: the hold doubles, up to `open_for_max`.
//!
//! In a cluster (`breaker_cluster.rs`), the share rules count the other replicas' outcomes too,
//! and a state another replica decided is taken over.

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::after;
use crate::config::BreakerPolicy;

/// Buckets in the sliding window.
const BUCKETS: usize = 60;
/// What "the last few seconds" means for the sudden-outage rules.
const RECENT: Duration = Duration::from_secs(3);
/// The recent-share rule needs this many times `min_requests` in the last few seconds, so that
/// it only fires on volume where a 40% share cannot be chance.
const RECENT_VOLUME: u32 = 4;
/// The share of traffic a closing target starts its ramp with.
const RAMP_START: f64 = 0.10;
/// Outcomes needed in the ramp before its failure share is judged.
const RAMP_MIN_REQUESTS: u32 = 10;

/// What the breaker reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed,
    HalfOpen,
    Open,
}

impl State {
    /// The name used in `/admin/status` and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::HalfOpen => "half_open",
            State::Open => "open",
        }
    }

    /// `switchyard_breaker_state`: 0 closed, 1 half-open, 2 open.
    pub fn gauge(self) -> u8 {
        match self {
            State::Closed => 0,
            State::HalfOpen => 1,
            State::Open => 2,
        }
    }
}

/// Why a breaker changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TripReason {
    FailureRate,
    RecentFailureRate,
    ConsecutiveFailures,
    RampFailureRate,
    HoldElapsed,
    ProbeFailed,
    Recovered,
    Manual,
    /// Another replica's breaker changed (`[cluster]`).
    Cluster,
}

impl TripReason {
    /// A low-cardinality label.
    pub fn as_str(self) -> &'static str {
        match self {
            TripReason::FailureRate => "failure_rate",
            TripReason::RecentFailureRate => "recent_failure_rate",
            TripReason::ConsecutiveFailures => "consecutive_failures",
            TripReason::RampFailureRate => "ramp_failure_rate",
            TripReason::HoldElapsed => "hold_elapsed",
            TripReason::ProbeFailed => "probe_failed",
            TripReason::Recovered => "recovered",
            TripReason::Manual => "manual",
            TripReason::Cluster => "cluster",
        }
    }
}

/// A change of state, for the log and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub from: State,
    pub to: State,
    pub reason: TripReason,
}

/// An operator's override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manual {
    /// Hold open until closed or reset (maintenance).
    Open,
    /// Close at once, with full traffic.
    Close,
    /// Close and forget the history (window, flip-flop hold, open count).
    Reset,
}

fn add((a, b): (u32, u32), (c, d): (u32, u32)) -> (u32, u32) {
    (a.saturating_add(c), b.saturating_add(d))
}

fn share((n, f): (u32, u32)) -> f64 {
    if n == 0 {
        0.0
    } else {
        f64::from(f) / f64::from(n)
    }
}

/// How rarely the target's own failure rate may produce a run before the run counts as an
/// outage: less than once in a hundred windows.
const RUN_SURPRISE: f64 = 0.01;

/// Would the failure rate the window shows before this run of `run` failures produce such a run
/// less than once in a hundred windows? Then the run is a change (a hard outage), not noise.
/// After a healthy history (or none) five failures in a row trip at once; a target that fails
/// one time in five anyway makes such runs every few minutes and is left to the share rules.
fn run_is_out_of_character((n, failed): (u32, u32), run: u32) -> bool {
    let run_in_window = run.min(failed);
    let before = f64::from(n - run_in_window);
    if before == 0.0 {
        return true;
    }
    // Laplace's rule of succession: a short history does not look cleaner than it is.
    let base = (f64::from(failed - run_in_window) + 1.0) / (before + 2.0);
    before * base.powi(run as i32) < RUN_SURPRISE
}

/// Is a half-open test started at `started` still running?
fn busy(started: Option<Instant>, now: Instant, probe_interval: Duration) -> bool {
    started.is_some_and(|s| now.saturating_duration_since(s) < probe_interval)
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    ok: u32,
    failed: u32,
}

/// Time-based sliding window of success/failure counts.
#[derive(Debug, Clone)]
struct Window {
    origin: Instant,
    width: Duration,
    buckets: [Bucket; BUCKETS],
}

impl Window {
    fn new(origin: Instant, span: Duration) -> Self {
        let width = (span / BUCKETS as u32).max(Duration::from_millis(1));
        Window {
            origin,
            width,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    fn epoch(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.origin).as_nanos() / self.width.as_nanos()) as u64
    }

    fn add(&mut self, now: Instant, failed: bool) {
        let epoch = self.epoch(now);
        let b = &mut self.buckets[(epoch % BUCKETS as u64) as usize];
        if b.epoch != epoch {
            *b = Bucket {
                epoch,
                ..Bucket::default()
            };
        }
        if failed {
            b.failed += 1;
        } else {
            b.ok += 1;
        }
    }

    /// (requests, failures) over the last `span` (at most the whole window).
    fn counts(&self, now: Instant, span: Duration) -> (u32, u32) {
        let epoch = self.epoch(now);
        let n = ((span.as_nanos() / self.width.as_nanos()) as u64).clamp(1, BUCKETS as u64);
        let oldest = epoch.saturating_sub(n - 1);
        self.buckets
            .iter()
            .filter(|b| b.epoch >= oldest && b.epoch <= epoch && (b.ok + b.failed) > 0)
            .fold((0, 0), |(r, f), b| (r + b.ok + b.failed, f + b.failed))
    }

    fn clear(&mut self) {
        self.buckets = [Bucket::default(); BUCKETS];
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Closed,
    /// No user traffic until `until` (`None`: held by an operator).
    Open {
        until: Option<Instant>,
    },
    /// Testing: `successes` in a row so far; the next test may start at `next`. `in_flight`:
    /// when the test now running started (one that never reports back within a probe interval
    /// is taken as lost, so a dropped trial cannot hold the breaker half-open).
    HalfOpen {
        successes: u32,
        next: Instant,
        in_flight: Option<Instant>,
    },
}

/// What `/admin/status` shows of a breaker.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub state: State,
    /// How long it has been in this state.
    pub for_: Duration,
    pub failure_rate: f64,
    pub requests_in_window: u32,
    pub opens: u32,
    /// The hold the next trip would get.
    pub hold: Duration,
    /// Share of user traffic admitted now (1.0 when closed and not ramping, 0 when open).
    pub traffic_share: f64,
}

/// The breaker of one target.
#[derive(Debug, Clone)]
pub struct Breaker {
    policy: BreakerPolicy,
    phase: Phase,
    since: Instant,
    window: Window,
    consecutive: u32,
    opens: u32,
    hold: Duration,
    closed_at: Option<Instant>,
    ramp_counts: (u32, u32),
    remote: Remote,
}

impl Breaker {
    /// A closed breaker with an empty window.
    pub fn new(policy: BreakerPolicy, now: Instant) -> Self {
        Breaker {
            window: Window::new(now, policy.window),
            hold: policy.open_for,
            policy,
            phase: Phase::Closed,
            since: now,
            consecutive: 0,
            opens: 0,
            closed_at: None,
            ramp_counts: (0, 0),
            remote: Remote::default(),
        }
    }

    /// Take a new policy (config reload), keeping the state.
    pub fn set_policy(&mut self, policy: BreakerPolicy) {
        if policy.window != self.policy.window {
            self.window = Window::new(self.window.origin, policy.window);
        }
        self.hold = self.hold.clamp(policy.open_for, policy.open_for_max);
        self.policy = policy;
    }

    /// The reported state (an elapsed hold reads as half-open).
    pub fn state(&self, now: Instant) -> State {
        match self.phase {
            Phase::Closed => State::Closed,
            Phase::Open { until: Some(t) } if now >= t => State::HalfOpen,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen { .. } => State::HalfOpen,
        }
    }

    /// Move an elapsed hold to half-open.
    fn tick(&mut self, now: Instant) -> Option<Transition> {
        match self.phase {
            Phase::Open { until: Some(t) } if now >= t => {
                self.phase = Phase::HalfOpen {
                    successes: 0,
                    next: t,
                    in_flight: None,
                };
                self.since = t;
                Some(Transition {
                    from: State::Open,
                    to: State::HalfOpen,
                    reason: TripReason::HoldElapsed,
                })
            }
            _ => None,
        }
    }

    fn ramp_share(&self, now: Instant) -> Option<f64> {
        let closed = self.closed_at?;
        let ramp = self.policy.ramp;
        let elapsed = now.saturating_duration_since(closed);
        (!ramp.is_zero() && elapsed < ramp)
            .then(|| RAMP_START + (1.0 - RAMP_START) * elapsed.as_secs_f64() / ramp.as_secs_f64())
    }

    /// May a user request go to this target now? `coin` is uniform in [0, 1) (the ramp's draw).
    /// With `probe = false`, a half-open breaker admits one trial request at a time.
    pub fn admit(&mut self, now: Instant, coin: f64) -> (bool, Option<Transition>) {
        let t = self.tick(now);
        let ok = match &mut self.phase {
            Phase::Closed => self.ramp_share(now).is_none_or(|share| coin < share),
            Phase::Open { .. } => false,
            Phase::HalfOpen {
                next, in_flight, ..
            } => {
                if self.policy.probe
                    || busy(*in_flight, now, self.policy.probe_interval)
                    || now < *next
                {
                    false
                } else {
                    *in_flight = Some(now);
                    true
                }
            }
        };
        (ok, t)
    }

    /// May a synthetic probe start now? Marks it in flight when it may.
    pub fn probe_due(&mut self, now: Instant) -> (bool, Option<Transition>) {
        let t = self.tick(now);
        let due = match &mut self.phase {
            Phase::HalfOpen {
                next, in_flight, ..
            } if self.policy.probe
                && !busy(*in_flight, now, self.policy.probe_interval)
                && now >= *next =>
            {
                *in_flight = Some(now);
                true
            }
            _ => false,
        };
        (due, t)
    }

    /// How long until this target may take traffic again, for choosing among all-open targets.
    pub fn recovery_eta(&self, now: Instant) -> Duration {
        match self.phase {
            Phase::Closed | Phase::HalfOpen { .. } => Duration::ZERO,
            Phase::Open { until: Some(t) } => t.saturating_duration_since(now),
            Phase::Open { until: None } => Duration::MAX,
        }
    }

    /// Record the outcome of a user request (or, half-open, of a trial or probe) that started
    /// at `started` and ended at `now`.
    ///
    /// An attempt that started before the breaker's last change of state is a straggler: it
    /// tells of the target as it was then, and is not counted. A long request sent before a
    /// trip that succeeds while a probe is in flight would otherwise pass for the probe's
    /// success (and close the breaker early); one that fails after the close would count
    /// against the ramp.
    pub fn record(&mut self, started: Instant, now: Instant, failed: bool) -> Option<Transition> {
        let ticked = self.tick(now);
        let t = match self.phase {
            _ if started < self.since => None,
            Phase::Closed => self.record_closed(now, failed),
            Phase::Open { .. } => None,
            // Only the trial or probe in flight counts (the last one started, when one was
            // taken as lost).
            Phase::HalfOpen {
                successes,
                in_flight: Some(trial),
                ..
            } if started >= trial => self.record_half_open(now, successes, failed),
            Phase::HalfOpen { .. } => None,
        };
        t.or(ticked)
    }

    fn record_closed(&mut self, now: Instant, failed: bool) -> Option<Transition> {
        self.window.add(now, failed);
        let ramping = self.ramp_share(now).is_some();
        if ramping {
            self.ramp_counts.0 += 1;
            self.ramp_counts.1 += u32::from(failed);
        } else if self.closed_at.is_some() {
            self.ramp_counts = (0, 0);
        }
        if !failed {
            self.consecutive = 0;
            return None;
        }
        self.consecutive += 1;
        let p = &self.policy;
        let window = self.counts(now);
        let reason = self.share_reason(now).or_else(|| {
            if p.consecutive_failures > 0
                && self.consecutive >= p.consecutive_failures
                && run_is_out_of_character(window, self.consecutive)
            {
                Some(TripReason::ConsecutiveFailures)
            } else if ramping
                && self.ramp_counts.0 >= RAMP_MIN_REQUESTS
                && share(self.ramp_counts) > p.ramp_failure_rate
            {
                Some(TripReason::RampFailureRate)
            } else {
                None
            }
        });
        reason.map(|r| self.trip(now, r))
    }

    /// (requests, failures) over the window: this replica's and the others'.
    fn counts(&self, now: Instant) -> (u32, u32) {
        add(
            self.window.counts(now, self.policy.window),
            self.remote.window,
        )
    }

    /// Does the failure share (over the window, or the last few seconds at volume) trip it?
    fn share_reason(&self, now: Instant) -> Option<TripReason> {
        let p = &self.policy;
        let window = self.counts(now);
        let recent = add(self.window.counts(now, RECENT), self.remote.recent);
        if window.0 >= p.min_requests && share(window) >= p.failure_rate {
            Some(TripReason::FailureRate)
        } else if recent.0 >= RECENT_VOLUME * p.min_requests && share(recent) >= p.failure_rate {
            Some(TripReason::RecentFailureRate)
        } else {
            None
        }
    }

    fn record_half_open(
        &mut self,
        now: Instant,
        successes: u32,
        failed: bool,
    ) -> Option<Transition> {
        if failed {
            self.phase = Phase::Open {
                until: Some(after(now, self.policy.probe_interval)),
            };
            self.since = now;
            return Some(Transition {
                from: State::HalfOpen,
                to: State::Open,
                reason: TripReason::ProbeFailed,
            });
        }
        let successes = successes + 1;
        if successes >= self.policy.half_open_probes.get() {
            return Some(self.close(now, TripReason::Recovered, true));
        }
        // One success: the target is likely back, so the next tests follow quickly.
        let quick = (self.policy.probe_interval / 50).max(Duration::from_millis(10));
        self.phase = Phase::HalfOpen {
            successes,
            next: after(now, quick),
            in_flight: None,
        };
        None
    }

    fn trip(&mut self, now: Instant, reason: TripReason) -> Transition {
        let flip = self.closed_at.is_some_and(|c| {
            now.saturating_duration_since(c) < self.policy.ramp.saturating_add(self.policy.window)
        });
        self.hold = if flip {
            self.hold.saturating_mul(2).min(self.policy.open_for_max)
        } else {
            self.policy.open_for
        };
        self.opens += 1;
        self.phase = Phase::Open {
            until: Some(after(now, self.hold)),
        };
        self.since = now;
        Transition {
            from: State::Closed,
            to: State::Open,
            reason,
        }
    }

    fn close(&mut self, now: Instant, reason: TripReason, ramp: bool) -> Transition {
        let from = self.state(now);
        self.phase = Phase::Closed;
        self.since = now;
        self.window.clear();
        self.consecutive = 0;
        self.ramp_counts = (0, 0);
        self.remote = Remote::default();
        self.closed_at = ramp.then_some(now);
        Transition {
            from,
            to: State::Closed,
            reason,
        }
    }

    /// Apply an operator's override.
    pub fn manual(&mut self, now: Instant, action: Manual) -> Option<Transition> {
        let from = self.state(now);
        let t = match action {
            Manual::Open => {
                self.phase = Phase::Open { until: None };
                self.since = now;
                Transition {
                    from,
                    to: State::Open,
                    reason: TripReason::Manual,
                }
            }
            Manual::Close => self.close(now, TripReason::Manual, false),
            Manual::Reset => {
                self.hold = self.policy.open_for;
                self.opens = 0;
                self.closed_at = None;
                self.close(now, TripReason::Manual, false)
            }
        };
        (t.from != t.to).then_some(t)
    }

    /// What `/admin/status` shows.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        let (n, f) = self.counts(now);
        let state = self.state(now);
        let traffic_share = match state {
            State::Closed => self.ramp_share(now).unwrap_or(1.0),
            _ => 0.0,
        };
        Snapshot {
            state,
            for_: now.saturating_duration_since(self.since),
            failure_rate: if n == 0 {
                0.0
            } else {
                f64::from(f) / f64::from(n)
            },
            requests_in_window: n,
            opens: self.opens,
            hold: self.hold,
            traffic_share,
        }
    }
}

#[path = "breaker_cluster.rs"]
mod cluster;
pub use cluster::{Adopt, Remote};

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;

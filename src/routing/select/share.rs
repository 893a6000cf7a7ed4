//! Adaptive shares: each target's share of a route's new requests, from what its last interval
//! showed ([`Sample`]) against its own baseline and against its peers, recomputed every
//! `adaptive.interval` ([`Shares::step`]). Pure: no clock, no I/O, so the rules are tested
//! interval by interval.
//!
//! The score of a target is its prior (`weight`) times four factors in (0, 1]:
//! - failures: the failure share above a 2% allowance, against the breaker's trip rate (a
//!   target at half the trip rate keeps a quarter of its score; 429s count as failures);
//! - latency: the tail (p90) of full answers and of time to first token, each against the
//!   target's own baseline (beyond 1.2x) and against the fastest peer (beyond 1.5x); inside
//!   those bands the factor is 1, so noise between equal targets moves nothing;
//! - rate-limit headroom: the lowest remaining/limit the provider reported, below 10%;
//! - price: the cheapest peer's price over this one's, when prices are configured.
//!
//! Shares follow the scores within bounds: a target the breaker keeps out (open, or half-open
//! with only probes) has none, at once; a ramping one at most what its ramp admits; every
//! other healthy one at least `floor`, and one departed from its own behaviour (failing, slower
//! than its baseline, near its rate limit) what still measures it (two requests an interval,
//! within a quarter of the floor and the floor); and no share moves more than `max_step` in one
//! interval.

use std::time::Duration;

/// Failure share allowed before a target loses score for it.
const FAILURE_ALLOWANCE: f64 = 0.02;
/// A latency tail this far above the target's own baseline costs nothing...
const SELF_BAND: f64 = 1.2;
/// ...nor this far above the fastest peer's.
const PEER_BAND: f64 = 1.5;
/// How steeply score falls beyond each band: (ratio / band) to this power, inverted.
const SELF_POWER: i32 = 4;
const PEER_POWER: i32 = 2;
/// Below this remaining share of its rate limit, a target's score falls in proportion.
const HEADROOM_LOW: f64 = 0.10;
/// A target departed from its own behaviour keeps the traffic that still measures it: this many
/// requests an interval (each sample counts, see [`PER_SAMPLE`], so it is seen to recover)...
const DEGRADED_SAMPLES: f64 = 2.0;
/// ...as a share of the route's requests, but never below this part of the floor nor above the
/// floor. At a high rate that keeps it out of the clients' tail (the full floor of 2% is more
/// than a p99 can hide; half a percent is not); at a low rate a few requests are no tail.
const DEGRADED_FLOOR: f64 = 0.25;
/// How far one sample moves the fast estimate toward its interval's value: `n` samples move
/// it `1 - (1 - PER_SAMPLE)^n` of the way, at most [`MAX_GAIN`]. A target on the floor gets a
/// trickle of samples, and each counts: it is judged, and regains its share, on few.
const PER_SAMPLE: f64 = 0.3;
const MAX_GAIN: f64 = 0.6;
/// The baseline's time constant: it follows slow drift, not a brownout...
const BASELINE_TAU: Duration = Duration::from_secs(600);
/// ...and while the target is departed from it, ten times slower still.
const DEPARTED_SLOWDOWN: f64 = 10.0;
/// With no samples, the fast estimate relaxes toward the baseline with this time constant, so
/// a target starved of traffic is tried again rather than judged on stale data.
const RELAX_TAU: Duration = Duration::from_secs(30);

/// What one interval showed of a target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Attempts that succeeded and that failed in the interval.
    pub ok: u64,
    pub failed: u64,
    /// The p90 of full answers' latency, and how many there were.
    pub latency: Option<(Duration, u64)>,
    /// The p90 of streams' time to first content, and how many there were.
    pub ttft: Option<(Duration, u64)>,
    /// The lowest remaining/limit share the provider's rate-limit headers reported last.
    pub headroom: Option<f64>,
    /// Share of traffic the breaker admits now: 0 open or half-open, below 1 while ramping.
    pub gate: f64,
}

/// A quantity's fast estimate and the target's baseline of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Level {
    fast: Option<f64>,
    base: Option<f64>,
}

impl Level {
    /// Take an interval's `value` with the `weight` of its samples (see [`PER_SAMPLE`]).
    fn observe(&mut self, value: f64, weight: f64, interval: Duration) {
        let fast = match self.fast {
            None => value,
            Some(f) => f + weight * (value - f),
        };
        self.fast = Some(fast);
        let base = self.base.unwrap_or(fast);
        let mut gain = gain(interval, BASELINE_TAU) * weight / MAX_GAIN;
        if fast > base * SELF_BAND {
            gain /= DEPARTED_SLOWDOWN;
        }
        self.base = Some(base + gain * (fast - base));
    }

    /// An interval without samples.
    fn idle(&mut self, interval: Duration) {
        if let (Some(f), Some(b)) = (self.fast, self.base) {
            self.fast = Some(f + gain(interval, RELAX_TAU) * (b - f));
        }
    }

    fn ratio_to_base(&self) -> Option<f64> {
        match (self.fast, self.base) {
            (Some(f), Some(b)) if b > 0.0 => Some(f / b),
            _ => None,
        }
    }
}

/// The share of the gap an exponential average with time constant `tau` closes in `dt`.
fn gain(dt: Duration, tau: Duration) -> f64 {
    1.0 - (-dt.as_secs_f64() / tau.as_secs_f64()).exp()
}

/// What is kept of one target between intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Track {
    /// Its share of new requests, 0..=1.
    pub share: f64,
    /// The score behind it (prior times factors), and the factor that cost the most.
    pub score: f64,
    pub reason: Reason,
    latency: Level,
    ttft: Level,
    /// Fast estimate of the failure share.
    failures: Option<f64>,
    /// Last headroom reported (1 until one is).
    headroom: Option<f64>,
}

/// Why a target's share is what it is: the factor that cost it most, or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reason {
    /// No factor below 1: the share is the prior's (or the floor's).
    #[default]
    Healthy,
    /// Its breaker keeps it out (open, or half-open with probes only).
    BreakerOpen,
    /// Its breaker is ramping it back in.
    Ramping,
    Failures,
    /// Slower than its own baseline.
    Slower,
    /// Slower than its peers.
    SlowerThanPeers,
    RateLimited,
    Price,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Healthy => "healthy",
            Reason::BreakerOpen => "breaker_open",
            Reason::Ramping => "ramping",
            Reason::Failures => "failures",
            Reason::Slower => "slower_than_baseline",
            Reason::SlowerThanPeers => "slower_than_peers",
            Reason::RateLimited => "rate_limited",
            Reason::Price => "price",
        }
    }
}

/// The rules a route's shares are computed by.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub interval: Duration,
    pub floor: f64,
    pub max_step: f64,
    /// The breaker's trip rate: a failure share this high leaves no score.
    pub trip_rate: f64,
}

/// A route's targets as adaptive selection tracks them, by target position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shares {
    pub tracks: Vec<Track>,
}

impl Shares {
    /// Shares for targets with these `priors` (weights) before anything was measured: the
    /// priors' split.
    pub fn new(priors: &[f64]) -> Shares {
        let total: f64 = priors.iter().sum();
        let tracks = priors
            .iter()
            .map(|w| Track {
                share: if total > 0.0 { w / total } else { 0.0 },
                score: *w,
                ..Track::default()
            })
            .collect();
        Shares { tracks }
    }

    /// One interval: take each target's `samples` (by position, as `priors` and `prices`),
    /// score them, and move the shares toward the scores within the rules.
    pub fn step(
        &mut self,
        rules: &Rules,
        priors: &[f64],
        prices: &[Option<f64>],
        samples: &[Sample],
    ) {
        let n = self.tracks.len();
        if samples.len() != n || priors.len() != n {
            return;
        }
        for (t, s) in self.tracks.iter_mut().zip(samples) {
            observe(t, s, rules.interval);
        }
        let eligible: Vec<bool> = samples.iter().map(|s| s.gate > 0.0).collect();
        let fastest = |pick: fn(&Track) -> &Level| {
            (self.tracks.iter().zip(&eligible))
                .filter(|(_, e)| **e)
                .filter_map(|(t, _)| pick(t).fast)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        };
        let fastest_latency = fastest(|t| &t.latency);
        let fastest_ttft = fastest(|t| &t.ttft);
        let cheapest = (prices.iter().zip(&eligible))
            .filter(|(_, e)| **e)
            .filter_map(|(p, _)| *p)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));

        let mut scores = vec![0.0; n];
        let mut degraded = vec![false; n];
        for i in 0..n {
            let t = &mut self.tracks[i];
            if !eligible[i] {
                t.score = 0.0;
                t.reason = Reason::BreakerOpen;
                continue;
            }
            let mut factors = [(1.0, Reason::Healthy); 5];
            let excess = (t.failures.unwrap_or(0.0) - FAILURE_ALLOWANCE).max(0.0);
            factors[0] = (
                (1.0 - excess / rules.trip_rate.max(0.01)).max(0.0).powi(2),
                Reason::Failures,
            );
            let (own, peers) =
                latency_factors(&[(&t.latency, fastest_latency), (&t.ttft, fastest_ttft)]);
            factors[1] = (own, Reason::Slower);
            factors[2] = (peers, Reason::SlowerThanPeers);
            factors[3] = (
                (t.headroom.unwrap_or(1.0) / HEADROOM_LOW).clamp(0.05, 1.0),
                Reason::RateLimited,
            );
            factors[4] = match (prices[i], cheapest) {
                (Some(p), Some(c)) if p > 0.0 => ((c / p).clamp(0.01, 1.0), Reason::Price),
                _ => (1.0, Reason::Price),
            };
            let score = factors.iter().fold(priors[i], |s, (f, _)| s * f);
            // Failures, its own baseline and its rate limit say the target is not itself;
            // slower than its peers or dearer, it still is.
            degraded[i] = [0, 1, 3].iter().any(|&k| factors[k].0 < 0.999);
            let worst = factors
                .iter()
                .filter(|(f, _)| *f < 0.999)
                .min_by(|a, b| a.0.total_cmp(&b.0));
            t.reason = worst.map_or(Reason::Healthy, |w| w.1);
            if samples[i].gate < 1.0 && t.reason == Reason::Healthy {
                t.reason = Reason::Ramping;
            }
            t.score = score;
            scores[i] = score;
        }

        let caps: Vec<f64> = samples.iter().map(|s| s.gate.clamp(0.0, 1.0)).collect();
        let attempts: u64 = samples.iter().map(|s| s.ok + s.failed).sum();
        let degraded_floor = if attempts == 0 {
            rules.floor
        } else {
            (DEGRADED_SAMPLES / attempts as f64).clamp(rules.floor * DEGRADED_FLOOR, rules.floor)
        };
        let floors: Vec<f64> = (0..n)
            .map(|i| match (caps[i] >= 1.0, degraded[i]) {
                (false, _) => 0.0,
                (true, false) => rules.floor,
                (true, true) => degraded_floor,
            })
            .collect();
        let goal = fill(&scores, &floors, &caps);
        // Where the shares stand now: a target the breaker took out loses its share at once,
        // the others keep theirs in proportion.
        let now: Vec<f64> = self
            .tracks
            .iter()
            .zip(&eligible)
            .map(|(t, e)| if *e { t.share } else { 0.0 })
            .collect();
        let now = normalized(&now).unwrap_or_else(|| goal.clone());
        let widest = now
            .iter()
            .zip(&goal)
            .map(|(a, b)| (b - a).abs())
            .fold(0.0, f64::max);
        let alpha = if widest > rules.max_step {
            rules.max_step / widest
        } else {
            1.0
        };
        let stepped: Vec<f64> = now
            .iter()
            .zip(&goal)
            .map(|(a, b)| a + alpha * (b - a))
            .collect();
        // Caps bind at once (a ramp admits what it admits); the floor binds for a target once
        // it is fully back (one that returns climbs by the step).
        let floors: Vec<f64> = (0..n)
            .map(|i| floors[i].min(stepped[i].max(now[i])))
            .collect();
        let shares = fill(&stepped, &floors, &caps);
        for (t, s) in self.tracks.iter_mut().zip(shares) {
            t.share = s;
        }
    }
}

/// Take one interval's sample into a target's track.
fn observe(t: &mut Track, s: &Sample, interval: Duration) {
    let weight = |n: u64| (1.0 - (1.0 - PER_SAMPLE).powi(n.min(64) as i32)).min(MAX_GAIN);
    for (level, value) in [(&mut t.latency, s.latency), (&mut t.ttft, s.ttft)] {
        match value {
            Some((tail, n)) if n > 0 => {
                level.observe(tail.as_secs_f64() * 1000.0, weight(n), interval);
            }
            _ => level.idle(interval),
        }
    }
    let attempts = s.ok + s.failed;
    if attempts > 0 {
        let rate = s.failed as f64 / attempts as f64;
        let w = weight(attempts);
        // From no failures: one failed attempt among the first is not a verdict.
        let f = t.failures.unwrap_or(0.0);
        t.failures = Some(f + w * (rate - f));
    } else if let Some(f) = t.failures {
        t.failures = Some(f * (1.0 - gain(interval, RELAX_TAU)));
    }
    if let Some(h) = s.headroom {
        t.headroom = Some(h.clamp(0.0, 1.0));
    } else if let Some(h) = t.headroom {
        t.headroom = Some(h + gain(interval, RELAX_TAU) * (1.0 - h));
    }
}

/// The latency factors, against the target's own baseline and against the fastest peer: the
/// lower of each over the kinds (full answers, first tokens) that have data.
fn latency_factors(kinds: &[(&Level, Option<f64>)]) -> (f64, f64) {
    let beyond = |ratio: f64, band: f64, power: i32| (ratio / band).max(1.0).powi(power).recip();
    let mut own: f64 = 1.0;
    let mut peers: f64 = 1.0;
    for (level, fastest) in kinds {
        if let Some(r) = level.ratio_to_base() {
            own = own.min(beyond(r, SELF_BAND, SELF_POWER));
        }
        if let (Some(f), Some(best)) = (level.fast, fastest) {
            if *best > 0.0 {
                peers = peers.min(beyond(f / best, PEER_BAND, PEER_POWER));
            }
        }
    }
    (own, peers)
}

/// `v` scaled to sum to 1; `None` when it sums to nothing.
fn normalized(v: &[f64]) -> Option<Vec<f64>> {
    let total: f64 = v.iter().sum();
    (total > 0.0).then(|| v.iter().map(|x| x / total).collect())
}

/// Shares in proportion to `weights`, each within `floors[i]..=caps[i]` (a cap of 0 leaves
/// none), summing to 1 when the caps allow: the bound ones are fixed and the rest is shared
/// again among the free ones, until none is out of bounds.
fn fill(weights: &[f64], floors: &[f64], caps: &[f64]) -> Vec<f64> {
    let n = weights.len();
    let mut out = vec![0.0; n];
    let mut fixed = vec![false; n];
    for i in 0..n {
        if caps[i] <= 0.0 {
            fixed[i] = true;
        }
    }
    for _ in 0..=n {
        let left = 1.0 - (0..n).filter(|&i| fixed[i]).map(|i| out[i]).sum::<f64>();
        let free: Vec<usize> = (0..n).filter(|&i| !fixed[i]).collect();
        if free.is_empty() {
            break;
        }
        let total: f64 = free.iter().map(|&i| weights[i].max(0.0)).sum();
        for &i in &free {
            out[i] = if total > 0.0 {
                left.max(0.0) * weights[i].max(0.0) / total
            } else {
                left.max(0.0) / free.len() as f64
            };
        }
        let mut changed = false;
        for &i in &free {
            let floor = floors[i].min(caps[i]);
            if out[i] < floor {
                out[i] = floor;
                fixed[i] = true;
                changed = true;
            } else if out[i] > caps[i] {
                out[i] = caps[i];
                fixed[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    out
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;

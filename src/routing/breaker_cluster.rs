//! The breaker's side of a cluster (`[cluster]`, see `crate::cluster`): the other replicas'
//! counts it decides on with its own, the states it takes over from them and the state it
//! publishes. Still pure: time is passed in.

use std::time::Duration;

use tokio::time::Instant;

use super::{add, Breaker, Phase, State, Transition, TripReason, RECENT};

/// What the other replicas of a cluster saw of this target: the sum of their (requests,
/// failures) over the window and over the last few seconds, counted since the target's newest
/// shared state. Replaced at every sync, so it is never counted twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Remote {
    pub window: (u32, u32),
    pub recent: (u32, u32),
}

impl Remote {
    /// Both replicas' counts together.
    pub fn plus(self, other: Remote) -> Remote {
        Remote {
            window: add(self.window, other.window),
            recent: add(self.recent, other.recent),
        }
    }
}

/// A breaker state decided by another replica, to be taken over here (`[cluster]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// Open for `remaining` (`None`: held by an operator), with the tripping replica's hold and
    /// count of opens, so a flip-flop doubles the hold everywhere alike.
    Open {
        remaining: Option<Duration>,
        hold: Duration,
        opens: u32,
    },
    /// Closed; `ramp`: traffic returns gradually (recovered), else at once (an operator).
    Close { ramp: bool },
    /// An operator's reset: closed, history forgotten.
    Reset,
}

impl Breaker {
    /// This replica's own (requests, failures) over the window and over the last few seconds,
    /// for the other replicas of a cluster.
    pub fn local_counts(&self, now: Instant) -> Remote {
        Remote {
            window: self.window.counts(now, self.policy.window),
            recent: self.window.counts(now, RECENT),
        }
    }

    /// Take what the other replicas saw; a closed breaker trips when the cluster's failure
    /// share says so, even if this replica saw too little to decide alone.
    pub fn set_remote(&mut self, now: Instant, remote: Remote) -> Option<Transition> {
        let ticked = self.tick(now);
        self.remote = remote;
        let t = match self.phase {
            Phase::Closed if remote.window.1 > 0 || remote.recent.1 > 0 => {
                self.share_reason(now).map(|r| self.trip(now, r))
            }
            _ => None,
        };
        t.or(ticked)
    }

    /// Take over a state another replica decided.
    pub fn adopt(&mut self, now: Instant, state: Adopt) -> Option<Transition> {
        let from = self.state(now);
        match state {
            Adopt::Open {
                remaining,
                hold,
                opens,
            } => {
                self.hold = hold.clamp(self.policy.open_for, self.policy.open_for_max);
                self.opens = self.opens.max(opens);
                // A hold already over elsewhere: testing here at once (not an open that
                // elapses on the next call, which would count a transition twice).
                self.phase = match remaining {
                    Some(d) if d.is_zero() => Phase::HalfOpen {
                        successes: 0,
                        next: now,
                        in_flight: None,
                    },
                    _ => Phase::Open {
                        until: remaining.map(|d| crate::clock::after(now, d)),
                    },
                };
                self.since = now;
                self.remote = Remote::default();
            }
            Adopt::Close { ramp } => {
                if from == State::Closed {
                    // A new generation: what was counted before it starts over here too.
                    self.window.clear();
                    self.remote = Remote::default();
                    self.consecutive = 0;
                } else {
                    self.close(now, TripReason::Cluster, ramp);
                }
            }
            Adopt::Reset => {
                self.hold = self.policy.open_for;
                self.opens = 0;
                self.closed_at = None;
                self.close(now, TripReason::Cluster, false);
            }
        }
        let to = self.state(now);
        (from != to).then_some(Transition {
            from,
            to,
            reason: TripReason::Cluster,
        })
    }

    /// This breaker's state as the other replicas of a cluster should take it over.
    pub fn to_adopt(&self, now: Instant) -> Adopt {
        match self.phase {
            Phase::Open { until } => Adopt::Open {
                remaining: until.map(|t| t.saturating_duration_since(now)),
                hold: self.hold,
                opens: self.opens,
            },
            // Testing: held, with no wait left (not published in practice: each replica
            // tests a target itself once the hold it took over has passed).
            Phase::HalfOpen { .. } => Adopt::Open {
                remaining: Some(Duration::ZERO),
                hold: self.hold,
                opens: self.opens,
            },
            Phase::Closed if self.opens == 0 && self.closed_at.is_none() => Adopt::Reset,
            Phase::Closed => Adopt::Close {
                ramp: self.ramp_share(now).is_some(),
            },
        }
    }
}

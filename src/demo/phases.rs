//! The incident script: what the primary provider does in each phase, and when, scaled to the
//! demo's duration. The backup stays healthy throughout; the story is what the gateway makes of
//! the primary's trouble.
//!
//! The brownout comes first: the primary turns slow, never failing, and the adaptive route moves
//! its traffic to the backup before any breaker would trip, then back. The latency spike comes
//! before the outage: hedging needs the primary in rotation (an open breaker sends it no traffic
//! to hedge), and its latency percentiles learnt while healthy.

use std::time::Duration;

use crate::mock::FaultPlan;

/// The primary's normal behaviour: quick, a little quicker than the backup.
pub(super) fn primary_base() -> FaultPlan {
    FaultPlan {
        latency_ms: 30,
        first_token_ms: 40,
        chunk_delay_ms: 10,
        ..FaultPlan::default()
    }
}

/// The backup's behaviour, all demo long: healthy, a little slower (another region).
pub(super) fn backup_base() -> FaultPlan {
    FaultPlan {
        latency_ms: 60,
        first_token_ms: 50,
        chunk_delay_ms: 10,
        ..FaultPlan::default()
    }
}

/// One phase of the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// All is well.
    Healthy,
    /// The primary is three times slower, and never fails.
    Brownout,
    /// The primary is quick again.
    BrownoutOver,
    /// A heavy latency tail on the primary.
    LatencySpike,
    /// The primary answers 503 to everything.
    Outage,
    /// The primary answers, but a share of calls still fail.
    PartialRecovery,
    /// The primary is healthy again.
    Recovery,
}

impl Kind {
    /// Every phase, in order.
    pub(super) const ALL: [Kind; 7] = [
        Kind::Healthy,
        Kind::Brownout,
        Kind::BrownoutOver,
        Kind::LatencySpike,
        Kind::Outage,
        Kind::PartialRecovery,
        Kind::Recovery,
    ];

    /// The phase's name in the display and the report.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Healthy => "healthy",
            Kind::Brownout => "brownout",
            Kind::BrownoutOver => "brownout over",
            Kind::LatencySpike => "latency spike",
            Kind::Outage => "primary outage",
            Kind::PartialRecovery => "partial recovery",
            Kind::Recovery => "recovery",
        }
    }

    /// What happens and what to watch for.
    pub(super) fn story(self) -> &'static str {
        match self {
            Kind::Healthy => "openai-primary answers everything; the gateway learns its latency",
            Kind::Brownout => {
                "openai-primary turns 3x slower but never fails: gpt-4o's adaptive share moves to azure-backup, no breaker trips"
            }
            Kind::BrownoutOver => {
                "openai-primary is quick again: gpt-4o's share comes back to it within a few intervals"
            }
            Kind::LatencySpike => {
                "1 in 5 primary calls stalls for 1.5s: hedges to azure-backup answer first"
            }
            Kind::Outage => {
                "openai-primary answers 503: requests fail over, its breaker opens, no client sees an error"
            }
            Kind::PartialRecovery => {
                "openai-primary is back but 20% of its calls fail: probes test it first, traffic returns gradually, a failing ramp reopens it for longer"
            }
            Kind::Recovery => {
                "openai-primary is healthy: the last hold ends, probes pass, traffic ramps back to it"
            }
        }
    }

    /// Share of the demo's duration.
    fn share(self) -> f64 {
        match self {
            Kind::Healthy | Kind::Brownout | Kind::BrownoutOver => 0.1,
            Kind::LatencySpike | Kind::PartialRecovery => 0.16,
            Kind::Outage => 0.2,
            Kind::Recovery => 0.18,
        }
    }

    /// What the primary does during the phase.
    pub(super) fn primary_plan(self) -> FaultPlan {
        let base = primary_base();
        match self {
            Kind::Healthy | Kind::BrownoutOver | Kind::Recovery => base,
            Kind::Brownout => FaultPlan {
                latency_ms: base.latency_ms * 3,
                first_token_ms: base.first_token_ms * 3,
                ..base
            },
            Kind::LatencySpike => FaultPlan {
                tail_rate: 0.2,
                tail_ms: 1500,
                seed: 11,
                ..base
            },
            Kind::Outage => FaultPlan {
                status: Some(503),
                ..base
            },
            Kind::PartialRecovery => FaultPlan {
                status: Some(503),
                error_rate: 0.2,
                seed: 42,
                ..base
            },
        }
    }
}

/// A phase with its place in time, from the demo's start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scheduled {
    /// Which phase.
    pub kind: Kind,
    /// When it starts.
    pub start: Duration,
    /// When the next one starts.
    pub end: Duration,
}

/// The phases over `duration`, back to back.
pub(super) fn schedule(duration: Duration) -> Vec<Scheduled> {
    let mut start = Duration::ZERO;
    let last = Kind::ALL.len() - 1;
    Kind::ALL
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let end = if i == last {
                duration
            } else {
                start + duration.mul_f64(kind.share())
            };
            let s = Scheduled { kind, start, end };
            start = end;
            s
        })
        .collect()
}

/// The index of the phase running at `elapsed`; after the end, the number of phases.
pub(super) fn index_at(schedule: &[Scheduled], elapsed: Duration) -> usize {
    schedule
        .iter()
        .position(|p| elapsed < p.end)
        .unwrap_or(schedule.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_cover_the_duration_in_order() {
        let s = schedule(Duration::from_secs(60));
        assert_eq!(s.len(), 7);
        assert_eq!(s[0].start, Duration::ZERO);
        assert_eq!(s[6].end, Duration::from_secs(60));
        assert!(s.windows(2).all(|w| w[0].end == w[1].start));
        assert!(s[6].start < s[6].end, "the last phase has its time");
        assert_eq!(s[1].start, Duration::from_secs(6));
        assert_eq!(index_at(&s, Duration::from_secs(7)), 1);
        assert_eq!(index_at(&s, Duration::from_secs(61)), 7);
        for k in Kind::ALL {
            assert!(k.primary_plan().validate().is_ok(), "{}", k.name());
        }
    }
}

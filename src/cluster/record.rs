//! What replicas keep in Redis, as plain text: a breaker state per target and each replica's
//! counts. Pure: encoding, decoding and turning a record back into a state to take over.
//!
//! A state: `at_ms origin kind until_ms hold_ms opens`, where `kind` is `open` (until the wall
//! time `until_ms`), `held` (open until an operator says otherwise), `ramp` (closed, traffic
//! returning gradually), `close` (closed, full traffic) or `reset` (closed, history forgotten).
//! Counts: `generation requests failures recent_requests recent_failures`.

use std::time::Duration;

use crate::routing::breaker::{Adopt, Remote};

/// A breaker state one replica published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    /// Wall time (ms since the epoch) of the change: the newest record wins, and it starts a
    /// new generation of counts.
    pub at_ms: u64,
    /// The replica that decided it.
    pub origin: String,
    kind: Kind,
    until_ms: u64,
    hold_ms: u64,
    opens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Open,
    Held,
    Ramp,
    Close,
    Reset,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Open => "open",
            Kind::Held => "held",
            Kind::Ramp => "ramp",
            Kind::Close => "close",
            Kind::Reset => "reset",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "open" => Kind::Open,
            "held" => Kind::Held,
            "ramp" => Kind::Ramp,
            "close" => Kind::Close,
            "reset" => Kind::Reset,
            _ => return None,
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl StateRecord {
    /// The record of `state`, decided by `origin` at wall time `now_ms`.
    pub fn new(now_ms: u64, origin: &str, state: Adopt) -> StateRecord {
        let (kind, until_ms, hold_ms, opens) = match state {
            Adopt::Open {
                remaining: Some(d),
                hold,
                opens,
            } => (
                Kind::Open,
                now_ms.saturating_add(millis(d)),
                millis(hold),
                opens,
            ),
            Adopt::Open {
                remaining: None,
                hold,
                opens,
            } => (Kind::Held, 0, millis(hold), opens),
            Adopt::Close { ramp: true } => (Kind::Ramp, 0, 0, 0),
            Adopt::Close { ramp: false } => (Kind::Close, 0, 0, 0),
            Adopt::Reset => (Kind::Reset, 0, 0, 0),
        };
        StateRecord {
            at_ms: now_ms,
            origin: origin.to_owned(),
            kind,
            until_ms,
            hold_ms,
            opens,
        }
    }

    /// As stored.
    pub fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.at_ms,
            self.origin,
            self.kind.as_str(),
            self.until_ms,
            self.hold_ms,
            self.opens
        )
    }

    /// A stored record; `None` for anything malformed (another version, a hand edit).
    pub fn decode(s: &str) -> Option<StateRecord> {
        let mut f = s.split(' ');
        let record = StateRecord {
            at_ms: f.next()?.parse().ok()?,
            origin: f.next().filter(|o| !o.is_empty())?.to_owned(),
            kind: Kind::parse(f.next()?)?,
            until_ms: f.next()?.parse().ok()?,
            hold_ms: f.next()?.parse().ok()?,
            opens: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(record)
    }

    /// The state to take over at wall time `now_ms` (an open record's hold runs from its own
    /// clock: what is left of it now).
    pub fn adopt(&self, now_ms: u64) -> Adopt {
        let hold = Duration::from_millis(self.hold_ms);
        match self.kind {
            Kind::Open => Adopt::Open {
                remaining: Some(Duration::from_millis(self.until_ms.saturating_sub(now_ms))),
                hold,
                opens: self.opens,
            },
            Kind::Held => Adopt::Open {
                remaining: None,
                hold,
                opens: self.opens,
            },
            Kind::Ramp => Adopt::Close { ramp: true },
            Kind::Close => Adopt::Close { ramp: false },
            Kind::Reset => Adopt::Reset,
        }
    }
}

/// One replica's counts for a target, tagged with the generation (the state record) they were
/// counted under.
pub fn encode_counts(generation: u64, c: Remote) -> String {
    format!(
        "{generation} {} {} {} {}",
        c.window.0, c.window.1, c.recent.0, c.recent.1
    )
}

/// Stored counts; `None` when malformed.
pub fn decode_counts(s: &str) -> Option<(u64, Remote)> {
    let fields: Vec<u64> = s
        .split(' ')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [generation, n, failed, recent_n, recent_failed] = fields[..] else {
        return None;
    };
    let count = |x: u64| u32::try_from(x).ok();
    let c = Remote {
        window: (count(n)?, count(failed)?),
        recent: (count(recent_n)?, count(recent_failed)?),
    };
    (failed <= n && recent_failed <= recent_n).then_some((generation, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_hold_runs_from_the_deciders_clock() {
        let open = Adopt::Open {
            remaining: Some(Duration::from_secs(30)),
            hold: Duration::from_secs(30),
            opens: 2,
        };
        let r = StateRecord::new(1_000_000, "r1", open);
        let back = StateRecord::decode(&r.encode()).unwrap();
        assert_eq!(back, r);
        // Read 10 s later: 20 s of the hold are left.
        assert_eq!(
            back.adopt(1_010_000),
            Adopt::Open {
                remaining: Some(Duration::from_secs(20)),
                hold: Duration::from_secs(30),
                opens: 2
            }
        );
        // Read after the hold: nothing left (the replica goes on to test the target).
        assert!(matches!(
            back.adopt(1_040_000),
            Adopt::Open { remaining: Some(d), .. } if d.is_zero()
        ));
        for state in [
            Adopt::Open {
                remaining: None,
                hold: Duration::from_secs(60),
                opens: 1,
            },
            Adopt::Close { ramp: true },
            Adopt::Close { ramp: false },
            Adopt::Reset,
        ] {
            let r = StateRecord::new(5, "r2", state);
            assert_eq!(StateRecord::decode(&r.encode()).unwrap().adopt(5), state);
        }
    }

    #[test]
    fn malformed_records_are_ignored() {
        for s in [
            "",
            "1 r1 open 2 3",
            "1 r1 open 2 3 4 5",
            "x r1 open 2 3 4",
            "1  open 2 3 4",
            "1 r1 shut 2 3 4",
            "1 r1 open -2 3 4",
        ] {
            assert_eq!(StateRecord::decode(s), None, "{s:?}");
        }
        assert_eq!(
            decode_counts("7 40 10 4 1"),
            Some((
                7,
                Remote {
                    window: (40, 10),
                    recent: (4, 1)
                }
            ))
        );
        for s in [
            "",
            "7 40 10 4",
            "7 40 10 4 x",
            "7 10 40 4 1",
            "7 40 10 4 1 9",
        ] {
            assert_eq!(decode_counts(s), None, "{s:?}");
        }
    }
}

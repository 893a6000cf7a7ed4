//! Recent notable events (failovers, breaker transitions, hedges) in a bounded ring, for the
//! dashboard and `/admin/events`. Failovers are recorded once per request at most (those past an
//! open breaker once every few seconds, see [`super::SKIP_NOTE_EVERY`]) and the ring is small,
//! so this is cheap enough to keep on the request path.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

/// How many events are kept.
const CAPACITY: usize = 500;

/// One event.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Increasing sequence number: poll with `?since=` the last one seen.
    pub seq: u64,
    /// Unix milliseconds.
    pub time_ms: u64,
    /// `failover`, `breaker` or `hedge`.
    pub kind: &'static str,
    pub route: Option<String>,
    /// The target the event is about (for failovers: where the request came from).
    pub target: String,
    /// Failovers: the next target; breakers: the new state; hedges: the outcome.
    pub to: String,
    pub reason: &'static str,
}

/// The ring.
#[derive(Debug, Default)]
pub struct Events {
    inner: Mutex<(u64, VecDeque<Event>)>,
}

impl Events {
    /// Record an event.
    pub fn push(
        &self,
        kind: &'static str,
        route: Option<&str>,
        target: &str,
        to: &str,
        reason: &'static str,
    ) {
        let time_ms = crate::clock::wall_ms();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.0 += 1;
        let seq = inner.0;
        if inner.1.len() == CAPACITY {
            inner.1.pop_front();
        }
        inner.1.push_back(Event {
            seq,
            time_ms,
            kind,
            route: route.map(str::to_owned),
            target: target.to_owned(),
            to: to.to_owned(),
            reason,
        });
    }

    /// Events after `since`, oldest first, at most `limit`.
    pub fn since(&self, since: u64, limit: usize) -> Vec<Event> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let newer: Vec<&Event> = inner.1.iter().filter(|e| e.seq > since).collect();
        let skip = newer.len().saturating_sub(limit);
        newer.into_iter().skip(skip).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_pages_by_sequence() {
        let e = Events::default();
        for _ in 0..(CAPACITY + 10) {
            e.push("failover", Some("r"), "a/x", "b/y", "status");
        }
        let all = e.since(0, usize::MAX);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all[0].seq, 11);
        let last = e.since(all[all.len() - 2].seq, 10);
        assert_eq!(last.len(), 1);
        assert_eq!(e.since(0, 3).len(), 3);
    }
}

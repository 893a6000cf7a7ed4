//! Adaptive shares across replicas: the live replica with the lowest id computes each adaptive
//! route's shares (`routing::select::run`) and writes them to `{prefix}:shares`, one field per
//! route; every other replica takes them over each round, so that a session's rendezvous hash
//! lands on the same target through any replica. A record older than [`STALE`](super::STALE),
//! or of other targets than this replica's route has, is not taken: then each replica computes
//! its own, as without a cluster. The leader's latency view is its own traffic (the others'
//! failures reach it through the breakers' shared counts only).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::routing::select::Adaptive;

/// One route's shares as Redis keeps them.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub(super) struct SharesRecord {
    pub(super) replica: String,
    pub(super) at_ms: u64,
    /// The route's target ids, in order: a replica with other targets does not take them.
    pub(super) ids: Vec<String>,
    pub(super) shares: Vec<f64>,
}

/// Whether `me` computes the shares: no live replica has a lower id.
pub(super) fn leads(me: &str, replicas: &[String]) -> bool {
    replicas.iter().all(|r| r.as_str() >= me)
}

/// The records this replica, leading, writes: one per adaptive route.
pub(super) fn records(
    me: &str,
    now_ms: u64,
    adaptives: &[(String, Arc<Adaptive>)],
) -> Vec<(String, String)> {
    (adaptives.iter())
        .filter_map(|(route, a)| {
            let record = SharesRecord {
                replica: me.to_owned(),
                at_ms: now_ms,
                ids: a.ids.clone(),
                shares: a.shares(),
            };
            serde_json::to_string(&record)
                .ok()
                .map(|r| (route.clone(), r))
        })
        .collect()
}

/// Take over the leader's fresh records; a route with none computes its own.
pub(super) fn adopt(
    stored: &HashMap<String, String>,
    now_ms: u64,
    stale_ms: u64,
    adaptives: &[(String, Arc<Adaptive>)],
) {
    for (route, a) in adaptives {
        let record = stored
            .get(route)
            .and_then(|r| serde_json::from_str::<SharesRecord>(r).ok())
            .filter(|r| r.ids == a.ids && r.at_ms + stale_ms >= now_ms);
        match record {
            Some(r) => {
                a.adopt(&r.shares);
                a.follower.store(true, Ordering::Relaxed);
            }
            None => a.follower.store(false, Ordering::Relaxed),
        }
    }
}

/// Redis is out of reach: every replica computes its own again.
pub(super) fn alone(adaptives: &[(String, Arc<Adaptive>)]) {
    for (_, a) in adaptives {
        a.follower.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_live_id_leads() {
        let live = vec!["b".to_owned(), "a".to_owned(), "c".to_owned()];
        assert!(leads("a", &live));
        assert!(!leads("b", &live));
        assert!(leads("z", &["z".to_owned()]));
    }
}

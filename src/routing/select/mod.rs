//! Which target a request starts on, and the order it fails over and hedges in, on a weighted
//! or adaptive route ([`Selection`]); priority routes keep their file order and pay nothing.
//!
//! Each target has a share of the route's new requests: its static `weight` (weighted), or what
//! [`share`] makes of its live SLIs every interval (adaptive, recomputed by [`run`] off the
//! request path). A request orders the targets by a weighted draw over the shares: each target
//! gets the key `-ln(u) / share` with `u` uniform in (0, 1), smallest first, which draws the
//! first target in proportion to the shares and each next one in proportion among the rest.
//! With session affinity, `u` is not random but a hash of the session and the target: the draw
//! is weighted rendezvous hashing, so every turn of a conversation gets the same order, and a
//! change of shares moves only the sessions it must.
//!
//! The breaker stays the gate: the race skips a target it holds open whatever its place, and
//! an adaptive share is 0 while the breaker is open.

pub mod limits;
pub mod run;
pub mod share;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{Affinity, RouteConfig, Strategy};
use crate::metrics::{names, Registry};
use crate::wire::session::{hash, HASH_START};
use share::Shares;

/// Why an attempt went to its target (`picked` in the audit path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picked {
    /// A priority route's first target that could take it.
    Priority,
    /// Drawn by the shares.
    Share,
    /// The session's target by its hash among the shares.
    Affinity,
    /// The same target again, after a failure.
    Retry,
    /// The next target, after a failure or past an open breaker.
    Failover,
    /// Raced against a slow attempt.
    Hedge,
    /// Continues a stream another target broke off.
    Continuation,
}

impl Picked {
    pub const fn label(self) -> &'static str {
        match self {
            Picked::Priority => "priority",
            Picked::Share => "share",
            Picked::Affinity => "affinity",
            Picked::Retry => "retry",
            Picked::Failover => "failover",
            Picked::Hedge => "hedge",
            Picked::Continuation => "continuation",
        }
    }
}

/// A route's selection: its strategy, and each target's share.
#[derive(Debug)]
pub struct Selection {
    pub strategy: Strategy,
    /// Sessions keep one target (weighted and adaptive routes with `affinity = "session"`).
    pub affinity: bool,
    /// Each target's share (`f64` bits), by target position; `switchyard_target_share`.
    shares: Vec<Arc<AtomicU64>>,
    /// Each target's id hashed, for rendezvous hashing.
    id_hashes: Vec<u64>,
    /// `0, 1, 2, ...`: the order of a priority route, shared by every request.
    identity: Arc<[usize]>,
    /// Adaptive: what is kept between intervals (across reloads, while the targets stay).
    pub adaptive: Option<Arc<Adaptive>>,
}

/// An adaptive route's tracks, kept across reloads while its targets stay the same.
#[derive(Debug)]
pub struct Adaptive {
    /// The target ids these tracks are of, in route order.
    pub ids: Vec<String>,
    pub state: Mutex<AdaptiveState>,
    /// The published shares (`f64` bits, `switchyard_target_share`), by position: what
    /// requests draw from.
    pub gauges: Vec<Arc<AtomicU64>>,
    /// With `[cluster]`: another replica computes the shares and this one takes them over
    /// ([`Adaptive::adopt`]), so a session lands on the same target through any replica.
    pub follower: AtomicBool,
}

/// What the recomputation keeps.
#[derive(Debug)]
pub struct AdaptiveState {
    pub shares: Shares,
    /// Each target's signals at the last recomputation (the next one takes the difference).
    pub last: Vec<Option<crate::routing::health::Signals>>,
    /// When shares were last recomputed.
    pub at: Option<tokio::time::Instant>,
}

impl Selection {
    /// The selection of `route`, its gauges in `registry`; an adaptive route takes over
    /// `kept` when it tracks the same targets.
    pub fn new(route: &RouteConfig, registry: &Registry, kept: Option<Arc<Adaptive>>) -> Self {
        let ids: Vec<String> = route.targets.iter().map(|t| t.id.clone()).collect();
        let n = ids.len();
        let weighted = route.strategy != Strategy::Priority;
        let gauges = || -> Vec<Arc<AtomicU64>> {
            let prior = Shares::new(&route.weights);
            (ids.iter().zip(&prior.tracks))
                .map(|(id, t)| {
                    let g = registry.ratio(
                        names::TARGET_SHARE,
                        &[("route", &route.name), ("target", id)],
                    );
                    g.store(t.share.to_bits(), Ordering::Relaxed);
                    g
                })
                .collect()
        };
        let adaptive = (route.strategy == Strategy::Adaptive).then(|| {
            kept.filter(|k| k.ids == ids).unwrap_or_else(|| {
                Arc::new(Adaptive {
                    ids: ids.clone(),
                    state: Mutex::new(AdaptiveState {
                        shares: Shares::new(&route.weights),
                        last: vec![None; n],
                        at: None,
                    }),
                    gauges: gauges(),
                    follower: AtomicBool::new(false),
                })
            })
        });
        let shares = match &adaptive {
            Some(a) => a.gauges.clone(),
            None if weighted => gauges(),
            None => Vec::new(),
        };
        Selection {
            strategy: route.strategy,
            affinity: weighted && route.adaptive.affinity == Affinity::Session,
            shares,
            id_hashes: ids
                .iter()
                .map(|id| hash(HASH_START, id.as_bytes()))
                .collect(),
            identity: (0..n).collect(),
            adaptive,
        }
    }

    /// Each target's share now, by position (empty for a priority route).
    pub fn shares(&self) -> Vec<f64> {
        self.shares
            .iter()
            .map(|s| f64::from_bits(s.load(Ordering::Relaxed)))
            .collect()
    }

    /// Publish new shares (by position).
    pub fn set_shares(&self, shares: &[f64]) {
        for (a, s) in self.shares.iter().zip(shares) {
            a.store(s.to_bits(), Ordering::Relaxed);
        }
    }

    /// The order a request tries the targets in, and why its first was picked. `session` is
    /// the hash of its session key, when it has one.
    pub fn order(&self, session: Option<u64>) -> (Arc<[usize]>, Picked) {
        if self.strategy == Strategy::Priority {
            return (self.identity.clone(), Picked::Priority);
        }
        let session = session.filter(|_| self.affinity);
        let mut keyed: Vec<(f64, usize)> = self
            .shares
            .iter()
            .zip(&self.id_hashes)
            .enumerate()
            .map(|(i, (share, id))| {
                let share = f64::from_bits(share.load(Ordering::Relaxed));
                let u = match session {
                    Some(h) => unit(mix(h ^ mix(*id))),
                    None => unit(fastrand::u64(..)),
                };
                let key = if share > 0.0 {
                    -u.ln() / share
                } else {
                    f64::INFINITY
                };
                (key, i)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let picked = if session.is_some() {
            Picked::Affinity
        } else {
            Picked::Share
        };
        (keyed.into_iter().map(|(_, i)| i).collect(), picked)
    }
}

/// What `/admin/status` shows of one target of a weighted or adaptive route.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShareView {
    pub target: String,
    pub weight: f64,
    /// Its share of the route's new requests now.
    pub share: f64,
    /// Adaptive: the score behind the share (the weight times the factors from its SLIs) and
    /// what cost it most (`healthy` when nothing did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

impl Selection {
    /// Each target's weight, share and (adaptive) score and reason; empty for a priority route.
    pub fn view(&self, route: &RouteConfig) -> Vec<ShareView> {
        if self.strategy == Strategy::Priority {
            return Vec::new();
        }
        let tracks = self
            .adaptive
            .as_ref()
            .map(|a| a.lock().shares.tracks.clone());
        let shares = self.shares();
        (route.targets.iter().enumerate())
            .map(|(i, t)| {
                let track = tracks.as_ref().and_then(|ts| ts.get(i));
                ShareView {
                    target: t.id.clone(),
                    weight: route.weights.get(i).copied().unwrap_or(1.0),
                    share: shares.get(i).copied().unwrap_or(0.0),
                    score: track.map(|t| t.score),
                    reason: track.map(|t| t.reason.as_str()),
                }
            })
            .collect()
    }
}

impl Adaptive {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, AdaptiveState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shares now, by position.
    pub fn shares(&self) -> Vec<f64> {
        (self.gauges.iter())
            .map(|g| f64::from_bits(g.load(Ordering::Relaxed)))
            .collect()
    }

    /// Take over shares another replica computed (by position; ignored unless one per
    /// target). The tracks keep measuring here and go on from these if this replica
    /// computes again.
    pub fn adopt(&self, shares: &[f64]) {
        if shares.len() != self.gauges.len() || shares.iter().any(|s| !(0.0..=1.0).contains(s)) {
            return;
        }
        let mut state = self.lock();
        for ((g, t), s) in self.gauges.iter().zip(&mut state.shares.tracks).zip(shares) {
            g.store(s.to_bits(), Ordering::Relaxed);
            t.share = *s;
        }
    }
}

/// splitmix64's finaliser: spreads the bits of `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `x` as a number in (0, 1).
fn unit(x: u64) -> f64 {
    ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn selection(strategy: &str, weights: &[f64], affinity: &str) -> Selection {
        let targets: Vec<String> = weights
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{{ provider = \"p\", model = \"m{i}\", weight = {w} }}"))
            .collect();
        let toml = format!(
            "[[providers]]\nname = \"p\"\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1\"\n\
             [[routes]]\nname = \"r\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n\
             [routes.adaptive]\naffinity = \"{affinity}\"\n",
            targets.join(", ")
        );
        let config = Config::from_toml(&toml, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        Selection::new(&config.routes[0], &Registry::new(), None)
    }

    fn first_counts(s: &Selection, n: usize, sessions: bool) -> Vec<usize> {
        let mut counts = vec![0; s.id_hashes.len()];
        for i in 0..n {
            let key = sessions.then(|| hash(HASH_START, format!("session-{i}").as_bytes()));
            counts[s.order(key).0[0]] += 1;
        }
        counts
    }

    #[test]
    fn draws_follow_the_weights_and_every_order_holds_every_target_once() {
        let s = selection("weighted", &[3.0, 1.0, 0.0], "off");
        let counts = first_counts(&s, 40_000, false);
        let share = counts[0] as f64 / 40_000.0;
        assert!((share - 0.75).abs() < 0.02, "{counts:?}");
        assert_eq!(counts[2], 0, "weight 0 is never first");
        let (order, picked) = s.order(None);
        let mut sorted = order.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![0, 1, 2]);
        assert_eq!(order[2], 2, "weight 0 is tried last");
        assert_eq!(picked, Picked::Share);
    }

    #[test]
    fn a_session_gets_the_same_order_every_time_and_sessions_spread_by_weight() {
        let s = selection("weighted", &[1.0, 1.0, 2.0], "session");
        let key = Some(hash(HASH_START, b"conversation-42"));
        let first = s.order(key).0.to_vec();
        for _ in 0..100 {
            assert_eq!(s.order(key).0.to_vec(), first);
        }
        assert_eq!(s.order(key).1, Picked::Affinity);
        let counts = first_counts(&s, 20_000, true);
        let share = counts[2] as f64 / 20_000.0;
        assert!((share - 0.5).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn a_change_of_shares_moves_only_the_sessions_it_must() {
        let s = selection("weighted", &[1.0, 1.0, 1.0, 1.0], "session");
        let keys: Vec<u64> = (0..10_000)
            .map(|i| hash(HASH_START, format!("s{i}").as_bytes()))
            .collect();
        let before: Vec<usize> = keys.iter().map(|k| s.order(Some(*k)).0[0]).collect();
        // The first target loses half its share to the others.
        s.set_shares(&[0.125, 0.2916, 0.2917, 0.2917]);
        let after: Vec<usize> = keys.iter().map(|k| s.order(Some(*k)).0[0]).collect();
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        // Those that move leave the first target; about an eighth of all sessions.
        assert!(
            before.iter().zip(&after).all(|(a, b)| a == b || *a == 0),
            "only sessions of the first target move"
        );
        assert!(
            (moved as f64 / 10_000.0 - 0.125).abs() < 0.02,
            "{moved} moved"
        );
    }

    #[test]
    fn a_priority_route_lends_its_file_order() {
        let toml = "[[providers]]\nname = \"p\"\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:1\"\n\
                    [[routes]]\nname = \"r\"\ntargets = [{ provider = \"p\", model = \"a\" }, { provider = \"p\", model = \"b\" }]\n";
        let config = Config::from_toml(toml, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let s = Selection::new(&config.routes[0], &Registry::new(), None);
        let (order, picked) = s.order(Some(1));
        assert!(
            Arc::ptr_eq(&order, &s.order(None).0),
            "one order for every request"
        );
        assert_eq!((order.to_vec(), picked), (vec![0, 1], Picked::Priority));
        assert!(s.shares().is_empty());
    }
}

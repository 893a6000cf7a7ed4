//! Which target is next: where the failover loop stands between attempts ([`Cursor`]) and the
//! rules every attempt's target is picked by ([`pick_target`]): the first attempt, retries,
//! hedges and the continuation of a broken stream alike.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Route, Target};

/// Base of the jittered pause before a quick same-target retry.
const QUICK_RETRY_BASE: Duration = Duration::from_millis(50);

/// Where the loop stands between attempts. Targets are named by their position in the
/// request's order (see [`super::select`]): a priority route's order is its file order.
#[derive(Debug)]
pub struct Cursor<'r> {
    /// The position the next sequential attempt starts from.
    pub idx: usize,
    pub quick_retries_left: u32,
    pub not_sent_retry_left: bool,
    pub retry_after_wait_left: bool,
    /// After a context-length error: only targets with a larger (or unknown) window.
    pub window_floor: Option<u32>,
    pub too_long_model: Option<&'r str>,
}

impl Cursor<'_> {
    /// At the first target, with the route's retry allowances.
    pub fn new(same_target_retries: u32) -> Self {
        Cursor {
            idx: 0,
            quick_retries_left: same_target_retries,
            not_sent_retry_left: true,
            retry_after_wait_left: true,
            window_floor: None,
            too_long_model: None,
        }
    }

    /// Move to position `idx`, resetting the per-target allowances when it is a new one.
    pub fn move_to(&mut self, idx: usize, same_target_retries: u32) {
        if idx != self.idx {
            self.idx = idx;
            self.quick_retries_left = same_target_retries;
            self.not_sent_retry_left = true;
            self.retry_after_wait_left = true;
        }
    }
}

/// The next target to try, by its position in the request's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The target at position `idx`, now.
    Now(usize),
    /// Only parked targets remain: the one at `idx` frees up after the wait.
    After(usize, Duration),
}

/// The first usable target at or after position `from` of `order` (target indices) whose
/// position is not in `busy`: its breaker admits the
/// request and no `Retry-After` parks it. When only parked targets remain, the one that frees
/// up first (if that fits the deadline); when every remaining target's breaker is open, the one
/// closest to recovery rather than failing without an attempt. Targets passed over for an open
/// breaker are added to `skipped`. Breakers and parking are judged at `now`, the caller's
/// reading of the clock.
#[expect(
    clippy::too_many_arguments,
    reason = "one call per attempt, each argument its own"
)]
pub fn pick_target(
    route: &Route,
    order: &[usize],
    cur: &Cursor<'_>,
    from: usize,
    busy: &[usize],
    (now, deadline): (Instant, Instant),
    skipped: &mut Vec<Arc<Target>>,
    allow_open: bool,
) -> Option<Pick> {
    let mut soonest_parked: Option<(usize, Duration)> = None;
    let mut closest_open: Option<(usize, Duration)> = None;
    let at = |pos: usize| order.get(pos).and_then(|&i| route.targets.get(i));
    for (i, t) in (from..order.len()).filter_map(|pos| Some((pos, at(pos)?))) {
        if busy.contains(&i) || cur.too_long_model == Some(t.config.model.as_str()) {
            continue;
        }
        if let (Some(floor), Some(window)) = (cur.window_floor, t.config.context_window) {
            if window <= floor {
                continue;
            }
        }
        if let Some(wait) = t.parked_for(now) {
            if soonest_parked.is_none_or(|(_, w)| wait < w) {
                soonest_parked = Some((i, wait));
            }
            continue;
        }
        if !t.health.admit(now) {
            if !skipped.iter().any(|s| Arc::ptr_eq(s, t)) {
                skipped.push(t.clone());
            }
            let eta = t.health.recovery_eta(now);
            if closest_open.is_none_or(|(_, e)| eta < e) {
                closest_open = Some((i, eta));
            }
            continue;
        }
        return Some(Pick::Now(i));
    }
    if soonest_parked.is_none() && closest_open.is_none() {
        // Nothing left further on: a target this request left for a `Retry-After` is still
        // worth the wait when it fits the deadline.
        for (i, t) in (0..from.min(order.len())).filter_map(|pos| Some((pos, at(pos)?))) {
            if let Some(wait) = t.parked_for(now).filter(|_| !busy.contains(&i)) {
                if soonest_parked.is_none_or(|(_, w)| wait < w) {
                    soonest_parked = Some((i, wait));
                }
            }
        }
    }
    if let Some((i, wait)) = soonest_parked {
        if crate::clock::after(now, wait) < deadline {
            return Some(Pick::After(i, wait));
        }
    }
    closest_open
        .filter(|_| allow_open)
        .map(|(i, _)| Pick::Now(i))
}

/// 50 ms, 100 ms, 200 ms ... each between half and all of it.
pub fn jittered(retry: u32) -> Duration {
    let full = QUICK_RETRY_BASE * 2u32.saturating_pow(retry.min(6));
    full / 2 + full.mul_f64(fastrand::f64() / 2.0)
}

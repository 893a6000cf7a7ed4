//! The retry budgets (`[routes.retry_budget]`), per route and per target. A route's retries and
//! hedges together may add at most `ratio` of its recent requests, plus `min_per_sec`, over a
//! ten-second window. Under a total outage this keeps the load on providers near (1 + ratio)x
//! instead of multiplying it by `max_attempts` (Finagle's and tower's retry budgets). A target's
//! budget caps what is sent to it as a retry or a hedge, from every route naming it, by the same
//! rule over all the attempts it was sent, so a backup that fails as well is not flooded with
//! another target's failures (Envoy, too, budgets retries per upstream cluster). Unlike Finagle's and tower's, a
//! retry that succeeds is given back ([`RetryBudget::refund`]): failing over to a healthy target
//! is the product working, and must not run out while a primary fails a share of requests below
//! its breaker's threshold.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::RetryBudgetPolicy;

const SLOTS: usize = 10;
const SLOT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    epoch: u64,
    requests: u32,
    retries: u32,
    hedges: u32,
}

/// One route's budget, or one target's (see [`RetryBudget::try_withdraw_attempt`]).
#[derive(Debug)]
pub struct RetryBudget {
    policy: Mutex<RetryBudgetPolicy>,
    origin: Instant,
    slots: Mutex<[Slot; SLOTS]>,
}

impl RetryBudget {
    /// An empty budget.
    pub fn new(policy: RetryBudgetPolicy) -> Self {
        RetryBudget {
            policy: Mutex::new(policy),
            origin: Instant::now(),
            slots: Mutex::new([Slot::default(); SLOTS]),
        }
    }

    /// Take a reloaded policy.
    pub fn set_policy(&self, policy: RetryBudgetPolicy) {
        *self.policy.lock().unwrap_or_else(PoisonError::into_inner) = policy;
    }

    fn epoch(&self, now: Instant) -> u64 {
        // Whole seconds: a `u64` division, where milliseconds were a `u128` one.
        const { assert!(SLOT.subsec_nanos() == 0 && SLOT.as_secs() > 0) };
        now.saturating_duration_since(self.origin).as_secs() / SLOT.as_secs()
    }

    fn with_slot<R>(&self, now: Instant, f: impl FnOnce(&mut Slot, Slot) -> R) -> R {
        let epoch = self.epoch(now);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sum = Slot::default();
        for s in slots.iter() {
            if epoch.saturating_sub(s.epoch) < SLOTS as u64 {
                sum.requests += s.requests;
                sum.retries += s.retries;
                sum.hedges += s.hedges;
            }
        }
        let slot = &mut slots[(epoch % SLOTS as u64) as usize];
        if slot.epoch != epoch {
            *slot = Slot {
                epoch,
                ..Slot::default()
            };
        }
        f(slot, sum)
    }

    /// A new client request arrived (for a target's budget: a first attempt was sent to it).
    pub fn deposit(&self, now: Instant) {
        let epoch = self.epoch(now);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut slots[(epoch % SLOTS as u64) as usize];
        if slot.epoch != epoch {
            *slot = Slot {
                epoch,
                ..Slot::default()
            };
        }
        slot.requests += 1;
    }

    fn policy(&self) -> RetryBudgetPolicy {
        self.policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// May one more retry go out? Counts it when it may.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let policy = self.policy();
        self.with_slot(now, |slot, sum| {
            if f64::from(sum.retries) < allowed(&policy, sum.requests) {
                slot.retries += 1;
                true
            } else {
                false
            }
        })
    }

    /// May one more retry or hedge be sent to this target? For a target's budget, where the
    /// retry is also one of the target's requests: the failed retries sent to a target stay
    /// under `ratio` of all the attempts it was sent, plus the floor, so a target that fails
    /// too is not flooded with the other targets' retries. Counts it (both) when it may.
    pub fn try_withdraw_attempt(&self, now: Instant) -> bool {
        let policy = self.policy();
        self.with_slot(now, |slot, sum| {
            if f64::from(sum.retries) < allowed(&policy, sum.requests + 1) {
                slot.requests += 1;
                slot.retries += 1;
                true
            } else {
                false
            }
        })
    }

    /// A retry taken at `at` succeeded: give it back. The budget exists so that an outage does
    /// not multiply load; a retry that found a healthy target (a failover while the primary's
    /// breaker is still closed, or a transient error) did the work the client needed once, so
    /// only failed retries spend it. Under a total outage nothing comes back and the cap holds.
    pub fn refund(&self, at: Instant) {
        self.give_back(at, |slot| slot.retries -= 1);
    }

    /// An attempt counted by [`RetryBudget::try_withdraw_attempt`] at `at` was not sent after
    /// all: forget it.
    pub fn take_back_attempt(&self, at: Instant) {
        self.give_back(at, |slot| {
            slot.retries -= 1;
            slot.requests = slot.requests.saturating_sub(1);
        });
    }

    fn give_back(&self, at: Instant, f: impl FnOnce(&mut Slot)) {
        let epoch = self.epoch(at);
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        // The slot of `at`, or the one before when the retry was taken just before a boundary.
        for e in [epoch, epoch.saturating_sub(1)] {
            let slot = &mut slots[(e % SLOTS as u64) as usize];
            if slot.epoch == e && slot.retries > 0 {
                f(slot);
                return;
            }
        }
    }

    /// May this request be hedged? At most `hedge_ratio` of recent requests are, and a hedge
    /// also spends the retry budget. Counts it when it may.
    pub fn try_hedge(&self, now: Instant, hedge_ratio: f64) -> bool {
        let policy = self.policy();
        self.with_slot(now, |slot, sum| {
            let hedge_ok = f64::from(sum.hedges) < hedge_ratio * f64::from(sum.requests);
            if hedge_ok && f64::from(sum.retries) < allowed(&policy, sum.requests) {
                slot.hedges += 1;
                slot.retries += 1;
                true
            } else {
                false
            }
        })
    }
}

fn allowed(policy: &RetryBudgetPolicy, requests: u32) -> f64 {
    policy.ratio * f64::from(requests) + f64::from(policy.min_per_sec) * SLOTS as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_stay_within_ratio_plus_floor() {
        let b = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_per_sec: 1,
        });
        let now = b.origin;
        for _ in 0..1000 {
            b.deposit(now);
        }
        let granted = (0..1000).filter(|_| b.try_withdraw(now)).count();
        assert_eq!(granted, 200 + 10, "20% of 1000 requests plus 1/s over 10 s");
        // The window moves on: old requests and retries age out.
        let later = now + Duration::from_secs(11);
        assert_eq!((0..100).filter(|_| b.try_withdraw(later)).count(), 10);
    }

    #[test]
    fn a_retry_that_succeeds_is_given_back() {
        let b = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_per_sec: 0,
        });
        let now = b.origin;
        for _ in 0..10 {
            b.deposit(now);
        }
        assert!(b.try_withdraw(now) && b.try_withdraw(now));
        assert!(!b.try_withdraw(now), "20% of 10");
        b.refund(now);
        assert!(b.try_withdraw(now), "one came back");
        assert!(!b.try_withdraw(now));
        // Taken just before a slot boundary, refunded just after: found in the slot before.
        let later = now + Duration::from_millis(1_500);
        b.refund(later);
        assert!(b.try_withdraw(later));
        // Nothing to give back: no underflow, nothing granted beyond the budget.
        let empty = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.0,
            min_per_sec: 0,
        });
        empty.refund(empty.origin);
        assert!(!empty.try_withdraw(empty.origin));
    }

    #[test]
    fn a_target_sent_only_failing_retries_takes_its_floor_and_a_share_of_them() {
        let b = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_per_sec: 1,
        });
        let now = b.origin;
        // Retries are also the target's requests: x < 0.2 (x + 1) + 10 holds up to x = 12.
        assert_eq!((0..100).filter(|_| b.try_withdraw_attempt(now)).count(), 13);
        // First attempts sent to it raise its allowance by the ratio: after 50 of them,
        // 13 + x < 0.2 (63 + x + 1) + 10 holds up to x = 12.
        for _ in 0..50 {
            b.deposit(now);
        }
        assert_eq!((0..100).filter(|_| b.try_withdraw_attempt(now)).count(), 13);
        // One that was not sent after all is forgotten, request and retry.
        b.take_back_attempt(now);
        assert!(b.try_withdraw_attempt(now));
        assert!(!b.try_withdraw_attempt(now));
        // Retries that succeed are given back: a healthy target is never capped.
        let healthy = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_per_sec: 0,
        });
        for _ in 0..1000 {
            assert!(healthy.try_withdraw_attempt(now));
            healthy.refund(now);
        }
    }

    #[test]
    fn hedges_stay_within_their_share_and_spend_the_retry_budget() {
        let b = RetryBudget::new(RetryBudgetPolicy {
            ratio: 0.2,
            min_per_sec: 0,
        });
        let now = b.origin;
        for _ in 0..100 {
            b.deposit(now);
        }
        assert_eq!((0..100).filter(|_| b.try_hedge(now, 0.1)).count(), 10);
        assert_eq!(
            (0..100).filter(|_| b.try_withdraw(now)).count(),
            10,
            "20 - 10 hedges"
        );
    }
}

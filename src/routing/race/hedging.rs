//! The race's hedges: when the hedge delay passes with attempts still running, one more
//! starts on the next healthy target, within the hedge and retry budgets.

use std::sync::Arc;

use tokio::time::Instant;

use super::super::hedge::HedgeOutcome;
use super::super::pick::{pick_target, Pick};
use super::super::select::Picked;
use super::Race;

impl<'a> Race<'a> {
    /// The hedge delay passed with the attempts still running: race one more.
    pub(super) fn fire_hedge(&mut self, in_flight: &mut super::InFlight<'a>) {
        self.hedge_at = None;
        let route = self.route;
        if self.running.len() >= self.max_parallel || !self.can_launch() {
            return;
        }
        let busy: Vec<usize> = self.running.iter().map(|r| r.pos).collect();
        let from = busy.iter().max().map_or(self.cur.idx, |m| m + 1);
        let mut passed_over = Vec::new();
        let now = Instant::now();
        // Never hedge to a target whose breaker is open or that is parked.
        let i = match pick_target(
            route,
            &self.order,
            &self.cur,
            from,
            &busy,
            (now, self.deadline),
            &mut passed_over,
            false,
        ) {
            Some(Pick::Now(i)) if !passed_over.iter().any(|s| Arc::ptr_eq(s, self.target(i))) => i,
            _ => {
                route.hedges.count(HedgeOutcome::SkippedNoTarget);
                return;
            }
        };
        let target = self.target(i);
        if !target.budget.try_withdraw_attempt(now) {
            route.hedges.count(HedgeOutcome::SkippedBudget);
            self.count_budget_spent("target");
            return;
        }
        if !route.budget.try_hedge(now, route.config.hedge.budget) {
            target.budget.take_back_attempt(now);
            route.hedges.count(HedgeOutcome::SkippedBudget);
            return;
        }
        tracing::info!(
            request_id = %self.req.id, route = %route.config.name, to = %target.id(),
            "hedge fired"
        );
        route.hedges.count(HedgeOutcome::Fired);
        self.hedged = true;
        self.cur
            .move_to(i, route.config.failover.same_target_retries);
        self.start(in_flight, i, Picked::Hedge, now);
    }
}

//! The race behind [`super::dispatch::dispatch`]: one client request's attempts, from the first
//! to its outcome. [`Race::run`] is the loop: it starts what is due, then waits for an attempt
//! to end, the next sequential attempt's time (`next_at`) or the hedge delay (`hedge_at`). An
//! attempt that fails is classified and the next one scheduled; a slow one is raced by a hedge;
//! the first good answer wins and the attempts still running are dropped, which closes their
//! connections. `hedging.rs` fires the hedges; `ending.rs` is how a race ends and what it counts.

use std::sync::Arc;

use smallvec::SmallVec;
use tokio::time::Instant;

use super::classify::{AttemptError, NextStep};
use super::hedge::{self, HedgeOutcome};
use super::launch::{launch, Done, Launched};
use super::path::{Attempt, AttemptOutcome};
use super::pick::{jittered, pick_target, Cursor, Pick};
use super::request::{Answer, Outcome, Request};
use super::select::Picked;
use super::{Route, Target};
use crate::clock::after;
use crate::metrics::names;

mod ending;
mod hedging;
mod in_flight;

use in_flight::InFlight;

/// What trying to start the next sequential attempt did.
enum Launch {
    /// An attempt is running.
    Started,
    /// The chosen target frees up later (`next_at` is set).
    Later,
    /// Nothing more can start (no target, or the retry budget is spent).
    Stop,
}

/// An attempt in flight.
#[derive(Debug, Clone, Copy)]
struct Running {
    /// Its target's position in the request's order.
    pos: usize,
    start: Instant,
    /// Its launch sequence number.
    seq: usize,
    picked: Picked,
}

/// One request's race. Targets are named by their position in the request's order (`order`:
/// target indices, see `select`), which the cursor and the picks walk.
pub(super) struct Race<'a> {
    route: &'a Arc<Route>,
    req: &'a Request,
    started: Instant,
    deadline: Instant,
    /// The targets in the order this request tries them.
    order: Arc<[usize]>,
    /// Why the first attempt's target was picked.
    first_pick: Picked,
    /// The position of the attempt that failed last, if one did.
    last_failed: Option<usize>,
    max_attempts: usize,
    max_parallel: usize,
    path: Vec<Attempt>,
    skipped: Vec<Arc<Target>>,
    /// Targets passed over because their own retry budget was spent.
    budget_skipped: Vec<Arc<Target>>,
    errors: Vec<AttemptError>,
    cur: Cursor<'a>,
    budget_spent: bool,
    /// The "all targets open, try the closest to recovery" fallback was used (once a request).
    open_fallback_used: bool,
    launched: usize,
    hedged: bool,
    /// Inline up to two (an attempt and a hedge): a `Vec`'s first push allocated and grew it,
    /// ~90 instructions a request.
    running: SmallVec<[Running; 2]>,
    /// When the next sequential attempt starts.
    next_at: Option<Instant>,
    /// When the next hedge fires.
    hedge_at: Option<Instant>,
}

impl<'a> Race<'a> {
    pub(super) fn new(route: &'a Arc<Route>, req: &'a Request) -> Self {
        let policy = &route.config.failover;
        let hedging = &route.config.hedge;
        let started = Instant::now();
        let timeout = req
            .timeout
            .map_or(policy.request_timeout, |t| t.min(policy.request_timeout));
        route.budget.deposit(started);
        let (order, first_pick) = route.selection.order(req.session.as_ref().map(|s| s.hash));
        Race {
            route,
            req,
            started,
            deadline: after(started, timeout),
            order,
            first_pick,
            last_failed: None,
            max_attempts: if req.failover {
                policy.max_attempts.get() as usize
            } else {
                1
            },
            max_parallel: if req.failover && hedging.enabled {
                hedging.max_parallel.get() as usize
            } else {
                1
            },
            path: Vec::new(),
            skipped: Vec::new(),
            budget_skipped: Vec::new(),
            errors: Vec::new(),
            cur: Cursor::new(policy.same_target_retries),
            budget_spent: false,
            open_fallback_used: false,
            launched: 0,
            hedged: false,
            running: SmallVec::new(),
            next_at: Some(started),
            hedge_at: None,
        }
    }

    /// Run the race to its outcome. By reference: the caller's race stays where it was made
    /// (a `run(self)` future was a 300-byte copy of it).
    pub(super) async fn run(&mut self) -> Outcome {
        let mut in_flight = InFlight::new();
        let mut closing = std::pin::pin!(self.route.closed());
        // The clock is read once each time the race wakes (the first time, the race's start):
        // what it starts and checks then is at that time.
        let mut now = self.started;
        loop {
            // Start what is due now without a timer: a timer rounds up to the next millisecond.
            let can_launch = self.can_launch_at(now);
            if !can_launch {
                self.next_at = None;
            }
            if can_launch && self.next_at.is_some_and(|t| t <= now) {
                match self.launch_next(&mut in_flight, now) {
                    Launch::Started | Launch::Later => continue,
                    Launch::Stop if self.running.is_empty() => break,
                    Launch::Stop => {}
                }
            }
            // (A `Stop` left `next_at` unset.)
            if self.running.is_empty() && !(can_launch && self.next_at.is_some()) {
                break;
            }
            // Polled in this order, not from a random branch: an attempt's end is taken before
            // a timer due at the same wake-up, and no random number is drawn a wake-up.
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !self.running.is_empty() => {
                    if let Some(outcome) = self.on_done(done) {
                        return outcome;
                    }
                }
                () = until(self.next_at), if self.next_at.is_some() => {}
                () = until(self.hedge_at), if self.hedge_at.is_some() && !self.running.is_empty() => {
                    self.fire_hedge(&mut in_flight);
                }
                () = closing.as_mut() => return self.shut_down(),
                else => break,
            }
            now = Instant::now();
        }
        self.give_up()
    }

    fn can_launch(&self) -> bool {
        self.can_launch_at(Instant::now())
    }

    fn can_launch_at(&self, now: Instant) -> bool {
        self.launched < self.max_attempts && now < self.deadline
    }

    /// The target at position `pos` of the request's order.
    fn target(&self, pos: usize) -> &'a Arc<Target> {
        &self.route.targets[self.order[pos]]
    }

    fn start(&mut self, in_flight: &mut InFlight<'a>, pos: usize, picked: Picked, now: Instant) {
        let what = Launched {
            start: now,
            seq: self.launched,
            idx: self.order[pos],
            hedge: picked == Picked::Hedge,
            picked,
            order: self.order.clone(),
        };
        in_flight.push(launch(
            self.route,
            self.req,
            self.started,
            what,
            self.deadline,
        ));
        self.running.push(Running {
            pos,
            start: now,
            seq: self.launched,
            picked,
        });
        self.launched += 1;
        // A hedge goes to a target after every running one in the order: with none there (a
        // route of one target, or the last one running), no hedge is timed (a timer per request
        // and a percentile read for nothing).
        let further = self
            .running
            .iter()
            .map(|r| r.pos)
            .max()
            .map_or(0, |p| p + 1);
        if self.running.len() < self.max_parallel
            && self.launched < self.max_attempts
            && further < self.order.len()
        {
            let policy = &self.route.config;
            let d = hedge::delay(
                &policy.hedge,
                &policy.failover,
                self.target(pos),
                self.req.stream,
                now,
            );
            let at = after(now, d);
            self.hedge_at = Some(self.hedge_at.map_or(at, |h| h.min(at)));
        }
    }

    /// Start the next sequential attempt (the first, a retry, or a failover), at `now`.
    fn launch_next(&mut self, in_flight: &mut InFlight<'a>, now: Instant) -> Launch {
        self.next_at = None;
        let route = self.route;
        let same = route.config.failover.same_target_retries;
        let busy: Vec<usize> = self.running.iter().map(|r| r.pos).collect();
        let mut from = self.cur.idx;
        let i = loop {
            let pick = if self.req.failover {
                pick_target(
                    route,
                    &self.order,
                    &self.cur,
                    from,
                    &busy,
                    (now, self.deadline),
                    &mut self.skipped,
                    !self.open_fallback_used,
                )
            } else {
                (from == 0).then_some(Pick::Now(0))
            };
            let i = match pick {
                None => return Launch::Stop,
                Some(Pick::Now(i)) => i,
                Some(Pick::After(i, wait)) => {
                    // Only parked targets remain: wait for the one that frees up first.
                    self.cur.move_to(i, same);
                    self.next_at = Some(after(now, wait));
                    return Launch::Later;
                }
            };
            let target = self.target(i);
            if self.launched == 0 {
                target.budget.deposit(self.started);
                break i;
            }
            if !route.budget.try_withdraw(Instant::now()) {
                self.count_budget_spent("route");
                self.budget_spent = true;
                return Launch::Stop;
            }
            if target.budget.try_withdraw_attempt(Instant::now()) {
                break i;
            }
            // This target has taken its share of failed retries: the next one may still help.
            route.budget.refund(Instant::now());
            self.count_budget_spent("target");
            tracing::info!(
                request_id = %self.req.id, route = %route.config.name, target = %target.id(),
                "retry budget of the target spent: passed over"
            );
            self.budget_skipped.push(target.clone());
            from = i + 1;
        };
        if self.skipped.iter().any(|t| Arc::ptr_eq(t, self.target(i))) {
            // Every target left is open: this one, closest to recovery, is tried once.
            self.open_fallback_used = true;
        }
        if self.path.is_empty() && self.running.is_empty() && i != self.cur.idx {
            if let Some(from) = self.skipped.last() {
                route.count_breaker_skip(from, self.order[i]);
            }
        }
        let picked = if self.launched == 0 {
            self.first_pick
        } else if self.last_failed == Some(i) {
            Picked::Retry
        } else {
            Picked::Failover
        };
        self.cur.move_to(i, same);
        self.start(in_flight, i, picked, now);
        Launch::Started
    }

    fn count_budget_spent(&self, scope: &str) {
        self.route.metrics.inc(
            names::RETRY_BUDGET_EXHAUSTED,
            &[("route", &self.route.config.name), ("scope", scope)],
        );
    }

    /// The attempts still running are dropped (another answered, or the request ended): none of
    /// them failed, so the retries among them give the target's budget back.
    fn record_running(&mut self, outcome: AttemptOutcome, now: Instant) {
        if self.running.is_empty() {
            return;
        }
        for r in std::mem::take(&mut self.running) {
            let target = self.target(r.pos);
            if r.seq > 0 {
                target.budget.refund(r.start);
            }
            if outcome == AttemptOutcome::HedgeLost {
                target.health.outpaced(now - r.start, self.req.stream);
            }
            let attempt = self.attempt(&r, now, outcome, None);
            self.path.push(attempt);
        }
    }

    /// An attempt ended. `Some` is the request's outcome; `None` goes on racing.
    fn on_done(&mut self, done: Done) -> Option<Outcome> {
        let now = done.ended;
        let at = self.running.iter().position(|r| r.seq == done.seq)?;
        let run = self.running.remove(at);
        if self.running.is_empty() {
            // A hedge deadline belongs to the attempts it would race; none are left.
            self.hedge_at = None;
        }
        match done.result {
            Ok(answer) => Some(self.on_answer(run, done.hedge, done.turns_dropped, answer, now)),
            Err(err) => self.on_failure(run, err, now),
        }
    }

    /// An attempt answered: it wins, the others are dropped.
    fn on_answer(
        &mut self,
        run: Running,
        hedge: bool,
        turns_dropped: usize,
        answer: Answer,
        now: Instant,
    ) -> Outcome {
        let route = self.route;
        let target = self.target(run.pos);
        let start = run.start;
        if run.seq > 0 {
            // A retry that worked gives its share of the budgets back (a hedge only the
            // target's: the route's also caps the load hedges add).
            target.budget.refund(start);
            if !hedge {
                route.budget.refund(start);
            }
        }
        let served = Some(self.path.len());
        let attempt = self.attempt(&run, now, AttemptOutcome::Ok, Some(200));
        self.path.push(attempt);
        self.record_running(AttemptOutcome::HedgeLost, now);
        if self.hedged {
            let (outcome, label) = if hedge {
                (HedgeOutcome::Won, "won")
            } else {
                (HedgeOutcome::Lost, "lost")
            };
            route.hedges.count(outcome);
            route
                .events
                .push("hedge", Some(&route.config.name), target.id(), label, label);
        }
        if turns_dropped > 0 {
            tracing::info!(
                request_id = %self.req.id, route = %route.config.name, target = %target.id(),
                turns_dropped, "conversation trimmed to the target's context window"
            );
        }
        let mut outcome = self.finish(Ok(answer), hedge, served, self.order[run.pos], now);
        outcome.turns_dropped = turns_dropped;
        outcome
    }

    /// An attempt failed: it is recorded, and its classification decides what comes next.
    fn on_failure(&mut self, run: Running, err: AttemptError, now: Instant) -> Option<Outcome> {
        let route = self.route;
        let (idx, start) = (run.pos, run.start);
        let target = self.target(idx);
        self.last_failed = Some(idx);
        let elapsed = now - start;
        target.health.attempt(start, now, err.verdict());
        let status = err.status().map(|s| s.as_u16());
        let attempt = self.attempt(&run, now, err.outcome(), status);
        self.path.push(attempt);
        tracing::warn!(
            request_id = %self.req.id, route = %route.config.name, attempt = self.path.len(),
            target = %target.id(), kind = err.kind(), status,
            elapsed_ms = elapsed.as_millis() as u64, "attempt failed"
        );
        let step = err.next_step(&route.config.failover);
        if step == NextStep::ReturnAsIs || !self.req.failover {
            return self.return_as_is(idx, err, now);
        }
        if step == NextStep::NextLargerWindow {
            self.cur.window_floor = self.cur.window_floor.max(target.config.context_window);
            self.cur.too_long_model = Some(&target.config.model);
        }
        if self.running.is_empty() {
            self.retry_or_move_on(idx, step, &err);
        } else {
            self.join_the_race(idx, step);
        }
        self.errors.push(err);
        None
    }

    /// A provider's error that is the client's answer (or failover is off): returned as the
    /// provider gave it. An error with no status to return ends only this attempt.
    fn return_as_is(&mut self, idx: usize, err: AttemptError, now: Instant) -> Option<Outcome> {
        if let AttemptError::Status {
            status,
            body,
            dialect,
            ..
        } = err
        {
            let served = Some(self.path.len() - 1);
            self.record_running(AttemptOutcome::Cancelled, now);
            let answer = Answer::Upstream {
                status,
                body,
                dialect,
            };
            return Some(self.finish(Ok(answer), false, served, self.order[idx], now));
        }
        self.errors.push(err);
        if !self.req.failover {
            self.next_at = None;
        }
        None
    }

    /// An attempt failed while another still races: no same-target retry; the next target may
    /// join the race at once (within `max_parallel`).
    fn join_the_race(&mut self, idx: usize, step: NextStep) {
        let now = Instant::now();
        let policy = &self.route.config.failover;
        if let NextStep::RetryAfter(wait) = step {
            self.target(idx).park(now, wait);
        }
        self.cur
            .move_to(self.cur.idx.max(idx) + 1, policy.same_target_retries);
        if self.running.len() < self.max_parallel && self.launched < self.max_attempts {
            self.next_at = Some(now);
        }
    }

    /// The only attempt failed: retry on the same target when the step and the allowances
    /// say so, else fail over to the next target.
    fn retry_or_move_on(&mut self, idx: usize, step: NextStep, err: &AttemptError) {
        let route = self.route;
        let policy = &route.config.failover;
        let target = self.target(idx);
        let now = Instant::now();
        match step {
            NextStep::RetryNotSent if self.cur.not_sent_retry_left => {
                self.cur.not_sent_retry_left = false;
                self.next_at = Some(now);
            }
            NextStep::RetryQuick if self.cur.quick_retries_left > 0 => {
                let spent = policy.same_target_retries - self.cur.quick_retries_left;
                self.cur.quick_retries_left -= 1;
                self.next_at = Some(self.deadline.min(after(now, jittered(spent))));
            }
            NextStep::RetryAfter(wait)
                if self.cur.retry_after_wait_left
                    && wait <= policy.retry_after_wait
                    && after(now, wait) < self.deadline =>
            {
                self.cur.retry_after_wait_left = false;
                self.next_at = Some(after(now, wait));
            }
            step => {
                if let NextStep::RetryAfter(wait) = step {
                    target.park(now, wait);
                }
                self.cur.move_to(idx + 1, policy.same_target_retries);
                if let Some(next) = self.order.get(self.cur.idx).map(|&i| &route.targets[i]) {
                    route.count_failover(target, next, err.kind());
                    tracing::info!(
                        request_id = %self.req.id, route = %route.config.name, from = %target.id(),
                        to = %next.id(), reason = err.kind(), status = err.status().map(|s| s.as_u16()),
                        "failover"
                    );
                }
                self.next_at = Some(now);
            }
        }
    }

    /// The record of attempt `run`, ended at `now`.
    fn attempt(
        &self,
        run: &Running,
        now: Instant,
        outcome: AttemptOutcome,
        status: Option<u16>,
    ) -> Attempt {
        Attempt {
            target: self.target(run.pos).clone(),
            start: run.start - self.started,
            duration: now - run.start,
            outcome,
            status,
            carried_chars: None,
            picked: Some(run.picked),
            span: self.req.trace.map_or(0, |t| t.attempt_span(run.seq)),
        }
    }
}

/// Sleep until `at`, or forever.
async fn until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

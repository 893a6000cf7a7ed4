//! The failover loop, top to bottom: pick the next usable target (breaker closed, not parked),
//! start an attempt, and while it runs wait for whichever comes first: its answer, its failure
//! (the error's classification decides whether to retry here, move on, or hand the provider's
//! answer back), or the hedge delay (a second attempt races the first on the next healthy
//! target; the first good answer wins and the others are dropped, which closes their
//! connections). The client sees one answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::{BoxStream, FuturesUnordered};
use futures_util::{FutureExt, StreamExt};
use http::StatusCode;
use tokio::time::Instant;

use super::attempt::{call_full, call_stream};
use super::continuation::{Continuation, Mode, Splicer};
use super::failover::{AttemptError, NextStep};
use super::health::Verdict;
use super::hedge::{self, HedgeOutcome};
use super::plan::{failure, jittered, pick_target, Cursor, Pick};
use super::relay::{relay, RelayContext, StreamReport};
use super::stream::Usage;
use super::{Route, Target};
use crate::api::chat_request::ChatRequest;
use crate::audit::AuditAttempt;
use crate::config::MidStream;
use crate::metrics::names;

/// A client request on its way through a route.
#[derive(Debug)]
pub struct Request {
    pub id: String,
    pub chat: ChatRequest,
    /// `x-switchyard-failover: off` makes exactly one attempt on the first target.
    pub failover: bool,
    /// `x-switchyard-timeout`: shortens the route's `request_timeout`.
    pub timeout: Option<Duration>,
}

/// One upstream call made for a request.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub target: Arc<Target>,
    /// Since the request started.
    pub start: Duration,
    pub duration: Duration,
    /// `ok` or an [`AttemptError::kind`].
    pub outcome: &'static str,
    pub status: Option<u16>,
}

/// What the client gets.
pub enum Answer {
    /// A whole chat completion.
    Full { body: Bytes, usage: Option<Usage> },
    /// A committed stream of SSE bytes.
    Stream {
        body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
        /// Time to first content of the winning attempt.
        ttft: Duration,
        /// How the stream ended; closed unsent if the client went away.
        report: tokio::sync::oneshot::Receiver<StreamReport>,
    },
    /// A client error that would fail anywhere: the provider's own status and body.
    Upstream { status: StatusCode, body: Bytes },
}

/// The outcome of a request: an answer or a failure, and the path that led there.
pub struct Outcome {
    pub result: Result<Answer, Failure>,
    /// A hedge produced the answer.
    pub hedged: bool,
    /// The entry of `path` whose target answered (also a client error returned as is).
    pub served: Option<usize>,
    /// Attempts made, in order.
    pub path: Vec<AttemptRecord>,
    /// Targets passed over because their breaker was open.
    pub skipped: Vec<Arc<Target>>,
}

impl Outcome {
    /// The target that produced the answer, if one did.
    pub fn served_by(&self) -> Option<&Arc<Target>> {
        self.served
            .and_then(|i| self.path.get(i))
            .map(|a| &a.target)
    }

    /// The path as the audit log keeps it: targets passed over, then the attempts.
    pub fn audit_path(&self) -> Vec<AuditAttempt> {
        let skipped = self.skipped.iter().map(|t| AuditAttempt {
            target: t.id().to_owned(),
            start_ms: 0.0,
            duration_ms: 0.0,
            outcome: "skipped_breaker".into(),
            status: None,
            carried_chars: None,
        });
        let attempts = self.path.iter().map(|a| AuditAttempt {
            target: a.target.id().to_owned(),
            start_ms: a.start.as_secs_f64() * 1000.0,
            duration_ms: a.duration.as_secs_f64() * 1000.0,
            outcome: a.outcome.to_owned(),
            status: a.status,
            carried_chars: None,
        });
        skipped.chain(attempts).collect()
    }
}

/// Every attempt failed, or none could be made.
#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// One attempt that finished (answered or failed).
struct Done {
    /// Which launch this was (its position in launch order).
    seq: usize,
    idx: usize,
    start: Instant,
    hedge: bool,
    result: Result<Answer, AttemptError>,
}

/// Start one attempt on target `idx`, bounded by `deadline`.
fn launch<'a>(
    route: &'a Arc<Route>,
    req: &'a Request,
    started: Instant,
    seq: usize,
    idx: usize,
    hedge: bool,
    deadline: Instant,
) -> BoxFuture<'a, Done> {
    async move {
        let policy = &route.config.failover;
        let target = &route.targets[idx];
        let start = Instant::now();
        let attempt_deadline = deadline.min(start + policy.attempt_timeout);
        let body = req.chat.upstream_body(&target.config.model, None);
        let result = if req.chat.stream {
            let first_token_deadline = attempt_deadline.min(start + policy.first_token_timeout);
            call_stream(
                target,
                body,
                req.chat.client_wants_usage,
                first_token_deadline,
            )
            .await
            .map(|committed| {
                let ttft = start.elapsed();
                target.health.first_token(Instant::now(), ttft);
                let (tx, report) = tokio::sync::oneshot::channel();
                let continuation =
                    (policy.mid_stream == MidStream::Continue).then(|| Continuation {
                        route: route.clone(),
                        chat: req.chat.clone(),
                        tried: vec![idx],
                        splicer: Splicer {
                            mode: Mode::Original,
                        },
                    });
                let ctx = RelayContext {
                    request_id: req.id.clone(),
                    route: route.clone(),
                    target_idx: idx,
                    attempt_start: start,
                    request_start: started,
                    continuation,
                    report: Some(tx),
                };
                Answer::Stream {
                    body: relay(committed, ctx).boxed(),
                    ttft,
                    report,
                }
            })
        } else {
            let result = call_full(target, body, attempt_deadline, false).await;
            if result.is_ok() {
                // A stream's attempt is judged when it ends (see `stream::relay`).
                target
                    .health
                    .attempt(Instant::now(), Verdict::Ok, start.elapsed());
            }
            result.map(|(body, usage)| Answer::Full { body, usage })
        };
        Done {
            seq,
            idx,
            start,
            hedge,
            result,
        }
    }
    .boxed()
}

/// Sleep until `at`, or forever.
async fn until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Serve a request on a route with soft failover and hedging.
pub async fn dispatch(route: &Arc<Route>, req: &Request) -> Outcome {
    let policy = &route.config.failover;
    let hedging = &route.config.hedge;
    let started = Instant::now();
    let deadline = started
        + req
            .timeout
            .map_or(policy.request_timeout, |t| t.min(policy.request_timeout));
    let max_attempts = if req.failover {
        policy.max_attempts.get() as usize
    } else {
        1
    };
    let max_parallel = if req.failover && hedging.enabled {
        hedging.max_parallel.get() as usize
    } else {
        1
    };
    route.budget.deposit(started);

    let mut path: Vec<AttemptRecord> = Vec::new();
    let mut skipped: Vec<Arc<Target>> = Vec::new();
    let mut errors: Vec<AttemptError> = Vec::new();
    let mut cur = Cursor::new(policy.same_target_retries);
    let mut budget_spent = false;
    let mut launched = 0usize;
    let mut hedged = false;
    let mut in_flight = FuturesUnordered::new();
    // (target index, start, launch seq) of each attempt in flight.
    let mut running: Vec<(usize, Instant, usize)> = Vec::new();
    // When the next sequential attempt starts, and when the next hedge fires.
    let mut next_at = Some(started);
    let mut hedge_at: Option<Instant> = None;

    loop {
        let can_launch = launched < max_attempts && Instant::now() < deadline;
        if running.is_empty() && !(can_launch && next_at.is_some()) {
            break;
        }
        tokio::select! {
            Some(done) = in_flight.next(), if !running.is_empty() => {
                let done: Done = done;
                running.retain(|r| r.2 != done.seq);
                let target = &route.targets[done.idx];
                let elapsed = done.start.elapsed();
                let err = match done.result {
                    Ok(answer) => {
                        let served = Some(path.len());
                        path.push(record(target, started, done.start, elapsed, "ok", None));
                        for (idx, start, _) in running.drain(..) {
                            path.push(record(&route.targets[idx], started, start, start.elapsed(), "hedge_lost", None));
                        }
                        if hedged || done.hedge {
                            let outcome = if done.hedge { HedgeOutcome::Won } else { HedgeOutcome::Lost };
                            route.hedges.count(outcome);
                            let reason = if done.hedge { "won" } else { "lost" };
                            route.events.push("hedge", Some(&route.config.name), target.id(), reason, reason);
                        }
                        let outcome = Outcome { result: Ok(answer), hedged: done.hedge, served, path, skipped };
                        finish(route, &outcome, started, done.idx);
                        return outcome;
                    }
                    Err(err) => err,
                };
                target.health.attempt(Instant::now(), err.verdict(), elapsed);
                let status = err.status().map(|s| s.as_u16());
                path.push(record(target, started, done.start, elapsed, err.kind(), status));
                tracing::warn!(
                    request_id = %req.id, route = %route.config.name, attempt = path.len(),
                    target = %target.id(), kind = err.kind(), status,
                    elapsed_ms = elapsed.as_millis() as u64, "attempt failed"
                );
                let step = err.next_step(policy);
                if step == NextStep::ReturnAsIs || !req.failover {
                    if let AttemptError::Status { status, body, .. } = err {
                        let served = Some(path.len() - 1);
                        for (idx, start, _) in running.drain(..) {
                            path.push(record(&route.targets[idx], started, start, start.elapsed(), "cancelled", None));
                        }
                        let result = Ok(Answer::Upstream { status, body });
                        let outcome = Outcome { result, hedged: false, served, path, skipped };
                        finish(route, &outcome, started, done.idx);
                        return outcome;
                    }
                    errors.push(err);
                    if !req.failover {
                        break;
                    }
                    continue;
                }
                let now = Instant::now();
                if !running.is_empty() {
                    // Another attempt is still racing: no same-target retry, the next target may
                    // join the race at once (within max_parallel).
                    let from = cur.idx.max(done.idx) + 1;
                    if step == NextStep::NextLargerWindow {
                        cur.window_floor = cur.window_floor.max(target.config.context_window);
                        cur.too_long_model = Some(&target.config.model);
                    }
                    if let NextStep::RetryAfter(wait) = step {
                        target.park(now, wait);
                    }
                    cur.move_to(from, policy.same_target_retries);
                    if running.len() < max_parallel {
                        next_at = Some(now);
                    }
                    errors.push(err);
                    continue;
                }
                match step {
                    NextStep::RetryNotSent if cur.not_sent_retry_left => {
                        cur.not_sent_retry_left = false;
                        next_at = Some(now);
                    }
                    NextStep::RetryQuick if cur.quick_retries_left > 0 => {
                        let spent = policy.same_target_retries - cur.quick_retries_left;
                        cur.quick_retries_left -= 1;
                        next_at = Some(deadline.min(now + jittered(spent)));
                    }
                    NextStep::RetryAfter(wait)
                        if cur.retry_after_wait_left && wait <= policy.retry_after_wait && now + wait < deadline =>
                    {
                        cur.retry_after_wait_left = false;
                        next_at = Some(now + wait);
                    }
                    step => {
                        if let NextStep::RetryAfter(wait) = step {
                            target.park(now, wait);
                        }
                        if step == NextStep::NextLargerWindow {
                            cur.window_floor = cur.window_floor.max(target.config.context_window);
                            cur.too_long_model = Some(&target.config.model);
                        }
                        cur.move_to(done.idx + 1, policy.same_target_retries);
                        if let Some(next) = route.targets.get(cur.idx) {
                            route.count_failover(target, next, err.kind());
                            tracing::info!(
                                request_id = %req.id, route = %route.config.name, from = %target.id(),
                                to = %next.id(), reason = err.kind(), status, "failover"
                            );
                        }
                        next_at = Some(now);
                    }
                }
                errors.push(err);
            }
            () = until(next_at), if can_launch && next_at.is_some() => {
                next_at = None;
                let busy: Vec<usize> = running.iter().map(|r| r.0).collect();
                let pick = if req.failover {
                    pick_target(route, &cur, cur.idx, &busy, deadline, &mut skipped)
                } else {
                    Some(Pick::Now(0))
                };
                let i = match pick {
                    None => continue,
                    Some(Pick::Now(i)) => i,
                    Some(Pick::After(i, wait)) if running.is_empty() => {
                        // Only parked targets remain and nothing else is running: wait it out.
                        tokio::time::sleep(wait).await;
                        i
                    }
                    Some(Pick::After(_, wait)) => {
                        next_at = Some(Instant::now() + wait);
                        continue;
                    }
                };
                if path.is_empty() && running.is_empty() && i != cur.idx {
                    if let (Some(from), Some(to)) = (skipped.last(), route.targets.get(i)) {
                        route.count_failover(from, to, "breaker_open");
                    }
                }
                cur.move_to(i, policy.same_target_retries);
                if launched > 0 && !route.budget.try_withdraw(Instant::now()) {
                    route.metrics.inc(names::RETRY_BUDGET_EXHAUSTED, &[("route", &route.config.name)]);
                    budget_spent = true;
                    if running.is_empty() {
                        break;
                    }
                    continue;
                }
                let now = Instant::now();
                in_flight.push(launch(route, req, started, launched, i, false, deadline));
                running.push((i, now, launched));
                launched += 1;
                if running.len() < max_parallel && launched < max_attempts {
                    let d = hedge::delay(hedging, policy, &route.targets[i], req.chat.stream, now);
                    hedge_at = Some(hedge_at.map_or(now + d, |h| h.min(now + d)));
                }
            }
            () = until(hedge_at), if hedge_at.is_some() && !running.is_empty() => {
                hedge_at = None;
                if running.len() >= max_parallel || launched >= max_attempts || Instant::now() >= deadline {
                    continue;
                }
                if !route.budget.try_hedge(Instant::now(), hedging.budget) {
                    route.hedges.count(HedgeOutcome::SkippedBudget);
                    continue;
                }
                let busy: Vec<usize> = running.iter().map(|r| r.0).collect();
                let from = busy.iter().max().map_or(cur.idx, |m| m + 1);
                let mut passed_over = Vec::new();
                // Never hedge to a target whose breaker is open or that is parked.
                let i = match pick_target(route, &cur, from, &busy, deadline, &mut passed_over) {
                    Some(Pick::Now(i)) if !passed_over.iter().any(|s| Arc::ptr_eq(s, &route.targets[i])) => i,
                    _ => {
                        route.hedges.count(HedgeOutcome::SkippedNoTarget);
                        continue;
                    }
                };
                let now = Instant::now();
                tracing::info!(
                    request_id = %req.id, route = %route.config.name, to = %route.targets[i].id(),
                    "hedge fired"
                );
                route.hedges.count(HedgeOutcome::Fired);
                hedged = true;
                cur.move_to(i, policy.same_target_retries);
                in_flight.push(launch(route, req, started, launched, i, true, deadline));
                running.push((i, now, launched));
                launched += 1;
                if running.len() < max_parallel && launched < max_attempts {
                    hedge_at = Some(now + hedge::delay(hedging, policy, &route.targets[i], req.chat.stream, now));
                }
            }
            else => break,
        }
    }
    let out_of_time = Instant::now() >= deadline;
    let outcome = Outcome {
        result: Err(failure(route, &path, &errors, out_of_time, budget_spent)),
        hedged: false,
        served: None,
        path,
        skipped,
    };
    finish(route, &outcome, started, cur.idx);
    outcome
}

/// Metrics and the request SLI of the target the request started on.
fn finish(route: &Route, outcome: &Outcome, started: Instant, served_idx: usize) {
    let now = Instant::now();
    let (outcome_label, served) = match &outcome.result {
        Ok(Answer::Upstream { .. }) => (1, Some(served_idx)),
        Ok(_) => (0, Some(served_idx)),
        Err(_) => (2, None),
    };
    route.count_request(served, outcome_label, now - started);
    let first = outcome
        .skipped
        .first()
        .or(outcome.path.first().map(|a| &a.target));
    if let Some(first) = first {
        first.health.request(now, outcome_label != 2);
    }
}

fn record(
    target: &Arc<Target>,
    started: Instant,
    attempt_start: Instant,
    duration: Duration,
    outcome: &'static str,
    status: Option<u16>,
) -> AttemptRecord {
    AttemptRecord {
        target: target.clone(),
        start: attempt_start - started,
        duration,
        outcome,
        status,
    }
}

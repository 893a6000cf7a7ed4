//! The failover loop, top to bottom: pick the next usable target (breaker closed, not parked),
//! make one attempt, and on failure let the error's classification decide whether to retry
//! here, move on, or hand the provider's answer back. The client sees one answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use http::StatusCode;
use tokio::time::Instant;

use super::attempt::{call_full, call_stream};
use super::failover::{AttemptError, NextStep};
use super::health::Verdict;
use super::stream::{relay, RelayContext, StreamReport, Usage};
use super::{Route, Target};
use crate::api::chat_request::ChatRequest;
use crate::audit::AuditAttempt;
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
    /// Attempts made, in order.
    pub path: Vec<AttemptRecord>,
    /// Targets passed over because their breaker was open.
    pub skipped: Vec<Arc<Target>>,
}

impl Outcome {
    /// The target that produced the answer (the last attempt's).
    pub fn served_by(&self) -> Option<&Arc<Target>> {
        self.path.last().map(|a| &a.target)
    }

    /// The path as the audit log keeps it: targets passed over, then the attempts.
    pub fn audit_path(&self) -> Vec<AuditAttempt> {
        let skipped = self.skipped.iter().map(|t| AuditAttempt {
            target: t.id().to_owned(),
            start_ms: 0.0,
            duration_ms: 0.0,
            outcome: "skipped_breaker".into(),
            status: None,
        });
        let attempts = self.path.iter().map(|a| AuditAttempt {
            target: a.target.id().to_owned(),
            start_ms: a.start.as_secs_f64() * 1000.0,
            duration_ms: a.duration.as_secs_f64() * 1000.0,
            outcome: a.outcome.to_owned(),
            status: a.status,
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

/// Base of the jittered pause before a quick same-target retry.
const QUICK_RETRY_BASE: Duration = Duration::from_millis(50);

/// Where the loop stands between attempts.
struct Cursor<'r> {
    idx: usize,
    quick_retries_left: u32,
    not_sent_retry_left: bool,
    retry_after_wait_left: bool,
    /// After a context-length error: only targets with a larger (or unknown) window.
    window_floor: Option<u32>,
    too_long_model: Option<&'r str>,
}

/// Serve a request on a route with soft failover.
pub async fn dispatch(route: &Route, req: &Request) -> Outcome {
    let policy = &route.config.failover;
    let started = Instant::now();
    let budget = req
        .timeout
        .map_or(policy.request_timeout, |t| t.min(policy.request_timeout));
    let deadline = started + budget;
    let max_attempts = if req.failover {
        policy.max_attempts.get()
    } else {
        1
    };
    route.budget.deposit(started);

    let mut path: Vec<AttemptRecord> = Vec::new();
    let mut skipped: Vec<Arc<Target>> = Vec::new();
    let mut errors: Vec<AttemptError> = Vec::new();
    let mut cur = Cursor {
        idx: 0,
        quick_retries_left: policy.same_target_retries,
        not_sent_retry_left: true,
        retry_after_wait_left: true,
        window_floor: None,
        too_long_model: None,
    };
    let mut budget_spent = false;

    while (path.len() as u32) < max_attempts && Instant::now() < deadline {
        let pick = if req.failover {
            pick_target(route, &cur, deadline, &mut skipped).await
        } else {
            Some(0)
        };
        let Some(i) = pick else { break };
        if i != cur.idx {
            if let (Some(from), Some(to)) = (skipped.last(), route.targets.get(i)) {
                if path.is_empty() {
                    route.count_failover(from, to, "breaker_open");
                }
            }
            cur.idx = i;
            cur.quick_retries_left = policy.same_target_retries;
            cur.not_sent_retry_left = true;
            cur.retry_after_wait_left = true;
        }
        if !path.is_empty() && !route.budget.try_withdraw(Instant::now()) {
            route.metrics.inc(
                names::RETRY_BUDGET_EXHAUSTED,
                &[("route", &route.config.name)],
            );
            budget_spent = true;
            break;
        }
        let target = &route.targets[cur.idx];
        let attempt_no = path.len() + 1;
        let attempt_start = Instant::now();
        let attempt_deadline = deadline.min(attempt_start + policy.attempt_timeout);
        let upstream_body = req.chat.upstream_body(&target.config.model, None);

        let result = if req.chat.stream {
            let first_token_deadline =
                attempt_deadline.min(attempt_start + policy.first_token_timeout);
            call_stream(
                target,
                upstream_body,
                req.chat.client_wants_usage,
                first_token_deadline,
            )
            .await
            .map(|committed| {
                let ttft = attempt_start.elapsed();
                target.health.first_token(Instant::now(), ttft);
                let (tx, report) = tokio::sync::oneshot::channel();
                let ctx = RelayContext {
                    request_id: req.id.clone(),
                    route: route.config.name.clone(),
                    target: target.clone(),
                    attempt_start,
                    idle_timeout: policy.idle_timeout,
                    report: Some(tx),
                };
                Answer::Stream {
                    body: relay(committed, ctx).boxed(),
                    ttft,
                    report,
                }
            })
        } else {
            call_full(target, upstream_body, attempt_deadline, false)
                .await
                .map(|(body, usage)| Answer::Full { body, usage })
        };
        let elapsed = attempt_start.elapsed();
        let err = match result {
            Ok(answer) => {
                if !req.chat.stream {
                    // A stream's attempt is judged when it ends (see `stream::relay`).
                    target.health.attempt(Instant::now(), Verdict::Ok, elapsed);
                }
                path.push(record(target, started, attempt_start, elapsed, "ok", None));
                let outcome = Outcome {
                    result: Ok(answer),
                    path,
                    skipped,
                };
                finish(route, &outcome, started, cur.idx);
                return outcome;
            }
            Err(err) => err,
        };
        target
            .health
            .attempt(Instant::now(), err.verdict(), elapsed);
        let status = err.status().map(|s| s.as_u16());
        path.push(record(
            target,
            started,
            attempt_start,
            elapsed,
            err.kind(),
            status,
        ));
        tracing::warn!(
            request_id = %req.id, route = %route.config.name, attempt = attempt_no,
            target = %target.id(), kind = err.kind(), status, elapsed_ms = elapsed.as_millis() as u64,
            "attempt failed"
        );
        let step = err.next_step(policy);
        if step == NextStep::ReturnAsIs || !req.failover {
            if let AttemptError::Status { status, body, .. } = err {
                let outcome = Outcome {
                    result: Ok(Answer::Upstream { status, body }),
                    path,
                    skipped,
                };
                finish(route, &outcome, started, cur.idx);
                return outcome;
            }
            errors.push(err);
            break;
        }
        match step {
            NextStep::RetryNotSent if cur.not_sent_retry_left => cur.not_sent_retry_left = false,
            NextStep::RetryQuick if cur.quick_retries_left > 0 => {
                let spent = policy.same_target_retries - cur.quick_retries_left;
                cur.quick_retries_left -= 1;
                tokio::time::sleep_until(deadline.min(Instant::now() + jittered(spent))).await;
            }
            NextStep::RetryAfter(wait)
                if cur.retry_after_wait_left
                    && wait <= policy.retry_after_wait
                    && Instant::now() + wait < deadline =>
            {
                cur.retry_after_wait_left = false;
                tokio::time::sleep(wait).await;
            }
            step => {
                if let NextStep::RetryAfter(wait) = step {
                    target.park(Instant::now(), wait);
                }
                if step == NextStep::NextLargerWindow {
                    cur.window_floor = cur.window_floor.max(target.config.context_window);
                    cur.too_long_model = Some(&target.config.model);
                }
                cur.idx += 1;
                if let Some(next) = route.targets.get(cur.idx) {
                    route.count_failover(target, next, err.kind());
                    tracing::info!(
                        request_id = %req.id, route = %route.config.name, from = %target.id(),
                        to = %next.id(), reason = err.kind(), status, "failover"
                    );
                }
            }
        }
        errors.push(err);
    }
    let out_of_time = Instant::now() >= deadline;
    let outcome = Outcome {
        result: Err(failure(route, &path, &errors, out_of_time, budget_spent)),
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

/// 50 ms, 100 ms, 200 ms ... each between half and all of it.
fn jittered(retry: u32) -> Duration {
    let full = QUICK_RETRY_BASE * 2u32.saturating_pow(retry.min(6));
    full / 2 + full.mul_f64(fastrand::f64() / 2.0)
}

/// The first usable target at or after the cursor: its breaker admits the request and no
/// `Retry-After` parks it. When only parked targets remain, wait for the one that frees up
/// first if that fits the deadline; when every remaining target's breaker is open, try the one
/// closest to recovery rather than failing without an attempt.
async fn pick_target(
    route: &Route,
    cur: &Cursor<'_>,
    deadline: Instant,
    skipped: &mut Vec<Arc<Target>>,
) -> Option<usize> {
    let now = Instant::now();
    let mut soonest_parked: Option<(usize, Duration)> = None;
    let mut closest_open: Option<(usize, Duration)> = None;
    for (i, t) in route.targets.iter().enumerate().skip(cur.idx) {
        if cur.too_long_model == Some(t.config.model.as_str()) {
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
        return Some(i);
    }
    if let Some((i, wait)) = soonest_parked {
        if now + wait < deadline {
            tokio::time::sleep(wait).await;
            return Some(i);
        }
    }
    closest_open.map(|(i, _)| i)
}

/// The client-visible error when no attempt succeeded: it names every step of the path.
fn failure(
    route: &Route,
    path: &[AttemptRecord],
    errors: &[AttemptError],
    out_of_time: bool,
    budget_spent: bool,
) -> Failure {
    if path.is_empty() {
        return Failure {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "no_target_available",
            message: format!(
                "no target of route {} can take the request now (all are parked by Retry-After)",
                route.config.name
            ),
        };
    }
    let steps: Vec<String> = path
        .iter()
        .zip(errors)
        .map(|(a, e)| {
            format!(
                "{}: {} after {} ms",
                a.target.id(),
                e.describe(),
                a.duration.as_millis()
            )
        })
        .collect();
    let all_timeouts = errors.iter().all(AttemptError::is_timeout);
    let all_overloaded = errors
        .iter()
        .all(|e| matches!(e.status().map(|s| s.as_u16()), Some(429 | 503 | 529)));
    let (status, code) = if out_of_time || all_timeouts {
        (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
    } else if all_overloaded || budget_spent {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream_unavailable")
    } else {
        (StatusCode::BAD_GATEWAY, "upstream_failed")
    };
    let budget_note = if budget_spent {
        " (no retry: the route's retry budget is spent)"
    } else {
        ""
    };
    Failure {
        status,
        code,
        message: format!(
            "route {}: all {} attempt(s) failed{budget_note}: {}",
            route.config.name,
            path.len(),
            steps.join("; ")
        ),
    }
}

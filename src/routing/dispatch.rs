//! The failover loop, top to bottom: pick the next usable target, make one attempt, and on
//! failure let the error's classification decide whether to retry here, move on, or hand the
//! provider's answer back. The client sees one answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use http::StatusCode;
use tokio::time::Instant;

use super::attempt::{call_full, call_stream};
use super::failover::{AttemptError, NextStep};
use super::stream::{relay, RelayContext};
use super::{Route, Target};
use crate::api::chat_request::ChatRequest;

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
    Full { body: Bytes },
    /// A committed stream of SSE bytes.
    Stream {
        body: BoxStream<'static, Result<Bytes, std::convert::Infallible>>,
    },
    /// A client error that would fail anywhere: the provider's own status and body.
    Upstream { status: StatusCode, body: Bytes },
}

/// The outcome of a request: an answer or a failure, and the path that led there.
pub struct Outcome {
    pub result: Result<Answer, Failure>,
    pub path: Vec<AttemptRecord>,
}

impl Outcome {
    /// The target that produced the answer (the last attempt's).
    pub fn served_by(&self) -> Option<&Arc<Target>> {
        self.path.last().map(|a| &a.target)
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

    let mut path: Vec<AttemptRecord> = Vec::new();
    let mut errors: Vec<AttemptError> = Vec::new();
    let mut idx = 0;
    let mut quick_retries_left = policy.same_target_retries;
    let mut not_sent_retry_left = true;
    let mut retry_after_wait_left = true;
    // After a context-length error: only targets with a larger (or unknown) window.
    let mut window_floor: Option<u32> = None;
    let mut too_long_model: Option<&str> = None;

    while (path.len() as u32) < max_attempts && Instant::now() < deadline {
        let pick = if req.failover {
            pick_target(route, idx, window_floor, too_long_model, deadline).await
        } else {
            Some(0)
        };
        let Some(i) = pick else { break };
        if i != idx {
            idx = i;
            quick_retries_left = policy.same_target_retries;
            not_sent_retry_left = true;
            retry_after_wait_left = true;
        }
        let target = &route.targets[idx];
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
                let ctx = RelayContext {
                    request_id: req.id.clone(),
                    route: route.config.name.clone(),
                    target: target.id().to_owned(),
                    idle_timeout: policy.idle_timeout,
                };
                Answer::Stream {
                    body: relay(committed, ctx).boxed(),
                }
            })
        } else {
            call_full(target, upstream_body, attempt_deadline)
                .await
                .map(|body| Answer::Full { body })
        };
        let elapsed = attempt_start.elapsed();
        let err = match result {
            Ok(answer) => {
                path.push(record(target, started, attempt_start, elapsed, "ok", None));
                return Outcome {
                    result: Ok(answer),
                    path,
                };
            }
            Err(err) => err,
        };
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
                let result = Ok(Answer::Upstream { status, body });
                return Outcome { result, path };
            }
            errors.push(err);
            break;
        }
        match step {
            NextStep::RetryNotSent if not_sent_retry_left => not_sent_retry_left = false,
            NextStep::RetryQuick if quick_retries_left > 0 => {
                let spent = policy.same_target_retries - quick_retries_left;
                quick_retries_left -= 1;
                tokio::time::sleep_until(deadline.min(Instant::now() + jittered(spent))).await;
            }
            NextStep::RetryAfter(wait)
                if retry_after_wait_left
                    && wait <= policy.retry_after_wait
                    && Instant::now() + wait < deadline =>
            {
                retry_after_wait_left = false;
                tokio::time::sleep(wait).await;
            }
            step => {
                if let NextStep::RetryAfter(wait) = step {
                    target.park(Instant::now(), wait);
                }
                if step == NextStep::NextLargerWindow {
                    window_floor = window_floor.max(target.config.context_window);
                    too_long_model = Some(&target.config.model);
                }
                idx += 1;
                if let Some(next) = route.targets.get(idx) {
                    tracing::info!(
                        request_id = %req.id, route = %route.config.name, from = %target.id(),
                        to = %next.id(), reason = err.kind(), status, "failover"
                    );
                }
            }
        }
        errors.push(err);
    }
    let result = Err(failure(route, &path, &errors, Instant::now() >= deadline));
    Outcome { result, path }
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

/// The first usable target at or after `from`. A target parked by `Retry-After` is passed over;
/// when only parked targets remain, wait for the one that frees up first if that fits the
/// deadline.
async fn pick_target(
    route: &Route,
    from: usize,
    window_floor: Option<u32>,
    too_long_model: Option<&str>,
    deadline: Instant,
) -> Option<usize> {
    let now = Instant::now();
    let mut soonest: Option<(usize, Duration)> = None;
    for (i, t) in route.targets.iter().enumerate().skip(from) {
        if too_long_model == Some(t.config.model.as_str()) {
            continue;
        }
        if let (Some(floor), Some(window)) = (window_floor, t.config.context_window) {
            if window <= floor {
                continue;
            }
        }
        match t.parked_for(now) {
            None => return Some(i),
            Some(wait) if soonest.is_none_or(|(_, w)| wait < w) => soonest = Some((i, wait)),
            Some(_) => {}
        }
    }
    let (i, wait) = soonest?;
    if now + wait >= deadline {
        return None;
    }
    tokio::time::sleep(wait).await;
    Some(i)
}

/// The client-visible error when no attempt succeeded: it names every step of the path.
fn failure(
    route: &Route,
    path: &[AttemptRecord],
    errors: &[AttemptError],
    out_of_time: bool,
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
    } else if all_overloaded {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream_unavailable")
    } else {
        (StatusCode::BAD_GATEWAY, "upstream_failed")
    };
    Failure {
        status,
        code,
        message: format!(
            "route {}: all {} attempt(s) failed: {}",
            route.config.name,
            path.len(),
            steps.join("; ")
        ),
    }
}

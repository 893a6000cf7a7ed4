//! One attempt of the race (`race`) as a future of its own: the body fitted to the target,
//! the call (whole, or a stream up to its first token, then relayed with its continuation
//! ready), and what came of it ([`Done`]).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::attempt::{call_full, call_stream, Forward};
use super::body::{fitted_at_once, fitted_body};
use super::classify::AttemptError;
use super::continuation::{Continuation, Mode, Splicer};
use super::health::Verdict;
use super::relay::{relay, RelayContext};
use super::request::{Answer, Request};
use super::select::Picked;
use super::Route;
use crate::boxed::pinned;
use crate::clock::after;

/// One attempt that finished (answered or failed).
pub(super) struct Done {
    /// Which launch this was (its position in launch order).
    pub(super) seq: usize,
    pub(super) hedge: bool,
    /// Turns dropped to fit the target's context window.
    pub(super) turns_dropped: usize,
    pub(super) result: Result<Answer, AttemptError>,
    /// When it ended (a stream: when it committed), as its SLIs have it; the race's record
    /// of it ends then too.
    pub(super) ended: Instant,
}

/// One attempt to start: on which target, and why.
pub(super) struct Launched {
    /// When it starts (the race's reading of the clock).
    pub(super) start: Instant,
    /// Which launch this is (its position in launch order).
    pub(super) seq: usize,
    /// The target, by index in the route.
    pub(super) idx: usize,
    pub(super) hedge: bool,
    pub(super) picked: Picked,
    /// The request's order of the targets, for a continuation.
    pub(super) order: Arc<[usize]>,
}

/// Start one attempt, bounded by `deadline`.
pub(super) fn launch<'a>(
    route: &'a Arc<Route>,
    req: &'a Request,
    started: Instant,
    what: Launched,
    deadline: Instant,
) -> BoxFuture<'a, Done> {
    let Launched {
        start,
        seq,
        idx,
        hedge,
        picked,
        order,
    } = what;
    pinned(move || async move {
        let policy = &route.config.failover;
        let target = &route.targets[idx];
        let attempt_deadline = deadline.min(after(start, policy.attempt_timeout));
        let context = &route.config.context;
        let client = Some(&req.client);
        let fitted = match fitted_at_once(target, context, &req.forms, None, client) {
            Some(fitted) => fitted,
            None => fitted_body(target, context, &req.forms, None, client).await,
        };
        let fitted = match fitted {
            Ok(fitted) => fitted,
            Err(e) => {
                return Done {
                    seq,
                    hedge,
                    turns_dropped: 0,
                    result: Err(e),
                    ended: Instant::now(),
                }
            }
        };
        let turns_dropped = fitted.turns_dropped;
        let forward = Forward::of(&req.client, target, fitted.native).traced(
            req.trace.as_ref(),
            req.trace.map_or(0, |t| t.attempt_span(seq)),
        );
        let dialect = forward.answer_dialect();
        let continues = route.continues_streams();
        let ended;
        let result = if req.stream {
            let first_token_deadline =
                attempt_deadline.min(after(start, policy.first_token_timeout));
            // Each call's future in a box of its own: held inline, the larger of the two was
            // copied with this future at each move (into it, then into the race's box), about
            // 600 instructions a request (bench/instructions).
            let called = pinned(|| {
                call_stream(
                    target,
                    fitted.body,
                    req.client_wants_usage,
                    first_token_deadline,
                    forward,
                    continues,
                )
            })
            .await;
            ended = Instant::now();
            called.map(|committed| {
                target.health.first_token(ended, ended - start);
                let (tx, report) = tokio::sync::oneshot::channel();
                let continuation = continues.then(|| Continuation {
                    route: route.clone(),
                    forms: req.forms.clone(),
                    tried: smallvec::smallvec![idx],
                    order,
                    trace: req.trace,
                    splicer: Splicer {
                        mode: Mode::Original,
                    },
                });
                let ctx = RelayContext {
                    request_id: req.id.clone(),
                    route: route.clone(),
                    target_idx: idx,
                    picked,
                    attempt_start: start,
                    span: req.trace.map_or(0, |t| t.attempt_span(seq)),
                    request_start: started,
                    deadline,
                    continuation,
                    report: Some(tx),
                };
                Answer::Stream {
                    body: relay(committed, ctx).boxed(),
                    report,
                    dialect,
                }
            })
        } else {
            let result =
                pinned(|| call_full(target, fitted.body, attempt_deadline, false, forward)).await;
            ended = Instant::now();
            if result.is_ok() {
                // A stream's attempt is judged when it ends (see `relay`).
                target.health.attempt(start, ended, Verdict::Ok);
            }
            result.map(|(body, usage)| Answer::Full {
                body,
                usage,
                dialect,
            })
        };
        Done {
            seq,
            hedge,
            turns_dropped,
            result,
            ended,
        }
    })
}

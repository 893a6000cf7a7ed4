//! Mid-stream continuation (`mid_stream = "continue"`): when a committed stream breaks and no
//! tool call is under way, the next usable target (picked by the same rules as any attempt's:
//! breaker admits, not parked by `Retry-After`) is asked to continue the answer. It gets the
//! conversation plus the partial assistant text as a prefill and only the continuation is
//! streamed on; a target that rejects prefill (or is configured with `prefill = false`) is asked
//! again from the start, and its output is held back until it has reproduced what the client
//! already has: the duplicate prefix is skipped, a divergence ends the stream with an error. The
//! client sees one answer, under one stream id, or a clear error.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use smallvec::SmallVec;
use tokio::time::Instant;

use super::attempt::{call_stream, Committed, Forward};
use super::body::fitted_body;
use super::classify::{AttemptError, NextStep};
use super::path::{Attempt, AttemptOutcome};
use super::pick::{pick_target, Cursor, Pick};
use super::select::Picked;
use super::Route;
use crate::canonical::ErrorClass;
use crate::wire::sse::encode_data;
use crate::wire::trace::{fresh_span, Trace};
use crate::wire::Forms;

/// How the current upstream relates to what the client has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The stream that committed: forwarded as it is.
    Original,
    /// A continuation after a prefill: only new text arrives.
    Prefill,
    /// A restart: the first `matched` bytes of the client's text have been reproduced so far.
    Restart { matched: usize },
}

const DIFFERS: &str = "the backup's restarted answer differs from what was already sent";

/// A continuation's output did not match what the client already has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diverged(pub String);

/// What a continuation needs to ask another target.
#[derive(Debug)]
pub struct Continuation {
    pub route: Arc<Route>,
    /// The request's inner and canonical forms.
    pub forms: Arc<Forms>,
    /// Targets (indices into the route) that have streamed this answer so far (inline: made
    /// for every continued stream before its first chunk, it rarely grows).
    pub tried: SmallVec<[usize; 4]>,
    /// The request's order of the targets (indices into the route): continuations follow it.
    pub order: Arc<[usize]>,
    pub splicer: Splicer,
    /// The request's trace, when it is traced: each try sends a `traceparent` of its own.
    pub trace: Option<Trace>,
}

/// Fits a continuation's chunks onto what the client already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splicer {
    pub mode: Mode,
}

/// A target that took over the stream.
pub struct Resumed {
    pub idx: usize,
    pub committed: Committed,
    pub mode: Mode,
    pub start: Instant,
    /// Its span in the request's trace (0 untraced).
    pub span: u64,
}

impl Continuation {
    /// Ask the next usable targets, in route order, to take over; `sent` is the text the
    /// client has. Targets are picked as every attempt's are ([`pick_target`]): one whose
    /// breaker is open or that a `Retry-After` parks is passed over, and none is waited for.
    /// Each try that fails spends the route's and the target's retry budgets; failures count
    /// against the target. Tries that failed are added to `failed` (for the audit path), their
    /// starts measured from `request_start`. Nothing is tried past the request's `deadline`.
    pub async fn resume(
        &mut self,
        sent: &str,
        client_wants_usage: bool,
        request_start: Instant,
        deadline: Instant,
        failed: &mut Vec<Attempt>,
    ) -> Option<Resumed> {
        let route = self.route.clone();
        let policy = &route.config.failover;
        let cursor = Cursor::new(0);
        // Targets that streamed this answer, and those whose retry budget is spent.
        let mut excluded = self.tried.clone();
        let mut passed_over = Vec::new();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // The request's order, with what it tried or passed over taken out by position.
            let busy: Vec<usize> = (self.order.iter().enumerate())
                .filter(|(_, i)| excluded.contains(i))
                .map(|(pos, _)| pos)
                .collect();
            let pick = pick_target(
                &route,
                &self.order,
                &cursor,
                0,
                &busy,
                // No waiting for a parked target: a continuation is wanted now.
                (now, now),
                &mut passed_over,
                false,
            );
            let Some(Pick::Now(pos)) = pick else {
                return None;
            };
            let idx = self.order[pos];
            let target = &route.targets[idx];
            excluded.push(idx);
            if !route.budget.try_withdraw(now) {
                return None;
            }
            if !target.budget.try_withdraw_attempt(now) {
                // This target has taken its share of failed retries; the next one may not have.
                route.budget.refund(now);
                tracing::info!(target = %target.id(), "retry budget of the target spent: no continuation there");
                continue;
            }
            let taken = now;
            self.tried.push(idx);
            let mut prefill = target.config.prefill;
            loop {
                let partial = prefill.then_some(sent);
                // In the inner form, whatever the client's dialect: the splicer reads it.
                let fitted =
                    fitted_body(target, &route.config.context, &self.forms, partial, None).await;
                let body = match fitted {
                    Ok(fitted) => fitted.body,
                    Err(e) => {
                        tracing::warn!(target = %target.id(), kind = e.kind(), "cannot ask for a continuation");
                        break;
                    }
                };
                let start = Instant::now();
                let span = self.trace.map_or(0, |_| fresh_span());
                let first_token = crate::clock::after(
                    start,
                    policy.first_token_timeout.min(policy.attempt_timeout),
                );
                let forward = Forward::default().traced(self.trace.as_ref(), span);
                let deadline = first_token.min(deadline);
                match call_stream(target, body, client_wants_usage, deadline, forward, true).await {
                    Ok(committed) => {
                        // It answered: the retry gives its share of the budgets back.
                        route.budget.refund(taken);
                        target.budget.refund(taken);
                        let mode = if prefill {
                            Mode::Prefill
                        } else {
                            Mode::Restart { matched: 0 }
                        };
                        return Some(Resumed {
                            idx,
                            committed,
                            mode,
                            start,
                            span,
                        });
                    }
                    Err(AttemptError::Status { status, class, .. })
                        if prefill
                            && status.as_u16() == 400
                            && class != ErrorClass::ContextLength =>
                    {
                        tracing::info!(target = %target.id(), "prefill rejected; restarting the answer instead");
                        failed.push(Attempt {
                            target: target.clone(),
                            start: start - request_start,
                            duration: start.elapsed(),
                            outcome: AttemptOutcome::PrefillRejected,
                            status: Some(400),
                            carried_chars: Some(sent.len()),
                            picked: Some(Picked::Continuation),
                            span,
                        });
                        prefill = false;
                    }
                    Err(e) => {
                        let now = Instant::now();
                        target.health.attempt(start, now, e.verdict());
                        if let NextStep::RetryAfter(wait) = e.next_step(policy) {
                            // As after any attempt: the next request goes elsewhere meanwhile.
                            target.park(now, wait);
                        }
                        failed.push(Attempt {
                            target: target.clone(),
                            start: start - request_start,
                            duration: start.elapsed(),
                            outcome: e.outcome(),
                            status: e.status().map(|s| s.as_u16()),
                            carried_chars: Some(sent.len()),
                            picked: Some(Picked::Continuation),
                            span,
                        });
                        tracing::warn!(target = %target.id(), kind = e.kind(), "continuation attempt failed");
                        break;
                    }
                }
            }
        }
    }
}

impl Splicer {
    /// Rewrite one chunk of a continuation for the client: the original stream id, no second
    /// role delta, and in a restart only the text past what the client has. Returns the bytes to
    /// send (if any) and the text they add.
    pub fn transform(
        &mut self,
        data: &[u8],
        stream_id: Option<&str>,
        sent: &str,
    ) -> Result<Option<(Bytes, String)>, Diverged> {
        let Ok(mut chunk) = serde_json::from_slice::<Value>(data) else {
            return Ok(None);
        };
        if let (Some(id), Some(obj)) = (stream_id, chunk.as_object_mut()) {
            obj.insert("id".into(), Value::from(id));
        }
        let Some(choice) = chunk["choices"].get_mut(0) else {
            // The usage chunk (no choices): pass on.
            return Ok(Some((
                encode_data(chunk.to_string().as_bytes()),
                String::new(),
            )));
        };
        let finish = !choice["finish_reason"].is_null();
        let delta = &mut choice["delta"];
        if let Some(d) = delta.as_object_mut() {
            d.remove("role");
        }
        let text = delta["content"].as_str().unwrap_or_default().to_owned();
        let added = match self.mode {
            Mode::Original | Mode::Prefill => text,
            Mode::Restart { matched } => {
                let need = &sent[matched.min(sent.len())..];
                let (matched, added) = if text.len() <= need.len() {
                    if !need.starts_with(&text) {
                        return Err(Diverged(DIFFERS.into()));
                    }
                    (matched + text.len(), String::new())
                } else {
                    if !text.starts_with(need) {
                        return Err(Diverged(DIFFERS.into()));
                    }
                    (sent.len(), text[need.len()..].to_owned())
                };
                if finish && matched < sent.len() {
                    return Err(Diverged(
                        "the backup's restarted answer is shorter than what was already sent"
                            .into(),
                    ));
                }
                // Caught up with the client: from here on the restart streams through.
                self.mode = if matched >= sent.len() {
                    Mode::Prefill
                } else {
                    Mode::Restart { matched }
                };
                added
            }
        };
        if added.is_empty() && !finish {
            return Ok(None);
        }
        if let Some(d) = delta.as_object_mut() {
            d.insert("content".into(), Value::from(added.as_str()));
        }
        Ok(Some((encode_data(chunk.to_string().as_bytes()), added)))
    }
}

/// Count a mid-stream move and say so in the log.
pub fn count_move(route: &Route, from: usize, to: usize, carried: usize, request_id: &str) {
    let (from, to) = (&route.targets[from], &route.targets[to]);
    route.count_failover(from, to, "mid_stream");
    tracing::info!(
        request_id, route = %route.config.name, from = %from.id(), to = %to.id(),
        reason = "mid_stream", carried_chars = carried, "failover"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str, finish: Option<&str>) -> Vec<u8> {
        serde_json::json!({"id": "other", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": finish}]})
            .to_string()
            .into_bytes()
    }

    fn sent_text(out: Option<(Bytes, String)>) -> Option<String> {
        out.map(|(_, added)| added)
    }

    fn cont(mode: Mode) -> Splicer {
        Splicer { mode }
    }

    #[test]
    fn a_restart_skips_the_duplicate_prefix_and_streams_the_rest() {
        let mut c = cont(Mode::Restart { matched: 0 });
        let sent = "alpha-1 bravo-2";
        assert_eq!(
            sent_text(
                c.transform(&chunk("alpha-1", None), Some("id1"), sent)
                    .unwrap()
            ),
            None
        );
        assert_eq!(
            sent_text(
                c.transform(&chunk(" bra", None), Some("id1"), sent)
                    .unwrap()
            ),
            None
        );
        let (bytes, added) = c
            .transform(&chunk("vo-2 charlie-3", None), Some("id1"), sent)
            .unwrap()
            .unwrap();
        assert_eq!(added, " charlie-3");
        let s = String::from_utf8_lossy(&bytes);
        assert!(s.contains("\"id\":\"id1\"") && !s.contains("role"), "{s}");
        assert_eq!(
            sent_text(
                c.transform(&chunk(" delta-4", Some("stop")), Some("id1"), sent)
                    .unwrap()
            ),
            Some(" delta-4".into())
        );
    }

    #[test]
    fn a_restart_that_diverges_or_falls_short_is_an_error() {
        let mut c = cont(Mode::Restart { matched: 0 });
        assert!(c
            .transform(&chunk("alpha-2", None), None, "alpha-1 bravo")
            .is_err());
        let mut c = cont(Mode::Restart { matched: 0 });
        assert!(c
            .transform(&chunk("alpha-1", Some("stop")), None, "alpha-1 bravo")
            .is_err());
    }
}

//! Streams after the commit point. [`relay`] forwards the upstream's events and makes sure the
//! stream ends honestly. A cut, a stall (`idle_timeout`) or an in-band error is continued on
//! another target when the route allows it (`continuation`); otherwise, or when that fails, the
//! stream ends with a `finish_reason: "error"` chunk and an OpenAI error event, never a
//! truncated answer that looks complete. A stream whose upstream forgets `[DONE]` is finished
//! promptly once it is complete.
//!
//! Liveness is measured on content: `idle_timeout` runs from the last event that carried
//! content (or the finish), so an upstream that sends only `: keepalive` comments or empty
//! chunks still stalls out. The request's deadline (`request_timeout`) bounds the whole stream,
//! and a shutdown whose drain ran out of time ends it; both end it with the error event, no
//! continuation.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{Stream, StreamExt};
use tokio::time::Instant;

use super::attempt::Committed;
use super::continuation::{count_move, Mode};
use super::health::Verdict;
use super::path::{Attempt, AttemptOutcome, RequestOutcome};
use super::select::Picked;
use super::{Route, Target};
use crate::canonical::Dialect;
use crate::metrics::bump;
use crate::provider::ByteStream;
use crate::wire::chunks::{ChunkAction, ChunkTracker};
use crate::wire::sse::{decode_data, SseDecoder, SseEvent};

mod context;
mod reencode;
pub use self::context::{RelayContext, StreamCut, StreamReport};
use self::reencode::Reencode;

/// How long a finished stream (its `finish_reason` seen) may wait for the usage chunk or
/// `[DONE]` before we close it ourselves.
const FINISH_GRACE: Duration = Duration::from_secs(1);
/// How long a finished stream's upstream is read to its end so its connection can be reused.
const DRAIN_FOR: Duration = Duration::from_secs(2);
/// The most [`Relay::gather`] joins into one piece: the writer's own bound on what it holds
/// back to write at once.
const GATHER: usize = 16 * 1024;

struct Relay {
    upstream: ByteStream,
    decoder: SseDecoder,
    tracker: ChunkTracker,
    out: VecDeque<Bytes>,
    ended: bool,
    ctx: RelayContext,
    current: Arc<Target>,
    current_idx: usize,
    /// Why the current attempt went to its target.
    picked: Picked,
    attempt_start: Instant,
    /// The current attempt's span in the request's trace (0 untraced).
    span: u64,
    carried: usize,
    /// What the client has seen of the answer (kept only when continuation is possible).
    sent: String,
    attempts: Vec<Attempt>,
    /// Continuation tries that failed, kept for the audit path.
    failed_tries: Vec<Attempt>,
    /// Set when a stream passed through in the client's dialect is continued by another
    /// target: the continuation's chunks (inner form) are written on in that dialect.
    reencode: Option<Reencode>,
    /// When the last event with content (or the finish) arrived: `idle_timeout` runs from here.
    progress_at: Instant,
    /// Whether events with content (or the finish) were read since the stream last waited:
    /// `progress_at` is then moved to when it next waits, once for the events one upstream
    /// read brought rather than at each.
    progressed: bool,
    /// Resolves when the gateway ends what is still open: made once a stream, the first time
    /// it waits (a stream that never waits, or before its first chunk is written, has none).
    closing: Option<Closing>,
}

type Closing = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A relay's closing future (`slot`), made when first asked for. A route closed before it is
/// made resolves it at once.
fn closing<'a>(
    slot: &'a mut Option<Closing>,
    route: &Route,
) -> Pin<&'a mut (dyn Future<Output = ()> + Send)> {
    slot.get_or_insert_with(|| Box::pin(route.closed_owned()))
        .as_mut()
}

impl Relay {
    /// Send bytes on, in the client's dialect.
    fn emit(&mut self, bytes: Bytes) {
        match &mut self.reencode {
            None => self.out.push_back(bytes),
            Some(r) => {
                if let Some(b) = r.chunk(&bytes) {
                    self.out.push_back(b);
                }
            }
        }
    }

    fn idle_timeout(&self) -> Duration {
        self.ctx.route.config.failover.idle_timeout
    }

    /// Handle one upstream event; a break of the stream is returned for the caller to handle.
    fn handle(&mut self, ev: &SseEvent) -> Option<StreamCut> {
        match self.tracker.on_event(ev) {
            ChunkAction::Forward(bytes) => {
                let mode = self.ctx.continuation.as_ref().map(|c| c.splicer.mode);
                match mode {
                    None => self.emit(bytes),
                    Some(Mode::Original) => {
                        self.sent.push_str(self.tracker.last_text());
                        self.emit(bytes);
                    }
                    Some(_) => {
                        let data = decode_data(&bytes);
                        let id = self.tracker.stream_id().map(str::to_owned);
                        let cont = self.ctx.continuation.as_mut()?;
                        match cont.splicer.transform(&data, id.as_deref(), &self.sent) {
                            Ok(Some((b, added))) => {
                                self.sent.push_str(&added);
                                self.emit(b);
                            }
                            Ok(None) => {}
                            Err(d) => {
                                self.fail(AttemptOutcome::Diverged, d.0);
                                return None;
                            }
                        }
                    }
                }
                if self.tracker.finished && self.tracker.usage_seen {
                    // Everything has arrived: don't wait for an upstream that forgets `[DONE]`.
                    self.finish();
                }
            }
            ChunkAction::Skip => {
                if self.tracker.usage_seen && self.tracker.finished {
                    self.finish();
                } else if !self.tracker.usage_seen {
                    tracing::warn!(
                        request_id = %self.ctx.request_id, route = %self.ctx.route.config.name,
                        target = %self.current.id(), "skipped a stream chunk that is not valid JSON"
                    );
                }
            }
            ChunkAction::Done => self.finish(),
            ChunkAction::Error(message) => return Some(StreamCut::InBand(message)),
        }
        None
    }

    fn close_attempt(&mut self, outcome: AttemptOutcome) {
        let now = Instant::now();
        let duration = now - self.attempt_start;
        // A restart that diverged is the sampling's doing, not the target's.
        let verdict = match outcome {
            AttemptOutcome::Ok => Verdict::Ok,
            AttemptOutcome::Diverged => Verdict::Neutral,
            _ => Verdict::Failed,
        };
        self.current
            .health
            .stream_ended(self.attempt_start, now, verdict);
        self.attempts.push(Attempt {
            target: self.current.clone(),
            start: self.attempt_start - self.ctx.request_start,
            duration,
            outcome,
            status: None,
            carried_chars: Some(self.carried),
            picked: Some(self.picked),
            span: self.span,
        });
    }

    fn finish(&mut self) {
        let end = match &mut self.reencode {
            Some(r) => r.end(),
            None => self.tracker.terminator(),
        };
        if !end.is_empty() {
            self.out.push_back(end);
        }
        self.ended = true;
        (self.ctx.route).count_outcome(Some(self.current_idx), RequestOutcome::Ok);
        self.close_attempt(AttemptOutcome::Ok);
        self.report(None);
        // Read what is left of the upstream body (`[DONE]`, the chunked terminator) so its
        // connection goes back to the pool instead of being closed: otherwise the next stream
        // to this provider pays a new TCP and TLS handshake before its first token.
        let mut rest = std::mem::replace(&mut self.upstream, futures_util::stream::empty().boxed());
        if !drained_now(&mut rest) {
            tokio::spawn(async move {
                let drain = rest.for_each(|_| std::future::ready(()));
                let _ = tokio::time::timeout(DRAIN_FOR, drain).await;
            });
        }
    }

    fn report(&mut self, error: Option<String>) {
        if let Some(tx) = self.ctx.report.take() {
            let _ = tx.send(StreamReport {
                error,
                usage: self.tracker.usage,
                attempts: std::mem::take(&mut self.attempts),
            });
        }
    }

    /// End the stream with an error the SDKs understand. Its message may quote the provider
    /// (an in-band error event echoing its key): masked here, where every stream error event
    /// is written, and only here; the chunks of a stream are never scanned (see
    /// `api::respond`).
    fn fail(&mut self, outcome: AttemptOutcome, message: String) {
        let message = self.ctx.route.redactor.redact(&message).into_owned();
        (self.ctx.route).count_outcome(Some(self.current_idx), RequestOutcome::Error);
        self.close_attempt(outcome);
        self.attempts.append(&mut self.failed_tries);
        match &mut self.reencode {
            Some(r) => {
                let tail = r.error(&message);
                self.out.push_back(tail);
            }
            None => self.out.extend(self.tracker.error_tail(&message)),
        }
        self.ended = true;
        self.report(Some(message));
    }

    /// The stream broke after its commit point: continue elsewhere if the route allows and no
    /// tool call is under way, else end with an error that names the original break.
    async fn cut(&mut self, why: StreamCut) {
        tracing::warn!(
            request_id = %self.ctx.request_id, route = %self.ctx.route.config.name,
            target = %self.current.id(), kind = why.outcome().label(), chunks = self.tracker.content_chunks,
            elapsed_ms = self.attempt_start.elapsed().as_millis() as u64, "stream broke after commit"
        );
        let message = format!(
            "the answer from {} is incomplete: {}",
            self.current.id(),
            why.describe()
        );
        let mut cont = self.ctx.continuation.take();
        let out_of_time = matches!(why, StreamCut::Deadline(_) | StreamCut::Shutdown);
        let resumed = match cont.as_mut() {
            Some(c) if self.tracker.resumable() && !out_of_time => {
                let mut failed = Vec::new();
                let (start, deadline) = (self.ctx.request_start, self.ctx.deadline);
                let resumed = tokio::select! {
                    resumed = c.resume(&self.sent, true, start, deadline, &mut failed) => Some(resumed),
                    () = closing(&mut self.closing, &self.ctx.route) => None,
                };
                self.failed_tries.extend(failed);
                let Some(resumed) = resumed else {
                    self.ctx.continuation = cont;
                    let message = format!("{message}; {}", StreamCut::Shutdown.describe());
                    return self.fail(why.outcome(), message);
                };
                resumed
            }
            _ => None,
        };
        if let (Some(resumed), Some(c)) = (resumed, cont.as_mut()) {
            self.close_attempt(why.outcome());
            // The tries that failed on the way came after the broken attempt.
            self.attempts.append(&mut self.failed_tries);
            count_move(
                &self.ctx.route,
                self.current_idx,
                resumed.idx,
                self.sent.len(),
                &self.ctx.request_id,
            );
            c.splicer.mode = resumed.mode;
            self.ctx.continuation = cont;
            self.current_idx = resumed.idx;
            self.current = self.ctx.route.targets[resumed.idx].clone();
            self.picked = Picked::Continuation;
            self.attempt_start = resumed.start;
            self.span = resumed.span;
            self.progress_at = resumed.start;
            self.progressed = false;
            self.carried = self.sent.len();
            self.upstream = resumed.committed.upstream;
            self.decoder = resumed.committed.decoder;
            if self.tracker.dialect() != Dialect::OpenAi && self.reencode.is_none() {
                // The continuation streams in the inner form: read it as such, write it on
                // in the client's dialect.
                self.reencode = Some(Reencode::resuming(&self.tracker));
                let mut inner = ChunkTracker::new(true);
                inner.capture_text();
                self.tracker = inner;
            }
            for framed in resumed.committed.head {
                let ev = SseEvent::new(None, decode_data(&framed));
                if let Some(again) = self.handle(&ev) {
                    return Box::pin(self.cut(again)).await;
                }
            }
            return;
        }
        self.ctx.continuation = cont;
        self.fail(why.outcome(), message);
    }

    /// The next bytes for the client, as far as they can be had without waiting: pending while
    /// the upstream has nothing yet (its waker and `timer`'s are set); `Step::Cut` when the
    /// stream broke, for the caller to handle (continuing elsewhere may take a while).
    fn poll_step(&mut self, cx: &mut Context<'_>, timer: &mut Timer) -> Poll<Step> {
        loop {
            if let Some(bytes) = self.out.pop_front() {
                return Poll::Ready(Step::Bytes(bytes));
            }
            if self.ended {
                return Poll::Ready(Step::End);
            }
            if let Some(ev) = self.decoder.next_event() {
                let seen = (self.tracker.content_chunks, self.tracker.finished);
                if let Some(why) = self.handle(&ev) {
                    return Poll::Ready(Step::Cut(why));
                }
                self.progressed |= seen != (self.tracker.content_chunks, self.tracker.finished);
                continue;
            }
            match self.upstream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    self.decoder.push_bytes(bytes);
                    continue;
                }
                Poll::Ready(Some(Err(_)) | None) if self.tracker.finished => {
                    // Nothing is left to read, and a body that ended must not be polled again
                    // (Bedrock's event stream panics).
                    self.upstream = futures_util::stream::empty().boxed();
                    self.finish();
                    continue;
                }
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(Step::Cut(StreamCut::Cut)),
                Poll::Pending => {}
            }
            if closing(&mut self.closing, &self.ctx.route)
                .poll(cx)
                .is_ready()
            {
                return Poll::Ready(Step::Cut(StreamCut::Shutdown));
            }
            if std::mem::take(&mut self.progressed) {
                self.progress_at = Instant::now();
            }
            let idle_until = if self.tracker.finished {
                crate::clock::after(Instant::now(), FINISH_GRACE.min(self.idle_timeout()))
            } else {
                crate::clock::after(self.progress_at, self.idle_timeout())
            };
            if timer
                .poll_at(cx, idle_until.min(self.ctx.deadline))
                .is_pending()
            {
                return Poll::Pending;
            }
            // Nothing from the upstream in time.
            if self.tracker.finished {
                self.finish();
                continue;
            }
            if Instant::now() >= self.ctx.deadline {
                bump(&self.current.limits.stream_deadline);
                let after = self.ctx.deadline - self.ctx.request_start;
                return Poll::Ready(Step::Cut(StreamCut::Deadline(after)));
            }
            return Poll::Ready(Step::Cut(StreamCut::Stall(self.idle_timeout())));
        }
    }

    /// `first` and the bytes ready after it, as one piece: the events one upstream read
    /// brought go on as one frame, as the writer would write them together anyway, through
    /// each body layer and the writer's frame loop once (with the clock read once a wait,
    /// ~2,500 instructions less a stream of 12 chunks, bench/instructions). A piece is at most
    /// [`GATHER`] long but for a single longer event, which goes on alone, not copied. What
    /// ends the gathering (the stream's end, a break, bytes that would not fit) is left in
    /// `after`; bytes not ready yet are not waited for.
    fn gather(
        &mut self,
        first: Bytes,
        cx: &mut Context<'_>,
        timer: &mut Timer,
        after: &mut Option<Step>,
    ) -> Bytes {
        let mut joined = BytesMut::new();
        loop {
            let len = joined.len().max(first.len());
            match self.poll_step(cx, timer) {
                Poll::Ready(Step::Bytes(bytes)) if len + bytes.len() <= GATHER => {
                    if joined.is_empty() {
                        joined.reserve(GATHER.min(4 * (first.len() + bytes.len())));
                        joined.extend_from_slice(&first);
                    }
                    joined.extend_from_slice(&bytes);
                }
                Poll::Ready(step) => {
                    *after = Some(step);
                    break;
                }
                Poll::Pending => break,
            }
        }
        if joined.is_empty() {
            first
        } else {
            joined.freeze()
        }
    }
}

/// Read what an upstream body has already delivered, without waiting: whether it ended. Its
/// rest has mostly arrived with the last event (`[DONE]`, the chunked terminator), so most
/// streams end here and spare the task that would read it (~1,700 instructions); a body that
/// has not ended after a few reads is left to that task.
fn drained_now(rest: &mut ByteStream) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..4 {
        match rest.poll_next_unpin(&mut cx) {
            Poll::Ready(Some(Ok(_))) => {}
            // A broken connection is not pooled: nothing to wait for.
            Poll::Ready(Some(Err(_)) | None) => return true,
            Poll::Pending => return false,
        }
    }
    false
}

/// What [`Relay::poll_step`] found.
enum Step {
    Bytes(Bytes),
    End,
    Cut(StreamCut),
}

/// The relay's one timer (the idle and deadline bound of the upstream's next bytes), made
/// the first time the stream waits (not before its first chunk is written) and moved only
/// when its deadline does: a later deadline is an atomic store in tokio's timer, where a
/// timeout made for each chunk registered a timer and removed it.
#[derive(Default)]
struct Timer {
    sleep: Option<(Pin<Box<tokio::time::Sleep>>, Instant)>,
}

impl Timer {
    fn poll_at(&mut self, cx: &mut Context<'_>, at: Instant) -> Poll<()> {
        match &mut self.sleep {
            Some((sleep, set)) => {
                if at != *set {
                    *set = at;
                    sleep.as_mut().reset(at);
                }
                sleep.as_mut().poll(cx)
            }
            None => {
                let sleep = self
                    .sleep
                    .insert((Box::pin(tokio::time::sleep_until(at)), at));
                sleep.0.as_mut().poll(cx)
            }
        }
    }
}

/// [`Relay`] as the client's stream. What is ready is taken by a plain poll, with no future
/// made for each chunk (the relay moved into and out of one cost ~500 instructions a
/// chunk); a break runs as a future of its own, which holds the relay until it is handled.
struct RelayStream {
    relay: Option<Box<Relay>>,
    cutting: Option<Pin<Box<dyn Future<Output = Box<Relay>> + Send>>>,
    timer: Timer,
    /// What ended the last gathering (the stream's end, a break, bytes that would not fit):
    /// taken before the relay is polled again.
    after: Option<Step>,
}

impl Stream for RelayStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(cutting) = &mut this.cutting {
                this.relay = Some(ready!(cutting.as_mut().poll(cx)));
                this.cutting = None;
            }
            let Some(relay) = &mut this.relay else {
                return Poll::Ready(None);
            };
            let step = match this.after.take() {
                Some(step) => step,
                None => ready!(relay.poll_step(cx, &mut this.timer)),
            };
            match step {
                Step::Bytes(bytes) => {
                    let bytes = relay.gather(bytes, cx, &mut this.timer, &mut this.after);
                    return Poll::Ready(Some(Ok(bytes)));
                }
                Step::End => return Poll::Ready(None),
                Step::Cut(why) => {
                    if let Some(mut relay) = this.relay.take() {
                        this.cutting = Some(Box::pin(async move {
                            relay.cut(why).await;
                            relay
                        }));
                    }
                }
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if !self.ended {
            // The client went away mid-stream.
            (self.ctx.route).count_outcome(Some(self.current_idx), RequestOutcome::Cancelled);
        }
    }
}

/// Relay a committed stream to the client: first the events read before the commit point, then
/// the rest of the upstream, continued elsewhere or ended honestly when it breaks.
pub fn relay(
    committed: Committed,
    ctx: RelayContext,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    relay_stream(committed, ctx)
}

/// [`relay`]'s stream, by its own type (which the tests poll).
fn relay_stream(committed: Committed, ctx: RelayContext) -> RelayStream {
    let mut tracker = committed.tracker;
    let continues = ctx.continuation.is_some();
    tracker.set_capture(continues);
    let sent = if continues {
        committed.head_text
    } else {
        String::new()
    };
    let current = ctx.route.targets[ctx.target_idx].clone();
    let relay = Relay {
        upstream: committed.upstream,
        decoder: committed.decoder,
        out: committed.head.into(),
        ended: false,
        tracker,
        current,
        current_idx: ctx.target_idx,
        picked: ctx.picked,
        attempt_start: ctx.attempt_start,
        span: ctx.span,
        carried: 0,
        sent,
        attempts: Vec::new(),
        failed_tries: Vec::new(),
        reencode: None,
        // The head's content arrived just now: the commit point.
        progress_at: Instant::now(),
        progressed: false,
        closing: None,
        ctx,
    };
    RelayStream {
        relay: Some(Box::new(relay)),
        cutting: None,
        timer: Timer::default(),
        after: None,
    }
}

#[cfg(test)]
mod tests;

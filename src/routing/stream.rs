//! Streams after the commit point. Before the first content nothing reaches the client, so the
//! failover loop can still move on; after it, [`relay`] forwards the upstream's events and makes
//! sure the stream ends honestly: a cut, a stall or an in-band error ends it with a
//! `finish_reason: "error"` chunk and an OpenAI error event, never a truncated answer that looks
//! complete. A stream whose upstream forgets `[DONE]` is finished promptly once it is complete.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::health::Verdict;
use super::Target;
use crate::api::sse::{encode_data, SseDecoder, SseEvent, DONE};

/// How long a finished stream (its `finish_reason` seen) may wait for the usage chunk or
/// `[DONE]` before we close it ourselves.
const FINISH_GRACE: Duration = Duration::from_secs(1);

/// Token counts as OpenAI reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// What one upstream event means for the relay.
#[derive(Debug)]
pub enum ChunkAction {
    /// Send these bytes on.
    Forward(Bytes),
    /// Nothing to send (an unparseable chunk, or a usage chunk the client did not ask for).
    Skip,
    /// `[DONE]`.
    Done,
    /// The upstream reported an error inside the stream.
    Error(String),
}

/// Identity of the stream, copied into chunks we write ourselves.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ChunkMeta {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    created: Option<u64>,
}

/// Reads OpenAI stream chunks just enough to know where the stream stands.
#[derive(Debug)]
pub struct ChunkTracker {
    client_wants_usage: bool,
    /// Content (text, a tool call, a refusal or a finish) has been seen: the commit point.
    pub committed: bool,
    /// A `finish_reason` has been seen.
    pub finished: bool,
    /// The usage chunk has been seen.
    pub usage_seen: bool,
    /// Chunks that could not be parsed and were skipped.
    pub malformed: u32,
    /// Content chunks seen.
    pub content_chunks: u32,
    /// Token counts from the usage chunk.
    pub usage: Option<Usage>,
    meta: Option<ChunkMeta>,
}

#[derive(Deserialize)]
struct ChunkView<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceView<'a>>>,
    #[serde(default, borrow)]
    usage: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaView<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a RawValue>,
    #[serde(default, borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(default, borrow)]
    refusal: Option<&'a RawValue>,
}

fn has_text(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get() != "\"\"")
}

/// The human message of an in-band `{"error": ...}` payload.
fn error_message(raw: &RawValue) -> String {
    #[derive(Deserialize)]
    struct E {
        message: Option<String>,
    }
    serde_json::from_str::<E>(raw.get())
        .ok()
        .and_then(|e| e.message)
        .unwrap_or_else(|| raw.get().chars().take(200).collect())
}

impl ChunkTracker {
    /// A tracker for one stream; `client_wants_usage` keeps the usage chunk in the output.
    pub fn new(client_wants_usage: bool) -> Self {
        ChunkTracker {
            client_wants_usage,
            committed: false,
            finished: false,
            usage_seen: false,
            malformed: 0,
            content_chunks: 0,
            usage: None,
            meta: None,
        }
    }

    /// Classify one event and update the stream's state.
    pub fn on_event(&mut self, ev: &SseEvent) -> ChunkAction {
        if ev.data.as_ref() == DONE {
            return ChunkAction::Done;
        }
        let Ok(view) = serde_json::from_slice::<ChunkView<'_>>(&ev.data) else {
            self.malformed += 1;
            return ChunkAction::Skip;
        };
        if let Some(err) = view.error {
            return ChunkAction::Error(error_message(err));
        }
        let choices = view.choices.unwrap_or_default();
        for choice in &choices {
            if let Some(d) = &choice.delta {
                if has_text(d.content)
                    || d.tool_calls.is_some()
                    || d.function_call.is_some()
                    || has_text(d.refusal)
                {
                    self.committed = true;
                    self.content_chunks += 1;
                }
            }
            if choice.finish_reason.is_some() {
                self.committed = true;
                self.finished = true;
            }
        }
        if self.meta.is_none() {
            self.meta = serde_json::from_slice(&ev.data).ok();
        }
        if let (true, Some(usage)) = (choices.is_empty(), view.usage) {
            self.usage_seen = true;
            self.usage = serde_json::from_str(usage.get()).ok();
            if !self.client_wants_usage {
                return ChunkAction::Skip;
            }
        }
        ChunkAction::Forward(encode_data(&ev.data))
    }

    /// The chunk and error event that end a broken stream.
    fn error_tail(&self, message: &str) -> [Bytes; 2] {
        let meta = self.meta.clone().unwrap_or_default();
        let finish = serde_json::json!({
            "id": meta.id,
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
        });
        let error = serde_json::json!({
            "error": {"message": message, "type": "upstream_error", "code": "stream_interrupted"}
        });
        [
            encode_data(finish.to_string().as_bytes()),
            encode_data(error.to_string().as_bytes()),
        ]
    }
}

/// Why a committed stream broke.
#[derive(Debug, Clone)]
pub enum StreamCut {
    /// The connection failed or closed before the answer was complete.
    Cut,
    /// No chunk for `idle_timeout`.
    Stall(Duration),
    /// The upstream sent an error event.
    InBand(String),
}

impl StreamCut {
    fn describe(&self) -> String {
        match self {
            StreamCut::Cut => "upstream connection closed before the answer was complete".into(),
            StreamCut::Stall(d) => format!("upstream sent nothing for {} ms", d.as_millis()),
            StreamCut::InBand(m) => format!("upstream error: {m}"),
        }
    }

    /// A low-cardinality label.
    pub fn kind(&self) -> &'static str {
        match self {
            StreamCut::Cut => "cut",
            StreamCut::Stall(_) => "stall",
            StreamCut::InBand(_) => "in_band_error",
        }
    }
}

/// A stream that passed its commit point, ready to be relayed.
pub struct Committed {
    pub upstream: BoxStream<'static, reqwest::Result<Bytes>>,
    pub decoder: SseDecoder,
    pub tracker: ChunkTracker,
    /// Events already read (up to and including the first content), to send first.
    pub head: Vec<Bytes>,
}

/// Who is relaying: for the log lines a broken stream writes and the target's health, which
/// learns how the attempt ended when the stream does.
#[derive(Debug)]
pub struct RelayContext {
    pub request_id: String,
    pub route: String,
    pub target: Arc<Target>,
    pub attempt_start: Instant,
    pub idle_timeout: Duration,
    /// Told how the stream ended; dropped unsent when the client went away first.
    pub report: Option<tokio::sync::oneshot::Sender<StreamReport>>,
}

/// How a relayed stream ended.
#[derive(Debug, Clone)]
pub struct StreamReport {
    /// The stream ended complete.
    pub complete: bool,
    /// Why it did not.
    pub error: Option<String>,
    /// `cut`, `stall` or `in_band_error` when it did not.
    pub kind: Option<&'static str>,
    pub usage: Option<Usage>,
    /// The attempt's whole duration.
    pub duration: Duration,
}

struct Relay {
    upstream: BoxStream<'static, reqwest::Result<Bytes>>,
    decoder: SseDecoder,
    tracker: ChunkTracker,
    out: VecDeque<Bytes>,
    ended: bool,
    ctx: RelayContext,
    started: Instant,
}

impl Relay {
    fn handle(&mut self, ev: &SseEvent) {
        match self.tracker.on_event(ev) {
            ChunkAction::Forward(bytes) => {
                self.out.push_back(bytes);
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
                        request_id = %self.ctx.request_id, route = %self.ctx.route,
                        target = %self.ctx.target.id(), "skipped a stream chunk that is not valid JSON"
                    );
                }
            }
            ChunkAction::Done => self.finish(),
            ChunkAction::Error(message) => self.cut(StreamCut::InBand(message)),
        }
    }

    fn finish(&mut self) {
        self.out.push_back(encode_data(DONE));
        self.ended = true;
        let elapsed = self.ctx.attempt_start.elapsed();
        self.ctx
            .target
            .health
            .attempt(Instant::now(), Verdict::Ok, elapsed);
        self.report(None, None, elapsed);
    }

    fn report(&mut self, kind: Option<&'static str>, error: Option<String>, duration: Duration) {
        if let Some(tx) = self.ctx.report.take() {
            let _ = tx.send(StreamReport {
                complete: error.is_none(),
                error,
                kind,
                usage: self.tracker.usage,
                duration,
            });
        }
    }

    /// The seam for mid-stream continuation: today a broken stream ends with an error.
    fn cut(&mut self, why: StreamCut) {
        let elapsed = self.ctx.attempt_start.elapsed();
        self.ctx
            .target
            .health
            .attempt(Instant::now(), Verdict::Failed, elapsed);
        let message = format!(
            "the answer from {} is incomplete: {}",
            self.ctx.target.id(),
            why.describe()
        );
        tracing::warn!(
            request_id = %self.ctx.request_id, route = %self.ctx.route, target = %self.ctx.target.id(),
            kind = why.kind(), chunks = self.tracker.content_chunks,
            elapsed_ms = self.started.elapsed().as_millis() as u64, "stream broke after commit"
        );
        self.out.extend(self.tracker.error_tail(&message));
        self.ended = true;
        self.report(Some(why.kind()), Some(message), elapsed);
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        loop {
            if let Some(bytes) = self.out.pop_front() {
                return Some(bytes);
            }
            if self.ended {
                return None;
            }
            if let Some(ev) = self.decoder.next_event() {
                self.handle(&ev);
                continue;
            }
            let wait = if self.tracker.finished {
                FINISH_GRACE.min(self.ctx.idle_timeout)
            } else {
                self.ctx.idle_timeout
            };
            match tokio::time::timeout(wait, self.upstream.next()).await {
                Ok(Some(Ok(bytes))) => self.decoder.push(&bytes),
                Ok(Some(Err(_))) | Ok(None) if self.tracker.finished => self.finish(),
                Ok(Some(Err(_))) | Ok(None) => self.cut(StreamCut::Cut),
                Err(_) if self.tracker.finished => self.finish(),
                Err(_) => self.cut(StreamCut::Stall(wait)),
            }
        }
    }
}

/// Relay a committed stream to the client: first the events read before the commit point, then
/// the rest of the upstream, ending honestly.
pub fn relay(
    committed: Committed,
    ctx: RelayContext,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let relay = Relay {
        upstream: committed.upstream,
        decoder: committed.decoder,
        out: committed.head.into(),
        ended: false,
        tracker: committed.tracker,
        ctx,
        started: Instant::now(),
    };
    futures_util::stream::unfold(relay, |mut r| async move {
        let bytes = r.next_bytes().await?;
        Some((Ok(bytes), r))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: Bytes::copy_from_slice(data.as_bytes()),
        }
    }

    #[test]
    fn the_commit_point_is_the_first_content() {
        let mut t = ChunkTracker::new(false);
        let role = r#"{"id":"c1","model":"m","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert!(matches!(t.on_event(&ev(role)), ChunkAction::Forward(_)));
        assert!(!t.committed);
        let text =
            r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        t.on_event(&ev(text));
        assert!(t.committed && !t.finished);
        let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#;
        let mut t2 = ChunkTracker::new(false);
        t2.on_event(&ev(tool));
        assert!(t2.committed);
    }

    #[test]
    fn usage_chunk_is_kept_only_when_asked_for() {
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":1}}"#;
        let mut t = ChunkTracker::new(false);
        assert!(matches!(t.on_event(&ev(usage)), ChunkAction::Skip));
        assert!(t.usage_seen);
        let mut t = ChunkTracker::new(true);
        assert!(matches!(t.on_event(&ev(usage)), ChunkAction::Forward(_)));
    }

    #[test]
    fn errors_done_and_garbage() {
        let mut t = ChunkTracker::new(false);
        assert!(matches!(t.on_event(&ev("[DONE]")), ChunkAction::Done));
        assert!(matches!(t.on_event(&ev("{nope")), ChunkAction::Skip));
        assert_eq!(t.malformed, 1);
        match t.on_event(&ev(
            r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#,
        )) {
            ChunkAction::Error(m) => assert_eq!(m, "Overloaded"),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn error_tail_says_incomplete() {
        let mut t = ChunkTracker::new(false);
        t.on_event(&ev(r#"{"id":"c9","model":"m1","created":5,"choices":[{"index":0,"delta":{"content":"x"}}]}"#));
        let [finish, error] = t.error_tail("broken");
        let finish = std::str::from_utf8(&finish).unwrap_or_default();
        assert!(finish.contains(r#""finish_reason":"error""#) && finish.contains(r#""id":"c9""#));
        assert!(std::str::from_utf8(&error)
            .unwrap_or_default()
            .contains("stream_interrupted"));
    }
}

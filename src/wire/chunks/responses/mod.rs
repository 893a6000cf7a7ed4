//! A Responses API event stream read in passing (same-dialect pass-through to an OpenAI or
//! Azure target's `/responses`): `response.created` names the response, output items carry
//! messages, function calls and reasoning, `response.completed` (or `.incomplete`) ends it with
//! the usage, `response.failed` and `error` report a failure in-band. Every event but the
//! failures goes on framed as it came; an unknown event type goes on untouched.
//!
//! With text capture on (the stream may be continued elsewhere) the tracker also keeps what a
//! continuation needs to go on in this dialect: the next sequence number and output index, the
//! output items already done, and the open text item with its text ([`ResponsesProgress`]).

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::value::RawValue;

use super::{ChunkAction, ChunkMeta, ChunkTracker, Shaped, Usage};
use crate::canonical::responses::{OpenText, Resume};
use crate::canonical::RawJson;
use crate::wire::sse::{encode_event, SseEvent};

mod views;

#[cfg(fuzzing)]
pub use views::fuzz_event_read;
use views::EventRead;
pub(super) use views::TextDeltaShape;
pub(in crate::wire) use views::UsageView;

/// How far a Responses stream the client has seen got: what a continuation needs to go on
/// with the same response (kept only with text capture on).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ResponsesProgress {
    /// The next event's `sequence_number`.
    pub next_sequence: u64,
    /// The next output item's `output_index`.
    pub next_output_index: u32,
    /// Output items the client has in full (`response.output_item.done`), as they came.
    pub done_items: Vec<RawJson>,
    /// The message item whose text is streaming, if one is open.
    pub open_text: Option<OpenText>,
    /// `created_at` of the response.
    pub created_at: Option<u64>,
}

/// A Responses `response.failed` event ending a broken stream (`id` and `model` as the stream
/// named them), numbered `sequence`.
pub(super) fn failed_event(
    meta: &ChunkMeta,
    created_at: Option<u64>,
    sequence: u64,
    message: &str,
) -> Bytes {
    let body = serde_json::json!({
        "type": "response.failed",
        "sequence_number": sequence,
        "response": {
            "id": meta.id,
            "object": "response",
            "created_at": created_at.unwrap_or(0),
            "status": "failed",
            "model": meta.model,
            "output": [],
            "error": {"code": "server_error", "message": message},
            "incomplete_details": null,
            "parallel_tool_calls": true,
            "tool_choice": "auto",
            "tools": [],
        },
    });
    encode_event("response.failed", body.to_string().as_bytes())
}

impl ChunkTracker {
    /// Classify one Responses API event and update the stream's state.
    pub(super) fn on_responses_event(&mut self, ev: &SseEvent) -> ChunkAction {
        let read = self.read_event(
            &ev.data,
            |shape, data| match shape {
                Shaped::TextDelta(shape) => shape.read(data),
                _ => None,
            },
            EventRead::read,
            |data, read| TextDeltaShape::of(data, read).map(Shaped::TextDelta),
        );
        let Some(read) = read else {
            self.malformed += 1;
            return ChunkAction::Skip;
        };
        let view = &read.view;
        let capture = self.capture_text;
        let progress = self.responses.get_or_insert_with(Default::default);
        if let Some(n) = view.sequence_number {
            progress.next_sequence = progress.next_sequence.max(n.saturating_add(1));
        }
        if let Some(i) = view.output_index {
            progress.next_output_index = progress.next_output_index.max(i.saturating_add(1));
        }
        match view.kind.as_ref() {
            "response.created" | "response.in_progress" | "response.queued" => {
                let response = read.response();
                if let Some(r) = response {
                    progress.created_at = r.created_at.or(progress.created_at);
                    if self.meta.is_none() {
                        self.meta = Some(ChunkMeta {
                            id: r.id,
                            model: r.model,
                            created: r.created_at,
                        });
                    }
                }
            }
            "response.output_item.added" => {
                let item = read.item();
                match item.as_ref().map(|i| i.kind.as_ref()) {
                    Some("message") => {
                        if capture {
                            progress.open_text = Some(OpenText {
                                item_id: item.and_then(|i| i.id).unwrap_or_default(),
                                output_index: view.output_index.unwrap_or(0),
                                content_index: 0,
                                text: String::new(),
                            });
                        }
                    }
                    Some("reasoning") => self.reasoning_seen = true,
                    // function calls, and the calls of tools that run upstream (web search...).
                    _ => {
                        self.tool_calls_seen = true;
                        self.committed = true;
                        self.content_chunks += 1;
                    }
                }
            }
            "response.output_text.delta" => {
                let text = view.delta.as_deref().unwrap_or_default();
                if !text.is_empty() {
                    self.committed = true;
                    self.content_chunks += 1;
                }
                if capture {
                    if let Some(open) = &mut progress.open_text {
                        if view.item_id.as_deref() == Some(open.item_id.as_str()) {
                            open.content_index = view.content_index.unwrap_or(0);
                            open.text.push_str(text);
                        }
                    }
                    self.last_text.push_str(text);
                }
            }
            "response.output_item.done" if capture => {
                if let Some(item) = view.item {
                    // JSON (read by the scanner or serde_json): taken whole here.
                    if let Ok(item) = serde_json::from_slice::<&RawValue>(item.0) {
                        progress.done_items.push(RawJson::from_raw(item));
                    }
                }
                progress.open_text = None;
            }
            "response.completed" | "response.incomplete" => {
                let response = read.response();
                if let Some(u) = response.and_then(|r| r.usage) {
                    self.usage_seen = true;
                    self.usage = Some(u.usage());
                }
                self.committed = true;
                self.finished = true;
                // Nothing follows the usage: the relay ends the stream after this event.
                self.usage_seen = true;
            }
            "response.failed" => {
                let message = read
                    .response()
                    .and_then(|r| r.error)
                    .and_then(|e| e.message)
                    .map(Cow::into_owned);
                return ChunkAction::Error(message.unwrap_or_else(|| "response failed".into()));
            }
            "error" => {
                let message = view.message.as_deref().map(str::to_owned);
                return ChunkAction::Error(message.unwrap_or_else(|| "upstream error".into()));
            }
            kind if kind.starts_with("response.reasoning") => {
                self.reasoning_seen = true;
                self.committed = true;
                self.content_chunks += 1;
            }
            kind if kind.ends_with(".delta") => {
                // Refusals, function-call arguments, built-in tools' progress.
                self.committed = true;
                self.content_chunks += 1;
            }
            _ => {} // content_part.*, *.done, and types we do not know: passed on
        }
        let name = ev.event.as_deref().unwrap_or(view.kind.as_ref());
        ChunkAction::Forward(ev.framed(Some(name)))
    }

    /// A Responses stream's progress (with text capture on: what a continuation needs).
    pub fn responses_progress(&self) -> Option<&ResponsesProgress> {
        self.responses.as_deref()
    }

    /// Where a continuation of this Responses stream goes on (with text capture on: else it
    /// knows no items).
    pub fn responses_resume(&self) -> Resume {
        let meta = self.meta.clone().unwrap_or_default();
        let progress = self.responses.as_deref().cloned().unwrap_or_default();
        Resume {
            response_id: meta.id.unwrap_or_default(),
            model: meta.model.unwrap_or_default(),
            created_at: progress.created_at.unwrap_or(0),
            next_sequence_number: progress.next_sequence,
            next_output_index: progress.next_output_index,
            completed_items: progress.done_items,
            open_text: progress.open_text,
        }
    }

    /// The `response.failed` event ending a broken Responses stream.
    pub(super) fn responses_failed(&self, message: &str) -> Bytes {
        let meta = self.meta.clone().unwrap_or_default();
        let progress = self.responses.as_deref();
        failed_event(
            &meta,
            progress.and_then(|p| p.created_at),
            progress.map_or(0, |p| p.next_sequence),
            message,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Dialect;
    use crate::wire::chunks::tests::forwarded;

    fn ev(data: &str) -> SseEvent {
        let name = serde_json::from_str::<serde_json::Value>(data)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_str().map(str::to_owned)));
        SseEvent::new(name, Bytes::copy_from_slice(data.as_bytes()))
    }

    #[test]
    fn text_commits_at_its_first_delta_and_events_go_on_as_they_came() {
        let mut t = ChunkTracker::for_dialect(Dialect::Responses, true);
        t.capture_text();
        let created = r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-5","created_at":7,"status":"in_progress","output":[]}}"#;
        assert_eq!(
            forwarded(t.on_event(&ev(created))),
            format!("event: response.created\ndata: {created}\n\n")
        );
        assert_eq!(t.stream_id(), Some("resp_1"));
        let added = r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}"#;
        t.on_event(&ev(added));
        let part = r#"{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}"#;
        t.on_event(&ev(part));
        assert!(!t.committed, "nothing said yet");
        let delta = r#"{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}"#;
        t.on_event(&ev(delta));
        assert!(t.committed && t.resumable());
        assert_eq!(t.last_text(), "Hel");
        let unknown = r#"{"type":"response.brand_new","sequence_number":4}"#;
        assert!(forwarded(t.on_event(&ev(unknown))).contains("brand_new"));
        let progress = t.responses_progress().cloned().unwrap_or_default();
        assert_eq!(progress.next_sequence, 5);
        assert_eq!(progress.next_output_index, 1);
        assert_eq!(progress.created_at, Some(7));
        assert_eq!(
            progress.open_text,
            Some(OpenText {
                item_id: "msg_1".into(),
                output_index: 0,
                content_index: 0,
                text: "Hel".into()
            })
        );
        let done = r#"{"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Hel"}]}}"#;
        t.on_event(&ev(done));
        let progress = t.responses_progress().cloned().unwrap_or_default();
        assert_eq!(progress.open_text, None);
        assert_eq!(progress.done_items.len(), 1);
        let completed = r#"{"type":"response.completed","sequence_number":6,"response":{"id":"resp_1","status":"completed","output":[],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},"output_tokens":3,"total_tokens":15}}}"#;
        assert!(forwarded(t.on_event(&ev(completed))).contains("response.completed"));
        assert!(t.finished && t.usage_seen);
        assert_eq!(
            t.usage,
            Some(Usage {
                cache_read_tokens: 8,
                ..Usage::new(12, 3)
            })
        );
        assert!(t.terminator().is_empty(), "the completed event is the end");
    }

    #[test]
    fn calls_and_reasoning_are_not_resumable_and_failures_are_errors() {
        let mut t = ChunkTracker::for_dialect(Dialect::Responses, true);
        let reasoning = r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#;
        t.on_event(&ev(reasoning));
        assert!(!t.committed && !t.resumable());
        let mut t = ChunkTracker::for_dialect(Dialect::Responses, true);
        let call = r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":""}}"#;
        t.on_event(&ev(call));
        assert!(t.committed && t.tool_calls_seen && !t.resumable());
        let failed = r#"{"type":"response.failed","sequence_number":2,"response":{"id":"resp_1","status":"failed","error":{"code":"server_error","message":"The server had an error"}}}"#;
        match t.on_event(&ev(failed)) {
            ChunkAction::Error(m) => assert_eq!(m, "The server had an error"),
            other => panic!("expected an error, got {other:?}"),
        }
        let error = r#"{"type":"error","sequence_number":3,"code":"rate_limit_exceeded","message":"Slow down"}"#;
        match t.on_event(&ev(error)) {
            ChunkAction::Error(m) => assert_eq!(m, "Slow down"),
            other => panic!("expected an error, got {other:?}"),
        }
        let tail = t.error_tail("broken");
        assert_eq!(tail.len(), 1);
        let tail = String::from_utf8_lossy(&tail[0]).into_owned();
        assert!(tail.starts_with("event: response.failed\n"), "{tail}");
        assert!(tail.contains(r#""sequence_number":4"#), "{tail}");
        assert!(matches!(t.on_event(&ev("{nope")), ChunkAction::Skip));
    }

    /// A stream's text deltas are read by the shape of the first after the commit point, each
    /// as serde_json reads it; one whose type, numbers or texts the view would read otherwise
    /// is read whole.
    #[test]
    fn text_deltas_of_one_shape_read_as_whole_ones() {
        let delta = |seq: &str, text: &str| {
            format!(
                r#"{{"type":"response.output_text.delta","sequence_number":{seq},"item_id":"msg_1","output_index":0,"content_index":0,"delta":{text},"logprobs":[],"obfuscation":"x{seq}"}}"#
            )
        };
        let stream = [
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","model":"gpt-5","created_at":7,"status":"in_progress","output":[]}}"#.to_owned(),
            r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}"#.to_owned(),
            delta("2", r#""Hi""#),
            delta("3", r#""""#),
            delta("44", r#"" th\"ere\u00e9\n""#),
            delta("5", r#""\ud800""#),
            delta("-6", r#""minus""#),
            delta("7.5", r#""half""#),
            delta("18446744073709551616", r#""over""#),
            delta("9", "null"),
            delta("10", "7"),
            delta("11", r#""again""#),
            delta("12", r#""more""#).replace("output_text.delta", "output_text.delte"),
            delta("13", r#""last""#).replace(r#""content_index":0"#, r#""content_index":4294967296"#),
            r#"{"type":"response.completed","sequence_number":14,"response":{"id":"resp_1","usage":{"input_tokens":3,"output_tokens":5}}}"#.to_owned(),
        ];
        for capture in [false, true] {
            let mut shaped = ChunkTracker::for_dialect(Dialect::Responses, true);
            let mut whole = ChunkTracker::for_dialect(Dialect::Responses, true).without_shapes();
            shaped.set_capture(capture);
            whole.set_capture(capture);
            for event in &stream {
                let (a, b) = (shaped.on_event(&ev(event)), whole.on_event(&ev(event)));
                assert_eq!(forwarded(a), forwarded(b), "{event}");
                assert_eq!(shaped.observed(), whole.observed(), "{event}");
                assert_eq!(shaped.responses_progress(), whole.responses_progress());
            }
            assert_eq!(
                shaped.malformed, 6,
                "a lone surrogate, -6, 7.5, past u64, a number for a text, an index past u32"
            );
            assert!(whole.shape.is_none());
        }
        // The shape made of the first delta after the commit point (the first text) reads those
        // whose view reads alike.
        let mut t = ChunkTracker::for_dialect(Dialect::Responses, true);
        for event in &stream[..4] {
            t.on_event(&ev(event));
        }
        let Some(Shaped::TextDelta(shape)) = t.shape.as_deref() else {
            panic!("no shape made");
        };
        for (n, event) in stream.iter().enumerate() {
            let read = shape.read(event.as_bytes());
            assert_eq!(read.is_some(), [2, 3, 4, 11].contains(&n), "{event}");
        }
    }
}

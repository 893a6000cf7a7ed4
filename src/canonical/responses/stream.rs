//! Reading Responses streams: semantic events (`event: response.output_text.delta` and the
//! like), each with its `type` in the data too, ending with `response.completed`,
//! `response.incomplete` or `response.failed`.
//!
//! Output items are numbered across messages, reasoning and tool calls (`output_index`), and
//! deltas name their item (`item_id`); canonical tool calls are numbered among tool calls
//! only, so the decoder maps items to tool indices. Arguments that come only whole (in
//! `function_call_arguments.done` or `output_item.done`, as some servers send them) are read
//! from there. A failed response comes as an `error` event, a `response.failed`, or both: one
//! canonical error is emitted.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::{arguments_of, finish_of, parse_error, WireIncomplete, WireUsage};
use super::WireItem;
use crate::canonical::error::{ErrorClass, TranslateError};
use crate::canonical::types::{StreamEvent, Usage};

/// An event; members whose type differs between event kinds are left raw.
#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default, borrow)]
    item_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    output_index: Option<&'a RawValue>,
    #[serde(default, borrow)]
    delta: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// The members of a response object the decoder reads.
#[derive(Deserialize)]
struct WireHead<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    incomplete_details: Option<WireIncomplete<'a>>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// A function call item seen in the stream.
#[derive(Debug)]
struct Call {
    item_id: String,
    output_index: Option<u32>,
    index: u32,
    has_arguments: bool,
}

/// More tool calls than any answer has: past this a stream is broken, not a reason to grow.
const MAX_CALLS: usize = 1 << 12;

/// Reads a Responses event stream into canonical events.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    done: bool,
    /// An error was emitted (an `error` event before `response.failed`).
    errored: bool,
    calls: Vec<Call>,
}

/// A string member, if it is one.
fn string<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// A `u32` member, if it is one.
fn number(raw: Option<&RawValue>) -> Option<u32> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the stream's last event (`response.completed`, `response.incomplete` or
    /// `response.failed`) has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event. The data's `type` says what it is; the `event:` name is used only
    /// when the data has none. Events the model has no place for (reasoning summaries,
    /// content parts, built-in tool progress, ones added later) are skipped.
    pub fn decode(
        &mut self,
        event: Option<&str>,
        data: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        let data = data.trim_ascii();
        if data.is_empty() || data == b"[DONE]" {
            return Ok(());
        }
        let wire: WireEvent<'_> = serde_json::from_slice(data)?;
        let kind = wire.kind.as_deref().or(event).unwrap_or_default();
        match kind {
            "response.created" | "response.in_progress" => {
                if let Some(raw) = wire.response {
                    let head: WireHead<'_> = serde_json::from_str(raw.get())?;
                    self.start(&head, out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = string(wire.delta).filter(|t| !t.is_empty()) {
                    self.ensure_started(out);
                    out.push(StreamEvent::TextDelta(text.into_owned()));
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                let Some(raw) = wire.item else {
                    return Err(TranslateError::invalid(format!("`{kind}` without an item")));
                };
                let item: WireItem<'_> = serde_json::from_str(raw.get())?;
                if item.kind.as_deref() == Some("function_call") {
                    let output_index = number(wire.output_index);
                    self.function_call(&item, output_index, out)?;
                }
            }
            "response.function_call_arguments.delta" => {
                let fragment = string(wire.delta).filter(|f| !f.is_empty());
                let call = self.call_of(wire.item_id, wire.output_index);
                if let (Some(call), Some(fragment)) = (call, fragment) {
                    call.has_arguments = true;
                    out.push(StreamEvent::ToolCallArgsDelta {
                        index: call.index,
                        fragment: fragment.into_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let arguments = string(wire.arguments).filter(|a| !a.is_empty());
                let call = self.call_of(wire.item_id, wire.output_index);
                if let (Some(call), Some(arguments)) = (call, arguments) {
                    if !call.has_arguments {
                        call.has_arguments = true;
                        out.push(StreamEvent::ToolCallArgsDelta {
                            index: call.index,
                            fragment: arguments.into_owned(),
                        });
                    }
                }
            }
            "response.completed" | "response.incomplete" => {
                let head = match wire.response {
                    Some(raw) => Some(serde_json::from_str::<WireHead<'_>>(raw.get())?),
                    None => None,
                };
                self.done = true;
                if let Some(head) = &head {
                    self.start(head, out);
                }
                let status = head.as_ref().and_then(|h| h.status.as_deref());
                let status = status.or((kind == "response.incomplete").then_some("incomplete"));
                let reason = head
                    .as_ref()
                    .and_then(|h| h.incomplete_details.as_ref())
                    .and_then(|d| d.reason.as_deref());
                out.push(StreamEvent::Finish(finish_of(
                    status,
                    reason,
                    !self.calls.is_empty(),
                )));
                if let Some(usage) = head.and_then(|h| h.usage) {
                    out.push(StreamEvent::Usage(Usage::from(usage)));
                }
            }
            "response.failed" => {
                self.done = true;
                let error = match wire.response {
                    Some(raw) => serde_json::from_str::<WireHead<'_>>(raw.get())?.error,
                    None => None,
                };
                if !self.errored {
                    self.errored = true;
                    out.push(match error {
                        Some(error) => {
                            let error = parse_error(0, error.get().as_bytes());
                            StreamEvent::Error {
                                message: error.message,
                                kind: error.class,
                            }
                        }
                        None => StreamEvent::Error {
                            message: "the response failed".to_owned(),
                            kind: ErrorClass::Other,
                        },
                    });
                }
            }
            "error" => {
                self.errored = true;
                // `{"type":"error","error":{...}}` as the API sends it, or the members at the
                // top as its SDKs describe the event: OpenAI's reader takes both.
                let error = parse_error(0, data);
                out.push(StreamEvent::Error {
                    message: error.message,
                    kind: error.class,
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn start(&mut self, head: &WireHead<'_>, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: head.id.as_deref().unwrap_or_default().to_owned(),
                model: head.model.as_deref().unwrap_or_default().to_owned(),
            });
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<StreamEvent>) {
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: String::new(),
                model: String::new(),
            });
        }
    }

    /// The call an event names, by `item_id`, else by `output_index`.
    fn call_of(
        &mut self,
        item_id: Option<&RawValue>,
        output_index: Option<&RawValue>,
    ) -> Option<&mut Call> {
        let item_id = string(item_id);
        let output_index = number(output_index);
        let at = self
            .calls
            .iter()
            .position(|c| item_id.as_deref().is_some_and(|id| c.item_id == id))
            .or_else(|| {
                self.calls
                    .iter()
                    .position(|c| output_index.is_some() && c.output_index == output_index)
            })?;
        self.calls.get_mut(at)
    }

    /// A function call item, added or done: a call not seen before starts, and its arguments
    /// are read when they have not come as deltas.
    fn function_call(
        &mut self,
        item: &WireItem<'_>,
        output_index: Option<u32>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        let item_id = item.id.as_deref().unwrap_or_default();
        let known = self.calls.iter().position(|c| {
            (!item_id.is_empty() && c.item_id == item_id)
                || (item_id.is_empty() && output_index.is_some() && c.output_index == output_index)
        });
        let at = match known {
            Some(at) => at,
            None => {
                if self.calls.len() >= MAX_CALLS {
                    return Err(TranslateError::invalid(
                        "too many function calls in a stream",
                    ));
                }
                self.ensure_started(out);
                let index = u32::try_from(self.calls.len()).unwrap_or(u32::MAX);
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: item.call_id.as_deref().unwrap_or_default().to_owned(),
                    name: item.name.as_deref().unwrap_or_default().to_owned(),
                });
                self.calls.push(Call {
                    item_id: item_id.to_owned(),
                    output_index,
                    index,
                    has_arguments: false,
                });
                self.calls.len() - 1
            }
        };
        let arguments = arguments_of(item);
        if let Some(call) = self.calls.get_mut(at) {
            if !call.has_arguments && !arguments.is_empty() {
                call.has_arguments = true;
                out.push(StreamEvent::ToolCallArgsDelta {
                    index: call.index,
                    fragment: arguments,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::canonical::types::FinishReason;

    fn decode_all(events: &[&str]) -> (Vec<StreamEvent>, bool) {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        for data in events {
            let data: serde_json::Value = serde_json::from_str(data).unwrap();
            let name = data["type"].as_str().unwrap().to_owned();
            decoder
                .decode(Some(&name), data.to_string().as_bytes(), &mut out)
                .unwrap();
        }
        (out, decoder.is_done())
    }

    #[test]
    fn decodes_an_api_stream() {
        let (events, done) = decode_all(&[
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_A","object":"response","created_at":1,"status":"in_progress","model":"gpt-5","output":[],"usage":null}}"#,
            r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_A","status":"in_progress","model":"gpt-5","output":[]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#,
            r#"{"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Thinking"}"#,
            r#"{"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Thinking"}]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":6,"output_index":1,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}}"#,
            r#"{"type":"response.content_part.added","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Hi","logprobs":[]}"#,
            r#"{"type":"response.output_text.done","sequence_number":9,"item_id":"msg_1","output_index":1,"content_index":0,"text":"Hi","logprobs":[]}"#,
            r#"{"type":"response.content_part.done","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"Hi","annotations":[]}}"#,
            r#"{"type":"response.output_item.done","sequence_number":11,"output_index":1,"item":{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi","annotations":[]}]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":12,"output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"","status":"in_progress"}}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":13,"item_id":"fc_1","output_index":2,"delta":"{\"a\""}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":14,"item_id":"fc_1","output_index":2,"delta":":1}"}"#,
            r#"{"type":"response.function_call_arguments.done","sequence_number":15,"item_id":"fc_1","output_index":2,"name":"shell","arguments":"{\"a\":1}"}"#,
            r#"{"type":"response.output_item.done","sequence_number":16,"output_index":2,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"a\":1}","status":"completed"}}"#,
            r#"{"type":"response.mcp_call_arguments.delta","sequence_number":17,"item_id":"mcp_1","output_index":3,"delta":{"odd":true}}"#,
            r#"{"type":"response.completed","sequence_number":18,"response":{"id":"resp_A","status":"completed","model":"gpt-5","output":[],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":15}}}"#,
        ]);
        assert!(done);
        assert_eq!(
            events,
            [
                StreamEvent::Start {
                    id: "resp_A".into(),
                    model: "gpt-5".into()
                },
                StreamEvent::TextDelta("Hi".into()),
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "shell".into()
                },
                StreamEvent::ToolCallArgsDelta {
                    index: 0,
                    fragment: r#"{"a""#.into()
                },
                StreamEvent::ToolCallArgsDelta {
                    index: 0,
                    fragment: ":1}".into()
                },
                StreamEvent::Finish(FinishReason::ToolCalls),
                StreamEvent::Usage(Usage::new(10, 5)),
            ]
        );
    }

    #[test]
    fn reads_whole_arguments_and_incomplete_ends() {
        let (events, done) = decode_all(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"c1","name":"f","arguments":""}}"#,
            r#"{"type":"response.function_call_arguments.done","output_index":0,"item_id":"fc_1","arguments":"{}"}"#,
            r#"{"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","id":"fc_2","call_id":"c2","name":"g","arguments":"{\"x\":2}"}}"#,
            r#"{"type":"response.incomplete","response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}}"#,
        ]);
        assert!(done);
        assert_eq!(
            events,
            [
                StreamEvent::Start {
                    id: String::new(),
                    model: String::new()
                },
                StreamEvent::ToolCallStart {
                    index: 0,
                    id: "c1".into(),
                    name: "f".into()
                },
                StreamEvent::ToolCallArgsDelta {
                    index: 0,
                    fragment: "{}".into()
                },
                StreamEvent::ToolCallStart {
                    index: 1,
                    id: "c2".into(),
                    name: "g".into()
                },
                StreamEvent::ToolCallArgsDelta {
                    index: 1,
                    fragment: r#"{"x":2}"#.into()
                },
                StreamEvent::Finish(FinishReason::Length),
            ]
        );
        let (filtered, _) = decode_all(&[
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"content_filter"}}}"#,
        ]);
        assert_eq!(
            filtered[1],
            StreamEvent::Finish(FinishReason::ContentFilter)
        );
    }

    #[test]
    fn an_error_and_the_failed_response_are_one_error() {
        let (events, done) = decode_all(&[
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"r","model":"m"}}"#,
            r#"{"type":"error","sequence_number":1,"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"Your input exceeds the context window","param":"input"}}"#,
            r#"{"type":"response.failed","sequence_number":2,"response":{"id":"r","status":"failed","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window"}}}"#,
        ]);
        assert!(done);
        assert_eq!(
            events[1..],
            [StreamEvent::Error {
                message: "Your input exceeds the context window".into(),
                kind: ErrorClass::ContextLength
            }]
        );
        let (events, _) = decode_all(&[
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 20s."}}}"#,
        ]);
        assert_eq!(
            events,
            [StreamEvent::Error {
                message: "Rate limit reached. Please try again in 20s.".into(),
                kind: ErrorClass::RateLimited
            }]
        );
        let (events, _) = decode_all(&[
            r#"{"type":"error","code":"server_error","message":"boom","param":null,"sequence_number":4}"#,
        ]);
        assert_eq!(
            events,
            [StreamEvent::Error {
                message: "boom".into(),
                kind: ErrorClass::Overloaded
            }]
        );
    }

    #[test]
    fn reads_the_sse_overflow_event_and_rejects_broken_data() {
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        decoder
            .decode(Some("error"), crate::wire::sse::OVERFLOW, &mut out)
            .unwrap();
        assert!(
            matches!(&out[..], [StreamEvent::Error { message, .. }] if message.contains("4 MiB")),
            "{out:?}"
        );
        assert!(decoder.decode(None, b"{nope", &mut out).is_err());
        assert!(decoder
            .decode(
                Some("response.output_item.added"),
                br#"{"type":"response.output_item.added"}"#,
                &mut out
            )
            .is_err());
        let before = out.len();
        decoder.decode(Some("ping"), b"", &mut out).unwrap();
        decoder
            .decode(
                None,
                br#"{"type":"response.queued","response":{}}"#,
                &mut out,
            )
            .unwrap();
        assert_eq!(out.len(), before);
        assert!(!decoder.is_done());
    }
}

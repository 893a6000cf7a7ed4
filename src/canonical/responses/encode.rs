//! Writing Responses streams, in the order the API sends them: `response.created`,
//! `response.in_progress`; for text an `output_item.added` (a message), `content_part.added`,
//! `output_text.delta`s, `output_text.done`, `content_part.done` and `output_item.done`; for a
//! tool call an `output_item.added` (a function call), `function_call_arguments.delta`s,
//! `function_call_arguments.done` and `output_item.done`; then `response.completed` (or
//! `response.incomplete` for a length or content-filter finish) with the whole response.
//! Every event has its `type` and a `sequence_number` counting from 0.
//!
//! The final event carries the usage, which may come after the finish: it is held until the
//! `Usage` (or the end). An error ends the stream as the API ends a failed one: an `error`
//! event, then `response.failed` with the response object (`status: failed`, its `error`).
//!
//! Output items are opened one at a time: a new item closes the open one, and argument deltas
//! for a call already closed are dropped (no dialect interleaves calls).

use super::events::{emit, to_raw, OutEvent, OutStreamError};
use super::response::{
    failure_code, item_id, status_of, OutFailure, OutIncomplete, OutItem, OutResponse, OutText,
    OutUsage,
};
use crate::canonical::error::ErrorClass;
use crate::canonical::raw;
use crate::canonical::types::{FinishReason, RawJson, StreamEvent, Usage};

/// A stream already partly sent in this dialect (a Responses stream passed through and cut),
/// for [`Encoder::resuming`] to go on with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    /// The response id the client has.
    pub response_id: String,
    /// The model the client was told.
    pub model: String,
    /// The response's `created_at`.
    pub created_at: u64,
    /// The `sequence_number` of the next event.
    pub next_sequence_number: u64,
    /// The `output_index` of the next output item.
    pub next_output_index: u32,
    /// The output items already completed, as sent in their `output_item.done`, in order.
    pub completed_items: Vec<RawJson>,
    /// The message item still open, when text was streaming.
    pub open_text: Option<OpenText>,
}

/// A message item whose text is still streaming.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenText {
    /// The item's id.
    pub item_id: String,
    /// The item's `output_index`.
    pub output_index: u32,
    /// The `content_index` of its `output_text` part.
    pub content_index: u32,
    /// The text sent so far.
    pub text: String,
}

/// The item being streamed.
#[derive(Debug)]
enum Open {
    Text(OpenText),
    Call {
        index: u32,
        item_id: String,
        output_index: u32,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Writes canonical events as a Responses event stream.
#[derive(Debug)]
pub struct Encoder {
    response_id: String,
    /// The response id was given (`with_response_id`, `resuming`): `Start` does not change it.
    fixed_id: bool,
    model: String,
    created_at: u64,
    sequence_number: u64,
    next_output_index: u32,
    started: bool,
    stopped: bool,
    open: Option<Open>,
    /// Completed output items, as written in their `output_item.done`.
    items: Vec<RawJson>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// The response object of the last event, once written.
    final_response: Option<RawJson>,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// An encoder at the start of a stream.
    pub fn new() -> Self {
        Encoder {
            response_id: String::new(),
            fixed_id: false,
            model: String::new(),
            created_at: raw::now_unix(),
            sequence_number: 0,
            next_output_index: 0,
            started: false,
            stopped: false,
            open: None,
            items: Vec::new(),
            finish: None,
            usage: None,
            final_response: None,
        }
    }

    /// The same, writing `id` as the response id whatever the `Start` event says (the gateway
    /// mints its own ids).
    pub fn with_response_id(mut self, id: impl Into<String>) -> Self {
        self.response_id = id.into();
        self.fixed_id = true;
        self
    }

    /// The same, with a fixed `created_at` (tests, reproducible output).
    pub fn with_created_at(mut self, created_at: u64) -> Self {
        self.created_at = created_at;
        self
    }

    /// An encoder that goes on with a stream the client already has part of: no
    /// `response.created`, numbering on from `state`, text continuing the open message item,
    /// and the final response listing the items already completed before the new ones.
    pub fn resuming(state: Resume) -> Self {
        Encoder {
            response_id: state.response_id,
            fixed_id: true,
            model: state.model,
            created_at: state.created_at,
            sequence_number: state.next_sequence_number,
            next_output_index: state.next_output_index,
            started: true,
            open: state.open_text.map(Open::Text),
            items: state.completed_items,
            ..Self::new()
        }
    }

    /// The response object of the stream's last event (`response.completed`, `.incomplete` or
    /// `.failed`), once written: what the gateway stores as the response.
    pub fn final_response(&self) -> Option<&str> {
        self.final_response.as_ref().map(RawJson::get)
    }

    /// The response id written in the events.
    pub fn response_id(&self) -> &str {
        &self.response_id
    }

    /// Appends one event with the next sequence number.
    fn write<'e>(&mut self, out: &mut Vec<u8>, event: impl FnOnce(u64) -> OutEvent<'e>) {
        emit(&mut self.sequence_number, out, event);
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        self.started = true;
        let empty: [RawJson; 0] = [];
        let response = OutResponse::new(
            &self.response_id,
            self.created_at,
            &self.model,
            "in_progress",
            &empty,
        );
        let response = to_raw(&response);
        self.write(out, |sequence_number| OutEvent::Created {
            sequence_number,
            response: &response.0,
        });
        self.write(out, |sequence_number| OutEvent::InProgress {
            sequence_number,
            response: &response.0,
        });
    }

    fn next_index(&mut self) -> u32 {
        let index = self.next_output_index;
        self.next_output_index = self.next_output_index.saturating_add(1);
        index
    }

    /// Closes the open item with its done events; `status` is the item's final status.
    fn close(&mut self, status: &str, out: &mut Vec<u8>) {
        match self.open.take() {
            None => {}
            Some(Open::Text(text)) => {
                let OpenText {
                    item_id,
                    output_index,
                    content_index,
                    text,
                } = &text;
                let (item_id, output_index, content_index) =
                    (item_id.as_str(), *output_index, *content_index);
                self.write(out, |sequence_number| OutEvent::TextDone {
                    sequence_number,
                    item_id,
                    output_index,
                    content_index,
                    text,
                    logprobs: [],
                });
                self.write(out, |sequence_number| OutEvent::PartDone {
                    sequence_number,
                    item_id,
                    output_index,
                    content_index,
                    part: OutText::new(text),
                });
                let part = [OutText::new(text)];
                let item = to_raw(&OutItem::Message {
                    id: item_id,
                    status,
                    role: "assistant",
                    content: &part,
                });
                self.item_done(output_index, item, out);
            }
            Some(Open::Call {
                item_id,
                output_index,
                call_id,
                name,
                arguments,
                ..
            }) => {
                self.write(out, |sequence_number| OutEvent::ArgsDone {
                    sequence_number,
                    item_id: &item_id,
                    output_index,
                    name: &name,
                    arguments: &arguments,
                });
                let item = to_raw(&OutItem::FunctionCall {
                    id: &item_id,
                    call_id: &call_id,
                    name: &name,
                    arguments: &arguments,
                    status: "completed",
                });
                self.item_done(output_index, item, out);
            }
        }
    }

    fn item_done(&mut self, output_index: u32, item: RawJson, out: &mut Vec<u8>) {
        self.write(out, |sequence_number| OutEvent::ItemDone {
            sequence_number,
            output_index,
            item: &item.0,
        });
        self.items.push(item);
    }

    /// Opens a message item and its text part.
    fn open_text(&mut self, out: &mut Vec<u8>) {
        self.close("completed", out);
        let output_index = self.next_index();
        let item_id = item_id("msg", &self.response_id, output_index);
        let id = item_id.as_str();
        self.write(out, |sequence_number| OutEvent::ItemAdded {
            sequence_number,
            output_index,
            item: OutItem::Message {
                id,
                status: "in_progress",
                role: "assistant",
                content: &[],
            },
        });
        self.write(out, |sequence_number| OutEvent::PartAdded {
            sequence_number,
            item_id: id,
            output_index,
            content_index: 0,
            part: OutText::new(""),
        });
        self.open = Some(Open::Text(OpenText {
            item_id,
            output_index,
            content_index: 0,
            text: String::new(),
        }));
    }

    /// Writes the last event: the whole response, completed or incomplete by the finish.
    fn terminal(&mut self, out: &mut Vec<u8>) {
        self.stopped = true;
        let finish = self.finish.take().unwrap_or(FinishReason::Stop);
        let (status, reason) = status_of(&finish);
        let mut response = OutResponse::new(
            &self.response_id,
            self.created_at,
            &self.model,
            status,
            self.items.as_slice(),
        );
        response.incomplete_details = reason.map(|reason| OutIncomplete { reason });
        response.usage = self.usage.map(OutUsage::from);
        let response = to_raw(&response);
        self.write(out, |sequence_number| {
            let response = &response.0;
            if status == "completed" {
                OutEvent::Completed {
                    sequence_number,
                    response,
                }
            } else {
                OutEvent::Incomplete {
                    sequence_number,
                    response,
                }
            }
        });
        self.final_response = Some(response);
    }

    /// Ends the stream with an `error` event and `response.failed`.
    fn fail(&mut self, message: &str, kind: ErrorClass, out: &mut Vec<u8>) {
        self.stopped = true;
        let code = failure_code(kind);
        let error_type = if matches!(kind, ErrorClass::Other | ErrorClass::Overloaded) {
            "server_error"
        } else if kind == ErrorClass::RateLimited {
            "rate_limit_error"
        } else {
            "invalid_request_error"
        };
        self.write(out, |sequence_number| OutEvent::Error {
            sequence_number,
            error: OutStreamError {
                kind: error_type,
                code,
                message,
                param: None,
            },
        });
        let mut response = OutResponse::new(
            &self.response_id,
            self.created_at,
            &self.model,
            "failed",
            self.items.as_slice(),
        );
        response.error = Some(OutFailure { code, message });
        response.usage = self.usage.map(OutUsage::from);
        let response = to_raw(&response);
        self.write(out, |sequence_number| OutEvent::Failed {
            sequence_number,
            response: &response.0,
        });
        self.final_response = Some(response);
    }

    /// Appends the SSE bytes of `event` to `out`.
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if let StreamEvent::Start { id, model } = event {
            if !self.started {
                if !self.fixed_id {
                    self.response_id.clone_from(id);
                }
                self.model.clone_from(model);
                self.start(out);
            }
            return;
        }
        if !self.started && !matches!(event, StreamEvent::Error { .. }) {
            self.start(out);
        }
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta(text) => {
                if text.is_empty() {
                    return;
                }
                if !matches!(self.open, Some(Open::Text(_))) {
                    self.open_text(out);
                }
                if let Some(Open::Text(open)) = &mut self.open {
                    open.text.push_str(text);
                    emit(&mut self.sequence_number, out, |sequence_number| {
                        OutEvent::TextDelta {
                            sequence_number,
                            item_id: &open.item_id,
                            output_index: open.output_index,
                            content_index: open.content_index,
                            delta: text,
                            logprobs: [],
                        }
                    });
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.close("completed", out);
                let output_index = self.next_index();
                let item_id = item_id("fc", &self.response_id, output_index);
                self.write(out, |sequence_number| OutEvent::ItemAdded {
                    sequence_number,
                    output_index,
                    item: OutItem::FunctionCall {
                        id: &item_id,
                        call_id: id,
                        name,
                        arguments: "",
                        status: "in_progress",
                    },
                });
                self.open = Some(Open::Call {
                    index: *index,
                    item_id,
                    output_index,
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            StreamEvent::ToolCallArgsDelta { index, fragment } => {
                if let Some(Open::Call {
                    index: open_index,
                    item_id,
                    output_index,
                    arguments,
                    ..
                }) = &mut self.open
                {
                    if *open_index == *index && !fragment.is_empty() {
                        arguments.push_str(fragment);
                        emit(&mut self.sequence_number, out, |sequence_number| {
                            OutEvent::ArgsDelta {
                                sequence_number,
                                item_id,
                                output_index: *output_index,
                                delta: fragment,
                            }
                        });
                    }
                }
            }
            StreamEvent::Finish(reason) => {
                let (status, _) = status_of(reason);
                self.close(status, out);
                self.finish = Some(reason.clone());
                if self.usage.is_some() {
                    self.terminal(out);
                }
            }
            StreamEvent::Usage(usage) => {
                self.usage = Some(*usage);
                if self.finish.is_some() {
                    self.terminal(out);
                }
            }
            StreamEvent::Error { message, kind } => self.fail(message, *kind, out),
        }
    }

    /// Ends the stream: closes the open item and writes the last event, if not yet written.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if !self.started {
            self.start(out);
        }
        self.close("completed", out);
        self.terminal(out);
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;

//! Gemini streams (`streamGenerateContent?alt=sse`): every event is `data: {GenerateContentResponse}`;
//! the last one carries `finishReason` and `usageMetadata`; there is no terminator.
//!
//! Gemini sends each function call whole, in one part: the decoder turns it into a start and one
//! argument delta, and the encoder holds streamed calls back until their arguments are complete
//! (at the finish), writing them with the finish reason and usage in the last chunk.

use std::borrow::Cow;

use super::error::{from_wire, out_error};
use super::response::{call_part, finish_from, finish_word, CallIds, OutCandidate, OutResponse};
use super::response::{OutUsage, WireResponse};
use super::write::{OutContent, OutPart};
use crate::canonical::error::TranslateError;
use crate::canonical::openai::write_data;
use crate::canonical::types::{FinishReason, StreamEvent, ToolCall, Usage};

/// Reads a Gemini stream into canonical events.
#[derive(Debug, Default)]
pub struct Decoder {
    started: bool,
    done: bool,
    ids: CallIds,
    calls: u32,
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a chunk with a `finishReason` (or a blocked prompt) has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event's data (Gemini does not name events).
    pub fn decode(
        &mut self,
        _event: Option<&str>,
        data: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        if data.trim_ascii().is_empty() {
            return Ok(());
        }
        let wire: WireResponse<'_> = serde_json::from_slice(data)?;
        if let Some(error) = wire.error {
            let error = from_wire(0, error);
            out.push(StreamEvent::Error {
                message: error.message,
                kind: error.class,
            });
            return Ok(());
        }
        if !self.started {
            self.started = true;
            self.ids = CallIds::new(wire.response_id.as_deref());
            out.push(StreamEvent::Start {
                id: wire.response_id.map(Cow::into_owned).unwrap_or_default(),
                model: wire.model_version.map(Cow::into_owned).unwrap_or_default(),
            });
        }
        let blocked = wire.prompt_feedback.and_then(|f| f.block_reason).is_some();
        let mut finish = None;
        if let Some(candidate) = wire.candidates.into_iter().next() {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                if let Some(call) = part.function_call {
                    let index = self.calls;
                    self.calls = self.calls.saturating_add(1);
                    let call = self
                        .ids
                        .call(call, index, part.thought_signature.as_deref());
                    out.push(StreamEvent::ToolCallStart {
                        index,
                        id: call.id,
                        name: call.name,
                    });
                    out.push(StreamEvent::ToolCallArgsDelta {
                        index,
                        fragment: call.arguments,
                    });
                } else if let (Some(text), false) = (part.text, part.thought == Some(true)) {
                    if !text.is_empty() {
                        out.push(StreamEvent::TextDelta(text.into_owned()));
                    }
                }
            }
            finish = candidate
                .finish_reason
                .map(|word| finish_from(&word, self.calls > 0));
        } else if blocked {
            finish = Some(FinishReason::ContentFilter);
        }
        if let Some(reason) = finish {
            self.done = true;
            out.push(StreamEvent::Finish(reason));
            if let Some(usage) = wire.usage_metadata {
                out.push(StreamEvent::Usage(Usage::from(usage)));
            }
        }
        Ok(())
    }
}

/// Writes canonical events as a Gemini SSE stream.
#[derive(Debug, Default)]
pub struct Encoder {
    id: String,
    model: String,
    /// Streamed tool calls by index, held until the finish.
    calls: Vec<(u32, ToolCall)>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    flushed: bool,
}

impl Encoder {
    /// An encoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn chunk(&self, out: &mut Vec<u8>, parts: Vec<OutPart<'_>>, last: bool) {
        let response = OutResponse {
            candidates: [OutCandidate {
                content: OutContent {
                    role: "model",
                    parts,
                },
                finish_reason: if last {
                    self.finish.as_ref().map(finish_word)
                } else {
                    None
                },
                index: 0,
            }],
            usage_metadata: if last {
                self.usage.map(OutUsage::from)
            } else {
                None
            },
            model_version: &self.model,
            response_id: &self.id,
        };
        write_data(out, &response);
    }

    /// The last chunk: held calls, finish reason, usage.
    fn flush(&mut self, out: &mut Vec<u8>) {
        self.flushed = true;
        let calls = std::mem::take(&mut self.calls);
        let parts: Vec<OutPart<'_>> = if calls.is_empty() {
            vec![OutPart::Text { text: "" }]
        } else {
            calls.iter().map(|(_, call)| call_part(call)).collect()
        };
        self.chunk(out, parts, true);
    }

    /// Appends the SSE bytes of `event` to `out` (nothing for a start or a held tool call).
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.flushed {
            return;
        }
        match event {
            StreamEvent::Start { id, model } => {
                self.id.clone_from(id);
                self.model.clone_from(model);
            }
            StreamEvent::TextDelta(text) => self.chunk(out, vec![OutPart::Text { text }], false),
            StreamEvent::ToolCallStart { index, id, name } => {
                let call = ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                };
                self.calls.push((*index, call));
            }
            StreamEvent::ToolCallArgsDelta { index, fragment } => {
                if let Some((_, call)) = self.calls.iter_mut().find(|(i, _)| i == index) {
                    call.arguments.push_str(fragment);
                }
            }
            StreamEvent::Finish(reason) => {
                self.finish = Some(reason.clone());
                if self.usage.is_some() {
                    self.flush(out);
                }
            }
            StreamEvent::Usage(usage) => {
                self.usage = Some(*usage);
                if self.finish.is_some() {
                    self.flush(out);
                }
            }
            StreamEvent::Error { message, kind } => {
                let error = crate::canonical::error::UpstreamError::new(0, *kind, message.clone());
                write_data(out, &out_error(&error));
            }
        }
    }

    /// Ends the stream: writes what was held back (Gemini has no terminator).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.flushed && (self.finish.is_some() || !self.calls.is_empty()) {
            self.flush(out);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trips_a_function_call_stream() {
        let events = [
            StreamEvent::Start {
                id: "r1".into(),
                model: "gemini-2.5-flash".into(),
            },
            StreamEvent::TextDelta("Checking.".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_r1_0".into(),
                name: "get_weather".into(),
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: "{\"city\":".into(),
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: "\"Paris\"}".into(),
            },
            StreamEvent::Finish(FinishReason::ToolCalls),
            StreamEvent::Usage(Usage::new(9, 4)),
        ];
        let mut encoder = Encoder::new();
        let mut bytes = Vec::new();
        for event in &events {
            encoder.encode(event, &mut bytes);
        }
        encoder.finish(&mut bytes);
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.matches("data: ").count(), 2, "{text}");
        let mut decoder = Decoder::new();
        let mut back = Vec::new();
        for data in text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
            decoder.decode(None, data.as_bytes(), &mut back).unwrap();
        }
        assert!(decoder.is_done());
        let mut expected = events.to_vec();
        expected[3] = StreamEvent::ToolCallArgsDelta {
            index: 0,
            fragment: "{\"city\":\"Paris\"}".into(),
        };
        expected.remove(4);
        assert_eq!(back, expected);
    }
}

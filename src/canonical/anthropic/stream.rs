//! Reading Anthropic streams: `event: message_start`, `content_block_start`,
//! `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`, `ping` and
//! `error`.
//!
//! Content blocks are numbered across text and tool use; canonical tool calls are numbered among
//! tool calls only, so the decoder maps block indices to tool indices.

use std::borrow::Cow;

use serde::Deserialize;

use super::response::{finish_from, from_wire, WireError, WireUsage};
use super::WireBlock;
use crate::canonical::error::{TranslateError, UpstreamError};
use crate::canonical::types::StreamEvent;

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<WireMessage<'a>>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default, borrow)]
    content_block: Option<WireBlock<'a>>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
}

/// More content blocks than any answer has: an index past this is a broken event, not a
/// reason to allocate.
const MAX_BLOCKS: usize = 1 << 16;

/// Reads an Anthropic stream into canonical events.
#[derive(Debug, Default)]
pub struct Decoder {
    done: bool,
    /// `message_start`'s counts: what `message_delta` leaves out stays as they said.
    input_tokens: u64,
    cache_read: u64,
    cache_write: u64,
    /// Content block index to tool-call index, for tool_use blocks.
    tool_of_block: Vec<Option<u32>>,
    calls: u32,
}

impl Decoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `message_stop` has been seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event. The data's `type` says what it is; the `event:` name is used only
    /// when the data has none.
    pub fn decode(
        &mut self,
        event: Option<&str>,
        data: &[u8],
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), TranslateError> {
        let wire: WireEvent<'_> = serde_json::from_slice(data)?;
        let kind = wire.kind.as_deref().or(event).unwrap_or_default();
        match kind {
            "message_start" => {
                let message = wire.message.unwrap_or(WireMessage {
                    id: None,
                    model: None,
                    usage: None,
                });
                if let Some(usage) = message.usage {
                    self.input_tokens = usage.input_tokens.unwrap_or(0);
                    self.cache_read = usage.cache_read_input_tokens.unwrap_or(0);
                    self.cache_write = usage.cache_write().unwrap_or(0);
                }
                out.push(StreamEvent::Start {
                    id: message.id.map(Cow::into_owned).unwrap_or_default(),
                    model: message.model.map(Cow::into_owned).unwrap_or_default(),
                });
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (wire.index, wire.content_block) else {
                    return Err(TranslateError::invalid(
                        "content_block_start without a block",
                    ));
                };
                match block.kind.as_ref() {
                    "text" => {
                        if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::TextDelta(text.into_owned()));
                        }
                    }
                    "tool_use" => {
                        if index >= MAX_BLOCKS {
                            return Err(TranslateError::invalid("content block index too large"));
                        }
                        if self.tool_of_block.len() <= index {
                            self.tool_of_block.resize(index + 1, None);
                        }
                        let tool = self.calls;
                        self.calls = self.calls.saturating_add(1);
                        self.tool_of_block[index] = Some(tool);
                        out.push(StreamEvent::ToolCallStart {
                            index: tool,
                            id: block.id.map(Cow::into_owned).unwrap_or_default(),
                            name: block.name.map(Cow::into_owned).unwrap_or_default(),
                        });
                        let input = block.input.map(|i| i.get().trim()).unwrap_or("{}");
                        if input != "{}" {
                            out.push(StreamEvent::ToolCallArgsDelta {
                                index: tool,
                                fragment: input.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(delta) = wire.delta else {
                    return Ok(());
                };
                match delta.kind.as_deref() {
                    Some("text_delta") => {
                        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::TextDelta(text.into_owned()));
                        }
                    }
                    Some("input_json_delta") => {
                        let tool = wire
                            .index
                            .and_then(|i| self.tool_of_block.get(i).copied().flatten());
                        if let (Some(index), Some(fragment)) = (tool, delta.partial_json) {
                            if !fragment.is_empty() {
                                out.push(StreamEvent::ToolCallArgsDelta {
                                    index,
                                    fragment: fragment.into_owned(),
                                });
                            }
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = wire.delta.and_then(|d| d.stop_reason) {
                    out.push(StreamEvent::Finish(finish_from(&reason)));
                }
                // The delta's counts are cumulative; a count it leaves out is message_start's.
                if let Some(usage) = wire.usage {
                    let filled = WireUsage {
                        input_tokens: usage.input_tokens.or(Some(self.input_tokens)),
                        cache_read_input_tokens: usage
                            .cache_read_input_tokens
                            .or(Some(self.cache_read)),
                        cache_creation_input_tokens: usage.cache_write().or(Some(self.cache_write)),
                        ..usage
                    };
                    out.push(StreamEvent::Usage(filled.to_usage()));
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let error = wire
                    .error
                    .map_or_else(|| UpstreamError::unparsed(0, data), |e| from_wire(0, e));
                out.push(StreamEvent::Error {
                    message: error.message,
                    kind: error.class,
                });
            }
            _ => {} // ping, content_block_stop and event types added later
        }
        Ok(())
    }
}

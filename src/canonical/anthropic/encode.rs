//! Writing Anthropic streams.
//!
//! Text and tool calls become numbered content blocks, each opened, filled and closed in turn.
//! `message_delta` carries both the stop reason and the usage: the encoder holds a `Finish`
//! until the `Usage` (or the end) arrives, so the two go out in one event as Anthropic sends them.
//! Its usage has every count (input and cache ones too), since `message_start` went out before
//! any was known.

use serde::Serialize;

use super::response::{error_type, finish_word, OutError, OutErrorBody, OutUsage};
use crate::canonical::error::UpstreamError;
use crate::canonical::types::{FinishReason, StreamEvent, Usage};

/// Writes canonical events as an Anthropic event stream.
#[derive(Debug, Default)]
pub struct Encoder {
    started: bool,
    stopped: bool,
    /// The open content block: its index and whether it is text.
    open: Option<(u32, bool)>,
    next_block: u32,
    /// Tool-call index to content block index.
    block_of_tool: Vec<Option<u32>>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    delta_sent: bool,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutEvent<'a> {
    MessageStart {
        message: OutMessage<'a>,
    },
    ContentBlockStart {
        index: u32,
        content_block: OutStartBlock<'a>,
    },
    ContentBlockDelta {
        index: u32,
        delta: OutDelta<'a>,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: OutMessageDelta<'a>,
        usage: OutUsage,
    },
    MessageStop,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [(); 0],
    stop_reason: Option<()>,
    stop_sequence: Option<()>,
    usage: OutUsage,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutStartBlock<'a> {
    Text {
        text: &'static str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutDelta<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct OutMessageDelta<'a> {
    stop_reason: Option<&'a str>,
    stop_sequence: Option<()>,
}

/// Appends `event: <name>\ndata: <json>\n\n`.
fn write_event(out: &mut Vec<u8>, name: &str, data: &impl Serialize) {
    crate::wire::sse::write_json(out, Some(name), data);
}

impl Encoder {
    /// An encoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder that goes on with a stream the client already has part of (a continuation
    /// of an Anthropic stream passed through): no `message_start`, the next block numbered
    /// `next_block`, and text continuing block `open_text` when one is open.
    pub fn resuming(next_block: u32, open_text: Option<u32>) -> Self {
        Encoder {
            started: true,
            open: open_text.map(|index| (index, true)),
            next_block,
            ..Self::default()
        }
    }

    fn start(&mut self, id: &str, model: &str, out: &mut Vec<u8>) {
        self.started = true;
        let message = OutMessage {
            id,
            kind: "message",
            role: "assistant",
            model,
            content: [],
            stop_reason: None,
            stop_sequence: None,
            usage: OutUsage::from(Usage::default()),
        };
        write_event(out, "message_start", &OutEvent::MessageStart { message });
    }

    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            write_event(
                out,
                "content_block_stop",
                &OutEvent::ContentBlockStop { index },
            );
        }
    }

    fn open_block(&mut self, block: OutStartBlock<'_>, text: bool, out: &mut Vec<u8>) -> u32 {
        self.close_block(out);
        let index = self.next_block;
        self.next_block = self.next_block.saturating_add(1);
        self.open = Some((index, text));
        let event = OutEvent::ContentBlockStart {
            index,
            content_block: block,
        };
        write_event(out, "content_block_start", &event);
        index
    }

    fn message_delta(&mut self, out: &mut Vec<u8>) {
        self.delta_sent = true;
        // The counts are known only now: message_delta carries them all (the SDKs take its
        // input and cache counts over message_start's).
        let event = OutEvent::MessageDelta {
            delta: OutMessageDelta {
                stop_reason: self.finish.as_ref().map(finish_word),
                stop_sequence: None,
            },
            usage: OutUsage::from(self.usage.unwrap_or_default()),
        };
        write_event(out, "message_delta", &event);
    }

    /// Appends the SSE bytes of `event` to `out`.
    pub fn encode(&mut self, event: &StreamEvent, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if let StreamEvent::Start { id, model } = event {
            if !self.started {
                self.start(id, model, out);
            }
            return;
        }
        if !self.started && !matches!(event, StreamEvent::Error { .. }) {
            self.start("", "", out);
        }
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta(text) => {
                let index = match self.open {
                    Some((index, true)) => index,
                    _ => self.open_block(OutStartBlock::Text { text: "" }, true, out),
                };
                let delta = OutDelta::TextDelta { text };
                write_event(
                    out,
                    "content_block_delta",
                    &OutEvent::ContentBlockDelta { index, delta },
                );
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let block = OutStartBlock::ToolUse {
                    id,
                    name,
                    input: Empty {},
                };
                let block_index = self.open_block(block, false, out);
                let slot = usize::try_from(*index).unwrap_or(usize::MAX);
                if slot < 1 << 16 {
                    if self.block_of_tool.len() <= slot {
                        self.block_of_tool.resize(slot + 1, None);
                    }
                    self.block_of_tool[slot] = Some(block_index);
                }
            }
            StreamEvent::ToolCallArgsDelta { index, fragment } => {
                let slot = usize::try_from(*index).unwrap_or(usize::MAX);
                if let Some(Some(block)) = self.block_of_tool.get(slot).copied() {
                    let delta = OutDelta::InputJsonDelta {
                        partial_json: fragment,
                    };
                    let event = OutEvent::ContentBlockDelta {
                        index: block,
                        delta,
                    };
                    write_event(out, "content_block_delta", &event);
                }
            }
            StreamEvent::Finish(reason) => {
                self.close_block(out);
                self.finish = Some(reason.clone());
                if self.usage.is_some() && !self.delta_sent {
                    self.message_delta(out);
                }
            }
            StreamEvent::Usage(usage) => {
                self.usage = Some(*usage);
                if self.finish.is_some() && !self.delta_sent {
                    self.message_delta(out);
                }
            }
            StreamEvent::Error { message, kind } => {
                let error = UpstreamError::new(0, *kind, message.clone());
                let body = OutErrorBody {
                    kind: "error",
                    error: OutError {
                        kind: error_type(&error),
                        message,
                    },
                };
                write_event(out, "error", &body);
            }
        }
    }

    /// Ends the stream: closes the open block, sends what was held back, then `message_stop`.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        if !self.started {
            self.start("", "", out);
        }
        self.close_block(out);
        if !self.delta_sent {
            self.message_delta(out);
        }
        self.stopped = true;
        write_event(out, "message_stop", &OutEvent::MessageStop);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_resumed_stream_goes_on_in_the_open_text_block() {
        let mut encoder = Encoder::resuming(3, Some(2));
        let mut out = Vec::new();
        encoder.encode(
            &StreamEvent::Start {
                id: "other".into(),
                model: "x".into(),
            },
            &mut out,
        );
        encoder.encode(&StreamEvent::TextDelta(" more".into()), &mut out);
        encoder.encode(&StreamEvent::Finish(FinishReason::Stop), &mut out);
        encoder.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("message_start"), "{text}");
        assert!(
            text.starts_with(
                r#"event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":" more"}}"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"{"type":"content_block_stop","index":2}"#),
            "{text}"
        );
        assert!(
            text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
            "{text}"
        );
    }

    #[test]
    fn encoder_holds_finish_for_usage_and_numbers_blocks() {
        let mut encoder = Encoder::new();
        let mut out = Vec::new();
        for event in [
            StreamEvent::Start {
                id: "m1".into(),
                model: "x".into(),
            },
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "t".into(),
                name: "f".into(),
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: "{}".into(),
            },
            StreamEvent::Finish(FinishReason::ToolCalls),
        ] {
            encoder.encode(&event, &mut out);
        }
        let before_usage = out.len();
        let usage = Usage::new(5, 6);
        encoder.encode(&StreamEvent::Usage(usage), &mut out);
        encoder.finish(&mut out);
        let text = String::from_utf8(out).unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert!(!text[..before_usage].contains("message_delta"));
        assert!(text.contains(r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#));
        assert!(text.contains(r#""stop_reason":"tool_use""#));
        assert!(text.contains(r#""usage":{"input_tokens":5,"output_tokens":6}"#));
    }
}

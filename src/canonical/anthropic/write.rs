//! Writing a canonical request as an Anthropic Messages body.

use serde::Serialize;

use super::DEFAULT_MAX_TOKENS;
use crate::canonical::error::TranslateError;
use crate::canonical::raw::{self, ExtraFields};
use crate::canonical::types::{ChatRequest, Image, Message, Part, RawJson, ToolChoice};
use crate::canonical::Dialect;

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct OutRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<OutSystem<'a>>,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<OutTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<OutToolChoice<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "is_false")]
    stream: bool,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutSystem<'a> {
    Text(&'a str),
    Blocks(Vec<OutBlock<'a>>),
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: OutContent<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutContent<'a> {
    Text(&'a str),
    Blocks(Vec<OutBlock<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: OutSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: RawJson,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
    },
    #[serde(untagged)]
    Raw(&'a RawJson),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct OutTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: &'a RawJson,
}

#[derive(Serialize)]
struct OutToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// A content part as a block, or nothing when Anthropic has no place for it.
fn block(part: &Part) -> Option<OutBlock<'_>> {
    match part {
        Part::Text(text) if text.is_empty() => None,
        Part::Text(text) => Some(OutBlock::Text { text }),
        Part::Image(Image::Url(url)) => Some(OutBlock::Image {
            source: OutSource::Url { url },
        }),
        Part::Image(Image::Base64 { media_type, data }) => Some(OutBlock::Image {
            source: OutSource::Base64 { media_type, data },
        }),
        Part::Other { dialect, raw } => {
            (*dialect == Dialect::Anthropic).then_some(OutBlock::Raw(raw))
        }
    }
}

/// Appends a message's blocks, merging into the previous message when it has the same role
/// (Anthropic requires alternation). Tool results go before anything else in a user message.
fn push<'a>(
    out: &mut Vec<(&'static str, Vec<OutBlock<'a>>)>,
    role: &'static str,
    blocks: Vec<OutBlock<'a>>,
) {
    if blocks.is_empty() {
        return;
    }
    match out.last_mut() {
        Some((last_role, last)) if *last_role == role => {
            for block in blocks {
                if matches!(block, OutBlock::ToolResult { .. }) {
                    let at = last
                        .iter()
                        .take_while(|b| matches!(b, OutBlock::ToolResult { .. }))
                        .count();
                    last.insert(at, block);
                } else {
                    last.push(block);
                }
            }
        }
        _ => out.push((role, blocks)),
    }
}

/// The schema of a tool without one: no arguments.
const EMPTY_SCHEMA: &str = r#"{"type":"object","properties":{}}"#;

/// Writes `req` as a Messages body for the upstream `model`.
pub fn write_request(req: &ChatRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
    let mut turns: Vec<(&'static str, Vec<OutBlock<'_>>)> = Vec::with_capacity(req.messages.len());
    for message in &req.messages {
        match message {
            Message::User { content } => {
                push(
                    &mut turns,
                    "user",
                    content.iter().filter_map(block).collect(),
                );
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks: Vec<OutBlock<'_>> = content.iter().filter_map(block).collect();
                blocks.extend(tool_calls.iter().map(|call| OutBlock::ToolUse {
                    id: &call.id,
                    name: &call.name,
                    input: raw::arguments_object(&call.arguments),
                }));
                push(&mut turns, "assistant", blocks);
            }
            Message::Tool(result) => {
                let block = OutBlock::ToolResult {
                    tool_use_id: &result.tool_call_id,
                    content: &result.content,
                    is_error: result.is_error,
                };
                push(&mut turns, "user", vec![block]);
            }
        }
    }
    trim_prefill(&mut turns);
    let messages = turns
        .into_iter()
        .map(|(role, blocks)| OutMessage {
            role,
            content: if let [OutBlock::Text { text }] = blocks.as_slice() {
                OutContent::Text(text)
            } else {
                OutContent::Blocks(blocks)
            },
        })
        .collect();
    let empty_schema = RawJson::from_text(EMPTY_SCHEMA)?;
    let out = OutRequest {
        model,
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: match req.system.as_slice() {
            [] => None,
            [one] => Some(OutSystem::Text(one)),
            many => Some(OutSystem::Blocks(
                many.iter().map(|text| OutBlock::Text { text }).collect(),
            )),
        },
        messages,
        tools: req
            .tools
            .iter()
            .map(|t| OutTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: t.parameters.as_ref().unwrap_or(&empty_schema),
            })
            .collect(),
        tool_choice: req.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => OutToolChoice {
                kind: "auto",
                name: None,
            },
            ToolChoice::None => OutToolChoice {
                kind: "none",
                name: None,
            },
            ToolChoice::Required => OutToolChoice {
                kind: "any",
                name: None,
            },
            ToolChoice::Tool(name) => OutToolChoice {
                kind: "tool",
                name: Some(name),
            },
        }),
        stop_sequences: &req.stop,
        temperature: req.temperature.map(|t| t.clamp(0.0, 1.0)),
        top_p: req.top_p,
        stream: req.stream,
        extra: ExtraFields {
            fields: req.extra.for_dialect(Dialect::Anthropic),
            skip: &[],
        },
    };
    Ok(serde_json::to_vec(&out)?)
}

/// Anthropic rejects a final assistant message ending in whitespace: trim the prefill's end
/// (the model regenerates the whitespace), dropping it if nothing is left.
fn trim_prefill(turns: &mut Vec<(&'static str, Vec<OutBlock<'_>>)>) {
    let Some((role, blocks)) = turns.last_mut() else {
        return;
    };
    if *role != "assistant" {
        return;
    }
    if let Some(OutBlock::Text { text }) = blocks.last_mut() {
        *text = text.trim_end();
        if text.is_empty() {
            blocks.pop();
        }
    }
    if blocks.is_empty() {
        turns.pop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::canonical::types::{ToolCall, ToolResult};

    #[test]
    fn merges_roles_and_trims_the_prefill() {
        let req = ChatRequest {
            system: vec!["a".into(), "b".into()],
            messages: vec![
                Message::user("hi"),
                Message::user("again"),
                Message::Assistant {
                    content: vec![],
                    tool_calls: vec![ToolCall {
                        id: "t".into(),
                        name: "f".into(),
                        arguments: String::new(),
                    }],
                },
                Message::Tool(ToolResult {
                    tool_call_id: "t".into(),
                    content: "ok".into(),
                    is_error: true,
                }),
                Message::user("so?"),
                Message::assistant("It is "),
            ],
            temperature: Some(1.5),
            ..ChatRequest::default()
        };
        let out: serde_json::Value =
            serde_json::from_slice(&write_request(&req, "claude-x").unwrap()).unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "model": "claude-x",
                "max_tokens": 4096,
                "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": "ok", "is_error": true},
                        {"type": "text", "text": "so?"}
                    ]},
                    {"role": "assistant", "content": "It is"}
                ],
                "temperature": 1.0
            })
        );
    }
}

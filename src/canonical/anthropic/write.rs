//! Writing a canonical request as an Anthropic Messages body.
//!
//! Prompt-cache breakpoints become `cache_control` on the block they follow (a text, image or
//! `tool_result` block; none after a block kept whole, which carries its own), on the system
//! blocks and tools they name.

use serde::Serialize;

use super::DEFAULT_MAX_TOKENS;
use crate::canonical::error::TranslateError;
use crate::canonical::raw::{self, ExtraFields};
use crate::canonical::types::{
    CacheControl, ChatRequest, Image, Message, Part, RawJson, ToolChoice,
};
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
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawJson>,
    },
    Image {
        source: OutSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawJson>,
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
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<&'a RawJson>,
    },
    #[serde(untagged)]
    Raw(&'a RawJson),
}

impl<'a> OutBlock<'a> {
    /// A text block with no breakpoint.
    pub(super) fn text(text: &'a str) -> Self {
        OutBlock::Text {
            text,
            cache_control: None,
        }
    }
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
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<&'a RawJson>,
}

#[derive(Serialize)]
struct OutToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// A content part as a block, or nothing when Anthropic has no place for it (or it is a
/// breakpoint: see [`blocks`]).
fn block(part: &Part) -> Option<OutBlock<'_>> {
    match part {
        Part::Text(text) if text.is_empty() => None,
        Part::Text(text) => Some(OutBlock::text(text)),
        Part::Image(Image::Url(url)) => Some(OutBlock::Image {
            source: OutSource::Url { url },
            cache_control: None,
        }),
        Part::Image(Image::Base64 { media_type, data }) => Some(OutBlock::Image {
            source: OutSource::Base64 { media_type, data },
            cache_control: None,
        }),
        Part::Other { dialect, raw } => {
            (*dialect == Dialect::Anthropic).then_some(OutBlock::Raw(raw))
        }
        Part::CacheBreakpoint(_) => None,
    }
}

/// A message's parts as blocks, each breakpoint as `cache_control` on the block before it.
/// One after nothing (the message's parts before it have no block here) marks nothing: the
/// prefix it ends is not one Anthropic would be sent.
fn blocks(content: &[Part]) -> Vec<OutBlock<'_>> {
    let mut out = Vec::with_capacity(content.len());
    for part in content {
        match part {
            Part::CacheBreakpoint(control) => mark(&mut out, control),
            part => out.extend(block(part)),
        }
    }
    out
}

/// `cache_control` on the last of `blocks`, when it can carry one.
fn mark<'a>(blocks: &mut [OutBlock<'a>], control: &'a CacheControl) {
    if let Some(
        OutBlock::Text { cache_control, .. }
        | OutBlock::Image { cache_control, .. }
        | OutBlock::ToolResult { cache_control, .. },
    ) = blocks.last_mut()
    {
        *cache_control = Some(&control.0);
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
            Message::User { content } => push(&mut turns, "user", blocks(content)),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut out = blocks(content);
                out.extend(tool_calls.iter().map(|call| OutBlock::ToolUse {
                    id: &call.id,
                    name: &call.name,
                    input: raw::arguments_object(&call.arguments),
                }));
                push(&mut turns, "assistant", out);
            }
            Message::Tool(result) => {
                let block = OutBlock::ToolResult {
                    tool_use_id: &result.tool_call_id,
                    content: &result.content,
                    is_error: result.is_error,
                    cache_control: result.cache.as_ref().map(|c| &c.0),
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
            content: if let [OutBlock::Text {
                text,
                cache_control: None,
            }] = blocks.as_slice()
            {
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
        system: system(req),
        messages,
        tools: req
            .tools
            .iter()
            .map(|t| OutTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: t.parameters.as_ref().unwrap_or(&empty_schema),
                cache_control: t.cache.as_ref().map(|c| &c.0),
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

/// The system prompts: one as a string; several, or any ending a cached prefix, as blocks
/// (but empty ones, which Anthropic refuses as blocks).
fn system(req: &ChatRequest) -> Option<OutSystem<'_>> {
    match req.system.as_slice() {
        [] => None,
        [one] if req.system_cache.is_empty() => Some(OutSystem::Text(one)),
        many => {
            let blocks: Vec<OutBlock<'_>> = many
                .iter()
                .enumerate()
                .filter(|(_, text)| !text.is_empty())
                .map(|(i, text)| OutBlock::Text {
                    text,
                    cache_control: req
                        .system_cache
                        .iter()
                        .find(|(at, _)| *at == i)
                        .map(|(_, c)| &c.0),
                })
                .collect();
            (!blocks.is_empty()).then_some(OutSystem::Blocks(blocks))
        }
    }
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
    if let Some(OutBlock::Text { text, .. }) = blocks.last_mut() {
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
                    cache: None,
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

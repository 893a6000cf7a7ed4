//! Anthropic Messages: requests here (writing in `write.rs`), responses and errors in
//! `response.rs`, streams in `stream.rs`.
//!
//! Notes on the mapping:
//! - `system` (a string or text blocks) holds the system prompts; each text block is one.
//! - A user message's `tool_result` blocks become canonical tool messages, placed before the
//!   rest of that message (Anthropic requires them first anyway); the writer merges them back,
//!   and merges any consecutive same-role messages, since Anthropic needs alternation.
//! - `max_tokens` is required: 4096 when the client gave none ([`DEFAULT_MAX_TOKENS`]).
//! - Anthropic has no JSON mode: `response_format` is not written.
//! - Temperature is clamped to Anthropic's `[0, 1]`.
//! - Blocks the model has no place for (thinking, documents, server tools' blocks) are kept as
//!   [`Part::Other`] and written back to Anthropic only; images inside tool results are dropped;
//!   server tools (a `type` other than `custom`) in `tools` are dropped.
//! - `cache_control` on a system block, a text or image block, a `tool_result` or a tool is
//!   kept ([`ChatRequest::system_cache`], [`Part::CacheBreakpoint`], [`ToolResult::cache`],
//!   [`Tool::cache`]) and written back here; blocks kept whole keep theirs in them. On a
//!   `tool_use` block it is dropped (a tool call has no place for it).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::TranslateError;
use super::raw::{self, Fields, Shape};
use super::types::ToolResult;
use super::types::{
    CacheControl, ChatRequest, Image, Message, Part, RawJson, Tool, ToolCall, ToolChoice,
};
use super::Dialect;

mod encode;
mod response;
mod stream;
mod write;

pub use encode::Encoder;
pub use response::{parse_error, parse_response, write_error, write_response};
pub use stream::Decoder;
pub use write::write_request;

/// The `max_tokens` written when the client set none: Anthropic requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `anthropic-version` header value to send.
pub const VERSION: &str = "2023-06-01";

/// Parses a Messages request body.
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let Fields(fields) = raw::fields(body)?;
    let mut req = ChatRequest::default();
    let mut unknown = Vec::new();
    for (key, value) in fields {
        match key.as_ref() {
            "model" => req.model = raw::parse("model", value)?,
            "system" => (req.system, req.system_cache) = parse_system(value)?,
            "messages" => req.messages = parse_messages(value)?,
            "tools" => req.tools = parse_tools(value)?,
            "tool_choice" => req.tool_choice = parse_tool_choice(value)?,
            "stop_sequences" => req.stop = raw::strings("stop_sequences", value)?,
            "temperature" => req.temperature = raw::parse("temperature", value)?,
            "top_p" => req.top_p = raw::parse("top_p", value)?,
            "max_tokens" => req.max_tokens = raw::parse("max_tokens", value)?,
            "stream" => req.stream = raw::parse::<Option<bool>>("stream", value)?.unwrap_or(false),
            _ => unknown.push((key, value)),
        }
    }
    req.extra = raw::extra_from(Dialect::Anthropic, unknown);
    Ok(req)
}

#[derive(Deserialize)]
struct WireTextBlock<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

/// The system prompts, and which of them end a cached prefix.
type System = (Vec<String>, Vec<(usize, CacheControl)>);

fn parse_system(raw: &RawValue) -> Result<System, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => Ok((Vec::new(), Vec::new())),
        Shape::String => Ok((vec![raw::parse("system", raw)?], Vec::new())),
        _ => {
            let blocks: Vec<WireTextBlock<'_>> = raw::parse("system", raw)?;
            let (mut system, mut cache) = (Vec::with_capacity(blocks.len()), Vec::new());
            for block in blocks {
                let Some(text) = block.text else { continue };
                system.push(text.into_owned());
                if let Some(control) = raw::cache_control(block.cache_control)? {
                    cache.push((system.len() - 1, control));
                }
            }
            Ok((system, cache))
        }
    }
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: &'a RawValue,
}

/// One content block; which fields are set depends on `type`.
#[derive(Deserialize)]
pub(super) struct WireBlock<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    source: Option<WireSource<'a>>,
    #[serde(default, borrow)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) input: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: bool,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireSource<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    media_type: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    url: Option<Cow<'a, str>>,
}

fn parse_messages(raw: &RawValue) -> Result<Vec<Message>, TranslateError> {
    let wire: Vec<WireMessage<'_>> = raw::parse("messages", raw)?;
    let mut messages = Vec::with_capacity(wire.len());
    for message in wire {
        let blocks: Vec<&RawValue> = match raw::shape(message.content) {
            Shape::String => {
                let text: String = raw::parse("content", message.content)?;
                let part = Part::Text(text);
                messages.push(match message.role.as_ref() {
                    "assistant" => Message::Assistant {
                        content: vec![part],
                        tool_calls: Vec::new(),
                    },
                    _ => Message::User {
                        content: vec![part],
                    },
                });
                continue;
            }
            _ => raw::parse("content", message.content)?,
        };
        match message.role.as_ref() {
            "user" => user_message(&blocks, &mut messages)?,
            "assistant" => messages.push(assistant_message(&blocks)?),
            other => {
                return Err(TranslateError::invalid(format!(
                    "unsupported message role `{other}`"
                )))
            }
        }
    }
    Ok(messages)
}

/// A user message: its tool results first (as tool messages), then the rest.
fn user_message(blocks: &[&RawValue], out: &mut Vec<Message>) -> Result<(), TranslateError> {
    let mut content = Vec::new();
    for raw in blocks {
        let block: WireBlock<'_> = raw::parse("content block", raw)?;
        match block.kind.as_ref() {
            "tool_result" => out.push(Message::Tool(ToolResult {
                tool_call_id: block.tool_use_id.map(Cow::into_owned).unwrap_or_default(),
                content: match block.content {
                    Some(content) => tool_result_text(content)?,
                    None => String::new(),
                },
                is_error: block.is_error,
                cache: raw::cache_control(block.cache_control)?,
            })),
            _ => push_part(block, raw, &mut content)?,
        }
    }
    if !content.is_empty() {
        out.push(Message::User { content });
    }
    Ok(())
}

fn assistant_message(blocks: &[&RawValue]) -> Result<Message, TranslateError> {
    let mut content = Vec::new();
    let mut tool_calls = Vec::new();
    for raw in blocks {
        let block: WireBlock<'_> = raw::parse("content block", raw)?;
        if block.kind == "tool_use" {
            tool_calls.push(ToolCall {
                id: block.id.map(Cow::into_owned).unwrap_or_default(),
                name: block.name.map(Cow::into_owned).unwrap_or_default(),
                arguments: block
                    .input
                    .map_or_else(|| "{}".to_owned(), |i| i.get().to_owned()),
            });
        } else {
            push_part(block, raw, &mut content)?;
        }
    }
    Ok(Message::Assistant {
        content,
        tool_calls,
    })
}

/// A block as a part, and its breakpoint after it when it has one (a block kept raw keeps
/// its `cache_control` in it).
fn push_part(
    block: WireBlock<'_>,
    raw: &RawValue,
    out: &mut Vec<Part>,
) -> Result<(), TranslateError> {
    let cache = raw::cache_control(block.cache_control)?;
    let part = part(block, raw);
    let kept_whole = matches!(part, Part::Other { .. });
    out.push(part);
    if let (Some(cache), false) = (cache, kept_whole) {
        out.push(Part::CacheBreakpoint(cache));
    }
    Ok(())
}

/// A text or image block, or any other block kept raw.
fn part(block: WireBlock<'_>, raw: &RawValue) -> Part {
    match (block.kind.as_ref(), block.text, block.source) {
        ("text", Some(text), _) => Part::Text(text.into_owned()),
        ("image", _, Some(source)) => match (source.kind.as_ref(), source.url, source.data) {
            ("url", Some(url), _) => Part::Image(Image::Url(url.into_owned())),
            ("base64", _, Some(data)) => Part::Image(Image::Base64 {
                media_type: source
                    .media_type
                    .map_or_else(|| "image/png".to_owned(), Cow::into_owned),
                data: data.into_owned(),
            }),
            _ => other(raw),
        },
        _ => other(raw),
    }
}

fn other(raw: &RawValue) -> Part {
    Part::Other {
        dialect: Dialect::Anthropic,
        raw: RawJson::from_raw(raw),
    }
}

/// A tool result's content: a string, or blocks whose text is joined.
fn tool_result_text(raw: &RawValue) -> Result<String, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => Ok(String::new()),
        Shape::String => raw::parse("content", raw),
        _ => {
            let blocks: Vec<WireTextBlock<'_>> = raw::parse("content", raw)?;
            Ok(blocks
                .into_iter()
                .filter_map(|b| b.text)
                .collect::<Vec<_>>()
                .join("\n"))
        }
    }
}

#[derive(Deserialize)]
struct WireTool<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    input_schema: Option<&'a RawValue>,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

fn parse_tools(raw: &RawValue) -> Result<Vec<Tool>, TranslateError> {
    let tools: Option<Vec<WireTool<'_>>> = raw::parse("tools", raw)?;
    tools
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.kind.as_deref().is_none_or(|k| k == "custom"))
        .map(|t| {
            Ok(Tool {
                name: t.name.into_owned(),
                description: t.description.map(Cow::into_owned),
                parameters: t.input_schema.map(RawJson::from_raw),
                cache: raw::cache_control(t.cache_control)?,
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

fn parse_tool_choice(raw: &RawValue) -> Result<Option<ToolChoice>, TranslateError> {
    let choice: Option<WireToolChoice<'_>> = raw::parse("tool_choice", raw)?;
    Ok(choice.map(|c| match (c.kind.as_ref(), c.name) {
        ("any", _) => ToolChoice::Required,
        ("none", _) => ToolChoice::None,
        ("tool", Some(name)) => ToolChoice::Tool(name.into_owned()),
        _ => ToolChoice::Auto,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tool_results_come_out_before_the_text() {
        let body = br#"{"model":"claude","max_tokens":10,"messages":[
            {"role":"user","content":"weather?"},
            {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"t1","name":"w","input":{"c":"P"}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"thanks"}]}
        ],"metadata":{"user_id":"u"}}"#;
        let req = parse_request(body).unwrap();
        assert_eq!(req.messages.len(), 4);
        let Message::Assistant {
            content,
            tool_calls,
        } = &req.messages[1]
        else {
            panic!("not an assistant message")
        };
        assert!(matches!(content[0], Part::Other { .. }));
        assert_eq!(tool_calls[0].arguments, r#"{"c":"P"}"#);
        assert_eq!(
            req.messages[2],
            Message::Tool(ToolResult {
                tool_call_id: "t1".into(),
                content: "sunny".into(),
                is_error: false,
                cache: None,
            })
        );
        assert_eq!(req.messages[3], Message::user("thanks"));
        assert_eq!(req.extra.fields[0].0, "metadata");
    }
}

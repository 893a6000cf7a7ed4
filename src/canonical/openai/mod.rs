//! OpenAI Chat Completions (also Azure OpenAI and OpenAI-compatible servers): requests here,
//! responses and errors in `response.rs`, streams in `stream.rs`.
//!
//! Notes on the mapping:
//! - `system` and `developer` messages, wherever they are, become the canonical system prompts;
//!   they are written back first, as `system`.
//! - `max_completion_tokens` wins over `max_tokens`; the writer uses `max_completion_tokens`
//!   for reasoning models (o-series, gpt-5), which reject `max_tokens`, and `max_tokens`
//!   elsewhere, which every compatible server knows.
//! - A streamed request is written with `stream_options.include_usage`, so usage always comes.
//! - Prompt-cache markers as LiteLLM and OpenRouter take them from OpenAI clients:
//!   `cache_control` on a content part, on a message (its content's end), or on a tool
//!   (`tools[i].cache_control` or `tools[i].function.cache_control`), become
//!   [`Part::CacheBreakpoint`]s, [`ToolResult::cache`] and [`Tool::cache`]. A system message's
//!   text is split at its breakpoints, so each ends a system prompt. The writer drops them:
//!   OpenAI caches by prefix (a same-dialect request keeps them, passed through as it came).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::TranslateError;
use super::raw::{self, Fields, Shape};
use super::types::{
    CacheControl, ChatRequest, Message, Part, RawJson, ResponseFormat, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use super::Dialect;

mod encode;
mod response;
mod stream;
mod write;

pub(crate) use encode::write_data;
pub use encode::Encoder;
pub use response::{parse_error, parse_response, write_error, write_response};
pub use stream::Decoder;
pub use write::write_request;

/// Parses a Chat Completions request body.
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let Fields(fields) = raw::fields(body)?;
    let mut req = ChatRequest::default();
    let mut unknown = Vec::new();
    let (mut max_tokens, mut max_completion_tokens) = (None, None);
    for (key, value) in fields {
        match key.as_ref() {
            "model" => req.model = raw::parse("model", value)?,
            "messages" => parse_messages(value, &mut req)?,
            "tools" => req.tools = parse_tools(value)?,
            "tool_choice" => req.tool_choice = parse_tool_choice(value)?,
            "response_format" => req.response_format = parse_response_format(value)?,
            "stop" => req.stop = raw::strings("stop", value)?,
            "temperature" => req.temperature = raw::parse("temperature", value)?,
            "top_p" => req.top_p = raw::parse("top_p", value)?,
            "max_tokens" => max_tokens = raw::parse("max_tokens", value)?,
            "max_completion_tokens" => {
                max_completion_tokens = raw::parse("max_completion_tokens", value)?;
            }
            "stream" => req.stream = raw::parse::<Option<bool>>("stream", value)?.unwrap_or(false),
            _ => unknown.push((key, value)),
        }
    }
    req.max_tokens = max_completion_tokens.or(max_tokens);
    req.extra = raw::extra_from(Dialect::OpenAi, unknown);
    Ok(req)
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
    #[serde(default, borrow)]
    tool_call_id: Option<Cow<'a, str>>,
    /// A breakpoint at the end of the message (LiteLLM's convention).
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct WireToolCall<'a> {
    #[serde(default, borrow)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(super) function: WireFunction<'a>,
}

#[derive(Deserialize)]
pub(super) struct WireFunction<'a> {
    #[serde(borrow)]
    pub(super) name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) arguments: Option<Cow<'a, str>>,
}

impl WireToolCall<'_> {
    pub(super) fn into_canonical(self) -> ToolCall {
        ToolCall {
            id: self.id.map(Cow::into_owned).unwrap_or_default(),
            name: self.function.name.into_owned(),
            arguments: self
                .function
                .arguments
                .map(Cow::into_owned)
                .unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct WirePart<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    image_url: Option<WireImageUrl<'a>>,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireImageUrl<'a> {
    #[serde(borrow)]
    url: Cow<'a, str>,
}

fn parse_messages(raw: &RawValue, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let messages: Vec<WireMessage<'_>> = raw::parse("messages", raw)?;
    req.messages.reserve(messages.len());
    for message in messages {
        let mut content = match message.content {
            Some(content) => parse_content(content)?,
            None => Vec::new(),
        };
        if let Some(cache) = raw::cache_control(message.cache_control)? {
            if !matches!(content.last(), Some(Part::CacheBreakpoint(_))) {
                content.push(Part::CacheBreakpoint(cache));
            }
        }
        match message.role.as_ref() {
            "system" | "developer" => push_system(req, content),
            "user" => req.messages.push(Message::User { content }),
            "assistant" => req.messages.push(Message::Assistant {
                content,
                tool_calls: message
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(WireToolCall::into_canonical)
                    .collect(),
            }),
            "tool" => {
                let Some(id) = message.tool_call_id else {
                    return Err(TranslateError::invalid(
                        "a `tool` message needs `tool_call_id`",
                    ));
                };
                // One result, one breakpoint: the last the message gives.
                let cache = content.iter().rev().find_map(|part| match part {
                    Part::CacheBreakpoint(cache) => Some(cache.clone()),
                    _ => None,
                });
                req.messages.push(Message::Tool(ToolResult {
                    tool_call_id: id.into_owned(),
                    content: super::types::text_of(&content),
                    is_error: false,
                    cache,
                }));
            }
            other => {
                return Err(TranslateError::invalid(format!(
                    "unsupported message role `{other}`"
                )))
            }
        }
    }
    Ok(())
}

/// A system message's content as system prompts: its text, split after each breakpoint so
/// the breakpoint ends a prompt of its own (`system_cache` says which). One prompt when it has
/// none, as before caching was modelled. A breakpoint with no text before it in the message
/// marks the system prompt before (none: nothing), as a marker on an empty part does in a
/// message.
fn push_system(req: &mut ChatRequest, content: Vec<Part>) {
    let mut text = String::new();
    let mut pushed = false;
    for part in content {
        match part {
            Part::Text(t) => text.push_str(&t),
            Part::CacheBreakpoint(cache) => {
                if !text.is_empty() {
                    req.system.push(std::mem::take(&mut text));
                    pushed = true;
                }
                let Some(last) = req.system.len().checked_sub(1) else {
                    continue;
                };
                if req.system_cache.last().is_none_or(|(at, _)| *at != last) {
                    req.system_cache.push((last, cache));
                }
            }
            _ => {}
        }
    }
    if !pushed || !text.is_empty() {
        req.system.push(text);
    }
}

/// Message content: a string, or an array of parts (text, image_url, anything else kept raw).
/// A text or image part's `cache_control` is a breakpoint after it; another part's stays in
/// it (written back to OpenAI only).
fn parse_content(raw: &RawValue) -> Result<Vec<Part>, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => Ok(Vec::new()),
        Shape::String => Ok(vec![Part::Text(raw::parse("content", raw)?)]),
        _ => {
            let parts: Vec<&RawValue> = raw::parse("content", raw)?;
            let mut out = Vec::with_capacity(parts.len());
            for part_raw in parts {
                let part: WirePart<'_> = raw::parse("content part", part_raw)?;
                let cache = raw::cache_control(part.cache_control)?;
                let (part, marked) = match (part.kind.as_ref(), part.text, part.image_url) {
                    ("text", Some(text), _) => (Part::Text(text.into_owned()), true),
                    ("image_url", _, Some(image)) => {
                        (Part::Image(raw::image_from_url(&image.url)), true)
                    }
                    // Kept whole: a marker on it stays in it.
                    _ => {
                        let raw = RawJson::from_raw(part_raw);
                        let other = Part::Other {
                            dialect: Dialect::OpenAi,
                            raw,
                        };
                        (other, false)
                    }
                };
                out.push(part);
                if marked {
                    out.extend(cache.map(Part::CacheBreakpoint));
                }
            }
            Ok(out)
        }
    }
}

#[derive(Deserialize)]
struct WireTool<'a> {
    #[serde(borrow)]
    function: WireToolFunction<'a>,
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireToolFunction<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
    /// Where LiteLLM also looks for a tool's breakpoint.
    #[serde(default, borrow)]
    cache_control: Option<&'a RawValue>,
}

fn parse_tools(raw: &RawValue) -> Result<Vec<Tool>, TranslateError> {
    let tools: Option<Vec<WireTool<'_>>> = raw::parse("tools", raw)?;
    tools
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let cache: Option<CacheControl> = match raw::cache_control(t.cache_control)? {
                Some(cache) => Some(cache),
                None => raw::cache_control(t.function.cache_control)?,
            };
            Ok(Tool {
                name: t.function.name.into_owned(),
                description: t.function.description.map(Cow::into_owned),
                parameters: t.function.parameters.map(RawJson::from_raw),
                cache,
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct WireNamedChoice<'a> {
    #[serde(default, borrow)]
    function: Option<WireChoiceName<'a>>,
}

#[derive(Deserialize)]
struct WireChoiceName<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

fn parse_tool_choice(raw: &RawValue) -> Result<Option<ToolChoice>, TranslateError> {
    Ok(match raw::shape(raw) {
        Shape::Null => None,
        Shape::String => match raw::parse::<Cow<'_, str>>("tool_choice", raw)?.as_ref() {
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => Some(ToolChoice::Auto),
        },
        _ => {
            // `{"type":"function","function":{"name"}}`; newer shapes (allowed tools) are
            // read as `auto`, the closest every dialect has.
            let named: WireNamedChoice<'_> = raw::parse("tool_choice", raw)?;
            Some(
                named
                    .function
                    .map_or(ToolChoice::Auto, |f| ToolChoice::Tool(f.name.into_owned())),
            )
        }
    })
}

#[derive(Deserialize)]
struct WireResponseFormat<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    json_schema: Option<WireJsonSchema<'a>>,
}

#[derive(Deserialize)]
struct WireJsonSchema<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    schema: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

fn parse_response_format(raw: &RawValue) -> Result<Option<ResponseFormat>, TranslateError> {
    let format: Option<WireResponseFormat<'_>> = raw::parse("response_format", raw)?;
    let Some(format) = format else {
        return Ok(None);
    };
    Ok(Some(match (format.kind.as_ref(), format.json_schema) {
        ("json_object", _) => ResponseFormat::JsonObject,
        ("json_schema", Some(js)) => ResponseFormat::JsonSchema {
            name: js
                .name
                .map_or_else(|| "response".to_owned(), Cow::into_owned),
            schema: js.schema.map_or_else(RawJson::null, RawJson::from_raw),
            strict: js.strict,
        },
        _ => ResponseFormat::Text,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::canonical::types::Image;

    #[test]
    fn parses_and_writes_a_minimal_request() {
        let body = br#"{"model":"gpt-4o","messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}],"max_completion_tokens":50,"seed":7,"stream":true,"stream_options":{"include_usage":false}}"#;
        let req = parse_request(body).unwrap();
        assert_eq!(req.system, ["Be brief."]);
        assert_eq!(req.max_tokens, Some(50));
        assert!(req.stream);
        let Message::User { content } = &req.messages[0] else {
            panic!("not a user message");
        };
        assert_eq!(
            content[1],
            Part::Image(Image::Base64 {
                media_type: "image/png".into(),
                data: "AAAA".into()
            })
        );
        assert!(matches!(content[2], Part::Other { .. }));
        assert_eq!(req.extra.fields.len(), 2);
        let out = String::from_utf8(write_request(&req, "o3-mini").unwrap()).unwrap();
        assert!(out.contains(r#""max_completion_tokens":50"#), "{out}");
        assert!(out.contains(r#""seed":7"#), "{out}");
        assert!(
            out.ends_with(r#""stream":true,"stream_options":{"include_usage":true},"seed":7}"#),
            "{out}"
        );
        assert!(
            out.contains(r#""url":"data:image/png;base64,AAAA""#),
            "{out}"
        );
        let out = String::from_utf8(write_request(&req, "gpt-4o").unwrap()).unwrap();
        assert!(out.contains(r#""max_tokens":50"#), "{out}");
        let asks = br#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true},"tool_choice":{"type":"allowed_tools"}}"#;
        let asks = parse_request(asks).unwrap();
        assert_eq!(asks.tool_choice, Some(ToolChoice::Auto));
    }

    /// A user message of only another dialect's parts (an Anthropic block after tool results)
    /// is no turn at all for OpenAI; an empty one the client sent stays.
    #[test]
    fn a_user_message_of_only_foreign_parts_is_not_written() {
        let foreign = Part::Other {
            dialect: Dialect::Anthropic,
            raw: RawJson::from_text(r#"{"type":"x_future_block"}"#).unwrap(),
        };
        let req = ChatRequest {
            messages: vec![
                Message::user("q"),
                Message::User {
                    content: vec![foreign],
                },
                Message::User {
                    content: Vec::new(),
                },
            ],
            ..ChatRequest::default()
        };
        let out: serde_json::Value =
            serde_json::from_slice(&write_request(&req, "gpt-4o").unwrap()).unwrap();
        assert_eq!(
            out["messages"],
            serde_json::json!([{"role": "user", "content": "q"}, {"role": "user", "content": ""}])
        );
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(parse_request(b"[]").is_err());
        assert!(parse_request(br#"{"messages":[{"role":"tool","content":"x"}]}"#).is_err());
        assert!(parse_request(br#"{"messages":[{"role":"wizard","content":"x"}]}"#).is_err());
        assert!(parse_request(br#"{"messages":"x"}"#).is_err());
    }
}

//! The OpenAI Responses API (`POST /v1/responses`): requests here (writing in `write.rs`),
//! responses and errors in `response.rs`, streams in `stream.rs` (reading) and `encode.rs`
//! (writing; the events' shapes in `events.rs`), and [`needs_native`] (what only a Responses
//! target can serve) in `native.rs`.
//!
//! Notes on the mapping:
//! - `instructions` is the first system prompt; `system` and `developer` messages in `input`
//!   follow it. The writer sends the first system prompt as `instructions` and the others as
//!   `developer` messages at the start of `input` (the API reads `instructions` as exactly that).
//! - `input` items: messages become user and assistant messages; `function_call` items become
//!   the assistant's tool calls (the canonical call id is the `call_id`; the item's own `fc_` id
//!   is not kept) and `function_call_output` items tool messages. Reasoning items and every
//!   other item type (built-in tool calls, `item_reference`, ...) are kept whole as
//!   [`Part::Other`] of this dialect inside an assistant message, so they go back to this
//!   dialect only. Consecutive assistant items are merged into one assistant message only
//!   where that keeps their order (content never goes after a tool call), so the writer gives
//!   back the items in the order they came.
//! - In an assistant message a [`Part::Other`] of this dialect is a whole input item; a content
//!   part the model has no place for (a `refusal`) is kept as a one-part assistant message item.
//!   In a user message it is a content part (`input_file`, an `input_image` by `file_id`).
//! - Assistant message ids, `phase` and annotations, image `detail` and the error flag of a
//!   tool result are not kept; a tool output given as content parts keeps its text only.
//! - `tools`: function tools (flat: `{"type":"function","name",...}`) become canonical tools.
//!   The whole `tools` array is also kept in [`Extra`](super::Extra) under `tools`, so the
//!   writer gives built-in tools (`web_search`, `file_search`, `custom`, ...) and each function
//!   tool's `strict` back to this dialect. Function tools from other dialects are written with
//!   `"strict": false` (the API's default is strict, which their schemas rarely satisfy).
//! - `text.format` is the response format (flat: `{"type":"json_schema","name","schema"}`);
//!   the other members of `text` (`verbosity`, a format type the model does not have) are kept
//!   in `Extra` under `text` and merged back by the writer.
//! - A `tool_choice` the model cannot hold (`allowed_tools`, a built-in tool type) is kept in
//!   `Extra` as it came and the canonical choice left unset.
//! - `max_output_tokens` is the output limit; the API has no stop sequences: `stop` is not
//!   written.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::TranslateError;
use super::raw::{self, Fields, Shape};
use super::types::{
    ChatRequest, Message, Part, RawJson, ResponseFormat, Tool, ToolCall, ToolChoice, ToolResult,
};
use super::Dialect;

mod encode;
mod events;
mod native;
mod response;
mod stream;
mod write;

#[cfg(test)]
mod tests;

pub use encode::{Encoder, OpenText, Resume};
#[cfg(fuzzing)]
pub use native::fuzz_needs_by_serde;
pub use native::{native_needs, needs_native, read_plain, NativeNeeds, HEAD_FIELDS};
pub use response::{parse_error, parse_response, write_error, write_response};
pub use stream::Decoder;
pub use write::write_request;

/// Parses a Responses request body (`instructions`, `input` as a string or items, `tools`,
/// `tool_choice`, `text.format`, `max_output_tokens`, ...). Items the model has no place for
/// (reasoning, built-in tool calls) are kept as `Part::Other` of this dialect.
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let Fields(fields) = raw::fields(body)?;
    let mut req = ChatRequest::default();
    let mut unknown = Vec::new();
    let mut instructions = None;
    let mut text_rest = None;
    for (key, value) in fields {
        match key.as_ref() {
            "model" => req.model = raw::parse("model", value)?,
            "instructions" => instructions = raw::parse::<Option<String>>("instructions", value)?,
            "input" => parse_input(value, &mut req)?,
            "tools" => {
                req.tools = parse_tools(value)?;
                if raw::shape(value) == Shape::Array {
                    // Kept whole: built-in tools and `strict` go back to this dialect.
                    unknown.push((key, value));
                }
            }
            "tool_choice" => match parse_tool_choice(value)? {
                Some(choice) => req.tool_choice = Some(choice),
                None if raw::shape(value) != Shape::Null => unknown.push((key, value)),
                None => {}
            },
            "text" => {
                let (format, rest) = parse_text(value)?;
                req.response_format = format;
                text_rest = rest;
            }
            "max_output_tokens" => req.max_tokens = raw::parse("max_output_tokens", value)?,
            "temperature" => req.temperature = raw::parse("temperature", value)?,
            "top_p" => req.top_p = raw::parse("top_p", value)?,
            "stream" => req.stream = raw::parse::<Option<bool>>("stream", value)?.unwrap_or(false),
            _ => unknown.push((key, value)),
        }
    }
    if let Some(text) = instructions.filter(|t| !t.is_empty()) {
        req.system.insert(0, text);
    }
    req.extra = raw::extra_from(Dialect::Responses, unknown);
    if let Some(rest) = text_rest {
        req.extra.dialect = Some(Dialect::Responses);
        req.extra.fields.push(("text".to_owned(), rest));
    }
    Ok(req)
}

/// One `input` item (or `output` item of a response); which fields are set depends on `type`.
/// Fields whose type differs between item kinds are left raw.
#[derive(Deserialize)]
pub(super) struct WireItem<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) role: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) call_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) arguments: Option<&'a RawValue>,
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) id: Option<Cow<'a, str>>,
}

/// One content part of a message.
#[derive(Deserialize)]
pub(super) struct WirePart<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    image_url: Option<&'a RawValue>,
}

/// Parses one raw value, naming `input[index]` (and `what` in it) in the error.
fn parse_at<'a, T: Deserialize<'a>>(
    index: usize,
    what: &str,
    raw: &'a RawValue,
) -> Result<T, TranslateError> {
    serde_json::from_str(raw.get())
        .map_err(|e| TranslateError::invalid(format!("`input[{index}]{what}`: {e}")))
}

fn parse_input(raw: &RawValue, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let items: Vec<&RawValue> = match raw::shape(raw) {
        Shape::Null => return Ok(()),
        Shape::String => {
            req.messages
                .push(Message::user(raw::parse::<String>("input", raw)?));
            return Ok(());
        }
        Shape::Array => raw::parse("input", raw)?,
        _ => {
            return Err(TranslateError::invalid(
                "`input`: expected a string or an array of items",
            ))
        }
    };
    req.messages.reserve(items.len());
    for (index, item_raw) in items.into_iter().enumerate() {
        let item: WireItem<'_> = parse_at(index, "", item_raw)?;
        let kind = match (item.kind.as_deref(), item.role.is_some()) {
            (Some(kind), _) => kind,
            (None, true) => "message",
            (None, false) => {
                return Err(TranslateError::invalid(format!(
                    "`input[{index}]`: an item needs `type` (or `role`, for a message)"
                )))
            }
        };
        match kind {
            "message" => message(index, &item, req)?,
            "function_call" => {
                let call = ToolCall {
                    id: required(index, "call_id", item.call_id)?,
                    name: required(index, "name", item.name)?,
                    arguments: match item.arguments {
                        Some(args) => parse_at(index, ".arguments", args)?,
                        None => String::new(),
                    },
                };
                push_call(&mut req.messages, call);
            }
            "function_call_output" => {
                let tool_call_id = required(index, "call_id", item.call_id)?;
                let Some(output) = item.output else {
                    return Err(TranslateError::invalid(format!(
                        "`input[{index}]`: a function_call_output needs `output`"
                    )));
                };
                req.messages.push(Message::Tool(ToolResult {
                    tool_call_id,
                    content: output_text(index, output)?,
                    is_error: false,
                    cache: None,
                }));
            }
            _ => push_part(&mut req.messages, other(item_raw)),
        }
    }
    Ok(())
}

/// A required string member of item `index`.
fn required(
    index: usize,
    name: &str,
    value: Option<Cow<'_, str>>,
) -> Result<String, TranslateError> {
    value.map(Cow::into_owned).ok_or_else(|| {
        TranslateError::invalid(format!("`input[{index}]`: this item needs `{name}`"))
    })
}

/// A message item: its text and images, by role.
fn message(index: usize, item: &WireItem<'_>, req: &mut ChatRequest) -> Result<(), TranslateError> {
    let role = item.role.as_deref().unwrap_or("user");
    let content = item.content.unwrap_or(RawValue::NULL);
    match role {
        "user" => {
            let content = user_content(index, content)?;
            req.messages.push(Message::User { content });
        }
        "system" | "developer" => {
            let content = user_content(index, content)?;
            req.system.push(super::types::text_of(&content));
        }
        "assistant" => assistant_content(index, content, &mut req.messages)?,
        other => {
            return Err(TranslateError::invalid(format!(
                "`input[{index}].role`: unsupported role `{other}`"
            )))
        }
    }
    Ok(())
}

/// Content parts of a message: a string, or an array of parts.
fn parts(index: usize, raw: &RawValue) -> Result<Vec<(&RawValue, WirePart<'_>)>, TranslateError> {
    let parts: Vec<&RawValue> = parse_at(index, ".content", raw)?;
    parts
        .into_iter()
        .map(|raw| Ok((raw, parse_at(index, ".content[]", raw)?)))
        .collect()
}

/// A user (or system) message's content: text, images by URL, anything else kept raw.
fn user_content(index: usize, raw: &RawValue) -> Result<Vec<Part>, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => return Ok(Vec::new()),
        Shape::String => return Ok(vec![Part::Text(parse_at(index, ".content", raw)?)]),
        _ => {}
    }
    Ok(parts(index, raw)?
        .into_iter()
        .map(
            |(raw, part)| match (part.kind.as_deref(), part.text, part.image_url) {
                (Some("input_text" | "output_text" | "text"), Some(text), _) => {
                    Part::Text(text.into_owned())
                }
                (Some("input_image"), _, Some(url)) if raw::shape(url) == Shape::String => {
                    match serde_json::from_str::<Cow<'_, str>>(url.get()) {
                        Ok(url) => Part::Image(raw::image_from_url(&url)),
                        Err(_) => other(raw),
                    }
                }
                _ => other(raw),
            },
        )
        .collect())
}

/// An assistant message's content: text parts, and any other part as a one-part assistant
/// message item of its own.
fn assistant_content(
    index: usize,
    raw: &RawValue,
    messages: &mut Vec<Message>,
) -> Result<(), TranslateError> {
    match raw::shape(raw) {
        Shape::Null => return Ok(()),
        Shape::String => {
            push_part(messages, Part::Text(parse_at(index, ".content", raw)?));
            return Ok(());
        }
        _ => {}
    }
    for (raw, part) in parts(index, raw)? {
        let part = match (part.kind.as_deref(), part.text) {
            (Some("output_text" | "input_text" | "text"), Some(text)) => {
                Part::Text(text.into_owned())
            }
            _ => {
                let item = format!(
                    r#"{{"type":"message","role":"assistant","content":[{}]}}"#,
                    raw.get()
                );
                Part::Other {
                    dialect: Dialect::Responses,
                    raw: RawJson::from_text(&item)?,
                }
            }
        };
        push_part(messages, part);
    }
    Ok(())
}

/// A raw item or part of this dialect.
fn other(raw: &RawValue) -> Part {
    Part::Other {
        dialect: Dialect::Responses,
        raw: RawJson::from_raw(raw),
    }
}

/// Appends assistant content: to the last assistant message unless it already has tool calls
/// (content after a call would be written before it).
fn push_part(messages: &mut Vec<Message>, part: Part) {
    match messages.last_mut() {
        Some(Message::Assistant {
            content,
            tool_calls,
        }) if tool_calls.is_empty() => content.push(part),
        _ => messages.push(Message::Assistant {
            content: vec![part],
            tool_calls: Vec::new(),
        }),
    }
}

/// Appends a tool call to the last assistant message, or starts one.
fn push_call(messages: &mut Vec<Message>, call: ToolCall) {
    match messages.last_mut() {
        Some(Message::Assistant { tool_calls, .. }) => tool_calls.push(call),
        _ => messages.push(Message::Assistant {
            content: Vec::new(),
            tool_calls: vec![call],
        }),
    }
}

/// A function call's output: a string, or content parts whose text is joined.
fn output_text(index: usize, raw: &RawValue) -> Result<String, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => Ok(String::new()),
        Shape::String => parse_at(index, ".output", raw),
        Shape::Array => {
            let texts: Vec<String> = parts(index, raw)?
                .into_iter()
                .filter_map(|(_, part)| part.text.map(Cow::into_owned))
                .collect();
            Ok(texts.join("\n"))
        }
        _ => Err(TranslateError::invalid(format!(
            "`input[{index}].output`: expected a string or content parts"
        ))),
    }
}

/// One `tools` entry; only function tools are read.
#[derive(Deserialize)]
pub(super) struct WireTool<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) description: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) parameters: Option<&'a RawValue>,
    #[serde(default)]
    pub(super) strict: Option<bool>,
}

impl WireTool<'_> {
    /// Whether this is a function tool (`type` missing counts as one).
    pub(super) fn is_function(&self) -> bool {
        self.kind.as_deref().is_none_or(|k| k == "function")
    }

    /// The canonical tool of a function tool.
    pub(super) fn to_canonical(&self, index: usize) -> Result<Tool, TranslateError> {
        let Some(name) = &self.name else {
            return Err(TranslateError::invalid(format!(
                "`tools[{index}]`: a function tool needs `name` (Responses function tools are flat, not nested in `function`)"
            )));
        };
        let description: Option<String> = match self.description {
            Some(raw) => serde_json::from_str(raw.get()).map_err(|e| {
                TranslateError::invalid(format!("`tools[{index}].description`: {e}"))
            })?,
            None => None,
        };
        Ok(Tool {
            name: name.as_ref().to_owned(),
            description,
            parameters: self
                .parameters
                .filter(|p| raw::shape(p) != Shape::Null)
                .map(RawJson::from_raw),
            cache: None,
        })
    }
}

fn parse_tools(raw: &RawValue) -> Result<Vec<Tool>, TranslateError> {
    let tools: Option<Vec<WireTool<'_>>> = raw::parse("tools", raw)?;
    let mut out = Vec::new();
    for (index, tool) in tools.unwrap_or_default().iter().enumerate() {
        if tool.is_function() {
            out.push(tool.to_canonical(index)?);
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
}

/// `"auto"`, `"none"`, `"required"` or `{"type":"function","name"}`; `None` for anything else
/// (kept raw by the caller).
fn parse_tool_choice(raw: &RawValue) -> Result<Option<ToolChoice>, TranslateError> {
    match raw::shape(raw) {
        Shape::Null => Ok(None),
        Shape::String => Ok(
            match raw::parse::<Cow<'_, str>>("tool_choice", raw)?.as_ref() {
                "auto" => Some(ToolChoice::Auto),
                "none" => Some(ToolChoice::None),
                "required" => Some(ToolChoice::Required),
                _ => None,
            },
        ),
        Shape::Object => {
            let choice: WireToolChoice<'_> = raw::parse("tool_choice", raw)?;
            match (choice.kind.as_deref(), choice.name) {
                (Some("function"), Some(name)) => Ok(Some(ToolChoice::Tool(name.into_owned()))),
                (Some("function"), None) => Err(TranslateError::invalid(
                    "`tool_choice`: a function choice needs `name`",
                )),
                _ => Ok(None),
            }
        }
        _ => Err(TranslateError::invalid(
            "`tool_choice`: expected a string or an object",
        )),
    }
}

#[derive(Deserialize)]
struct WireFormat<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    schema: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

/// `text`: its `format` as a response format, and the other members (or a format the model
/// does not have) as a raw object to keep.
fn parse_text(raw: &RawValue) -> Result<(Option<ResponseFormat>, Option<RawJson>), TranslateError> {
    match raw::shape(raw) {
        Shape::Null => return Ok((None, None)),
        Shape::Object => {}
        _ => return Err(TranslateError::invalid("`text`: expected an object")),
    }
    let Fields(members) = raw::parse("text", raw)?;
    let mut format = None;
    let mut rest = Vec::new();
    for (key, value) in members {
        if key == "format" && raw::shape(value) != Shape::Null {
            let wire: WireFormat<'_> = raw::parse("text.format", value)?;
            format = match wire.kind.as_ref() {
                "text" => Some(ResponseFormat::Text),
                "json_object" => Some(ResponseFormat::JsonObject),
                "json_schema" => {
                    let Some(schema) = wire.schema else {
                        return Err(TranslateError::invalid(
                            "`text.format`: a json_schema format needs `schema`",
                        ));
                    };
                    Some(ResponseFormat::JsonSchema {
                        name: wire
                            .name
                            .map_or_else(|| "response".to_owned(), Cow::into_owned),
                        schema: RawJson::from_raw(schema),
                        strict: wire.strict,
                    })
                }
                _ => None,
            };
            if format.is_some() {
                continue;
            }
        }
        rest.push((key, value));
    }
    if rest.is_empty() {
        return Ok((format, None));
    }
    let object = serde_json::value::to_raw_value(&Members(&rest))?;
    Ok((format, Some(RawJson(object))))
}

/// Object members to write as one JSON object.
struct Members<'a, 'b>(&'b [(Cow<'a, str>, &'a RawValue)]);

impl serde::Serialize for Members<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in self.0 {
            map.serialize_entry(key.as_ref(), value)?;
        }
        map.end()
    }
}

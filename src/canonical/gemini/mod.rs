//! Gemini generateContent: requests here (writing in `write.rs`), responses and errors in
//! `response.rs`, streams (`streamGenerateContent?alt=sse`) in `stream.rs`.
//!
//! Notes on the mapping:
//! - The model is in the URL (`provider::gemini` builds it), not the body: the parser leaves `model` empty.
//! - Roles are `user` and `model`; tool results are `functionResponse` parts in a `user` turn,
//!   and consecutive same-role turns are merged.
//! - Gemini function calls usually carry no id: the parsers make ids up (`call_...`), and a
//!   `functionResponse` without one answers the oldest unanswered call of the same name.
//! - A function call's `thoughtSignature` rides in its id through the other dialects and is
//!   put back when the conversation is written for Gemini; a call of the current turn without
//!   one is sent with the value Google documents for calls Gemini did not make ([`signature`]).
//! - Tool results: a result that is a JSON object is sent as the `response` object, anything
//!   else as `{"output": text}` (`{"error": text}` when the tool failed), Gemini's convention.
//! - Tool schemas go out as `parametersJsonSchema` and JSON schemas for the answer as
//!   `responseJsonSchema`: they take JSON Schema as OpenAI and Anthropic clients write it, where
//!   `parameters`/`responseSchema` reject keywords such as `additionalProperties`.
//! - Unmodelled `generationConfig` members (topK, seed, thinkingConfig, ...) are kept as an
//!   extra `generationConfig` object and merged back when writing to Gemini. Non-function tools
//!   (search, code execution) and the signatures of text parts are not kept.
//! - The REST API accepts camelCase and snake_case field names; the parser does too.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::TranslateError;
use super::raw::{self, Fields};
use super::types::{ChatRequest, Image, Message, Part, RawJson, ResponseFormat, Tool, ToolCall};
use super::types::{ToolChoice, ToolResult};
use super::Dialect;

mod error;
mod response;
pub mod signature;
mod stream;
mod write;

pub use error::{parse_error, write_error};
pub use response::{parse_response, write_response};
pub use stream::{Decoder, Encoder};
pub use write::write_request;

/// Parses a generateContent request body (the model is not in it).
pub fn parse_request(body: &[u8]) -> Result<ChatRequest, TranslateError> {
    let Fields(fields) = raw::fields(body)?;
    let mut req = ChatRequest::default();
    let mut unknown = Vec::new();
    let mut generation_rest = None;
    for (key, value) in fields {
        match key.as_ref() {
            "contents" => req.messages = parse_contents(value)?,
            "systemInstruction" | "system_instruction" => {
                let content: WireContent<'_> = raw::parse("systemInstruction", value)?;
                req.system = content
                    .parts
                    .into_iter()
                    .filter_map(|p| p.text.map(Cow::into_owned))
                    .collect();
            }
            "tools" => req.tools = parse_tools(value)?,
            "toolConfig" | "tool_config" => req.tool_choice = parse_tool_config(value)?,
            "generationConfig" | "generation_config" => {
                generation_rest = parse_generation_config(value, &mut req)?;
            }
            _ => unknown.push((key, value)),
        }
    }
    req.extra = raw::extra_from(Dialect::Gemini, unknown);
    if let Some(rest) = generation_rest {
        req.extra.dialect = Some(Dialect::Gemini);
        req.extra.fields.push((GENERATION_CONFIG.to_owned(), rest));
    }
    Ok(req)
}

/// The extra field holding unmodelled `generationConfig` members.
pub(super) const GENERATION_CONFIG: &str = "generationConfig";

#[derive(Deserialize)]
pub(super) struct WireContent<'a> {
    #[serde(default, borrow)]
    pub(super) role: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(super) parts: Vec<WirePart<'a>>,
}

/// One part; which field is set says what it is.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WirePart<'a> {
    #[serde(default, borrow)]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) thought: Option<bool>,
    #[serde(default, borrow, alias = "thought_signature")]
    pub(super) thought_signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, alias = "inline_data")]
    inline_data: Option<WireBlob<'a>>,
    #[serde(default, borrow, alias = "file_data")]
    file_data: Option<WireFile<'a>>,
    #[serde(default, borrow, alias = "function_call")]
    pub(super) function_call: Option<WireFunctionCall<'a>>,
    #[serde(default, borrow, alias = "function_response")]
    function_response: Option<WireFunctionResponse<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireBlob<'a> {
    #[serde(borrow, alias = "mime_type")]
    mime_type: Cow<'a, str>,
    #[serde(borrow)]
    data: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireFile<'a> {
    #[serde(borrow, alias = "file_uri")]
    file_uri: Cow<'a, str>,
}

#[derive(Deserialize)]
pub(super) struct WireFunctionCall<'a> {
    #[serde(default, borrow)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub(super) name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireFunctionResponse<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
}

/// Calls made and not yet answered, to match answers without ids.
#[derive(Default)]
struct Pending {
    calls: Vec<(String, String)>,
    made: usize,
}

impl Pending {
    fn call_id(&mut self, id: Option<Cow<'_, str>>, name: &str, signed: Option<&str>) -> String {
        let mut id = id.map_or_else(|| format!("call_{}", self.made), Cow::into_owned);
        if let Some(signature) = signed {
            signature::embed(&mut id, signature);
        }
        self.made += 1;
        self.calls.push((name.to_owned(), id.clone()));
        id
    }

    fn answer_id(&mut self, id: Option<Cow<'_, str>>, name: &str) -> String {
        if let Some(id) = id {
            self.calls.retain(|(_, pending)| *pending != id);
            return id.into_owned();
        }
        match self.calls.iter().position(|(n, _)| n == name) {
            Some(i) => self.calls.remove(i).1,
            None => format!("call_{name}"),
        }
    }
}

fn parse_contents(raw: &RawValue) -> Result<Vec<Message>, TranslateError> {
    let contents: Vec<WireContent<'_>> = raw::parse("contents", raw)?;
    let mut messages = Vec::with_capacity(contents.len());
    let mut pending = Pending::default();
    for content in contents {
        let is_model = content.role.as_deref() == Some("model");
        let mut parts = Vec::new();
        let mut tool_calls = Vec::new();
        for part in content.parts {
            if let Some(call) = part.function_call {
                let signed = part.thought_signature.as_deref();
                let id = pending.call_id(call.id, &call.name, signed);
                tool_calls.push(ToolCall {
                    id,
                    name: call.name.into_owned(),
                    arguments: call
                        .args
                        .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
                });
            } else if let Some(answer) = part.function_response {
                let tool_call_id = pending.answer_id(answer.id, &answer.name);
                let (content, is_error) = response_text(answer.response);
                messages.push(Message::Tool(ToolResult {
                    tool_call_id,
                    content,
                    is_error,
                    cache: None,
                }));
            } else if let Some(part) = content_part(part) {
                parts.push(part);
            }
        }
        if is_model {
            if !parts.is_empty() || !tool_calls.is_empty() {
                messages.push(Message::Assistant {
                    content: parts,
                    tool_calls,
                });
            }
        } else if !parts.is_empty() {
            messages.push(Message::User { content: parts });
        }
    }
    Ok(messages)
}

/// A text, thought or image part.
fn content_part(part: WirePart<'_>) -> Option<Part> {
    if let Some(text) = part.text {
        if part.thought == Some(true) {
            let mut thought = serde_json::json!({"text": text, "thought": true});
            if let (Some(signature), Some(object)) =
                (part.thought_signature, thought.as_object_mut())
            {
                object.insert("thoughtSignature".into(), signature.into_owned().into());
            }
            let raw = RawJson::from_value(&thought);
            return Some(Part::Other {
                dialect: Dialect::Gemini,
                raw,
            });
        }
        return Some(Part::Text(text.into_owned()));
    }
    if let Some(blob) = part.inline_data {
        return Some(Part::Image(Image::Base64 {
            media_type: blob.mime_type.into_owned(),
            data: blob.data.into_owned(),
        }));
    }
    part.file_data
        .map(|file| Part::Image(Image::Url(file.file_uri.into_owned())))
}

#[derive(Deserialize)]
struct WireResponseObject<'a> {
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// A function response as tool-result text: `{"output": "s"}` is `s`, `{"error": "s"}` is a
/// failed `s`, any other object its JSON text.
fn response_text(response: Option<&RawValue>) -> (String, bool) {
    let Some(response) = response else {
        return (String::new(), false);
    };
    let whole = response.get().to_owned();
    let Ok(fields) = serde_json::from_str::<Fields<'_>>(response.get()) else {
        return (whole, false);
    };
    if fields.0.len() != 1 {
        return (whole, false);
    }
    let Ok(object) = serde_json::from_str::<WireResponseObject<'_>>(response.get()) else {
        return (whole, false);
    };
    let (value, is_error) = match (object.output, object.error) {
        (Some(output), None) => (output, false),
        (None, Some(error)) => (error, true),
        _ => return (whole, false),
    };
    match serde_json::from_str::<String>(value.get()) {
        Ok(text) => (text, is_error),
        Err(_) => (value.get().to_owned(), is_error),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTool<'a> {
    #[serde(default, borrow, alias = "function_declarations")]
    function_declarations: Vec<WireDeclaration<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDeclaration<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    parameters: Option<&'a RawValue>,
    #[serde(default, borrow, alias = "parameters_json_schema")]
    parameters_json_schema: Option<&'a RawValue>,
}

fn parse_tools(raw: &RawValue) -> Result<Vec<Tool>, TranslateError> {
    let tools: Vec<WireTool<'_>> = raw::parse("tools", raw)?;
    Ok(tools
        .into_iter()
        .flat_map(|t| t.function_declarations)
        .map(|d| Tool {
            name: d.name.into_owned(),
            description: d.description.map(Cow::into_owned),
            parameters: d
                .parameters_json_schema
                .or(d.parameters)
                .map(RawJson::from_raw),
            cache: None,
        })
        .collect())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    #[serde(default, borrow, alias = "function_calling_config")]
    function_calling_config: Option<WireCallingConfig<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCallingConfig<'a> {
    #[serde(default, borrow)]
    mode: Option<Cow<'a, str>>,
    #[serde(default, borrow, alias = "allowed_function_names")]
    allowed_function_names: Vec<Cow<'a, str>>,
}

fn parse_tool_config(raw: &RawValue) -> Result<Option<ToolChoice>, TranslateError> {
    let config: WireToolConfig<'_> = raw::parse("toolConfig", raw)?;
    let Some(calling) = config.function_calling_config else {
        return Ok(None);
    };
    let mut allowed = calling.allowed_function_names;
    Ok(Some(match calling.mode.as_deref() {
        Some("ANY") if allowed.len() == 1 => {
            ToolChoice::Tool(allowed.pop().map(Cow::into_owned).unwrap_or_default())
        }
        Some("ANY") => ToolChoice::Required,
        Some("NONE") => ToolChoice::None,
        _ => ToolChoice::Auto,
    }))
}

/// Reads the modelled `generationConfig` members into `req` and returns the others, as one
/// object, when there are any.
fn parse_generation_config(
    raw: &RawValue,
    req: &mut ChatRequest,
) -> Result<Option<RawJson>, TranslateError> {
    let Fields(fields) = raw::parse("generationConfig", raw)?;
    let (mut mime, mut schema) = (None::<String>, None);
    let mut rest = serde_json::Map::new();
    for (key, value) in fields {
        match key.as_ref() {
            "temperature" => req.temperature = raw::parse("temperature", value)?,
            "topP" | "top_p" => req.top_p = raw::parse("topP", value)?,
            "maxOutputTokens" | "max_output_tokens" => {
                req.max_tokens = raw::parse("maxOutputTokens", value)?;
            }
            "stopSequences" | "stop_sequences" => req.stop = raw::strings("stopSequences", value)?,
            "responseMimeType" | "response_mime_type" => {
                mime = raw::parse("responseMimeType", value)?;
            }
            "responseJsonSchema"
            | "response_json_schema"
            | "responseSchema"
            | "response_schema" => schema = Some(value),
            _ => {
                let value = raw::parse(&key, value)?;
                rest.insert(key.into_owned(), value);
            }
        }
    }
    req.response_format = match (mime.as_deref(), schema) {
        (Some("application/json"), Some(schema)) => Some(ResponseFormat::JsonSchema {
            name: "response".to_owned(),
            schema: RawJson::from_raw(schema),
            strict: None,
        }),
        (Some("application/json"), None) => Some(ResponseFormat::JsonObject),
        (Some("text/plain"), _) => Some(ResponseFormat::Text),
        _ => None,
    };
    Ok((!rest.is_empty()).then(|| RawJson::from_value(&serde_json::Value::Object(rest))))
}

#[cfg(test)]
mod tests;

//! Writing a canonical request as a Chat Completions body.

use std::borrow::Cow;

use serde::Serialize;

use crate::canonical::error::TranslateError;
use crate::canonical::raw::{self, ExtraFields};
use crate::canonical::types::ToolChoice;
use crate::canonical::types::{ChatRequest, Message, Part, RawJson, ResponseFormat, ToolCall};
use crate::canonical::Dialect;

/// Reasoning models take `max_completion_tokens` and reject `max_tokens`.
fn uses_max_completion_tokens(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"]
        .iter()
        .any(|prefix| model.starts_with(prefix))
}

/// Fields the writer sets itself, never copied from [`super::types::Extra`].
const WRITTEN: &[&str] = &["stream_options"];

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct OutRequest<'a> {
    model: &'a str,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<OutTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<OutToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<OutResponseFormat<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "is_false")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: OutContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutContent<'a> {
    Null,
    Text(&'a str),
    Parts(Vec<OutPart<'a>>),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutPart<'a> {
    Text {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    },
    Image {
        #[serde(rename = "type")]
        kind: &'static str,
        image_url: OutImageUrl<'a>,
    },
    Raw(&'a RawJson),
}

#[derive(Serialize)]
struct OutImageUrl<'a> {
    url: Cow<'a, str>,
}

#[derive(Serialize)]
pub(super) struct OutToolCall<'a> {
    pub(super) id: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) function: OutFunction<'a>,
}

#[derive(Serialize)]
pub(super) struct OutFunction<'a> {
    pub(super) name: &'a str,
    pub(super) arguments: &'a str,
}

pub(super) fn out_tool_call(call: &ToolCall) -> OutToolCall<'_> {
    OutToolCall {
        id: &call.id,
        kind: "function",
        function: OutFunction {
            name: &call.name,
            arguments: &call.arguments,
        },
    }
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutToolFunction<'a>,
}

#[derive(Serialize)]
struct OutToolFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a RawJson>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: OutChoiceName<'a>,
    },
}

#[derive(Serialize)]
struct OutChoiceName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutResponseFormat<'a> {
    Text,
    JsonObject,
    JsonSchema { json_schema: OutJsonSchema<'a> },
}

#[derive(Serialize)]
struct OutJsonSchema<'a> {
    name: &'a str,
    schema: &'a RawJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

/// Content parts as OpenAI content: one text part as a string, else an array. Cache
/// breakpoints are not written: OpenAI caches by prefix.
fn out_content(parts: &[Part]) -> OutContent<'_> {
    if let [Part::Text(text)] | [Part::Text(text), Part::CacheBreakpoint(_)] = parts {
        return OutContent::Text(text);
    }
    let out: Vec<OutPart<'_>> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(OutPart::Text { kind: "text", text }),
            Part::Image(image) => Some(OutPart::Image {
                kind: "image_url",
                image_url: OutImageUrl {
                    url: raw::image_to_url(image),
                },
            }),
            Part::Other { dialect, raw } => {
                (*dialect == Dialect::OpenAi).then_some(OutPart::Raw(raw))
            }
            Part::CacheBreakpoint(_) => None,
        })
        .collect();
    if out.is_empty() {
        OutContent::Null
    } else {
        OutContent::Parts(out)
    }
}

/// Writes `req` as a Chat Completions body for the upstream `model`.
pub fn write_request(req: &ChatRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
    let mut messages = Vec::with_capacity(req.system.len() + req.messages.len());
    messages.extend(req.system.iter().map(|text| OutMessage {
        role: "system",
        content: OutContent::Text(text),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }));
    for message in &req.messages {
        messages.push(match message {
            Message::User { content } => OutMessage {
                role: "user",
                content: match out_content(content) {
                    // Only parts of another dialect (an Anthropic block after tool results):
                    // no empty turn for OpenAI.
                    OutContent::Null if !content.is_empty() => continue,
                    OutContent::Null => OutContent::Text(""),
                    content => content,
                },
                tool_calls: Vec::new(),
                tool_call_id: None,
            },
            Message::Assistant {
                content,
                tool_calls,
            } => OutMessage {
                role: "assistant",
                content: out_content(content),
                tool_calls: tool_calls.iter().map(out_tool_call).collect(),
                tool_call_id: None,
            },
            Message::Tool(result) => OutMessage {
                role: "tool",
                content: OutContent::Text(&result.content),
                tool_calls: Vec::new(),
                tool_call_id: Some(&result.tool_call_id),
            },
        });
    }
    let completion_field = uses_max_completion_tokens(model);
    let out = OutRequest {
        model,
        messages,
        tools: req
            .tools
            .iter()
            .map(|t| OutTool {
                kind: "function",
                function: OutToolFunction {
                    name: &t.name,
                    description: t.description.as_deref(),
                    parameters: t.parameters.as_ref(),
                },
            })
            .collect(),
        tool_choice: req.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => OutToolChoice::Mode("auto"),
            ToolChoice::None => OutToolChoice::Mode("none"),
            ToolChoice::Required => OutToolChoice::Mode("required"),
            ToolChoice::Tool(name) => OutToolChoice::Named {
                kind: "function",
                function: OutChoiceName { name },
            },
        }),
        response_format: req.response_format.as_ref().map(|format| match format {
            ResponseFormat::Text => OutResponseFormat::Text,
            ResponseFormat::JsonObject => OutResponseFormat::JsonObject,
            ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => OutResponseFormat::JsonSchema {
                json_schema: OutJsonSchema {
                    name,
                    schema,
                    strict: *strict,
                },
            },
        }),
        stop: &req.stop,
        temperature: req.temperature,
        top_p: req.top_p,
        max_tokens: req.max_tokens.filter(|_| !completion_field),
        max_completion_tokens: req.max_tokens.filter(|_| completion_field),
        stream: req.stream,
        stream_options: req.stream.then_some(StreamOptions {
            include_usage: true,
        }),
        extra: ExtraFields {
            fields: req.extra.for_dialect(Dialect::OpenAi),
            skip: if req.stream { WRITTEN } else { &[] },
        },
    };
    Ok(serde_json::to_vec(&out)?)
}

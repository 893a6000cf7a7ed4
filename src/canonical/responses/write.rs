//! Writing a canonical request as a Responses body.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::WireTool;
use crate::canonical::error::TranslateError;
use crate::canonical::raw::{self, ExtraFields};
use crate::canonical::types::{
    ChatRequest, Message, Part, RawJson, ResponseFormat, Tool, ToolChoice,
};
use crate::canonical::Dialect;

/// Kept fields the writer merges into its own (`tools`, `text`), never copied as they are.
const MERGED: &[&str] = &["tools", "text"];
/// The same, when the canonical `tool_choice` is set (a kept raw one must not be written too).
const MERGED_AND_CHOICE: &[&str] = &["tools", "text", "tool_choice"];

/// The schema of a tool without one: no arguments.
const EMPTY_SCHEMA: &str = r#"{"type":"object","properties":{}}"#;

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct OutRequest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    input: Vec<OutItem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<OutTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<OutToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<OutText<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "is_false")]
    stream: bool,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

/// One `input` item.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutItem<'a> {
    Message {
        role: &'static str,
        content: OutContent<'a>,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: &'a str,
    },
    #[serde(untagged)]
    Raw(&'a RawJson),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutContent<'a> {
    Text(&'a str),
    Parts(Vec<OutPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutPart<'a> {
    InputText {
        text: &'a str,
    },
    InputImage {
        image_url: Cow<'a, str>,
    },
    OutputText {
        text: &'a str,
    },
    #[serde(untagged)]
    Raw(&'a RawJson),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutTool<'a> {
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        description: Option<&'a str>,
        parameters: &'a RawJson,
        #[serde(skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
    Raw(&'a RawValue),
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'a str,
    },
}

#[derive(Serialize)]
struct OutText<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<OutFormat<'a>>,
    #[serde(flatten)]
    rest: Rest<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutFormat<'a> {
    Text,
    JsonObject,
    JsonSchema {
        name: &'a str,
        schema: &'a RawJson,
        #[serde(skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// The kept members of `text`, minus `format` when the canonical one is written.
struct Rest<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
    skip_format: bool,
}

impl Serialize for Rest<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in &self.members {
            if !(self.skip_format && key == "format") {
                map.serialize_entry(key.as_ref(), value)?;
            }
        }
        map.end()
    }
}

/// A user message's content: one text part as a string, else parts. Cache breakpoints have
/// no place in this dialect.
fn user_content(parts: &[Part]) -> OutContent<'_> {
    if let [Part::Text(text)] | [Part::Text(text), Part::CacheBreakpoint(_)] = parts {
        return OutContent::Text(text);
    }
    let out: Vec<OutPart<'_>> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Text(text) => Some(OutPart::InputText { text }),
            Part::Image(image) => Some(OutPart::InputImage {
                image_url: raw::image_to_url(image),
            }),
            Part::Other { dialect, raw } => {
                (*dialect == Dialect::Responses).then_some(OutPart::Raw(raw))
            }
            Part::CacheBreakpoint(_) => None,
        })
        .collect();
    if out.is_empty() {
        OutContent::Text("")
    } else {
        OutContent::Parts(out)
    }
}

/// An assistant message as items, in order: runs of text as message items, kept items of
/// this dialect as they came, then the tool calls.
fn assistant_items<'a>(
    content: &'a [Part],
    calls: &'a [crate::canonical::ToolCall],
    out: &mut Vec<OutItem<'a>>,
) {
    let mut texts = Vec::new();
    let flush = |texts: &mut Vec<OutPart<'a>>, out: &mut Vec<OutItem<'a>>| {
        if !texts.is_empty() {
            out.push(OutItem::Message {
                role: "assistant",
                content: OutContent::Parts(std::mem::take(texts)),
            });
        }
    };
    for part in content {
        match part {
            Part::Text(text) if !text.is_empty() => texts.push(OutPart::OutputText { text }),
            Part::Other {
                dialect: Dialect::Responses,
                raw,
            } => {
                flush(&mut texts, out);
                out.push(OutItem::Raw(raw));
            }
            // Empty text; images and other dialects' parts have no place here.
            _ => {}
        }
    }
    flush(&mut texts, out);
    out.extend(calls.iter().map(|call| OutItem::FunctionCall {
        call_id: &call.id,
        name: &call.name,
        arguments: if call.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.arguments
        },
    }));
}

/// A function tool written from the canonical one.
fn function_tool<'a>(tool: &'a Tool, empty: &'a RawJson, strict: Option<bool>) -> OutTool<'a> {
    OutTool::Function {
        kind: "function",
        name: &tool.name,
        description: tool.description.as_deref(),
        parameters: tool.parameters.as_ref().unwrap_or(empty),
        strict,
    }
}

/// The tools to write: in the order of the kept `tools` array when there is one (built-in
/// tools as they came; a function tool as it came when the canonical one is unchanged, else
/// rewritten with its `strict`), then canonical tools it did not have, `strict: false`.
fn out_tools<'a>(
    tools: &'a [Tool],
    kept: Option<&'a RawJson>,
    empty: &'a RawJson,
) -> Result<Vec<OutTool<'a>>, TranslateError> {
    let mut used = vec![false; tools.len()];
    let mut out = Vec::with_capacity(tools.len());
    if let Some(kept) = kept {
        let raws: Vec<&RawValue> = serde_json::from_str(kept.get())?;
        for (index, raw) in raws.into_iter().enumerate() {
            let wire: WireTool<'_> = serde_json::from_str(raw.get())?;
            if !wire.is_function() {
                out.push(OutTool::Raw(raw));
                continue;
            }
            let name = wire.name.as_deref().unwrap_or_default();
            let Some(at) = (0..tools.len()).find(|&i| !used[i] && tools[i].name == name) else {
                continue; // dropped since it was parsed
            };
            used[at] = true;
            let unchanged = wire
                .to_canonical(index)
                .is_ok_and(|original| original == tools[at]);
            out.push(if unchanged {
                OutTool::Raw(raw)
            } else {
                function_tool(&tools[at], empty, wire.strict)
            });
        }
    }
    for (tool, used) in tools.iter().zip(used) {
        if !used {
            out.push(function_tool(tool, empty, Some(false)));
        }
    }
    Ok(out)
}

/// `text`: the canonical format and the kept members.
fn out_text<'a>(
    format: Option<&'a ResponseFormat>,
    kept: Option<&'a RawJson>,
) -> Result<Option<OutText<'a>>, TranslateError> {
    let format = format.map(|format| match format {
        ResponseFormat::Text => OutFormat::Text,
        ResponseFormat::JsonObject => OutFormat::JsonObject,
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => OutFormat::JsonSchema {
            name,
            schema,
            strict: *strict,
        },
    });
    let members = match kept {
        Some(kept) => raw::fields(kept.get().as_bytes())?.0,
        None => Vec::new(),
    };
    if format.is_none() && members.is_empty() {
        return Ok(None);
    }
    Ok(Some(OutText {
        rest: Rest {
            members,
            skip_format: format.is_some(),
        },
        format,
    }))
}

/// Writes `req` as a Responses body for `model`.
pub fn write_request(req: &ChatRequest, model: &str) -> Result<Vec<u8>, TranslateError> {
    let extra = req.extra.for_dialect(Dialect::Responses);
    let kept = |name: &str| extra.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut input = Vec::with_capacity(req.system.len() + req.messages.len());
    input.extend(req.system.iter().skip(1).map(|text| OutItem::Message {
        role: "developer",
        content: OutContent::Text(text),
    }));
    for message in &req.messages {
        match message {
            Message::User { content } => input.push(OutItem::Message {
                role: "user",
                content: user_content(content),
            }),
            Message::Assistant {
                content,
                tool_calls,
            } => assistant_items(content, tool_calls, &mut input),
            Message::Tool(result) => input.push(OutItem::FunctionCallOutput {
                call_id: &result.tool_call_id,
                output: &result.content,
            }),
        }
    }
    let empty_schema = RawJson::from_text(EMPTY_SCHEMA)?;
    let out = OutRequest {
        model,
        instructions: req.system.first().map(String::as_str),
        input,
        tools: out_tools(&req.tools, kept("tools"), &empty_schema)?,
        tool_choice: req.tool_choice.as_ref().map(|choice| match choice {
            ToolChoice::Auto => OutToolChoice::Mode("auto"),
            ToolChoice::None => OutToolChoice::Mode("none"),
            ToolChoice::Required => OutToolChoice::Mode("required"),
            ToolChoice::Tool(name) => OutToolChoice::Function {
                kind: "function",
                name,
            },
        }),
        text: out_text(req.response_format.as_ref(), kept("text"))?,
        max_output_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        extra: ExtraFields {
            fields: extra,
            skip: if req.tool_choice.is_some() {
                MERGED_AND_CHOICE
            } else {
                MERGED
            },
        },
    };
    Ok(serde_json::to_vec(&out)?)
}

//! Writing a canonical request as a generateContent body.

use std::collections::HashMap;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::json;

use super::signature::{self, Signature, SKIP_VALIDATOR};
use super::GENERATION_CONFIG;
use crate::canonical::error::TranslateError;
use crate::canonical::raw::{self, ExtraFields, Fields};
use crate::canonical::types::{ChatRequest, Image, Message, Part, RawJson, ResponseFormat};
use crate::canonical::types::{ToolChoice, ToolResult};
use crate::canonical::Dialect;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutRequest<'a> {
    contents: Vec<OutContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<OutSystem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<OutTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<OutToolConfig<'a>>,
    #[serde(skip_serializing_if = "OutGenerationConfig::is_empty")]
    generation_config: OutGenerationConfig<'a>,
    #[serde(flatten)]
    extra: ExtraFields<'a>,
}

#[derive(Serialize)]
pub(super) struct OutContent<'a> {
    pub(super) role: &'static str,
    pub(super) parts: Vec<OutPart<'a>>,
}

#[derive(Serialize)]
struct OutSystem<'a> {
    parts: Vec<OutPart<'a>>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum OutPart<'a> {
    Text {
        text: &'a str,
    },
    InlineData {
        #[serde(rename = "inlineData")]
        inline_data: OutBlob<'a>,
    },
    FileData {
        #[serde(rename = "fileData")]
        file_data: OutFile<'a>,
    },
    FunctionCall {
        #[serde(rename = "functionCall")]
        function_call: OutFunctionCall<'a>,
        #[serde(rename = "thoughtSignature", skip_serializing_if = "Option::is_none")]
        thought_signature: Option<Signature<'a>>,
    },
    FunctionResponse {
        #[serde(rename = "functionResponse")]
        function_response: OutFunctionResponse<'a>,
    },
    Raw(&'a RawJson),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutBlob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutFile<'a> {
    mime_type: &'a str,
    file_uri: &'a str,
}

#[derive(Serialize)]
pub(super) struct OutFunctionCall<'a> {
    pub(super) name: &'a str,
    pub(super) args: RawJson,
}

#[derive(Serialize)]
pub(super) struct OutFunctionResponse<'a> {
    name: &'a str,
    response: RawJson,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutTool<'a> {
    function_declarations: Vec<OutDeclaration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters_json_schema: Option<&'a RawJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutToolConfig<'a> {
    function_calling_config: OutCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct OutGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a RawJson>,
    #[serde(flatten)]
    rest: RawMembers<'a>,
}

impl OutGenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.temperature.is_none()
            && self.top_p.is_none()
            && self.max_output_tokens.is_none()
            && self.stop_sequences.is_empty()
            && self.response_mime_type.is_none()
            && self.rest.is_empty()
    }
}

/// The members of a raw JSON object, to flatten into another object.
#[derive(Default)]
struct RawMembers<'a>(Fields<'a>);

impl Serialize for RawMembers<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0 .0.len()))?;
        for (key, value) in &self.0 .0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl RawMembers<'_> {
    fn is_empty(&self) -> bool {
        self.0 .0.is_empty()
    }
}

/// A content part as a Gemini part, or nothing when Gemini has no place for it.
fn part(p: &Part) -> Option<OutPart<'_>> {
    match p {
        Part::Text(text) if text.is_empty() => None,
        Part::Text(text) => Some(OutPart::Text { text }),
        Part::Image(Image::Base64 { media_type, data }) => Some(OutPart::InlineData {
            inline_data: OutBlob {
                mime_type: media_type,
                data,
            },
        }),
        Part::Image(Image::Url(url)) => Some(OutPart::FileData {
            file_data: OutFile {
                mime_type: raw::media_type_of_url(url),
                file_uri: url,
            },
        }),
        Part::Other { dialect, raw } => (*dialect == Dialect::Gemini).then_some(OutPart::Raw(raw)),
        // Gemini caches by prefix without markers.
        Part::CacheBreakpoint(_) => None,
    }
}

/// A tool result as a `functionResponse.response` object.
fn response_object(result: &ToolResult) -> RawJson {
    let key = if result.is_error { "error" } else { "output" };
    let trimmed = result.content.trim();
    if trimmed.starts_with('{') {
        if let Ok(object) = RawJson::from_text(trimmed) {
            if !result.is_error {
                return object;
            }
            return RawJson::from_text(&format!(r#"{{"error":{}}}"#, object.get()))
                .unwrap_or(object);
        }
    }
    RawJson::from_value(&json!({ key: result.content }))
}

/// Appends a turn, merging it into the previous one when the role is the same.
fn push<'a>(contents: &mut Vec<OutContent<'a>>, role: &'static str, parts: Vec<OutPart<'a>>) {
    if parts.is_empty() {
        return;
    }
    match contents.last_mut() {
        Some(last) if last.role == role => last.parts.extend(parts),
        _ => contents.push(OutContent { role, parts }),
    }
}

/// Signs the unsigned steps of the current turn: the turn starts after the last `user` content
/// with something other than function responses in it (Gemini looks back for it the same
/// way), and the first function call of each `model` content after it must carry a signature.
/// One Gemini did not make (another vendor's, or one whose signature was not carried) gets
/// [`SKIP_VALIDATOR`]: Gemini 3 rejects the request otherwise (older models do not check; the
/// value is sent to them too, as the model name says nothing reliable: `gemini-flash-latest`).
fn sign_current_turn(contents: &mut [OutContent<'_>]) {
    let start = contents
        .iter()
        .rposition(|c| {
            c.role == "user"
                && c.parts
                    .iter()
                    .any(|p| !matches!(p, OutPart::FunctionResponse { .. }))
        })
        .map_or(0, |i| i + 1);
    for content in contents[start..].iter_mut().filter(|c| c.role == "model") {
        let first_call = content.parts.iter_mut().find_map(|p| match p {
            OutPart::FunctionCall {
                thought_signature, ..
            } => Some(thought_signature),
            _ => None,
        });
        if let Some(signature) = first_call {
            signature.get_or_insert(Signature::Plain(SKIP_VALIDATOR));
        }
    }
}

/// Writes `req` as a generateContent body (the model goes in the URL, which `provider::gemini` builds).
pub fn write_request(req: &ChatRequest, _model: &str) -> Result<Vec<u8>, TranslateError> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut contents = Vec::with_capacity(req.messages.len());
    for message in &req.messages {
        match message {
            Message::User { content } => {
                push(
                    &mut contents,
                    "user",
                    content.iter().filter_map(part).collect(),
                );
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut parts: Vec<OutPart<'_>> = content.iter().filter_map(part).collect();
                for call in tool_calls {
                    names.insert(&call.id, &call.name);
                    parts.push(OutPart::FunctionCall {
                        function_call: OutFunctionCall {
                            name: &call.name,
                            args: raw::arguments_object(&call.arguments),
                        },
                        thought_signature: signature::split(&call.id).1,
                    });
                }
                push(&mut contents, "model", parts);
            }
            Message::Tool(result) => {
                let name = names
                    .get(result.tool_call_id.as_str())
                    .copied()
                    .unwrap_or(&result.tool_call_id);
                let response = OutPart::FunctionResponse {
                    function_response: OutFunctionResponse {
                        name,
                        response: response_object(result),
                    },
                };
                push(&mut contents, "user", vec![response]);
            }
        }
    }
    sign_current_turn(&mut contents);
    let rest = match req
        .extra
        .for_dialect(Dialect::Gemini)
        .iter()
        .find(|(k, _)| k == GENERATION_CONFIG)
    {
        Some((_, raw)) => RawMembers(serde_json::from_str(raw.get())?),
        None => RawMembers::default(),
    };
    let (response_mime_type, response_json_schema) = match &req.response_format {
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(schema)),
        Some(ResponseFormat::Text) => (Some("text/plain"), None),
        None => (None, None),
    };
    let declarations: Vec<OutDeclaration<'_>> = req
        .tools
        .iter()
        .map(|t| OutDeclaration {
            name: &t.name,
            description: t.description.as_deref(),
            parameters_json_schema: t.parameters.as_ref(),
        })
        .collect();
    let out = OutRequest {
        contents,
        system_instruction: (!req.system.is_empty()).then(|| OutSystem {
            parts: req
                .system
                .iter()
                .map(|text| OutPart::Text { text })
                .collect(),
        }),
        tools: if declarations.is_empty() {
            Vec::new()
        } else {
            vec![OutTool {
                function_declarations: declarations,
            }]
        },
        tool_config: req.tool_choice.as_ref().map(|choice| {
            let (mode, allowed) = match choice {
                ToolChoice::Auto => ("AUTO", None),
                ToolChoice::None => ("NONE", None),
                ToolChoice::Required => ("ANY", None),
                ToolChoice::Tool(name) => ("ANY", Some([name.as_str()])),
            };
            OutToolConfig {
                function_calling_config: OutCallingConfig {
                    mode,
                    allowed_function_names: allowed,
                },
            }
        }),
        generation_config: OutGenerationConfig {
            temperature: req.temperature,
            top_p: req.top_p,
            max_output_tokens: req.max_tokens,
            stop_sequences: &req.stop,
            response_mime_type,
            response_json_schema,
            rest,
        },
        extra: ExtraFields {
            fields: req.extra.for_dialect(Dialect::Gemini),
            skip: &[GENERATION_CONFIG],
        },
    };
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tool_results_as_function_responses() {
        let ok = ToolResult {
            tool_call_id: "c".into(),
            content: "sunny".into(),
            is_error: false,
            cache: None,
        };
        assert_eq!(response_object(&ok).get(), r#"{"output":"sunny"}"#);
        let object = ToolResult {
            content: r#"{"t": 21}"#.into(),
            ..ok.clone()
        };
        assert_eq!(response_object(&object).get(), r#"{"t": 21}"#);
        let failed = ToolResult {
            is_error: true,
            cache: None,
            ..object
        };
        assert_eq!(response_object(&failed).get(), r#"{"error":{"t": 21}}"#);
    }
}

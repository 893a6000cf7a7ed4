//! Responses non-streamed answers (the `response` object) and the error envelope, which is
//! OpenAI's `{"error":{"message","type","param","code"}}`.
//!
//! The response object written here (and in every stream event that carries one) has the
//! members the official SDKs require (`id`, `object`, `created_at`, `model`, `output`,
//! `parallel_tool_calls`, `tool_choice`, `tools`) and the nullable ones the API always sends.
//! The gateway does not know the request's tools there: `tools` is `[]`, `tool_choice` `auto`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{WireItem, WirePart};
use crate::canonical::error::{ErrorClass, TranslateError, UpstreamError};
use crate::canonical::raw::{self, Shape};
use crate::canonical::types::{ChatResponse, FinishReason, ToolCall, Usage};

/// The `status` and `incomplete_details.reason` of a finish reason.
pub(super) fn status_of(reason: &FinishReason) -> (&'static str, Option<&str>) {
    match reason {
        FinishReason::Stop | FinishReason::ToolCalls => ("completed", None),
        FinishReason::Length => ("incomplete", Some("max_output_tokens")),
        FinishReason::ContentFilter => ("incomplete", Some("content_filter")),
        FinishReason::Error(other) => ("incomplete", Some(other)),
    }
}

/// The finish reason of a response's `status`, incomplete reason and function calls.
pub(super) fn finish_of(status: Option<&str>, reason: Option<&str>, calls: bool) -> FinishReason {
    match (status, reason) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        (Some("incomplete"), other) => {
            FinishReason::Error(other.unwrap_or("incomplete").to_owned())
        }
        (Some("failed"), _) => FinishReason::Error("failed".to_owned()),
        _ if calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) input_tokens: u64,
    #[serde(default)]
    pub(super) output_tokens: u64,
    #[serde(default)]
    pub(super) input_tokens_details: Option<InputDetails>,
}

/// What `input_tokens` holds: `cached_tokens` is OpenAI's; `cache_write_tokens` is Azure AI
/// Foundry's name for a cache write, and the gateway's for Anthropic's cache creation count.
#[derive(Deserialize, Serialize, Default)]
pub(super) struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        let details = u.input_tokens_details.unwrap_or_default();
        Usage {
            input: u.input_tokens,
            output: u.output_tokens,
            cache_read: details.cached_tokens,
            cache_write: details.cache_write_tokens,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct WireIncomplete<'a> {
    #[serde(default, borrow)]
    pub(super) reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    created_at: Option<f64>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    output: Vec<WireItem<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default, borrow)]
    incomplete_details: Option<WireIncomplete<'a>>,
}

/// The text of a message item's `output_text` (and `refusal`) parts, appended to `out`.
pub(super) fn push_message_text(content: Option<&RawValue>, out: &mut String) {
    let Some(content) = content.filter(|c| raw::shape(c) == Shape::Array) else {
        return;
    };
    let Ok(parts) = serde_json::from_str::<Vec<WirePart<'_>>>(content.get()) else {
        return;
    };
    for part in parts {
        match part.kind.as_deref() {
            Some("output_text") => out.push_str(part.text.as_deref().unwrap_or_default()),
            Some("refusal") => out.push_str(part.refusal.as_deref().unwrap_or_default()),
            _ => {}
        }
    }
}

/// A function call item's arguments (a JSON text in a string).
pub(super) fn arguments_of(item: &WireItem<'_>) -> String {
    item.arguments
        .and_then(|a| serde_json::from_str::<String>(a.get()).ok())
        .unwrap_or_default()
}

/// Parses a `response` object. Only messages and function calls are read from `output`
/// (reasoning and built-in tool items have no place in a canonical answer).
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for item in wire.output {
        match item.kind.as_deref() {
            Some("message") => push_message_text(item.content, &mut text),
            Some("function_call") => tool_calls.push(ToolCall {
                arguments: arguments_of(&item),
                id: item.call_id.map(Cow::into_owned).unwrap_or_default(),
                name: item.name.map(Cow::into_owned).unwrap_or_default(),
            }),
            _ => {}
        }
    }
    let reason = wire.incomplete_details.and_then(|d| d.reason);
    Ok(ChatResponse {
        id: wire.id.map(Cow::into_owned).unwrap_or_default(),
        model: wire.model.map(Cow::into_owned).unwrap_or_default(),
        created: wire
            .created_at
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| t as u64),
        finish_reason: finish_of(
            wire.status.as_deref(),
            reason.as_deref(),
            !tool_calls.is_empty(),
        ),
        text,
        tool_calls,
        usage: wire.usage.map(Usage::from),
    })
}

/// The response object: what `write_response` writes, and what stream events carry.
#[derive(Serialize)]
pub(super) struct OutResponse<'a, O: Serialize> {
    pub(super) id: &'a str,
    pub(super) object: &'static str,
    pub(super) created_at: u64,
    pub(super) status: &'a str,
    pub(super) error: Option<OutFailure<'a>>,
    pub(super) incomplete_details: Option<OutIncomplete<'a>>,
    pub(super) instructions: Option<()>,
    pub(super) max_output_tokens: Option<()>,
    pub(super) model: &'a str,
    pub(super) output: O,
    pub(super) parallel_tool_calls: bool,
    pub(super) previous_response_id: Option<()>,
    pub(super) temperature: Option<()>,
    pub(super) tool_choice: &'static str,
    pub(super) tools: [(); 0],
    pub(super) top_p: Option<()>,
    pub(super) usage: Option<OutUsage>,
    pub(super) metadata: Empty,
}

impl<'a, O: Serialize> OutResponse<'a, O> {
    /// A response object with the defaults the gateway writes.
    pub(super) fn new(
        id: &'a str,
        created_at: u64,
        model: &'a str,
        status: &'a str,
        output: O,
    ) -> Self {
        OutResponse {
            id,
            object: "response",
            created_at,
            status,
            error: None,
            incomplete_details: None,
            instructions: None,
            max_output_tokens: None,
            model,
            output,
            parallel_tool_calls: true,
            previous_response_id: None,
            temperature: None,
            tool_choice: "auto",
            tools: [],
            top_p: None,
            usage: None,
            metadata: Empty {},
        }
    }
}

/// `{}`.
#[derive(Serialize)]
pub(super) struct Empty {}

#[derive(Serialize)]
pub(super) struct OutIncomplete<'a> {
    pub(super) reason: &'a str,
}

/// A failed response's `error`.
#[derive(Serialize)]
pub(super) struct OutFailure<'a> {
    pub(super) code: &'static str,
    pub(super) message: &'a str,
}

/// The details are not optional in this dialect (the SDKs' types require them).
#[derive(Serialize)]
pub(super) struct OutUsage {
    input_tokens: u64,
    input_tokens_details: InputDetails,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl From<Usage> for OutUsage {
    fn from(u: Usage) -> Self {
        OutUsage {
            input_tokens: u.input,
            input_tokens_details: InputDetails {
                cached_tokens: u.cache_read,
                cache_write_tokens: u.cache_write,
            },
            output_tokens: u.output,
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: 0,
            },
            total_tokens: u.input.saturating_add(u.output),
        }
    }
}

/// One output item.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum OutItem<'a> {
    Message {
        id: &'a str,
        status: &'a str,
        role: &'static str,
        content: &'a [OutText<'a>],
    },
    FunctionCall {
        id: &'a str,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
        status: &'a str,
    },
}

/// An `output_text` content part.
#[derive(Serialize)]
pub(super) struct OutText<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) text: &'a str,
    pub(super) annotations: [(); 0],
    pub(super) logprobs: [(); 0],
}

impl<'a> OutText<'a> {
    /// An `output_text` part of `text`.
    pub(super) fn new(text: &'a str) -> Self {
        OutText {
            kind: "output_text",
            text,
            annotations: [],
            logprobs: [],
        }
    }
}

/// An output item's id: `prefix` and the response id's own part (without `resp_`), numbered
/// by the item's position, so ids are the same each time a response is written.
pub(super) fn item_id(prefix: &str, response_id: &str, output_index: u32) -> String {
    let base = response_id.strip_prefix("resp_").unwrap_or(response_id);
    if base.is_empty() {
        format!("{prefix}_{output_index}")
    } else {
        format!("{prefix}_{base}_{output_index}")
    }
}

/// Writes a `response` object.
pub fn write_response(resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let (status, reason) = status_of(&resp.finish_reason);
    let item_status = if status == "completed" {
        "completed"
    } else {
        "incomplete"
    };
    let text = [OutText::new(&resp.text)];
    // A message item when there is text, or when there is nothing else to answer with.
    let text_item = !resp.text.is_empty() || resp.tool_calls.is_empty();
    let message_id = item_id("msg", &resp.id, 0);
    let first_call = u32::from(text_item);
    let call_ids: Vec<String> = (first_call..)
        .zip(&resp.tool_calls)
        .map(|(index, _)| item_id("fc", &resp.id, index))
        .collect();
    let mut output = Vec::with_capacity(1 + resp.tool_calls.len());
    if text_item {
        output.push(OutItem::Message {
            id: &message_id,
            status: item_status,
            role: "assistant",
            content: &text,
        });
    }
    for (call, id) in resp.tool_calls.iter().zip(&call_ids) {
        output.push(OutItem::FunctionCall {
            id,
            call_id: &call.id,
            name: &call.name,
            arguments: &call.arguments,
            status: "completed",
        });
    }
    let mut out = OutResponse::new(
        &resp.id,
        resp.created.unwrap_or_else(raw::now_unix),
        &resp.model,
        status,
        output,
    );
    out.incomplete_details = reason.map(|reason| OutIncomplete { reason });
    out.usage = resp.usage.map(OutUsage::from);
    Ok(serde_json::to_vec(&out)?)
}

/// Reads an error body: OpenAI's envelope (and what compatible servers send instead), then
/// the codes the Responses API adds: `invalid_prompt` (a prompt its safety system flagged) is
/// a refusal, and a `server_error` inside a stream (status 0, so nothing else to decide by)
/// is the provider failing, which another target may not.
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    let mut error = crate::canonical::openai::parse_error(status, body);
    match (error.code.as_deref(), error.class) {
        (Some("invalid_prompt"), _) => error.class = ErrorClass::ContentFilter,
        (Some("server_error"), ErrorClass::Other) if status == 0 => {
            error.class = ErrorClass::Overloaded;
        }
        _ => {}
    }
    error
}

/// The code of a failed response's `error` for an error of `class`.
pub(super) fn failure_code(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::ContextLength => "context_length_exceeded",
        ErrorClass::ContentFilter => "invalid_prompt",
        ErrorClass::RateLimited => "rate_limit_exceeded",
        ErrorClass::Auth => "invalid_api_key",
        ErrorClass::Overloaded | ErrorClass::Other => "server_error",
    }
}

/// Writes `err` as OpenAI's error envelope.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    crate::canonical::openai::write_error(err)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn parses_a_response_with_reasoning_text_and_calls() {
        let body = br#"{"id":"resp_1","object":"response","created_at":1741476542,"status":"completed","model":"gpt-5",
            "output":[
                {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"hm"}]},
                {"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
                {"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"ls\"]}","status":"completed"}
            ],
            "usage":{"input_tokens":30,"input_tokens_details":{"cached_tokens":10},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":8},"total_tokens":50},
            "incomplete_details":null,"error":null,"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}"#;
        let resp = parse_response(body).unwrap();
        assert_eq!(
            resp,
            ChatResponse {
                id: "resp_1".into(),
                model: "gpt-5".into(),
                created: Some(1_741_476_542),
                text: "Checking.".into(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "shell".into(),
                    arguments: r#"{"command":["ls"]}"#.into(),
                }],
                finish_reason: FinishReason::ToolCalls,
                usage: Some(Usage {
                    cache_read: 10,
                    ..Usage::new(30, 20)
                }),
            }
        );
    }

    #[test]
    fn incomplete_responses_finish_by_their_reason() {
        let incomplete = |reason: &str| {
            let body = format!(
                r#"{{"id":"r","model":"m","status":"incomplete","incomplete_details":{{"reason":"{reason}"}},"output":[{{"type":"message","content":[{{"type":"refusal","refusal":"No."}}]}}]}}"#
            );
            parse_response(body.as_bytes()).unwrap()
        };
        assert_eq!(
            incomplete("max_output_tokens").finish_reason,
            FinishReason::Length
        );
        let filtered = incomplete("content_filter");
        assert_eq!(filtered.finish_reason, FinishReason::ContentFilter);
        assert_eq!(filtered.text, "No.");
        assert_eq!(
            incomplete("other").finish_reason,
            FinishReason::Error("other".into())
        );
        assert!(parse_response(br#"{"id":"r"}"#).is_err());
    }

    #[test]
    fn writes_what_the_sdk_requires_and_reads_it_back() {
        let resp = ChatResponse {
            id: "resp_abc".into(),
            model: "gpt-5".into(),
            created: Some(7),
            text: "Hi".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "f".into(),
                arguments: "{}".into(),
            }],
            finish_reason: FinishReason::ToolCalls,
            usage: Some(Usage::new(3, 4)),
        };
        let body = write_response(&resp).unwrap();
        let out: Value = serde_json::from_slice(&body).unwrap();
        for key in [
            "id",
            "object",
            "created_at",
            "status",
            "model",
            "output",
            "parallel_tool_calls",
            "tool_choice",
            "tools",
            "error",
            "incomplete_details",
            "usage",
        ] {
            assert!(out.get(key).is_some(), "missing {key}: {out}");
        }
        assert_eq!(out["object"], "response");
        assert_eq!(out["status"], "completed");
        assert_eq!(
            out["output"],
            json!([
                {"type": "message", "id": "msg_abc_0", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}]},
                {"type": "function_call", "id": "fc_abc_1", "call_id": "call_1", "name": "f", "arguments": "{}", "status": "completed"}
            ])
        );
        assert_eq!(
            out["usage"],
            json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7})
        );
        assert_eq!(parse_response(&body).unwrap(), resp);
        let cut = ChatResponse {
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Length,
            ..resp
        };
        let out: Value = serde_json::from_slice(&write_response(&cut).unwrap()).unwrap();
        assert_eq!(out["status"], "incomplete");
        assert_eq!(out["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(out["output"][0]["status"], "incomplete");
    }

    #[test]
    fn classifies_errors() {
        let ctx = br#"{"error":{"message":"Your input exceeds the context window of this model.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#;
        assert_eq!(parse_error(400, ctx).class, ErrorClass::ContextLength);
        let rate = br#"{"error":{"message":"Rate limit reached. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(parse_error(429, rate).class, ErrorClass::RateLimited);
        let flagged = br#"{"error":{"message":"Invalid prompt: flagged","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}"#;
        assert_eq!(parse_error(400, flagged).class, ErrorClass::ContentFilter);
        let server = br#"{"error":{"message":"An error occurred","type":"server_error","param":null,"code":"server_error"}}"#;
        assert_eq!(parse_error(500, server).class, ErrorClass::Other);
        assert_eq!(parse_error(0, server).class, ErrorClass::Overloaded);
        assert_eq!(
            parse_error(503, b"upstream down").class,
            ErrorClass::Overloaded
        );
        let written = write_error(&UpstreamError::new(
            400,
            ErrorClass::ContextLength,
            "too long",
        ));
        let back = parse_error(400, &written);
        assert_eq!(
            (back.class, back.code.as_deref(), back.message.as_str()),
            (
                ErrorClass::ContextLength,
                Some("context_length_exceeded"),
                "too long"
            )
        );
    }
}

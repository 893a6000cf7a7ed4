//! OpenAI non-streamed responses and the error envelope.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::write::{out_tool_call, OutToolCall};
use super::WireToolCall;
use crate::canonical::error::{ErrorClass, TranslateError, UpstreamError};
use crate::canonical::raw::{self, Shape};
use crate::canonical::types::{ChatResponse, FinishReason, Usage};

/// A finish reason from its OpenAI word.
pub(super) fn finish_from(word: &str) -> FinishReason {
    match word {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Error(other.to_owned()),
    }
}

/// The OpenAI word for a finish reason.
pub(super) fn finish_word(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Error(other) => other,
    }
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) prompt_tokens: u64,
    #[serde(default)]
    pub(super) completion_tokens: u64,
    /// `null` from some compatible servers.
    #[serde(default)]
    pub(super) prompt_tokens_details: Option<PromptDetails>,
}

/// What `prompt_tokens` holds. `cached_tokens` is OpenAI's; `cache_write_tokens` is the name
/// OpenRouter gives a cache write in this shape, and the gateway's for Anthropic's cache
/// creation count when it writes this dialect.
#[derive(Deserialize, Serialize, Default)]
pub(super) struct PromptDetails {
    #[serde(default)]
    pub(super) cached_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(super) cache_write_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        let details = u.prompt_tokens_details.unwrap_or_default();
        Usage {
            input: u.prompt_tokens,
            output: u.completion_tokens,
            cache_read: details.cached_tokens,
            cache_write: details.cache_write_tokens,
        }
    }
}

/// Written with `prompt_tokens_details` only when a cache count is known: a translated answer
/// does not claim "nothing cached" for a provider that did not say.
#[derive(Serialize)]
pub(super) struct OutUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<PromptDetails>,
}

impl From<Usage> for OutUsage {
    fn from(u: Usage) -> Self {
        OutUsage {
            prompt_tokens: u.input,
            completion_tokens: u.output,
            total_tokens: u.input.saturating_add(u.output),
            prompt_tokens_details: (u.cache_read > 0 || u.cache_write > 0).then_some(
                PromptDetails {
                    cached_tokens: u.cache_read,
                    cache_write_tokens: u.cache_write,
                },
            ),
        }
    }
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    created: Option<u64>,
    #[serde(borrow)]
    choices: Vec<WireChoice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow)]
    message: WireMessage<'a>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireToolCall<'a>>>,
}

/// Parses a `chat.completion` body (its first choice).
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)?;
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err(TranslateError::invalid("a completion without choices"));
    };
    let message = choice.message;
    Ok(ChatResponse {
        id: wire.id.map(Cow::into_owned).unwrap_or_default(),
        model: wire.model.map(Cow::into_owned).unwrap_or_default(),
        created: wire.created,
        text: message
            .content
            .or(message.refusal)
            .map(Cow::into_owned)
            .unwrap_or_default(),
        tool_calls: message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(WireToolCall::into_canonical)
            .collect(),
        finish_reason: choice
            .finish_reason
            .as_deref()
            .map_or(FinishReason::Stop, finish_from),
        usage: wire.usage.map(Usage::from),
    })
}

#[derive(Serialize)]
struct OutResponse<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [OutChoice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<OutUsage>,
}

#[derive(Serialize)]
struct OutChoice<'a> {
    index: u32,
    message: OutMessage<'a>,
    finish_reason: &'a str,
    logprobs: Option<()>,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutToolCall<'a>>,
}

/// Writes a `chat.completion` body.
pub fn write_response(resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let content = if resp.text.is_empty() && !resp.tool_calls.is_empty() {
        None
    } else {
        Some(resp.text.as_str())
    };
    let out = OutResponse {
        id: &resp.id,
        object: "chat.completion",
        created: resp.created.unwrap_or_else(raw::now_unix),
        model: &resp.model,
        choices: [OutChoice {
            index: 0,
            message: OutMessage {
                role: "assistant",
                content,
                tool_calls: resp.tool_calls.iter().map(out_tool_call).collect(),
            },
            finish_reason: finish_word(&resp.finish_reason),
            logprobs: None,
        }],
        usage: resp.usage.map(OutUsage::from),
    };
    Ok(serde_json::to_vec(&out)?)
}

#[derive(Deserialize)]
struct WireErrorBody<'a> {
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct WireError<'a> {
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    code: Option<&'a RawValue>,
}

/// A code that may be a string or a number.
fn code_text(raw: &RawValue) -> Option<String> {
    match raw::shape(raw) {
        Shape::Null => None,
        Shape::String => serde_json::from_str(raw.get()).ok(),
        _ => Some(raw.get().to_owned()),
    }
}

/// Reads OpenAI's `{"error":{"message","type","code"}}`, and what compatible servers send
/// instead (a bare string `error`; `message`/`type`/`code` at the top, as older vLLM does);
/// anything else is classified by status.
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    let Ok(envelope) = serde_json::from_slice::<WireErrorBody<'_>>(body) else {
        return UpstreamError::unparsed(status, body);
    };
    let wire = match envelope.error {
        Some(error) if raw::shape(error) == Shape::String => {
            let message: String = serde_json::from_str(error.get()).unwrap_or_default();
            let class = classify(status, None, None, &message);
            return UpstreamError::new(status, class, message);
        }
        Some(error) => serde_json::from_str::<WireError<'_>>(error.get()),
        None => serde_json::from_slice::<WireError<'_>>(body),
    };
    match wire {
        Ok(wire) if wire.message.is_some() => from_wire(status, wire),
        _ => UpstreamError::unparsed(status, body),
    }
}

/// An error object (from an error body or an in-band stream event).
pub(super) fn from_wire(status: u16, wire: WireError<'_>) -> UpstreamError {
    let message = wire.message.map(Cow::into_owned).unwrap_or_default();
    let code = wire.code.and_then(code_text);
    let kind = wire.kind.map(Cow::into_owned);
    UpstreamError {
        status,
        class: classify(status, kind.as_deref(), code.as_deref(), &message),
        kind,
        code,
        message,
        retry_delay: None,
    }
}

/// What servers say when a prompt does not fit: OpenAI without a code and vLLM ("This model's
/// maximum context length is 4096 tokens. However, you requested ..."), llama.cpp ("the
/// request exceeds the available context size"), Ollama and LM Studio ("... exceeds the context
/// length").
fn is_context_length_message(message: &str) -> bool {
    [
        "maximum context length",
        "context size",
        "exceeds the context length",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// OpenAI has codes for the cases that matter; compatible servers (vLLM, llama.cpp and the
/// like) often send only the message, which is read for the context-length case.
fn classify(status: u16, kind: Option<&str>, code: Option<&str>, message: &str) -> ErrorClass {
    match code {
        Some("context_length_exceeded" | "string_above_max_length") => {
            return ErrorClass::ContextLength
        }
        Some("content_filter" | "content_policy_violation") => return ErrorClass::ContentFilter,
        Some("invalid_api_key") => return ErrorClass::Auth,
        Some("rate_limit_exceeded" | "insufficient_quota") => return ErrorClass::RateLimited,
        _ => {}
    }
    if is_context_length_message(message) {
        return ErrorClass::ContextLength;
    }
    match kind {
        Some("exceed_context_size_error") => ErrorClass::ContextLength,
        Some("overloaded_error" | "server_overloaded") => ErrorClass::Overloaded,
        Some("rate_limit_error" | "requests" | "tokens") => ErrorClass::RateLimited,
        _ => ErrorClass::from_status(status),
    }
}

#[derive(Serialize)]
struct OutErrorBody<'a> {
    error: OutError<'a>,
}

#[derive(Serialize)]
pub(super) struct OutError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<()>,
    code: Option<&'a str>,
}

/// The OpenAI error object for `err`: type and code from its class.
pub(super) fn out_error(err: &UpstreamError) -> OutError<'_> {
    let (kind, code) = match err.class {
        ErrorClass::ContextLength => ("invalid_request_error", Some("context_length_exceeded")),
        ErrorClass::ContentFilter => ("invalid_request_error", Some("content_filter")),
        ErrorClass::RateLimited => ("requests", Some("rate_limit_exceeded")),
        ErrorClass::Overloaded => ("server_error", Some("overloaded")),
        ErrorClass::Auth => ("invalid_request_error", Some("invalid_api_key")),
        ErrorClass::Other if (400..500).contains(&err.status) => ("invalid_request_error", None),
        ErrorClass::Other => ("server_error", None),
    };
    OutError {
        message: &err.message,
        kind,
        param: None,
        code: err.code.as_deref().or(code),
    }
}

/// Writes `err` as OpenAI's error envelope.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    serde_json::to_vec(&OutErrorBody {
        error: out_error(err),
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn classifies_errors() {
        let ctx = br#"{"error":{"message":"This model's maximum context length is 10 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        let e = parse_error(400, ctx);
        assert_eq!(e.class, ErrorClass::ContextLength);
        assert_eq!(e.code.as_deref(), Some("context_length_exceeded"));
        let vllm = br#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","code":400}"#;
        assert_eq!(parse_error(400, vllm).class, ErrorClass::ContextLength);
        let filter = br#"{"error":{"message":"filtered","type":null,"code":"content_filter"}}"#;
        assert_eq!(parse_error(400, filter).class, ErrorClass::ContentFilter);
        let rate = br#"{"error":{"message":"slow down","type":"requests","code":429}}"#;
        let e = parse_error(429, rate);
        assert_eq!(
            (e.class, e.code.as_deref()),
            (ErrorClass::RateLimited, Some("429"))
        );
        let bare = br#"{"error":"This model's maximum context length is 4096 tokens"}"#;
        assert_eq!(parse_error(400, bare).class, ErrorClass::ContextLength);
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert_eq!(parse_error(400, llama).class, ErrorClass::ContextLength);
        let ollama = br#"{"error":{"message":"the input length exceeds the context length","type":"api_error"}}"#;
        assert_eq!(parse_error(400, ollama).class, ErrorClass::ContextLength);
        let plain = br#"{"error":{"message":"messages[0].role is invalid","type":"invalid_request_error"}}"#;
        assert_eq!(parse_error(400, plain).class, ErrorClass::Other);
        assert_eq!(parse_error(502, b"Bad Gateway").class, ErrorClass::Other);
        assert_eq!(parse_error(401, b"{}").class, ErrorClass::Auth);
    }

    #[test]
    fn writes_errors_by_class() {
        let e = UpstreamError::new(529, ErrorClass::Overloaded, "busy");
        let body: serde_json::Value = serde_json::from_slice(&write_error(&e)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {"message": "busy", "type": "server_error", "param": null, "code": "overloaded"}})
        );
    }
}

//! Anthropic non-streamed responses (`type: message`) and the error envelope.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::write::OutBlock;
use super::WireBlock;
use crate::canonical::error::{ErrorClass, TranslateError, UpstreamError};
use crate::canonical::raw;
use crate::canonical::types::{ChatResponse, FinishReason, ToolCall, Usage};

/// A finish reason from Anthropic's `stop_reason`.
pub(super) fn finish_from(word: &str) -> FinishReason {
    match word {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Error(other.to_owned()),
    }
}

/// Anthropic's `stop_reason` for a finish reason.
pub(super) fn finish_word(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
        FinishReason::Error(other) => other,
    }
}

/// Anthropic's token counts. `input_tokens` leaves out what the prompt cache read and wrote;
/// `cache_creation` splits the write by time to live (its sum is `cache_creation_input_tokens`,
/// read only when that total is missing). Every field is optional: a stream's `message_delta`
/// carries only what changed.
#[derive(Deserialize, Default)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) output_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_creation: Option<WireCacheCreation>,
}

#[derive(Deserialize, Default)]
pub(super) struct WireCacheCreation {
    #[serde(default)]
    ephemeral_5m_input_tokens: u64,
    #[serde(default)]
    ephemeral_1h_input_tokens: u64,
}

impl WireUsage {
    /// Tokens written to the cache: the total, else the sum of its parts.
    pub(super) fn cache_write(&self) -> Option<u64> {
        self.cache_creation_input_tokens.or_else(|| {
            self.cache_creation.as_ref().map(|c| {
                c.ephemeral_5m_input_tokens
                    .saturating_add(c.ephemeral_1h_input_tokens)
            })
        })
    }

    /// The canonical counts: every input token, cached ones included.
    pub(super) fn to_usage(&self) -> Usage {
        let cache_read = self.cache_read_input_tokens.unwrap_or(0);
        let cache_write = self.cache_write().unwrap_or(0);
        Usage {
            input: self
                .input_tokens
                .unwrap_or(0)
                .saturating_add(cache_read)
                .saturating_add(cache_write),
            output: self.output_tokens.unwrap_or(0),
            cache_read,
            cache_write,
        }
    }
}

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Vec<WireBlock<'a>>,
    #[serde(default, borrow)]
    stop_reason: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// Parses a `message` body.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in wire.content {
        match block.kind.as_ref() {
            "text" => text.push_str(block.text.as_deref().unwrap_or_default()),
            "tool_use" => tool_calls.push(ToolCall {
                id: block.id.map(Cow::into_owned).unwrap_or_default(),
                name: block.name.map(Cow::into_owned).unwrap_or_default(),
                arguments: block
                    .input
                    .map_or_else(|| "{}".to_owned(), |i| i.get().to_owned()),
            }),
            _ => {}
        }
    }
    Ok(ChatResponse {
        id: wire.id.map(Cow::into_owned).unwrap_or_default(),
        model: wire.model.map(Cow::into_owned).unwrap_or_default(),
        created: None,
        text,
        tool_calls,
        finish_reason: wire
            .stop_reason
            .as_deref()
            .map_or(FinishReason::Stop, finish_from),
        usage: wire.usage.as_ref().map(WireUsage::to_usage),
    })
}

#[derive(Serialize)]
struct OutResponse<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<OutBlock<'a>>,
    stop_reason: &'a str,
    stop_sequence: Option<()>,
    usage: OutUsage,
}

/// Cache counts are written only when known (as the OpenAI writer does): 0 says "none".
#[derive(Serialize)]
pub(super) struct OutUsage {
    pub(super) input_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cache_creation_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) cache_read_input_tokens: Option<u64>,
    pub(super) output_tokens: u64,
}

impl From<Usage> for OutUsage {
    /// `input_tokens` without the cached tokens, as Anthropic counts it.
    fn from(u: Usage) -> Self {
        let cached = u.cache_read > 0 || u.cache_write > 0;
        OutUsage {
            input_tokens: u.uncached_input(),
            cache_creation_input_tokens: cached.then_some(u.cache_write),
            cache_read_input_tokens: cached.then_some(u.cache_read),
            output_tokens: u.output,
        }
    }
}

/// Writes a `message` body.
pub fn write_response(resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let mut content = Vec::with_capacity(1 + resp.tool_calls.len());
    if !resp.text.is_empty() {
        content.push(OutBlock::text(&resp.text));
    }
    content.extend(resp.tool_calls.iter().map(|call| OutBlock::ToolUse {
        id: &call.id,
        name: &call.name,
        input: raw::arguments_object(&call.arguments),
    }));
    let usage = resp.usage.unwrap_or_default();
    let out = OutResponse {
        id: &resp.id,
        kind: "message",
        role: "assistant",
        model: &resp.model,
        content,
        stop_reason: finish_word(&resp.finish_reason),
        stop_sequence: None,
        usage: OutUsage::from(usage),
    };
    Ok(serde_json::to_vec(&out)?)
}

#[derive(Deserialize)]
struct WireErrorBody<'a> {
    #[serde(borrow)]
    error: WireError<'a>,
}

#[derive(Deserialize)]
pub(super) struct WireError<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

/// Reads `{"type":"error","error":{"type","message"}}`; anything else is classified by status.
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    match serde_json::from_slice::<WireErrorBody<'_>>(body) {
        Ok(wire) => from_wire(status, wire.error),
        Err(_) => UpstreamError::unparsed(status, body),
    }
}

/// An error object, from a body or an `event: error` in a stream.
pub(super) fn from_wire(status: u16, wire: WireError<'_>) -> UpstreamError {
    let message = wire.message.map(Cow::into_owned).unwrap_or_default();
    let kind = wire.kind.map(Cow::into_owned);
    UpstreamError {
        status,
        class: classify(status, kind.as_deref(), &message),
        kind,
        code: None,
        message,
        retry_delay: None,
    }
}

/// Anthropic's error types say everything but the context-length case, an
/// `invalid_request_error` whose message reads "prompt is too long: N tokens > M maximum" (or
/// names the context limit).
fn classify(status: u16, kind: Option<&str>, message: &str) -> ErrorClass {
    match kind {
        Some("overloaded_error") => ErrorClass::Overloaded,
        Some("rate_limit_error") => ErrorClass::RateLimited,
        Some("authentication_error" | "permission_error") => ErrorClass::Auth,
        Some("invalid_request_error" | "request_too_large")
            if message.contains("prompt is too long")
                || message.contains("context limit")
                // Bedrock's words for the same.
                || message.contains("Input is too long") =>
        {
            ErrorClass::ContextLength
        }
        _ => ErrorClass::from_status(status),
    }
}

/// Anthropic's error `type` for an error.
pub(super) fn error_type(err: &UpstreamError) -> &'static str {
    match err.class {
        ErrorClass::Overloaded => "overloaded_error",
        ErrorClass::RateLimited => "rate_limit_error",
        ErrorClass::Auth if err.status == 403 => "permission_error",
        ErrorClass::Auth => "authentication_error",
        ErrorClass::ContextLength | ErrorClass::ContentFilter => "invalid_request_error",
        ErrorClass::Other => match err.status {
            404 => "not_found_error",
            413 => "request_too_large",
            s if (400..500).contains(&s) => "invalid_request_error",
            _ => "api_error",
        },
    }
}

#[derive(Serialize)]
pub(super) struct OutErrorBody<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) error: OutError<'a>,
}

#[derive(Serialize)]
pub(super) struct OutError<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) message: &'a str,
}

/// Writes `err` as Anthropic's error envelope.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    serde_json::to_vec(&OutErrorBody {
        kind: "error",
        error: OutError {
            kind: error_type(err),
            message: &err.message,
        },
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn classifies_errors() {
        let overloaded =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(parse_error(529, overloaded).class, ErrorClass::Overloaded);
        let long = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208746 tokens > 200000 maximum"}}"#;
        let e = parse_error(400, long);
        assert_eq!(e.class, ErrorClass::ContextLength);
        assert_eq!(e.kind.as_deref(), Some("invalid_request_error"));
        let bad = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: field required"}}"#;
        assert_eq!(parse_error(400, bad).class, ErrorClass::Other);
        assert_eq!(parse_error(429, b"oops").class, ErrorClass::RateLimited);
    }

    #[test]
    fn writes_errors() {
        let e = UpstreamError::new(404, ErrorClass::Other, "no such model");
        assert_eq!(
            String::from_utf8(write_error(&e)).unwrap(),
            r#"{"type":"error","error":{"type":"not_found_error","message":"no such model"}}"#
        );
    }
}

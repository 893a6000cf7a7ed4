//! Gemini `GenerateContentResponse` bodies (whole, or one stream chunk) and the error envelope.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::write::{OutContent, OutFunctionCall, OutPart};
use super::{WireContent, WireFunctionCall};
use crate::canonical::error::{ErrorClass, TranslateError, UpstreamError};
use crate::canonical::raw;
use crate::canonical::types::{ChatResponse, FinishReason, ToolCall, Usage};

/// A finish reason from Gemini's `finishReason`; `STOP` with function calls is `ToolCalls`.
pub(super) fn finish_from(word: &str, called: bool) -> FinishReason {
    match word {
        "STOP" if called => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" => FinishReason::ContentFilter,
        other => FinishReason::Error(other.to_owned()),
    }
}

/// Gemini's `finishReason` for a finish reason (tool calls end with `STOP`).
pub(super) fn finish_word(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop | FinishReason::ToolCalls => "STOP",
        FinishReason::Length => "MAX_TOKENS",
        FinishReason::ContentFilter => "SAFETY",
        FinishReason::Error(word)
            if !word.is_empty() && word.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') =>
        {
            word
        }
        FinishReason::Error(_) => "OTHER",
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireResponse<'a> {
    #[serde(default, borrow)]
    pub(super) candidates: Vec<WireCandidate<'a>>,
    #[serde(default, alias = "usage_metadata")]
    pub(super) usage_metadata: Option<WireUsage>,
    #[serde(default, borrow, alias = "model_version")]
    pub(super) model_version: Option<Cow<'a, str>>,
    #[serde(default, borrow, alias = "response_id")]
    pub(super) response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow, alias = "prompt_feedback")]
    pub(super) prompt_feedback: Option<WireFeedback<'a>>,
    #[serde(default, borrow)]
    pub(super) error: Option<WireError<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireCandidate<'a> {
    #[serde(default, borrow)]
    pub(super) content: Option<WireContent<'a>>,
    #[serde(default, borrow, alias = "finish_reason")]
    pub(super) finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireFeedback<'a> {
    #[serde(default, borrow, alias = "block_reason")]
    pub(super) block_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WireUsage {
    #[serde(default, alias = "prompt_token_count")]
    prompt_token_count: u64,
    #[serde(default, alias = "candidates_token_count")]
    candidates_token_count: u64,
    /// Thinking tokens are billed as output.
    #[serde(default, alias = "thoughts_token_count")]
    thoughts_token_count: u64,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input: u.prompt_token_count,
            output: u
                .candidates_token_count
                .saturating_add(u.thoughts_token_count),
        }
    }
}

/// Makes ids for function calls that have none: `call_<responseId>_<n>`, or a random stem when
/// the response has no id, so ids do not repeat across a conversation.
#[derive(Debug, Clone, Default)]
pub(super) struct CallIds {
    stem: String,
}

impl CallIds {
    pub(super) fn new(response_id: Option<&str>) -> Self {
        let id: String = response_id
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .take(40)
            .collect();
        let stem = if id.is_empty() {
            format!("call_{:016x}", fastrand::u64(..))
        } else {
            format!("call_{id}")
        };
        CallIds { stem }
    }

    pub(super) fn call(&self, call: WireFunctionCall<'_>, n: u32) -> ToolCall {
        ToolCall {
            id: call
                .id
                .map_or_else(|| format!("{}_{n}", self.stem), Cow::into_owned),
            name: call.name.into_owned(),
            arguments: call
                .args
                .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
        }
    }
}

/// Parses a `GenerateContentResponse` (its first candidate). A prompt blocked by a safety
/// filter (no candidates, a `blockReason`) is an empty answer finished by `ContentFilter`.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)?;
    let ids = CallIds::new(wire.response_id.as_deref());
    let blocked = wire.prompt_feedback.and_then(|f| f.block_reason).is_some();
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut finish = None;
    if let Some(candidate) = wire.candidates.into_iter().next() {
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(call) = part.function_call {
                let n = u32::try_from(tool_calls.len()).unwrap_or(u32::MAX);
                tool_calls.push(ids.call(call, n));
            } else if let (Some(t), false) = (part.text, part.thought == Some(true)) {
                text.push_str(&t);
            }
        }
        finish = candidate.finish_reason;
    }
    let finish_reason = match finish {
        Some(word) => finish_from(&word, !tool_calls.is_empty()),
        None if blocked => FinishReason::ContentFilter,
        None if !tool_calls.is_empty() => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    };
    Ok(ChatResponse {
        id: wire.response_id.map(Cow::into_owned).unwrap_or_default(),
        model: wire.model_version.map(Cow::into_owned).unwrap_or_default(),
        created: None,
        text,
        tool_calls,
        finish_reason,
        usage: wire.usage_metadata.map(Usage::from),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutResponse<'a> {
    pub(super) candidates: [OutCandidate<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) usage_metadata: Option<OutUsage>,
    pub(super) model_version: &'a str,
    pub(super) response_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutCandidate<'a> {
    pub(super) content: OutContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) finish_reason: Option<&'a str>,
    pub(super) index: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutUsage {
    prompt_token_count: u64,
    candidates_token_count: u64,
    total_token_count: u64,
}

impl From<Usage> for OutUsage {
    fn from(u: Usage) -> Self {
        OutUsage {
            prompt_token_count: u.input,
            candidates_token_count: u.output,
            total_token_count: u.input.saturating_add(u.output),
        }
    }
}

/// A function call part.
pub(super) fn call_part(call: &ToolCall) -> OutPart<'_> {
    OutPart::FunctionCall {
        function_call: OutFunctionCall {
            name: &call.name,
            args: raw::arguments_object(&call.arguments),
        },
    }
}

/// Writes a `GenerateContentResponse`.
pub fn write_response(resp: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let mut parts = Vec::with_capacity(1 + resp.tool_calls.len());
    if !resp.text.is_empty() || resp.tool_calls.is_empty() {
        parts.push(OutPart::Text { text: &resp.text });
    }
    parts.extend(resp.tool_calls.iter().map(call_part));
    let out = OutResponse {
        candidates: [OutCandidate {
            content: OutContent {
                role: "model",
                parts,
            },
            finish_reason: Some(finish_word(&resp.finish_reason)),
            index: 0,
        }],
        usage_metadata: resp.usage.map(OutUsage::from),
        model_version: &resp.model,
        response_id: &resp.id,
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
    #[serde(default)]
    code: Option<u16>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    details: Vec<WireDetail<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDetail<'a> {
    #[serde(default, borrow)]
    reason: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    retry_delay: Option<Cow<'a, str>>,
}

/// Reads `{"error":{"code","message","status","details"}}` (also wrapped in an array, as a
/// non-SSE stream sends it); anything else is classified by status.
pub fn parse_error(status: u16, body: &[u8]) -> UpstreamError {
    let parsed = if body.trim_ascii_start().starts_with(b"[") {
        serde_json::from_slice::<Vec<WireErrorBody<'_>>>(body)
            .ok()
            .and_then(|v| v.into_iter().next())
    } else {
        serde_json::from_slice::<WireErrorBody<'_>>(body).ok()
    };
    match parsed {
        Some(wire) => from_wire(status, wire.error),
        None => UpstreamError::unparsed(status, body),
    }
}

/// An error object, from a body or a stream chunk.
pub(super) fn from_wire(status: u16, wire: WireError<'_>) -> UpstreamError {
    let message = wire.message.map(Cow::into_owned).unwrap_or_default();
    let http = if status == 0 {
        wire.code.unwrap_or(0)
    } else {
        status
    };
    let bad_key = wire
        .details
        .iter()
        .any(|d| d.reason.as_deref() == Some("API_KEY_INVALID"));
    let retry_delay = wire
        .details
        .iter()
        .find_map(|d| d.retry_delay.as_deref().and_then(parse_delay));
    let kind = wire.status.map(Cow::into_owned);
    let class = match kind.as_deref() {
        _ if bad_key => ErrorClass::Auth,
        Some("RESOURCE_EXHAUSTED") => ErrorClass::RateLimited,
        Some("UNAVAILABLE") => ErrorClass::Overloaded,
        Some("UNAUTHENTICATED" | "PERMISSION_DENIED") => ErrorClass::Auth,
        // "The input token count (N) exceeds the maximum number of tokens allowed (M)."
        Some("INVALID_ARGUMENT")
            if message.contains("token count") && message.contains("exceeds") =>
        {
            ErrorClass::ContextLength
        }
        _ => ErrorClass::from_status(http),
    };
    UpstreamError {
        status,
        class,
        kind,
        code: wire.code.map(|c| c.to_string()),
        message,
        retry_delay,
    }
}

/// `"22s"`, `"8.94s"`.
fn parse_delay(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// Gemini's HTTP code and status word for an error.
pub(super) fn status_of(err: &UpstreamError) -> (u16, &'static str) {
    match err.class {
        ErrorClass::RateLimited => (429, "RESOURCE_EXHAUSTED"),
        ErrorClass::Overloaded => (503, "UNAVAILABLE"),
        ErrorClass::Auth => (403, "PERMISSION_DENIED"),
        ErrorClass::ContextLength | ErrorClass::ContentFilter => (400, "INVALID_ARGUMENT"),
        ErrorClass::Other => match err.status {
            400 => (400, "INVALID_ARGUMENT"),
            404 => (404, "NOT_FOUND"),
            504 => (504, "DEADLINE_EXCEEDED"),
            s @ 401..=499 => (s, "FAILED_PRECONDITION"),
            s @ 501..=599 => (s, "INTERNAL"),
            _ => (500, "INTERNAL"),
        },
    }
}

#[derive(Serialize)]
pub(super) struct OutErrorBody<'a> {
    pub(super) error: OutError<'a>,
}

#[derive(Serialize)]
pub(super) struct OutError<'a> {
    pub(super) code: u16,
    pub(super) message: &'a str,
    pub(super) status: &'a str,
}

/// The error object written for `err`.
pub(super) fn out_error(err: &UpstreamError) -> OutErrorBody<'_> {
    let (code, status) = status_of(err);
    OutErrorBody {
        error: OutError {
            code: if err.status == 0 { code } else { err.status },
            message: &err.message,
            status,
        },
    }
}

/// Writes `err` as Gemini's error envelope.
pub fn write_error(err: &UpstreamError) -> Vec<u8> {
    serde_json::to_vec(&out_error(err)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn classifies_errors() {
        let quota = br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}"#;
        let e = parse_error(429, quota);
        assert_eq!(e.class, ErrorClass::RateLimited);
        assert_eq!(e.retry_delay, Some(Duration::from_secs(22)));
        let long = br#"[{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]"#;
        assert_eq!(parse_error(400, long).class, ErrorClass::ContextLength);
        let key = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#;
        assert_eq!(parse_error(400, key).class, ErrorClass::Auth);
        let busy = br#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#;
        assert_eq!(parse_error(503, busy).class, ErrorClass::Overloaded);
    }

    #[test]
    fn finish_words() {
        assert_eq!(finish_word(&FinishReason::Error("error".into())), "OTHER");
        assert_eq!(
            finish_word(&FinishReason::Error("MALFORMED_FUNCTION_CALL".into())),
            "MALFORMED_FUNCTION_CALL"
        );
        assert_eq!(finish_from("STOP", true), FinishReason::ToolCalls);
        assert_eq!(
            finish_from("RECITATION", false),
            FinishReason::ContentFilter
        );
    }
}

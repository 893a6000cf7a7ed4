//! Gemini `GenerateContentResponse` bodies (whole, or one stream chunk) and the error envelope.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::error::WireError;
use super::signature;
use super::write::{OutContent, OutFunctionCall, OutPart};
use super::{WireContent, WireFunctionCall};
use crate::canonical::error::TranslateError;
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
    /// Of `promptTokenCount` (which counts them), the tokens read from a cache: implicit
    /// caching or an explicit `cachedContent`.
    #[serde(default, alias = "cached_content_token_count")]
    cached_content_token_count: u64,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Usage {
            input: u.prompt_token_count,
            output: u
                .candidates_token_count
                .saturating_add(u.thoughts_token_count),
            cache_read: u.cached_content_token_count,
            // Gemini reports no cache writes (an explicit cache is made by its own call).
            cache_write: 0,
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

    /// The call numbered `n` of an answer, its `thoughtSignature` (when it has one) carried in
    /// its id.
    pub(super) fn call(
        &self,
        call: WireFunctionCall<'_>,
        n: u32,
        signed: Option<&str>,
    ) -> ToolCall {
        let mut id = call
            .id
            .map_or_else(|| format!("{}_{n}", self.stem), Cow::into_owned);
        if let Some(signature) = signed {
            signature::embed(&mut id, signature);
        }
        ToolCall {
            id,
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
                tool_calls.push(ids.call(call, n, part.thought_signature.as_deref()));
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
    /// Written when known; a cache write has no place in Gemini's counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_content_token_count: Option<u64>,
}

impl From<Usage> for OutUsage {
    fn from(u: Usage) -> Self {
        OutUsage {
            prompt_token_count: u.input,
            candidates_token_count: u.output,
            total_token_count: u.input.saturating_add(u.output),
            cached_content_token_count: (u.cache_read > 0).then_some(u.cache_read),
        }
    }
}

/// A function call part, with the signature its id carries.
pub(super) fn call_part(call: &ToolCall) -> OutPart<'_> {
    OutPart::FunctionCall {
        function_call: OutFunctionCall {
            name: &call.name,
            args: raw::arguments_object(&call.arguments),
        },
        thought_signature: signature::split(&call.id).1,
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

#[cfg(test)]
mod tests {
    use super::*;

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

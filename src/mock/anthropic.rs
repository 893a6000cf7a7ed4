//! The Anthropic Messages wire format: `POST /v1/messages`.
//!
//! Same order as the OpenAI dialect: record and count; plan and random draw; latency (plus
//! tail); stall; injected status (Anthropic's error envelope; the plan's `error_code`, when set,
//! is the error `type`); `anthropic-version` header; `x-api-key` (`expect_api_key`); body checks
//! (`model`, `max_tokens`, `messages`); context length ("prompt is too long"); prefill (a
//! trailing assistant message, which may not end in whitespace, as Anthropic requires); answer
//! (led by a signed thinking block when the request turns `thinking` on).
//! Streams play through the shared fault plan; `inband_error_after` sends `event: error` with an
//! `overloaded_error`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::plan::{Draw, FaultPlan};
use super::state::MockState;
use super::text::{canonical_text, continuation};
use super::RecordedRequest;
use render::{Answer, Reply};

mod render;

/// The wire endpoints of this dialect.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
}

/// `POST /v1/messages/count_tokens`: the estimate its messages answer reports as usage; the
/// plan's injected errors apply as to messages.
async fn count_tokens(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    let parsed = serde_json::from_slice::<Value>(&body).unwrap_or_default();
    let model = parsed.get("model").and_then(Value::as_str);
    let (mut guard, plan, draw) = state.arrive(model).await;
    guard.complete();
    if plan.status.is_some() && draw.error {
        return state.named(Rejection::injected(&plan).into_response());
    }
    let messages = parsed
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let tokens = estimate_tokens(parsed.get("system"), messages);
    state.named(axum::Json(serde_json::json!({ "input_tokens": tokens })).into_response())
}

async fn messages(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    let parsed = serde_json::from_slice::<Value>(&body);
    let response = match answer(&state, &headers, parsed, true).await {
        Ok(response) => response,
        Err(rejection) => rejection.into_response(),
    };
    state.named(response)
}

/// The answer to a Messages request (whole, or a stream of Anthropic's SSE events), or the
/// error the plan or the request calls for. `own_api`: Anthropic's own API, which requires the
/// `anthropic-version` header and checks `x-api-key` (Bedrock has the version in the body and
/// checks its own credentials).
pub(super) async fn answer(
    state: &MockState,
    headers: &HeaderMap,
    parsed: Result<Value, serde_json::Error>,
    own_api: bool,
) -> Result<Response, Rejection> {
    let model = parsed
        .as_ref()
        .ok()
        .and_then(|b| b.get("model"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    // From here on, the guard counts the request cancelled if this future is dropped.
    let (mut guard, plan, draw) = state.arrive(model.as_deref()).await;
    let reply = Reply {
        id: guard.seq() + 1,
        model: model.unwrap_or_default(),
    };
    match decide(&plan, draw, headers, parsed, own_api) {
        Err(rejection) => {
            guard.complete();
            Err(rejection)
        }
        Ok(answer) if answer.stream => {
            let script = render::script(&reply, &answer).with_error_body(&plan, Some("error"));
            Ok(super::stream::response(script, &plan, guard))
        }
        Ok(answer) => Ok(super::whole(
            &plan,
            guard,
            render::message(&reply, &answer),
            "{\"id\": \"msg_mock\", \"content\": [ this is not json",
        )),
    }
}

/// An error answer in Anthropic's envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rejection {
    pub(super) status: StatusCode,
    pub(super) kind: String,
    pub(super) message: String,
    pub(super) retry_after: Option<u64>,
    /// The plan's `error_body`, sent instead of the envelope.
    pub(super) body: Option<Box<str>>,
}

impl Rejection {
    fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> Self {
        Rejection {
            status,
            kind: kind.to_owned(),
            message: message.into(),
            retry_after: None,
            body: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Rejection::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// The error a plan injects: its status, Anthropic's type for it (or `error_code`) and
    /// `Retry-After`, or its `error_body` as it is.
    fn injected(plan: &FaultPlan) -> Self {
        let status = plan.injected_status();
        let kind = match status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ if status.is_client_error() => "invalid_request_error",
            _ => "api_error",
        };
        let reason = status.canonical_reason().unwrap_or("Overloaded");
        Rejection {
            kind: plan.error_code.clone().unwrap_or_else(|| kind.to_owned()),
            retry_after: plan.retry_after,
            body: plan.error_body.as_deref().map(Box::from),
            ..Rejection::new(
                status,
                kind,
                format!("{reason} (injected by the mock's fault plan)"),
            )
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        if let Some(body) = self.body {
            return super::raw_error(self.status, body.into(), self.retry_after);
        }
        let body = json!({
            "type": "error",
            "error": {"type": self.kind, "message": self.message},
        });
        let mut response = (self.status, Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Everything before the answer: the errors the plan or the request call for, in order.
fn decide(
    plan: &FaultPlan,
    draw: Draw,
    headers: &HeaderMap,
    body: Result<Value, serde_json::Error>,
    own_api: bool,
) -> Result<Answer, Rejection> {
    if plan.status.is_some() && draw.error {
        return Err(Rejection::injected(plan));
    }
    if own_api && !headers.contains_key("anthropic-version") {
        return Err(Rejection::bad_request(
            "anthropic-version: header is required",
        ));
    }
    if let Some(key) = plan.expect_api_key.as_ref().filter(|_| own_api) {
        let given = headers.get("x-api-key").map(HeaderValue::as_bytes);
        if given != Some(key.as_bytes()) {
            let message = "invalid x-api-key";
            return Err(Rejection::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                message,
            ));
        }
    }
    let body = body.map_err(|e| Rejection::bad_request(format!("invalid JSON body: {e}")))?;
    for field in ["model", "max_tokens"] {
        if body.get(field).is_none_or(Value::is_null) {
            return Err(Rejection::bad_request(format!("{field}: Field required")));
        }
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Err(Rejection::bad_request("messages: Field required"));
    };
    let prompt_tokens = estimate_tokens(body.get("system"), messages);
    if let Some(max) = plan.max_context_tokens {
        if prompt_tokens > u64::from(max) {
            let message = format!("prompt is too long: {prompt_tokens} tokens > {max} maximum");
            return Err(Rejection::bad_request(message));
        }
    }
    let prefill = prefill(messages);
    if let Some(prefill) = &prefill {
        if plan.reject_prefill {
            return Err(Rejection::bad_request("assistant prefill is not supported"));
        }
        if prefill.ends_with(char::is_whitespace) {
            return Err(Rejection::bad_request(
                "messages: final assistant content cannot end with trailing whitespace",
            ));
        }
    }
    let text = canonical_text(plan.words, plan.variant);
    let text = match prefill {
        Some(prefill) => continuation(&text, &prefill).to_owned(),
        None => text,
    };
    let thinking = matches!(
        body.pointer("/thinking/type").and_then(Value::as_str),
        Some("enabled" | "adaptive")
    );
    Ok(Answer {
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        prompt_tokens,
        cache_read: plan.cache_read_tokens,
        cache_write: plan.cache_write_tokens,
        text,
        // A tool loop: once the tool's result is in, the answer is text.
        tool_call: plan.tool_call && !ends_with_tool_result(messages),
        thinking: thinking.then_some(messages.len()),
    })
}

/// Whether the last message is the user's with a `tool_result` block in it.
fn ends_with_tool_result(messages: &[Value]) -> bool {
    messages.last().is_some_and(|m| {
        m.get("role").and_then(Value::as_str) == Some("user")
            && m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|blocks| {
                    blocks
                        .iter()
                        .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                })
    })
}

/// The text of message content: a string, or the `text` of its blocks.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Prompt tokens: the characters of the system prompt and of every text block, divided by 4
/// and rounded up, as the OpenAI dialect counts.
fn estimate_tokens(system: Option<&Value>, messages: &[Value]) -> u64 {
    let chars: usize = std::iter::once(content_text(system))
        .chain(messages.iter().map(|m| content_text(m.get("content"))))
        .map(|text| text.chars().count())
        .sum();
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// The prefill: the text of the last message when it is the assistant's.
fn prefill(messages: &[Value]) -> Option<String> {
    let last = messages.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    Some(content_text(last.get("content")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_system_and_blocks() {
        let messages = [
            json!({"role": "user", "content": "abcd"}),
            json!({"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image"}]}),
        ];
        assert_eq!(estimate_tokens(Some(&json!("abcd")), &messages), 3);
        assert_eq!(estimate_tokens(None, &[]), 0);
    }

    #[test]
    fn a_tool_loop_ends_with_the_tools_result() {
        let ask = json!({"role": "user", "content": "weather?"});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "sunny"}]});
        assert!(ends_with_tool_result(&[ask.clone(), result]));
        assert!(!ends_with_tool_result(&[ask]));
    }

    #[test]
    fn finds_the_prefill() {
        let user = json!({"role": "user", "content": "hi"});
        let blocks = json!({"role": "assistant", "content": [{"type": "text", "text": "alpha-1"}]});
        assert_eq!(prefill(&[user.clone(), blocks]).as_deref(), Some("alpha-1"));
        assert_eq!(prefill(&[user]), None);
    }

    #[test]
    fn injected_errors_use_anthropic_types() {
        let plan = FaultPlan {
            status: Some(529),
            retry_after: Some(3),
            ..FaultPlan::default()
        };
        let rejection = Rejection::injected(&plan);
        assert_eq!(rejection.kind, "overloaded_error");
        let response = rejection.into_response();
        assert_eq!(response.status().as_u16(), 529);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let custom = FaultPlan {
            status: Some(400),
            error_code: Some("refusal".into()),
            ..FaultPlan::default()
        };
        assert_eq!(Rejection::injected(&custom).kind, "refusal");
        let raw = FaultPlan {
            status: Some(400),
            error_body: Some("prompt too long".into()),
            ..FaultPlan::default()
        };
        assert_eq!(
            Rejection::injected(&raw).body.as_deref(),
            Some("prompt too long")
        );
    }
}

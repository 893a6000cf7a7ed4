//! The OpenAI Chat Completions and Azure OpenAI wire format.
//!
//! `POST /v1/chat/completions` and
//! `POST /openai/deployments/{deployment}/chat/completions?api-version=...` take the same JSON; the
//! model echoed is the request's `model` for OpenAI and the deployment name for Azure. A request
//! goes through, in order: record and count; plan and random draw; latency (plus tail); stall;
//! injected status; Azure `api-version`; API key; body checks; context length; prefill; answer.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;

use super::plan::{Draw, FaultPlan};
use super::state::MockState;
use super::text::{canonical_text, continuation};
use super::RecordedRequest;
use error::Rejection;
use render::{Answer, Reply};

pub(super) mod error;
mod render;

pub(crate) use error::error;

/// The wire endpoints of this dialect.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/v1/chat/completions", post(openai_chat))
        .route(
            "/openai/deployments/{deployment}/chat/completions",
            post(azure_chat),
        )
}

/// Which flavour of the format a request came in.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Flavour {
    OpenAi,
    Azure { deployment: String },
}

async fn openai_chat(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(&state, Flavour::OpenAi, &method, &uri, &headers, &body).await
}

async fn azure_chat(
    State(state): State<Arc<MockState>>,
    Path(deployment): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    chat(
        &state,
        Flavour::Azure { deployment },
        &method,
        &uri,
        &headers,
        &body,
    )
    .await
}

async fn chat(
    state: &MockState,
    flavour: Flavour,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    state.record(RecordedRequest::capture(method, uri, headers, body));
    let parsed = serde_json::from_slice::<Value>(body);
    let model = match &flavour {
        Flavour::Azure { deployment } => Some(deployment.clone()),
        Flavour::OpenAi => parsed
            .as_ref()
            .ok()
            .and_then(|b| b.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    // From here on, the guard counts the request cancelled if this future is dropped.
    let (mut guard, plan, draw) = state.arrive(model.as_deref()).await;
    let reply = Reply {
        id: guard.seq() + 1,
        created: unix_now(),
        model: model.unwrap_or_default(),
    };
    let response = match decide(&plan, draw, &flavour, uri, headers, parsed) {
        Err(rejection) => {
            guard.complete();
            rejection.into_response()
        }
        Ok(request) if request.stream => {
            let script = render::script(&reply, &request).with_error_body(&plan, None);
            super::stream::response(script, &plan, guard)
        }
        Ok(request) => super::whole(
            &plan,
            guard,
            render::completion(&reply, &request),
            "{\"id\": \"chatcmpl-mock\", \"choices\": [ this is not json",
        ),
    };
    state.named(response)
}

/// Everything before the answer: the errors the plan or the request call for, in order.
fn decide(
    plan: &FaultPlan,
    draw: Draw,
    flavour: &Flavour,
    uri: &Uri,
    headers: &HeaderMap,
    body: Result<Value, serde_json::Error>,
) -> Result<Answer, Rejection> {
    if plan.status.is_some() && draw.error {
        return Err(Rejection::injected(plan));
    }
    if matches!(flavour, Flavour::Azure { .. }) && !has_api_version(uri) {
        let message = "Resource not found: the api-version query parameter is missing";
        return Err(Rejection::not_found(message));
    }
    if let Some(key) = &plan.expect_api_key {
        if !authorized(flavour, headers, key) {
            return Err(Rejection::invalid_api_key());
        }
    }
    let body = body.map_err(|e| {
        let message = format!("We could not parse the JSON body of your request: {e}");
        Rejection::bad_request(message, None, None)
    })?;
    if *flavour == Flavour::OpenAi && body.get("model").and_then(Value::as_str).is_none() {
        let message = "you must provide a model parameter";
        return Err(Rejection::bad_request(message, None, Some("model")));
    }
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        let message = "'messages' is a required property";
        return Err(Rejection::bad_request(message, None, Some("messages")));
    };
    let prompt_tokens = estimate_tokens(messages);
    if let Some(max) = plan.max_context_tokens {
        if prompt_tokens > u64::from(max) {
            return Err(Rejection::context_length(max, prompt_tokens));
        }
    }
    let prefill = prefill(messages);
    if prefill.is_some() && plan.reject_prefill {
        let message = "assistant prefill is not supported";
        let code = Some("prefill_unsupported");
        return Err(Rejection::bad_request(message, code, Some("messages")));
    }
    let text = canonical_text(plan.words, plan.variant);
    let text = match prefill {
        Some(prefill) => continuation(&text, prefill).to_owned(),
        None => text,
    };
    Ok(Answer {
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_usage: body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        prompt_tokens,
        cache_read: plan.cache_read_tokens,
        text,
        // A tool loop: once the tool's result is in, the answer is text.
        tool_call: plan.tool_call
            && messages
                .last()
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str)
                != Some("tool"),
    })
}

fn has_api_version(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.starts_with("api-version=") && pair.len() > 12)
    })
}

fn authorized(flavour: &Flavour, headers: &HeaderMap, key: &str) -> bool {
    let (name, expected) = match flavour {
        Flavour::OpenAi => (header::AUTHORIZATION.as_str(), format!("Bearer {key}")),
        Flavour::Azure { .. } => ("api-key", key.to_owned()),
    };
    headers
        .get(name)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes())
}

/// Prompt tokens, estimated as all message text characters / 4, rounded up. Content may be a
/// string or a list of parts; only text parts count.
fn estimate_tokens(messages: &[Value]) -> u64 {
    let chars: usize = messages
        .iter()
        .filter_map(|m| m.get("content"))
        .map(|content| match content {
            Value::String(s) => s.chars().count(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .map(|s| s.chars().count())
                .sum(),
            _ => 0,
        })
        .sum();
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// The assistant prefill: the last message's text when its role is "assistant".
fn prefill(messages: &[Value]) -> Option<&str> {
    let last = messages.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    last.get("content").and_then(Value::as_str)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn estimates_tokens_from_text() {
        let messages = [
            json!({"role": "system", "content": "abcde"}),
            json!({"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": []}),
        ];
        assert_eq!(estimate_tokens(&messages), 2);
        assert_eq!(estimate_tokens(&[]), 0);
    }

    #[test]
    fn finds_the_prefill() {
        let user = json!({"role": "user", "content": "hi"});
        let assistant = json!({"role": "assistant", "content": "alpha-1"});
        assert_eq!(prefill(&[user.clone(), assistant.clone()]), Some("alpha-1"));
        assert_eq!(prefill(&[assistant, user]), None);
    }

    #[test]
    fn api_version_is_required_with_a_value() {
        let with = |s: &str| has_api_version(&s.parse::<Uri>().unwrap_or_default());
        assert!(with("/x?api-version=2024-10-21"));
        assert!(with("/x?a=b&api-version=1"));
        assert!(!with("/x?api-version="));
        assert!(!with("/x"));
    }
}

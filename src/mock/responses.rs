//! The OpenAI Responses API wire format, for OpenAI and Azure OpenAI.
//!
//! `POST /v1/responses` (OpenAI, `Authorization: Bearer KEY`), `POST /openai/responses?api-version=...`
//! (Azure OpenAI, `api-key: KEY`; the deployment is the body's `model`, as the official SDK's
//! `AzureOpenAI` client sends it) and `POST /openai/v1/responses` (Azure's v1 surface, no
//! `api-version`; `api-key` or a bearer key). The same JSON on all three.
//!
//! Order, as the chat dialect: record and count; plan and random draw; latency (plus tail);
//! stall; injected status; Azure `api-version`; API key; body checks (`model`, `input` a string
//! or a list of items); `previous_response_id` (refused: the mock stores nothing, so a gateway
//! must send the whole conversation); reasoning items whose `encrypted_content` another mock
//! made (refused, `invalid_encrypted_content`); context length; prefill (a trailing assistant
//! message: the answer continues it); answer.
//!
//! The answer is the canonical text (or the `get_weather` call with `tool_call`, until the
//! input ends with a `function_call_output`). A request with `reasoning` gets a reasoning item
//! first, with an empty summary and, when `include` has `"reasoning.encrypted_content"`, this
//! mock's seal (see `reasoning.rs`). Streams play through the shared fault plan (`events.rs`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
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
use render::{Answer, Reasoning, Reply};

mod error;
mod events;
mod input;
mod reasoning;
mod render;

/// The wire endpoints of this dialect.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/v1/responses", post(openai_responses))
        .route("/openai/responses", post(azure_responses))
        .route("/openai/v1/responses", post(azure_v1_responses))
}

/// Which flavour of the API a request came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    OpenAi,
    /// `/openai/responses`: `api-version` required, `api-key` header.
    Azure,
    /// `/openai/v1/responses`: no `api-version`; `api-key` or a bearer key.
    AzureV1,
}

async fn openai_responses(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(&state, Flavour::OpenAi, &method, &uri, &headers, &body).await
}

async fn azure_responses(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(&state, Flavour::Azure, &method, &uri, &headers, &body).await
}

async fn azure_v1_responses(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(&state, Flavour::AzureV1, &method, &uri, &headers, &body).await
}

async fn respond(
    state: &MockState,
    flavour: Flavour,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    state.record(RecordedRequest::capture(method, uri, headers, body));
    let parsed = serde_json::from_slice::<Value>(body);
    let model = parsed
        .as_ref()
        .ok()
        .and_then(|b| b.get("model"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    // From here on, the guard counts the request cancelled if this future is dropped.
    let (mut guard, plan, draw) = state.arrive(model.as_deref()).await;
    let mock = state
        .name_header()
        .and_then(|name| name.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let reply = Reply {
        id: guard.seq() + 1,
        created_at: unix_now(),
        model: model.unwrap_or_default(),
        mock,
    };
    let request = Request {
        flavour,
        uri,
        headers,
    };
    let response = match decide(&plan, draw, &request, &reply.mock, parsed) {
        Err(rejection) => {
            guard.complete();
            rejection.into_response()
        }
        Ok(answer) if answer.stream => {
            let script = events::script(&reply, &answer, plan.inband_error_after)
                .with_error_body(&plan, Some("error"));
            super::stream::response(script, &plan, guard)
        }
        Ok(answer) => super::whole(
            &plan,
            guard,
            render::completed(&reply, &answer),
            "{\"id\": \"resp_mock\", \"object\": \"response\", \"output\": [ this is not json",
        ),
    };
    state.named(response)
}

/// Where a request came in and what it carried besides its body.
struct Request<'a> {
    flavour: Flavour,
    uri: &'a Uri,
    headers: &'a HeaderMap,
}

/// Everything before the answer: the errors the plan or the request call for, in order.
/// `mock` is this mock's name, the only sealer of reasoning it accepts.
fn decide(
    plan: &FaultPlan,
    draw: Draw,
    request: &Request<'_>,
    mock: &str,
    body: Result<Value, serde_json::Error>,
) -> Result<Answer, Rejection> {
    if plan.status.is_some() && draw.error {
        return Err(Rejection::injected(plan));
    }
    if request.flavour == Flavour::Azure && !has_api_version(request.uri) {
        let message = "Resource not found: the api-version query parameter is missing";
        return Err(Rejection::not_found(message));
    }
    if let Some(key) = &plan.expect_api_key {
        if !authorized(request.flavour, request.headers, key) {
            return Err(Rejection::invalid_api_key());
        }
    }
    let body = body.map_err(|e| {
        let message = format!("We could not parse the JSON body of your request: {e}");
        Rejection::bad_request(message, None, None)
    })?;
    if body.get("model").and_then(Value::as_str).is_none() {
        return Err(Rejection::missing("model"));
    }
    let items = input::items(&body)?;
    if let Some(id) = body.get("previous_response_id").and_then(Value::as_str) {
        return Err(Rejection::previous_response_not_found(id));
    }
    if let Some(content) = input::foreign_reasoning(&items, mock) {
        return Err(Rejection::invalid_encrypted_content(content));
    }
    let input_tokens = input::estimate_tokens(body.get("instructions"), &items);
    if plan
        .max_context_tokens
        .is_some_and(|max| input_tokens > u64::from(max))
    {
        return Err(Rejection::input_too_long());
    }
    let prefill = input::prefill(&items);
    if prefill.is_some() && plan.reject_prefill {
        let message = "assistant prefill is not supported";
        let code = Some("prefill_unsupported");
        return Err(Rejection::bad_request(message, code, Some("input")));
    }
    let text = canonical_text(plan.words, plan.variant);
    let text = match prefill {
        Some(prefill) => continuation(&text, &prefill).to_owned(),
        None => text,
    };
    Ok(Answer {
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        input_tokens,
        cache_read: plan.cache_read_tokens,
        text,
        // A tool loop: once the tool's result is in, the answer is text.
        tool_call: plan.tool_call && !input::ends_with_tool_output(&items),
        reasoning: reasoning_asked(&body),
        echo: render::echo(&body),
    })
}

/// A reasoning item for a request with `reasoning`; sealed when `include` asks for it.
fn reasoning_asked(body: &Value) -> Reasoning {
    if body.get("reasoning").is_none_or(Value::is_null) {
        return Reasoning::None;
    }
    let encrypted = body
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|include| {
            include
                .iter()
                .any(|v| v.as_str() == Some("reasoning.encrypted_content"))
        });
    if encrypted {
        Reasoning::Encrypted
    } else {
        Reasoning::Plain
    }
}

fn has_api_version(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.starts_with("api-version=") && pair.len() > 12)
    })
}

fn authorized(flavour: Flavour, headers: &HeaderMap, key: &str) -> bool {
    let bearer = format!("Bearer {key}");
    let is = |name: &str, expected: &str| {
        headers
            .get(name)
            .is_some_and(|v| v.as_bytes() == expected.as_bytes())
    };
    match flavour {
        Flavour::OpenAi => is(header::AUTHORIZATION.as_str(), &bearer),
        Flavour::Azure => is("api-key", key),
        Flavour::AzureV1 => is("api-key", key) || is(header::AUTHORIZATION.as_str(), &bearer),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn decide_body(plan: &FaultPlan, body: Value) -> Result<Answer, Rejection> {
        let uri: Uri = "/v1/responses".parse().unwrap();
        let headers = HeaderMap::new();
        let request = Request {
            flavour: Flavour::OpenAi,
            uri: &uri,
            headers: &headers,
        };
        let draw = plan.draw(0);
        decide(plan, draw, &request, "me", Ok(body))
    }

    #[test]
    fn checks_in_order() {
        let plan = FaultPlan::default();
        let missing = decide_body(&plan, json!({"input": "hi"})).unwrap_err();
        assert_eq!(missing.code.as_deref(), Some("missing_required_parameter"));
        let previous = json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"});
        let refused = decide_body(&plan, previous).unwrap_err();
        assert_eq!(
            refused.message,
            "Previous response with id 'resp_1' not found."
        );
        let tight = FaultPlan {
            max_context_tokens: Some(1),
            ..FaultPlan::default()
        };
        let long = json!({"model": "m", "input": "hello there"});
        let too_long = decide_body(&tight, long).unwrap_err();
        assert_eq!(too_long.code.as_deref(), Some("context_length_exceeded"));
    }

    #[test]
    fn prefill_tool_turn_and_reasoning() {
        let plan = FaultPlan {
            words: 3,
            tool_call: true,
            ..FaultPlan::default()
        };
        let body = json!({
            "model": "m",
            "reasoning": {"effort": "low"},
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"role": "user", "content": "count"},
                {"type": "function_call_output", "call_id": "c", "output": "sunny"},
                {"role": "assistant", "content": "alpha-1"},
            ],
        });
        let answer = decide_body(&plan, body).unwrap();
        assert!(
            answer.tool_call,
            "the input ends with the prefill, not the tool output"
        );
        assert_eq!(answer.text, " bravo-2 charlie-3.");
        assert_eq!(answer.reasoning, Reasoning::Encrypted);
        let after_tool = json!({"model": "m", "input": [
            {"type": "function_call_output", "call_id": "c", "output": "sunny"},
        ]});
        let answer = decide_body(&plan, after_tool).unwrap();
        assert!(!answer.tool_call);
        assert_eq!(answer.reasoning, Reasoning::None);
    }

    #[test]
    fn azure_auth_and_api_version() {
        let mut headers = HeaderMap::new();
        headers.insert("api-key", "k".parse().unwrap());
        assert!(authorized(Flavour::Azure, &headers, "k"));
        assert!(!authorized(Flavour::OpenAi, &headers, "k"));
        assert!(authorized(Flavour::AzureV1, &headers, "k"));
        let uri: Uri = "/openai/responses?api-version=2025-04-01-preview"
            .parse()
            .unwrap();
        assert!(has_api_version(&uri));
        assert!(!has_api_version(&"/openai/responses".parse().unwrap()));
    }
}

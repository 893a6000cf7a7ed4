//! The Gemini generateContent wire format:
//! `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent` (`?alt=sse` for
//! server-sent events; without it, one JSON array of the chunks, as the REST API does).
//!
//! Same order as the OpenAI dialect: record and count (per model in the path); plan and random
//! draw; latency (plus tail); stall; injected status (Gemini's error envelope; the plan's
//! `error_code`, when set, is the `status` word); API key (`x-goog-api-key` or `?key=`); body
//! checks (`contents`); context length ("The input token count ... exceeds ..."); with
//! `thought_signatures`, Gemini 3's check of the current turn's signatures
//! (`gemini/signatures.rs`); prefill (a trailing `model` turn); answer (signed, with
//! `thought_signatures`). Streams play through the shared fault plan;
//! `inband_error_after` sends an error object as the next event.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
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
mod signatures;

/// The wire endpoints of this dialect.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new().route("/v1beta/models/{target}", post(generate))
}

/// What the path asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Generate,
    Stream { sse: bool },
}

async fn generate(
    State(state): State<Arc<MockState>>,
    Path(target): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    respond(&state, &target, &uri, &headers, &body).await
}

/// The answer to `{model}:{operation}` (recorded already): Vertex's Gemini models answer
/// the same way (`vertex.rs`).
pub(super) async fn respond(
    state: &MockState,
    target: &str,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let (model, action) = match target.split_once(':') {
        Some((model, "generateContent")) => (model.to_owned(), Action::Generate),
        Some((model, "streamGenerateContent")) => (
            model.to_owned(),
            Action::Stream {
                sse: query(uri, "alt") == Some("sse"),
            },
        ),
        _ => {
            let message = format!("models/{target} is not found or not supported");
            return Rejection::new(StatusCode::NOT_FOUND, "NOT_FOUND", message).into_response();
        }
    };
    // From here on, the guard counts the request cancelled if this future is dropped.
    let (mut guard, plan, draw) = state.arrive(Some(&model)).await;
    let reply = Reply {
        id: guard.seq() + 1,
        model,
    };
    let response = match decide(&plan, draw, uri, headers, body) {
        Err(rejection) => {
            guard.complete();
            rejection.into_response()
        }
        Ok(answer) => match action {
            Action::Stream { sse: true } => {
                let script = render::script(&reply, &answer).with_error_body(&plan, None);
                super::stream::response(script, &plan, guard)
            }
            Action::Stream { sse: false } => {
                guard.complete();
                Json(render::chunk_array(&reply, &answer)).into_response()
            }
            Action::Generate => super::whole(
                &plan,
                guard,
                render::response(&reply, &answer),
                "{\"candidates\": [ this is not json",
            ),
        },
    };
    state.named(response)
}

/// The value of query parameter `name`.
fn query<'a>(uri: &'a Uri, name: &str) -> Option<&'a str> {
    uri.query()?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// An error answer in Gemini's envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rejection {
    status: StatusCode,
    word: String,
    message: String,
    reason: Option<&'static str>,
    retry_after: Option<u64>,
    /// The plan's `error_body`, sent instead of the envelope.
    body: Option<Box<str>>,
}

impl Rejection {
    fn new(status: StatusCode, word: &str, message: impl Into<String>) -> Self {
        Rejection {
            status,
            word: word.to_owned(),
            message: message.into(),
            reason: None,
            retry_after: None,
            body: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Rejection::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }

    /// The error a plan injects: its status with Gemini's word for it (or `error_code`), or its
    /// `error_body` as it is.
    fn injected(plan: &FaultPlan) -> Self {
        let status = plan.injected_status();
        let word = match status.as_u16() {
            400 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            429 => "RESOURCE_EXHAUSTED",
            503 => "UNAVAILABLE",
            504 => "DEADLINE_EXCEEDED",
            _ if status.is_client_error() => "FAILED_PRECONDITION",
            _ => "INTERNAL",
        };
        let reason = status.canonical_reason().unwrap_or("Error");
        Rejection {
            word: plan.error_code.clone().unwrap_or_else(|| word.to_owned()),
            retry_after: plan.retry_after,
            body: plan.error_body.as_deref().map(Box::from),
            ..Rejection::new(
                status,
                word,
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
        let mut error = json!({
            "code": self.status.as_u16(),
            "message": self.message,
            "status": self.word,
        });
        if let (Some(reason), Some(object)) = (self.reason, error.as_object_mut()) {
            object.insert(
                "details".into(),
                json!([{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "googleapis.com",
                }]),
            );
        }
        let mut response = (self.status, Json(json!({"error": error}))).into_response();
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
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Answer, Rejection> {
    if plan.status.is_some() && draw.error {
        return Err(Rejection::injected(plan));
    }
    if let Some(key) = &plan.expect_api_key {
        let given = headers
            .get("x-goog-api-key")
            .and_then(|v| v.to_str().ok())
            .or_else(|| query(uri, "key"));
        match given {
            None => {
                let message = "Method doesn't allow unregistered callers (callers without \
                               established identity). Please use API Key or other form of API \
                               consumer identity to call this API.";
                return Err(Rejection::new(
                    StatusCode::FORBIDDEN,
                    "PERMISSION_DENIED",
                    message,
                ));
            }
            Some(given) if given != key => {
                return Err(Rejection {
                    reason: Some("API_KEY_INVALID"),
                    ..Rejection::invalid("API key not valid. Please pass a valid API key.")
                });
            }
            Some(_) => {}
        }
    }
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| Rejection::invalid(format!("Invalid JSON payload received. {e}")))?;
    let Some(contents) = body.get("contents").and_then(Value::as_array) else {
        let message = "* GenerateContentRequest.contents: contents is not specified";
        return Err(Rejection::invalid(message));
    };
    let system = body
        .get("systemInstruction")
        .or_else(|| body.get("system_instruction"));
    let prompt_tokens = estimate_tokens(system, contents);
    if let Some(max) = plan.max_context_tokens {
        if prompt_tokens > u64::from(max) {
            let message = format!(
                "The input token count ({prompt_tokens}) exceeds the maximum number of tokens \
                 allowed ({max})."
            );
            return Err(Rejection::invalid(message));
        }
    }
    if plan.thought_signatures {
        signatures::check(contents).map_err(Rejection::invalid)?;
    }
    let prefill = prefill(contents);
    if prefill.is_some() && plan.reject_prefill {
        return Err(Rejection::invalid(
            "a final model turn (prefill) is not supported",
        ));
    }
    let text = canonical_text(plan.words, plan.variant);
    let text = match prefill {
        Some(prefill) => continuation(&text, &prefill).to_owned(),
        None => text,
    };
    Ok(Answer {
        prompt_tokens,
        cache_read: plan.cache_read_tokens,
        text,
        // A tool loop: once the function's result is in, the answer is text.
        tool_call: plan.tool_call && !signatures::ends_with_function_responses(contents),
        signed: plan.thought_signatures,
    })
}

/// The text parts of a content, concatenated.
fn parts_text(content: Option<&Value>) -> String {
    content
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Prompt tokens: the characters of the system instruction and of every text part, divided by
/// 4 and rounded up, as the OpenAI dialect counts.
fn estimate_tokens(system: Option<&Value>, contents: &[Value]) -> u64 {
    let chars: usize = std::iter::once(parts_text(system))
        .chain(contents.iter().map(|c| parts_text(Some(c))))
        .map(|text| text.chars().count())
        .sum();
    u64::try_from(chars.div_ceil(4)).unwrap_or(u64::MAX)
}

/// The prefill: the text of the last content when it is a `model` turn.
fn prefill(contents: &[Value]) -> Option<String> {
    let last = contents.last()?;
    if last.get("role").and_then(Value::as_str) != Some("model") {
        return None;
    }
    Some(parts_text(Some(last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_query() {
        let uri: Uri = "/x?alt=sse&key=k".parse().unwrap_or_default();
        assert_eq!(query(&uri, "alt"), Some("sse"));
        assert_eq!(query(&uri, "key"), Some("k"));
        assert_eq!(query(&uri, "nope"), None);
    }

    #[test]
    fn counts_and_finds_the_prefill() {
        let user = json!({"role": "user", "parts": [{"text": "abcd"}, {"inlineData": {}}]});
        let model = json!({"role": "model", "parts": [{"text": "alpha-1"}]});
        let system = json!({"parts": [{"text": "abcd"}]});
        assert_eq!(
            estimate_tokens(Some(&system), &[user.clone(), model.clone()]),
            4
        );
        assert_eq!(prefill(&[user.clone(), model]).as_deref(), Some("alpha-1"));
        assert_eq!(prefill(&[user]), None);
    }

    #[test]
    fn injected_errors_use_gemini_words() {
        let plan = FaultPlan {
            status: Some(429),
            ..FaultPlan::default()
        };
        assert_eq!(Rejection::injected(&plan).word, "RESOURCE_EXHAUSTED");
        let plan = FaultPlan {
            status: Some(500),
            error_code: Some("UNAVAILABLE".into()),
            ..FaultPlan::default()
        };
        assert_eq!(Rejection::injected(&plan).word, "UNAVAILABLE");
        let raw = FaultPlan {
            status: Some(400),
            error_body: Some("{}".into()),
            ..FaultPlan::default()
        };
        assert_eq!(Rejection::injected(&raw).body.as_deref(), Some("{}"));
    }
}

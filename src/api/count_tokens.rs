//! `POST /v1/messages/count_tokens`: Anthropic's token count, as Claude Code and the Anthropic
//! SDKs ask it. The route's Anthropic targets are asked in order (breaker admits, not parked;
//! the client's body, headers and query as they came, only `model` rewritten); the first answer
//! goes back as it came. When no Anthropic target can answer, the gateway estimates (UTF-8
//! bytes / 3.5 per message, the estimate context trimming uses) and says so with
//! `x-switchyard-estimated: true`. A client error (400) is the client's and goes back as is.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use tokio::time::Instant;

use super::error::ApiError;
use super::respond::{with_id, Edge};
use super::stamp::Answered;
use super::{headers, AppState};
use crate::canonical::context::{estimate_tokens, TokenCounter};
use crate::canonical::{self, Dialect};
use crate::request_id;
use crate::routing::attempt::call_count_tokens;
use crate::routing::classify::{AttemptError, NextStep};
use crate::routing::health::Verdict;
use crate::wire::ClientWire;

/// Says the count is the gateway's estimate, not a provider's.
const ESTIMATED: http::HeaderName = http::HeaderName::from_static("x-switchyard-estimated");

/// `POST /v1/messages/count_tokens`.
pub(super) async fn count_tokens(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Response {
    let id = request_id::new();
    let (parts, body) = request.into_parts();
    let resp = match count(&state, &parts, body).await {
        Ok(resp) => resp,
        Err(err) => {
            Answered::refused(err.into_dialect_response(Dialect::Anthropic)).into_response()
        }
    };
    with_id(resp, id)
}

async fn count(
    state: &AppState,
    parts: &http::request::Parts,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let edge = Edge::open(state, &parts.headers, body, started).await?;
    let req = canonical::anthropic::parse_request(&edge.body)
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    let routing = state.routing.load_full();
    let Some(route) = routing.route(&req.model) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "the model `{}` does not exist on this gateway; GET /v1/models lists them",
                req.model
            ),
        ));
    };
    let client = ClientWire::native(
        Dialect::Anthropic,
        edge.body.clone(),
        &parts.headers,
        parts.uri.query(),
    );
    let policy = &route.config.failover;
    let timeout = (edge.timeout).map_or(policy.request_timeout, |t| t.min(policy.request_timeout));
    let deadline = crate::clock::after(started, timeout);
    let mut attempts = 0u32;
    let anthropic = route
        .targets
        .iter()
        // Anthropic's own API: Bedrock counts by another shape (its answer is estimated here).
        .filter(|t| t.provider.config.kind == crate::config::ProviderKind::Anthropic);
    for target in anthropic {
        let Some(client) = &client else { break };
        if attempts > 0 && !edge.failover {
            break;
        }
        let now = Instant::now();
        if target.parked_for(now).is_some() || !target.health.admit(now) {
            continue;
        }
        attempts += 1;
        let attempt_deadline = deadline.min(crate::clock::after(now, policy.attempt_timeout));
        let result = call_count_tokens(target, client, attempt_deadline).await;
        let verdict = match &result {
            Ok(_) => Verdict::Ok,
            Err(e) => e.verdict(),
        };
        target.health.attempt(now, Instant::now(), verdict);
        let answered = match result {
            Ok(body) => Some((StatusCode::OK, body)),
            Err(e) if e.next_step(policy) == NextStep::ReturnAsIs => match e {
                AttemptError::Status { status, body, .. } => Some((status, body)),
                _ => None,
            },
            Err(e) => {
                tracing::warn!(
                    route = %route.config.name, target = %target.id(), kind = e.kind(),
                    "count_tokens attempt failed"
                );
                None
            }
        };
        if let Some((status, body)) = answered {
            let mut resp = (status, body).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            h.insert(headers::TARGET, target.header.clone());
            h.insert(headers::ATTEMPTS, HeaderValue::from(attempts));
            return Ok(resp);
        }
    }
    let input_tokens = estimate_tokens(&req, &TokenCounter::Estimate);
    let mut resp = axum::Json(serde_json::json!({ "input_tokens": input_tokens })).into_response();
    let h = resp.headers_mut();
    h.insert(ESTIMATED, HeaderValue::from_static("true"));
    h.insert(headers::ATTEMPTS, HeaderValue::from(attempts));
    Ok(resp)
}

//! `POST /v1/chat/completions` and `GET /v1/models` in the OpenAI shape.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use super::audited;
use super::chat_request::ChatRequest;
use super::error::ApiError;
use super::request_id;
use super::respond::{respond, Edge};
use super::{headers, AppState};
use crate::canonical::Dialect;
use crate::config::parse_duration;
use crate::routing::wire::Canonical;

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

pub(super) fn with_id(mut resp: Response, id: &str) -> Response {
    resp.headers_mut()
        .insert(headers::REQUEST_ID, header_value(id));
    resp
}

/// A request refused before any upstream call: it says so (`x-switchyard-attempts: 0`).
pub(super) fn refused(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(headers::ATTEMPTS, HeaderValue::from_static("0"));
    resp
}

/// Read the body within `max` bytes: 413 past it.
pub(super) async fn read_body(body: Body, max: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("request body is larger than the gateway's max_body ({max} bytes)"),
        )),
        Err(_) => Err(ApiError::bad_request(
            "body_read_error",
            "could not read the request body",
        )),
    }
}

/// Per-request controls from the client's headers.
pub(super) fn controls(h: &HeaderMap) -> Result<(bool, Option<std::time::Duration>), ApiError> {
    let failover = match h.get(headers::FAILOVER).map(|v| v.to_str()) {
        None => true,
        Some(Ok(v)) if v.eq_ignore_ascii_case("off") => false,
        Some(Ok(v)) if v.eq_ignore_ascii_case("on") => true,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_header",
                format!("{} must be `on` or `off`", headers::FAILOVER),
            ))
        }
    };
    let timeout = match h.get(headers::TIMEOUT).map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => match parse_duration(v) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_header",
                    format!(
                        "{} must be a duration such as `20s` or `800ms`",
                        headers::TIMEOUT
                    ),
                ))
            }
        },
        Some(Err(_)) => {
            return Err(ApiError::bad_request(
                "invalid_header",
                "invalid timeout header",
            ))
        }
    };
    Ok((failover, timeout))
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    let id = request_id::new();
    // Taking the request whole moves its headers instead of cloning them.
    let (parts, body) = request.into_parts();
    let resp = match serve_chat(&state, &parts.headers, body, &id, started).await {
        Ok(resp) => resp,
        Err(err) => {
            audited::refused(&state.audit, &id, "", false, None, &err, started);
            refused(err.into_response())
        }
    };
    with_id(resp, &id)
}

async fn serve_chat(
    state: &AppState,
    h: &HeaderMap,
    body: Body,
    id: &str,
    started: Instant,
) -> Result<Response, ApiError> {
    let edge = Edge::open(state, h, body, started).await?;
    let chat = ChatRequest::parse(edge.body.clone())
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    Ok(respond(state, edge, id, Dialect::OpenAi, chat, Canonical::default()).await)
}

/// `GET /v1/models`: the routes, in the OpenAI list shape (a client key needed when `[auth]`
/// is set, as for completions: the SDKs send it).
pub async fn models(State(state): State<AppState>, h: HeaderMap) -> Response {
    let id = request_id::new();
    if let Some(Err(e)) = state.auth.load().as_deref().map(|auth| auth.check(&h)) {
        return with_id(e.into_response(), &id);
    }
    let routing = state.routing.load();
    let data: Vec<_> = routing
        .route_names()
        .map(|name| serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    let resp = axum::Json(serde_json::json!({"object": "list", "data": data})).into_response();
    with_id(resp, &id)
}

/// Anything else: 404 in the OpenAI envelope.
pub async fn not_found(uri: http::Uri) -> Response {
    edge_error(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no such endpoint: {}", uri.path()),
    )
}

/// A known path with another method (`GET /v1/chat/completions`): 405 in the OpenAI
/// envelope, not an empty body.
pub async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    edge_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

fn edge_error(status: StatusCode, code: &'static str, message: String) -> Response {
    let resp = ApiError::new(status, "invalid_request_error", code, message).into_response();
    with_id(resp, &request_id::new())
}

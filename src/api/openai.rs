//! `POST /v1/chat/completions` and `GET /v1/models` in the OpenAI shape.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use super::audited;
use super::error::ApiError;
use super::respond::{respond, with_id, Asked, Edge};
use super::stamp::Answered;
use super::AppState;
use crate::canonical::Dialect;
use crate::request_id;
use crate::wire::{ChatRequest, ClientWire, Forms};

/// `POST /v1/chat/completions`.
pub(super) async fn chat_completions(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Answered {
    let started = Instant::now();
    let mut id = request_id::new();
    // Taking the request whole moves its headers instead of cloning them.
    let (parts, body) = request.into_parts();
    match serve_chat(&state, &parts.headers, body, &mut id, started).await {
        // `respond` took the id; the answer carries it.
        Ok(answered) => answered,
        // Refused before `respond`: the id is still here.
        Err(err) => {
            debug_assert!(!id.is_empty());
            audited::refused(&state.audit, &id, "", false, None, &err, started);
            Answered::refused(err.into_response()).with_id(id)
        }
    }
}

async fn serve_chat(
    state: &AppState,
    h: &HeaderMap,
    body: Body,
    id: &mut String,
    started: Instant,
) -> Result<Answered, ApiError> {
    let edge = Edge::open(state, h, body, started).await?;
    let chat = ChatRequest::parse(edge.body.clone())
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    let client = ClientWire::openai(h);
    let asked = Asked {
        dialect: Dialect::OpenAi,
        model: chat.model.clone(),
        stream: chat.stream,
        client_wants_usage: chat.client_wants_usage,
        forms: Arc::new(Forms::openai(chat)),
        client,
        minted: None,
    };
    Ok(respond(state, edge, id, asked).await)
}

/// `GET /v1/models`: the routes, in the OpenAI list shape (a client key needed when `[auth]`
/// is set, as for completions: the SDKs send it).
pub(super) async fn models(State(state): State<AppState>, h: HeaderMap) -> Response {
    let id = request_id::new();
    if let Err(e) = super::guard::client(&state, &h) {
        return with_id(e.into_response(), id);
    }
    let routing = state.routing.load();
    let data: Vec<_> = routing
        .route_names()
        .map(|name| serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    let resp = axum::Json(serde_json::json!({"object": "list", "data": data})).into_response();
    with_id(resp, id)
}

/// Anything else: 404 in the envelope of the API the path belongs to (Anthropic's under
/// `/v1/messages`, else OpenAI's).
pub(super) async fn not_found(uri: http::Uri) -> Response {
    edge_error(
        &uri,
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no such endpoint: {}", uri.path()),
    )
}

/// A known path with another method (`GET /v1/chat/completions`): 405 in the envelope of the
/// path's API, not an empty body.
pub(super) async fn method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    edge_error(
        &uri,
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

fn edge_error(
    uri: &http::Uri,
    status: StatusCode,
    code: &'static str,
    message: String,
) -> Response {
    let dialect = if uri.path().starts_with("/v1/messages") {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    };
    let resp = ApiError::new(status, "invalid_request_error", code, message)
        .into_dialect_response(dialect);
    with_id(resp, request_id::new())
}

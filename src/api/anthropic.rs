//! `POST /v1/messages`: the Anthropic Messages API, so Anthropic SDK clients get the same
//! failover. The body is read into the canonical model and carried as OpenAI inside; any target
//! kind may serve it, and the answer (whole, streamed or an error) is written back in the
//! Anthropic shape.

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use tokio::time::Instant;

use super::audited;
use super::error::ApiError;
use super::respond::{refused, respond, with_id, Edge};
use super::AppState;
use crate::canonical::{self, Dialect};
use crate::request_id;
use crate::wire::transcode::Canonical;
use crate::wire::ChatRequest;

/// `POST /v1/messages`.
pub(super) async fn messages(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Response {
    let started = Instant::now();
    let id = request_id::new();
    let (parts, body) = request.into_parts();
    let resp = match serve(&state, &parts.headers, body, &id, started).await {
        Ok(resp) => resp,
        Err(err) => {
            audited::refused(&state.audit, &id, "", false, None, &err, started);
            refused(err.into_dialect_response(Dialect::Anthropic))
        }
    };
    with_id(resp, &id)
}

async fn serve(
    state: &AppState,
    h: &HeaderMap,
    body: Body,
    id: &str,
    started: Instant,
) -> Result<Response, ApiError> {
    let edge = Edge::open(state, h, body, started).await?;
    let canon = canonical::anthropic::parse_request(&edge.body)
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    let inner = canonical::openai::write_request(&canon, &canon.model)
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    let mut chat = ChatRequest::parse(Bytes::from(inner))
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    // Anthropic streams always report usage.
    chat.client_wants_usage = true;
    Ok(respond(
        state,
        edge,
        id,
        Dialect::Anthropic,
        chat,
        Canonical::known(canon),
    )
    .await)
}

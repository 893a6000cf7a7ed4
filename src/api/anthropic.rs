//! `POST /v1/messages`: the Anthropic Messages API, so Anthropic SDK clients (and Claude Code)
//! get the same failover. An Anthropic target gets the client's body, `anthropic-beta` /
//! `anthropic-version` headers and query as they came (only `model` rewritten), and its answer
//! is passed back as it came. For other targets the body is read into the canonical model and
//! carried as OpenAI inside, and the answer (whole, streamed or an error) is written back in
//! the Anthropic shape.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use http::HeaderMap;
use tokio::time::Instant;

use super::audited;
use super::error::ApiError;
use super::respond::{respond, Asked, Edge};
use super::stamp::Answered;
use super::AppState;
use crate::canonical::Dialect;
use crate::request_id;
use crate::wire::client::Head;
use crate::wire::{ClientWire, Forms};

/// `POST /v1/messages`.
pub(super) async fn messages(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Answered {
    let started = Instant::now();
    let mut id = request_id::new();
    let (parts, body) = request.into_parts();
    let query = parts.uri.query();
    match serve(&state, &parts.headers, query, body, &mut id, started).await {
        // `respond` took the id; the answer carries it.
        Ok(answered) => answered,
        // Refused before `respond`: the id is still here.
        Err(err) => {
            debug_assert!(!id.is_empty());
            audited::refused(&state.audit, &id, "", false, None, &err, started);
            Answered::refused(err.into_dialect_response(Dialect::Anthropic)).with_id(id)
        }
    }
}

async fn serve(
    state: &AppState,
    h: &HeaderMap,
    query: Option<&str>,
    body: Body,
    id: &mut String,
    started: Instant,
) -> Result<Answered, ApiError> {
    let edge = Edge::open(state, h, body, started).await?;
    // One shallow read; the canonical and inner forms are made only if a target needs them.
    let head = Head::anthropic(&edge.body)
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    // Anthropic targets get the client's bytes, headers and query as they came.
    let client = ClientWire::native_read(Dialect::Anthropic, edge.body.clone(), &head, h, query);
    let asked = Asked {
        dialect: Dialect::Anthropic,
        stream: head.stream,
        // Anthropic streams always report usage.
        client_wants_usage: true,
        forms: Arc::new(Forms::native(Dialect::Anthropic, edge.body.clone())),
        model: head.model,
        client,
        minted: None,
    };
    Ok(respond(state, edge, id, asked).await)
}

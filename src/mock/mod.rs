//! The fault-injecting mock provider.
//!
//! A provider impostor for the demo, the tests and the load benchmarks: it speaks the provider
//! wire formats and misbehaves exactly as its [`FaultPlan`] says (error statuses and rates,
//! latency and heavy tails, stalls, 429 with `Retry-After`, mid-stream cuts and stalls, in-band
//! errors, malformed bodies), reproducibly (seeded), and it answers with a [`canonical_text`]
//! that lets a test check every word a client received. The same code runs in-process
//! ([`MockServer`]) and as a server (`switchyard mock`, [`serve`]).
//!
//! Layout:
//! - `plan.rs`: [`FaultPlan`], the random draw and the latency of one request.
//! - `text.rs`: the canonical answer text and its stream chunks.
//! - `state.rs`: plans in force, counters ([`MockStats`]), recorded requests.
//! - `stream.rs`: streamed answers with faults, for any dialect.
//! - `openai.rs` (+ `openai/render.rs`): the OpenAI and Azure OpenAI wire format.
//! - `responses.rs` (+ `responses/`): the OpenAI Responses API, `POST /v1/responses` (and
//!   Azure's `/openai/responses`, `/openai/v1/responses`).
//! - `anthropic.rs` (+ `anthropic/render.rs`): Anthropic Messages, `POST /v1/messages`.
//! - `gemini.rs` (+ `gemini/render.rs`): Gemini `POST /v1beta/models/{model}:generateContent`
//!   and `:streamGenerateContent`.
//! - `bedrock.rs`: Amazon Bedrock's `POST /model/{model}/invoke` and
//!   `/invoke-with-response-stream` (Anthropic's answers, Bedrock's errors and stream framing),
//!   signatures checked by `sigv4.rs`, the mock's own SigV4 verifier.
//! - `vertex.rs`: Google Vertex AI's Gemini (`:generateContent`) and Anthropic (`:rawPredict`)
//!   endpoints under `/v1/projects/{p}/locations/{l}/publishers/`, and an OAuth 2 token
//!   endpoint (`/token`) for its test service account.
//! - `control.rs`: the HTTP control API under `/mock/`.
//! - `server.rs`: [`serve`] and [`MockServer`].
//!
//! A new dialect (Anthropic, Gemini) adds one file with its routes, request checks and event
//! rendering into a `stream::Script`; plans, counters, recording and stream faults are shared.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use axum::Router;
use serde::{Deserialize, Serialize};

mod anthropic;
mod bedrock;
mod control;
mod gemini;
mod openai;
mod plan;
mod responses;
mod server;
pub mod sigv4;
mod state;
mod stream;
mod text;
pub mod vertex;

pub use plan::FaultPlan;
pub use server::{serve, MockServer};
pub use text::canonical_text;

use state::MockState;

/// The largest request body a mock reads: large enough for any context-length test.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// What a mock saw since it started or was last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MockStats {
    /// Wire requests received (control API calls are not counted).
    pub requests: u64,
    /// Requests whose response (or whole stream) the mock produced as planned, injected errors,
    /// cuts and in-band errors included.
    pub completed: u64,
    /// Requests whose client went away first (while waiting, stalled or mid-stream).
    pub cancelled: u64,
    /// TCP connections accepted (since the start or the last `reset`).
    #[serde(default)]
    pub connections: u64,
    /// The same counts per requested model (Azure: per deployment). Requests whose model could
    /// not be read (a body that is not JSON) are only in the totals.
    pub by_model: BTreeMap<String, ModelCounts>,
}

/// Request counts for one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCounts {
    /// Wire requests received for this model.
    pub requests: u64,
    /// Of those, produced as planned.
    pub completed: u64,
    /// Of those, abandoned by the client first.
    pub cancelled: u64,
}

/// One wire request as the mock received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// `POST`.
    pub method: String,
    /// Path with the query, e.g. `/openai/deployments/d/chat/completions?api-version=2024-10-21`.
    pub path: String,
    /// Every header, in arrival order (keys included: this is a mock).
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body; a body that is not JSON is kept as a JSON string.
    pub body: serde_json::Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A fresh mock named `name`: wire endpoints and control API, answering `x-mock-name: name`.
pub fn router(name: &str) -> Router {
    app(MockState::new(name))
}

/// The router over an existing state (shared with a [`MockServer`]).
fn app(state: Arc<MockState>) -> Router {
    Router::new()
        .merge(openai::routes())
        .merge(responses::routes())
        .merge(anthropic::routes())
        .merge(bedrock::routes())
        .merge(gemini::routes())
        .merge(vertex::routes())
        .merge(control::routes())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn not_found(uri: Uri) -> Response {
    let message = format!("Invalid URL ({})", uri.path());
    openai::error(
        StatusCode::NOT_FOUND,
        &message,
        "invalid_request_error",
        None,
        None,
    )
}

/// A whole (non-streamed) answer in any dialect: the request is complete, and the body is
/// `body` as JSON, or, when the plan asks for a malformed body, a 200 that claims to be JSON
/// and is not (`broken` is the dialect's opening, cut off).
fn whole(
    plan: &FaultPlan,
    mut guard: state::RequestGuard,
    body: impl Serialize,
    broken: &'static str,
) -> Response {
    use axum::response::IntoResponse;
    guard.complete();
    if !plan.malformed_body {
        return axum::Json(body).into_response();
    }
    let mut response = broken.into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

/// An error answer whose body is given as it is (a plan's `error_body`), in any dialect: JSON
/// when it parses as JSON, else plain text, with `Retry-After` when there is one.
fn raw_error(status: StatusCode, body: String, retry_after: Option<u64>) -> Response {
    use axum::http::{header, HeaderValue};
    use axum::response::IntoResponse;
    let kind = if serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = (
        status,
        [(header::CONTENT_TYPE, HeaderValue::from_static(kind))],
        body,
    )
        .into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

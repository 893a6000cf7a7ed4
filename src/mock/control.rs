//! The control API: change a running mock's plans and read what it saw, over HTTP on the wire
//! port, so `switchyard mock` can be driven by demos and load scripts.
//!
//! - `GET /mock/plan`, `PUT /mock/plan`: the default plan (JSON [`FaultPlan`]).
//! - `GET /mock/plan/{model}`, `PUT /mock/plan/{model}`, `DELETE /mock/plan/{model}`: the plan
//!   for one model or Azure deployment (GET gives the plan in force for it).
//! - `GET /mock/stats`: [`MockStats`](super::MockStats).
//! - `GET /mock/requests`: the last recorded requests, oldest first.
//! - `POST /mock/reset`: default plans, zero counters, nothing recorded.
//!
//! Control calls are neither counted nor recorded. A body that is not a valid plan gets a 400
//! with an OpenAI-shaped JSON error naming the problem.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::openai::error;
use super::state::MockState;
use super::FaultPlan;

/// The control endpoints.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/mock/plan", get(get_plan).put(put_plan))
        .route(
            "/mock/plan/{model}",
            get(get_model_plan)
                .put(put_model_plan)
                .delete(delete_model_plan),
        )
        .route("/mock/stats", get(stats))
        .route("/mock/requests", get(requests))
        .route("/mock/reset", post(reset))
}

async fn get_plan(State(state): State<Arc<MockState>>) -> Json<FaultPlan> {
    Json(state.default_plan())
}

async fn put_plan(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    match parse_plan(&body) {
        Ok(plan) => {
            state.set_plan(plan.clone());
            Json(plan).into_response()
        }
        Err(reason) => invalid_plan(&reason),
    }
}

async fn get_model_plan(
    State(state): State<Arc<MockState>>,
    Path(model): Path<String>,
) -> Json<FaultPlan> {
    Json(state.plan_for(Some(&model)))
}

async fn put_model_plan(
    State(state): State<Arc<MockState>>,
    Path(model): Path<String>,
    body: Bytes,
) -> Response {
    match parse_plan(&body) {
        Ok(plan) => {
            state.set_model_plan(&model, plan.clone());
            Json(plan).into_response()
        }
        Err(reason) => invalid_plan(&reason),
    }
}

async fn delete_model_plan(
    State(state): State<Arc<MockState>>,
    Path(model): Path<String>,
) -> StatusCode {
    if state.remove_model_plan(&model) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn stats(State(state): State<Arc<MockState>>) -> Response {
    Json(state.stats()).into_response()
}

async fn requests(State(state): State<Arc<MockState>>) -> Response {
    Json(state.requests()).into_response()
}

async fn reset(State(state): State<Arc<MockState>>) -> StatusCode {
    state.reset();
    StatusCode::NO_CONTENT
}

/// A plan from a control body (an empty body is the default plan), or why it is not one.
fn parse_plan(body: &[u8]) -> Result<FaultPlan, String> {
    let plan = if body.iter().all(u8::is_ascii_whitespace) {
        FaultPlan::default()
    } else {
        serde_json::from_slice::<FaultPlan>(body).map_err(|e| e.to_string())?
    };
    plan.validate()?;
    Ok(plan)
}

fn invalid_plan(reason: &str) -> Response {
    let message = format!("invalid fault plan: {reason}");
    let code = Some("invalid_plan");
    error(
        StatusCode::BAD_REQUEST,
        &message,
        "invalid_request_error",
        code,
        None,
    )
}

//! Operations endpoints: `/metrics`, `/admin/status`, and the manual breaker override.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{header, HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::json;
use tokio::time::Instant;

use super::auth::AdminKey;
use super::error::ApiError;
use super::AppState;
use crate::config::HedgeDelay;
use crate::routing::breaker::Manual;

/// `GET /metrics`: Prometheus text.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let mut resp = state.shared.metrics.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// `GET /admin/status`: breaker state, SLIs and hedge delay per target; routes with their
/// targets in order.
pub(super) async fn status(State(state): State<AppState>) -> Response {
    let routing = state.routing.load();
    let now = Instant::now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // The delay a hedge would wait now (the fallback until enough samples, clamped to the
    // timeouts), by the policy of the first route naming the target; none when it hedges off.
    let hedge_delay = |t: &crate::routing::Target, stream: bool| {
        let route = routing
            .config
            .routes
            .iter()
            .find(|r| r.targets.iter().any(|x| x.id == t.id()))
            .filter(|r| r.hedge.enabled)?;
        let d = crate::routing::hedge::delay(&route.hedge, &route.failover, t, stream, now);
        Some(d.as_secs_f64() * 1000.0)
    };
    let targets: Vec<_> = routing
        .targets()
        .iter()
        .map(|t| {
            let (b, sli) = t.health.snapshot(now);
            let since = wall.saturating_sub(b.for_).as_secs_f64();
            json!({
                "target": t.id(),
                "provider": t.config.provider.name,
                "kind": t.config.provider.kind.as_str(),
                "breaker": {
                    "state": b.state.as_str(),
                    "since": since,
                    "for_ms": ms(b.for_),
                    "failure_rate": b.failure_rate,
                    "requests_in_window": b.requests_in_window,
                    "opens": b.opens,
                    "hold_ms": ms(b.hold),
                    "traffic_share": b.traffic_share,
                },
                "parked_ms": t.parked_for(now).map(ms),
                "sli": sli,
                "hedge_delay_ms": hedge_delay(t, false),
                "hedge_delay_stream_ms": hedge_delay(t, true),
            })
        })
        .collect();
    let routes: Vec<_> = routing
        .config
        .routes
        .iter()
        .map(|r| {
            let selection = routing.route(&r.name).map(|rt| &rt.selection);
            let shares = selection.map(|s| s.view(r)).filter(|v| !v.is_empty());
            json!({
                "route": r.name,
                "strategy": r.strategy.as_str(),
                "affinity": selection.is_some_and(|s| s.affinity).then_some("session"),
                "shares": shares,
                "targets": r.targets.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
                "hedge": r.hedge.enabled.then(|| match r.hedge.delay {
                    HedgeDelay::Fixed(d) => json!({"delay_ms": ms(d)}),
                    HedgeDelay::Percentile(p) => json!({"delay_percentile": p}),
                }),
            })
        })
        .collect();
    let audit = state.audit.status();
    let cluster = state.cluster.as_ref().map(|c| c.status_json(now));
    Json(json!({"targets": targets, "routes": routes, "audit": audit, "cluster": cluster}))
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Action {
    action: String,
}

/// `POST /admin/targets/{provider}/{model}/breaker` with `{"action":"open"|"close"|"reset"}`.
/// The model part may itself hold slashes (`meta-llama/Llama-3`).
pub(super) async fn breaker(
    State(state): State<AppState>,
    Path(path): Path<String>,
    key: Option<axum::Extension<AdminKey>>,
    body: axum::body::Body,
) -> Response {
    let Some(id) = path.strip_suffix("/breaker") else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            "use POST /admin/targets/{provider}/{model}/breaker",
        )
        .into_response();
    };
    let body = match super::respond::read_body(&state, body).await {
        Ok(body) => body,
        Err(e) => return e.into_response(),
    };
    let action = match serde_json::from_slice::<Action>(&body).map(|a| a.action) {
        Ok(a) if a == "open" => Manual::Open,
        Ok(a) if a == "close" => Manual::Close,
        Ok(a) if a == "reset" => Manual::Reset,
        _ => {
            return ApiError::bad_request(
                "invalid_action",
                r#"the body must be {"action": "open" | "close" | "reset"}"#,
            )
            .into_response()
        }
    };
    let routing = state.routing.load();
    let Some(target) = routing.target(id) else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "target_not_found",
            format!("no target {id}; GET /admin/status lists them"),
        )
        .into_response();
    };
    let new_state = target.health.manual(Instant::now(), action);
    // Who did it, by the key's id (never the key); `none` without `[auth]`.
    let by = key
        .and_then(|k| k.0 .0)
        .unwrap_or_else(|| "none".to_owned());
    tracing::warn!(target = %id, action = ?action, state = new_state.as_str(), admin_key = %by, "manual breaker override");
    Json(json!({"target": id, "state": new_state.as_str()})).into_response()
}

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    #[serde(default)]
    since: u64,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    100
}

/// `GET /admin/events?since=SEQ&limit=N`: recent failovers, breaker transitions and hedges.
pub(super) async fn events(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<EventsQuery>,
) -> Response {
    Json(json!({"events": state.shared.events.since(q.since, q.limit.min(500))})).into_response()
}

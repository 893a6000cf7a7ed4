//! `GET /admin/audit?route=&target=&status=&since=&request_id=&session=&limit=`: audit records
//! as JSON, newest first (a session's oldest first: its turns in order). Empty parameters are
//! ignored, so a form or a template URL works as is.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::error::ApiError;
use super::AppState;
use crate::audit::{AuditError, AuditQuery};

/// Records returned when `limit` is not given.
const DEFAULT_LIMIT: usize = 100;
/// Most records one call returns.
const MAX_LIMIT: usize = 1_000;

/// The query string, as text: each value is parsed below, with an error that names it.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Params {
    route: Option<String>,
    target: Option<String>,
    status: Option<String>,
    since: Option<String>,
    request_id: Option<String>,
    session: Option<String>,
    limit: Option<String>,
}

fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.trim().is_empty())
}

fn number<T: std::str::FromStr>(
    name: &str,
    v: Option<String>,
    what: &str,
) -> Result<Option<T>, ApiError> {
    match given(v) {
        None => Ok(None),
        Some(s) => s.trim().parse().map(Some).map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                format!("`{name}` must be {what}, not `{s}`"),
            )
        }),
    }
}

fn parse(p: Params) -> Result<AuditQuery, ApiError> {
    let limit: Option<usize> = number("limit", p.limit, "a count")?;
    Ok(AuditQuery {
        route: given(p.route),
        target: given(p.target),
        status: number("status", p.status, "an HTTP status such as 503")?,
        since: number("since", p.since, "a time in Unix milliseconds")?,
        request_id: given(p.request_id),
        session: given(p.session),
        report: false,
        limit: limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT),
    })
}

/// `GET /admin/audit`.
pub(super) async fn records(
    State(state): State<AppState>,
    Query(params): Query<Params>,
) -> Response {
    let q = match parse(params) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    match state.audit.query(&q).await {
        Ok(records) => Json(json!({"count": records.len(), "records": records})).into_response(),
        Err(e @ AuditError::Off) => ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "audit_off",
            e.to_string(),
        )
        .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "audit log could not be read");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "audit_store_unavailable",
                format!("the audit store could not be read: {e}"),
            )
            .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_ignores_empty_values() {
        let q = parse(Params {
            route: Some("chat".into()),
            status: Some(String::new()),
            since: Some("1700000000000".into()),
            limit: Some("5000".into()),
            ..Default::default()
        });
        let q = q.unwrap_or_default();
        assert_eq!(q.route.as_deref(), Some("chat"));
        assert_eq!(
            (q.status, q.since, q.limit),
            (None, Some(1_700_000_000_000), 1000)
        );
        let bad = parse(Params {
            status: Some("teapot".into()),
            ..Default::default()
        });
        assert!(bad.is_err_and(|e| e.message.contains("`status`")));
    }
}

//! `POST /v1/chat/completions` and `GET /v1/models` in the OpenAI shape.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use super::audited::{self, AuditedStream};
use super::chat_request::ChatRequest;
use super::error::ApiError;
use super::{headers, AppState};
use crate::config::parse_duration;
use crate::routing::dispatch::{dispatch, Answer, Request};

/// A request id: 16 random hex digits.
fn request_id() -> String {
    format!("{:016x}", fastrand::u64(..))
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn with_id(mut resp: Response, id: &str) -> Response {
    resp.headers_mut()
        .insert(headers::REQUEST_ID, header_value(id));
    resp
}

/// Read the body within `max` bytes: 413 past it.
async fn read_body(body: Body, max: usize) -> Result<Bytes, ApiError> {
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
fn controls(h: &HeaderMap) -> Result<(bool, Option<std::time::Duration>), ApiError> {
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
    let id = request_id();
    // Taking the request whole moves its headers instead of cloning them.
    let (parts, body) = request.into_parts();
    let resp = match serve_chat(&state, &parts.headers, body, &id).await {
        Ok(resp) => resp,
        Err(err) => err.into_response(),
    };
    with_id(resp, &id)
}

fn json_response(status: StatusCode, body: Bytes) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

async fn serve_chat(
    state: &AppState,
    h: &HeaderMap,
    body: Body,
    id: &str,
) -> Result<Response, ApiError> {
    let client_key_id = match &state.auth {
        Some(auth) => Some(auth.check(h)?),
        None => None,
    };
    let (failover, timeout) = controls(h)?;
    let bytes = read_body(body, state.max_body).await?;
    let chat = ChatRequest::parse(bytes)
        .map_err(|e| ApiError::bad_request("invalid_request", e.to_string()))?;
    let routing = state.routing.load();
    let Some(route) = routing.route(&chat.model) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "the model `{}` does not exist on this gateway; GET /v1/models lists them",
                chat.model
            ),
        ));
    };
    let started = Instant::now();
    let req = Request {
        id: id.to_owned(),
        chat,
        failover,
        timeout,
        canonical: Default::default(),
    };
    let outcome = dispatch(route, &req).await;
    let attempts = outcome.path.len();
    let hedged = outcome.hedged;
    let target = outcome.served_by().map(|t| t.id().to_owned());
    let mut record = state
        .audit
        .enabled()
        .then(|| audited::draft(&state.audit, &req, &route.config.name, client_key_id));
    if let Some(rec) = &mut record {
        rec.path = outcome.audit_path();
        rec.target.clone_from(&target);
        rec.hedged = hedged;
    }
    let mut resp = match outcome.result {
        Ok(Answer::Full { body, usage }) => {
            if let Some(rec) = &mut record {
                rec.status = 200;
                audited::set_usage(rec, usage);
                if state.audit.bodies() {
                    rec.response_body = Some(String::from_utf8_lossy(&body).into_owned());
                }
            }
            json_response(StatusCode::OK, body)
        }
        Ok(Answer::Stream { body, ttft, report }) => {
            let body = match record.take() {
                Some(mut rec) => {
                    rec.status = 200;
                    rec.ttft_ms = Some(ttft.as_secs_f64() * 1000.0);
                    let audit = state.audit.clone();
                    Body::from_stream(AuditedStream::new(body, rec, audit, report, started))
                }
                None => Body::from_stream(body),
            };
            let mut r = Response::new(body);
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            r
        }
        Ok(Answer::Upstream { status, body }) => {
            if let Some(rec) = &mut record {
                rec.status = status.as_u16();
                rec.error = Some(String::from_utf8_lossy(&body).chars().take(1000).collect());
            }
            json_response(status, body)
        }
        Err(f) => {
            if let Some(rec) = &mut record {
                rec.status = f.status.as_u16();
                rec.error = Some(f.message.clone());
            }
            ApiError::new(f.status, "upstream_error", f.code, f.message).into_response()
        }
    };
    if let Some(mut rec) = record {
        rec.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        state.audit.submit(rec);
    }
    let h = resp.headers_mut();
    if let Some(target) = target {
        h.insert(headers::TARGET, header_value(&target));
    }
    h.insert(headers::ATTEMPTS, HeaderValue::from(attempts));
    if hedged {
        h.insert(headers::HEDGED, HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `GET /v1/models`: the routes, in the OpenAI list shape.
pub async fn models(State(state): State<AppState>) -> Response {
    let routing = state.routing.load();
    let data: Vec<_> = routing
        .route_names()
        .map(|name| serde_json::json!({"id": name, "object": "model", "created": 0, "owned_by": "switchyard"}))
        .collect();
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

/// Anything else: 404 in the OpenAI envelope.
pub async fn not_found(uri: http::Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        format!("no such endpoint: {}", uri.path()),
    )
    .into_response()
}

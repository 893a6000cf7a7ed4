//! Amazon Bedrock's runtime for Anthropic models: `POST /model/{model}/invoke` and
//! `/model/{model}/invoke-with-response-stream`.
//!
//! Checks, in order: record and count; the signature (`sigv4.rs`, against the mock's own key
//! pair [`sigv4::ACCESS_KEY_ID`]) or a Bedrock API key as a bearer (the plan's
//! `expect_api_key`, when set); the body as Bedrock wants it (`anthropic_version:
//! "bedrock-2023-05-31"`, no `model`, no `stream`). Then the request is answered as Anthropic's
//! Messages API answers it (`anthropic.rs`: the same plan, faults and text), with errors in
//! Bedrock's shape (`{"message"}` and the exception's name in `x-amzn-ErrorType`, a context
//! overflow in Bedrock's words) and streams as AWS event-stream frames: each SSE event a
//! `chunk` frame (`{"bytes": base64 of its data}`), an in-band error an exception frame.

use std::sync::Arc;

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue as FrameValue, Message};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use base64::Engine;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::anthropic::{answer, Rejection};
use super::sigv4;
use super::state::MockState;
use super::RecordedRequest;

/// The wire endpoints of this dialect.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route("/model/{model}/invoke", post(invoke))
        .route("/model/{model}/invoke-with-response-stream", post(invoke))
}

/// Both operations: the path says whether the answer streams.
async fn invoke(
    State(state): State<Arc<MockState>>,
    Path(model): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let stream = uri.path().ends_with("/invoke-with-response-stream");
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    let response = match checked(&state, &model, &method, &uri, &headers, &body) {
        Err(refusal) => *refusal,
        Ok(mut parsed) => {
            // As Anthropic's API reads it: the model from the path, the operation's stream flag.
            parsed.insert("model".into(), Value::String(model));
            parsed.insert("stream".into(), Value::Bool(stream));
            match answer(&state, &headers, Ok(Value::Object(parsed)), false).await {
                Ok(response) if stream => framed(response),
                Ok(response) => response,
                Err(rejection) => bedrock_error_of(rejection),
            }
        }
    };
    state.named(response)
}

/// The credentials and the body, before anything is counted against the plan.
fn checked(
    state: &MockState,
    model: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<serde_json::Map<String, Value>, Box<Response>> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(key) = auth.strip_prefix("Bearer ") {
        if state
            .plan_for(Some(model))
            .expect_api_key
            .is_some_and(|want| want != key)
        {
            return Err(error(
                StatusCode::FORBIDDEN,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
            .into());
        }
    } else {
        let all: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let req = sigv4::Request {
            method: method.as_str(),
            path: uri.path(),
            query: uri.query().unwrap_or(""),
            headers: &all,
            body,
        };
        let secret =
            |id: &str| (id == sigv4::ACCESS_KEY_ID).then(|| sigv4::SECRET_ACCESS_KEY.to_owned());
        if let Err(why) = sigv4::verify(&req, secret) {
            let name = if auth.is_empty() {
                "MissingAuthenticationTokenException"
            } else {
                "InvalidSignatureException"
            };
            return Err(error(StatusCode::FORBIDDEN, name, &why).into());
        }
    }
    let Ok(Value::Object(parsed)) = serde_json::from_slice::<Value>(body) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            "Malformed input request, please reformat your input and try again.",
        )
        .into());
    };
    if parsed.get("anthropic_version").and_then(Value::as_str)
        != Some(crate::provider::bedrock::ANTHROPIC_VERSION)
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "ValidationException",
            "Malformed input request: #: required key [anthropic_version] not found or not bedrock-2023-05-31",
        ).into());
    }
    for key in ["model", "stream"] {
        if parsed.contains_key(key) {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "ValidationException",
                &format!("Malformed input request: #: extraneous key [{key}] is not permitted"),
            )
            .into());
        }
    }
    Ok(parsed)
}

/// Bedrock's error answer: `{"message"}` with the exception's name in `x-amzn-ErrorType`.
fn error(status: StatusCode, exception: &str, message: &str) -> Response {
    let mut response = (status, axum::Json(json!({ "message": message }))).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    )) {
        response.headers_mut().insert("x-amzn-errortype", v);
    }
    response
}

/// An Anthropic-dialect refusal (the plan's injected error, a body check) as Bedrock says it.
fn bedrock_error_of(r: Rejection) -> Response {
    let exception = match r.status.as_u16() {
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        408 => "ModelTimeoutException",
        403 | 401 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        s if s >= 500 => "InternalServerException",
        _ => "ValidationException",
    };
    let message = if r.message.starts_with("prompt is too long") {
        "Input is too long for requested model.".to_owned()
    } else {
        r.message
    };
    let status = if r.status.as_u16() == 529 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        r.status
    };
    let mut response = match r.body {
        Some(body) => super::raw_error(status, body.into(), None),
        None => error(status, exception, &message),
    };
    if let Some(seconds) = r.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// An Anthropic SSE stream as Bedrock frames it. The stream's faults (a cut, a stall) pass
/// through as they are.
fn framed(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    let events = body.into_data_stream();
    let frames = futures_util::stream::unfold(
        (events, Vec::<u8>::new()),
        |(mut events, mut buf)| async move {
            loop {
                if let Some(end) = find(&buf, b"\n\n") {
                    let event: Vec<u8> = buf.drain(..end + 2).collect();
                    if let Some(frame) = frame_of(&event) {
                        return Some((Ok::<Bytes, axum::Error>(frame), (events, buf)));
                    }
                    continue;
                }
                match events.next().await {
                    Some(Ok(bytes)) => buf.extend_from_slice(&bytes),
                    Some(Err(e)) => return Some((Err(e), (events, buf))),
                    None => return None,
                }
            }
        },
    );
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::provider::bedrock::STREAM_CONTENT_TYPE),
    );
    parts.headers.insert(
        "x-amzn-bedrock-content-type",
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from_stream(frames))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The frame of one SSE event (`event:` and `data:` lines); none for a comment.
fn frame_of(event: &[u8]) -> Option<Bytes> {
    let text = String::from_utf8_lossy(event);
    let mut name = None;
    let mut data = String::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    if data.is_empty() {
        return None;
    }
    let string = |s: &str| FrameValue::String(s.to_owned().into());
    let message = if name.as_deref() == Some("error") {
        let message = serde_json::from_str::<Value>(&data)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(data);
        Message::new_from_parts(
            vec![
                Header::new(":message-type", string("exception")),
                Header::new(":exception-type", string("modelStreamErrorException")),
                Header::new(":content-type", string("application/json")),
            ],
            Bytes::from(json!({ "message": message, "originalStatusCode": 529 }).to_string()),
        )
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(data.as_bytes());
        Message::new_from_parts(
            vec![
                Header::new(":message-type", string("event")),
                Header::new(":event-type", string("chunk")),
                Header::new(":content-type", string("application/json")),
            ],
            Bytes::from(json!({ "bytes": encoded, "p": "abcdefghij" }).to_string()),
        )
    };
    let mut out = Vec::new();
    write_message_to(&message, &mut out).ok()?;
    Some(Bytes::from(out))
}

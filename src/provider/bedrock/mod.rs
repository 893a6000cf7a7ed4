//! Amazon Bedrock (Anthropic models): `{base_url}/model/{model id}/invoke`, or
//! `/invoke-with-response-stream` for streams, signed with AWS Signature Version 4 (or a
//! Bedrock API key as a bearer token).
//!
//! The body is the Anthropic Messages body with three changes ([`body`]): no `model` (it is in
//! the path) and no `stream` (the operation says), `anthropic_version: "bedrock-2023-05-31"`,
//! and the client's `anthropic-beta` header as the body's `anthropic_beta` list. A whole answer
//! is Anthropic's; a stream is AWS event-stream frames, turned back into Anthropic's SSE events
//! as they arrive (`eventstream.rs`). Bedrock's errors (`{"message"}` with the exception's name
//! in `x-amzn-ErrorType`) are rewritten into Anthropic's envelope ([`anthropic_error`]), so they
//! are classified like Anthropic's own.

mod eventstream;

use std::borrow::Cow;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;

pub use eventstream::sse;

use super::fields::{member, Fields};
use crate::config::{AwsKeys, ProviderConfig};

/// The `anthropic_version` Bedrock's Anthropic models take.
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The name Bedrock is signed for (its endpoints are `bedrock-runtime.*`).
const SIGNING_NAME: &str = "bedrock";

/// The content type of a Bedrock stream.
pub const STREAM_CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

pub(super) fn chat_url(config: &ProviderConfig, model: &str, stream: bool) -> String {
    let op = if stream {
        "invoke-with-response-stream"
    } else {
        "invoke"
    };
    format!(
        "{}/model/{}/{op}",
        config.base_url.trim_end_matches('/'),
        escape_segment(model)
    )
}

/// A model id (`anthropic.claude-sonnet-4-5-20250929-v1:0`, an inference profile, an ARN) as
/// one path segment: everything but the unreserved characters percent-encoded, `:` and `/`
/// included. The signature is computed over exactly these bytes.
fn escape_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The signing identity of a provider's keys, made once.
pub(super) fn identity(keys: &AwsKeys) -> Identity {
    Credentials::new(
        keys.access_key_id.clone(),
        keys.secret_access_key.clone(),
        keys.session_token.clone(),
        None,
        "switchyard-config",
    )
    .into()
}

/// Sign a POST of `body` to `uri` at `time`: the headers to add (`authorization`,
/// `x-amz-date`, and `x-amz-security-token` with a session token). Signed: `host`,
/// `content-type`, `x-amz-date` (and the token); the payload's hash is part of it.
pub fn signature(
    identity: &Identity,
    region: &str,
    uri: &http::Uri,
    headers: &HeaderMap,
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let params = v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let signed = [http::header::HOST, http::header::CONTENT_TYPE];
    let signed_headers = signed.iter().filter_map(|name| {
        let value = headers.get(name)?.to_str().ok()?;
        Some((name.as_str(), value))
    });
    let uri = uri.to_string();
    let request = SignableRequest::new("POST", uri, signed_headers, SignableBody::Bytes(body))
        .map_err(|e| e.to_string())?;
    let (instructions, _) = sign(request, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    let (headers, _) = instructions.into_parts();
    headers
        .into_iter()
        .map(|h| {
            let name = HeaderName::from_bytes(h.name().as_bytes()).map_err(|e| e.to_string())?;
            let mut value = HeaderValue::from_str(h.value()).map_err(|e| e.to_string())?;
            value.set_sensitive(h.sensitive());
            Ok((name, value))
        })
        .collect()
}

/// An Anthropic Messages body as Bedrock takes it: without `model` and `stream`, with its
/// `anthropic_version`, and with `betas` (the client's `anthropic-beta`, comma-separated) added
/// to its `anthropic_beta` list. Every other field is kept as it came, in order. A body that is
/// not a JSON object is sent as it is (Bedrock answers it with its own error).
pub fn body(body: &[u8], betas: Option<&str>) -> Vec<u8> {
    let Ok(Fields(fields)) = serde_json::from_slice::<Fields<'_>>(body) else {
        return body.to_vec();
    };
    let mut out = Vec::with_capacity(body.len() + 48);
    out.extend_from_slice(b"{\"anthropic_version\":\"");
    out.extend_from_slice(ANTHROPIC_VERSION.as_bytes());
    out.push(b'"');
    let mut listed: Vec<String> = Vec::new();
    for (key, value) in &fields {
        match key.as_ref() {
            "model" | "stream" | "anthropic_version" => continue,
            "anthropic_beta" => {
                listed = serde_json::from_str(value.get()).unwrap_or_default();
                continue;
            }
            _ => {}
        }
        member(&mut out, key, value.get().as_bytes());
    }
    for beta in betas.into_iter().flat_map(|b| b.split(',')) {
        let beta = beta.trim();
        if !beta.is_empty() && !listed.iter().any(|b| b == beta) {
            listed.push(beta.to_owned());
        }
    }
    if !listed.is_empty() {
        out.extend_from_slice(b",\"anthropic_beta\":");
        let _ = serde_json::to_writer(&mut out, &listed);
    }
    out.push(b'}');
    out
}

/// A Bedrock error answer in Anthropic's envelope, with the status Anthropic would use for it:
/// the exception's name (`x-amzn-ErrorType`, else the body's `__type`) says what it is, and
/// some are sent with a status that says otherwise (a quota exceeded is a 400, a model not
/// ready a 429).
pub fn anthropic_error(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> (StatusCode, Vec<u8>) {
    #[derive(Deserialize)]
    struct Wire<'a> {
        #[serde(borrow, default, alias = "Message")]
        message: Option<Cow<'a, str>>,
        #[serde(borrow, default, rename = "__type")]
        kind: Option<Cow<'a, str>>,
    }
    let wire = serde_json::from_slice::<Wire<'_>>(body).ok();
    let name = headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            wire.as_ref()
                .and_then(|w| w.kind.as_deref().map(str::to_owned))
        })
        .map(|n| exception_name(&n).to_owned())
        .unwrap_or_default();
    let message = match wire.as_ref().and_then(|w| w.message.as_deref()) {
        Some(m) => m.to_owned(),
        None => String::from_utf8_lossy(body).chars().take(1000).collect(),
    };
    let (status, kind) = classify_exception(&name, status, &message);
    let envelope = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": if name.is_empty() { message } else { format!("{name}: {message}") }},
    });
    (status, serde_json::to_vec(&envelope).unwrap_or_default())
}

/// `ThrottlingException:http://internal.amazon.com/...` or `aws.protocol#ThrottlingException`:
/// the name alone.
fn exception_name(raw: &str) -> &str {
    let raw = raw.split(':').next().unwrap_or(raw);
    raw.rsplit('#').next().unwrap_or(raw)
}

/// An exception's status and Anthropic error type.
pub(super) fn classify_exception(
    name: &str,
    status: StatusCode,
    message: &str,
) -> (StatusCode, &'static str) {
    let lower = message.to_ascii_lowercase();
    let too_long = lower.contains("input is too long")
        || lower.contains("prompt is too long")
        || lower.contains("exceed context limit")
        || lower.contains("too many total text bytes");
    match name {
        "ThrottlingException" | "ServiceQuotaExceededException" | "throttlingException" => {
            (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error")
        }
        "ModelNotReadyException"
        | "ServiceUnavailableException"
        | "serviceUnavailableException" => (StatusCode::SERVICE_UNAVAILABLE, "overloaded_error"),
        "ModelTimeoutException" | "modelTimeoutException" => {
            (StatusCode::GATEWAY_TIMEOUT, "api_error")
        }
        "InternalServerException"
        | "internalServerException"
        | "ModelErrorException"
        | "ModelStreamErrorException"
        | "modelStreamErrorException" => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
        "ValidationException" | "validationException" if too_long => (
            StatusCode::BAD_REQUEST,
            // Anthropic's words, so the context-length rules read it.
            "invalid_request_error",
        ),
        "ValidationException" | "validationException" => {
            (StatusCode::BAD_REQUEST, "invalid_request_error")
        }
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "ExpiredTokenException" => (StatusCode::FORBIDDEN, "permission_error"),
        "ResourceNotFoundException" => (StatusCode::NOT_FOUND, "not_found_error"),
        _ => match status.as_u16() {
            429 => (status, "rate_limit_error"),
            401 => (status, "authentication_error"),
            403 => (status, "permission_error"),
            404 => (status, "not_found_error"),
            s if s >= 500 => (status, "api_error"),
            _ => (status, "invalid_request_error"),
        },
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

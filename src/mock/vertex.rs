//! Google Vertex AI: `POST /v1/projects/{p}/locations/{l}/publishers/google/models/{m}:generateContent`
//! (and `:streamGenerateContent`), `.../publishers/anthropic/models/{m}:rawPredict` (and
//! `:streamRawPredict`), and an OAuth 2 token endpoint, `POST /token`.
//!
//! The token endpoint takes the JWT grant of the mock's test service account
//! ([`SERVICE_ACCOUNT_EMAIL`], whose key is `testdata/vertex-service-account.pem`;
//! [`service_account_json`] writes its credentials file): the assertion's RS256 signature, its
//! issuer, audience (the URL it was posted to), scope and lifetime are checked, and a token is
//! issued for `expires_in` seconds (3599, or the `?expires_in=` of the token URL, so a test can
//! make tokens that need refreshing soon). The model endpoints take a bearer token it issued,
//! or [`ACCESS_TOKEN`] (for `access_token = ...` configurations and `switchyard mock` users);
//! anything else is Google's 401.
//!
//! Then a Gemini model is answered as the Gemini API answers (`gemini.rs`: the same plan,
//! faults and text), after Vertex's own check that every content has a role. An Anthropic model
//! is answered as Anthropic's Messages API answers (`anthropic.rs`), after Vertex's checks of
//! the body (its `anthropic_version`, no `model`); the plan's rate limits and overloads come in
//! Google's envelope, as Vertex's quota errors do, its other errors in Anthropic's.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::state::MockState;
use super::RecordedRequest;

/// The mock's test service account.
pub const SERVICE_ACCOUNT_EMAIL: &str = "switchyard-test@switchyard-mock.iam.gserviceaccount.com";
/// Its key's id.
pub const KEY_ID: &str = "0b1f5c6e181a7e3de23d6823ca88c53b2ec9a1d4";
/// The project its credentials file names.
pub const PROJECT: &str = "switchyard-mock";
/// A token the model endpoints always take.
pub const ACCESS_TOKEN: &str = "ya29.switchyard-mock-static-token";
/// The test service account's private key (test-only: it protects nothing).
const PRIVATE_KEY_PEM: &str = include_str!("testdata/vertex-service-account.pem");

/// The credentials file of the test service account, with `token_uri`.
pub fn service_account_json(token_uri: &str) -> String {
    json!({
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": KEY_ID,
        "private_key": PRIVATE_KEY_PEM,
        "client_email": SERVICE_ACCOUNT_EMAIL,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
    })
    .to_string()
}

/// The wire endpoints.
pub(crate) fn routes() -> Router<Arc<MockState>> {
    Router::new()
        .route(
            "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{target}",
            post(predict),
        )
        .route("/token", post(token))
}

async fn predict(
    State(state): State<Arc<MockState>>,
    Path((_project, _location, publisher, target)): Path<(String, String, String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    if let Some(refusal) = unauthorized(&state, &headers) {
        return state.named(refusal);
    }
    let response = match publisher.as_str() {
        "google" => match without_roles(&body) {
            None => super::gemini::respond(&state, &target, &uri, &headers, &body).await,
            Some(refusal) => refusal,
        },
        "anthropic" => anthropic(&state, &target, &headers, &body).await,
        other => google_error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            &format!("Publisher Model `publishers/{other}/models/{target}` not found."),
        ),
    };
    state.named(response)
}

/// The refusal of a bearer token that is neither one the token endpoint issued nor
/// [`ACCESS_TOKEN`].
fn unauthorized(state: &MockState, headers: &HeaderMap) -> Option<Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let known = token.is_some_and(|t| {
        t == ACCESS_TOKEN
            || state
                .issued_tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(t)
    });
    (!known).then(|| google_error(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
    ))
}

/// Vertex's refusal of a Gemini content without a role.
fn without_roles(body: &[u8]) -> Option<Response> {
    let Ok(parsed) = serde_json::from_slice::<Value>(body) else {
        // The Gemini handler says what is wrong with it.
        return None;
    };
    let contents = parsed["contents"].as_array().map_or(&[][..], Vec::as_slice);
    let valid = |c: &Value| matches!(c["role"].as_str(), Some("user" | "model"));
    (!contents.iter().all(valid)).then(|| {
        google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Please use a valid role: user, model.",
        )
    })
}

async fn anthropic(state: &MockState, target: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let (model, stream) = match target.split_once(':') {
        Some((model, "rawPredict")) => (model, false),
        Some((model, "streamRawPredict")) => (model, true),
        _ => {
            return google_error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                &format!("publishers/anthropic/models/{target} is not a Vertex AI operation"),
            )
        }
    };
    let Ok(Value::Object(mut parsed)) = serde_json::from_slice::<Value>(body) else {
        return google_error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "Invalid JSON payload received.",
        );
    };
    if parsed.get("anthropic_version").and_then(Value::as_str)
        != Some(crate::provider::vertex::ANTHROPIC_VERSION)
    {
        return anthropic_error(
            StatusCode::BAD_REQUEST,
            "anthropic_version: vertex-2023-10-16 is required",
        );
    }
    if parsed.contains_key("model") {
        return anthropic_error(
            StatusCode::BAD_REQUEST,
            "model: Extra inputs are not permitted",
        );
    }
    parsed.insert("model".into(), Value::String(model.to_owned()));
    if stream {
        parsed.insert("stream".into(), Value::Bool(true));
    }
    match super::anthropic::answer(state, headers, Ok(Value::Object(parsed)), false).await {
        Ok(response) => response,
        // Vertex's quota and capacity errors are its own.
        Err(r) if r.body.is_none() && r.status == StatusCode::TOO_MANY_REQUESTS => google_error(
            r.status,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude. Please submit a quota increase request.",
        ),
        Err(r) if r.body.is_none() && matches!(r.status.as_u16(), 503 | 529) => google_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "The service is currently unavailable.",
        ),
        Err(r) => r.into_response(),
    }
}

fn anthropic_error(status: StatusCode, message: &str) -> Response {
    let body =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
    (status, Json(body)).into_response()
}

/// Google's error envelope, in the array Vertex wraps it in.
fn google_error(status: StatusCode, word: &str, message: &str) -> Response {
    let body = json!([{"error": {"code": status.as_u16(), "message": message, "status": word}}]);
    (status, Json(body)).into_response()
}

/// `POST /token`: the JWT grant of the test service account.
async fn token(
    State(state): State<Arc<MockState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.record(RecordedRequest::capture(&method, &uri, &headers, &body));
    let refuse = |error: &str, description: &str| {
        let body = json!({"error": error, "error_description": description});
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    };
    let form = String::from_utf8_lossy(&body);
    let field = |name: &str| {
        form.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| unescape(v))
    };
    if field("grant_type").as_deref() != Some(crate::provider::vertex::auth::JWT_GRANT) {
        return refuse("unsupported_grant_type", "Invalid grant_type.");
    }
    let Some(assertion) = field("assertion") else {
        return refuse("invalid_request", "Missing required parameter: assertion");
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let audience = format!("http://{host}{uri}");
    if let Err(why) = verify_assertion(&assertion, &audience) {
        return refuse("invalid_grant", &why);
    }
    let lifetime = uri
        .query()
        .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("expires_in=")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(3599);
    let token = format!("ya29.mock-{:016x}", fastrand::u64(..));
    state
        .issued_tokens
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(token.clone());
    Json(json!({"access_token": token, "expires_in": lifetime, "token_type": "Bearer"}))
        .into_response()
}

/// The claims of a JWT the test service account signed for `audience`, or why it is refused.
pub fn verify_assertion(jwt: &str, audience: &str) -> Result<Value, String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [head, claims, signature] = parts[..] else {
        return Err("Invalid JWT: not three parts".into());
    };
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| "Invalid JWT: not base64url")
    };
    let header: Value = serde_json::from_slice(&decode(head)?).map_err(|_| "Invalid JWT header")?;
    if header["alg"] != "RS256" {
        return Err("Invalid JWT: alg must be RS256".into());
    }
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        public_key(),
    )
    .verify(format!("{head}.{claims}").as_bytes(), &decode(signature)?)
    .map_err(|_| "Invalid JWT Signature.")?;
    let claims: Value =
        serde_json::from_slice(&decode(claims)?).map_err(|_| "Invalid JWT claims")?;
    if claims["iss"] != SERVICE_ACCOUNT_EMAIL {
        return Err("Invalid JWT: unknown issuer".into());
    }
    if claims["aud"] != audience {
        return Err(format!("Invalid JWT: audience must be {audience}"));
    }
    if !claims["scope"].as_str().is_some_and(|s| {
        s.split(' ')
            .any(|s| s == crate::provider::vertex::auth::SCOPE)
    }) {
        return Err("Invalid JWT: scope must include cloud-platform".into());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
    match (iat, exp) {
        (Some(iat), Some(exp)) if exp > iat && exp - iat <= 3600 && iat <= now + 300 && exp > now => {}
        _ => return Err("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.".into()),
    }
    Ok(claims)
}

/// The public half of the test service account's key (`RSAPublicKey`, DER).
fn public_key() -> &'static [u8] {
    static KEY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    KEY.get_or_init(public_key_of_pem)
}

fn public_key_of_pem() -> Vec<u8> {
    use ring::signature::KeyPair;
    let text = service_account_json("http://mock/token");
    match crate::config::parse_google_credentials(&text) {
        Ok((crate::config::GoogleCredentials::ServiceAccount { private_key, .. }, _)) => {
            ring::signature::RsaKeyPair::from_pkcs8(&private_key)
                .map(|k| k.public_key().as_ref().to_vec())
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// A form value, percent- and plus-decoded.
fn unescape(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

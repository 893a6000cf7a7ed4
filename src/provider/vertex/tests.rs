use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::auth::TokenSource;
use super::*;
use crate::config::{GoogleCredentials, ProviderKind, VertexConfig};

fn config(location: &str, base_url: &str) -> ProviderConfig {
    ProviderConfig {
        name: "vertex".into(),
        kind: ProviderKind::Vertex,
        base_url: base_url.into(),
        api_key: None,
        api_version: String::new(),
        connect_timeout: Duration::from_secs(2),
        responses: false,
        aws: None,
        vertex: Some(VertexConfig {
            project: "my-project".into(),
            location: location.into(),
            credentials: GoogleCredentials::AccessToken("t".into()),
        }),
    }
}

#[test]
fn urls_name_the_project_location_publisher_and_operation() {
    let c = config("us-east5", "https://us-east5-aiplatform.googleapis.com/");
    let base = "https://us-east5-aiplatform.googleapis.com/v1/projects/my-project/locations/us-east5/publishers";
    assert_eq!(
        chat_url(&c, "gemini-2.5-pro", false),
        format!("{base}/google/models/gemini-2.5-pro:generateContent")
    );
    assert_eq!(
        chat_url(&c, "gemini-2.5-pro", true),
        format!("{base}/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse")
    );
    assert_eq!(
        chat_url(&c, "claude-sonnet-4-5@20250929", false),
        format!("{base}/anthropic/models/claude-sonnet-4-5@20250929:rawPredict")
    );
    assert_eq!(
        chat_url(&c, "claude-sonnet-4-5@20250929", true),
        format!("{base}/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict")
    );
    // Every URL is one the HTTP client takes.
    for (model, stream) in [
        ("claude-opus-4-1@20250805", true),
        ("gemini-2.5-flash", false),
    ] {
        assert!(chat_url(&c, model, stream).parse::<http::Uri>().is_ok());
    }
}

#[test]
fn an_anthropic_body_loses_its_model_and_gets_vertexs_version_in_order() {
    let body = br#"{"model":"claude-sonnet-4-5","max_tokens":5,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"enabled","budget_tokens":1024},"x_unknown":1.50}"#;
    let out = body_of(Publisher::Anthropic, body);
    assert_eq!(
        out,
        r#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"thinking":{"type":"enabled","budget_tokens":1024},"x_unknown":1.50}"#
    );
    // A client's own version is replaced, not doubled.
    let out = body_of(
        Publisher::Anthropic,
        br#"{"anthropic_version":"bedrock-2023-05-31","messages":[]}"#,
    );
    assert_eq!(
        out,
        r#"{"anthropic_version":"vertex-2023-10-16","messages":[]}"#
    );
}

fn body_of(publisher: Publisher, body: &[u8]) -> String {
    String::from_utf8(super::body(publisher, body.to_vec())).unwrap()
}

#[test]
fn a_gemini_body_is_sent_as_the_gemini_api_takes_it() {
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"text":"b","thoughtSignature":"c2ln"}]}],"generationConfig":{"temperature":0.70}}"#;
    assert_eq!(body_of(Publisher::Google, body).as_bytes(), body);
    // Not JSON: sent as it is (Vertex answers it).
    assert_eq!(body_of(Publisher::Anthropic, b"{nope"), "{nope");
}

#[test]
fn googles_errors_are_made_anthropics_for_claude() {
    let google = br#"[{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model","status":"RESOURCE_EXHAUSTED"}}]"#;
    // A Gemini model's: the Gemini dialect reads it as it is.
    assert!(error_answer(Publisher::Google, StatusCode::TOO_MANY_REQUESTS, google).is_none());
    let err = crate::canonical::Dialect::Gemini.parse_error(429, google);
    assert_eq!(err.class, crate::canonical::ErrorClass::RateLimited);

    let (status, body) =
        error_answer(Publisher::Anthropic, StatusCode::TOO_MANY_REQUESTS, google).unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("RESOURCE_EXHAUSTED: Quota exceeded"));
    let unavailable = br#"{"error":{"code":503,"message":"down","status":"UNAVAILABLE"}}"#;
    let (status, body) = error_answer(
        Publisher::Anthropic,
        StatusCode::SERVICE_UNAVAILABLE,
        unavailable,
    )
    .unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["type"],
        "overloaded_error"
    );
    // Anthropic's own errors pass as they came.
    let own = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5 tokens > 4 maximum"}}"#;
    assert!(error_answer(Publisher::Anthropic, StatusCode::BAD_REQUEST, own).is_none());
}

#[test]
fn models_are_published_by_their_names() {
    assert_eq!(
        Publisher::of("claude-sonnet-4-5@20250929"),
        Publisher::Anthropic
    );
    assert_eq!(Publisher::of("gemini-2.5-pro"), Publisher::Google);
    assert_eq!(
        crate::wire::transcode::dialect_of(ProviderKind::Vertex, "claude-3-haiku@20240307"),
        crate::canonical::Dialect::Anthropic
    );
    assert_eq!(
        crate::wire::transcode::dialect_of(ProviderKind::Vertex, "gemini-2.0-flash"),
        crate::canonical::Dialect::Gemini
    );
}

/// The mock's test service account, as its credentials file has it.
fn service_account(token_uri: &str) -> GoogleCredentials {
    let text = crate::mock::vertex::service_account_json(token_uri);
    crate::config::parse_google_credentials(&text).unwrap().0
}

#[tokio::test]
async fn a_service_account_signs_a_jwt_the_mock_verifies() {
    let creds = service_account("http://127.0.0.1:9/token");
    let source = TokenSource::new(&creds, Duration::from_secs(1))
        .unwrap()
        .unwrap();
    let jwt = source.assertion_for_test();
    let claims = crate::mock::vertex::verify_assertion(&jwt, "http://127.0.0.1:9/token")
        .expect("the mock accepts the gateway's JWT");
    assert_eq!(claims["iss"], crate::mock::vertex::SERVICE_ACCOUNT_EMAIL);
    assert_eq!(claims["scope"], super::auth::SCOPE);
    let exp = claims["exp"].as_u64().unwrap();
    let iat = claims["iat"].as_u64().unwrap();
    assert_eq!(exp - iat, 3600);
    let header: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(jwt.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        header,
        json!({"alg": "RS256", "typ": "JWT", "kid": crate::mock::vertex::KEY_ID})
    );
    // Another audience, or a changed claim, is refused.
    assert!(crate::mock::vertex::verify_assertion(&jwt, "http://elsewhere/token").is_err());
    let mut parts: Vec<&str> = jwt.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(
        serde_json::to_vec(&json!({"iss": "someone@else", "aud": "http://127.0.0.1:9/token"}))
            .unwrap(),
    );
    parts[1] = &forged;
    assert!(
        crate::mock::vertex::verify_assertion(&parts.join("."), "http://127.0.0.1:9/token")
            .is_err()
    );
}

#[test]
fn credentials_files_are_read_and_their_secrets_never_printed() {
    let creds = service_account("https://oauth2.googleapis.com/token");
    let GoogleCredentials::ServiceAccount {
        client_email,
        key_id,
        token_uri,
        ..
    } = &creds
    else {
        panic!("a service account");
    };
    assert_eq!(client_email, crate::mock::vertex::SERVICE_ACCOUNT_EMAIL);
    assert_eq!(key_id.as_deref(), Some(crate::mock::vertex::KEY_ID));
    assert_eq!(token_uri, "https://oauth2.googleapis.com/token");
    let printed = format!(
        "{:?}",
        VertexConfig {
            project: "p".into(),
            location: "global".into(),
            credentials: creds
        }
    );
    assert!(
        !printed.contains("PRIVATE") && !printed.contains("MII"),
        "{printed}"
    );
    let user = r#"{"type":"authorized_user","client_id":"id.apps.googleusercontent.com","client_secret":"s3cret","refresh_token":"1//r3fresh","quota_project_id":"q-project"}"#;
    let (creds, project) = crate::config::parse_google_credentials(user).unwrap();
    assert_eq!(project.as_deref(), Some("q-project"));
    let GoogleCredentials::AuthorizedUser { token_uri, .. } = &creds else {
        panic!("an authorized user");
    };
    assert_eq!(token_uri, "https://oauth2.googleapis.com/token");
    assert!(!creds.describe().contains("s3cret") && !creds.describe().contains("r3fresh"));
    for (text, says) in [
        ("{", "is not valid JSON"),
        (
            r#"{"type":"external_account"}"#,
            "of type `external_account`",
        ),
        (
            r#"{"type":"service_account","client_email":"a@b"}"#,
            "has no `private_key`",
        ),
        (
            r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#,
            "not a PEM PKCS#8 RSA key",
        ),
    ] {
        let err = crate::config::parse_google_credentials(text).unwrap_err();
        assert!(err.contains(says), "{text}: {err}");
    }
}

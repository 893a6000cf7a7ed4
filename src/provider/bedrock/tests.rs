use std::time::{Duration, SystemTime};

use super::*;
use crate::config::AwsKeys;

fn example_identity(token: Option<&str>) -> Identity {
    identity(&AwsKeys {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: token.map(str::to_owned),
    })
}

/// 2015-08-30T12:36:00Z, the AWS test suite's time.
fn suite_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

fn signed(uri: &str, body: &[u8], token: Option<&str>) -> Vec<(String, String)> {
    let uri: http::Uri = uri.parse().unwrap_or_default();
    let mut headers = HeaderMap::new();
    let host = uri.host().unwrap_or_default().to_owned();
    headers.insert(
        http::header::HOST,
        HeaderValue::from_str(&host).unwrap_or(HeaderValue::from_static("")),
    );
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let out = signature(
        &example_identity(token),
        "us-east-1",
        &uri,
        &headers,
        body,
        suite_time(),
    );
    out.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
        .collect()
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> &'a str {
    h.iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

const VECTOR_BODY: &[u8] = br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn a_model_id_is_signed_as_the_path_sends_it() {
    // Known answers, computed by an implementation of the published algorithm apart from the
    // crate (the colon of the model id sent as %3A, so signed as %253A).
    let model = "anthropic.claude-sonnet-4-5-20250929-v1:0";
    let config = ProviderConfig {
        name: "b".into(),
        kind: crate::config::ProviderKind::Bedrock,
        base_url: "https://bedrock-runtime.us-east-1.amazonaws.com".into(),
        api_key: None,
        api_version: String::new(),
        connect_timeout: Duration::from_secs(2),
        responses: false,
        aws: None,
        vertex: None,
    };
    let url = chat_url(&config, model, false);
    assert_eq!(
        url,
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    );
    assert!(chat_url(&config, model, true).ends_with("v1%3A0/invoke-with-response-stream"));
    let h = signed(&url, VECTOR_BODY, None);
    assert_eq!(header(&h, "x-amz-date"), "20150830T123600Z");
    assert_eq!(
        header(&h, "authorization"),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
         SignedHeaders=content-type;host;x-amz-date, \
         Signature=2073d82eb7d5c37b5737b7eee1966dff1fa7938b7017f1d1d11322d32b2ade54"
    );
    assert_eq!(header(&h, "x-amz-security-token"), "");
}

#[test]
fn a_session_token_is_sent_and_signed() {
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke";
    let h = signed(url, b"{}", Some("session-token-1"));
    assert_eq!(header(&h, "x-amz-security-token"), "session-token-1");
    assert!(header(&h, "authorization")
        .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"));
}

#[test]
fn model_ids_of_every_form_are_one_path_segment() {
    assert_eq!(
        escape_segment("us.anthropic.claude-3-7-sonnet-20250219-v1:0"),
        "us.anthropic.claude-3-7-sonnet-20250219-v1%3A0"
    );
    assert_eq!(
        escape_segment("arn:aws:bedrock:us-east-1:123:inference-profile/x"),
        "arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fx"
    );
}

#[test]
fn the_body_loses_model_and_stream_and_gains_version_and_betas() {
    let body = br#"{"model":"claude","max_tokens":5,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}],"anthropic_beta":["a"],"x\"y":1}"#;
    let out = super::body(body, Some("a, interleaved-thinking-2025-05-14"));
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
    assert_eq!(v["anthropic_version"], ANTHROPIC_VERSION);
    assert!(v.get("model").is_none() && v.get("stream").is_none(), "{v}");
    assert_eq!(v["max_tokens"], 5);
    assert_eq!(
        v["system"][0]["cache_control"]["type"], "ephemeral",
        "kept as it came"
    );
    assert_eq!(v["x\"y"], 1);
    assert_eq!(
        v["anthropic_beta"],
        serde_json::json!(["a", "interleaved-thinking-2025-05-14"])
    );
    // Order kept: the fields after the version are the client's, in its order.
    let text = String::from_utf8(out).unwrap_or_default();
    assert!(
        text.starts_with(r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"system":"#),
        "{text}"
    );
    // Not an object: as it is.
    assert_eq!(super::body(b"[1]", None), b"[1]");
}

#[test]
fn bedrock_errors_read_as_anthropic_ones() {
    let mut h = HeaderMap::new();
    let error = |h: &HeaderMap, status: u16, body: &str| {
        let (status, body) = anthropic_error(
            StatusCode::from_u16(status).unwrap_or_default(),
            h,
            body.as_bytes(),
        );
        let parsed = crate::canonical::anthropic::parse_error(status.as_u16(), &body);
        (status.as_u16(), parsed.class)
    };
    use crate::canonical::ErrorClass;
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static(
            "ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/",
        ),
    );
    assert_eq!(
        error(&h, 400, r#"{"message":"quota"}"#),
        (429, ErrorClass::RateLimited)
    );
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("ThrottlingException"),
    );
    assert_eq!(
        error(&h, 429, r#"{"message":"Too many requests"}"#),
        (429, ErrorClass::RateLimited)
    );
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("ModelNotReadyException"),
    );
    assert_eq!(
        error(&h, 429, r#"{"message":"not ready"}"#),
        (503, ErrorClass::Overloaded)
    );
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("ValidationException"),
    );
    assert_eq!(
        error(
            &h,
            400,
            r#"{"message":"Input is too long for requested model."}"#
        ),
        (400, ErrorClass::ContextLength)
    );
    assert_eq!(
        error(&h, 400, r#"{"message":"messages: field required"}"#).1,
        ErrorClass::Other
    );
    h.insert(
        "x-amzn-errortype",
        HeaderValue::from_static("AccessDeniedException"),
    );
    assert_eq!(
        error(&h, 403, r#"{"Message":"no access"}"#),
        (403, ErrorClass::Auth)
    );
    let none = HeaderMap::new();
    assert_eq!(
        error(&none, 503, "<html>"),
        (503, ErrorClass::from_status(503))
    );
}

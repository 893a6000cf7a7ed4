//! `kind = "bedrock"` against the mock's Bedrock, which checks each call's SigV4 signature with
//! a verifier of its own: both client APIs, streamed (AWS event-stream frames) and not, the body
//! Bedrock wants (no `model`, its `anthropic_version`, `anthropic-beta` in the body), Bedrock's
//! errors classified for failover, Anthropic -> Bedrock failover and back, a bad signature or
//! key as an attempt failure, and the credentials absent from everything sent out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::sigv4::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

const MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
const TARGET: &str = "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0";

/// `ant` (anthropic, on `m[0]`) then `bedrock` (on `m[1]`), in `order`; `auth` is the bedrock
/// provider's credential lines.
fn toml(m: &[MockServer], order: &[&str], auth: &str) -> String {
    let mut s = format!(
        "[audit]\nstore = \"off\"\n\n[[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n",
        m[0].root_url()
    );
    s += &format!(
        "[[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{}\"\n{auth}\n\n",
        m[1].root_url()
    );
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for name in order {
        let model = if *name == "ant" {
            "claude-sonnet-4-5"
        } else {
            MODEL
        };
        s += &format!("  {{ provider = \"{name}\", model = \"{model}\" }},\n");
    }
    s + "]\n[routes.hedge]\nenabled = false\n"
}

fn keys() -> String {
    format!(
        "aws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"{SECRET_ACCESS_KEY}\""
    )
}

fn chat(stream: bool) -> Value {
    json!({
        "model": "chat",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say the canonical text."}
        ]
    })
}

/// The text of an Anthropic SSE stream, and its event names.
fn anthropic_stream(text: &str) -> (String, Vec<String>) {
    let mut answer = String::new();
    let mut kinds = Vec::new();
    for ev in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = ev
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or("{}");
        let v: Value = serde_json::from_str(data).unwrap();
        kinds.push(v["type"].as_str().unwrap_or("").to_owned());
        if let Some(t) = v["delta"]["text"].as_str() {
            answer.push_str(t);
        }
    }
    (answer, kinds)
}

#[tokio::test]
async fn an_openai_client_is_served_by_bedrock_signed_whole_and_streamed() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m, &["bedrock"], &keys())).await;
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let resp = gw.chat(chat(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), TARGET);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    let resp = gw.chat(chat(true)).await;
    assert_eq!(resp.status(), 200);
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");

    let sent = m[1].requests();
    assert_eq!(
        sent[0].path,
        "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
    );
    assert_eq!(
        sent[2].path,
        "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    );
    for s in &sent {
        let auth = s.header("authorization").unwrap();
        assert!(
            auth.starts_with(&format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/")),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
        assert!(s.header("x-amz-date").is_some());
        assert_eq!(s.header("x-api-key"), None);
        assert_eq!(s.body["anthropic_version"], "bedrock-2023-05-31");
        assert!(
            s.body.get("model").is_none() && s.body.get("stream").is_none(),
            "{}",
            s.body
        );
        assert_eq!(s.body["system"], "You are terse.");
    }
    gw.stop().await;
}

#[tokio::test]
async fn an_anthropic_client_passes_through_to_bedrock_with_its_betas_and_cache_markers() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m, &["bedrock"], &keys())).await;
    let resp = anthropic_messages(
        &gw,
        false,
        Some("interleaved-thinking-2025-05-14, context-1m-2025-08-07"),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));

    let resp = anthropic_messages(&gw, true, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "text/event-stream");
    let (answer, kinds) = anthropic_stream(&resp.text().await.unwrap());
    assert_eq!(answer, canonical_text(12, 0));
    assert_eq!(kinds.first().map(String::as_str), Some("message_start"));
    assert_eq!(kinds.last().map(String::as_str), Some("message_stop"));

    let sent = &m[1].requests()[0];
    assert_eq!(
        sent.body["anthropic_beta"],
        json!(["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"])
    );
    assert_eq!(
        sent.header("anthropic-beta"),
        None,
        "in the body, not a header"
    );
    assert_eq!(sent.body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(sent.body["max_tokens"], 256);
    gw.stop().await;
}

#[tokio::test]
async fn anthropic_fails_over_to_bedrock_and_bedrock_to_anthropic() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m, &["ant", "bedrock"], &keys())).await;
    m[0].set_plan(down());
    let resp = anthropic_messages(&gw, true, None).await;
    assert_eq!(header(&resp, "x-switchyard-target"), TARGET);
    assert_eq!(
        anthropic_stream(&resp.text().await.unwrap()).0,
        canonical_text(12, 0)
    );
    gw.stop().await;

    // Bedrock throttled (its 429 shape), or refusing mid-stream before the first token (an
    // exception frame): the next target answers.
    let gw = Gateway::start(&toml(&m, &["bedrock", "ant"], &keys())).await;
    m[0].set_plan(FaultPlan::default());
    m[1].set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(false)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    m[1].set_plan(FaultPlan {
        inband_error_after: Some(0),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(true)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    assert_eq!(
        stream_text(&sse_events(&resp.text().await.unwrap())),
        canonical_text(12, 0)
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_bedrock_stream_cut_mid_answer_is_continued_elsewhere() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m, &["bedrock", "ant"], &keys())).await;
    m[1].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..FaultPlan::default()
    });
    assert_seamless_stream(gw.chat(chat(true)).await).await;
    assert_eq!(m[0].requests().len(), 1, "the continuation");
    gw.stop().await;
}

#[tokio::test]
async fn bedrocks_context_overflow_moves_to_a_larger_window() {
    let m = mocks(2).await;
    let toml = toml(&m, &["bedrock", "ant"], &keys())
        .replace(
            &format!("model = \"{MODEL}\" }}"),
            &format!("model = \"{MODEL}\", context_window = 8000 }}"),
        )
        .replace(
            "model = \"claude-sonnet-4-5\" }",
            "model = \"claude-sonnet-4-5\", context_window = 1000000 }",
        );
    let gw = Gateway::start(&toml).await;
    m[1].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_wrong_secret_is_refused_by_the_signature_check_and_never_shown() {
    let m = mocks(2).await;
    let wrong = format!("aws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"not-the-secret-0123456789\"\naws_session_token = \"session-token-xyz\"");
    let gw = Gateway::start(&toml(&m, &["bedrock"], &wrong)).await;
    let resp = gw.chat(chat(false)).await;
    assert_eq!(
        resp.status(),
        502,
        "a refused credential is the target's failure"
    );
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0: 403"),
        "{text}"
    );
    let sent = &m[1].requests()[0];
    assert_eq!(
        sent.header("x-amz-security-token"),
        Some("session-token-xyz")
    );
    // With a second target the refusal is an attempt failure and the next one answers.
    let gw2 = Gateway::start(&toml(&m, &["bedrock", "ant"], &wrong)).await;
    let resp = gw2.chat(chat(false)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    for out in [
        text,
        get_json(&gw2, "/admin/status").await.to_string(),
        metrics(&gw2).await,
    ] {
        for secret in ["not-the-secret-0123456789", "session-token-xyz"] {
            assert!(!out.contains(secret), "a credential leaked: {out}");
        }
    }
    gw.stop().await;
    gw2.stop().await;
}

#[tokio::test]
async fn a_bedrock_api_key_is_a_bearer_token() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m, &["bedrock"], "api_key = \"${TEST_KEY}\"")).await;
    m[1].set_plan(FaultPlan {
        expect_api_key: Some("sk-test-secret".into()),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(true)).await;
    let text = resp.text().await.unwrap();
    assert_eq!(
        stream_text(&sse_events(&text)),
        canonical_text(12, 0),
        "{text}"
    );
    let sent = &m[1].requests()[0];
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test-secret"));
    assert_eq!(sent.header("x-amz-date"), None, "not signed");
    m[1].set_plan(FaultPlan {
        expect_api_key: Some("another-key".into()),
        ..FaultPlan::default()
    });
    let refused = gw.chat(chat(false)).await.text().await.unwrap();
    assert!(refused.contains(": 403 after"), "{refused}");
    gw.stop().await;
}

#[tokio::test]
async fn a_responses_api_client_is_served_by_bedrock_streamed() {
    let m = mocks(2).await;
    let toml = toml(&m, &["bedrock"], &keys()) + "\n[responses]\nstore = \"off\"\n";
    let gw = Gateway::start(&toml).await;
    let body = json!({"model": "chat", "input": "Say the canonical text.", "stream": true, "store": false});
    let resp = support::responses::create(&gw, &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), TARGET);
    let evs = support::responses::events(&resp.text().await.unwrap());
    assert_eq!(support::responses::deltas(&evs), canonical_text(12, 0));
    assert_eq!(
        evs.last().map(|(n, _)| n.as_str()),
        Some("response.completed")
    );
    let sent = &m[1].requests()[0];
    assert!(sent.path.ends_with("/invoke-with-response-stream"));
    assert_eq!(sent.body["anthropic_version"], "bedrock-2023-05-31");
    gw.stop().await;
}

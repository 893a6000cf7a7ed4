//! No provider key leaves the gateway, even when the provider itself echoes it: its client
//! error passed through as is, a failure's message, a stream's error event, and after a reload
//! that brings in a new key, the audit record too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::audit::TestStore;
use support::*;
use switchyard::mock::FaultPlan;

/// The provider key of every test provider (`TEST_KEY`). Too short for the `sk-...` shape
/// (16 characters after `sk-`): only the configured key itself can mask it.
const KEY: &str = "sk-test-secret";

/// A 401 as OpenAI words it, with the key it was given.
fn echoed_401(key: &str) -> FaultPlan {
    FaultPlan {
        status: Some(401),
        error_body: Some(format!(
            r#"{{"error":{{"message":"Incorrect API key provided: {key}. You can find your API key at https://platform.example/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
        )),
        ..Default::default()
    }
}

/// A provider's 401 returned to the client as it is (`x-switchyard-failover: off`): same
/// status and shape, the key masked, in both client dialects.
#[tokio::test]
async fn a_passed_through_401_that_echoes_the_key_is_masked() {
    let m = mocks(1).await;
    m[0].set_plan(echoed_401(KEY));
    let gw = Gateway::start(&config(&m, "")).await;
    let resp = gw
        .chat_with(chat_body(false), &[("x-switchyard-failover", "off")])
        .await;
    assert_eq!(resp.status(), 401);
    let text = resp.text().await.unwrap();
    assert!(!text.contains(KEY), "the key reached the client: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key", "{text}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Incorrect API key provided: [REDACTED]. You can find"),
        "{message}"
    );
    // The Anthropic API gets the same answer in its own envelope.
    let resp = client()
        .post(gw.url("/v1/messages"))
        .header("x-switchyard-failover", "off")
        .json(&serde_json::json!({
            "model": "chat", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let text = resp.text().await.unwrap();
    assert!(!text.contains(KEY), "{text}");
    assert!(text.contains("[REDACTED]"), "{text}");
    gw.stop().await;
}

/// Every target's stream opens with an in-band error event quoting the key (before any
/// content, so each is failed over): the failure's message, which lists what each attempt
/// said, names no key.
#[tokio::test]
async fn a_failure_message_quoting_the_providers_is_masked() {
    let m = mocks(2).await;
    for mock in &m {
        mock.set_plan(FaultPlan {
            inband_error_after: Some(0),
            error_body: Some(format!(
                r#"{{"error":{{"message":"the key {KEY} is over its quota","type":"server_error"}}}}"#
            )),
            ..Default::default()
        });
    }
    let gw = Gateway::start(&config(&m, "")).await;
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let text = resp.text().await.unwrap();
    assert!(!text.contains(KEY), "the key reached the client: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("error event: the key [REDACTED] is over its quota"),
        "{message}"
    );
    gw.stop().await;
}

/// A stream whose provider sends an in-band error event quoting the key, after content (no
/// continuation: `mid_stream = "error"`): the error event the client gets is masked.
#[tokio::test]
async fn a_stream_error_event_that_echoes_the_key_is_masked() {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        inband_error_after: Some(2),
        error_body: Some(format!(
            r#"{{"error":{{"message":"the key {KEY} was revoked mid-answer","type":"invalid_request_error"}}}}"#
        )),
        ..Default::default()
    });
    let gw = Gateway::start(&config(&m, "mid_stream = \"error\"")).await;
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(!text.contains(KEY), "the key reached the client: {text}");
    let events = sse_events(&text);
    let error = events
        .iter()
        .find(|e| e.get("error").is_some())
        .unwrap_or_else(|| panic!("no error event in {text}"));
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the key [REDACTED] was revoked"),
        "{message}"
    );
    gw.stop().await;
}

fn temp_file(name: &str) -> std::path::PathBuf {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("switchyard-{name}-{}-{n}.toml", std::process::id()))
}

/// A reload that brings in a provider with a new key: the gateway masks that key from then on,
/// in the answer and in the audit record, the stored request body included (the audit writer,
/// which masks bodies, started before the reload, with the first config's keys).
#[tokio::test]
async fn a_key_added_by_a_reload_is_masked_in_the_answer_and_the_audit_record() {
    const NEW_KEY: &str = "reloaded-provider-key-0042";
    let m = mocks(2).await;
    m[1].set_plan(echoed_401(NEW_KEY));
    let store = TestStore::sqlite();
    // `Config::load` reads the real environment: the keys are written out.
    let first = with_audit(&config(&m[..1], ""), &store.url(), "bodies = true")
        .replace("${TEST_KEY}", "first-provider-key-0001");
    let path = temp_file("secrets-reload");
    std::fs::write(&path, &first).unwrap();
    let state =
        switchyard::app::build_state(switchyard::config::Config::load(&path).unwrap()).unwrap();
    let gw = Gateway::serve(state.clone(), None).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);

    let second = first
        + &format!(
            "\n[[providers]]\nname = \"p1\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\napi_key = \"{NEW_KEY}\"\n\n\
             [[routes]]\nname = \"new\"\ntargets = [{{ provider = \"p1\", model = \"model-1\" }}]\n",
            m[1].base_url()
        );
    std::fs::write(&path, second).unwrap();
    switchyard::app::reload(&state, &path).unwrap();
    let mut body = chat_body(false);
    body["model"] = "new".into();
    body["messages"][0]["content"] = format!("is {NEW_KEY} a good key?").into();
    let resp = gw
        .chat_with(body, &[("x-switchyard-failover", "off")])
        .await;
    assert_eq!(resp.status(), 401);
    let id = header(&resp, "x-switchyard-request-id");
    let text = resp.text().await.unwrap();
    assert!(
        !text.contains(NEW_KEY),
        "the key reached the client: {text}"
    );
    assert!(text.contains("[REDACTED]"), "{text}");
    gw.stop().await;
    let _ = std::fs::remove_file(&path);

    let records = store.all().await;
    let rec = records.iter().find(|r| r.request_id == id).unwrap();
    let error = rec.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("Incorrect API key provided: [REDACTED]"),
        "{error}"
    );
    let request = rec.request_body.as_deref().unwrap_or_default();
    assert!(request.contains("is [REDACTED] a good key?"), "{request}");
    let stored = serde_json::to_string(&records).unwrap();
    assert!(
        !stored.contains(NEW_KEY),
        "the key reached the audit log: {stored}"
    );
    store.cleanup().await;
}

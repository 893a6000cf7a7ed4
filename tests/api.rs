//! The client API surface: endpoints, error envelopes, headers, pass-through, Azure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::canonical_text;

#[tokio::test]
async fn models_health_and_unknown_paths() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let resp = client().get(gw.url("/v1/models")).send().await.unwrap();
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    let models: Value = resp.json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "chat");
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            client().get(gw.url(path)).send().await.unwrap().status(),
            200
        );
    }
    let resp = client().get(gw.url("/v2/nothing")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_found");
    // A known path with the wrong method: 405, in the envelope too.
    let resp = client()
        .get(gw.url("/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("GET is not allowed on /v1/chat/completions"));
}

#[tokio::test]
async fn bad_requests_get_openai_errors_and_reach_no_provider() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;

    let resp = gw
        .chat(json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}))
        .await;
    assert_eq!(resp.status(), 404);
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let resp = post_text(&gw, "/v1/chat/completions", "{not json").await;
    assert_eq!(resp.status(), 400);
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));

    let big = "x".repeat(70 * 1024); // max_body is 64KiB in the test config
    let resp = gw
        .chat(json!({"model": "chat", "messages": [{"role": "user", "content": big}]}))
        .await;
    assert_eq!(resp.status(), 413);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_too_large");

    assert_eq!(m[0].stats().requests, 0);
}

#[tokio::test]
async fn unknown_fields_pass_through_and_the_model_is_rewritten() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let body = json!({
        "model": "chat",
        "messages": [{"role": "user", "content": "héllo \"quoted\""}],
        "temperature": 0.3,
        "a_parameter_from_the_future": {"nested": [1, 2, {"x": null}]},
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    });
    let resp = gw.chat(body.clone()).await;
    assert_eq!(resp.status(), 200);
    let sent = &m[0].requests()[0];
    let mut expected = body;
    expected["model"] = json!("model-0");
    assert_eq!(sent.body, expected);
    let auth = sent
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.as_str());
    assert_eq!(auth, Some("Bearer sk-test-secret"));
}

#[tokio::test]
async fn azure_targets_use_the_deployment_url_key_header_and_api_version() {
    let m = mocks(2).await;
    let toml = format!(
        "[[providers]]\nname = \"oai\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"az\"\nkind = \"azure\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\napi_version = \"2024-10-21\"\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"oai\", model = \"gpt-4o\" }}, {{ provider = \"az\", deployment = \"gpt-4o-prod\" }}]\n",
        m[0].base_url(),
        m[1].root_url()
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(switchyard::mock::FaultPlan {
        status: Some(500),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "az/gpt-4o-prod");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    assert_eq!(body["model"], "gpt-4o-prod");
    let sent = &m[1].requests()[0];
    assert_eq!(
        sent.path,
        "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
    );
    let key = sent
        .headers
        .iter()
        .find(|(k, _)| k == "api-key")
        .map(|(_, v)| v.as_str());
    assert_eq!(key, Some("sk-test-secret"));
    assert!(sent.headers.iter().all(|(k, _)| k != "authorization"));
}

#[tokio::test]
async fn provider_keys_never_reach_the_client() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(switchyard::mock::FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(false)).await;
    let headers = format!("{:?}", resp.headers());
    let body = resp.text().await.unwrap();
    assert!(!body.contains("sk-test-secret") && !headers.contains("sk-test-secret"));
}

#[tokio::test]
async fn with_client_keys_set_a_request_without_one_gets_401_and_reaches_no_provider() {
    let m = mocks(1).await;
    let toml = with_client_key(&config(&m, ""));
    let gw = Gateway::start(&toml).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 401);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let resp = gw
        .chat_with(chat_body(false), &[("authorization", "Bearer wrong")])
        .await;
    assert_eq!(resp.status(), 401);
    assert_eq!(m[0].stats().requests, 0);
    let resp = gw
        .chat_with(
            chat_body(false),
            &[("authorization", "Bearer sk-test-secret")],
        )
        .await;
    assert_eq!(resp.status(), 200);
    let resp = gw
        .chat_with(chat_body(false), &[("x-api-key", "sk-test-secret")])
        .await;
    assert_eq!(resp.status(), 200);
    // The route list too.
    let resp = client().get(gw.url("/v1/models")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert!(!resp.text().await.unwrap().contains("chat"));
    let resp = client()
        .get(gw.url("/v1/models"))
        .bearer_auth("sk-test-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

//! `POST /v1/responses` through the gateway: passed through to OpenAI and Azure targets' own
//! Responses API (only `model` rewritten, the answer under the gateway's id), stored and read
//! back, scoped by client key, and a conversation kept going by `previous_response_id` when the
//! provider that served its first turn is down. Failover, continuation, hedging and translation
//! are in `tests/responses_failover.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::responses::*;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test]
async fn an_openai_target_gets_the_clients_body_and_the_answer_comes_back_under_a_minted_id() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_of(&m, &["openai"], "")).await;
    let body = json!({
        "model": "agent",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Count"}]}],
        "prompt_cache_key": "conv-1",
        "x_brand_new": {"kept": true},
    });
    let resp = create(&gw, &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    let got: Value = resp.json().await.unwrap();
    let id = got["id"].as_str().unwrap().to_owned();
    assert!(
        id.starts_with("resp_") && !id.starts_with("resp_mock"),
        "{id}"
    );
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        canonical_text(12, 0).as_str()
    );
    let sent = last_request(&m[0]);
    assert_eq!(sent.path, "/v1/responses");
    let mut want = body.clone();
    want["model"] = json!("model-0");
    assert_eq!(
        sent.body, want,
        "the body went on as it came, only `model` rewritten"
    );
    // Stored: it reads back, with its input.
    let again: Value = client()
        .get(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again, got);
    let items: Value = client()
        .get(gw.url(&format!("/v1/responses/{id}/input_items")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "Count", "{items}");
    let deleted = client()
        .delete(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let gone = client()
        .get(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    let gone: Value = gone.json().await.unwrap();
    assert_eq!(
        gone["error"]["code"], "not_found",
        "the OpenAI envelope: {gone}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_conversation_goes_on_at_the_backup_when_its_first_turn_was_served_by_a_target_now_down()
{
    let store = support::audit::TestStore::sqlite();
    conversation_survives_failover(&store.url()).await;
    store.cleanup().await;
}

#[tokio::test]
async fn a_conversation_stored_in_postgresql_goes_on_after_a_restart_at_the_backup() {
    let store = support::audit::TestStore::postgres().await;
    conversation_survives_failover(&store.url()).await;
    store.cleanup().await;
}

/// Turn 1 on the primary; the gateway restarts (what it kept is read back from `store`) and the
/// primary goes down; turn 2 names turn 1 and is answered by the backup, which gets the whole
/// conversation; turn 3, the primary back, gets its own reasoning with the history.
async fn conversation_survives_failover(store: &str) {
    let m = mocks(2).await;
    let toml = config_in(store, &m, &["openai", "openai"], "");
    let gw = Gateway::start(&toml).await;
    // Turn 1, with reasoning the primary seals for itself.
    let first: Value = create(
        &gw,
        &json!({
            "model": "agent",
            "input": "Count",
            "reasoning": {"effort": "low"},
            "include": ["reasoning.encrypted_content"],
        }),
    )
    .await
    .json()
    .await
    .unwrap();
    let first_id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(first["output"][0]["type"], "reasoning", "{first}");
    gw.stop().await;
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(down());
    // Turn 2 names turn 1; the primary is down, the backup never saw turn 1.
    let resp = create(
        &gw,
        &json!({"model": "agent", "previous_response_id": first_id, "input": "And again"}),
    )
    .await;
    let status = resp.status();
    let target = header(&resp, "x-switchyard-target");
    let second: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{second}");
    assert_eq!(target, "p1/model-1");
    let sent = last_request(&m[1]).body;
    assert!(
        sent.get("previous_response_id").is_none(),
        "expanded, not forwarded: {sent}"
    );
    let input = sent["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        ["message", "message", "message"],
        "turn 1's question and answer, then turn 2; the primary's reasoning stays with it: {sent}"
    );
    assert_eq!(input[0]["content"], "Count");
    assert_eq!(input[2]["content"], "And again");
    assert!(
        input[1].get("id").is_none(),
        "no item id only the primary knows: {sent}"
    );
    // Back on the primary, its own reasoning goes with the history.
    m[0].set_plan(FaultPlan::default());
    let second_id = second["id"].as_str().unwrap().to_owned();
    let third = create(
        &gw,
        &json!({"model": "agent", "previous_response_id": second_id, "input": "Once more"}),
    )
    .await;
    assert_eq!(third.status(), 200);
    assert_eq!(header(&third, "x-switchyard-target"), "p0/model-0");
    let sent = last_request(&m[0]).body;
    let input = sent["input"].as_array().unwrap();
    assert_eq!(input.len(), 5, "three turns of history: {sent}");
    gw.stop().await;
}

#[tokio::test]
async fn an_unknown_previous_response_is_a_404_and_reaches_no_provider() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_of(&m, &["openai"], "")).await;
    let resp = create(
        &gw,
        &json!({"model": "agent", "previous_response_id": "resp_nope", "input": "Hi"}),
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["code"], "previous_response_not_found", "{err}");
    assert_eq!(m[0].stats().requests, 0);
    gw.stop().await;
}

#[tokio::test]
async fn store_false_keeps_nothing_and_passes_the_providers_id_on() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_of(&m, &["openai"], "")).await;
    let got: Value = create(
        &gw,
        &json!({"model": "agent", "input": "Hi", "store": false}),
    )
    .await
    .json()
    .await
    .unwrap();
    let id = got["id"].as_str().unwrap();
    assert!(
        id.starts_with("resp_mock"),
        "the provider's answer as it came: {id}"
    );
    let read = client()
        .get(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 404);
    gw.stop().await;
}

#[tokio::test]
async fn one_client_key_cannot_read_continue_or_delete_another_keys_responses() {
    let m = mocks(1).await;
    let toml = config_of(&m, &["openai"], "")
        + "\n[auth]\nkeys = [\"sk-alice-0123456789\", \"sk-bob-0123456789\"]\n";
    let gw = Gateway::start(&toml).await;
    let as_key = |key: &'static str, req: reqwest::RequestBuilder| req.bearer_auth(key);
    let made: Value = as_key(
        "sk-alice-0123456789",
        client().post(gw.url("/v1/responses")),
    )
    .json(&json!({"model": "agent", "input": "Secret plans"}))
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = made["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/responses/{id}");
    for key in ["sk-alice-0123456789", "sk-bob-0123456789"] {
        let read = as_key(key, client().get(gw.url(&path)))
            .send()
            .await
            .unwrap();
        let items = as_key(key, client().get(gw.url(&format!("{path}/input_items"))))
            .send()
            .await
            .unwrap();
        let want = if key.contains("alice") { 200 } else { 404 };
        assert_eq!(read.status(), want, "{key}");
        assert_eq!(items.status(), want, "{key}");
    }
    let before = m[0].stats().requests;
    let continued = as_key("sk-bob-0123456789", client().post(gw.url("/v1/responses")))
        .json(&json!({"model": "agent", "previous_response_id": id, "input": "And?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        continued.status(),
        404,
        "bob cannot continue alice's conversation"
    );
    assert_eq!(
        m[0].stats().requests,
        before,
        "nor reach a provider with it"
    );
    let deleted = as_key("sk-bob-0123456789", client().delete(gw.url(&path)))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 404);
    let anonymous = client().get(gw.url(&path)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let still = as_key("sk-alice-0123456789", client().get(gw.url(&path)))
        .send()
        .await
        .unwrap();
    assert_eq!(still.status(), 200, "bob's delete removed nothing");
    gw.stop().await;
}

#[tokio::test]
async fn a_store_false_clients_encrypted_reasoning_goes_back_only_to_the_provider_that_made_it() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_of(&m, &["openai", "openai"], "")).await;
    // Turn 1, streamed, as Codex asks: nothing stored, reasoning sealed by the primary.
    let turn = |input: Value, stream: bool| {
        json!({
            "model": "agent",
            "input": input,
            "store": false,
            "stream": stream,
            "reasoning": {"effort": "low"},
            "include": ["reasoning.encrypted_content"],
        })
    };
    let question = json!({"type": "message", "role": "user", "content": "Count"});
    let body = create(&gw, &turn(json!([question]), true))
        .await
        .text()
        .await
        .unwrap();
    let (_, completed) = events(&body).pop().unwrap();
    let output = completed["response"]["output"].as_array().unwrap().clone();
    assert_eq!(output[0]["type"], "reasoning", "{completed}");
    assert!(output[0]["encrypted_content"].is_string(), "{completed}");
    let mut history = vec![question];
    history.extend(output);
    history.push(json!({"type": "message", "role": "user", "content": "Again"}));
    // The primary is down: the backup gets the history without the primary's reasoning.
    m[0].set_plan(down());
    let resp = create(&gw, &turn(Value::Array(history.clone()), false)).await;
    let status = resp.status();
    let target = header(&resp, "x-switchyard-target");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        status, 200,
        "the backup did not get a seal it cannot read: {answer}"
    );
    assert_eq!(target, "p1/model-1");
    let sent = last_request(&m[1]).body;
    let kinds: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(kinds, ["message", "message", "message"], "{sent}");
    // The primary back: it gets its own reasoning as the client sent it.
    m[0].set_plan(FaultPlan::default());
    let resp = create(&gw, &turn(Value::Array(history.clone()), false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(
        last_request(&m[0]).body["input"],
        Value::Array(history),
        "as the client sent it"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_responses_request_is_in_the_audit_log_with_its_path() {
    let m = mocks(2).await;
    let store = support::audit::TestStore::sqlite();
    let toml = config_of(&m, &["openai", "openai-compatible"], "").replacen(
        "[audit]\nstore = \"off\"\n",
        &format!("[audit]\nstore = \"{}\"\n", store.url()),
        1,
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(down());
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": "Count", "stream": true}),
    )
    .await;
    let request_id = header(&resp, "x-switchyard-request-id");
    assert_eq!(resp.status(), 200);
    let _ = resp.text().await.unwrap();
    gw.stop().await;
    let records = store.all().await;
    let rec = records
        .iter()
        .find(|r| r.request_id == request_id)
        .expect("the request's record");
    assert_eq!(rec.status, 200);
    assert_eq!(rec.target.as_deref(), Some("p1/model-1"));
    let path: Vec<(&str, &str)> = rec
        .path
        .iter()
        .map(|a| (a.target.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(
        path,
        [("p0/model-0", "status"), ("p1/model-1", "ok")],
        "{rec:?}"
    );
    assert!(rec.stream && rec.ttft_ms.is_some());
    store.cleanup().await;
}

#[tokio::test]
async fn an_azure_target_gets_the_clients_body_at_its_v1_responses_endpoint() {
    let m = mocks(1).await;
    let toml = format!(
        "[audit]\nstore = \"off\"\n\n[responses]\nstore = \"off\"\n\n\
         [[providers]]\nname = \"az\"\nkind = \"azure\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"agent\"\ntargets = [{{ provider = \"az\", deployment = \"gpt-prod\" }}]\n",
        m[0].root_url()
    );
    let gw = Gateway::start(&toml).await;
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": "Count", "x_new": 1}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let got: Value = resp.json().await.unwrap();
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        canonical_text(12, 0).as_str()
    );
    let sent = last_request(&m[0]);
    assert_eq!(sent.path, "/openai/v1/responses");
    assert_eq!(
        sent.body,
        json!({"model": "gpt-prod", "input": "Count", "x_new": 1})
    );
    assert_eq!(sent.header("api-key"), Some("sk-test-secret"));
    gw.stop().await;
}

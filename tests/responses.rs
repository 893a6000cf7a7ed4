//! `POST /v1/responses` through the gateway: passed through to OpenAI targets' own Responses API
//! (only `model` rewritten, the answer under the gateway's id), failed over before the commit
//! point, stored and read back, and a conversation kept going by `previous_response_id` when the
//! provider that served its first turn is down.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

/// A gateway over `mocks` as `kind` providers p0, p1, ... and one route `agent` in that order,
/// its responses stored in a SQLite file of its own.
fn config_of(mocks: &[MockServer], kinds: &[&str], extra: &str) -> String {
    config_in(&responses_db(), mocks, kinds, extra)
}

/// As [`config_of`], the responses stored in `store` (a `sqlite://` or `postgres://` URL).
fn config_in(store: &str, mocks: &[MockServer], kinds: &[&str], extra: &str) -> String {
    let mut toml = format!("[audit]\nstore = \"off\"\n\n[responses]\nstore = \"{store}\"\n\n");
    for (i, (mock, kind)) in mocks.iter().zip(kinds).enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"{kind}\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n",
            mock.base_url()
        );
    }
    toml += "[[routes]]\nname = \"agent\"\ntargets = [\n";
    for i in 0..mocks.len() {
        toml += &format!("  {{ provider = \"p{i}\", model = \"model-{i}\" }},\n");
    }
    toml += "]\n";
    toml += extra;
    toml
}

async fn create(gw: &Gateway, body: &Value) -> reqwest::Response {
    client()
        .post(gw.url("/v1/responses"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `(event name, data)` pairs of an SSE body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|block| block.lines().any(|l| l.starts_with("data: ")))
        .map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, serde_json::from_str(&data).unwrap_or(Value::Null))
        })
        .collect()
}

/// The text of a stream's `response.output_text.delta` events.
fn deltas(evs: &[(String, Value)]) -> String {
    evs.iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap_or_default())
        .collect()
}

/// The `sequence_number`s of a stream's events.
fn sequence(evs: &[(String, Value)]) -> Vec<u64> {
    evs.iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect()
}

fn last_request(m: &MockServer) -> switchyard::mock::RecordedRequest {
    m.requests()
        .last()
        .cloned()
        .expect("the mock got a request")
}

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
async fn a_streamed_response_fails_over_before_its_first_token_and_keeps_the_event_order() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_of(&m, &["openai", "openai"], "")).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": "Count", "stream": true}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    let body = resp.text().await.unwrap();
    let evs = events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"), "{body}");
    assert_eq!(names.last(), Some(&"response.completed"), "{body}");
    let text = deltas(&evs);
    assert_eq!(text, canonical_text(12, 0));
    let seq = sequence(&evs);
    assert_eq!(
        seq,
        (0..seq.len() as u64).collect::<Vec<_>>(),
        "as the provider numbered them"
    );
    let id = evs[0].1["response"]["id"].as_str().unwrap().to_owned();
    assert!(!id.starts_with("resp_mock"), "the gateway's id: {id}");
    assert_eq!(evs.last().unwrap().1["response"]["id"], id.as_str());
    // The completed stream was stored.
    let again = client()
        .get(gw.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
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
async fn a_passed_through_stream_cut_mid_answer_is_continued_in_responses_events() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_of(&m, &["openai", "openai-compatible"], "")).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..Default::default()
    });
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": "Count", "stream": true}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    let evs = events(&body);
    let text = deltas(&evs);
    assert_eq!(text, canonical_text(12, 0), "the seam is invisible: {body}");
    let seq = sequence(&evs);
    assert_eq!(
        seq,
        (0..seq.len() as u64).collect::<Vec<_>>(),
        "numbered on across the seam"
    );
    let (last, done) = evs.last().unwrap();
    assert_eq!(last, "response.completed", "{body}");
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        canonical_text(12, 0).as_str(),
        "the completed response has the whole text: {done}"
    );
    let items: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "response.output_item.added")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(items.len(), 1, "one message item, continued: {body}");
    let continued = last_request(&m[1]);
    assert!(
        continued.path.ends_with("/chat/completions"),
        "the backup continued in Chat Completions: {}",
        continued.path
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_built_in_tool_skips_targets_that_cannot_run_it_and_is_a_400_when_none_can() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_of(&m, &["openai-compatible", "openai"], "")).await;
    let body = json!({"model": "agent", "input": "News?", "tools": [{"type": "web_search"}]});
    let resp = create(&gw, &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(
        header(&resp, "x-switchyard-attempts"),
        "2",
        "the skip is on the path"
    );
    assert_eq!(
        m[0].stats().requests,
        0,
        "the Chat-only target was not asked"
    );
    assert_eq!(
        last_request(&m[1]).body["tools"],
        json!([{"type": "web_search"}])
    );
    m[1].set_plan(down());
    let resp = create(&gw, &body).await;
    let status = resp.status();
    let err: Value = resp.json().await.unwrap();
    assert_eq!(status, 503, "the one target that could was down: {err}");
    let only_chat = mocks(1).await;
    let gw2 = Gateway::start(&config_of(&only_chat, &["openai-compatible"], "")).await;
    let resp = create(&gw2, &body).await;
    let status = resp.status();
    let err: Value = resp.json().await.unwrap();
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "unsupported_request", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("web_search"),
        "the reason is named: {message}"
    );
    assert_eq!(only_chat[0].stats().requests, 0);
    gw.stop().await;
    gw2.stop().await;
}

#[tokio::test]
async fn a_translated_stream_that_fails_after_its_first_token_ends_with_response_failed() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_of(
        &m,
        &["openai-compatible"],
        "[routes.failover]\nmid_stream = \"error\"\n",
    ))
    .await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": "Count", "stream": true}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    let evs = events(&body);
    let (last, failed) = evs.last().unwrap();
    assert_eq!(last, "response.failed", "{body}");
    assert_eq!(failed["response"]["status"], "failed");
    let message = failed["response"]["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("incomplete"), "{failed}");
    assert!(
        !body.contains("response.completed"),
        "never a completed answer: {body}"
    );
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

/// A gateway whose route `agent` has one target of `kind` at `m` (Anthropic and Gemini take
/// the mock's root URL).
fn one_target(m: &MockServer, kind: &str) -> String {
    let url = match kind {
        "anthropic" | "gemini" => m.root_url(),
        _ => m.base_url(),
    };
    format!(
        "[audit]\nstore = \"off\"\n\n[responses]\nstore = \"{}\"\n\n\
         [[providers]]\nname = \"p\"\nkind = \"{kind}\"\nbase_url = \"{url}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"agent\"\ntargets = [{{ provider = \"p\", model = \"m\" }}]\n",
        responses_db()
    )
}

#[tokio::test]
async fn anthropic_and_gemini_targets_answer_responses_clients_whole_and_streamed() {
    for kind in ["anthropic", "gemini"] {
        let m = mocks(1).await;
        let gw = Gateway::start(&one_target(&m[0], kind)).await;
        let body = json!({"model": "agent", "instructions": "Be brief.", "input": "Count"});
        let got: Value = create(&gw, &body).await.json().await.unwrap();
        assert_eq!(got["object"], "response", "{kind}: {got}");
        assert_eq!(got["status"], "completed", "{kind}: {got}");
        let text = &got["output"][0]["content"][0]["text"];
        assert_eq!(text, canonical_text(12, 0).as_str(), "{kind}: {got}");
        assert!(
            got["usage"]["input_tokens"].as_u64().unwrap() > 0,
            "{kind}: {got}"
        );
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let sse = create(&gw, &streamed).await.text().await.unwrap();
        let evs = events(&sse);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[..2],
            ["response.created", "response.in_progress"],
            "{kind}: {sse}"
        );
        assert_eq!(names.last(), Some(&"response.completed"), "{kind}: {sse}");
        let text = deltas(&evs);
        assert_eq!(text, canonical_text(12, 0), "{kind}");
        let sent = last_request(&m[0]);
        let system = match kind {
            "anthropic" => sent.body["system"].to_string(),
            _ => sent.body["systemInstruction"].to_string(),
        };
        assert!(
            system.contains("Be brief."),
            "{kind}: instructions as its system prompt: {sent:?}"
        );
        gw.stop().await;
    }
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
async fn a_conversation_too_long_for_a_target_is_trimmed_and_answered_in_responses_events() {
    let m = mocks(1).await;
    let toml = config_of(&m, &["openai"], "").replace(
        "{ provider = \"p0\", model = \"model-0\" }",
        "{ provider = \"p0\", model = \"model-0\", context_window = 2000 }",
    );
    let gw = Gateway::start(&toml).await;
    let mut input = Vec::new();
    for i in 0..40 {
        input
            .push(json!({"role": "user", "content": format!("turn {i}: {}", "words ".repeat(60))}));
        input.push(json!({"role": "assistant", "content": "noted"}));
    }
    input.push(json!({"role": "user", "content": "Count"}));
    let resp = create(
        &gw,
        &json!({"model": "agent", "input": input, "stream": true}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let dropped: usize = header(&resp, "x-switchyard-turns-dropped").parse().unwrap();
    assert!(dropped > 0);
    let body = resp.text().await.unwrap();
    let evs = events(&body);
    assert_eq!(evs.last().unwrap().0, "response.completed", "{body}");
    let sent = last_request(&m[0]);
    assert!(
        sent.path.ends_with("/chat/completions"),
        "a rewritten conversation goes as Chat Completions: {}",
        sent.path
    );
    let messages = sent.body["messages"].as_array().unwrap();
    assert!(messages.len() < 81, "trimmed: {} messages", messages.len());
    assert_eq!(messages.last().unwrap()["content"], "Count");
    gw.stop().await;
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

#[tokio::test(start_paused = true)]
async fn a_slow_responses_target_is_hedged_and_the_loser_cancelled() {
    let m = mocks(2).await;
    let toml = config_in(
        "off",
        &m,
        &["openai", "openai-compatible"],
        "[routes.hedge]\ndelay = \"500ms\"\nbudget = 1.0\n",
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 3000,
        ..Default::default()
    });
    let t0 = tokio::time::Instant::now();
    let resp = create(&gw, &json!({"model": "agent", "input": "Count"})).await;
    let elapsed = t0.elapsed();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert!(
        elapsed >= std::time::Duration::from_millis(500)
            && elapsed < std::time::Duration::from_millis(520),
        "{elapsed:?}"
    );
    let got: Value = resp.json().await.unwrap();
    assert_eq!(
        got["object"], "response",
        "written back as a response: {got}"
    );
    assert_eq!(
        got["output"][0]["content"][0]["text"],
        canonical_text(12, 0).as_str()
    );
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let primary = m[0].stats();
    assert_eq!(
        (primary.requests, primary.cancelled),
        (1, 1),
        "the loser was cancelled"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_429_with_retry_after_parks_a_responses_target_and_counts_in_the_metrics() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_of(&m, &["openai", "openai"], "")).await;
    m[0].set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(30),
        ..Default::default()
    });
    for _ in 0..3 {
        let resp = create(&gw, &json!({"model": "agent", "input": "Count"})).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    }
    assert_eq!(
        m[0].stats().requests,
        1,
        "parked after its 429: not asked again"
    );
    let text = metrics(&gw).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("switchyard_failovers_total{")
                && l.contains("route=\"agent\"")
                && l.contains("reason=\"status\"")),
        "{text}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn with_builtin_tools_drop_an_offered_built_in_tool_stays_behind_and_a_forced_one_does_not() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_of(
        &m,
        &["openai-compatible"],
        "[routes.failover]\nbuiltin_tools = \"drop\"\n",
    ))
    .await;
    let tools = json!([
        {"type": "web_search"},
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
    ]);
    let offered = json!({"model": "agent", "input": "News?", "tools": tools});
    let resp = create(&gw, &offered).await;
    assert_eq!(resp.status(), 200);
    let sent = last_request(&m[0]).body;
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(names, ["f"], "only the function tool went on: {sent}");
    let mut forced = offered.clone();
    forced["tool_choice"] = json!({"type": "web_search"});
    let resp = create(&gw, &forced).await;
    let status = resp.status();
    let err: Value = resp.json().await.unwrap();
    assert_eq!(
        status, 400,
        "a forced built-in tool is used, not offered: {err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool_choice"),
        "{err}"
    );
    gw.stop().await;
}

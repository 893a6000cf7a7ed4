//! Failover across vendors: OpenAI, Anthropic and Gemini targets behind one route, OpenAI and
//! Anthropic clients in front, streamed and not, with tool calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

/// Providers `oai` (openai-compatible), `ant` (anthropic), `gem` (gemini), each on its own mock;
/// route `chat` lists the targets named in `order`.
fn toml(m: &[MockServer], order: &[&str], windows: &[u32]) -> String {
    let mut s = String::from("[audit]\nstore = \"off\"\n\n");
    let kinds = [
        ("oai", "openai-compatible", m[0].base_url()),
        ("ant", "anthropic", m[1].root_url()),
        ("gem", "gemini", m[2].root_url()),
    ];
    for (name, kind, url) in kinds {
        s += &format!("[[providers]]\nname = \"{name}\"\nkind = \"{kind}\"\nbase_url = \"{url}\"\napi_key = \"${{TEST_KEY}}\"\n\n");
    }
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for (i, name) in order.iter().enumerate() {
        let model = match *name {
            "oai" => "gpt-4o",
            "ant" => "claude-sonnet-4-5",
            _ => "gemini-2.5-pro",
        };
        let window = windows
            .get(i)
            .map(|w| format!(", context_window = {w}"))
            .unwrap_or_default();
        s += &format!("  {{ provider = \"{name}\", model = \"{model}\"{window} }},\n");
    }
    s + "]\n[routes.hedge]\nenabled = false\n"
}

fn conversation(stream: bool) -> Value {
    json!({
        "model": "chat",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "Say the canonical text."}
        ]
    })
}

#[tokio::test]
async fn an_openai_client_is_served_by_an_anthropic_target_when_openai_fails() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["oai", "ant"], &[])).await;
    m[0].set_plan(down());
    let resp = gw.chat(conversation(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let sent = &m[1].requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-test-secret"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.body["model"], "claude-sonnet-4-5");
    assert_eq!(sent.body["system"], "You are terse.");
    assert_eq!(
        sent.body["messages"].as_array().unwrap().len(),
        3,
        "the conversation carried over"
    );
    assert!(sent.body["max_tokens"].as_u64().is_some());
}

#[tokio::test]
async fn an_openai_stream_is_served_by_a_gemini_target() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["oai", "gem"], &[])).await;
    m[0].set_plan(down());
    let resp = gw.chat(conversation(true)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "gem/gemini-2.5-pro");
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");
    let sent = &m[2].requests()[0];
    assert!(
        sent.path.contains("gemini-2.5-pro:streamGenerateContent"),
        "{}",
        sent.path
    );
    assert_eq!(sent.header("x-goog-api-key"), Some("sk-test-secret"));
}

#[tokio::test]
async fn an_anthropic_in_band_overload_before_the_first_token_fails_over_to_openai() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["ant", "oai"], &[])).await;
    m[1].set_plan(FaultPlan {
        inband_error_after: Some(0),
        ..Default::default()
    });
    let resp = gw.chat(conversation(true)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "oai/gpt-4o");
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
}

#[tokio::test]
async fn tool_calls_cross_dialects_whole_and_streamed() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["ant"], &[])).await;
    m[1].set_plan(FaultPlan {
        tool_call: true,
        ..Default::default()
    });
    let mut req = conversation(false);
    req["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let body: Value = gw.chat(req.clone()).await.json().await.unwrap();
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(m[1].requests()[0].body["tools"][0]["name"], "get_weather");

    req["stream"] = json!(true);
    let events = sse_events(&gw.chat(req).await.text().await.unwrap());
    let args: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "Paris"})
    );
    assert!(events
        .iter()
        .any(|e| e["choices"][0]["finish_reason"] == "tool_calls"));
}

#[tokio::test]
async fn an_anthropic_context_length_error_moves_to_a_larger_window() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["ant", "gem"], &[8_000, 1_000_000])).await;
    m[1].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..Default::default()
    });
    let resp = gw.chat(conversation(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "gem/gemini-2.5-pro");
}

async fn messages(gw: &Gateway, stream: bool) -> reqwest::Response {
    client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "unused")
        .header("anthropic-version", "2023-06-01")
        .json(&json!({
            "model": "chat",
            "max_tokens": 256,
            "stream": stream,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": "Say the canonical text."}]
        }))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_anthropic_api_fails_over_from_openai_to_gemini() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["oai", "gem"], &[])).await;
    m[0].set_plan(down());
    let resp = messages(&gw, false).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "gem/gemini-2.5-pro");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));
    assert_eq!(body["stop_reason"], "end_turn");

    let text = messages(&gw, true).await.text().await.unwrap();
    let mut answer = String::new();
    let mut kinds = Vec::new();
    for ev in text.split("\n\n").filter(|e| !e.is_empty()) {
        let data = ev
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or("{}");
        let v: Value = serde_json::from_str(data).unwrap();
        kinds.push(v["type"].as_str().unwrap_or_default().to_owned());
        if let Some(t) = v["delta"]["text"].as_str() {
            answer.push_str(t);
        }
    }
    assert_eq!(answer, canonical_text(12, 0));
    assert_eq!(kinds.first().map(String::as_str), Some("message_start"));
    assert_eq!(kinds.last().map(String::as_str), Some("message_stop"));
}

#[tokio::test]
async fn the_anthropic_api_returns_errors_in_its_own_envelope() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["oai"], &[])).await;
    m[0].set_plan(FaultPlan {
        status: Some(400),
        ..Default::default()
    });
    let resp = messages(&gw, false).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert!(
        body["error"]["type"].is_string() && body["error"]["message"].is_string(),
        "{body}"
    );

    // Refused before any upstream call: its own envelope, no attempt.
    let resp = post_text(&gw, "/v1/messages", "{not json").await;
    assert_eq!(resp.status(), 400);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "0");
    assert!(!header(&resp, "x-switchyard-request-id").is_empty());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");

    m[0].set_plan(down());
    let resp = messages(&gw, false).await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
}

#[tokio::test(start_paused = true)]
async fn a_gemini_target_is_probed_in_its_own_dialect_and_comes_back() {
    let m = mocks(3).await;
    let gw = Gateway::start(&toml(&m, &["gem", "oai"], &[])).await;
    m[2].set_plan(down());
    for _ in 0..5 {
        assert_eq!(gw.chat(conversation(false)).await.status(), 200);
    }
    let state = |s: Value| {
        s["targets"][0]["breaker"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let status = || async {
        client()
            .get(gw.url("/admin/status"))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    assert_eq!(state(status().await), "open");
    m[2].set_plan(FaultPlan::default());
    tokio::time::sleep(std::time::Duration::from_secs(45)).await;
    assert_eq!(
        state(status().await),
        "closed",
        "probes in Gemini's dialect succeeded"
    );
    let probe = m[2]
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.header("x-switchyard-probe").is_some())
        .unwrap();
    assert!(probe.body["contents"].is_array(), "{}", probe.body);
}

/// Every pair of client API and upstream kind, with a tool call, whole and streamed.
#[tokio::test]
async fn tool_calls_for_every_client_api_and_upstream_kind() {
    let m = mocks(3).await;
    for (target, mock) in [("oai", 0), ("ant", 1), ("gem", 2)] {
        let gw = Gateway::start(&toml(&m, &[target], &[])).await;
        m[mock].set_plan(FaultPlan {
            tool_call: true,
            ..Default::default()
        });
        // OpenAI client.
        let mut req = conversation(false);
        req["tools"] = json!([{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
        let body: Value = gw.chat(req.clone()).await.json().await.unwrap();
        let call = &body["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_weather", "{target}: {body}");
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"city": "Paris"}), "{target}");
        req["stream"] = json!(true);
        let events = sse_events(&gw.chat(req).await.text().await.unwrap());
        let streamed: String = events
            .iter()
            .filter_map(|e| {
                e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&streamed).unwrap(),
            json!({"city": "Paris"}),
            "{target} stream"
        );

        // Anthropic client.
        let anthropic = |stream: bool| {
            client()
                .post(gw.url("/v1/messages"))
                .json(&json!({
                    "model": "chat", "max_tokens": 256, "stream": stream,
                    "tools": [{"name": "get_weather", "input_schema": {"type": "object",
                        "properties": {"city": {"type": "string"}}}}],
                    "messages": [{"role": "user", "content": "Weather in Paris?"}]
                }))
                .send()
        };
        let body: Value = anthropic(false).await.unwrap().json().await.unwrap();
        let tool_use = body["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .cloned();
        let tool_use = tool_use.unwrap_or_else(|| panic!("{target}: {body}"));
        assert_eq!(tool_use["name"], "get_weather");
        assert_eq!(tool_use["input"], json!({"city": "Paris"}));
        assert_eq!(body["stop_reason"], "tool_use", "{target}");
        let text = anthropic(true).await.unwrap().text().await.unwrap();
        let mut partial = String::new();
        for ev in text.split("\n\n") {
            let Some(data) = ev.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let v: Value = serde_json::from_str(data).unwrap();
            if let Some(p) = v["delta"]["partial_json"].as_str() {
                partial.push_str(p);
            }
        }
        assert_eq!(
            serde_json::from_str::<Value>(&partial).unwrap(),
            json!({"city": "Paris"}),
            "{target} anthropic stream"
        );
        m[mock].reset();
        gw.stop().await;
    }
}

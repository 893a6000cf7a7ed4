//! Same-dialect pass-through for Anthropic clients: an Anthropic target gets the client's body
//! as it came (only `model` rewritten), its protocol headers and query, and its answers, errors
//! and stream events go back as they came: cache markers, thinking blocks with their
//! signatures, unknown fields, blocks and events included. Another vendor, after a failover,
//! gets only what it accepts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use axum::response::IntoResponse;
use serde_json::{json, Value};
use support::*;
use switchyard::mock::{FaultPlan, MockServer};

/// Providers `ant` (Anthropic, on `m[0]`) and `oai` (OpenAI-compatible, on `m[1]`); route
/// `claude` tries `ant` first.
fn toml(m: &[MockServer]) -> String {
    format!(
        r#"[[providers]]
name = "ant"
kind = "anthropic"
base_url = "{}"
api_key = "${{TEST_KEY}}"

[[providers]]
name = "oai"
kind = "openai-compatible"
base_url = "{}"
api_key = "${{TEST_KEY}}"

[[routes]]
name = "claude"
targets = [
  {{ provider = "ant", model = "claude-sonnet-4-5" }},
  {{ provider = "oai", model = "gpt-4o" }},
]
[routes.hedge]
enabled = false
"#,
        m[0].root_url(),
        m[1].base_url()
    )
}

/// A turn of a thinking tool loop as Claude Code sends it: cache markers on the system prompt,
/// the tools and the last message, the previous turn's signed thinking block, a tool use and
/// its result, an unknown block and unknown fields.
fn tool_loop_turn(stream: bool) -> Value {
    json!({
        "model": "claude",
        "max_tokens": 1024,
        "stream": stream,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "metadata": {"user_id": "user_abc_session_1"},
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{
            "name": "Bash",
            "description": "Run a command",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
            "cache_control": {"type": "ephemeral"}
        }],
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run ls.", "signature": "EqQBCkYIARgCKkBsig=="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt"},
                {"type": "brand_new_block", "payload": {"x": 1}},
                {"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}
            ]}
        ]
    })
}

async fn post_messages(gw: &Gateway, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(gw.url(path))
        .header("x-api-key", "sk-ant-client-key")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "context-management-2025-06-27")
        .header("anthropic-beta", "interleaved-thinking-2025-05-14")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_anthropic_target_gets_the_clients_request_as_it_came() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    let body = tool_loop_turn(false);
    let resp = post_messages(&gw, "/v1/messages?beta=true", &body).await;
    assert_eq!(resp.status(), 200);
    let sent = &m[0].requests()[0];
    let mut expected = body.clone();
    expected["model"] = json!("claude-sonnet-4-5");
    assert_eq!(sent.body, expected, "every field, block and marker kept");
    assert_eq!(sent.path, "/v1/messages?beta=true");
    let betas: Vec<&str> = (sent.headers.iter())
        .filter(|(k, _)| k == "anthropic-beta")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        betas,
        [
            "context-management-2025-06-27",
            "interleaved-thinking-2025-05-14"
        ]
    );
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        sent.header("x-api-key"),
        Some("sk-test-secret"),
        "the provider's key, never the client's"
    );
}

#[tokio::test]
async fn whole_answers_and_errors_come_back_as_they_came() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    let mut direct_body = tool_loop_turn(false);
    direct_body["model"] = json!("claude-sonnet-4-5");
    let direct: Value = client()
        .post(format!("{}/v1/messages", m[0].root_url()))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .json(&direct_body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let resp = post_messages(&gw, "/v1/messages", &tool_loop_turn(false)).await;
    assert_eq!(resp.status(), 200);
    let mut through: Value = resp.json().await.unwrap();
    // The mock numbers its messages.
    let mut direct = direct;
    direct["id"] = Value::Null;
    through["id"] = Value::Null;
    assert_eq!(through, direct);

    let error = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.thinking.signature: Invalid `signature` in `thinking` block"},"request_id":"req_011"}"#;
    m[0].set_plan(FaultPlan {
        status: Some(400),
        error_body: Some(error.into()),
        ..Default::default()
    });
    let resp = post_messages(&gw, "/v1/messages", &tool_loop_turn(false)).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.text().await.unwrap(),
        error,
        "returned as the provider gave it"
    );
    assert_eq!(
        m[1].stats().requests,
        0,
        "a client error is not failed over"
    );
}

#[tokio::test]
async fn a_body_the_gateway_cannot_read_still_reaches_an_anthropic_target_as_it_came() {
    // A content block shape the canonical model has no reading for (content as a number): the
    // gateway reads only `model`, `stream` and that `messages` is a list, so the provider
    // judges the rest, and says what it says; a target of another dialect could not be asked.
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    let body = json!({"model": "claude", "max_tokens": 16,
        "messages": [{"role": "user", "content": 42}], "x_future": {"a": [1]}});
    let resp = post_messages(&gw, "/v1/messages", &body).await;
    assert_eq!(resp.status(), 200);
    let mut expected = body.clone();
    expected["model"] = json!("claude-sonnet-4-5");
    assert_eq!(m[0].requests()[0].body, expected);
    // With the Anthropic target down, the OpenAI one cannot be written for: the path says
    // why, and the OpenAI target is not called.
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let resp = post_messages(&gw, "/v1/messages", &body).await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 502);
    assert!(
        text.contains("cannot translate: the request could not be read"),
        "{text}"
    );
    assert_eq!(m[1].stats().requests, 0);
    // What the edge does read is still checked there.
    for bad in [
        json!({"model": "claude", "messages": {}}),
        json!({"messages": []}),
    ] {
        let resp = post_messages(&gw, "/v1/messages", &bad).await;
        assert_eq!(resp.status(), 400);
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["type"], "error", "Anthropic's envelope: {err}");
    }
}

/// An Anthropic upstream that answers every stream with the same events: a signed thinking
/// block, text, and an event type nobody knows yet; and records the requests it saw.
async fn scripted_upstream() -> (String, Arc<Mutex<Vec<Value>>>) {
    const EVENTS: &str = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":10,"cache_read_input_tokens":2048,"cache_creation_input_tokens":0,"output_tokens":1}}}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Two files."}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIARgCKkBsig=="}}"#,
        "\n\n",
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":0}"#,
        "\n\n",
        "event: ping\n",
        r#"data: {"type":"ping"}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a.txt and b.txt"}}"#,
        "\n\n",
        "event: brand_new_event\n",
        r#"data: {"type":"brand_new_event","detail":{"k":"v"}}"#,
        "\n\n",
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":1}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":9}}"#,
        "\n\n",
        "event: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |body: axum::body::Bytes| {
            let record = record.clone();
            async move {
                record
                    .lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or_default());
                ([("content-type", "text/event-stream")], EVENTS).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// `(event name, data)` of each event of an SSE body.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn stream_events_come_back_as_they_came_thinking_signatures_included() {
    let (url, seen) = scripted_upstream().await;
    let toml = format!(
        "[[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{url}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"claude\"\ntargets = [{{ provider = \"ant\", model = \"claude-sonnet-4-5\" }}]\n"
    );
    let gw = Gateway::start(&toml).await;
    let direct = client()
        .post(format!("{url}/v1/messages"))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let resp = post_messages(&gw, "/v1/messages", &tool_loop_turn(true)).await;
    assert_eq!(resp.status(), 200);
    let through = resp.text().await.unwrap();
    assert_eq!(events(&through), events(&direct), "{through}");
    assert!(through.contains(r#""signature":"EqQBCkYIARgCKkBsig==""#));
    let sent = seen.lock().unwrap()[1].clone();
    assert_eq!(sent["messages"], tool_loop_turn(true)["messages"]);
}

#[tokio::test]
async fn a_failover_to_another_vendor_sends_it_only_what_it_accepts() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    m[0].set_plan(down());
    let resp = post_messages(&gw, "/v1/messages", &tool_loop_turn(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "oai/gpt-4o");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(
        answer["type"], "message",
        "the answer in the client's dialect"
    );
    let sent = &m[1].requests()[0];
    let text = sent.body.to_string();
    for signed in ["signature", "redacted_thinking", "EqQB", "cache_control"] {
        assert!(!text.contains(signed), "{signed} sent to OpenAI: {text}");
    }
    let messages = sent.body["messages"].as_array().unwrap();
    assert!(messages
        .iter()
        .any(|m| m["tool_calls"][0]["id"] == "toolu_01"));
    assert!(messages
        .iter()
        .any(|m| m["role"] == "tool" && m["tool_call_id"] == "toolu_01"));
    assert!(sent.header("anthropic-beta").is_none());
}

#[tokio::test]
async fn count_tokens_is_asked_of_an_anthropic_target_or_estimated() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    let body = tool_loop_turn(false);
    let resp = post_messages(&gw, "/v1/messages/count_tokens?beta=true", &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    assert_eq!(header(&resp, "x-switchyard-estimated"), "");
    let counted: Value = resp.json().await.unwrap();
    assert!(counted["input_tokens"].as_u64().unwrap() > 0);
    let sent = &m[0].requests()[0];
    assert_eq!(sent.path, "/v1/messages/count_tokens?beta=true");
    assert_eq!(sent.body["model"], "claude-sonnet-4-5");
    assert_eq!(sent.body["system"], body["system"]);

    m[0].set_plan(down());
    let resp = post_messages(&gw, "/v1/messages/count_tokens", &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-estimated"), "true");
    let estimated: Value = resp.json().await.unwrap();
    assert!(estimated["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(m[1].stats().requests, 0, "an OpenAI target is never asked");
}

#[tokio::test]
async fn every_error_under_v1_messages_is_in_anthropics_envelope() {
    let m = mocks(2).await;
    let gw = Gateway::start(&toml(&m)).await;
    for (method, path, status) in [
        (reqwest::Method::POST, "/v1/messages/batches", 404),
        (reqwest::Method::GET, "/v1/messages", 405),
        (reqwest::Method::GET, "/v1/messages/count_tokens", 405),
    ] {
        let resp = client().request(method, gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), status, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["type"], "error", "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
    }
    let resp = client().get(gw.url("/v1/nothing")).send().await.unwrap();
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].is_string() && body.get("type").is_none());
}

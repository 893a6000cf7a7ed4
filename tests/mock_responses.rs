//! Black-box tests of the mock's OpenAI Responses dialect (`POST /v1/responses` and Azure's
//! `/openai/responses`): a real server on port 0, a real HTTP client, answers read as plain JSON
//! (not with the gateway's canonical decoder: the two implementations are checked against each
//! other elsewhere). `tests/mock_responses_sdk.rs` reads it with the official OpenAI Python SDK.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{json, Value};
use switchyard::mock::{canonical_text, FaultPlan, MockServer, MockStats};

async fn spawn_named(name: &str, plan: FaultPlan) -> MockServer {
    let mock = MockServer::spawn(name).await.unwrap();
    mock.set_plan(plan);
    mock
}

async fn spawn_with(plan: FaultPlan) -> MockServer {
    spawn_named("responses", plan).await
}

fn request(stream: bool) -> Value {
    json!({
        "model": "gpt-5-mini",
        "instructions": "Be brief.",
        "input": "What is the weather in Paris?",
        "stream": stream,
    })
}

async fn post(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/responses", mock.base_url()))
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Reads a body to its end or its first error.
async fn read_body(mut response: reqwest::Response) -> (String, Option<reqwest::Error>) {
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => return (String::from_utf8(bytes).unwrap(), None),
            Err(e) => return (String::from_utf8(bytes).unwrap(), Some(e)),
        }
    }
}

/// The events of an SSE body: `(event name, data as JSON)`; comments skipped. Checks that every
/// event names its type twice (line and data) and that sequence numbers count up from 0.
fn events(body: &str) -> Vec<(String, Value)> {
    let out: Vec<(String, Value)> = body
        .split("\n\n")
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
            let data: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {data}"));
            assert_eq!(data["type"], name.as_str(), "{data}");
            (name, data)
        })
        .collect();
    for (expected, (_, data)) in out.iter().enumerate() {
        assert_eq!(data["sequence_number"], expected, "{data}");
    }
    out
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The concatenated `delta` of every event named `kind`.
fn deltas(events: &[(String, Value)], kind: &str) -> String {
    events
        .iter()
        .filter(|(name, _)| name == kind)
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect()
}

/// Polls the stats until `done` holds (the server counts after the client saw the end).
async fn stats_when(mock: &MockServer, done: impl Fn(&MockStats) -> bool) -> MockStats {
    for _ in 0..150 {
        let stats = mock.stats();
        if done(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mock.stats()
}

#[tokio::test]
async fn a_response_object_with_the_canonical_text() {
    let mock = spawn_with(FaultPlan {
        words: 5,
        expect_api_key: Some("sk-test".into()),
        ..FaultPlan::default()
    })
    .await;
    let response = post(&mock, &request(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-mock-name"], "responses");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], "resp_mock_1");
    assert_eq!(body["object"], "response");
    assert!(body["created_at"]
        .as_u64()
        .is_some_and(|t| t > 1_700_000_000));
    assert_eq!(body["status"], "completed");
    assert_eq!(body["model"], "gpt-5-mini");
    assert_eq!(body["instructions"], "Be brief.");
    for (key, value) in [
        ("error", Value::Null),
        ("incomplete_details", Value::Null),
        ("previous_response_id", Value::Null),
        ("parallel_tool_calls", json!(true)),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("metadata", json!({})),
    ] {
        assert_eq!(body[key], value, "{key}");
    }
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 1);
    let message = &output[0];
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["status"], "completed");
    assert!(message["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("msg_")));
    assert_eq!(
        message["content"],
        json!([{"type": "output_text", "text": canonical_text(5, 0), "annotations": [], "logprobs": []}])
    );
    // "Be brief." and the question: 38 characters, 10 tokens, as the chat dialects count.
    assert_eq!(
        body["usage"],
        json!({
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        })
    );
    let recorded = &mock.requests()[0];
    assert_eq!(recorded.path, "/v1/responses");
    assert_eq!(recorded.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(mock.stats().by_model["gpt-5-mini"].completed, 1);

    let wrong_key = reqwest::Client::new()
        .post(format!("{}/responses", mock.base_url()))
        .bearer_auth("sk-other")
        .json(&request(false))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_key.status(), 401);
    let error: Value = wrong_key.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_api_key");
}

#[tokio::test]
async fn streamed_events_in_the_documented_order() {
    let mock = spawn_with(FaultPlan {
        words: 3,
        ..FaultPlan::default()
    })
    .await;
    let response = post(&mock, &request(true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (body, error) = read_body(response).await;
    assert!(error.is_none());
    assert!(
        !body.contains("[DONE]"),
        "the Responses API sends no [DONE]"
    );
    let events = events(&body);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let created = &events[0].1["response"];
    assert_eq!(
        (&created["status"], &created["output"]),
        (&json!("in_progress"), &json!([]))
    );
    assert_eq!(events[2].1["item"]["content"], json!([]));
    assert_eq!(events[3].1["part"]["text"], "");
    let text = canonical_text(3, 0);
    assert_eq!(deltas(&events, "response.output_text.delta"), text);
    assert_eq!(events[4].1["item_id"], events[2].1["item"]["id"]);
    assert_eq!(events[7].1["text"], text.as_str());
    let done = &events[10].1["response"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], text.as_str());
    assert_eq!(done["usage"]["output_tokens"], 3);
    let stats = stats_when(&mock, |s| s.completed == 1).await;
    assert_eq!(stats.by_model["gpt-5-mini"].requests, 1);
}

#[tokio::test]
async fn a_tool_call_then_text_once_the_tool_answered() {
    let mock = spawn_with(FaultPlan {
        tool_call: true,
        words: 4,
        ..FaultPlan::default()
    })
    .await;
    let body: Value = post(&mock, &request(false)).await.json().await.unwrap();
    let call = &body["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["call_id"], "call_mock_1");
    assert_eq!(call["arguments"], r#"{"city":"Paris"}"#);

    let (stream, _) = read_body(post(&mock, &request(true)).await).await;
    let events = events(&stream);
    assert_eq!(
        names(&events)[2..],
        [
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let added = &events[2].1["item"];
    assert_eq!(
        (&added["type"], &added["arguments"]),
        (&json!("function_call"), &json!(""))
    );
    assert_eq!(
        deltas(&events, "response.function_call_arguments.delta"),
        r#"{"city":"Paris"}"#
    );
    assert_eq!(events[6].1["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(events[7].1["item"]["call_id"], "call_mock_2");

    // The next turn carries the call and its result: the answer is text.
    let mut turn = request(false);
    turn["input"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": "call_mock_1", "name": "get_weather", "arguments": r#"{"city":"Paris"}"#},
        {"type": "function_call_output", "call_id": "call_mock_1", "output": "sunny"},
    ]);
    let answer: Value = post(&mock, &turn).await.json().await.unwrap();
    assert_eq!(answer["output"][0]["type"], "message");
    assert_eq!(
        answer["output"][0]["content"][0]["text"],
        canonical_text(4, 0)
    );
}

#[tokio::test]
async fn an_injected_503_with_retry_after() {
    let mock = spawn_with(FaultPlan {
        status: Some(503),
        retry_after: Some(7),
        ..FaultPlan::default()
    })
    .await;
    for stream in [false, true] {
        let response = post(&mock, &request(stream)).await;
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "7");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "server_error");
    }
    mock.set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let error: Value = post(&mock, &request(false)).await.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    assert_eq!(mock.stats().requests, 3);
}

#[tokio::test]
async fn a_cut_stream_ends_without_completion() {
    let mock = spawn_with(FaultPlan {
        cut_after_chunks: Some(2),
        ..FaultPlan::default()
    })
    .await;
    let (body, error) = read_body(post(&mock, &request(true)).await).await;
    assert!(error.is_some(), "a cut is an error on the client side");
    let events = events(&body);
    assert_eq!(
        deltas(&events, "response.output_text.delta"),
        "alpha-1 bravo-2"
    );
    assert!(!names(&events).contains(&"response.completed"));
}

#[tokio::test]
async fn keepalives_fill_the_wait_for_the_first_token() {
    let mock = spawn_with(FaultPlan {
        words: 2,
        first_token_ms: 60,
        keepalive_ms: 20,
        ..FaultPlan::default()
    })
    .await;
    let (body, error) = read_body(post(&mock, &request(true)).await).await;
    assert!(error.is_none());
    let first_delta = body.find("response.output_text.delta").unwrap();
    assert!(body[..first_delta].contains(": keepalive\n\n"), "{body}");
    let events = events(&body);
    assert_eq!(
        deltas(&events, "response.output_text.delta"),
        canonical_text(2, 0)
    );
}

#[tokio::test]
async fn an_in_band_failure_is_response_failed() {
    let mock = spawn_with(FaultPlan {
        inband_error_after: Some(2),
        ..FaultPlan::default()
    })
    .await;
    let (body, error) = read_body(post(&mock, &request(true)).await).await;
    assert!(
        error.is_none(),
        "the stream ends properly after the failure"
    );
    let events = events(&body);
    assert_eq!(
        deltas(&events, "response.output_text.delta"),
        "alpha-1 bravo-2"
    );
    let (name, failed) = events.last().unwrap();
    assert_eq!(name, "response.failed");
    assert_eq!(failed["response"]["status"], "failed");
    assert_eq!(failed["response"]["error"]["code"], "server_error");
    assert!(!names(&events).contains(&"response.completed"));

    // A plan's error body is sent as an `error` event, as it is.
    let own =
        r#"{"type":"error","code":"overloaded","message":"busy","param":null,"sequence_number":6}"#;
    mock.set_plan(FaultPlan {
        inband_error_after: Some(2),
        error_body: Some(own.into()),
        status: Some(500),
        error_rate: 0.0,
        ..FaultPlan::default()
    });
    let (body, _) = read_body(post(&mock, &request(true)).await).await;
    assert!(
        body.ends_with(&format!("event: error\ndata: {own}\n\n")),
        "{body}"
    );
}

#[tokio::test]
async fn previous_response_id_is_refused() {
    let mock = spawn_with(FaultPlan::default()).await;
    let mut body = request(false);
    body["previous_response_id"] = json!("resp_abc123");
    let response = post(&mock, &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        error["error"],
        json!({
            "message": "Previous response with id 'resp_abc123' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        })
    );
}

#[tokio::test]
async fn encrypted_reasoning_goes_back_only_to_its_maker() {
    let maker = spawn_named("maker", FaultPlan::default()).await;
    let other = spawn_named("other", FaultPlan::default()).await;
    let mut ask = request(false);
    ask["reasoning"] = json!({"effort": "low"});
    ask["include"] = json!(["reasoning.encrypted_content"]);
    ask["store"] = json!(false);
    let answer: Value = post(&maker, &ask).await.json().await.unwrap();
    let reasoning = answer["output"][0].clone();
    assert_eq!(reasoning["type"], "reasoning");
    assert_eq!(reasoning["summary"], json!([]));
    let sealed = reasoning["encrypted_content"].as_str().unwrap();
    assert!(sealed.contains("maker"), "{sealed}");
    assert_eq!(answer["output"][1]["type"], "message");
    assert_eq!(
        answer["usage"]["output_tokens_details"]["reasoning_tokens"],
        4
    );
    assert_eq!(answer["reasoning"]["effort"], "low");

    // Without `include`, no encrypted content; streamed, the reasoning item comes first.
    let mut plain = ask.clone();
    plain["include"] = json!([]);
    plain["stream"] = json!(true);
    let (stream, _) = read_body(post(&maker, &plain).await).await;
    let events = events(&stream);
    assert_eq!(events[2].1["item"]["type"], "reasoning");
    assert!(events[2].1["item"].get("encrypted_content").is_none());
    assert_eq!(events[4].1["output_index"], 1);

    let mut again = request(false);
    again["input"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        reasoning,
        answer["output"][1],
        {"role": "user", "content": "And tomorrow?"},
    ]);
    assert_eq!(post(&maker, &again).await.status(), 200);
    let refused = post(&other, &again).await;
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["code"], "invalid_encrypted_content");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be verified"), "{message}");
}

#[tokio::test]
async fn a_trailing_assistant_message_is_continued() {
    let mock = spawn_with(FaultPlan {
        words: 4,
        ..FaultPlan::default()
    })
    .await;
    let mut body = request(false);
    body["input"] = json!([
        {"role": "user", "content": "Count."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "alpha-1 bravo-2"}]},
    ]);
    let answer: Value = post(&mock, &body).await.json().await.unwrap();
    assert_eq!(
        answer["output"][0]["content"][0]["text"],
        " charlie-3 delta-4."
    );
    body["stream"] = json!(true);
    let (stream, _) = read_body(post(&mock, &body).await).await;
    assert_eq!(
        deltas(&events(&stream), "response.output_text.delta"),
        " charlie-3 delta-4."
    );
    mock.set_plan(FaultPlan {
        reject_prefill: true,
        ..FaultPlan::default()
    });
    assert_eq!(post(&mock, &body).await.status(), 400);
}

#[tokio::test]
async fn request_checks() {
    let mock = spawn_with(FaultPlan {
        max_context_tokens: Some(5),
        ..FaultPlan::default()
    })
    .await;
    let error: Value = post(&mock, &request(false)).await.json().await.unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    mock.set_plan(FaultPlan::default());
    for (body, param) in [
        (json!({"input": "hi"}), "model"),
        (json!({"model": "m"}), "input"),
        (json!({"model": "m", "input": 3}), "input"),
    ] {
        let response = post(&mock, &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{body}");
    }
}

#[tokio::test]
async fn azure_serves_the_deployment_named_in_the_body() {
    let mock = spawn_with(FaultPlan {
        expect_api_key: Some("azure-key".into()),
        words: 2,
        ..FaultPlan::default()
    })
    .await;
    let mut body = request(false);
    body["model"] = json!("gpt-5-prod");
    let post_azure = |path: &str, key: &str| {
        reqwest::Client::new()
            .post(format!("{}{path}", mock.root_url()))
            .header("api-key", key)
            .json(&body)
            .send()
    };
    let answer = post_azure(
        "/openai/responses?api-version=2025-04-01-preview",
        "azure-key",
    )
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["model"], "gpt-5-prod");
    assert_eq!(
        answer["output"][0]["content"][0]["text"],
        canonical_text(2, 0)
    );
    let v1 = post_azure("/openai/v1/responses", "azure-key")
        .await
        .unwrap();
    assert_eq!(v1.status(), 200);
    let unversioned = post_azure("/openai/responses", "azure-key").await.unwrap();
    assert_eq!(unversioned.status(), 404);
    let wrong = post_azure("/openai/responses?api-version=2025-04-01-preview", "nope")
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(mock.stats().by_model["gpt-5-prod"].requests, 4);
}

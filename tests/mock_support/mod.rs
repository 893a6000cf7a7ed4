//! Helpers shared by the mock's black-box tests (tests/mock.rs, tests/mock_control.rs).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{json, Value};
use switchyard::mock::{FaultPlan, MockServer, MockStats};

pub fn chat_body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "stream": stream,
    })
}

pub async fn post(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", mock.base_url()))
        .json(body)
        .send()
        .await
        .unwrap()
}

pub async fn spawn_with(plan: FaultPlan) -> MockServer {
    let mock = MockServer::spawn("test").await.unwrap();
    mock.set_plan(plan);
    mock
}

/// The `data:` payloads of an SSE body.
pub fn sse_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

pub fn parsed(events: &[String]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| serde_json::from_str(e).ok())
        .collect()
}

/// The concatenated `delta.content` of a stream's events.
pub fn streamed_text(events: &[String]) -> String {
    parsed(events)
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Reads a body to its end or its first error.
pub async fn read_body(mut response: reqwest::Response) -> (String, Option<reqwest::Error>) {
    let mut bytes = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) => return (String::from_utf8(bytes).unwrap(), None),
            Err(e) => return (String::from_utf8(bytes).unwrap(), Some(e)),
        }
    }
}

/// Polls the stats until `done` holds (the server counts after the client saw the end).
pub async fn stats_when(mock: &MockServer, done: impl Fn(&MockStats) -> bool) -> MockStats {
    for _ in 0..150 {
        let stats = mock.stats();
        if done(&stats) {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mock.stats()
}

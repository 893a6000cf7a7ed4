//! Helpers of the Responses API tests (`tests/responses.rs`, `tests/responses_failover.rs`).
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use serde_json::Value;
use switchyard::mock::MockServer;

use super::{client, responses_db, Gateway};

/// A gateway over `mocks` as `kind` providers p0, p1, ... and one route `agent` in that order,
/// its responses stored in a SQLite file of its own.
pub fn config_of(mocks: &[MockServer], kinds: &[&str], extra: &str) -> String {
    config_in(&responses_db(), mocks, kinds, extra)
}

/// As [`config_of`], the responses stored in `store` (a `sqlite://` or `postgres://` URL).
pub fn config_in(store: &str, mocks: &[MockServer], kinds: &[&str], extra: &str) -> String {
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

pub async fn create(gw: &Gateway, body: &Value) -> reqwest::Response {
    client()
        .post(gw.url("/v1/responses"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `(event name, data)` pairs of an SSE body.
pub fn events(body: &str) -> Vec<(String, Value)> {
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
pub fn deltas(evs: &[(String, Value)]) -> String {
    evs.iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap_or_default())
        .collect()
}

/// The `sequence_number`s of a stream's events.
pub fn sequence(evs: &[(String, Value)]) -> Vec<u64> {
    evs.iter()
        .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
        .collect()
}

pub fn last_request(m: &MockServer) -> switchyard::mock::RecordedRequest {
    m.requests()
        .last()
        .cloned()
        .expect("the mock got a request")
}

/// A gateway whose route `agent` has one target of `kind` at `m` (Anthropic and Gemini take
/// the mock's root URL).
pub fn one_target(m: &MockServer, kind: &str) -> String {
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

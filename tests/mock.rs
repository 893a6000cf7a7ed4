//! Black-box tests of the mock provider: a real server on port 0, a real HTTP client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard::mock::{canonical_text, FaultPlan, MockServer};

mod mock_support;
use mock_support::*;

#[tokio::test]
async fn healthy_non_stream() {
    let mock = MockServer::spawn("primary").await.unwrap();
    let response = post(&mock, &chat_body("gpt-4o", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-mock-name"], "primary");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-mock-1");
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        canonical_text(12, 0)
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], 12);
    assert_eq!(body["usage"]["prompt_tokens"], 8);
    assert_eq!(body["usage"]["total_tokens"], 20);
    let stats = mock.stats();
    assert_eq!(
        (stats.requests, stats.completed, stats.cancelled),
        (1, 1, 0)
    );
    assert_eq!(stats.by_model["gpt-4o"].completed, 1);
    let recorded = mock.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].method, "POST");
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    assert_eq!(recorded[0].body, chat_body("gpt-4o", false));
    assert_eq!(recorded[0].header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn healthy_stream_without_and_with_usage() {
    let mock = spawn_with(FaultPlan {
        words: 5,
        variant: 2,
        ..FaultPlan::default()
    })
    .await;
    let response = post(&mock, &chat_body("gpt-4o", true)).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (body, error) = read_body(response).await;
    assert!(error.is_none());
    let events = sse_events(&body);
    assert_eq!(events.len(), 1 + 5 + 1 + 1, "{body}");
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(streamed_text(&events), canonical_text(5, 2));
    let chunks = parsed(&events);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[2]["choices"][0]["delta"]["content"], " delta-2");
    assert_eq!(chunks[6]["choices"][0]["finish_reason"], "stop");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));

    let mut body = chat_body("gpt-4o", true);
    body["stream_options"] = json!({"include_usage": true});
    let (body, _) = read_body(post(&mock, &body).await).await;
    let events = sse_events(&body);
    assert_eq!(events.len(), 1 + 5 + 1 + 1 + 1);
    let chunks = parsed(&events);
    let usage = &chunks[7];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert!(chunks[..7].iter().all(|c| c["usage"].is_null()));
    let stats = stats_when(&mock, |s| s.completed == 2).await;
    assert_eq!(
        (stats.requests, stats.completed, stats.cancelled),
        (2, 2, 0)
    );
}

#[tokio::test]
async fn azure_path_echoes_the_deployment() {
    let mock = spawn_with(FaultPlan {
        expect_api_key: Some("az".into()),
        ..FaultPlan::default()
    })
    .await;
    let client = reqwest::Client::new();
    let url = format!(
        "{}/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
        mock.root_url()
    );
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let ok = client
        .post(&url)
        .header("api-key", "az")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let ok: Value = ok.json().await.unwrap();
    assert_eq!(ok["model"], "gpt-4o-prod");
    let bearer = client
        .post(&url)
        .bearer_auth("az")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 401);
    let no_version = url.split('?').next().unwrap();
    let missing = client
        .post(no_version)
        .header("api-key", "az")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(mock.stats().by_model["gpt-4o-prod"].requests, 3);
    assert!(mock.requests()[0].path.ends_with("?api-version=2024-10-21"));
}

#[tokio::test]
async fn status_with_retry_after() {
    let plan = FaultPlan {
        status: Some(429),
        retry_after: Some(7),
        ..FaultPlan::default()
    };
    let mock = spawn_with(plan).await;
    let response = post(&mock, &chat_body("gpt-4o", true)).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["param"].is_null());
    assert!(body["error"]["message"].is_string());

    let filtered = FaultPlan {
        status: Some(400),
        error_code: Some("content_filter".into()),
        ..FaultPlan::default()
    };
    mock.set_plan(filtered);
    let body: Value = post(&mock, &chat_body("gpt-4o", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["code"], "content_filter");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let stats = mock.stats();
    assert_eq!((stats.completed, stats.cancelled), (2, 0));
}

#[tokio::test]
async fn seeded_error_rate_is_reproducible() {
    let plan = FaultPlan {
        status: Some(503),
        error_rate: 0.5,
        seed: 42,
        ..FaultPlan::default()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mock = spawn_with(plan.clone()).await;
        let mut statuses = Vec::new();
        for _ in 0..16 {
            statuses.push(
                post(&mock, &chat_body("gpt-4o", false))
                    .await
                    .status()
                    .as_u16(),
            );
        }
        // A reset starts the sequence over.
        mock.reset();
        mock.set_plan(plan.clone());
        let again = post(&mock, &chat_body("gpt-4o", false))
            .await
            .status()
            .as_u16();
        assert_eq!(again, statuses[0]);
        runs.push(statuses);
    }
    assert_eq!(runs[0], runs[1]);
    assert!(
        runs[0].contains(&200) && runs[0].contains(&503),
        "{:?}",
        runs[0]
    );
}

#[tokio::test]
async fn latency_delays_the_headers() {
    let mock = spawn_with(FaultPlan {
        latency_ms: 150,
        ..FaultPlan::default()
    })
    .await;
    let start = Instant::now();
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 200);
    assert!(start.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn stall_until_the_client_gives_up_counts_cancelled() {
    let mock = spawn_with(FaultPlan {
        stall: true,
        ..FaultPlan::default()
    })
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let url = format!("{}/chat/completions", mock.base_url());
    let error = client
        .post(url)
        .json(&chat_body("gpt-4o", false))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_timeout());
    let stats = stats_when(&mock, |s| s.cancelled == 1).await;
    assert_eq!(
        (stats.requests, stats.completed, stats.cancelled),
        (1, 0, 1)
    );
    assert_eq!(stats.by_model["gpt-4o"].cancelled, 1);
}

#[tokio::test]
async fn stall_mid_stream_then_client_leaves_counts_cancelled() {
    let mock = spawn_with(FaultPlan {
        stall_after_chunks: Some(2),
        ..FaultPlan::default()
    })
    .await;
    let mut response = post(&mock, &chat_body("gpt-4o", true)).await;
    let mut body = String::new();
    while sse_events(&body).len() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk()).await;
        body.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap().unwrap()));
    }
    let more = tokio::time::timeout(Duration::from_millis(200), response.chunk()).await;
    assert!(more.is_err(), "the stream should hang");
    assert_eq!(streamed_text(&sse_events(&body)), "alpha-1 bravo-2");
    drop(response);
    let stats = stats_when(&mock, |s| s.cancelled == 1).await;
    assert_eq!((stats.completed, stats.cancelled), (0, 1));
}

#[tokio::test]
async fn cut_after_chunks_aborts_the_body() {
    let mock = spawn_with(FaultPlan {
        cut_after_chunks: Some(3),
        ..FaultPlan::default()
    })
    .await;
    let (body, error) = read_body(post(&mock, &chat_body("gpt-4o", true)).await).await;
    assert!(error.is_some(), "the client must see a body error: {body}");
    let events = sse_events(&body);
    assert_eq!(streamed_text(&events), "alpha-1 bravo-2 charlie-3");
    assert!(!events.iter().any(|e| e == "[DONE]"));
    assert!(parsed(&events)
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    let stats = stats_when(&mock, |s| s.completed == 1).await;
    assert_eq!((stats.completed, stats.cancelled), (1, 0));
}

#[tokio::test]
async fn inband_error_ends_the_stream() {
    let mock = spawn_with(FaultPlan {
        inband_error_after: Some(2),
        ..FaultPlan::default()
    })
    .await;
    let (body, error) = read_body(post(&mock, &chat_body("gpt-4o", true)).await).await;
    assert!(error.is_none());
    let events = sse_events(&body);
    assert_eq!(streamed_text(&events), "alpha-1 bravo-2");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "overloaded_error");
    assert_eq!(last["error"]["code"], "overloaded");
    assert!(!events.iter().any(|e| e == "[DONE]"));
    assert_eq!(stats_when(&mock, |s| s.completed == 1).await.completed, 1);
}

#[tokio::test]
async fn malformed_chunk_is_one_bad_event() {
    let plan = FaultPlan {
        malformed_chunk_at: Some(1),
        words: 3,
        ..FaultPlan::default()
    };
    let mock = spawn_with(plan).await;
    let (body, _) = read_body(post(&mock, &chat_body("gpt-4o", true)).await).await;
    let events = sse_events(&body);
    assert_eq!(events[2], "{this is not json");
    assert_eq!(
        events
            .iter()
            .filter(|e| serde_json::from_str::<Value>(e).is_err())
            .count(),
        2
    );
    assert_eq!(streamed_text(&events), canonical_text(3, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");
}

#[tokio::test]
async fn omit_done_finishes_without_done_and_holds_open() {
    let plan = FaultPlan {
        omit_done: true,
        hold_open_ms: 300,
        words: 3,
        ..FaultPlan::default()
    };
    let mock = spawn_with(plan).await;
    let mut body = chat_body("gpt-4o", true);
    body["stream_options"] = json!({"include_usage": true});
    let start = Instant::now();
    let (body, error) = read_body(post(&mock, &body).await).await;
    assert!(error.is_none());
    assert!(start.elapsed() >= Duration::from_millis(300));
    let events = sse_events(&body);
    assert!(!events.iter().any(|e| e == "[DONE]"));
    assert_eq!(streamed_text(&events), canonical_text(3, 0));
    let chunks = parsed(&events);
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["usage"]["completion_tokens"], 3);
    assert_eq!(mock.stats().completed, 1);
}

#[tokio::test]
async fn prefill_is_continued_or_rejected() {
    let mock = spawn_with(FaultPlan {
        words: 4,
        ..FaultPlan::default()
    })
    .await;
    let prefilled = |prefill: &str, stream: bool| {
        json!({
            "model": "gpt-4o",
            "stream": stream,
            "messages": [
                {"role": "user", "content": "go on"},
                {"role": "assistant", "content": prefill},
            ],
        })
    };
    let body: Value = post(&mock, &prefilled("alpha-1 bra", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "vo-2 charlie-3 delta-4."
    );
    let (stream, _) = read_body(post(&mock, &prefilled("alpha-1", true)).await).await;
    let events = sse_events(&stream);
    assert_eq!(streamed_text(&events), " bravo-2 charlie-3 delta-4.");
    assert_eq!(
        parsed(&events)[1]["choices"][0]["delta"]["content"],
        " bravo-2"
    );
    let body: Value = post(&mock, &prefilled("zulu-1", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        canonical_text(4, 0)
    );

    mock.set_plan(FaultPlan {
        reject_prefill: true,
        ..FaultPlan::default()
    });
    let rejected = post(&mock, &prefilled("alpha-1", true)).await;
    assert_eq!(rejected.status(), 400);
    let body: Value = rejected.json().await.unwrap();
    assert_eq!(body["error"]["code"], "prefill_unsupported");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(post(&mock, &chat_body("gpt-4o", false)).await.status(), 200);
}

#[tokio::test]
async fn max_context_tokens() {
    let mock = spawn_with(FaultPlan {
        max_context_tokens: Some(10),
        ..FaultPlan::default()
    })
    .await;
    let with_chars = |n: usize| json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x".repeat(n)}]});
    assert_eq!(post(&mock, &with_chars(40)).await.status(), 200);
    let response = post(&mock, &with_chars(41)).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("This model's maximum context length is 10 tokens. However, your messages resulted in 11 tokens."), "{message}");
}

#[tokio::test]
async fn expect_api_key() {
    let mock = spawn_with(FaultPlan {
        expect_api_key: Some("sk-good".into()),
        ..FaultPlan::default()
    })
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    let body = chat_body("gpt-4o", false);
    for (key, status) in [(None, 401), (Some("sk-bad"), 401), (Some("sk-good"), 200)] {
        let mut request = client.post(&url).json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{key:?}");
        if status == 401 {
            let error: Value = response.json().await.unwrap();
            assert_eq!(error["error"]["code"], "invalid_api_key");
        }
    }
    assert_eq!(
        mock.requests()[2].header("authorization"),
        Some("Bearer sk-good")
    );
}

#[tokio::test]
async fn tool_call_stream_and_non_stream() {
    let mock = spawn_with(FaultPlan {
        tool_call: true,
        ..FaultPlan::default()
    })
    .await;
    let (body, _) = read_body(post(&mock, &chat_body("gpt-4o", true)).await).await;
    let events = sse_events(&body);
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = parsed(&events);
    let first = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
    assert!(first["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "get_weather");
    assert_eq!(first["function"]["arguments"], "");
    let fragments: Vec<&str> = chunks[1..]
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert!((2..=3).contains(&fragments.len()));
    assert_eq!(fragments.concat(), r#"{"city":"Paris"}"#);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );

    let body: Value = post(&mock, &chat_body("gpt-4o", false))
        .await
        .json()
        .await
        .unwrap();
    let call = &body["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn bad_requests_and_malformed_body() {
    let mock = MockServer::spawn("m").await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", mock.base_url());
    let response = client.post(&url).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(mock.requests()[0].body, json!("{not json"));
    let stats = mock.stats();
    assert_eq!((stats.requests, stats.completed), (1, 1));
    assert!(stats.by_model.is_empty());

    mock.set_plan(FaultPlan {
        malformed_body: true,
        ..FaultPlan::default()
    });
    let response = post(&mock, &chat_body("gpt-4o", false)).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
}

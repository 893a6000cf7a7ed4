//! Black-box tests of the mock's Anthropic and Gemini dialects: a real server on port 0, a real
//! HTTP client, answers read back with the canonical decoders.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serde_json::{json, Value};
use switchyard::canonical::{
    self, anthropic, gemini, ChatRequest, Dialect, ErrorClass, FinishReason, Message, StreamEvent,
};
use switchyard::mock::{canonical_text, FaultPlan, MockServer, MockStats};

async fn spawn_with(plan: FaultPlan) -> MockServer {
    let mock = MockServer::spawn("dialects").await.unwrap();
    mock.set_plan(plan);
    mock
}

/// SSE events (name, data) of a body; LF or CRLF line ends.
fn sse_events(body: &str) -> Vec<(Option<String>, String)> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = Some(name.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push_str(value);
                }
            }
            (event, data)
        })
        .collect()
}

/// The canonical events of an SSE body, and whether the stream said it was complete.
fn decode(dialect: Dialect, body: &str) -> (Vec<StreamEvent>, bool) {
    let mut decoder = dialect.decoder();
    let mut out = Vec::new();
    for (event, data) in sse_events(body) {
        decoder
            .decode(event.as_deref(), data.as_bytes(), &mut out)
            .unwrap_or_else(|e| panic!("{e}: {data}"));
    }
    (out, decoder.is_done())
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
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

// ---- Anthropic ----

fn messages_body(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "stream": stream,
    })
}

async fn post_messages(mock: &MockServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.root_url()))
        .header("x-api-key", "sk-ant-test")
        .header("anthropic-version", anthropic::VERSION)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn anthropic_answers_the_canonical_text() {
    let mock = spawn_with(FaultPlan {
        words: 5,
        expect_api_key: Some("sk-ant-test".into()),
        ..FaultPlan::default()
    })
    .await;
    let response = post_messages(&mock, &messages_body(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-mock-name"], "dialects");
    let body = response.bytes().await.unwrap();
    let answer = anthropic::parse_response(&body).unwrap();
    assert_eq!(answer.text, canonical_text(5, 0));
    assert_eq!(answer.id, "msg_mock_1");
    assert_eq!(answer.model, "claude-sonnet-4-5");
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(answer.usage.map(|u| (u.input, u.output)), Some((10, 5)));

    let response = post_messages(&mock, &messages_body(true)).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (body, error) = read_body(response).await;
    assert!(error.is_none());
    let names: Vec<String> = sse_events(&body)
        .into_iter()
        .filter_map(|(e, _)| e)
        .collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let (events, done) = decode(Dialect::Anthropic, &body);
    assert!(done);
    assert_eq!(text_of(&events), canonical_text(5, 0));
    let stats = stats_when(&mock, |s| s.completed == 2).await;
    assert_eq!(stats.by_model["claude-sonnet-4-5"].requests, 2);
    assert_eq!(
        mock.requests()[0].header("anthropic-version"),
        Some("2023-06-01")
    );
}

#[tokio::test]
async fn anthropic_tool_calls_streamed_and_not() {
    let mock = spawn_with(FaultPlan {
        tool_call: true,
        ..FaultPlan::default()
    })
    .await;
    let body = post_messages(&mock, &messages_body(false))
        .await
        .bytes()
        .await
        .unwrap();
    let answer = anthropic::parse_response(&body).unwrap();
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.tool_calls[0].name, "get_weather");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"city":"Paris"}"#);

    let (body, _) = read_body(post_messages(&mock, &messages_body(true)).await).await;
    let (events, done) = decode(Dialect::Anthropic, &body);
    assert!(done);
    assert_eq!(
        events[1],
        StreamEvent::ToolCallStart {
            index: 0,
            id: "toolu_mock_2".into(),
            name: "get_weather".into()
        }
    );
    let args: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallArgsDelta { fragment, .. } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, r#"{"city":"Paris"}"#);
    assert!(events.contains(&StreamEvent::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn anthropic_errors_follow_the_plan() {
    let mock = spawn_with(FaultPlan {
        status: Some(529),
        retry_after: Some(4),
        ..FaultPlan::default()
    })
    .await;
    let response = post_messages(&mock, &messages_body(false)).await;
    assert_eq!(response.status().as_u16(), 529);
    assert_eq!(response.headers()["retry-after"], "4");
    let body = response.bytes().await.unwrap();
    let error = anthropic::parse_error(529, &body);
    assert_eq!(error.class, ErrorClass::Overloaded);
    assert_eq!(error.kind.as_deref(), Some("overloaded_error"));

    mock.set_plan(FaultPlan {
        expect_api_key: Some("right".into()),
        ..FaultPlan::default()
    });
    let response = post_messages(&mock, &messages_body(false)).await;
    assert_eq!(response.status(), 401);
    let error = anthropic::parse_error(401, &response.bytes().await.unwrap());
    assert_eq!(error.class, ErrorClass::Auth);
    let no_version = reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.root_url()))
        .json(&messages_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(no_version.status(), 400);

    mock.set_plan(FaultPlan {
        max_context_tokens: Some(5),
        ..FaultPlan::default()
    });
    let response = post_messages(&mock, &messages_body(false)).await;
    assert_eq!(response.status(), 400);
    let error = anthropic::parse_error(400, &response.bytes().await.unwrap());
    assert_eq!(error.class, ErrorClass::ContextLength, "{}", error.message);
}

#[tokio::test]
async fn anthropic_in_band_error_and_cut() {
    let mock = spawn_with(FaultPlan {
        inband_error_after: Some(2),
        ..FaultPlan::default()
    })
    .await;
    let (body, _) = read_body(post_messages(&mock, &messages_body(true)).await).await;
    let (events, done) = decode(Dialect::Anthropic, &body);
    assert!(!done);
    assert_eq!(text_of(&events), "alpha-1 bravo-2");
    assert_eq!(
        events.last(),
        Some(&StreamEvent::Error {
            message: "Overloaded".into(),
            kind: ErrorClass::Overloaded
        })
    );
    assert!(body.contains("event: error\ndata: {"), "{body}");

    mock.set_plan(FaultPlan {
        cut_after_chunks: Some(1),
        ..FaultPlan::default()
    });
    let (body, error) = read_body(post_messages(&mock, &messages_body(true)).await).await;
    assert!(error.is_some(), "a cut is an error on the client side");
    assert_eq!(text_of(&decode(Dialect::Anthropic, &body).0), "alpha-1");
}

#[tokio::test]
async fn anthropic_prefill_continues_the_answer() {
    let mock = spawn_with(FaultPlan {
        words: 4,
        ..FaultPlan::default()
    })
    .await;
    // Written by the canonical writer, which trims the prefill's trailing space.
    let req = ChatRequest {
        model: "claude-sonnet-4-5".into(),
        messages: vec![Message::user("Count.")],
        ..ChatRequest::default()
    };
    let prefilled = canonical::with_prefill(&req, "alpha-1 bravo-2 ");
    let body: Value =
        serde_json::from_slice(&anthropic::write_request(&prefilled, "claude-sonnet-4-5").unwrap())
            .unwrap();
    let response = post_messages(&mock, &body).await;
    assert_eq!(response.status(), 200);
    let answer = anthropic::parse_response(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer.text, " charlie-3 delta-4.");

    let mut raw = body.clone();
    raw["messages"][1]["content"] = json!("alpha-1 ");
    let response = post_messages(&mock, &raw).await;
    assert_eq!(
        response.status(),
        400,
        "Anthropic rejects trailing whitespace"
    );

    mock.set_plan(FaultPlan {
        reject_prefill: true,
        ..FaultPlan::default()
    });
    assert_eq!(post_messages(&mock, &body).await.status(), 400);
}

// ---- Gemini ----

fn contents_body() -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [{"text": "What is the weather in Paris?"}]}],
    })
}

/// The request path for `model` under Gemini's API root.
fn gemini_path(model: &str, stream: bool) -> String {
    if stream {
        format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("/v1beta/models/{model}:generateContent")
    }
}

async fn post_gemini(
    mock: &MockServer,
    model: &str,
    stream: bool,
    body: &Value,
) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{}", mock.root_url(), gemini_path(model, stream)))
        .header("x-goog-api-key", "AIza-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn gemini_answers_the_canonical_text() {
    let mock = spawn_with(FaultPlan {
        words: 6,
        expect_api_key: Some("AIza-test".into()),
        ..FaultPlan::default()
    })
    .await;
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    assert_eq!(response.status(), 200);
    let answer = gemini::parse_response(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer.text, canonical_text(6, 0));
    assert_eq!(answer.model, "gemini-2.5-flash");
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(answer.usage.map(|u| (u.input, u.output)), Some((10, 6)));

    let response = post_gemini(&mock, "gemini-2.5-flash", true, &contents_body()).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (body, error) = read_body(response).await;
    assert!(error.is_none());
    assert!(body.contains("\r\n\r\n"), "Gemini frames events with CRLF");
    let (events, done) = decode(Dialect::Gemini, &body);
    assert!(done);
    assert_eq!(text_of(&events), canonical_text(6, 0));
    assert!(matches!(events.last(), Some(StreamEvent::Usage(_))));

    // Without alt=sse the stream is one JSON array.
    let array = reqwest::Client::new()
        .post(format!(
            "{}/v1beta/models/gemini-2.5-pro:streamGenerateContent?key=AIza-test",
            mock.root_url()
        ))
        .json(&contents_body())
        .send()
        .await
        .unwrap();
    let chunks: Vec<Value> = array.json().await.unwrap();
    assert_eq!(chunks.len(), 7);
    let stats = stats_when(&mock, |s| s.completed == 3).await;
    assert_eq!(stats.by_model["gemini-2.5-flash"].requests, 2);
    assert_eq!(stats.by_model["gemini-2.5-pro"].requests, 1);
}

#[tokio::test]
async fn gemini_function_calls_streamed_and_not() {
    let mock = spawn_with(FaultPlan {
        tool_call: true,
        ..FaultPlan::default()
    })
    .await;
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    let answer = gemini::parse_response(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(answer.tool_calls[0].name, "get_weather");
    assert_eq!(answer.tool_calls[0].id, "call_mock-1_0");
    assert_eq!(answer.tool_calls[0].arguments, r#"{"city":"Paris"}"#);

    let (body, _) =
        read_body(post_gemini(&mock, "gemini-2.5-flash", true, &contents_body()).await).await;
    let (events, done) = decode(Dialect::Gemini, &body);
    assert!(done);
    assert_eq!(
        events[1..3],
        [
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_mock-2_0".into(),
                name: "get_weather".into()
            },
            StreamEvent::ToolCallArgsDelta {
                index: 0,
                fragment: r#"{"city":"Paris"}"#.into()
            }
        ]
    );
    assert!(events.contains(&StreamEvent::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn gemini_errors_follow_the_plan() {
    let mock = spawn_with(FaultPlan {
        status: Some(503),
        ..FaultPlan::default()
    })
    .await;
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    assert_eq!(response.status(), 503);
    let error = gemini::parse_error(503, &response.bytes().await.unwrap());
    assert_eq!(
        (error.class, error.kind.as_deref()),
        (ErrorClass::Overloaded, Some("UNAVAILABLE"))
    );

    mock.set_plan(FaultPlan {
        status: Some(429),
        retry_after: Some(2),
        ..FaultPlan::default()
    });
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    assert_eq!(response.headers()["retry-after"], "2");
    let error = gemini::parse_error(429, &response.bytes().await.unwrap());
    assert_eq!(error.class, ErrorClass::RateLimited);

    mock.set_plan(FaultPlan {
        expect_api_key: Some("other".into()),
        ..FaultPlan::default()
    });
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    assert_eq!(
        response.status(),
        400,
        "Gemini answers a wrong key with 400"
    );
    let error = gemini::parse_error(400, &response.bytes().await.unwrap());
    assert_eq!(error.class, ErrorClass::Auth);
    let no_key = reqwest::Client::new()
        .post(format!("{}{}", mock.root_url(), gemini_path("g", false)))
        .json(&contents_body())
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 403);

    mock.set_plan(FaultPlan {
        max_context_tokens: Some(3),
        ..FaultPlan::default()
    });
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &contents_body()).await;
    let error = gemini::parse_error(400, &response.bytes().await.unwrap());
    assert_eq!(error.class, ErrorClass::ContextLength, "{}", error.message);

    let unknown = reqwest::Client::new()
        .post(format!("{}/v1beta/models/g:countTokens", mock.root_url()))
        .json(&contents_body())
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn gemini_in_band_error_and_prefill() {
    let mock = spawn_with(FaultPlan {
        inband_error_after: Some(1),
        ..FaultPlan::default()
    })
    .await;
    let (body, _) =
        read_body(post_gemini(&mock, "gemini-2.5-flash", true, &contents_body()).await).await;
    let (events, done) = decode(Dialect::Gemini, &body);
    assert!(!done);
    assert_eq!(text_of(&events), "alpha-1");
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: ErrorClass::Overloaded,
            ..
        })
    ));

    mock.set_plan(FaultPlan {
        words: 3,
        ..FaultPlan::default()
    });
    // A prefill as the canonical writer sends it: a final model turn.
    let req = canonical::with_prefill(
        &ChatRequest {
            messages: vec![Message::user("Count.")],
            ..ChatRequest::default()
        },
        "alpha-1",
    );
    let body: Value = serde_json::from_slice(&gemini::write_request(&req, "g").unwrap()).unwrap();
    assert_eq!(body["contents"][1]["role"], "model");
    let response = post_gemini(&mock, "gemini-2.5-flash", false, &body).await;
    let answer = gemini::parse_response(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer.text, " bravo-2 charlie-3.");
}

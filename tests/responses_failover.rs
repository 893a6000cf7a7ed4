//! `POST /v1/responses` when targets fail or differ: failover before the first token, a stream
//! continued in Responses events, hedging, Retry-After, built-in tools (skipped targets, the 400,
//! `builtin_tools = "drop"`), translation to Chat Completions, Anthropic and Gemini targets, and
//! context trimming.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::responses::*;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

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

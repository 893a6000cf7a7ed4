//! `kind = "vertex"` against the mock's Vertex AI: Claude and Gemini models for every client API,
//! whole and streamed; the bodies Vertex wants; failover Anthropic -> Bedrock -> Vertex and
//! Gemini API -> Vertex; a cut stream continued elsewhere; Vertex's own errors classified. Its
//! credentials (tokens fetched, refreshed, refused) are `tests/vertex_credentials.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::vertex::*;
use support::*;
use switchyard::mock::vertex::{ACCESS_TOKEN, PROJECT};
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test]
async fn an_anthropic_client_fails_over_from_anthropic_through_bedrock_to_vertex() {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    let route = [
        "ant/claude-sonnet-4-5",
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
        &format!("vertex/{CLAUDE}"),
    ];
    let gw = Gateway::start(&toml(&m, &route, &file_auth(&creds))).await;
    m[0].set_plan(down());
    m[1].set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let resp = messages(&gw, true).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("vertex/{CLAUDE}")
    );
    assert_eq!(header(&resp, "x-switchyard-attempts"), "3");
    assert_eq!(
        anthropic_text(&resp.text().await.unwrap()),
        canonical_text(12, 0)
    );

    let sent = model_calls(&m[2]);
    assert_eq!(sent.len(), 1);
    let sent = &sent[0];
    assert_eq!(
        sent.path,
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/anthropic/models/{CLAUDE}:streamRawPredict")
    );
    assert_eq!(sent.body["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.body.get("model").is_none(), "{}", sent.body);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["system"][0]["cache_control"]["type"], "ephemeral");
    assert_eq!(
        sent.header("anthropic-beta"),
        Some("interleaved-thinking-2025-05-14")
    );
    assert!(sent
        .header("authorization")
        .unwrap()
        .starts_with("Bearer ya29.mock-"));
    assert_eq!(sent.header("x-api-key"), None);

    // Each one down in turn: the next in order answers.
    let order = [
        "ant/claude-sonnet-4-5".to_owned(),
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0".to_owned(),
        format!("vertex/{CLAUDE}"),
    ];
    for down_one in 0..3 {
        for (i, mock) in m.iter().enumerate() {
            mock.set_plan(if i == down_one {
                down()
            } else {
                FaultPlan::default()
            });
        }
        let resp = messages(&gw, false).await;
        assert_eq!(resp.status(), 200);
        let served = header(&resp, "x-switchyard-target");
        let want = if down_one == 0 { &order[1] } else { &order[0] };
        assert_eq!(&served, want, "with {} down", order[down_one]);
    }
    // The first two down: Vertex answers, whole this time.
    m[0].set_plan(down());
    m[1].set_plan(down());
    m[2].set_plan(FaultPlan::default());
    let resp = messages(&gw, false).await;
    assert_eq!(header(&resp, "x-switchyard-target"), order[2]);

    // Whole answers too, on the same token.
    m[0].set_plan(FaultPlan::default());
    let gw2 = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = messages(&gw2, false).await;
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));
    let last = model_calls(&m[2]).pop().unwrap();
    assert!(last.path.ends_with(":rawPredict"), "{}", last.path);
    gw.stop().await;
    gw2.stop().await;
}

#[tokio::test]
async fn an_openai_client_fails_over_from_the_gemini_api_to_vertex_whole_and_streamed() {
    let (m, _creds, gw) =
        vertex_gateway(&[&format!("gemini/{GEMINI}"), &format!("vertex/{GEMINI}")]).await;
    m[0].set_plan(down());
    let resp = gw.chat(chat(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("vertex/{GEMINI}")
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));

    let resp = gw.chat(chat(true)).await;
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    assert_eq!(events.last().unwrap(), "[DONE]");

    let sent = model_calls(&m[2]);
    let base =
        format!("/v1/projects/{PROJECT}/locations/us-east5/publishers/google/models/{GEMINI}");
    assert_eq!(sent[0].path, format!("{base}:generateContent"));
    assert_eq!(
        sent[1].path,
        format!("{base}:streamGenerateContent?alt=sse")
    );
    for s in &sent {
        let contents = s.body["contents"].as_array().unwrap();
        assert!(
            contents
                .iter()
                .all(|c| c["role"] == "user" || c["role"] == "model"),
            "{}",
            s.body
        );
        assert_eq!(
            s.body["systemInstruction"]["parts"][0]["text"],
            "You are terse."
        );
        assert_eq!(s.header("x-goog-api-key"), None);
    }
    assert_eq!(token_calls(&m[2]), 1, "one token for every call");
    gw.stop().await;
}

#[tokio::test]
async fn a_responses_client_is_served_by_vertex_claude_with_a_given_token() {
    let m = mocks(3).await;
    let auth = format!("project = \"p-1\"\naccess_token = \"{ACCESS_TOKEN}\"");
    let toml = toml(&m, &[&format!("vertex/{CLAUDE}")], &auth) + "\n[responses]\nstore = \"off\"\n";
    let gw = Gateway::start(&toml).await;
    let body = json!({"model": "chat", "input": "Say the canonical text.", "stream": true, "store": false});
    let resp = support::responses::create(&gw, &body).await;
    assert_eq!(resp.status(), 200);
    let evs = support::responses::events(&resp.text().await.unwrap());
    assert_eq!(support::responses::deltas(&evs), canonical_text(12, 0));
    let sent = &model_calls(&m[2])[0];
    assert!(sent
        .path
        .starts_with("/v1/projects/p-1/locations/us-east5/publishers/anthropic/"));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {ACCESS_TOKEN}").as_str())
    );
    assert_eq!(token_calls(&m[2]), 0, "a given token is not fetched");
    gw.stop().await;
}

#[tokio::test]
async fn vertexs_own_errors_are_classified_for_failover() {
    // Claude on Vertex out of quota (Google's envelope, in an array): the next target answers.
    let (m, creds, gw) =
        vertex_gateway(&[&format!("vertex/{CLAUDE}"), "ant/claude-sonnet-4-5"]).await;
    m[2].set_plan(FaultPlan {
        status: Some(429),
        ..FaultPlan::default()
    });
    let resp = gw.chat(chat(false)).await;
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    // Alone, the client hears why, in its own dialect.
    let gw2 = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = messages(&gw2, false).await;
    assert_eq!(resp.status(), 503, "every target rate-limited");
    let text = resp.text().await.unwrap();
    assert!(text.contains(&format!("vertex/{CLAUDE}: 429")), "{text}");

    // A Gemini model's context overflow on Vertex moves to a larger window.
    m[2].set_plan(FaultPlan {
        max_context_tokens: Some(1),
        ..FaultPlan::default()
    });
    let toml = toml(
        &m,
        &["vertex/gemini-2.0-flash", &format!("gemini/{GEMINI}")],
        &file_auth(&creds),
    )
    .replacen(
        "model = \"gemini-2.0-flash\" }",
        "model = \"gemini-2.0-flash\", context_window = 8000 }",
        1,
    )
    .replacen(
        &format!("model = \"{GEMINI}\" }}"),
        &format!("model = \"{GEMINI}\", context_window = 1000000 }}"),
        1,
    );
    let gw3 = Gateway::start(&toml).await;
    let resp = gw3.chat(chat(false)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        format!("gemini/{GEMINI}")
    );
    gw.stop().await;
    gw2.stop().await;
    gw3.stop().await;
}

#[tokio::test]
async fn a_vertex_stream_cut_mid_answer_is_continued_elsewhere() {
    let route = [&format!("vertex/{GEMINI}") as &str, "ant/claude-sonnet-4-5"];
    let (m, _creds, gw) = vertex_gateway(&route).await;
    m[2].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..FaultPlan::default()
    });
    assert_seamless_stream(gw.chat(chat(true)).await).await;
    assert_eq!(m[0].requests().len(), 1, "the continuation");
    gw.stop().await;
}

#[tokio::test]
async fn each_client_api_is_served_by_each_publisher_across_dialects() {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    // An OpenAI client on Claude (Vertex's Anthropic publisher), streamed and whole.
    let claude = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{CLAUDE}")],
        &file_auth(&creds),
    ))
    .await;
    let resp = claude.chat(chat(true)).await;
    assert_eq!(resp.status(), 200);
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    let body: Value = claude.chat(chat(false)).await.json().await.unwrap();
    assert_eq!(completion_text(&body), canonical_text(12, 0));
    // An Anthropic client on Gemini, whole and streamed.
    let gemini = Gateway::start(&toml(
        &m,
        &[&format!("vertex/{GEMINI}")],
        &file_auth(&creds),
    ))
    .await;
    let body: Value = messages(&gemini, false).await.json().await.unwrap();
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], canonical_text(12, 0));
    let resp = messages(&gemini, true).await;
    assert_eq!(
        anthropic_text(&resp.text().await.unwrap()),
        canonical_text(12, 0)
    );
    let ops: Vec<String> = model_calls(&m[2])
        .iter()
        .map(|r| r.path.rsplit(':').next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        ops,
        [
            "streamRawPredict",
            "rawPredict",
            "generateContent",
            "streamGenerateContent?alt=sse"
        ]
    );
    claude.stop().await;
    gemini.stop().await;
}

#[tokio::test]
async fn a_clients_query_is_not_sent_to_the_clouds() {
    let route = [
        "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0",
        &format!("vertex/{CLAUDE}") as &str,
    ];
    let (m, _creds, gw) = vertex_gateway(&route).await;
    for down_first in [false, true] {
        m[1].set_plan(if down_first {
            down()
        } else {
            FaultPlan::default()
        });
        let resp = client()
            .post(gw.url("/v1/messages?beta=true"))
            .header("x-api-key", "unused")
            .header("anthropic-version", "2023-06-01")
            .json(&json!({"model": "chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let bedrock = &m[1].requests()[0];
    assert!(bedrock.path.ends_with("/invoke"), "{}", bedrock.path);
    let vertex = model_calls(&m[2]).pop().unwrap();
    assert!(vertex.path.ends_with(":rawPredict"), "{}", vertex.path);
    gw.stop().await;
}

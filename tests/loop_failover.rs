//! A tool loop that fails over to another vendor mid-loop: turn 1 is served by one vendor,
//! turn 2 (the call and its result sent back) by the next, for every client API and every
//! pair with Gemini in it; each vendor gets only what it accepts. Anthropic -> OpenAI is in
//! `tests/passthrough.rs`.
//!
//! - Gemini -> Anthropic or OpenAI: the signature carried in the call's id is cut out of the
//!   call and of its result alike, so they still pair; nothing of Gemini's goes along.
//! - Anthropic or OpenAI -> Gemini 3: the other vendor's thinking stays behind; the call,
//!   which Gemini did not make, goes with the validator-skipping value Google documents (the
//!   mock's Gemini 3 refuses the turn without a signature).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::loops::*;
use support::*;

#[tokio::test]
async fn gemini_to_anthropic_and_openai_mid_loop_sends_plain_paired_ids() {
    let m = mocks(3).await;
    for next in ["ant", "oai"] {
        for api in APIS {
            for stream in [false, true] {
                let case = format!("gem -> {next}, {api:?} stream={stream}");
                for mock in &m {
                    mock.reset();
                }
                tool_loops(&m);
                let gw = Gateway::start(&vendors(&m, &["gem", next])).await;
                let called = api.call(&gw, stream).await;
                assert!(called.id.contains("__gts"), "{case}: {}", called.id);
                m[2].set_model_plan(GEMINI_3, down());

                let (status, text) = api.answer(&gw, &called, stream).await;
                assert_eq!(status, 200, "{case}: {text}");
                let mock = if next == "ant" { &m[1] } else { &m[0] };
                let sent = mock.requests().last().unwrap().clone();
                let body = sent.body.to_string();
                for gemini in ["__gts", "thoughtSignature", "thought_signature"] {
                    assert!(!body.contains(gemini), "{case}: {gemini} sent: {body}");
                }
                assert_eq!(
                    paired_ids(&sent.body),
                    ("call_mock-1_0".to_owned(), "call_mock-1_0".to_owned()),
                    "{case}: {body}"
                );
                gw.stop().await;
            }
        }
    }
}

/// An Anthropic client's token count of a conversation Gemini signed: the Anthropic target
/// counts it with plain ids.
#[tokio::test]
async fn count_tokens_of_a_gemini_signed_conversation_goes_with_plain_ids() {
    let m = mocks(3).await;
    tool_loops(&m);
    let gw = Gateway::start(&vendors(&m, &["gem", "ant"])).await;
    let called = Api::Messages.call(&gw, false).await;
    let resp = client()
        .post(gw.url("/v1/messages/count_tokens"))
        .header("anthropic-version", "2023-06-01")
        .json(&Api::Messages.second(&called, false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        header(&resp, "x-switchyard-target"),
        "ant/claude-sonnet-4-5"
    );
    let sent = m[1].requests().last().unwrap().clone();
    assert_eq!(sent.path, "/v1/messages/count_tokens");
    assert!(!sent.body.to_string().contains("__gts"), "{}", sent.body);
    assert_eq!(
        paired_ids(&sent.body),
        ("call_mock-1_0".to_owned(), "call_mock-1_0".to_owned())
    );
}

#[tokio::test]
async fn anthropic_and_openai_to_gemini_3_mid_loop_sign_the_call_gemini_did_not_make() {
    let m = mocks(3).await;
    for first in ["ant", "oai"] {
        for api in APIS {
            for stream in [false, true] {
                let case = format!("{first} -> gem, {api:?} stream={stream}");
                for mock in &m {
                    mock.reset();
                }
                tool_loops(&m);
                let gw = Gateway::start(&vendors(&m, &[first, "gem"])).await;
                let called = api.call(&gw, stream).await;
                let thinking = called.turn.to_string();
                if first == "ant" && api == Api::Messages {
                    assert!(
                        thinking.contains(r#""type":"thinking""#),
                        "{case}: {thinking}"
                    );
                }
                m[if first == "ant" { 1 } else { 0 }].set_plan(down());

                let (status, text) = api.answer(&gw, &called, stream).await;
                assert_eq!(status, 200, "{case}: {text}");
                let sent = m[2].requests().last().unwrap().body.clone();
                let body = sent.to_string();
                for other in ["thinking", "signature\"", "toolu_mock_1\""] {
                    assert!(!body.contains(other), "{case}: {other} sent: {body}");
                }
                let call = gemini_call(&sent);
                assert_eq!(
                    call,
                    json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": SKIP_VALIDATOR}),
                    "{case}: {body}"
                );
                let response: &Value = &sent["contents"][2]["parts"][0]["functionResponse"];
                assert_eq!(response["name"], "get_weather", "{case}: {body}");
                gw.stop().await;
            }
        }
    }
}

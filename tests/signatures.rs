//! Gemini thought signatures carried through each client API: a Gemini 3 target signs its
//! function calls; the OpenAI (Chat Completions), Anthropic and Responses clients get them
//! inside the call's id and send the conversation back, and the target gets each signature
//! back on its call exactly as it made it (the mock's Gemini 3 refuses the turn otherwise),
//! whole and streamed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::loops::*;
use support::*;

/// Anthropic requires this of a `tool_use` id (and the ids go back to it in a failover).
fn anthropic_accepts(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[tokio::test]
async fn every_client_api_gets_a_gemini_signed_call_back_to_gemini_whole_and_streamed() {
    let m = mocks(3).await;
    tool_loops(&m);
    let gw = Gateway::start(&vendors(&m, &["gem"])).await;
    for api in APIS {
        for stream in [false, true] {
            let case = format!("{api:?} stream={stream}");
            let called = api.call(&gw, stream).await;
            let made = m[2].stats().requests;
            assert!(anthropic_accepts(&called.id), "{case}: {}", called.id);
            assert!(
                called.id.starts_with(&format!("call_mock-{made}_0")),
                "{case}: {}",
                called.id
            );

            let (status, text) = api.answer(&gw, &called, stream).await;
            assert_eq!(status, 200, "{case}: {text}");
            assert!(
                text.contains("alpha-1"),
                "{case}: the loop ends in text: {text}"
            );
            let sent = m[2].requests().last().unwrap().body.clone();
            let call = gemini_call(&sent);
            assert_eq!(
                call["thoughtSignature"],
                Value::String(mock_signature(made)),
                "{case}: the signature of answer {made}, as made: {sent}"
            );
            assert_eq!(call["functionCall"]["name"], "get_weather");
            let response = &sent["contents"][2]["parts"][0]["functionResponse"];
            assert_eq!(response["name"], "get_weather", "{case}: {sent}");
        }
    }
    assert_eq!(m[2].stats().requests, 12);
    gw.stop().await;
}

//! Upstream errors classified by what they say, not only by their `code`: a context-length 400
//! from an OpenAI-compatible server that says so only in its message (vLLM, llama.cpp, OpenAI's
//! own legacy answer with `code: null`) moves to a target with a larger `context_window`, as
//! `code: "context_length_exceeded"` does; any other 400 is still the client's and returned as
//! it is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::*;
use switchyard::mock::FaultPlan;

/// vLLM's answer to a prompt over `--max-model-len`: no OpenAI envelope, `code` is the status.
const VLLM: &str = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;

/// llama.cpp's server (`llama-server`) over its `--ctx-size`.
const LLAMA_CPP: &str = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;

/// OpenAI's own legacy answer, before it carried a code.
const OPENAI_LEGACY: &str = r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":null}}"#;

/// A plan under which every call answers 400 with `body`.
fn answers_400(body: &str) -> FaultPlan {
    FaultPlan {
        status: Some(400),
        error_body: Some(body.to_owned()),
        ..Default::default()
    }
}

/// Two OpenAI-compatible targets, a small window first and a larger one behind it; the first
/// answers 400 with `body`. Asserts that the client got the second target's answer after one
/// call to the first.
async fn moves_to_the_larger_window(body: &str) {
    let m = mocks(2).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(4_096), Some(128_000)])).await;
    m[0].set_plan(answers_400(body));
    let resp = gw.chat(chat_body(false)).await;
    let status = resp.status();
    let target = header(&resp, "x-switchyard-target");
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "the larger window answers: {text}");
    assert_eq!(target, "p1/model-1");
    assert_eq!(m[0].stats().requests, 1, "the small window is asked once");
    assert_eq!(m[1].stats().requests, 1);
}

#[tokio::test]
async fn a_vllm_context_length_400_moves_to_a_larger_window() {
    moves_to_the_larger_window(VLLM).await;
}

#[tokio::test]
async fn a_llama_cpp_context_size_400_moves_to_a_larger_window() {
    moves_to_the_larger_window(LLAMA_CPP).await;
}

#[tokio::test]
async fn an_openai_context_length_400_without_a_code_moves_to_a_larger_window() {
    moves_to_the_larger_window(OPENAI_LEGACY).await;
}

/// A 400 that is not about the context length is the client's to fix: returned as it is after
/// one attempt, in the shapes above, with nothing sent to the larger window.
#[tokio::test]
async fn a_plain_400_is_returned_as_is_after_one_attempt() {
    let plain = [
        r#"{"object":"error","message":"temperature must be between 0 and 2, got 3.0.","type":"BadRequestError","param":null,"code":400}"#,
        r#"{"error":{"code":400,"message":"'messages' must be an array","type":"invalid_request_error"}}"#,
        r#"{"error":{"message":"Invalid value for 'temperature': must be between 0 and 2.","type":"invalid_request_error","param":"temperature","code":null}}"#,
    ];
    for body in plain {
        let m = mocks(2).await;
        let gw = Gateway::start(&config_with(&m, "", &[Some(4_096), Some(128_000)])).await;
        m[0].set_plan(answers_400(body));
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 400, "{body}");
        assert_eq!(header(&resp, "x-switchyard-attempts"), "1", "{body}");
        let got: Value = resp.json().await.unwrap();
        assert_eq!(
            got,
            serde_json::from_str::<Value>(body).unwrap(),
            "the provider's answer as it is"
        );
        assert_eq!(m[0].stats().requests, 1, "{body}");
        assert_eq!(m[1].stats().requests, 0, "{body}");
    }
}

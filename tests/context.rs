//! Context carry-over: a conversation too long for a target's `context_window` is trimmed to fit
//! before the attempt: the system prompt and the newest turns stay, a tool call keeps its
//! result, and the number of turns dropped is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::*;

fn long_conversation() -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are the agent's planner."})];
    for i in 0..40 {
        let filler = format!("turn {i}: ") + &"lorem ipsum dolor sit amet ".repeat(20);
        messages.push(json!({"role": "user", "content": filler.clone()}));
        messages.push(json!({"role": "assistant", "content": filler}));
    }
    messages.push(json!({"role": "user", "content": "What is the weather?"}));
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    json!({"model": "chat", "max_tokens": 100, "messages": messages})
}

#[tokio::test]
async fn a_conversation_too_long_for_the_target_is_trimmed_to_fit() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(3_000)])).await;
    let resp = gw.chat(long_conversation()).await;
    assert_eq!(resp.status(), 200);
    let dropped: usize = header(&resp, "x-switchyard-turns-dropped").parse().unwrap();
    assert!(dropped > 10, "{dropped}");
    let sent = &m[0].requests()[0].body;
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["role"], "system", "the system prompt stays");
    assert_eq!(
        msgs[1]["role"], "user",
        "the conversation still starts with the user"
    );
    assert_eq!(
        msgs.last().unwrap()["role"],
        "tool",
        "the newest turns stay"
    );
    assert_eq!(
        msgs[msgs.len() - 2]["tool_calls"][0]["id"],
        "call_1",
        "the tool call keeps its result"
    );
    assert_eq!(
        msgs.len() + dropped,
        long_conversation()["messages"].as_array().unwrap().len()
    );
}

#[tokio::test]
async fn a_conversation_that_fits_passes_through_untouched() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config_with(&m, "", &[Some(128_000)])).await;
    let resp = gw.chat(long_conversation()).await;
    assert_eq!(header(&resp, "x-switchyard-turns-dropped"), "");
    let mut expected = long_conversation();
    expected["model"] = json!("model-0");
    assert_eq!(m[0].requests()[0].body, expected);
}

#[tokio::test]
async fn with_on_overflow_error_nothing_is_trimmed() {
    let m = mocks(1).await;
    let toml = config_with(&m, "", &[Some(3_000)]) + "[routes.context]\non_overflow = \"error\"\n";
    let gw = Gateway::start(&toml).await;
    gw.chat(long_conversation()).await;
    let sent = &m[0].requests()[0].body;
    assert_eq!(
        sent["messages"].as_array().unwrap().len(),
        long_conversation()["messages"].as_array().unwrap().len()
    );
}

//! The official Anthropic Python SDK, pointed at the gateway's `/v1/messages` by base URL only,
//! is answered by a Gemini-kind backup while the OpenAI-kind primary fails, streamed and not;
//! and runs a thinking tool loop on an Anthropic target, whose second turn carries the signed
//! thinking block back to it exactly. `.ci/run` installs the SDK; outside CI the test says it
//! is skipped when it is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_rides_through_a_failing_primary() {
    if !python_sdk("anthropic") {
        return;
    }
    let m = mocks(2).await;
    let toml = format!(
        "[[providers]]\nname = \"openai\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"gemini\"\nkind = \"gemini\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"claude-ish\"\ntargets = [{{ provider = \"openai\", model = \"gpt-4o\" }}, {{ provider = \"gemini\", model = \"gemini-2.5-pro\" }}]\n",
        m[0].base_url(),
        m[1].root_url()
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/anthropic_client.py");
    let base = gw.url("");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &base, "claude-ish"])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK script failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    let whole = canonical_text(12, 0);
    assert_eq!(got["text"], whole.as_str());
    assert_eq!(got["stop_reason"], "end_turn");
    assert_eq!(got["target"], "gemini/gemini-2.5-pro");
    assert_eq!(got["stream_text"], whole.as_str());
    assert_eq!(got["stream_stop_reason"], "end_turn");
    assert!(got["stream_output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(m[0].stats().requests, 2, "the primary failed both");
    assert_eq!(m[1].stats().requests, 2, "the Gemini backup answered both");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_carries_signed_thinking_through_a_tool_loop() {
    if !python_sdk("anthropic") {
        return;
    }
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        tool_call: true,
        ..Default::default()
    });
    let toml = format!(
        "[[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"claude\"\ntargets = [{{ provider = \"ant\", model = \"claude-sonnet-4-5\" }}]\n",
        m[0].root_url()
    );
    let gw = Gateway::start(&toml).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sdk/anthropic_thinking.py"
    );
    let got = python_json(script, vec![gw.url(""), "claude".into()], &[]).await;
    // The mock's thinking for a conversation of one message, and its signature.
    let made = json!({
        "thinking": "Turn 1: the canonical text answers it.",
        "signature": STANDARD.encode(b"\xFB\xEF\xFFthinking:1"),
    });
    let requests = m[0].requests();
    assert_eq!(requests.len(), 4, "two turns, whole then streamed");
    for (run, turn2) in [("whole", &requests[1]), ("streamed", &requests[3])] {
        assert_eq!(got[run]["thinking"], made, "{run}: what the SDK got");
        assert_eq!(got[run]["stop_reason"], "tool_use", "{run}");
        assert_eq!(got[run]["answer"], canonical_text(12, 0).as_str(), "{run}");
        assert_eq!(got[run]["answer_stop_reason"], "end_turn", "{run}");
        let mut block = made.clone();
        block["type"] = json!("thinking");
        assert_eq!(
            turn2.body["messages"][1]["content"][0], block,
            "{run}: turn 2 carries the signed thinking block back as it was made"
        );
        assert_eq!(turn2.body["messages"][1]["content"][1]["type"], "tool_use");
        let call = &turn2.body["messages"][1]["content"][1]["id"];
        assert_eq!(
            turn2.body["messages"][2]["content"][0]["tool_use_id"], *call,
            "{run}"
        );
    }
    gw.stop().await;
}

//! The official OpenAI Python SDK's Responses API (`responses.create`, `.stream`, a function-tool
//! loop on a stored turn, JSON-schema output, `retrieve`, `input_items.list`, `delete`) against
//! the gateway, by base URL only, while the primary (an OpenAI target, served natively) is down:
//! every answer comes from the backup, an OpenAI-compatible server the gateway speaks Chat
//! Completions to, translated both ways; and a stream its primary (served natively) cuts after
//! the first tokens is continued there. `.ci/run` installs the SDK.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_gets_every_responses_feature_from_a_translated_backup() {
    if !python_sdk("openai") {
        return;
    }
    let m = mocks(4).await;
    let toml = format!(
        "[audit]\nstore = \"off\"\n\n[responses]\nstore = \"{}\"\n\n\
         [[providers]]\nname = \"p0\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"p1\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"p2\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"agent\"\ntargets = [{{ provider = \"p0\", model = \"gpt-a\" }}, {{ provider = \"p1\", model = \"chat-b\" }}]\n\n\
         [[providers]]\nname = \"p3\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"tools\"\ntargets = [{{ provider = \"p0\", model = \"gpt-a\" }}, {{ provider = \"p2\", model = \"chat-c\" }}]\n\n\
         [[routes]]\nname = \"cut\"\ntargets = [{{ provider = \"p3\", model = \"gpt-d\" }}, {{ provider = \"p1\", model = \"chat-b\" }}]\n",
        responses_db(),
        m[0].base_url(),
        m[1].base_url(),
        m[2].base_url(),
        m[3].base_url()
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    m[3].set_plan(FaultPlan {
        cut_after_chunks: Some(4),
        ..Default::default()
    });
    m[2].set_plan(FaultPlan {
        tool_call: true,
        ..Default::default()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/openai_responses.py");
    let base = gw.url("/v1");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args([script, &base, "agent", "tools", "cut"])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK script failed:\n{stderr}");
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    let chats: Vec<_> = m[1]
        .requests()
        .into_iter()
        .chain(m[2].requests())
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert!(
        !chats.is_empty(),
        "the backup was spoken to in Chat Completions"
    );
    let whole = canonical_text(12, 0);
    assert_eq!(got["text"], whole.as_str(), "{got}");
    assert_eq!(got["status"], "completed");
    assert!(got["id"].as_str().unwrap().starts_with("resp_"), "{got}");
    assert_eq!(got["stream_text"], whole.as_str());
    assert_eq!(got["stream_final_text"], whole.as_str());
    assert_eq!(got["stream_first"], "response.created");
    assert_eq!(got["stream_last"], "response.completed");
    assert_eq!(
        got["continued_text"],
        whole.as_str(),
        "the seam is invisible: {got}"
    );
    assert_eq!(got["continued_final_text"], whole.as_str(), "{got}");
    assert_eq!(m[3].stats().requests, 1, "the cut primary was asked once");
    assert_eq!(got["tool_calls"][0][0], "get_weather", "{got}");
    assert!(
        got["after_tool"].as_str().is_some_and(|t| !t.is_empty()),
        "{got}"
    );
    // The tool loop's second turn reached the backup with the first turn expanded.
    let turn = chats
        .iter()
        .find(|r| {
            r.body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
        })
        .expect("the tool's output went back");
    let messages = turn.body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{:?}", turn.body);
    assert_eq!(messages[2]["content"], "sunny");
    assert_eq!(
        messages[1]["tool_calls"][0]["id"], messages[2]["tool_call_id"],
        "the call and its output pair up"
    );
    // JSON schema output reached the backup as a response_format.
    let structured = chats
        .iter()
        .find(|r| r.body.get("response_format").is_some())
        .expect("the schema went on");
    assert_eq!(structured.body["response_format"]["type"], "json_schema");
    assert_eq!(
        structured.body["response_format"]["json_schema"]["name"],
        "answer"
    );
    assert_eq!(got["structured_status"], "completed");
    assert_eq!(got["retrieved_text"], whole.as_str());
    assert_eq!(got["input_items"], 1);
    assert_eq!(got["after_delete"], "not found");
    gw.stop().await;
}

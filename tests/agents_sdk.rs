//! The OpenAI Agents SDK (PyPI `openai-agents`, in the venv `.ci/run` makes in tests/agents),
//! its chat-completions model pointed at the gateway by base URL only, runs a function-tool
//! loop while the primary fails: the tool is called once and the final answer comes from the
//! backup. Outside CI the test is skipped when the venv is missing; under CI that fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

const PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/venv/bin/python");

/// Whether the agents venv is there (outside CI a missing one skips the test; under CI it
/// fails it).
fn have_venv() -> bool {
    if std::path::Path::new(PYTHON).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must make the agents venv (tests/agents/venv with openai-agents)"
    );
    eprintln!("SKIPPED: tests/agents/venv is missing (see .ci/run)");
    false
}

/// Runs tests/agents/agents_sdk.py against the gateway at `base` with route `model` and the
/// SDK's `api` (`chat` or `responses`): its JSON summary.
async fn run_script(base: String, model: &'static str, api: &'static str) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/agents/agents_sdk.py");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(PYTHON)
            .args([script, &base, model, api])
            .env("OPENAI_AGENTS_DISABLE_TRACING", "1")
            .output()
    })
    .await
    .unwrap()
    .expect("the venv's python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Agents SDK script failed:\n{stderr}"
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_runs_a_tool_loop_through_a_failing_primary() {
    if !have_venv() {
        return;
    }
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        tool_call: true,
        ..Default::default()
    });
    let got = run_script(gw.url("/v1"), "chat", "chat").await;
    assert_eq!(got["tool_calls"], serde_json::json!(["Paris"]), "{got}");
    assert_eq!(got["final"], canonical_text(12, 0).as_str());
    let second_turn = &m[1].requests()[1].body;
    let last = second_turn["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        last["role"], "tool",
        "the tool's result went back: {second_turn}"
    );
    assert_eq!(
        m[0].stats().requests,
        2,
        "the primary was tried on both turns"
    );
}

/// The SDK's default model speaks the Responses API: the primary (an OpenAI target, served
/// natively) fails, and the tool loop is carried by the backup, an OpenAI target too, each turn
/// passed through as the SDK sent it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_sdk_default_model_runs_a_tool_loop_on_the_responses_api() {
    if !have_venv() {
        return;
    }
    let m = mocks(2).await;
    let mut toml = String::from("[audit]\nstore = \"off\"\n\n");
    for (i, mock) in m.iter().enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n",
            mock.base_url()
        );
    }
    toml += "[[routes]]\nname = \"agent\"\ntargets = [{ provider = \"p0\", model = \"gpt-a\" }, { provider = \"p1\", model = \"gpt-b\" }]\n";
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        tool_call: true,
        ..Default::default()
    });
    let got = run_script(gw.url("/v1"), "agent", "responses").await;
    assert_eq!(got["tool_calls"], serde_json::json!(["Paris"]), "{got}");
    assert_eq!(got["final"], canonical_text(12, 0).as_str());
    let turns = m[1].requests();
    assert!(
        turns.iter().all(|r| r.path == "/v1/responses"),
        "the backup's own Responses API served every turn"
    );
    let second = &turns[1].body;
    let input = second["input"].as_array().unwrap();
    assert!(
        input.iter().any(|i| i["type"] == "function_call_output"),
        "the tool's output went back: {second}"
    );
    assert_eq!(
        m[0].stats().requests,
        2,
        "the primary was tried on both turns"
    );
}

//! Codex CLI (npm `@openai/codex`, installed by `.ci/run` in tests/agents), given only a
//! custom model provider whose base URL is the gateway (`wire_api = "responses"`), with HOME
//! and CODEX_HOME in a temp dir and analytics off, runs `codex exec` while the primary is down:
//! the answer comes from the backup, which got Codex's request as Codex sent it (only `model`
//! rewritten). Outside CI the test is skipped when Codex is not installed; under CI that fails
//! it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

const CODEX: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/agents/node_modules/.bin/codex"
);

/// Runs `codex exec PROMPT` against the gateway at `base` (`.../v1`), in a temp home.
async fn codex_exec(base: String, prompt: &'static str) -> std::process::Output {
    let home = std::env::temp_dir().join(format!("switchyard-codex-{}", fastrand::u64(..)));
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = format!(
        r#"model = "agent"
model_provider = "switchyard"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.switchyard]
name = "switchyard"
base_url = "{base}"
wire_api = "responses"
env_key = "SWITCHYARD_TEST_KEY"
request_max_retries = 0
stream_max_retries = 0
"#
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(CODEX)
            .args(["exec", "--skip-git-repo-check", prompt])
            .current_dir(&work)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("SWITCHYARD_TEST_KEY", "sk-codex-client")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .inspect(|_| {
                let _ = std::fs::remove_dir_all(&home);
            })
    })
    .await
    .unwrap();
    output.expect("codex runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_answers_through_a_down_primary() {
    if !std::path::Path::new(CODEX).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install Codex CLI (tests/agents, npm ci)"
        );
        eprintln!("SKIPPED: {CODEX} is missing (see .ci/run)");
        return;
    }
    let m = mocks(2).await;
    let mut toml = String::from("[audit]\nstore = \"off\"\n\n");
    for (i, mock) in m.iter().enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n",
            mock.base_url()
        );
    }
    toml += "[[routes]]\nname = \"agent\"\ntargets = [{ provider = \"p0\", model = \"gpt-a\" }, { provider = \"p1\", model = \"gpt-b\" }]\n";
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let output = codex_exec(gw.url("/v1"), "Say hello.").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "codex exec failed:\nstdout: {stdout}\nstderr: {stderr}"
    );
    let answer = canonical_text(12, 0);
    assert!(
        stdout.contains(&answer),
        "the backup's answer reached Codex:\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(m[0].stats().requests >= 1, "the primary was tried");
    let reqs = m[1].requests();
    let turn = reqs
        .iter()
        .find(|r| r.path.starts_with("/v1/responses"))
        .expect("the backup got a Responses API request");
    assert_eq!(turn.body["model"], "gpt-b", "only the model is rewritten");
    assert_eq!(turn.body["store"], false);
    assert_eq!(
        turn.body["include"],
        serde_json::json!(["reasoning.encrypted_content"]),
        "Codex's fields reach the provider as Codex sent them"
    );
    assert!(turn.body["prompt_cache_key"].is_string());
    assert_eq!(
        turn.header("authorization"),
        Some("Bearer sk-test-secret"),
        "the provider's key, never the client's"
    );
    gw.stop().await;
}

/// With `builtin_tools = "drop"`, Codex's turn fails over to a Claude target: Codex offers
/// built-in tools (`web_search`, a `namespace`) that only OpenAI runs, and the Anthropic
/// backup gets the turn without them, translated, its answer written back as Responses events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_fails_over_to_an_anthropic_target_when_the_route_drops_built_in_tools() {
    if !std::path::Path::new(CODEX).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install Codex CLI (tests/agents, npm ci)"
        );
        eprintln!("SKIPPED: {CODEX} is missing (see .ci/run)");
        return;
    }
    let m = mocks(2).await;
    let toml = format!(
        "[audit]\nstore = \"off\"\n\n\
         [[providers]]\nname = \"oai\"\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"agent\"\ntargets = [{{ provider = \"oai\", model = \"gpt-a\" }}, {{ provider = \"ant\", model = \"claude-b\" }}]\n\
         [routes.failover]\nbuiltin_tools = \"drop\"\n",
        m[0].base_url(),
        m[1].root_url()
    );
    let gw = Gateway::start(&toml).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let output = codex_exec(gw.url("/v1"), "Say hello.").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "codex exec failed:\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains(&canonical_text(12, 0)),
        "Claude's answer reached Codex:\nstdout: {stdout}\nstderr: {stderr}"
    );
    let turn = m[1]
        .requests()
        .into_iter()
        .find(|r| r.path.starts_with("/v1/messages"))
        .expect("the Anthropic backup got the turn");
    assert_eq!(turn.body["model"], "claude-b");
    let tools = turn.body["tools"].as_array().cloned().unwrap_or_default();
    assert!(
        !tools.is_empty(),
        "Codex's function tools went on: {}",
        turn.body
    );
    assert!(
        tools.iter().all(|t| t.get("input_schema").is_some()),
        "only function tools, as Anthropic tools: {tools:?}"
    );
    assert!(
        turn.body["system"].to_string().contains("Codex"),
        "Codex's developer message is the system prompt"
    );
    gw.stop().await;
}

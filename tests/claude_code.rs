//! Claude Code (`claude -p`, installed by `.ci/run` from npm into tests/agents) through the
//! gateway, compared with the same run straight to the same upstream: over a thinking tool loop
//! with cache markers, the upstream must receive the same requests (bar the session id) and
//! the agent must print the same answer. The upstream is scripted here: turn 1 answers with a
//! signed thinking block and a tool call, turn 2 (which must carry that thinking block back with
//! its signature) with text. Outside CI the test is skipped when Claude Code is not installed;
//! under CI (`CI` set) that fails it. HOME is a temp dir, telemetry and updates are off, and the
//! only address Claude Code is given is 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::response::IntoResponse;
use serde_json::{json, Value};
use support::*;

const SIGNATURE: &str = "EqQBCkYIARgCKkDswitchyardTestSignature==";
const MODEL: &str = "claude-sonnet-4-5";

fn claude_bin() -> Option<PathBuf> {
    let bin = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/agents/node_modules/.bin/claude"
    ));
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must install Claude Code: (cd tests/agents && npm ci)"
    );
    eprintln!("SKIPPED: Claude Code is not installed (cd tests/agents && npm ci)");
    None
}

/// One request the upstream saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    betas: Vec<String>,
    body: Value,
}

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// The scripted answer to a `/v1/messages` body.
fn answer(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let has_result = messages.iter().any(|m| {
        m["content"]
            .as_array()
            .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    });
    let wants_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "model": MODEL, "content": [], "stop_reason": null,
        "usage": {"input_tokens": 20, "cache_read_input_tokens": 0, "output_tokens": 1}}});
    let mut events = vec![("message_start", start)];
    let (stop, text_block) = if wants_tools && !has_result {
        events.extend([
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "I will look for text files."}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": SIGNATURE}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_01switchyard", "name": "Glob",
                "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"pattern\": \"*.txt\"}"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
        ]);
        ("tool_use", None)
    } else if has_result {
        ("end_turn", Some("There is one text file: notes.txt."))
    } else {
        ("end_turn", Some("ok"))
    };
    if let Some(text) = text_block {
        events.extend([
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
        ]);
    }
    events.extend([
        (
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 12}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    sse(&events)
}

/// The scripted Anthropic upstream, recording what it saw.
async fn upstream() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let record = record.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let path = parts.uri.to_string();
            let betas = parts
                .headers
                .get_all("anthropic-beta")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect();
            record.lock().unwrap().push(Seen {
                path: path.clone(),
                betas,
                body: body.clone(),
            });
            if path.starts_with("/v1/messages/count_tokens") {
                return axum::Json(json!({"input_tokens": 42})).into_response();
            }
            if !path.starts_with("/v1/messages") {
                return (http::StatusCode::NOT_FOUND, "not here").into_response();
            }
            if body["stream"] == true {
                ([("content-type", "text/event-stream")], answer(&body)).into_response()
            } else {
                let text = "ok";
                axum::Json(
                    json!({"id": "msg_2", "type": "message", "role": "assistant",
                    "model": MODEL, "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn", "stop_sequence": null,
                    "usage": {"input_tokens": 5, "output_tokens": 1}}),
                )
                .into_response()
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// Run `claude -p` in `work` against `base_url`; its stdout.
async fn run_claude(bin: &PathBuf, work: &std::path::Path, base_url: &str) -> String {
    let home = work.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = tokio::process::Command::new(bin);
    cmd.current_dir(work.join("project"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .env("ANTHROPIC_BASE_URL", base_url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-client")
        .env("ANTHROPIC_DEFAULT_HAIKU_MODEL", MODEL)
        .env("ANTHROPIC_SMALL_FAST_MODEL", MODEL)
        .env("MAX_THINKING_TOKENS", "1024")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .args([
            "-p",
            "Which text files are here?",
            "--model",
            MODEL,
            "--allowedTools",
            "Glob",
        ])
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), cmd.output())
        .await
        .expect("claude -p finishes within 2 minutes")
        .unwrap();
    assert!(
        out.status.success(),
        "claude -p failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A request with what differs between two runs of the same agent taken out: the session id
/// in `metadata.user_id`.
fn comparable(s: &Seen) -> Value {
    let mut body = s.body.clone();
    if let Some(m) = body.get_mut("metadata") {
        *m = Value::Null;
    }
    json!({"path": s.path, "betas": s.betas, "body": body})
}

fn count(v: &Value, needle: &str) -> usize {
    v.to_string().matches(needle).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_through_the_gateway_is_claude_code_direct() {
    let Some(bin) = claude_bin() else { return };
    let work = std::env::temp_dir().join(format!("switchyard-claude-{}", std::process::id()));
    std::fs::create_dir_all(work.join("project")).unwrap();
    std::fs::write(work.join("project/notes.txt"), "hello\n").unwrap();

    let (direct_url, direct_seen) = upstream().await;
    let direct_out = run_claude(&bin, &work, &direct_url).await;

    let (url, seen) = upstream().await;
    let toml = format!(
        "[[providers]]\nname = \"anthropic\"\nkind = \"anthropic\"\nbase_url = \"{url}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[routes]]\nname = \"{MODEL}\"\ntargets = [{{ provider = \"anthropic\", model = \"{MODEL}\" }}]\n"
    );
    let gw = Gateway::start(&toml).await;
    let through_out = run_claude(&bin, &work, &gw.url("")).await;
    let _ = std::fs::remove_dir_all(&work);

    assert_eq!(through_out, direct_out, "the agent prints the same answer");
    assert!(through_out.contains("notes.txt"), "{through_out}");
    let direct: Vec<Value> = direct_seen.lock().unwrap().iter().map(comparable).collect();
    let through: Vec<Value> = seen.lock().unwrap().iter().map(comparable).collect();
    assert_eq!(through.len(), direct.len(), "as many upstream calls");
    for (i, (t, d)) in through.iter().zip(&direct).enumerate() {
        assert_eq!(t, d, "upstream request {i} differs");
    }
    let loop_turns: Vec<&Value> = through
        .iter()
        .filter(|r| r["body"]["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    assert!(
        loop_turns.len() >= 2,
        "a tool loop: {} turns",
        loop_turns.len()
    );
    let last = loop_turns.last().unwrap();
    assert_eq!(
        count(last, SIGNATURE),
        1,
        "turn 2 carries the signed thinking back"
    );
    assert!(
        count(last, "cache_control") > 0,
        "cache markers reach the provider"
    );
    assert!(
        !last["betas"].as_array().unwrap().is_empty(),
        "anthropic-beta reaches it"
    );
}

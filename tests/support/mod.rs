//! Shared test harness: a gateway and mock providers on 127.0.0.1:0, in this process.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod audit;
pub mod golden;
pub mod loops;
pub mod otlp;
pub mod responses;
pub mod vertex;

use std::net::SocketAddr;

use switchyard::config::Config;
use switchyard::mock::MockServer;
use tokio::sync::oneshot;

/// A running gateway.
pub struct Gateway {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Gateway {
    /// Start a gateway for this config text (env: only `TEST_KEY=sk-test-secret` and
    /// `TEST_ADMIN_KEY=sk-test-admin`). Without an
    /// `[audit]` table the audit log is off (its default would write a file in the crate).
    pub async fn start(toml: &str) -> Gateway {
        Self::launch(toml, None).await
    }

    /// As [`Gateway::start`], served as `switchyard serve` serves: by `workers` threads of
    /// their own (`app::Server`).
    #[allow(dead_code)]
    pub async fn start_threads(toml: &str, workers: usize) -> Gateway {
        Self::launch(toml, Some(workers)).await
    }

    async fn launch(toml: &str, workers: Option<usize>) -> Gateway {
        Self::serve(build(toml), workers).await
    }

    /// Serve a state built by [`build`] (a clone of it stays with the caller: its readiness,
    /// routing and metrics are the gateway's), on the test's runtime (`workers: None`) or by
    /// `workers` threads of their own.
    pub async fn serve(state: switchyard::api::AppState, workers: Option<usize>) -> Gateway {
        let (stop, stopped) = oneshot::channel::<()>();
        let stopped = async {
            let _ = stopped.await;
        };
        let (addr, task) = match workers {
            None => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let served = switchyard::app::serve(listener, state, stopped);
                (addr, tokio::spawn(async move { served.await.unwrap() }))
            }
            Some(n) => {
                let server =
                    switchyard::app::Server::bind("127.0.0.1:0".parse().unwrap(), n).unwrap();
                let addr = server.local_addr();
                let served = server.run(state, stopped);
                (addr, tokio::spawn(async move { served.await.unwrap() }))
            }
        };
        Gateway {
            addr,
            stop: Some(stop),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// POST a chat request to the gateway.
    pub async fn chat(&self, body: serde_json::Value) -> reqwest::Response {
        self.chat_with(body, &[]).await
    }

    pub async fn chat_with(
        &self,
        body: serde_json::Value,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = client().post(self.url("/v1/chat/completions")).json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }

    /// Send the shutdown signal and return at once: in-flight requests drain on.
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Stop and wait for in-flight requests to drain.
    pub async fn stop(mut self) {
        self.signal_stop();
        let _ = (&mut self.task).await;
    }
}

/// The gateway's state for this config text, not served yet (env: only
/// `TEST_KEY=sk-test-secret` and `TEST_ADMIN_KEY=sk-test-admin`). Without an `[audit]` table
/// the audit log is off (its default would write a file in the crate).
pub fn build(toml: &str) -> switchyard::api::AppState {
    let env = |name: &str| match name {
        "TEST_KEY" => Some("sk-test-secret".to_owned()),
        "TEST_ADMIN_KEY" => Some(ADMIN_KEY.to_owned()),
        _ => None,
    };
    let toml = &if toml.contains("[audit]") {
        toml.to_owned()
    } else {
        format!("{toml}\n[audit]\nstore = \"off\"\n")
    };
    let config =
        Config::from_toml(toml, &env).unwrap_or_else(|e| panic!("bad test config: {e}\n{toml}"));
    switchyard::app::build_state(config).unwrap()
}

/// A GET of `path` from the router over `state`, in this process (no listener, no server):
/// the status and the body's text.
pub async fn get_in_process(state: &switchyard::api::AppState, path: &str) -> (u16, String) {
    use tower_service::Service;
    let mut app = switchyard::api::router(state.clone());
    let request = http::Request::get(path)
        .body(axum::body::Body::empty())
        .unwrap();
    std::future::poll_fn(|cx| Service::<http::Request<axum::body::Body>>::poll_ready(&mut app, cx))
        .await
        .unwrap();
    let response = app.call(request).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// Start `n` mocks named mock0, mock1, ...
pub async fn mocks(n: usize) -> Vec<MockServer> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(MockServer::spawn(&format!("mock{i}")).await.unwrap());
    }
    out
}

/// A config with one OpenAI-kind provider per mock (p0, p1, ...) and one route `chat` whose
/// targets are `p{i}/model-{i}` in order. `failover` is extra TOML for `[routes.failover]`.
pub fn config(mocks: &[MockServer], failover: &str) -> String {
    config_with(mocks, failover, &vec![None; mocks.len()])
}

/// As [`config`], with a context window per target.
pub fn config_with(mocks: &[MockServer], failover: &str, windows: &[Option<u32>]) -> String {
    let mut s = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\nmax_body = \"64KiB\"\n\n[audit]\nstore = \"off\"\n\n",
    );
    for (i, m) in mocks.iter().enumerate() {
        s += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\napi_key = \"${{TEST_KEY}}\"\n\n",
            m.base_url()
        );
    }
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for (i, w) in windows.iter().enumerate() {
        let window = w
            .map(|w| format!(", context_window = {w}"))
            .unwrap_or_default();
        s += &format!("  {{ provider = \"p{i}\", model = \"model-{i}\"{window} }},\n");
    }
    s += "]\n\n[routes.failover]\n";
    s += failover;
    s += "\n";
    s
}

/// `toml` (from [`config`]) with the audit log written to `store` (a `sqlite://` or
/// `postgres://` URL) and `extra` lines added to `[audit]`.
pub fn with_audit(toml: &str, store: &str, extra: &str) -> String {
    toml.replacen(
        "[audit]\nstore = \"off\"\n",
        &format!("[audit]\nstore = \"{store}\"\n{extra}\n"),
        1,
    )
}

/// `toml` (from [`config`]) with `[auth]` requiring the client key `sk-test-secret` (the
/// gateway's `TEST_KEY`).
pub fn with_client_key(toml: &str) -> String {
    toml.replacen("[audit]", "[auth]\nkeys = [\"${TEST_KEY}\"]\n\n[audit]", 1)
}

/// The admin key of [`with_admin_key`] (the gateway's `TEST_ADMIN_KEY`).
pub const ADMIN_KEY: &str = "sk-test-admin";

/// `toml` (from [`config`], perhaps through [`with_client_key`]) with `[auth]` admin key
/// `sk-test-admin` (the gateway's `TEST_ADMIN_KEY`).
pub fn with_admin_key(toml: &str) -> String {
    if toml.contains("[auth]\n") {
        toml.replacen(
            "[auth]\n",
            "[auth]\nadmin_keys = [\"${TEST_ADMIN_KEY}\"]\n",
            1,
        )
    } else {
        toml.replacen(
            "[audit]",
            "[auth]\nadmin_keys = [\"${TEST_ADMIN_KEY}\"]\n\n[audit]",
            1,
        )
    }
}

/// A mock plan under which every call answers 503.
pub fn down() -> switchyard::mock::FaultPlan {
    switchyard::mock::FaultPlan {
        status: Some(503),
        ..Default::default()
    }
}

/// User requests a mock saw (probes carry `x-switchyard-probe`).
pub fn user_requests(m: &MockServer) -> usize {
    m.requests()
        .iter()
        .filter(|r| r.header("x-switchyard-probe").is_none())
        .count()
}

/// A GET on the gateway, its body as JSON.
pub async fn get_json(gw: &Gateway, path: &str) -> serde_json::Value {
    client()
        .get(gw.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The gateway's `/admin/status`.
pub async fn status(gw: &Gateway) -> serde_json::Value {
    get_json(gw, "/admin/status").await
}

/// `[routes.failover]` lines for three attempts with no breaker to step in (it never trips)
/// and a retry budget of `ratio` and `min_per_sec`: the retry budgets alone decide.
#[allow(dead_code)]
pub fn budget_only(ratio: f64, min_per_sec: u32) -> String {
    format!(
        "max_attempts = 3\n[routes.breaker]\nconsecutive_failures = 0\nmin_requests = 100000\n\
         [routes.retry_budget]\nratio = {ratio}\nmin_per_sec = {min_per_sec}"
    )
}

/// POST `body` as it is (JSON or not) to the gateway's `path`.
#[allow(dead_code)]
pub async fn post_text(gw: &Gateway, path: &str, body: &'static str) -> reqwest::Response {
    client()
        .post(gw.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The gateway's `/metrics` text.
pub async fn metrics(gw: &Gateway) -> String {
    client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A target's breaker state in a `/admin/status` answer.
pub fn breaker_state(status: &serde_json::Value, target: &str) -> String {
    let t = status["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == target)
        .unwrap();
    t["breaker"]["state"].as_str().unwrap().to_owned()
}

/// A minimal chat body for route `chat`.
pub fn chat_body(stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": "chat",
        "stream": stream,
        "messages": [{"role": "user", "content": "Say the canonical text."}]
    })
}

/// Header value as a string.
pub fn header(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The parsed `data:` payloads of an SSE body, `[DONE]` as the string "[DONE]".
pub fn sse_events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .map(|d| {
            if d == "[DONE]" {
                serde_json::Value::String("[DONE]".into())
            } else {
                serde_json::from_str(d).unwrap_or(serde_json::Value::Null)
            }
        })
        .collect()
}

/// The text of an OpenAI stream: its content deltas joined.
pub fn stream_text(events: &[serde_json::Value]) -> String {
    events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// The response to a streamed chat request, checked to be the mock's whole canonical answer
/// ending with `[DONE]` (however many targets it took).
pub async fn assert_seamless_stream(resp: reqwest::Response) {
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(
        stream_text(&events),
        switchyard::mock::canonical_text(12, 0),
        "one seamless answer"
    );
    assert_eq!(events.last().unwrap(), "[DONE]");
}

/// A Messages request for route `chat` as Claude Code sends one (its system prompt marked
/// for caching), with `anthropic-beta: beta` when given.
pub async fn anthropic_messages(
    gw: &Gateway,
    stream: bool,
    beta: Option<&str>,
) -> reqwest::Response {
    let mut req = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "unused")
        .header("anthropic-version", "2023-06-01");
    if let Some(beta) = beta {
        req = req.header("anthropic-beta", beta);
    }
    req.json(&serde_json::json!({
        "model": "chat",
        "max_tokens": 256,
        "stream": stream,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Say the canonical text."}]
    }))
    .send()
    .await
    .unwrap()
}

/// The content of a non-stream completion.
pub fn completion_text(v: &serde_json::Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether the Python SDK `module` can be imported. Outside CI a missing SDK skips the test
/// (loudly); under CI (`CI` set) it fails it, since `.ci/run` installs the SDKs.
pub fn python_sdk(module: &str) -> bool {
    let have = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install the Python SDK: pip install {module}"
        );
        eprintln!("SKIPPED: the Python SDK `{module}` is not installed (pip install {module})");
    }
    have
}

/// Run `python3 script args...` (with `env` added) off the runtime's threads; its stdout as
/// JSON, after asserting it exited 0 (stderr in the message when not).
pub async fn python_json(
    script: &'static str,
    args: Vec<String>,
    env: &'static [(&'static str, &'static str)],
) -> serde_json::Value {
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .args(&args)
            .envs(env.iter().copied())
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed:\n{stderr}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A `sqlite://` URL of a fresh file for a gateway's `[responses] store`, in a directory of
/// this test process's own under Cargo's directory for tests' files (`target/tmp`): the
/// directories of processes that are gone are removed on first use, so runs do not pile
/// files up.
pub fn responses_db() -> String {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("responses");
        // The directories of test processes that are gone, with their files.
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let pid = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = root.join(std::process::id().to_string());
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    let path = dir.join(format!("{}.db", fastrand::u64(..)));
    format!("sqlite://{}", path.display())
}

/// An address where a connection is refused: a socket bound to it and not listening. The port
/// stays taken while the socket lives, so no other test's listener can get it meanwhile (as it
/// could after a listener bound only to read a free port, then closed).
pub fn refusing_addr() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

/// `toml` (from [`config`]) with `extra` lines in `[server]`.
pub fn with_server(toml: &str, extra: &str) -> String {
    toml.replacen(
        "max_body = \"64KiB\"\n",
        &format!("max_body = \"64KiB\"\n{extra}\n"),
        1,
    )
}

/// The value of `switchyard_limits_total{limit}` in the gateway's metrics, read in this
/// process (a connection of its own could itself be refused by a limit under test).
pub async fn limit_count(state: &switchyard::api::AppState, limit: &str) -> u64 {
    let (status, text) = get_in_process(state, "/metrics").await;
    assert_eq!(status, 200);
    let series = format!("switchyard_limits_total{{limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

//! Config reload: a new routing table is swapped in whole, breaker and SLI state of targets
//! that still exist is kept, and a bad file leaves the running config in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;
use switchyard::config::Config;

fn temp_file(name: &str) -> std::path::PathBuf {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("switchyard-{name}-{}-{n}.toml", std::process::id()))
}

/// The test config without `${TEST_KEY}`: `Config::load` reads the real environment.
fn file_config(m: &[switchyard::mock::MockServer]) -> String {
    config(m, "").replace("api_key = \"${TEST_KEY}\"\n", "")
}

/// Write `text` to `path` and build the state from it, as `serve` does.
fn state_from(path: &std::path::Path, text: &str) -> switchyard::api::AppState {
    std::fs::write(path, text).unwrap();
    switchyard::app::build_state(Config::load(path).unwrap()).unwrap()
}

#[tokio::test]
async fn a_reload_keeps_breaker_state_and_adds_routes() {
    let m = mocks(2).await;
    let path = temp_file("reload");
    let first = file_config(&m);
    let state = state_from(&path, &first);
    let health = state.routing.load().route("chat").unwrap().targets[0]
        .health
        .clone();
    health.manual(
        tokio::time::Instant::now(),
        switchyard::routing::breaker::Manual::Open,
    );

    let second = first.clone() + "\n[[routes]]\nname = \"other\"\ntargets = [{ provider = \"p1\", model = \"model-1\" }]\n";
    std::fs::write(&path, second).unwrap();
    let pending = switchyard::app::reload(&state, &path).unwrap();
    assert!(
        pending.is_empty(),
        "routes take effect at once: {pending:?}"
    );
    let routing = state.routing.load();
    assert!(routing.route("other").is_some(), "the new route is served");
    let target = &routing.route("chat").unwrap().targets[0];
    let (breaker, _) = target.health.snapshot(tokio::time::Instant::now());
    assert_eq!(
        breaker.state.as_str(),
        "open",
        "the breaker survived the reload"
    );

    std::fs::write(&path, "[[routes]]\nname = 3\n").unwrap();
    let err = switchyard::app::reload(&state, &path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("routes[0].name"), "{err}");
    assert!(
        state.routing.load().route("other").is_some(),
        "the running config stays"
    );
    let _ = std::fs::remove_file(&path);
}

/// Tables a running gateway cannot swap are named (and logged), and keep their settings.
#[tokio::test]
async fn a_reload_names_what_waits_for_a_restart() {
    let m = mocks(1).await;
    let path = temp_file("pending");
    let first = file_config(&m);
    let state = state_from(&path, &first);
    let second = first
        .replace("max_body = \"64KiB\"", "max_body = \"1MiB\"")
        .replace("store = \"off\"", "store = \"sqlite:///tmp/elsewhere.db\"");
    std::fs::write(&path, second).unwrap();
    let pending = switchyard::app::reload(&state, &path).unwrap();
    assert_eq!(pending, ["[server]", "[audit]"]);
    assert_eq!(state.max_body, 64 * 1024, "the running limit stays");
    let _ = std::fs::remove_file(&path);
}

/// `[server] max_response_body` is applied by the routing table, which a reload rebuilds: the
/// rebuilt targets still apply the limit the gateway started with.
#[tokio::test]
async fn a_reload_keeps_the_running_max_response_body() {
    let m = mocks(1).await;
    let path = temp_file("max-response-body");
    let first = file_config(&m);
    let state = state_from(&path, &first);
    let second = first.replace("max_body = \"64KiB\"", "max_response_body = \"1KiB\"");
    std::fs::write(&path, second).unwrap();
    let pending = switchyard::app::reload(&state, &path).unwrap();
    assert_eq!(pending, ["[server]"]);
    let routing = state.routing.load();
    let target = &routing.route("chat").unwrap().targets[0];
    assert_eq!(
        target.max_response_body,
        64 << 20,
        "the running limit stays"
    );
    let _ = std::fs::remove_file(&path);
}

/// Client keys rotate on reload: the new key works at once, the old one no longer does.
#[tokio::test]
async fn client_keys_rotate_on_reload() {
    let m = mocks(1).await;
    let path = temp_file("keys");
    let base = file_config(&m);
    let with_key = |key: &str| {
        base.replacen(
            "[audit]",
            &format!("[auth]\nkeys = [\"{key}\"]\n\n[audit]"),
            1,
        )
    };
    let state = state_from(&path, &with_key("key-one"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(switchyard::app::serve(listener, state.clone(), async {
        let _ = stopped.await;
    }));
    let call = |key: &'static str| {
        let url = url.clone();
        async move {
            client()
                .post(url)
                .bearer_auth(key)
                .json(&chat_body(false))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(call("key-one").await, 200);
    assert_eq!(call("key-two").await, 401);
    std::fs::write(&path, with_key("key-two")).unwrap();
    let pending = switchyard::app::reload(&state, &path).unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    assert_eq!(call("key-two").await, 200);
    assert_eq!(call("key-one").await, 401);
    let _ = stop.send(());
    served.await.unwrap().unwrap();
    let _ = std::fs::remove_file(&path);
}

/// A reload that makes a route adaptive starts the recomputation of its shares: the shares'
/// task, asleep while no route was adaptive, is woken by the reload (tokio's paused clock).
#[tokio::test(start_paused = true)]
async fn a_reload_that_makes_a_route_adaptive_starts_its_shares() {
    let m = mocks(2).await;
    let latency = |ms| switchyard::mock::FaultPlan {
        latency_ms: ms,
        ..Default::default()
    };
    m[0].set_plan(latency(200));
    m[1].set_plan(latency(20));
    let path = temp_file("adaptive");
    let text = file_config(&m);
    let state = state_from(&path, &text);
    let gw = Gateway::serve(state.clone(), None).await;
    // Long after the start: nothing adaptive, the task sleeps.
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    let adaptive = text.replacen(
        "name = \"chat\"\n",
        "name = \"chat\"\nstrategy = \"adaptive\"\n",
        1,
    ) + "\n[routes.adaptive]\ninterval = \"1s\"\naffinity = \"off\"\n";
    std::fs::write(&path, adaptive).unwrap();
    switchyard::app::reload(&state, &path).unwrap();
    for _ in 0..200 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let st = status(&gw).await;
    let view = &st["routes"][0]["shares"][0];
    assert_eq!(view["reason"], "slower_than_peers", "{view}");
    assert!(view["share"].as_f64().unwrap() < 0.5, "{view}");
    let _ = std::fs::remove_file(&path);
}

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

#[tokio::test]
async fn a_reload_keeps_breaker_state_and_adds_routes() {
    let m = mocks(2).await;
    let path = temp_file("reload");
    // Config::load reads the real environment: no `${TEST_KEY}` here.
    let first = config(&m, "").replace("api_key = \"${TEST_KEY}\"\n", "");
    std::fs::write(&path, &first).unwrap();
    let state = switchyard::app::build_state(Config::load(&path).unwrap()).unwrap();
    let health = state.routing.load().route("chat").unwrap().targets[0]
        .health
        .clone();
    health.manual(
        tokio::time::Instant::now(),
        switchyard::routing::breaker::Manual::Open,
    );

    let second = first.clone() + "\n[[routes]]\nname = \"other\"\ntargets = [{ provider = \"p1\", model = \"model-1\" }]\n";
    std::fs::write(&path, second).unwrap();
    switchyard::app::reload(&state, &path).unwrap();
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

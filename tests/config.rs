//! The shipped `switchyard.example.toml` loads with fake secrets and resolves to the routing its
//! comments promise: targets in order, `[defaults]` applied, per-route overrides winning.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use switchyard::config::{AuditStore, Config, HedgeDelay, MidStream, ProviderKind};

const EXAMPLE: &str = include_str!("../switchyard.example.toml");

fn fake_env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-test-openai".into()),
        "AZURE_OPENAI_API_KEY" => Some("az-test-key".into()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-test".into()),
        _ => None,
    }
}

fn example() -> Config {
    Config::from_toml(EXAMPLE, &fake_env).unwrap_or_else(|e| panic!("example config:\n{e}"))
}

#[test]
fn example_providers_resolve_with_secrets() {
    let config = example();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.max_body, 8 * 1024 * 1024);
    let providers: Vec<_> = config
        .providers
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.kind,
                p.base_url.as_str(),
                p.api_key.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        providers,
        [
            (
                "openai",
                ProviderKind::OpenAi,
                "https://api.openai.com/v1",
                Some("sk-test-openai")
            ),
            (
                "azure",
                ProviderKind::Azure,
                "https://example.openai.azure.com",
                Some("az-test-key")
            ),
            (
                "anthropic",
                ProviderKind::Anthropic,
                "https://api.anthropic.com",
                Some("sk-ant-test")
            ),
        ]
    );
    assert_eq!(config.providers[1].api_version, "2024-10-21");
    assert_eq!(config.providers[0].connect_timeout, Duration::from_secs(2));
    assert_eq!(
        config.audit.store,
        AuditStore::Sqlite("switchyard-audit.db".into())
    );
    assert!(config.auth.is_none() && config.cluster.is_none());
}

#[test]
fn example_routes_resolve_targets_in_order() {
    let config = example();
    let names: Vec<_> = config.routes.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["gpt-4o", "claude-sonnet"]);

    let gpt = config.route("gpt-4o").unwrap();
    let ids: Vec<_> = gpt.targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "openai/gpt-4o",
            "azure/gpt-4o-prod",
            "anthropic/claude-sonnet-4-5"
        ]
    );
    assert_eq!(gpt.targets[1].model, "gpt-4o-prod");
    assert_eq!(gpt.targets[1].provider.kind, ProviderKind::Azure);
    let windows: Vec<_> = gpt.targets.iter().map(|t| t.context_window).collect();
    assert_eq!(windows, [Some(128_000), Some(128_000), Some(200_000)]);

    let claude = config.route("claude-sonnet").unwrap();
    let ids: Vec<_> = claude.targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["anthropic/claude-sonnet-4-5", "openai/gpt-4o"]);
    // The same model at the same provider is one target everywhere (breakers are per target).
    assert!(Arc::ptr_eq(&gpt.targets[0], &claude.targets[1]));
    assert!(Arc::ptr_eq(&gpt.targets[0].provider, &config.providers[0]));
}

#[test]
fn example_defaults_apply_and_routes_override_key_by_key() {
    let config = example();
    let gpt = config.route("gpt-4o").unwrap();
    assert_eq!(gpt.failover.max_attempts.get(), 3);
    assert_eq!(gpt.failover.first_token_timeout, Duration::from_secs(10));
    assert_eq!(gpt.failover.mid_stream, MidStream::Continue);
    assert_eq!(gpt.hedge.delay, HedgeDelay::Percentile(95.0));
    assert_eq!(gpt.breaker.open_for_max, Duration::from_secs(20 * 60));

    let claude = config.route("claude-sonnet").unwrap();
    // Overridden by the route ...
    assert_eq!(claude.failover.max_attempts.get(), 2);
    assert_eq!(claude.failover.first_token_timeout, Duration::from_secs(5));
    assert_eq!(claude.failover.mid_stream, MidStream::Error);
    assert_eq!(
        claude.hedge.delay,
        HedgeDelay::Fixed(Duration::from_millis(800))
    );
    // ... while the keys it does not set still come from [defaults].
    assert_eq!(claude.failover.attempt_timeout, Duration::from_secs(30));
    assert_eq!(claude.failover.request_timeout, Duration::from_secs(120));
    assert_eq!(claude.hedge.budget, 0.10);
    assert_eq!(claude.breaker.failure_rate, 0.40);
    assert_eq!(claude.retry_budget.min_per_sec, 10);
}

#[test]
fn example_needs_every_secret_and_names_each_missing_one() {
    let err = Config::from_toml(EXAMPLE, &|_| None).unwrap_err();
    let paths: Vec<_> = err.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "providers[0].api_key",
            "providers[1].api_key",
            "providers[2].api_key"
        ]
    );
    let text = err.to_string();
    for var in [
        "OPENAI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ] {
        assert!(
            text.contains(&format!("environment variable {var} is not set")),
            "{text}"
        );
    }
}

#[test]
fn example_routing_table_shows_targets_never_keys() {
    let config = example();
    let table = config.routing_table();
    for needle in [
        "route gpt-4o",
        "route claude-sonnet",
        "openai/gpt-4o",
        "azure/gpt-4o-prod",
        "https://example.openai.azure.com",
        "128000",
        "max_attempts 2",
        "first_token_timeout 5s",
    ] {
        assert!(table.contains(needle), "missing {needle:?} in\n{table}");
    }
    let debug = format!("{config:?}");
    for secret in ["sk-test-openai", "az-test-key", "sk-ant-test"] {
        assert!(!table.contains(secret) && !debug.contains(secret));
    }
}

/// `bench/pgo`'s training config loads once its placeholders are filled in, and names the routes
/// the training sends to, each in front of the provider kind it is meant to train.
#[test]
fn the_profile_training_config_loads_with_the_routes_the_training_sends_to() {
    let text = include_str!("../bench/pgo.toml")
        .replace("@LISTEN@", "127.0.0.1:0")
        .replace("@MOCK@", "127.0.0.1:9")
        .replace("@AUDIT@", "/tmp/pgo-audit.db");
    let config =
        Config::from_toml(&text, &|_| None).unwrap_or_else(|e| panic!("bench/pgo.toml:\n{e}"));
    let routes: Vec<_> = config
        .routes
        .iter()
        .map(|r| {
            let kinds: Vec<_> = r.targets.iter().map(|t| t.provider.kind).collect();
            (r.name.as_str(), kinds)
        })
        .collect();
    use ProviderKind::{Anthropic, Bedrock, Gemini, OpenAi, OpenAiCompatible};
    assert_eq!(
        routes,
        [
            ("gem", vec![Gemini]),
            ("bedrock", vec![Bedrock]),
            ("oai", vec![OpenAi]),
            ("compat", vec![OpenAiCompatible]),
            ("ant", vec![Anthropic]),
            ("flaky", vec![OpenAi, Anthropic]),
        ]
    );
    // The mock's Bedrock checks every call's signature against its own keys.
    let bedrock = config.route("bedrock").unwrap().targets[0].provider.clone();
    let keys = bedrock.aws.as_ref().and_then(|a| a.keys.as_ref()).unwrap();
    assert_eq!(keys.access_key_id, switchyard::mock::sigv4::ACCESS_KEY_ID);
    assert_eq!(
        keys.secret_access_key,
        switchyard::mock::sigv4::SECRET_ACCESS_KEY
    );
    assert_eq!(
        config.audit.store,
        AuditStore::Sqlite("/tmp/pgo-audit.db".into())
    );
}

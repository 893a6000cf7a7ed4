//! What a valid file resolves to: built-in defaults, the `[defaults]` merge, targets, secrets.

use std::sync::Arc;
use std::time::Duration;

use super::{load, with_route, AZURE_KEY, CLIENT_KEY, OPENAI_KEY, PROVIDERS};
use crate::config::{
    AuditStore, BreakerPolicy, ContextPolicy, FailoverPolicy, HedgeDelay, HedgePolicy, MidStream,
    OnOverflow, ProviderKind, RetryBudgetPolicy, Strategy,
};

#[test]
fn server_and_provider_defaults() {
    let config = load(&with_route(""));
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.server.max_body, 8 * 1024 * 1024);
    assert_eq!(config.server.workers, None, "one per core");
    assert_eq!(config.server.header_timeout, Duration::from_secs(10));
    assert_eq!(config.server.body_timeout, Duration::from_secs(30));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(120));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(config.server.max_in_flight, 2_000);
    assert_eq!(config.server.max_response_body, 64 * 1024 * 1024);
    assert_eq!(config.server.shutdown_timeout, Duration::from_secs(30));
    let openai = &config.providers[0];
    assert_eq!(openai.kind, ProviderKind::OpenAi);
    assert_eq!(
        openai.base_url, "https://api.openai.com/v1",
        "trailing slash stripped"
    );
    assert_eq!(openai.api_key.as_deref(), Some(OPENAI_KEY));
    assert_eq!(openai.connect_timeout, Duration::from_secs(2));
    assert_eq!(openai.api_version, "2024-10-21");
    assert_eq!(config.providers[1].api_key.as_deref(), Some(AZURE_KEY));
}

#[test]
fn route_policy_defaults_match_the_spec() {
    let config = load(&with_route(""));
    let route = config.route("gpt-4o").unwrap();
    assert_eq!(route.strategy, Strategy::Priority);
    let f = &route.failover;
    assert_eq!(
        f.on_status,
        [401, 403, 404, 408, 429, 500, 502, 503, 504, 529]
    );
    assert_eq!(f.max_attempts.get(), 3);
    assert_eq!(f.same_target_retries, 0);
    assert_eq!(f.retry_after_wait, Duration::ZERO);
    assert_eq!(f.mid_stream, MidStream::Continue);
    assert_eq!(f.builtin_tools, crate::config::BuiltinTools::Native);
    assert_eq!(f.attempt_timeout, Duration::from_secs(30));
    assert_eq!(f.first_token_timeout, Duration::from_secs(10));
    assert_eq!(f.idle_timeout, Duration::from_secs(15));
    assert_eq!(f.request_timeout, Duration::from_secs(120));

    let b = &route.breaker;
    assert_eq!(b.failure_rate, 0.40);
    assert_eq!(b.window, Duration::from_secs(60));
    assert_eq!(b.min_requests, 20);
    assert_eq!(b.consecutive_failures, 5);
    assert_eq!(b.open_for, Duration::from_secs(30));
    assert_eq!(b.open_for_max, Duration::from_secs(20 * 60));
    assert!(b.probe);
    assert_eq!(b.probe_interval, Duration::from_secs(10));
    assert_eq!(b.half_open_probes.get(), 5);
    assert_eq!(b.ramp, Duration::from_secs(5 * 60));
    assert_eq!(b.ramp_failure_rate, 0.10);

    let h = &route.hedge;
    assert!(h.enabled);
    assert_eq!(h.delay, HedgeDelay::Percentile(95.0));
    assert_eq!(h.max_parallel.get(), 2);
    assert_eq!(h.budget, 0.10);

    assert_eq!(route.retry_budget.ratio, 0.20);
    assert_eq!(route.retry_budget.min_per_sec, 10);
    assert_eq!(route.context.on_overflow, OnOverflow::TrimOldest);

    // The Default impls are the same built-in values.
    assert_eq!(route.failover, FailoverPolicy::default());
    assert_eq!(route.breaker, BreakerPolicy::default());
    assert_eq!(route.hedge, HedgePolicy::default());
    assert_eq!(route.retry_budget, RetryBudgetPolicy::default());
    assert_eq!(route.context, ContextPolicy::default());
}

#[test]
fn audit_auth_cluster_defaults() {
    let config = load(&with_route(""));
    assert_eq!(
        config.audit.store,
        AuditStore::Sqlite("switchyard-audit.db".into())
    );
    assert!(!config.audit.bodies);
    assert_eq!(config.audit.retention, None);
    assert!(config.auth.is_none());
    assert!(config.cluster.is_none());
    assert!(config.server.allowed_hosts.is_empty());
}

/// `[server] allowed_hosts` kept as the `Host` check compares them (lowercase, no trailing
/// dot, IPv6 without brackets); `[auth]` with admin keys alone is valid (clients go free).
#[test]
fn allowed_hosts_and_admin_keys() {
    let config = load(&with_route(
        "[server]\nallowed_hosts = [\"Gateway.Internal.\", \"[fd00::1]\", \"10.0.0.5\"]\n\
         [auth]\nadmin_keys = [\"${CLIENT_KEY}\"]",
    ));
    assert_eq!(
        config.server.allowed_hosts,
        ["gateway.internal", "fd00::1", "10.0.0.5"]
    );
    let auth = config.auth.as_ref().unwrap();
    assert!(auth.keys.is_empty());
    assert_eq!(auth.admin_keys, [CLIENT_KEY]);
    assert!(!format!("{auth:?}").contains(CLIENT_KEY));
}

#[test]
fn defaults_table_merges_key_by_key_and_routes_override() {
    let text = format!(
        r#"{PROVIDERS}
[defaults.failover]
max_attempts = 5
attempt_timeout = "20s"
[defaults.breaker]
failure_rate = 0.5
open_for = "1m"
[defaults.hedge]
enabled = false
delay = "1s"
[defaults.retry_budget]
ratio = 0.5
[defaults.context]
on_overflow = "error"

[[routes]]
name = "inherits"
targets = [{{ provider = "openai", model = "gpt-4o" }}]

[[routes]]
name = "overrides"
targets = [{{ provider = "openai", model = "gpt-4o" }}]
[routes.failover]
max_attempts = 2
[routes.breaker]
open_for = "45s"
[routes.hedge]
enabled = true
[routes.retry_budget]
min_per_sec = 3
[routes.context]
on_overflow = "trim_oldest"
"#
    );
    let config = load(&text);
    let a = config.route("inherits").unwrap();
    assert_eq!(a.failover.max_attempts.get(), 5);
    assert_eq!(a.failover.attempt_timeout, Duration::from_secs(20));
    assert_eq!(
        a.failover.request_timeout,
        Duration::from_secs(120),
        "built-in"
    );
    assert_eq!(a.breaker.failure_rate, 0.5);
    assert_eq!(a.breaker.open_for, Duration::from_secs(60));
    assert!(!a.hedge.enabled);
    assert_eq!(a.hedge.delay, HedgeDelay::Fixed(Duration::from_secs(1)));
    assert_eq!(a.retry_budget.ratio, 0.5);
    assert_eq!(a.context.on_overflow, OnOverflow::Error);

    let b = config.route("overrides").unwrap();
    assert_eq!(b.failover.max_attempts.get(), 2, "route key wins");
    assert_eq!(
        b.failover.attempt_timeout,
        Duration::from_secs(20),
        "defaults key kept"
    );
    assert_eq!(b.breaker.open_for, Duration::from_secs(45));
    assert_eq!(b.breaker.failure_rate, 0.5);
    assert!(b.hedge.enabled);
    assert_eq!(b.hedge.delay, HedgeDelay::Fixed(Duration::from_secs(1)));
    assert_eq!(b.retry_budget.ratio, 0.5);
    assert_eq!(b.retry_budget.min_per_sec, 3);
    assert_eq!(b.context.on_overflow, OnOverflow::TrimOldest);
}

#[test]
fn explicit_values_resolve() {
    let config = load(&with_route(
        r#"
[routes.failover]
on_status = [429, 503]
same_target_retries = 1
retry_after_wait = "1.5s"
mid_stream = "error"
[routes.breaker]
probe = false
consecutive_failures = 0
ramp = "0s"
[routes.hedge]
delay = "p99.9"
max_parallel = 3

[server]
listen = "0.0.0.0:9000"
max_body = "512KiB"
workers = 3

[audit]
store = "off"
bodies = true
retention = "30d"

[auth]
keys = ["${CLIENT_KEY}", "static-key"]

[cluster]
redis = "redis://127.0.0.1:6379"
"#,
    ));
    let route = config.route("gpt-4o").unwrap();
    assert_eq!(route.failover.on_status, [429, 503]);
    assert_eq!(route.failover.same_target_retries, 1);
    assert_eq!(route.failover.retry_after_wait, Duration::from_millis(1500));
    assert_eq!(route.failover.mid_stream, MidStream::Error);
    assert!(!route.breaker.probe);
    assert_eq!(route.breaker.consecutive_failures, 0);
    assert_eq!(route.breaker.ramp, Duration::ZERO);
    assert_eq!(route.hedge.delay, HedgeDelay::Percentile(99.9));
    assert_eq!(route.hedge.max_parallel.get(), 3);
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(config.server.max_body, 512 * 1024);
    assert_eq!(config.server.workers.map(|n| n.get()), Some(3));
    assert_eq!(config.audit.store, AuditStore::Off);
    assert!(config.audit.bodies);
    assert_eq!(
        config.audit.retention,
        Some(Duration::from_secs(30 * 86_400))
    );
    let auth = config.auth.as_ref().unwrap();
    assert_eq!(auth.keys, [CLIENT_KEY, "static-key"]);
    let cluster = config.cluster.as_ref().unwrap();
    assert_eq!(cluster.redis, "redis://127.0.0.1:6379");
    assert_eq!(cluster.key_prefix, "switchyard");
}

#[test]
fn server_limits_are_read() {
    let config = load(&with_route(
        "[server]\nheader_timeout = \"2s\"\nidle_timeout = \"5m\"\nmax_connections = 50\n\
         max_in_flight = 7\nmax_response_body = \"1MiB\"\nshutdown_timeout = \"0s\"\n\
         body_timeout = \"90s\"",
    ));
    let s = &config.server;
    assert_eq!(s.header_timeout, Duration::from_secs(2));
    assert_eq!(s.body_timeout, Duration::from_secs(90));
    assert_eq!(s.idle_timeout, Duration::from_secs(300));
    assert_eq!((s.max_connections, s.max_in_flight), (50, 7));
    assert_eq!(s.max_response_body, 1 << 20);
    assert_eq!(s.shutdown_timeout, Duration::ZERO, "no drain at all");
}

#[test]
fn max_body_may_be_a_number_of_bytes() {
    let config = load(&with_route("[server]\nmax_body = 65536"));
    assert_eq!(config.server.max_body, 65536);
}

#[test]
fn audit_store_urls() {
    for (store, want) in [
        (
            "sqlite:///var/lib/audit.db",
            AuditStore::Sqlite("/var/lib/audit.db".into()),
        ),
        ("sqlite:audit.db", AuditStore::Sqlite("audit.db".into())),
        (
            "postgres://u:p@db/audit",
            AuditStore::Postgres("postgres://u:p@db/audit".into()),
        ),
    ] {
        let config = load(&with_route(&format!("[audit]\nstore = \"{store}\"")));
        assert_eq!(config.audit.store, want);
    }
}

#[test]
fn targets_resolve_ids_and_share_across_routes() {
    let text = format!(
        r#"{PROVIDERS}
[[routes]]
name = "a"
targets = [
  {{ provider = "openai", model = "gpt-4o", context_window = 128000 }},
  {{ provider = "azure", deployment = "gpt-4o-prod" }},
]
[[routes]]
name = "b"
targets = [
  {{ provider = "azure", deployment = "gpt-4o-prod" }},
  {{ provider = "openai", model = "gpt-4o", context_window = 128000 }},
]
"#
    );
    let config = load(&text);
    let (a, b) = (config.route("a").unwrap(), config.route("b").unwrap());
    let ids: Vec<_> = a.targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["openai/gpt-4o", "azure/gpt-4o-prod"]);
    assert_eq!(a.targets[1].model, "gpt-4o-prod");
    assert_eq!(a.targets[0].context_window, Some(128_000));
    assert_eq!(a.targets[1].context_window, None);
    assert!(Arc::ptr_eq(&a.targets[0], &b.targets[1]));
    assert!(Arc::ptr_eq(&a.targets[1], &b.targets[0]));
    assert!(Arc::ptr_eq(&a.targets[1].provider, &config.providers[1]));
}

#[test]
fn env_references_inside_larger_strings() {
    let text = r#"
[[providers]]
name = "local"
kind = "openai-compatible"
base_url = "http://${HOST}/v1"
[[routes]]
name = "llama"
targets = [{ provider = "local", model = "meta-llama/Llama-3.1-8B" }]
"#;
    let config = load(text);
    assert_eq!(config.providers[0].base_url, "http://llm.internal:8000/v1");
    assert_eq!(config.providers[0].api_key, None);
    assert_eq!(
        config.routes[0].targets[0].id,
        "local/meta-llama/Llama-3.1-8B"
    );
}

#[test]
fn debug_and_routing_table_never_show_secrets() {
    let config = load(&with_route("[auth]\nkeys = [\"${CLIENT_KEY}\"]"));
    let provider = format!("{:?}", config.providers[0]);
    assert!(
        provider.contains("redacted") && !provider.contains(OPENAI_KEY),
        "{provider}"
    );
    let auth = format!("{:?}", config.auth.as_ref().unwrap());
    assert!(!auth.contains(CLIENT_KEY), "{auth}");
    let everything = format!("{config:?}{config:#?}{}", config.routing_table());
    for secret in [OPENAI_KEY, AZURE_KEY, CLIENT_KEY] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
}

#[test]
fn routing_table_shows_policy_and_numbered_targets() {
    let text = format!(
        r#"{PROVIDERS}
[[routes]]
name = "gpt-4o"
targets = [
  {{ provider = "openai", model = "gpt-4o", context_window = 128000 }},
  {{ provider = "azure", deployment = "gpt-4o-prod" }},
]
[routes.failover]
attempt_timeout = "20s"
"#
    );
    let table = load(&text).routing_table();
    let lines: Vec<_> = table.lines().collect();
    assert_eq!(lines[0], "route gpt-4o (strategy priority)");
    assert!(lines[1].contains("max_attempts 3, attempt_timeout 20s, first_token_timeout 10s"));
    assert!(lines[2].contains("hedge: after p95"));
    let row1 = lines
        .iter()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap();
    let row2 = lines
        .iter()
        .find(|l| l.trim_start().starts_with("2 "))
        .unwrap();
    for needle in [
        "openai/gpt-4o",
        "openai",
        "https://api.openai.com/v1",
        "128000",
    ] {
        assert!(row1.contains(needle), "{row1}");
    }
    for needle in [
        "azure/gpt-4o-prod",
        "azure",
        "https://example.openai.azure.com",
        "-",
    ] {
        assert!(row2.contains(needle), "{row2}");
    }
}

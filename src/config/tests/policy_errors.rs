//! Policy, server and gateway-wide sections: each bad value at its exact key path.

use super::{error_at, errors, two_routes, with_route};

#[test]
fn failover_rules() {
    let errs = errors(&with_route(
        r#"[routes.failover]
on_status = [429, 200, 503]
max_attempts = 0
idle_timeout = "0s"
mid_stream = "retry"
builtin_tools = "ignore"
request_timeout = "5s""#,
    ));
    error_at(
        &errs,
        "routes[0].failover.on_status[1]",
        "200 is not an error status",
    );
    error_at(&errs, "routes[0].failover.max_attempts", "at least 1");
    error_at(&errs, "routes[0].failover.idle_timeout", "greater than 0s");
    error_at(
        &errs,
        "routes[0].failover.mid_stream",
        "unknown value `retry`",
    );
    error_at(
        &errs,
        "routes[0].failover.builtin_tools",
        "unknown value `ignore`",
    );
    let e = error_at(
        &errs,
        "routes[0].failover.attempt_timeout",
        "attempt_timeout (30s) exceeds request_timeout (5s)",
    );
    assert!(e.hint.as_deref().unwrap_or("").contains("request_timeout"));
    error_at(
        &errs,
        "routes[0].failover.first_token_timeout",
        "first_token_timeout (10s) exceeds",
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
}

#[test]
fn timeout_order_checked_once_for_defaults() {
    let errs = errors(&two_routes(
        "[defaults.failover]\nrequest_timeout = \"5s\"",
        "[routes.failover]\nrequest_timeout = \"60s\"\nattempt_timeout = \"90s\"",
    ));
    error_at(
        &errs,
        "defaults.failover.attempt_timeout",
        "exceeds request_timeout (5s)",
    );
    error_at(
        &errs,
        "defaults.failover.first_token_timeout",
        "exceeds request_timeout (5s)",
    );
    error_at(
        &errs,
        "routes[1].failover.attempt_timeout",
        "attempt_timeout (90s) exceeds request_timeout (60s)",
    );
    assert_eq!(errs.len(), 3, "routes[0] inherits the same pair: {errs:#?}");
}

#[test]
fn breaker_hedge_budget_context_rules() {
    let errs = errors(&two_routes(
        "[defaults.breaker]\nfailure_rate = 0.0\nopen_for = \"10m\"\nopen_for_max = \"5m\"",
        r#"[routes.breaker]
ramp_failure_rate = 1.5
half_open_probes = 0
window = "1 minute"
[routes.hedge]
delay = "p100"
max_parallel = 0
budget = 2.0
[routes.retry_budget]
ratio = -0.1
[routes.context]
on_overflow = "drop""#,
    ));
    error_at(&errs, "defaults.breaker.failure_rate", "0 is out of range");
    error_at(
        &errs,
        "defaults.breaker.open_for_max",
        "open_for_max (5m) is shorter than open_for (10m)",
    );
    error_at(
        &errs,
        "routes[1].breaker.ramp_failure_rate",
        "1.5 is out of range",
    );
    error_at(&errs, "routes[1].breaker.half_open_probes", "at least 1");
    error_at(&errs, "routes[1].breaker.window", "unknown unit `minute`");
    error_at(&errs, "routes[1].hedge.delay", "invalid percentile `p100`");
    error_at(&errs, "routes[1].hedge.max_parallel", "at least 1");
    error_at(&errs, "routes[1].hedge.budget", "2 is out of range");
    error_at(
        &errs,
        "routes[1].retry_budget.ratio",
        "-0.1 is out of range",
    );
    let e = error_at(
        &errs,
        "routes[1].context.on_overflow",
        "unknown value `drop`",
    );
    assert_eq!(
        e.hint.as_deref(),
        Some("expected \"trim_oldest\" or \"error\"")
    );
    assert_eq!(errs.len(), 10, "{errs:#?}");
    let errs = errors(&with_route("[routes.hedge]\ndelay = \"soon\""));
    error_at(&errs, "routes[0].hedge.delay", "invalid duration `soon`");
}

#[test]
fn server_limits_are_checked_at_their_key_paths() {
    let errs = errors(&with_route(
        "[server]\nheader_timeout = \"0s\"\nidle_timeout = \"soon\"\nmax_connections = 0\n\
         max_in_flight = 0\nmax_response_body = \"0\"\nshutdown_timeout = \"-1s\"\n\
         body_timeout = \"0ms\"",
    ));
    error_at(&errs, "server.header_timeout", "greater than 0s");
    error_at(&errs, "server.body_timeout", "greater than 0s");
    error_at(&errs, "server.idle_timeout", "invalid duration `soon`");
    error_at(&errs, "server.max_connections", "at least 1");
    error_at(&errs, "server.max_in_flight", "at least 1");
    error_at(&errs, "server.max_response_body", "greater than 0");
    error_at(&errs, "server.shutdown_timeout", "");
    assert_eq!(errs.len(), 7, "{errs:#?}");
    let errs = errors(&with_route("[server]\nheader_timeout = 10"));
    error_at(&errs, "server.header_timeout", "invalid type: integer");
}

#[test]
fn server_audit_auth_cluster_rules() {
    let errs = errors(&with_route(
        r#"[server]
listen = "localhost:8080"
max_body = "8M"
[audit]
store = "mysql://root:hunter2@db/audit"
retention = "0s"
[auth]
keys = ["${NO_SUCH_KEY}", ""]
[cluster]
redis = "http://:hunter2@cache:6379""#,
    ));
    error_at(&errs, "server.listen", "not an IP address and port");
    error_at(&errs, "server.max_body", "unknown unit `M`");
    error_at(
        &errs,
        "audit.store",
        "unsupported audit store scheme `mysql`",
    );
    error_at(&errs, "audit.retention", "greater than 0s");
    error_at(
        &errs,
        "auth.keys[0]",
        "environment variable NO_SUCH_KEY is not set",
    );
    error_at(&errs, "auth.keys[1]", "empty");
    error_at(&errs, "cluster.redis", "not a redis://");
    assert!(
        errs.iter().all(|e| !e.to_string().contains("hunter2")),
        "a secret leaked"
    );
    error_at(&errors(&with_route("[auth]")), "auth.keys", "no keys");
    error_at(
        &errors(&with_route("[auth]\nkeys = []\nadmin_keys = []")),
        "auth.keys",
        "no keys",
    );
    // A key in both lists would let a client administer.
    let errs = errors(&with_route(
        "[auth]\nkeys = [\"${CLIENT_KEY}\"]\nadmin_keys = [\"other\", \"${CLIENT_KEY}\", \"\"]",
    ));
    error_at(&errs, "auth.admin_keys[1]", "also a client key");
    error_at(&errs, "auth.admin_keys[2]", "admin key is empty");
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs
        .iter()
        .all(|e| !e.to_string().contains("client-secret")));
    let errs = errors(&with_route(
        "[server]\nallowed_hosts = [\"https://gw.example\", \"gw.example:8080\", \"\", \"ok.example\"]",
    ));
    for i in 0..3 {
        error_at(
            &errs,
            &format!("server.allowed_hosts[{i}]"),
            "is not a host name",
        );
    }
    assert_eq!(errs.len(), 3, "{errs:#?}");
    error_at(
        &errors(&with_route("[cluster]")),
        "cluster.redis",
        "required",
    );
    let errs = errors(&with_route(
        "[cluster]\nredis = \"redis://cache:port\"\nkey_prefix = \"eu fleet\"",
    ));
    error_at(&errs, "cluster.redis", "not a valid redis URL");
    error_at(&errs, "cluster.key_prefix", "without spaces");
}

/// A duration too long to be meant (or to be added to a clock reading: `u64::MAX` seconds made
/// every request panic) is refused at its key path, with the limit; the longest allowed passes.
#[test]
fn absurd_durations_are_refused_with_the_limit() {
    let huge = "99999999999999999s";
    let errs = errors(&two_routes(
        &format!("[defaults.breaker]\nopen_for_max = \"{huge}\""),
        &format!(
            "[routes.failover]\nattempt_timeout = \"{huge}\"\nrequest_timeout = \"18446744073709551615s\"\n\
             [routes.hedge]\ndelay = \"400d\"\n[audit]\nretention = \"36501d\""
        ),
    ));
    for (path, value, limit) in [
        ("defaults.breaker.open_for_max", huge, "365d"),
        ("routes[1].failover.attempt_timeout", huge, "365d"),
        (
            "routes[1].failover.request_timeout",
            "18446744073709551615s",
            "365d",
        ),
        ("routes[1].hedge.delay", "400d", "365d"),
        ("audit.retention", "36501d", "36500d"),
    ] {
        let e = error_at(
            &errs,
            path,
            &format!("`{value}` is too long: the limit for this key is {limit}"),
        );
        assert!(
            e.to_string().starts_with(&format!("{path}: ")),
            "the key path leads: {e}"
        );
    }
    assert_eq!(errs.len(), 5, "{errs:#?}");
    let ok = super::load(&with_route(
        "[routes.failover]\nrequest_timeout = \"365d\"\nattempt_timeout = \"365d\"\n\
         [routes.breaker]\nopen_for_max = \"365d\"\n[audit]\nstore = \"off\"\nretention = \"36500d\"",
    ));
    assert_eq!(
        ok.routes[0].failover.request_timeout,
        std::time::Duration::from_secs(365 * 86_400)
    );
}

//! Every mistake is reported at its exact key path, with a hint, and all of them at once.

use super::{error_at, errors, two_routes, with_route, PROVIDERS};

#[test]
fn unknown_key_names_its_full_path_and_the_expected_keys() {
    let errs = errors(&two_routes("", "[routes.failover]\nmax_atempts = 3"));
    let e = error_at(
        &errs,
        "routes[1].failover.max_atempts",
        "unknown field `max_atempts`",
    );
    assert!(
        e.hint.as_deref().unwrap_or("").contains("max_attempts"),
        "{e}"
    );
    assert_eq!(errs.len(), 1);
}

#[test]
fn wrong_type_and_unknown_top_level_key() {
    let errs = errors(&with_route(
        "[routes.failover]\nmax_attempts = \"3\"\n[serverr]\nlisten = \"x\"",
    ));
    let e = error_at(
        &errs,
        "routes[0].failover.max_attempts",
        "invalid type: string",
    );
    assert_eq!(e.hint.as_deref(), Some("expected u32"));
    error_at(&errs, "serverr", "unknown top-level key");
    for bad in ["0", "5000"] {
        let errs = errors(&with_route(&format!("[server]\nworkers = {bad}")));
        let e = error_at(&errs, "server.workers", "must be between 1 and 1024");
        assert_eq!(
            e.hint.as_deref(),
            Some("leave it out for one thread per core")
        );
    }
    let errs = errors(&format!(
        "{PROVIDERS}\n[[routes]]\nname = \"r\"\ntargets = [\
         {{ provider = \"openai\", model = \"m\" }}, {{ provider = \"openai\", modle = \"x\" }}]"
    ));
    error_at(&errs, "routes[0].targets[1].modle", "unknown field");
    let errs = errors(&format!("{PROVIDERS}\n[routes]\nname = \"x\""));
    error_at(&errs, "routes", "expected an array, found table");
}

#[test]
fn syntax_error_has_a_line_number() {
    let errs = errors("[server]\nlisten = \"127.0.0.1:8080\nmax_body = 1");
    assert_eq!(errs.len(), 1);
    let e = &errs[0];
    assert_eq!(e.path, "");
    assert!(e.message.contains("line 2"), "{e}");
    assert!(!e.to_string().starts_with(':'));
}

#[test]
fn bad_duration_in_defaults_is_reported_once_at_its_path() {
    let errs = errors(&two_routes(
        "[defaults.failover]\nattempt_timeout = \"30\"",
        "",
    ));
    let e = error_at(&errs, "defaults.failover.attempt_timeout", "missing unit");
    assert!(e.hint.as_deref().unwrap_or("").contains("800ms"));
    assert_eq!(errs.len(), 1, "{errs:#?}");
}

#[test]
fn missing_environment_variable_names_it() {
    let text = PROVIDERS.replace("AZURE_OPENAI_API_KEY", "AZURE_OPENAI_API_KEY_X");
    let errs = errors(&format!(
        "{text}\n[[routes]]\nname = \"a\"\ntargets = [{{ provider = \"azure\", deployment = \"d\" }}]"
    ));
    let e = error_at(
        &errs,
        "providers[1].api_key",
        "environment variable AZURE_OPENAI_API_KEY_X is not set",
    );
    assert!(e.hint.as_deref().unwrap_or("").contains("export"));
    assert!(e.to_string().starts_with(
        "providers[1].api_key: environment variable AZURE_OPENAI_API_KEY_X is not set (hint: "
    ));
    assert_eq!(errs.len(), 1, "no follow-up error for the route: {errs:#?}");
}

#[test]
fn target_rules() {
    let route = |targets: &str| {
        errors(&format!(
            "{PROVIDERS}\n[[routes]]\nname = \"r\"\ntargets = [{targets}]"
        ))
    };
    let errs =
        route(r#"{ provider = "openai", model = "a" }, { provider = "opneai", model = "b" }"#);
    let e = error_at(
        &errs,
        "routes[0].targets[1].provider",
        "unknown provider `opneai`",
    );
    assert_eq!(e.hint.as_deref(), Some("known providers: openai, azure"));
    let errs = route(r#"{ provider = "azure", model = "gpt-4o" }"#);
    let e = error_at(&errs, "routes[0].targets[0].model", "azure");
    assert!(e
        .hint
        .as_deref()
        .unwrap_or("")
        .contains("azure targets name a deployment"));
    error_at(
        &route(r#"{ provider = "azure" }"#),
        "routes[0].targets[0].deployment",
        "required",
    );
    error_at(
        &route(r#"{ provider = "openai", deployment = "d" }"#),
        "routes[0].targets[0].deployment",
        "only for azure",
    );
    error_at(
        &route(r#"{ provider = "openai" }"#),
        "routes[0].targets[0].model",
        "required",
    );
    error_at(
        &route(r#"{ model = "m" }"#),
        "routes[0].targets[0].provider",
        "required",
    );
    error_at(
        &route(r#"{ provider = "openai", model = "m", context_window = 0 }"#),
        "routes[0].targets[0].context_window",
        "greater than 0",
    );
    let errs =
        route(r#"{ provider = "openai", model = "m" }, { provider = "openai", model = "m" }"#);
    error_at(&errs, "routes[0].targets[1]", "duplicate target `openai/m`");
    error_at(&route(""), "routes[0].targets", "at least one target");
}

#[test]
fn route_rules() {
    let errs = errors(&two_routes("", "").replace("name = \"b\"", "name = \"a\""));
    error_at(&errs, "routes[1].name", "duplicate route name `a`");
    let errs = errors(&with_route("strategy = \"fastest\""));
    let e = error_at(&errs, "routes[0].strategy", "unknown strategy `fastest`");
    assert!(e.hint.as_deref().is_some_and(|h| h.contains("adaptive")));
    let errs = errors(&format!(
        "{PROVIDERS}\n[[routes]]\ntargets = [{{ provider = \"openai\", model = \"m\" }}]"
    ));
    error_at(&errs, "routes[0].name", "required");
    error_at(&errors(PROVIDERS), "routes", "no routes");
}

#[test]
fn provider_rules() {
    let text = r#"
[[providers]]
name = "a b"
kind = "openai"
base_url = "https://x"
[[providers]]
name = "p"
kind = "watsonx"
base_url = "ftp://x"
[[providers]]
name = "p"
base_url = "https://"
connect_timeout = "0s"
[[providers]]
name = "q"
kind = "openai"
api_key = ""
[[routes]]
name = "r"
targets = [{ provider = "p", model = "m" }]
"#;
    let errs = errors(text);
    error_at(&errs, "providers[0].name", "invalid provider name `a b`");
    let e = error_at(
        &errs,
        "providers[1].kind",
        "unknown provider kind `watsonx`",
    );
    assert!(e
        .hint
        .as_deref()
        .unwrap_or("")
        .contains("openai-compatible"));
    error_at(
        &errs,
        "providers[1].base_url",
        "must start with http:// or https://",
    );
    error_at(&errs, "providers[2].name", "duplicate provider name `p`");
    error_at(&errs, "providers[2].kind", "required");
    error_at(&errs, "providers[2].base_url", "not a valid URL");
    error_at(&errs, "providers[2].connect_timeout", "greater than 0s");
    error_at(&errs, "providers[3].base_url", "required");
    error_at(&errs, "providers[3].api_key", "empty");
    // `p` exists (its kind is bad): the target is not also reported as an unknown provider.
    assert!(
        errs.iter().all(|e| !e.path.starts_with("routes")),
        "{errs:#?}"
    );
    error_at(
        &errors("[[routes]]\nname = \"r\"\ntargets = []"),
        "providers",
        "no providers",
    );
}

#[test]
fn every_error_is_reported_together() {
    // Parse stage: each route, target and policy section is decoded on its own.
    let errs = errors(&two_routes(
        "[defaults.hedge]\nbudgett = 1",
        "[routes.failover]\nmax_atempts = 3\n[routes.breaker]\nwindow = 60\n\
         [[routes]]\nname = \"c\"\ntarget = []",
    ));
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[1].failover.max_atempts",
            "routes[1].breaker.window",
            "routes[2].target",
            "defaults.hedge.budgett"
        ]
    );
    let e = error_at(
        &errs,
        "routes[1].breaker.window",
        "invalid type: integer `60`",
    );
    assert!(
        e.hint.as_deref().unwrap_or("").contains("duration string"),
        "{e}"
    );
    // Validation stage: errors from every section at once.
    let errs = errors(&two_routes(
        "[server]\nlisten = \"nope\"\n[defaults.failover]\nattempt_timeout = \"30\"",
        "[routes.hedge]\ndelay = \"fast\"\n[audit]\nstore = \"ftp://x\"",
    ));
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "server.listen",
            "defaults.failover.attempt_timeout",
            "routes[1].hedge.delay",
            "audit.store"
        ]
    );
}

/// A key with a character no HTTP header may carry (a newline read from a file into the
/// variable) cannot be sent: `serve` could not build its provider, so the config refuses it,
/// at its path and without echoing it. A client key alike: no client could send it.
#[test]
fn keys_that_cannot_be_sent_in_a_header_are_refused_without_echoing_them() {
    let text = r#"
[[providers]]
name = "p"
kind = "openai"
base_url = "https://x"
api_key = "sk-secret-with-newline\n"
[[routes]]
name = "r"
targets = [{ provider = "p", model = "m" }]
[auth]
keys = ["client\u0000secret", "fine"]
"#;
    let errs = errors(text);
    error_at(
        &errs,
        "providers[0].api_key",
        "not allowed in an HTTP header",
    );
    error_at(&errs, "auth.keys[0]", "not allowed in an HTTP header");
    assert_eq!(errs.len(), 2, "{errs:#?}");
    for e in &errs {
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

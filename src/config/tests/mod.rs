//! Unit tests for the config module: `defaults.rs` checks what a valid file resolves to,
//! `errors.rs` and `policy_errors.rs` that each mistake is reported at its exact key path with a
//! hint; `responses.rs` both for `[responses]`, `selection.rs` for strategies, weights, prices
//! and `[routes.adaptive]`, `telemetry.rs` for `[telemetry]`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bedrock;
mod defaults;
mod errors;
mod policy_errors;
mod responses;
mod selection;
mod telemetry;
mod vertex;

use super::{Config, ConfigError};

/// Two providers (one Azure) with secrets from the environment.
const PROVIDERS: &str = r#"
[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/v1/"
api_key = "${OPENAI_API_KEY}"

[[providers]]
name = "azure"
kind = "azure"
base_url = "https://example.openai.azure.com"
api_key = "${AZURE_OPENAI_API_KEY}"
"#;

/// The secrets the tests' fake environment holds.
const OPENAI_KEY: &str = "sk-openai-secret";
const AZURE_KEY: &str = "az-secret";
const CLIENT_KEY: &str = "client-secret";

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some(OPENAI_KEY.into()),
        "AZURE_OPENAI_API_KEY" => Some(AZURE_KEY.into()),
        "CLIENT_KEY" => Some(CLIENT_KEY.into()),
        "HOST" => Some("llm.internal:8000".into()),
        _ => None,
    }
}

/// The providers plus one route `gpt-4o` on openai, then `extra` (sections for that route, or
/// more tables).
fn with_route(extra: &str) -> String {
    format!(
        "{PROVIDERS}\n[[routes]]\nname = \"gpt-4o\"\n\
         targets = [{{ provider = \"openai\", model = \"gpt-4o\" }}]\n{extra}"
    )
}

/// A file with two routes: `routes[0]` plain, `routes[1]` followed by `extra`.
fn two_routes(defaults: &str, extra: &str) -> String {
    format!(
        "{PROVIDERS}\n{defaults}\n\
         [[routes]]\nname = \"a\"\ntargets = [{{ provider = \"openai\", model = \"gpt-4o\" }}]\n\
         [[routes]]\nname = \"b\"\ntargets = [{{ provider = \"openai\", model = \"gpt-4o\" }}]\n{extra}"
    )
}

fn load(text: &str) -> Config {
    Config::from_toml(text, &env).unwrap_or_else(|e| panic!("unexpected errors:\n{e}"))
}

fn errors(text: &str) -> Vec<ConfigError> {
    match Config::from_toml(text, &env) {
        Ok(config) => panic!("expected errors, got {config:#?}"),
        Err(e) => e.0,
    }
}

/// The one error at `path`, whose message contains `needle`; every error needs a hint.
fn error_at<'a>(errors: &'a [ConfigError], path: &str, needle: &str) -> &'a ConfigError {
    let found: Vec<_> = errors.iter().filter(|e| e.path == path).collect();
    match found.as_slice() {
        [e] => {
            assert!(e.message.contains(needle), "{path}: {e} lacks {needle:?}");
            assert!(e.hint.is_some(), "{e} has no hint");
            e
        }
        _ => panic!("expected one error at {path}, got {found:?} among:\n{errors:#?}"),
    }
}

//! The serde shape of the config file: every table denies unknown keys and every key is optional
//! here, so that `validate` can apply defaults and report a missing key with its path and a hint.
//!
//! The text is parsed in two steps to report as many errors as possible at once: first the TOML
//! syntax, then each top-level section and each `[[providers]]` / `[[routes]]` entry on its own
//! through `serde_path_to_error`, so one bad route does not hide a typo in another.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{ConfigError, ConfigErrors};

/// The whole file, as written.
#[derive(Debug, Default)]
pub(super) struct RawConfig {
    pub server: Option<RawServer>,
    pub providers: Vec<RawProvider>,
    pub routes: Vec<RawRoute>,
    pub defaults: Option<RawDefaults>,
    pub audit: Option<RawAudit>,
    pub auth: Option<RawAuth>,
    pub cluster: Option<RawCluster>,
}

/// Top-level keys, in the order they are read and listed in hints.
const TOP_LEVEL: &[&str] = &[
    "server",
    "providers",
    "routes",
    "defaults",
    "audit",
    "auth",
    "cluster",
];

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [server] table")]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub max_body: Option<String>,
}

/// One `[[providers]]` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[providers]] table")]
pub(super) struct RawProvider {
    pub name: Option<String>,
    pub kind: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub connect_timeout: Option<String>,
    pub api_version: Option<String>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[routes]] table")]
pub(super) struct RawRoute {
    pub name: Option<String>,
    pub strategy: Option<String>,
    pub targets: Option<Vec<RawTarget>>,
    pub failover: Option<RawFailover>,
    pub breaker: Option<RawBreaker>,
    pub hedge: Option<RawHedge>,
    pub retry_budget: Option<RawRetryBudget>,
    pub context: Option<RawContext>,
}

/// One entry of a route's `targets`.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a target table like { provider = \"...\", model = \"...\" }"
)]
pub(super) struct RawTarget {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub deployment: Option<String>,
    pub context_window: Option<u32>,
}

/// `[defaults]`: policy sections shared by all routes; a route's own keys win, key by key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [defaults] table")]
pub(super) struct RawDefaults {
    pub failover: Option<RawFailover>,
    pub breaker: Option<RawBreaker>,
    pub hedge: Option<RawHedge>,
    pub retry_budget: Option<RawRetryBudget>,
    pub context: Option<RawContext>,
}

/// `failover` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a failover table")]
pub(super) struct RawFailover {
    pub on_status: Option<Vec<u16>>,
    pub max_attempts: Option<u32>,
    pub same_target_retries: Option<u32>,
    pub retry_after_wait: Option<String>,
    pub mid_stream: Option<String>,
    pub attempt_timeout: Option<String>,
    pub first_token_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub request_timeout: Option<String>,
}

/// `breaker` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a breaker table")]
pub(super) struct RawBreaker {
    pub failure_rate: Option<f64>,
    pub window: Option<String>,
    pub min_requests: Option<u32>,
    pub consecutive_failures: Option<u32>,
    pub open_for: Option<String>,
    pub open_for_max: Option<String>,
    pub probe: Option<bool>,
    pub probe_interval: Option<String>,
    pub half_open_probes: Option<u32>,
    pub ramp: Option<String>,
    pub ramp_failure_rate: Option<f64>,
}

/// `hedge` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a hedge table")]
pub(super) struct RawHedge {
    pub enabled: Option<bool>,
    pub delay: Option<String>,
    pub max_parallel: Option<u32>,
    pub budget: Option<f64>,
}

/// `retry_budget` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a retry_budget table")]
pub(super) struct RawRetryBudget {
    pub ratio: Option<f64>,
    pub min_per_sec: Option<u32>,
}

/// `context` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a context table")]
pub(super) struct RawContext {
    pub on_overflow: Option<String>,
}

/// `[audit]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [audit] table")]
pub(super) struct RawAudit {
    pub store: Option<String>,
    pub bodies: Option<bool>,
    pub retention: Option<String>,
}

/// `[auth]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [auth] table")]
pub(super) struct RawAuth {
    pub keys: Option<Vec<String>>,
}

/// `[cluster]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [cluster] table")]
pub(super) struct RawCluster {
    pub redis: Option<String>,
}

/// Parse config text into its raw shape, reporting syntax errors and every section's unknown
/// keys and wrong types with their key paths.
pub(super) fn parse(text: &str) -> Result<RawConfig, ConfigErrors> {
    let mut table: toml::Table = text
        .parse()
        .map_err(|e| ConfigErrors(vec![syntax_error(text, &e)]))?;
    let mut errors = Vec::new();
    let mut raw = RawConfig::default();
    for &key in TOP_LEVEL {
        let Some(value) = table.remove(key) else {
            continue;
        };
        let e = &mut errors;
        match key {
            "server" => raw.server = section(value, key, e),
            "providers" => raw.providers = list(value, key, "[[providers]]", e),
            "routes" => raw.routes = list(value, key, "[[routes]]", e),
            "defaults" => raw.defaults = section(value, key, e),
            "audit" => raw.audit = section(value, key, e),
            "auth" => raw.auth = section(value, key, e),
            _ => raw.cluster = section(value, key, e),
        }
    }
    for key in table.keys() {
        errors.push(ConfigError {
            path: key_path("", key),
            message: format!("unknown top-level key `{key}`"),
            hint: Some(format!("expected one of {}", TOP_LEVEL.join(", "))),
        });
    }
    if errors.is_empty() {
        Ok(raw)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Deserialize one table, collecting its first error with the full key path.
fn section<T: DeserializeOwned>(
    value: toml::Value,
    path: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(serde_error(path, &e));
            None
        }
    }
}

/// Deserialize an array of tables entry by entry, so each entry reports its own first error.
fn list<T: DeserializeOwned>(
    value: toml::Value,
    path: &str,
    syntax: &str,
    errors: &mut Vec<ConfigError>,
) -> Vec<T> {
    let toml::Value::Array(items) = value else {
        errors.push(ConfigError {
            path: path.to_owned(),
            message: format!("expected an array of tables, found {}", value.type_str()),
            hint: Some(format!("write each entry under its own {syntax} header")),
        });
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| section(item, &format!("{path}[{i}]"), errors))
        .collect()
}

/// A serde error with its path; `"..., expected X"` becomes the message and the hint `expected X`.
fn serde_error(prefix: &str, e: &serde_path_to_error::Error<toml::de::Error>) -> ConfigError {
    let mut path = prefix.to_owned();
    for segment in e.path().iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => path.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => path = key_path(&path, key),
            serde_path_to_error::Segment::Enum { variant } => path = key_path(&path, variant),
            serde_path_to_error::Segment::Unknown => path.push_str(".?"),
        }
    }
    let text = e.inner().message().replace('\n', " ");
    let (message, hint) = match text.split_once(", expected ") {
        Some((message, expected)) => (message.to_owned(), Some(format!("expected {expected}"))),
        None => (text, None),
    };
    ConfigError {
        path,
        message,
        hint,
    }
}

/// `parent.key`, quoting keys that are not bare TOML keys.
fn key_path(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// A TOML syntax error, located by line and column.
fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let location = e.span().map(|span| {
        let before = text.get(..span.start).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!(" at line {line}, column {column}")
    });
    ConfigError {
        path: String::new(),
        message: format!(
            "invalid TOML{}: {}",
            location.unwrap_or_default(),
            e.message().trim().replace('\n', "; ")
        ),
        hint: Some("check quoting, brackets and that each key appears once per table".to_owned()),
    }
}

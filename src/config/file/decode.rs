//! Decoding the text into the raw shape: TOML syntax first, then each table on its own through
//! `serde_path_to_error`, every error with its full key path.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::{RawConfig, RawDefaults, RawRoute};
use crate::config::{ConfigError, ConfigErrors};

/// Top-level keys, in the order they are read and listed in hints.
const TOP_LEVEL: &[&str] = &[
    "server",
    "providers",
    "routes",
    "defaults",
    "audit",
    "responses",
    "auth",
    "cluster",
    "telemetry",
];

/// A route's keys, its targets and sections still undecoded: each is decoded on its own so a
/// typo in `failover` does not hide one in `breaker`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[routes]] table")]
struct RouteShape {
    name: Option<String>,
    strategy: Option<String>,
    targets: Option<toml::Value>,
    failover: Option<toml::Value>,
    breaker: Option<toml::Value>,
    hedge: Option<toml::Value>,
    retry_budget: Option<toml::Value>,
    context: Option<toml::Value>,
    adaptive: Option<toml::Value>,
}

/// `[defaults]` with its sections still undecoded (see [`RouteShape`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [defaults] table")]
struct DefaultsShape {
    failover: Option<toml::Value>,
    breaker: Option<toml::Value>,
    hedge: Option<toml::Value>,
    retry_budget: Option<toml::Value>,
    context: Option<toml::Value>,
}

/// Parse config text into its raw shape, reporting syntax errors and every section's unknown
/// keys and wrong types with their key paths.
pub(in crate::config) fn parse(text: &str) -> Result<RawConfig, ConfigErrors> {
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
            "providers" => {
                let hint = "write each provider under its own [[providers]] header";
                raw.providers = list(value, key, hint, e, section);
            }
            "routes" => {
                let hint = "write each route under its own [[routes]] header";
                raw.routes = list(value, key, hint, e, route);
            }
            "defaults" => raw.defaults = defaults(value, key, e),
            "audit" => raw.audit = section(value, key, e),
            "responses" => raw.responses = section(value, key, e),
            "auth" => raw.auth = section(value, key, e),
            "cluster" => raw.cluster = section(value, key, e),
            _ => raw.telemetry = section(value, key, e),
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

/// Decode an array entry by entry with `decode`, so each entry reports its own errors.
fn list<T>(
    value: toml::Value,
    path: &str,
    hint: &str,
    errors: &mut Vec<ConfigError>,
    decode: fn(toml::Value, &str, &mut Vec<ConfigError>) -> Option<T>,
) -> Vec<T> {
    let toml::Value::Array(items) = value else {
        errors.push(ConfigError {
            path: path.to_owned(),
            message: format!("expected an array, found {}", value.type_str()),
            hint: Some(hint.to_owned()),
        });
        return Vec::new();
    };
    items
        .into_iter()
        .enumerate()
        .filter_map(|(i, item)| decode(item, &format!("{path}[{i}]"), errors))
        .collect()
}

/// An optional sub-table at `parent.key`.
fn sub<T: DeserializeOwned>(
    value: Option<toml::Value>,
    parent: &str,
    key: &str,
    errors: &mut Vec<ConfigError>,
) -> Option<T> {
    section(value?, &key_path(parent, key), errors)
}

fn route(value: toml::Value, path: &str, errors: &mut Vec<ConfigError>) -> Option<RawRoute> {
    let shape: RouteShape = section(value, path, errors)?;
    let targets = shape.targets.map(|v| {
        let hint = "write targets = [{ provider = \"...\", model = \"...\" }, ...]";
        list(v, &key_path(path, "targets"), hint, errors, section)
    });
    Some(RawRoute {
        name: shape.name,
        strategy: shape.strategy,
        targets,
        failover: sub(shape.failover, path, "failover", errors),
        breaker: sub(shape.breaker, path, "breaker", errors),
        hedge: sub(shape.hedge, path, "hedge", errors),
        retry_budget: sub(shape.retry_budget, path, "retry_budget", errors),
        context: sub(shape.context, path, "context", errors),
        adaptive: sub(shape.adaptive, path, "adaptive", errors),
    })
}

fn defaults(value: toml::Value, path: &str, errors: &mut Vec<ConfigError>) -> Option<RawDefaults> {
    let shape: DefaultsShape = section(value, path, errors)?;
    Some(RawDefaults {
        failover: sub(shape.failover, path, "failover", errors),
        breaker: sub(shape.breaker, path, "breaker", errors),
        hedge: sub(shape.hedge, path, "hedge", errors),
        retry_budget: sub(shape.retry_budget, path, "retry_budget", errors),
        context: sub(shape.context, path, "context", errors),
    })
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

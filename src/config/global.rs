//! Gateway-wide sections: `[audit]`, `[responses]`, `[auth]` and `[cluster]`.
//!
//! These hold secrets (client keys, database and Redis URLs with passwords), so their `Debug`
//! impls redact them: a config printed in a log line must never leak one.

use std::fmt;
use std::time::Duration;

/// Where audit records go (`audit.store`).
#[derive(Clone, PartialEq, Eq)]
pub enum AuditStore {
    /// No audit log (`"off"`).
    Off,
    /// A SQLite file (`"sqlite://switchyard-audit.db"` holds the path `switchyard-audit.db`).
    Sqlite(String),
    /// A PostgreSQL database, the full `postgres://` URL.
    Postgres(String),
}

impl fmt::Debug for AuditStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditStore::Off => f.write_str("Off"),
            AuditStore::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            AuditStore::Postgres(url) => f.debug_tuple("Postgres").field(&redact_url(url)).finish(),
        }
    }
}

/// `[audit]`: one record per client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Where records go.
    pub store: AuditStore,
    /// Record request and response bodies too.
    pub bodies: bool,
    /// Records older than this are deleted; `None` keeps them forever.
    pub retention: Option<Duration>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            store: AuditStore::Sqlite("switchyard-audit.db".to_owned()),
            bodies: false,
            retention: None,
        }
    }
}

/// Where the gateway keeps the Responses API responses it served (`responses.store`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponsesStore {
    /// `"audit"`: the audit log's database (`audit.store`), in a table of its own; off when
    /// the audit log is off.
    Audit,
    /// `"off"`, a SQLite file or a PostgreSQL URL, written as `audit.store` takes them.
    Own(AuditStore),
}

impl ResponsesStore {
    /// The database this names, given `[audit]`.
    pub fn resolve<'a>(&'a self, audit: &'a AuditConfig) -> &'a AuditStore {
        match self {
            ResponsesStore::Audit => &audit.store,
            ResponsesStore::Own(store) => store,
        }
    }
}

/// `[responses]`: the gateway's own store of the Responses API responses it served (`store`
/// is the API's default), so that a client's next turn with `previous_response_id` works
/// whichever provider served the earlier one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesConfig {
    /// Where responses go.
    pub store: ResponsesStore,
    /// Responses older than this are deleted (and no longer found); `None` keeps them
    /// forever. Written or not, it defaults to `audit.retention`.
    pub retention: Option<Duration>,
    /// A response whose input and output items together take more bytes than this is not
    /// stored (counted).
    pub max_bytes: usize,
}

/// Built-in `responses.max_bytes`: 4 MiB.
pub const DEFAULT_RESPONSES_MAX_BYTES: usize = 4 << 20;

impl Default for ResponsesConfig {
    fn default() -> Self {
        ResponsesConfig {
            store: ResponsesStore::Audit,
            retention: None,
            max_bytes: DEFAULT_RESPONSES_MAX_BYTES,
        }
    }
}

/// `[auth]`: client keys for the client API, admin keys for the admin API. At least one of
/// the two lists is set; none of the keys is empty, and no key is in both.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// Resolved client keys; empty lets any client in. Never printed (see the `Debug` impl).
    pub keys: Vec<String>,
    /// Resolved admin keys: the breaker override and the audit log need one. Empty with
    /// client keys set: the admin API is refused (a client key never administers). Never
    /// printed.
    pub admin_keys: Vec<String>,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("keys", &format_args!("<{} redacted>", self.keys.len()))
            .field(
                "admin_keys",
                &format_args!("<{} redacted>", self.admin_keys.len()),
            )
            .finish()
    }
}

/// `[cluster]`: replicas share breaker state and windows through Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `redis://` or `rediss://` URL; its password is never printed.
    pub redis: String,
    /// Prefix of every key this fleet writes (several fleets may share one Redis).
    pub key_prefix: String,
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("redis", &redact_url(&self.redis))
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// `[telemetry]`: traces exported over OTLP/HTTP.
#[derive(Clone, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL; spans go to `{otlp_endpoint}/v1/traces`.
    pub otlp_endpoint: String,
    /// The share of requests traced when the client sent no sampled `traceparent`.
    pub sample_ratio: f64,
    /// `service.name` of the spans.
    pub service_name: String,
}

impl TelemetryConfig {
    /// Where the spans are posted.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.otlp_endpoint.trim_end_matches('/'))
    }
}

impl fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryConfig")
            .field("otlp_endpoint", &redact_url(&self.otlp_endpoint))
            .field("sample_ratio", &self.sample_ratio)
            .field("service_name", &self.service_name)
            .finish()
    }
}

/// A URL with the password in its user info (`scheme://user:pass@host`) replaced by `***`, for
/// logs and `Debug` output.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user = rest[..at].split(':').next().unwrap_or("");
    format!("{scheme}://{user}:***{}", &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_in_urls() {
        assert_eq!(
            redact_url("redis://:s3cret@db:6379/0"),
            "redis://:***@db:6379/0"
        );
        assert_eq!(
            redact_url("postgres://app:s3cret@db/audit"),
            "postgres://app:***@db/audit"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        let store = AuditStore::Postgres("postgres://app:s3cret@db/audit".into());
        assert!(!format!("{store:?}").contains("s3cret"));
        let cluster = ClusterConfig {
            redis: "rediss://u:s3cret@h".into(),
            key_prefix: "switchyard".into(),
        };
        assert!(!format!("{cluster:?}").contains("s3cret"));
    }
}

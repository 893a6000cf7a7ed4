//! The serde shape of the config file: every table denies unknown keys and every key is optional
//! here, so that `validate` can apply defaults and report a missing key with its path and a hint.
//!
//! The text is parsed in two steps to report as many errors as possible at once: first the TOML
//! syntax, then each table on its own (each section, each `[[providers]]` entry, each route's
//! targets and policy sections) through `serde_path_to_error`, so one mistake does not hide
//! another.

mod decode;

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

pub(super) use decode::parse;

/// The whole file, as written.
#[derive(Debug, Default)]
pub(super) struct RawConfig {
    pub server: Option<RawServer>,
    pub providers: Vec<RawProvider>,
    pub routes: Vec<RawRoute>,
    pub defaults: Option<RawDefaults>,
    pub audit: Option<RawAudit>,
    pub responses: Option<RawResponses>,
    pub auth: Option<RawAuth>,
    pub cluster: Option<RawCluster>,
    pub telemetry: Option<RawTelemetry>,
}

/// `[server]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [server] table")]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub max_body: Option<SizeText>,
    pub workers: Option<u32>,
    pub allowed_hosts: Option<Vec<String>>,
    pub header_timeout: Option<DurationText>,
    pub body_timeout: Option<DurationText>,
    pub idle_timeout: Option<DurationText>,
    pub max_connections: Option<u32>,
    pub max_in_flight: Option<u32>,
    pub max_response_body: Option<SizeText>,
    pub shutdown_timeout: Option<DurationText>,
}

/// One `[[providers]]` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [[providers]] table")]
pub(super) struct RawProvider {
    pub name: Option<String>,
    pub kind: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub connect_timeout: Option<DurationText>,
    pub api_version: Option<String>,
    pub responses: Option<bool>,
    pub region: Option<String>,
    pub aws_access_key_id: Option<String>,
    pub aws_secret_access_key: Option<String>,
    pub aws_session_token: Option<String>,
    pub project: Option<String>,
    pub location: Option<String>,
    pub credentials_file: Option<String>,
    pub access_token: Option<String>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Default)]
pub(super) struct RawRoute {
    pub name: Option<String>,
    pub strategy: Option<String>,
    pub targets: Option<Vec<RawTarget>>,
    pub failover: Option<RawFailover>,
    pub breaker: Option<RawBreaker>,
    pub hedge: Option<RawHedge>,
    pub retry_budget: Option<RawRetryBudget>,
    pub context: Option<RawContext>,
    pub adaptive: Option<RawAdaptive>,
}

/// `[routes.adaptive]`: how a weighted or adaptive route shares its traffic.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an adaptive table")]
pub(super) struct RawAdaptive {
    pub floor: Option<f64>,
    pub interval: Option<DurationText>,
    pub max_step: Option<f64>,
    pub affinity: Option<String>,
}

/// A target's `price`: US dollars per million tokens.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a price table like { input = 2.5, output = 10.0 } (USD per million tokens)"
)]
pub(super) struct RawPrice {
    pub input: Option<f64>,
    pub output: Option<f64>,
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
    pub prefill: Option<bool>,
    pub weight: Option<f64>,
    pub price: Option<RawPrice>,
}

/// `[defaults]`: policy sections shared by all routes; a route's own keys win, key by key.
#[derive(Debug, Default)]
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
    pub retry_after_wait: Option<DurationText>,
    pub mid_stream: Option<String>,
    pub builtin_tools: Option<String>,
    pub attempt_timeout: Option<DurationText>,
    pub first_token_timeout: Option<DurationText>,
    pub idle_timeout: Option<DurationText>,
    pub request_timeout: Option<DurationText>,
}

/// `breaker` in a route or in `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a breaker table")]
pub(super) struct RawBreaker {
    pub failure_rate: Option<f64>,
    pub window: Option<DurationText>,
    pub min_requests: Option<u32>,
    pub consecutive_failures: Option<u32>,
    pub open_for: Option<DurationText>,
    pub open_for_max: Option<DurationText>,
    pub probe: Option<bool>,
    pub probe_interval: Option<DurationText>,
    pub half_open_probes: Option<u32>,
    pub ramp: Option<DurationText>,
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
    pub retention: Option<DurationText>,
}

/// `[responses]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [responses] table")]
pub(super) struct RawResponses {
    pub store: Option<String>,
    pub retention: Option<DurationText>,
    pub max_bytes: Option<SizeText>,
}

/// `[auth]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "an [auth] table")]
pub(super) struct RawAuth {
    pub keys: Option<Vec<String>>,
    pub admin_keys: Option<Vec<String>>,
}

/// `[cluster]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [cluster] table")]
pub(super) struct RawCluster {
    pub redis: Option<String>,
    pub key_prefix: Option<String>,
}

/// `[telemetry]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [telemetry] table")]
pub(super) struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub sample_ratio: Option<f64>,
    pub service_name: Option<String>,
}

/// A duration as written (`"60s"`), parsed by `validate` after `${VAR}` interpolation. Its own
/// type so a bare number is reported as "expected a duration string", not "expected a string".
#[derive(Debug)]
pub(super) struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string with a unit, like \"800ms\", \"30s\" or \"20m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A size as written: a string (`"8MiB"`) or a number of bytes.
#[derive(Debug)]
pub(super) struct SizeText(pub String);

impl<'de> Deserialize<'de> for SizeText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SizeText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size like \"8MiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

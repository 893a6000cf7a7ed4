//! Configuration: the TOML file is parsed into its raw serde shape (`file/`, every table with
//! `deny_unknown_fields`), then validated into a [`Config`] whose fields cannot be invalid
//! (`validate/`: `${VAR}` secrets from the environment, defaults, `[defaults]` merged into each
//! route key by key, targets resolved against providers).
//!
//! Every error names its key path (`routes[0].failover.attempt_timeout`) and gives a hint, and
//! all errors are reported together. Types: this file holds the config tree; `policy.rs` a
//! route's policies; `global.rs` `[audit]`, `[responses]`, `[auth]` and `[cluster]`;
//! `duration.rs` the duration and size syntax; `table.rs` the routing table `switchyard check`
//! prints.

mod duration;
mod file;
mod global;
mod policy;
mod table;
#[cfg(test)]
mod tests;
mod validate;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use duration::{format_duration, parse_duration, parse_size};
pub use global::{
    redact_url, AuditConfig, AuditStore, AuthConfig, ClusterConfig, ResponsesConfig,
    ResponsesStore, TelemetryConfig, DEFAULT_RESPONSES_MAX_BYTES,
};
pub use policy::{
    AdaptivePolicy, Affinity, BreakerPolicy, BuiltinTools, ContextPolicy, FailoverPolicy,
    HedgeDelay, HedgePolicy, MidStream, OnOverflow, RetryBudgetPolicy,
};
pub(crate) use validate::parse_google_credentials;

/// The resolved, validated configuration. Built only by [`Config::load`] / [`Config::from_toml`].
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`: the listening socket and request limits.
    pub server: ServerConfig,
    /// Providers in file order.
    pub providers: Vec<Arc<ProviderConfig>>,
    /// Routes in file order; route names are unique.
    pub routes: Vec<Arc<RouteConfig>>,
    /// `[audit]`: where the per-request audit log goes.
    pub audit: AuditConfig,
    /// `[responses]`: where stored Responses API responses go.
    pub responses: ResponsesConfig,
    /// `[auth]`: client keys; `None` lets any client in.
    pub auth: Option<AuthConfig>,
    /// `[cluster]`: shared breaker state; `None` keeps it per replica.
    pub cluster: Option<ClusterConfig>,
    /// `[telemetry]`: traces; `None` builds and exports none.
    pub telemetry: Option<TelemetryConfig>,
}

/// `[server]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Address the client API, admin endpoints and dashboard listen on.
    pub listen: SocketAddr,
    /// Largest accepted request body, in bytes.
    pub max_body: usize,
    /// Threads serving clients, each with its own event loop, listener and upstream
    /// connections (`serve`); `None`: one per core.
    pub workers: Option<std::num::NonZeroU32>,
    /// Host names (lowercase, no port) the admin endpoints and the dashboard answer to beside
    /// the listen address's own (see `api::guard`): a browser sends the name it was pointed
    /// at, and a name nobody configured is how a DNS rebinding attack arrives.
    pub allowed_hosts: Vec<String>,
    /// A client must send its request head within this of connecting (or of its first byte
    /// on a kept-alive connection); else the connection is closed. Bounds what a slow client
    /// (one byte a second) holds: a connection and its file descriptor.
    pub header_timeout: Duration,
    /// A client API request's body must have arrived whole within this of its head; else the
    /// request gets 408 and no provider is asked. Bounds what a client sending its body a byte
    /// a second holds: a connection and a place under `max_in_flight`.
    pub body_timeout: Duration,
    /// A kept-alive connection with no request in flight is closed after this.
    pub idle_timeout: Duration,
    /// Client connections open at once, over every server thread; one more is accepted and
    /// closed at once. Keeps file descriptors for upstream calls and the audit store.
    pub max_connections: u32,
    /// Client API requests (`/v1/...` completions and messages) in flight at once, streams
    /// until they end; one more gets 503 with `Retry-After` at once, never queued.
    pub max_in_flight: u32,
    /// Largest upstream answer read whole (and largest stream read before its first
    /// content), in bytes; larger is an attempt failure that fails over.
    pub max_response_body: usize,
    /// On SIGTERM, in-flight requests and streams drain at most this long; what is left is
    /// then ended (streams with an error event) and the audit log flushed.
    pub shutdown_timeout: Duration,
}

/// The wire format and URL scheme a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// `openai`: api.openai.com.
    OpenAi,
    /// `openai-compatible`: any server speaking the OpenAI API (vLLM, Ollama, proxies...).
    OpenAiCompatible,
    /// `azure`: Azure OpenAI; targets name a deployment.
    Azure,
    /// `anthropic`: the Anthropic Messages API.
    Anthropic,
    /// `gemini`: the Google Gemini API.
    Gemini,
    /// `bedrock`: Amazon Bedrock (Anthropic models), SigV4-signed or with a Bedrock API key.
    Bedrock,
    /// `vertex`: Google Vertex AI (Gemini and Anthropic models), with OAuth 2 access tokens.
    Vertex,
}

impl ProviderKind {
    /// The name used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiCompatible => "openai-compatible",
            ProviderKind::Azure => "azure",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Vertex => "vertex",
        }
    }
}

/// One upstream API account.
#[derive(Clone)]
pub struct ProviderConfig {
    /// Unique name, `[A-Za-z0-9._-]+`; the first half of every target id.
    pub name: String,
    /// The wire format it speaks.
    pub kind: ProviderKind,
    /// Base URL without a trailing slash, as the provider's own SDK takes it
    /// (`https://api.openai.com/v1`; for Azure the resource endpoint).
    pub base_url: String,
    /// Resolved secret; never printed (see the `Debug` impl).
    pub api_key: Option<String>,
    /// Azure only; default "2024-10-21".
    pub api_version: String,
    /// TCP + TLS connect timeout; default 2s.
    pub connect_timeout: Duration,
    /// Responses API requests go to the provider's own `/responses` endpoint (lossless);
    /// `false` translates them to Chat Completions. Default: true for `openai` and `azure`,
    /// false for `openai-compatible` (which may turn it on); never for the other kinds.
    pub responses: bool,
    /// `bedrock`: the region and how calls are signed.
    pub aws: Option<AwsConfig>,
    /// `vertex`: the project, location and credentials.
    pub vertex: Option<VertexConfig>,
}

/// A `vertex` provider's project, location and credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct VertexConfig {
    pub project: String,
    /// A region (`us-east5`) or `global`.
    pub location: String,
    pub credentials: GoogleCredentials,
}

/// How a `vertex` provider gets its OAuth 2 access tokens. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub enum GoogleCredentials {
    /// A token given as it is (`access_token`), sent until it is replaced by a reload.
    AccessToken(String),
    /// A service-account key (`"type": "service_account"`): a signed JWT is exchanged for
    /// tokens at its `token_uri`.
    ServiceAccount {
        client_email: String,
        /// The key's id (`private_key_id`), named in the JWT's header.
        key_id: Option<String>,
        /// The RSA private key, PKCS#8 DER (read from the file's PEM).
        private_key: Vec<u8>,
        token_uri: String,
    },
    /// A user's application-default credentials (`"type": "authorized_user"`, written by
    /// `gcloud auth application-default login`): its refresh token is exchanged for tokens.
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
}

impl GoogleCredentials {
    /// What it is, for debug output and errors: never the secret.
    pub fn describe(&self) -> String {
        match self {
            GoogleCredentials::AccessToken(_) => "access token <redacted>".into(),
            GoogleCredentials::ServiceAccount { client_email, .. } => {
                format!("service account {client_email} <key redacted>")
            }
            GoogleCredentials::AuthorizedUser { .. } => "authorized user <redacted>".into(),
        }
    }
}

impl std::fmt::Debug for GoogleCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl std::fmt::Debug for VertexConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VertexConfig")
            .field("project", &self.project)
            .field("location", &self.location)
            .field("credentials", &self.credentials.describe())
            .finish()
    }
}

/// A `bedrock` provider's region and credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsConfig {
    /// The region signed for (and of the default endpoint).
    pub region: String,
    /// Signing keys; `None` when the provider uses a Bedrock API key (`api_key`, a bearer).
    pub keys: Option<AwsKeys>,
}

/// AWS credentials for Signature Version 4. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwsKeys(<redacted>)")
    }
}

impl std::fmt::Debug for AwsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsConfig")
            .field("region", &self.region)
            .field(
                "auth",
                &if self.keys.is_some() {
                    "sigv4 <redacted>"
                } else {
                    "bearer"
                },
            )
            .finish()
    }
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_version", &self.api_version)
            .field("connect_timeout", &self.connect_timeout)
            .field("responses", &self.responses)
            .field("aws", &self.aws)
            .field("vertex", &self.vertex)
            .finish()
    }
}

/// One model at one provider.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// `provider/model` (for Azure `provider/deployment`): the name used everywhere.
    pub id: String,
    /// The provider account that serves it.
    pub provider: Arc<ProviderConfig>,
    /// Upstream model name, or the Azure deployment name.
    pub model: String,
    /// Tokens, when known.
    pub context_window: Option<u32>,
    /// Whether the target can continue a partial assistant answer (mid-stream continuation);
    /// `prefill = false` makes it restart the answer instead, checked against what the client
    /// already has. Default: false for `openai` and `azure` (OpenAI answers a trailing assistant
    /// message anew), true for the others.
    pub prefill: bool,
}

/// How a route orders its targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Targets in file order; the next one only when the previous failed or is held open.
    Priority,
    /// Each request's first target drawn by the targets' static `weight`s; failover and
    /// hedges in the order of the same draw.
    Weighted,
    /// Like `Weighted`, over shares recomputed every `adaptive.interval` from each target's
    /// live SLIs, its weight the prior.
    Adaptive,
}

impl Strategy {
    /// The name used in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Priority => "priority",
            Strategy::Weighted => "weighted",
            Strategy::Adaptive => "adaptive",
        }
    }
}

/// A public model name with its ordered targets and policy.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// What clients send as `model`; unique.
    pub name: String,
    /// How targets are ordered.
    pub strategy: Strategy,
    /// At least one, in priority order, no duplicates.
    pub targets: Vec<Arc<TargetConfig>>,
    /// `[routes.failover]`
    pub failover: FailoverPolicy,
    /// `[routes.breaker]`, applied to each target of the route.
    pub breaker: BreakerPolicy,
    /// `[routes.hedge]`
    pub hedge: HedgePolicy,
    /// `[routes.retry_budget]`
    pub retry_budget: RetryBudgetPolicy,
    /// `[routes.context]`
    pub context: ContextPolicy,
    /// Each target's `weight` (default 1), by target position: the split of `weighted`, the
    /// prior of `adaptive`.
    pub weights: Vec<f64>,
    /// Each target's `price`, blended (three input tokens to one output token), US dollars per
    /// million tokens, by target position: `adaptive` favours the cheaper of equally healthy
    /// targets.
    pub prices: Vec<Option<f64>>,
    /// `[routes.adaptive]`
    pub adaptive: AdaptivePolicy,
}

/// A configuration error: the key path, what is wrong, and a hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// e.g. `routes[0].failover.attempt_timeout`; empty for file-level errors.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// `path: message (hint: ...)`, without the `path: ` prefix for file-level errors.
impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

/// All errors found in one config (validation reports every error, not just the first).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl Config {
    /// Read, interpolate `${VAR}` from the environment, parse and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                path: String::new(),
                message: format!("cannot read {}: {e}", path.display()),
                hint: Some("pass the file with -c FILE".into()),
            }])
        })?;
        Self::from_toml(&text, &|name| std::env::var(name).ok())
    }

    /// Parse and validate config text; `env` resolves `${VAR}` references.
    pub fn from_toml(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigErrors> {
        let raw = file::parse(text)?;
        validate::validate(raw, env)
    }

    /// The route clients reach with `model`.
    pub fn route(&self, name: &str) -> Option<&Arc<RouteConfig>> {
        self.routes.iter().find(|r| r.name == name)
    }

    /// The resolved routing table, as `switchyard check` prints it.
    pub fn routing_table(&self) -> String {
        table::routing_table(self)
    }
}

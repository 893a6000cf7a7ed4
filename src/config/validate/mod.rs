//! Raw file shape -> [`Config`]: interpolate `${VAR}`, apply defaults, check every rule, and
//! collect every error (with its key path and a hint) rather than stopping at the first.
//!
//! Layout: this file holds the error collector and `[server]`, `[audit]`, `[responses]`,
//! `[auth]`, `[cluster]`; `provider.rs` the providers; `route.rs` routes and targets;
//! `policy.rs` the route policies, with `pick.rs` choosing each key from the route,
//! `[defaults]` or the built-in default; `interp.rs` the `${VAR}` syntax.

mod cloud;
mod interp;
mod pick;
mod policy;
mod provider;
mod route;
mod telemetry;

pub(crate) use cloud::parse_google_credentials;

use std::net::SocketAddr;
use std::time::Duration;

use super::file::{
    DurationText, RawAudit, RawAuth, RawCluster, RawConfig, RawResponses, RawServer, SizeText,
};
use super::{
    format_duration, parse_duration, parse_size, AuditConfig, AuditStore, AuthConfig,
    ClusterConfig, Config, ConfigError, ConfigErrors, ResponsesConfig, ResponsesStore,
    ServerConfig,
};

/// Built-in `[server]` values: what a gateway facing clients it does not control ships with
/// (`docs/CONTRACT.md` says why each).
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_MAX_BODY: &str = "8MiB";
const DEFAULT_HEADER_TIMEOUT: &str = "10s";
const DEFAULT_BODY_TIMEOUT: &str = "30s";
const DEFAULT_IDLE_TIMEOUT: &str = "120s";
const DEFAULT_MAX_CONNECTIONS: u32 = 10_000;
const DEFAULT_MAX_IN_FLIGHT: u32 = 2_000;
const DEFAULT_MAX_RESPONSE_BODY: &str = "64MiB";
const DEFAULT_SHUTDOWN_TIMEOUT: &str = "30s";
/// Built-in `[cluster] key_prefix`.
const DEFAULT_KEY_PREFIX: &str = "switchyard";

/// The longest duration any key but `audit.retention` takes. Longer is a typo, not a policy:
/// and a value near `u64::MAX` seconds cannot be added to a clock reading at all, which made
/// every request panic (`Instant + Duration` overflow) in a config that `check` had passed.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);
/// The longest `audit.retention` (and `responses.retention`): records may be kept for years
/// (compliance), not forever by overflow (a retention past `i64` milliseconds would prune
/// everything).
const MAX_RETENTION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// Hint shared by every duration error.
pub(super) const DURATION_HINT: &str =
    "durations are strings with a unit, like \"800ms\", \"30s\", \"20m\", \"2h\"";

/// Validate a parsed file into a [`Config`]; `env` resolves `${VAR}` references.
pub(super) fn validate(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut ctx = Ctx {
        env,
        errors: Vec::new(),
    };
    let server = server(&mut ctx, &raw.server.unwrap_or_default());
    let providers = provider::providers(&mut ctx, &raw.providers);
    let routes = route::routes(&mut ctx, &raw.routes, raw.defaults.as_ref(), &providers);
    let audit = audit(&mut ctx, &raw.audit.unwrap_or_default());
    let responses = responses(&mut ctx, &raw.responses.unwrap_or_default(), &audit);
    let auth = raw.auth.map(|a| auth(&mut ctx, &a));
    let cluster = raw.cluster.map(|c| cluster(&mut ctx, &c));
    let telemetry = raw.telemetry.map(|t| telemetry::telemetry(&mut ctx, &t));
    if !ctx.errors.is_empty() {
        return Err(ConfigErrors(ctx.errors));
    }
    Ok(Config {
        server,
        providers: providers.list,
        routes,
        audit,
        responses,
        auth,
        cluster,
        telemetry,
    })
}

/// Collects errors and resolves `${VAR}` references.
pub(super) struct Ctx<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
    errors: Vec<ConfigError>,
}

impl Ctx<'_> {
    /// Record an error. An identical error (same path and message) is recorded once: a bad
    /// `[defaults]` value is seen again by every route that inherits it.
    pub(super) fn error(
        &mut self,
        path: impl Into<String>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) {
        let error = ConfigError {
            path: path.into(),
            message: message.into(),
            hint: Some(hint.into()),
        };
        if !self.errors.contains(&error) {
            self.errors.push(error);
        }
    }

    /// An environment variable (the standard AWS variables a bedrock provider falls back on).
    pub(super) fn env(&self, name: &str) -> Option<String> {
        (self.env)(name)
    }

    /// A string value with its `${VAR}` references resolved; `None` (and errors) if one is
    /// unset or malformed.
    pub(super) fn text(&mut self, path: &str, raw: &str) -> Option<String> {
        match interp::interpolate(raw, self.env) {
            Ok(value) => Some(value),
            Err(problems) => {
                for (message, hint) in problems {
                    self.error(path, message, hint);
                }
                None
            }
        }
    }

    /// A duration value, at most [`MAX_DURATION`]; `positive` rejects zero.
    pub(super) fn duration(&mut self, path: &str, raw: &str, positive: bool) -> Option<Duration> {
        self.duration_within(path, raw, positive, MAX_DURATION)
    }

    /// A duration value, at most `max`; `positive` rejects zero.
    pub(super) fn duration_within(
        &mut self,
        path: &str,
        raw: &str,
        positive: bool,
        max: Duration,
    ) -> Option<Duration> {
        let text = self.text(path, raw)?;
        match parse_duration(&text) {
            Ok(d) if positive && d.is_zero() => {
                self.error(path, "must be greater than 0s", DURATION_HINT);
                None
            }
            Ok(d) if d > max => {
                self.error(
                    path,
                    format!(
                        "`{}` is too long: the limit for this key is {}",
                        text.trim(),
                        format_duration(max)
                    ),
                    DURATION_HINT,
                );
                None
            }
            Ok(d) => Some(d),
            Err(message) => {
                self.error(path, message, DURATION_HINT);
                None
            }
        }
    }
}

fn server(ctx: &mut Ctx<'_>, raw: &RawServer) -> ServerConfig {
    let listen_raw = raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen = ctx
        .text("server.listen", listen_raw)
        .and_then(|text| match text.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                ctx.error(
                    "server.listen",
                    format!("`{text}` is not an IP address and port"),
                    "write e.g. \"127.0.0.1:8080\", or \"0.0.0.0:8080\" to listen on all interfaces",
                );
                None
            }
        });
    let max_body = size(
        ctx,
        "server.max_body",
        raw.max_body.as_ref(),
        DEFAULT_MAX_BODY,
    );
    let max_response_body = size(
        ctx,
        "server.max_response_body",
        raw.max_response_body.as_ref(),
        DEFAULT_MAX_RESPONSE_BODY,
    );
    let mut timeout = |key: &str, raw: Option<&DurationText>, default: &str, positive: bool| {
        let path = format!("server.{key}");
        let text = raw.map_or(default, |d| d.0.as_str());
        ctx.duration(&path, text, positive)
            .or_else(|| parse_duration(default).ok())
            .unwrap_or_default()
    };
    let header_timeout = timeout(
        "header_timeout",
        raw.header_timeout.as_ref(),
        DEFAULT_HEADER_TIMEOUT,
        true,
    );
    let body_timeout = timeout(
        "body_timeout",
        raw.body_timeout.as_ref(),
        DEFAULT_BODY_TIMEOUT,
        true,
    );
    let idle_timeout = timeout(
        "idle_timeout",
        raw.idle_timeout.as_ref(),
        DEFAULT_IDLE_TIMEOUT,
        true,
    );
    // "0s": no drain, what is in flight is ended at once.
    let shutdown_timeout = timeout(
        "shutdown_timeout",
        raw.shutdown_timeout.as_ref(),
        DEFAULT_SHUTDOWN_TIMEOUT,
        false,
    );
    let mut at_least_one = |key: &str, value: Option<u32>, default: u32, hint: &str| match value {
        Some(0) => {
            ctx.error(format!("server.{key}"), "must be at least 1", hint);
            default
        }
        Some(n) => n,
        None => default,
    };
    let max_connections = at_least_one(
        "max_connections",
        raw.max_connections,
        DEFAULT_MAX_CONNECTIONS,
        "leave it out for 10000; keep it below the process's file descriptor limit",
    );
    let max_in_flight = at_least_one(
        "max_in_flight",
        raw.max_in_flight,
        DEFAULT_MAX_IN_FLIGHT,
        "leave it out for 2000",
    );
    let workers = raw.workers.and_then(|n| {
        let n = std::num::NonZeroU32::new(n).filter(|n| n.get() <= MAX_WORKERS);
        if n.is_none() {
            ctx.error(
                "server.workers",
                format!("must be between 1 and {MAX_WORKERS}"),
                "leave it out for one thread per core",
            );
        }
        n
    });
    let allowed_hosts = raw
        .allowed_hosts
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, host)| allowed_host(ctx, &format!("server.allowed_hosts[{i}]"), host))
        .collect();
    ServerConfig {
        listen: listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
        max_body,
        workers,
        allowed_hosts,
        header_timeout,
        body_timeout,
        idle_timeout,
        max_connections,
        max_in_flight,
        max_response_body,
        shutdown_timeout,
    }
}

/// A size greater than 0 at `path` (`default` when it is not written, or wrong).
fn size(ctx: &mut Ctx<'_>, path: &str, raw: Option<&SizeText>, default: &str) -> usize {
    let fallback = parse_size(default).unwrap_or(1);
    let text = raw.map_or(default, |s| s.0.as_str());
    match ctx.text(path, text).map(|text| parse_size(&text)) {
        Some(Ok(0)) => {
            ctx.error(path, "must be greater than 0", SIZE_HINT);
            fallback
        }
        Some(Ok(n)) => n,
        Some(Err(message)) => {
            ctx.error(path, message, SIZE_HINT);
            fallback
        }
        None => fallback,
    }
}

/// One `server.allowed_hosts` entry: a host name or IP address as a browser's `Host` header
/// carries it, without scheme, port or path; kept lowercase, IPv6 without brackets.
fn allowed_host(ctx: &mut Ctx<'_>, path: &str, raw: &str) -> Option<String> {
    let text = ctx.text(path, raw)?;
    let host = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&host);
    let is_ip = bare.parse::<std::net::IpAddr>().is_ok();
    let name_ok = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if is_ip || name_ok {
        return Some(bare.to_owned());
    }
    ctx.error(
        path,
        format!("`{text}` is not a host name"),
        "write the name alone, as in the browser's address bar without scheme, port or path: \"gateway.internal\"",
    );
    None
}

/// More server threads than this is a typo, not a machine.
const MAX_WORKERS: u32 = 1024;

const SIZE_HINT: &str = "sizes look like \"8MiB\", \"512KiB\", \"1MB\" or a number of bytes";

fn audit(ctx: &mut Ctx<'_>, raw: &RawAudit) -> AuditConfig {
    const HINT: &str = "use \"sqlite://FILE\", \"postgres://USER:PASS@HOST/DB\" or \"off\"";
    let default = AuditConfig::default();
    let store = raw
        .store
        .as_ref()
        .and_then(|raw| ctx.text("audit.store", raw))
        .and_then(|url| store_url(ctx, "audit.store", "audit", &url, HINT))
        .unwrap_or(default.store);
    let retention = raw
        .retention
        .as_ref()
        .and_then(|r| ctx.duration_within("audit.retention", &r.0, true, MAX_RETENTION));
    AuditConfig {
        store,
        bodies: raw.bodies.unwrap_or(default.bodies),
        retention,
    }
}

/// A store as `audit.store` takes it (`url`, interpolated, at `path`): `"off"`,
/// `sqlite://FILE` (or `sqlite:FILE`), `postgres://...` (or `postgresql://...`); `None` (and
/// an error naming `what` store) for anything else.
fn store_url(
    ctx: &mut Ctx<'_>,
    path: &str,
    what: &str,
    url: &str,
    hint: &str,
) -> Option<AuditStore> {
    if url == "off" {
        return Some(AuditStore::Off);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Some(AuditStore::Postgres(url.to_owned()));
    }
    let file = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"));
    match file {
        Some(file) if !file.is_empty() => Some(AuditStore::Sqlite(file.to_owned())),
        Some(_) => {
            ctx.error(path, "the sqlite store needs a file name", hint);
            None
        }
        None => {
            // The value may be a URL with a password: name only its scheme.
            let scheme = url.split_once(':').map_or("", |(s, _)| s);
            ctx.error(
                path,
                format!("unsupported {what} store scheme `{scheme}`"),
                hint,
            );
            None
        }
    }
}

/// The largest `responses.max_bytes`: a text column holds at most about 1 GB in either
/// store, and one response held several times over (queue, cache, batch) must not be that.
const MAX_RESPONSES_MAX_BYTES: usize = 256 << 20;
/// The built-in `responses.max_bytes`, as written.
const DEFAULT_RESPONSES_MAX_BYTES_TEXT: &str = "4MiB";

fn responses(ctx: &mut Ctx<'_>, raw: &RawResponses, audit: &AuditConfig) -> ResponsesConfig {
    const HINT: &str = "use \"audit\" (the audit log's database), \"sqlite://FILE\", \"postgres://USER:PASS@HOST/DB\" or \"off\"";
    let store = match raw
        .store
        .as_ref()
        .and_then(|raw| ctx.text("responses.store", raw))
    {
        Some(url) if url == "audit" => ResponsesStore::Audit,
        Some(url) => store_url(ctx, "responses.store", "responses", &url, HINT)
            .map_or(ResponsesStore::Audit, ResponsesStore::Own),
        None => ResponsesStore::Audit,
    };
    let retention = match &raw.retention {
        Some(r) => ctx.duration_within("responses.retention", &r.0, true, MAX_RETENTION),
        None => audit.retention,
    };
    let max_bytes = size(
        ctx,
        "responses.max_bytes",
        raw.max_bytes.as_ref(),
        DEFAULT_RESPONSES_MAX_BYTES_TEXT,
    );
    if max_bytes > MAX_RESPONSES_MAX_BYTES {
        ctx.error(
            "responses.max_bytes",
            "too large: the limit for this key is 256MiB",
            "leave it out for 4MiB",
        );
    }
    ResponsesConfig {
        store,
        retention,
        max_bytes: max_bytes.min(MAX_RESPONSES_MAX_BYTES),
    }
}

fn auth(ctx: &mut Ctx<'_>, raw: &RawAuth) -> AuthConfig {
    let raw_keys = raw.keys.as_deref().unwrap_or_default();
    let raw_admin = raw.admin_keys.as_deref().unwrap_or_default();
    if raw_keys.is_empty() && raw_admin.is_empty() {
        ctx.error(
            "auth.keys",
            "[auth] is present but lists no keys",
            "add keys = [\"${SWITCHYARD_CLIENT_KEY}\"] for clients and admin_keys = [\"${SWITCHYARD_ADMIN_KEY}\"] for the admin API, or remove [auth] to let anyone in",
        );
    }
    let keys = key_list(ctx, "auth.keys", "client", raw_keys);
    let admin_keys = key_list(ctx, "auth.admin_keys", "admin", raw_admin);
    for (i, key) in admin_keys.iter().enumerate() {
        if keys.contains(key) {
            // Never echo the value: this is a secret.
            ctx.error(
                format!("auth.admin_keys[{i}]"),
                "this admin key is also a client key",
                "give the admin API keys of its own: a client key must never administer",
            );
        }
    }
    AuthConfig { keys, admin_keys }
}

/// The keys of one `[auth]` list (`what`: client or admin), each non-empty and sendable in a
/// header.
fn key_list(ctx: &mut Ctx<'_>, at: &str, what: &str, raw: &[String]) -> Vec<String> {
    let mut keys = Vec::with_capacity(raw.len());
    for (i, key) in raw.iter().enumerate() {
        let path = format!("{at}[{i}]");
        match ctx.text(&path, key) {
            Some(k) if k.is_empty() => ctx.error(
                path,
                format!("{what} key is empty"),
                "set the environment variable to a non-empty key",
            ),
            Some(k) if http::HeaderValue::from_str(&k).is_err() => ctx.error(
                path,
                format!("{what} key contains a character not allowed in an HTTP header (a control character such as a newline): nobody could send it"),
                "set the environment variable to the key alone, without a trailing newline",
            ),
            Some(k) => keys.push(k),
            None => {}
        }
    }
    keys
}

fn cluster(ctx: &mut Ctx<'_>, raw: &RawCluster) -> ClusterConfig {
    const HINT: &str = "write redis = \"redis://HOST:6379\" (or rediss:// for TLS)";
    let redis = match &raw.redis {
        None => {
            ctx.error("cluster.redis", "redis is required in [cluster]", HINT);
            String::new()
        }
        Some(raw) => match ctx.text("cluster.redis", raw) {
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() {
                    ctx.error("cluster.redis", "not a valid redis URL", HINT);
                }
                url
            }
            Some(_) => {
                ctx.error("cluster.redis", "not a redis:// or rediss:// URL", HINT);
                String::new()
            }
            None => String::new(),
        },
    };
    let key_prefix = match &raw.key_prefix {
        None => DEFAULT_KEY_PREFIX.to_owned(),
        Some(raw) => match ctx.text("cluster.key_prefix", raw) {
            Some(p) if !p.is_empty() && p.len() <= 64 && !p.contains(char::is_whitespace) => p,
            Some(_) => {
                ctx.error(
                    "cluster.key_prefix",
                    "must be 1 to 64 characters without spaces",
                    "write key_prefix = \"switchyard-eu\", one per fleet sharing a Redis",
                );
                String::new()
            }
            None => String::new(),
        },
    };
    ClusterConfig { redis, key_prefix }
}

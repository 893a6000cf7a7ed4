//! What keeps a browser from being turned against the admin endpoints and the dashboard, with
//! or without `[auth]`: a page on another site can make a victim's browser send requests to a
//! gateway it can reach (on their laptop, on their network), and keys alone do not stop that
//! when the gateway has none.
//!
//! - The `Host` header ([`check_host`]): DNS rebinding points a name the attacker owns at the
//!   gateway's address, so the attacker's page becomes same-origin with it and can read
//!   `/admin/status` or `/admin/audit`. The browser still sends the attacker's name as `Host`:
//!   only names the gateway knows are answered ([`Hosts`]).
//! - Cross-site writes ([`same_origin_json`]): a foreign page can POST a `text/plain` body
//!   without a CORS preflight (a "simple" request), and the browser sends its `Origin`. An
//!   admin mutation must be JSON (which a foreign page cannot send without a preflight we never
//!   grant) and, when an `Origin` is given, come from the gateway's own origin.
//!
//! Scope: the admin endpoints and the dashboard only. `/metrics`, `/healthz` and `/readyz`
//! are reached by scrapers and probes under whatever name they use, and the client API by SDKs
//! under any name; none of them is checked here.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

use super::error::ApiError;
use super::AppState;
use crate::config::ServerConfig;

/// The hosts the admin endpoints and the dashboard answer to, from `[server]` (fixed until a
/// restart, as the listener is):
/// - the listen address itself;
/// - listening on loopback: also `localhost`, `127.0.0.1` and `::1`;
/// - listening on every interface (`0.0.0.0`, `::`): any IP address, and `localhost` (a
///   rebinding needs a name, and which of the machine's addresses a client used is not known);
/// - and every name in `server.allowed_hosts`.
#[derive(Debug, Clone)]
pub struct Hosts {
    listen: IpAddr,
    names: Vec<String>,
}

impl Hosts {
    /// The hosts `server` allows.
    pub fn new(server: &ServerConfig) -> Hosts {
        Hosts {
            listen: server.listen.ip(),
            names: server.allowed_hosts.clone(),
        }
    }

    /// Whether `host` (lowercase, without port or brackets) may be answered.
    fn allows(&self, host: &str) -> bool {
        if self.names.iter().any(|n| n == host) {
            return true;
        }
        let ip = host.parse::<IpAddr>().ok();
        if ip == Some(self.listen) {
            return true;
        }
        let local = host == "localhost" || ip.is_some_and(|ip| ip.is_loopback());
        if self.listen.is_loopback() {
            return local;
        }
        self.listen.is_unspecified() && (host == "localhost" || ip.is_some())
    }
}

/// The host of an authority (`name:port`, `[v6]:port`, `name`): lowercase, without the port,
/// the brackets or a trailing dot.
fn host_of(authority: &str) -> String {
    let a = authority.trim();
    let host = match a.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => a.rsplit_once(':').map_or(a, |(h, _)| h),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The authority a request was sent to: its `Host` header (HTTP/1.1), else the URI's (HTTP/2).
fn authority(request: &Request) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// Middleware for the admin endpoints and the dashboard: a `Host` not in [`Hosts`] gets 403
/// (a request with none passes: every browser sends one, so it is no rebinding). Every answer
/// gets `X-Content-Type-Options: nosniff`: JSON is never sniffed into a script or a page.
pub async fn check_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let refused = authority(&request)
        .map(host_of)
        .filter(|host| !state.hosts.allows(host));
    let mut resp = match refused {
        Some(host) => {
            tracing::debug!(host = %host, path = %request.uri().path(), "refused: host not allowed");
            ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "host_not_allowed",
                format!(
                    "this gateway does not answer admin requests for the host `{host}`; add it \
                     to [server] allowed_hosts if it is the gateway's name"
                ),
            )
            .into_response()
        }
        None => next.run(request).await,
    };
    resp.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// Middleware for admin mutations: an `Origin` other than the gateway's own gets 403, a body
/// that is not declared JSON 415. A request without `Origin` (curl, scripts) passes the first
/// check: browsers send it on every POST.
pub async fn same_origin_json(request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        // `scheme://host[:port]`, compared with the `Host` the request was sent to. `null`
        // (a sandboxed frame, a file) has no authority: refused.
        let from = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| authority.trim_end_matches('/'));
        let same = match (from, authority(&request)) {
            (Some(from), Some(to)) => from.eq_ignore_ascii_case(to.trim()),
            _ => false,
        };
        if !same {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "cross_origin",
                "admin changes are accepted only from the gateway's own pages (the Origin \
                 header names another site)",
            )
            .into_response();
        }
    }
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "unsupported_media_type",
            "admin changes take a JSON body: send Content-Type: application/json",
        )
        .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, names: &[&str]) -> Hosts {
        Hosts {
            listen: listen.parse().unwrap(),
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn host_of_drops_port_brackets_case_and_trailing_dot() {
        for (authority, want) in [
            ("127.0.0.1:8080", "127.0.0.1"),
            ("LocalHost:1", "localhost"),
            ("[::1]:8080", "::1"),
            ("[::1]", "::1"),
            ("gateway.internal.", "gateway.internal"),
            ("evil.example", "evil.example"),
        ] {
            assert_eq!(host_of(authority), want, "{authority}");
        }
    }

    #[test]
    fn which_hosts_each_listen_address_answers() {
        let loopback = hosts("127.0.0.1", &["gw.internal"]);
        for ok in ["127.0.0.1", "localhost", "::1", "gw.internal"] {
            assert!(loopback.allows(ok), "{ok}");
        }
        for refused in ["evil.example", "10.0.0.5", "localhost.evil.example"] {
            assert!(!loopback.allows(refused), "{refused}");
        }
        let all = hosts("0.0.0.0", &[]);
        for ok in ["10.0.0.5", "::1", "localhost", "127.0.0.1"] {
            assert!(all.allows(ok), "{ok}");
        }
        assert!(!all.allows("evil.example"));
        let one = hosts("10.0.0.5", &[]);
        assert!(one.allows("10.0.0.5"));
        assert!(!one.allows("10.0.0.6") && !one.allows("localhost"));
    }
}

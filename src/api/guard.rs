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
//! - The client API without client keys (`client`): a foreign page can POST a prompt as a
//!   simple request and spend the provider credit of whoever runs the gateway, and a rebound
//!   name reaches it as its own origin. A key is what stops both when keys are set (a page
//!   cannot send one); without keys, a request whose `Origin` is another site's is refused,
//!   and a gateway listening on loopback (a laptop) answers only local names. SDKs, agents and
//!   curl send no `Origin` and use the name they were given, so they pass.
//!
//! Not checked: `/metrics`, `/healthz` and `/readyz` (scrapers and probes use whatever name
//! they have), and the `Host` of the client API on a gateway listening on other addresses (a
//! server reached by SDKs under names it cannot know; `Origin` is still checked there).

use std::borrow::Cow;
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
    /// `listen` as text: the `Host` most clients send, matched without parsing an address
    /// per request (~600 instructions).
    listen_text: String,
    names: Vec<String>,
}

impl Hosts {
    /// The hosts `server` allows.
    pub fn new(server: &ServerConfig) -> Hosts {
        Hosts {
            listen: server.listen.ip(),
            listen_text: server.listen.ip().to_string(),
            names: server.allowed_hosts.clone(),
        }
    }

    /// Whether `host` (lowercase, without port or brackets) may be answered.
    fn allows(&self, host: &str) -> bool {
        if host == self.listen_text || self.names.iter().any(|n| n == host) {
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

    /// Whether a page from `host` (an `Origin`'s, lowercase, without port or brackets) is the
    /// gateway's own or the machine's: a loopback name or address, the listen address, or a
    /// name in `allowed_hosts`. Stricter than [`Hosts::allows`]: on `0.0.0.0` any address is a
    /// `Host` the gateway may be reached by, but a page served from any address is not one of
    /// its own.
    fn allows_origin(&self, host: &str) -> bool {
        let ip = host.parse::<IpAddr>().ok();
        host == "localhost"
            || ip.is_some_and(|ip| ip.is_loopback() || (ip == self.listen && !ip.is_unspecified()))
            || self.names.iter().any(|n| n == host)
    }
}

/// The host of an authority (`name:port`, `[v6]:port`, `name`): lowercase, without the port,
/// the brackets or a trailing dot. Borrowed unless it had capitals (the client API checks the
/// `Host` of every request).
fn host_of(authority: &str) -> Cow<'_, str> {
    // Header values are ASCII (`to_str`): trimmed and searched by byte, not by char (a
    // `rsplit_once(':')` cost ~150 instructions, on every client API request).
    let a = authority.trim_ascii();
    let host = match a.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => match a.bytes().rposition(|b| b == b':') {
            Some(colon) => &a[..colon],
            None => a,
        },
    };
    let host = host.trim_end_matches('.');
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
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

/// Who may use the client API, checked before a request's body is read: with client keys, a
/// request carrying one (its id; 401 else). Without them, anyone but a browser page of another
/// site: an `Origin` whose host is not the gateway's own or the machine's
/// ([`Hosts::allows_origin`]; `null` included) gets 403 `cross_origin`, and on a gateway
/// listening on loopback a `Host` it does not know gets 403 `host_not_allowed` (DNS rebinding:
/// a rebound page's reads carry no `Origin`). A request with neither header passes.
pub(super) fn client(state: &AppState, h: &http::HeaderMap) -> Result<Option<String>, ApiError> {
    client_of(state, h, h.get(header::ORIGIN), h.get(header::HOST))
}

/// [`client`], with the request's `Origin` and `Host` already found (the edge reads every
/// header it needs in one pass).
pub(super) fn client_of(
    state: &AppState,
    h: &http::HeaderMap,
    origin: Option<&HeaderValue>,
    host: Option<&HeaderValue>,
) -> Result<Option<String>, ApiError> {
    if let Some(auth) = state.auth.load().as_deref() {
        if auth.has_client_keys() {
            return auth.client(h);
        }
    }
    let hosts = &state.hosts;
    if let Some(origin) = origin {
        let host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| host_of(authority.trim_end_matches('/')));
        if !host.is_some_and(|host| hosts.allows_origin(&host)) {
            tracing::debug!(origin = ?origin, "refused: a client API request from another site");
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "cross_origin",
                "this gateway's client API does not answer pages from other sites (the Origin \
                 header names one); without [auth] keys only its own host names and the \
                 machine's are trusted",
            ));
        }
    }
    if hosts.listen.is_loopback() {
        let host = host.and_then(|v| v.to_str().ok()).map(host_of);
        if let Some(host) = host.filter(|host| !hosts.allows(host)) {
            tracing::debug!(host = %host, "refused: a client API request for an unknown host");
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "host_not_allowed",
                format!(
                    "this gateway listens on loopback and does not answer for the host \
                     `{host}`; add it to [server] allowed_hosts if it is the gateway's name"
                ),
            ));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(listen: &str, names: &[&str]) -> Hosts {
        Hosts {
            listen: listen.parse().unwrap(),
            listen_text: listen.to_owned(),
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

    #[test]
    fn which_origins_are_the_gateways_own_or_the_machines() {
        let all = hosts("0.0.0.0", &["gw.internal"]);
        for ok in ["localhost", "127.0.0.1", "::1", "gw.internal"] {
            assert!(all.allows_origin(ok), "{ok}");
        }
        // Any address may be a Host there, but a page served from one is not the gateway's.
        for refused in ["10.0.0.5", "0.0.0.0", "evil.example", "null", ""] {
            assert!(!all.allows_origin(refused), "{refused}");
        }
        let one = hosts("10.0.0.5", &[]);
        assert!(one.allows_origin("10.0.0.5") && one.allows_origin("localhost"));
        assert!(!one.allows_origin("10.0.0.6"));
    }
}

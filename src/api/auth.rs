//! Keys (`[auth]`): client keys for the client API, admin keys for the admin API, each sent
//! as `Authorization: Bearer KEY` (OpenAI SDKs, curl) or `x-api-key: KEY` (Anthropic SDKs).
//!
//! - With client keys set, every client request must carry one: without it the answer is 401
//!   and no provider is reached.
//! - The admin API (the breaker override, the audit log) needs an admin key whenever `[auth]`
//!   is present. With client keys but no `admin_keys` it is refused (403): a client key
//!   must never administer, and a gateway whose clients are keyed is one that others can
//!   reach. Without `[auth]` at all (a gateway on a laptop) it is open, as the client API is.
//!
//! Logs and the audit log name a key by its id, a fingerprint that does not reveal it.

use std::hash::{Hash, Hasher};

use http::{HeaderMap, StatusCode};

use super::error::ApiError;
use crate::config::AuthConfig;

/// The accepted keys with their ids.
#[derive(Clone)]
pub struct Auth {
    /// Client keys; empty: any client is let in.
    clients: Vec<(String, String)>,
    /// Admin keys; empty: the admin API is refused.
    admins: Vec<(String, String)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("clients", &self.clients.len())
            .field("admins", &self.admins.len())
            .finish()
    }
}

/// A short fingerprint of a key: enough to tell keys apart in the audit log, useless to an
/// attacker.
pub fn key_id(key: &str) -> String {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    format!("key-{:08x}", h.finish() as u32)
}

/// Compare without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The key a request carries, if any (its fields are among `headers::READ`, those the client
/// API is given).
fn presented(h: &HeaderMap) -> Option<&str> {
    h.get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

/// The id of `presented` if it is one of `keys` (every key compared, none skipped).
fn find(keys: &[(String, String)], presented: Option<&str>) -> Option<String> {
    let p = presented?;
    let mut found = None;
    for (key, id) in keys {
        if same(key.as_bytes(), p.as_bytes()) {
            found = Some(id.clone());
        }
    }
    found
}

impl Auth {
    /// Accept the keys of `[auth]`.
    pub fn new(config: &AuthConfig) -> Auth {
        let with_ids = |keys: &[String]| keys.iter().map(|k| (k.clone(), key_id(k))).collect();
        Auth {
            clients: with_ids(&config.keys),
            admins: with_ids(&config.admin_keys),
        }
    }

    /// Whether client keys are set (else the client API is open, and `guard::client` keeps
    /// browsers of other sites out of it).
    pub fn has_client_keys(&self) -> bool {
        !self.clients.is_empty()
    }

    /// The id of the client key this request carries, or 401; `None` when no client keys are
    /// set (any client is let in).
    pub fn client(&self, h: &HeaderMap) -> Result<Option<String>, ApiError> {
        if self.clients.is_empty() {
            return Ok(None);
        }
        find(&self.clients, presented(h)).map(Some).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                "a valid switchyard client key is required (Authorization: Bearer KEY)",
            )
        })
    }

    /// The id of the admin key this request carries: 401 without a valid one, 403 for a
    /// client key, or for any request when no admin keys are set.
    pub fn admin(&self, h: &HeaderMap) -> Result<String, ApiError> {
        if self.admins.is_empty() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "admin_keys_not_set",
                "the admin API is off: [auth] sets client keys but no admin_keys, and a client \
                 key never administers; set [auth] admin_keys to use it",
            ));
        }
        let key = presented(h);
        if let Some(id) = find(&self.admins, key) {
            return Ok(id);
        }
        if find(&self.clients, key).is_some() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                "not_an_admin_key",
                "this is a client key; the admin API needs one of [auth] admin_keys",
            ));
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_api_key",
            "a valid switchyard admin key is required (Authorization: Bearer KEY, one of [auth] admin_keys)",
        ))
    }
}

/// Which admin key a request to the admin API carried: its id, or `None` without `[auth]`.
/// Set by [`require_admin`] for the handler to log who did what.
#[derive(Clone, Debug)]
pub struct AdminKey(pub Option<String>);

/// Middleware for the admin API (the breaker override, the audit log): with `[auth]`, an
/// admin key (see [`Auth::admin`]); without it, everything passes.
pub async fn require_admin(
    axum::extract::State(state): axum::extract::State<super::AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let id = match state.auth.load().as_deref() {
        None => None,
        Some(auth) => match auth.admin(request.headers()) {
            Ok(id) => Some(id),
            Err(e) => return e.into_response(),
        },
    };
    request.extensions_mut().insert(AdminKey(id));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(keys: &[&str], admin_keys: &[&str]) -> Auth {
        let own = |k: &[&str]| k.iter().map(|k| (*k).to_owned()).collect();
        Auth::new(&AuthConfig {
            keys: own(keys),
            admin_keys: own(admin_keys),
        })
    }

    fn bearer(key: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("authorization", format!("Bearer {key}").parse().unwrap());
        h
    }

    #[test]
    fn accepts_bearer_and_x_api_key_and_refuses_the_rest() {
        let auth = auth(&["sk-one", "sk-two"], &[]);
        let mut h = HeaderMap::new();
        assert!(auth.client(&h).is_err());
        h.insert("authorization", "Bearer sk-two".parse().unwrap());
        assert_eq!(auth.client(&h).unwrap(), Some(key_id("sk-two")));
        h.insert("authorization", "Bearer sk-twO".parse().unwrap());
        assert!(auth.client(&h).is_err());
        h.clear();
        h.insert("x-api-key", "sk-one".parse().unwrap());
        assert_eq!(auth.client(&h).unwrap(), Some(key_id("sk-one")));
        assert!(!key_id("sk-one").contains("sk-one"));
    }

    /// The client API is given only the fields of `headers::READ` (`app::conn::h1`): the
    /// key's are among them.
    #[test]
    fn the_key_fields_are_among_those_the_client_api_is_given() {
        for name in [http::header::AUTHORIZATION.as_str(), "x-api-key"] {
            assert!(
                crate::api::headers::READ.iter().any(|r| r == name),
                "{name}"
            );
        }
    }

    #[test]
    fn the_admin_api_takes_admin_keys_only() {
        let both = auth(&["sk-client"], &["sk-admin"]);
        assert_eq!(both.admin(&bearer("sk-admin")).unwrap(), key_id("sk-admin"));
        let code = |r: Result<String, ApiError>| r.map_err(|e| (e.status.as_u16(), e.code));
        assert_eq!(
            code(both.admin(&bearer("sk-client"))),
            Err((403, "not_an_admin_key"))
        );
        assert_eq!(
            code(both.admin(&bearer("sk-nope"))),
            Err((401, "invalid_api_key"))
        );
        assert_eq!(
            code(both.admin(&HeaderMap::new())),
            Err((401, "invalid_api_key"))
        );
        // An admin key is not a client key.
        assert!(both.client(&bearer("sk-admin")).is_err());
        // Client keys without admin keys: the admin API is refused, whatever the key.
        let clients_only = auth(&["sk-client"], &[]);
        assert_eq!(
            code(clients_only.admin(&bearer("sk-client"))),
            Err((403, "admin_keys_not_set"))
        );
        // Admin keys only: any client is let in.
        assert_eq!(
            auth(&[], &["sk-admin"]).client(&HeaderMap::new()).unwrap(),
            None
        );
    }
}

//! Client keys (`[auth]`): when set, every client request must carry one, as
//! `Authorization: Bearer KEY` (OpenAI SDKs) or `x-api-key: KEY` (Anthropic SDKs). A request
//! without a valid key gets 401 and reaches no provider. The audit log records the key's id, a
//! fingerprint that does not reveal the key.

use std::hash::{Hash, Hasher};

use http::{HeaderMap, StatusCode};

use super::error::ApiError;

/// The accepted client keys with their ids.
#[derive(Clone)]
pub struct Auth {
    keys: Vec<(String, String)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("keys", &self.keys.len())
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

impl Auth {
    /// Accept these keys.
    pub fn new(keys: &[String]) -> Auth {
        Auth {
            keys: keys.iter().map(|k| (k.clone(), key_id(k))).collect(),
        }
    }

    /// The id of the key this request carries, or 401.
    pub fn check(&self, h: &HeaderMap) -> Result<String, ApiError> {
        let presented = h
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .or_else(|| h.get("x-api-key").and_then(|v| v.to_str().ok()))
            .map(str::trim);
        let mut found = None;
        if let Some(p) = presented {
            for (key, id) in &self.keys {
                if same(key.as_bytes(), p.as_bytes()) {
                    found = Some(id.clone());
                }
            }
        }
        found.ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                "a valid switchyard client key is required (Authorization: Bearer KEY)",
            )
        })
    }
}

/// Middleware: with `[auth]` set, the request must carry a client key (admin mutations and
/// the audit log); without it, everything passes.
pub async fn require(
    axum::extract::State(state): axum::extract::State<super::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if let Some(auth) = state.auth.load().as_deref() {
        if let Err(e) = auth.check(request.headers()) {
            return e.into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_bearer_and_x_api_key_and_refuses_the_rest() {
        let auth = Auth::new(&["sk-one".into(), "sk-two".into()]);
        let mut h = HeaderMap::new();
        assert!(auth.check(&h).is_err());
        h.insert("authorization", "Bearer sk-two".parse().unwrap());
        assert_eq!(auth.check(&h).unwrap(), key_id("sk-two"));
        h.insert("authorization", "Bearer sk-twO".parse().unwrap());
        assert!(auth.check(&h).is_err());
        h.clear();
        h.insert("x-api-key", "sk-one".parse().unwrap());
        assert_eq!(auth.check(&h).unwrap(), key_id("sk-one"));
        assert!(!key_id("sk-one").contains("sk-one"));
    }
}

//! OAuth 2 access tokens for `vertex` providers: a JWT signed with a service account's key
//! (RS256, `urn:ietf:params:oauth:grant-type:jwt-bearer`), or a user's refresh token, exchanged
//! at the credentials' `token_uri`.
//!
//! A token is fetched when the server starts serving the provider (`warm_up`), kept,
//! and refreshed in the background once most of its life is over, by the first request that
//! sees it is due: requests go on with the token they have while a new one is fetched. Only a
//! request that finds no valid token (the first, after a failure, after a long idle time)
//! waits, for one fetch that every such request shares. A failed fetch is remembered for a few
//! seconds, so while the token endpoint is down attempts fail at once (and fail over) instead
//! of each waiting on it. Errors name the endpoint's answer, never a credential.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::HeaderValue;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use serde::Deserialize;
use tokio::time::Instant;

use crate::config::GoogleCredentials;

/// The scope every token is asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The JWT grant's type.
pub const JWT_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The longest a token fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a failed fetch is the answer before another is tried.
const FAILURE_HOLD: Duration = Duration::from_secs(5);
/// A token is used until this long before it expires...
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// ...and refreshed from this long before (or from half its life, if that is shorter).
const REFRESH_AHEAD: Duration = Duration::from_secs(300);
/// The most of the token endpoint's answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// A source of access tokens for one provider.
pub struct TokenSource {
    /// A service account or a user's credentials (never a plain token: that needs no source).
    credentials: GoogleCredentials,
    /// A service account's key, parsed once.
    key: Option<Box<RsaKeyPair>>,
    client: reqwest::Client,
    current: ArcSwapOption<Token>,
    /// The one fetch that requests without a token wait on.
    fetch: tokio::sync::Mutex<()>,
    /// A background refresh is under way.
    refreshing: AtomicBool,
    /// The last fetch failed: when, and why.
    failed: Mutex<Option<(Instant, String)>>,
}

struct Token {
    /// `Bearer {token}`, marked sensitive.
    header: HeaderValue,
    refresh_at: Instant,
    expires_at: Instant,
}

/// What a request does for its token.
pub enum Bearer {
    /// Here it is.
    Ready(HeaderValue),
    /// None is valid: wait for [`TokenSource::wait`].
    Fetch(Arc<TokenSource>),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSource(<redacted>)")
    }
}

impl TokenSource {
    /// The source for `credentials`; `None` for a token given as it is (no fetching).
    pub fn new(
        credentials: &GoogleCredentials,
        connect_timeout: Duration,
    ) -> Result<Option<Arc<TokenSource>>, String> {
        let key = match credentials {
            GoogleCredentials::AccessToken(_) => return Ok(None),
            GoogleCredentials::ServiceAccount { private_key, .. } => Some(Box::new(
                RsaKeyPair::from_pkcs8(private_key)
                    .map_err(|_| "the service account's private key is not an RSA key")?,
            )),
            GoogleCredentials::AuthorizedUser { .. } => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("no HTTP client for the token endpoint: {e}"))?;
        let source = Arc::new(TokenSource {
            credentials: credentials.clone(),
            key,
            client,
            current: ArcSwapOption::empty(),
            fetch: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
            failed: Mutex::new(None),
        });
        Ok(Some(source))
    }

    /// Fetch the first token in the background, before the first request needs it (the
    /// server calls this when it starts serving a routing table; `check` builds one without).
    pub fn warm_up(self: &Arc<Self>) {
        // Without a runtime to fetch on, the first request fetches it.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let source = self.clone();
        runtime.spawn(async move {
            let _ = source.wait().await;
        });
    }

    /// The token to send now, if there is a valid one (starting a refresh when it is due).
    pub fn bearer(self: &Arc<Self>) -> Bearer {
        let now = Instant::now();
        if let Some(token) = &*self.current.load() {
            if now < token.expires_at {
                if now >= token.refresh_at && !self.refreshing.swap(true, Ordering::AcqRel) {
                    let source = self.clone();
                    tokio::spawn(async move {
                        let _ = source.refresh().await;
                        source.refreshing.store(false, Ordering::Release);
                    });
                }
                return Bearer::Ready(token.header.clone());
            }
        }
        Bearer::Fetch(self.clone())
    }

    /// A valid token, fetching one if need be (one fetch for all who wait); the error of a
    /// fetch that failed in the last few seconds without fetching again.
    pub async fn wait(&self) -> Result<HeaderValue, String> {
        let _turn = self.fetch.lock().await;
        let now = Instant::now();
        if let Some(token) = &*self.current.load() {
            if now < token.expires_at {
                return Ok(token.header.clone());
            }
        }
        if let Some((at, why)) = &*self.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            if now < *at + FAILURE_HOLD {
                return Err(why.clone());
            }
        }
        self.refresh_locked().await
    }

    /// Fetch a new token in the background (the current one is still valid).
    async fn refresh(&self) -> Result<HeaderValue, String> {
        let _turn = self.fetch.lock().await;
        if let Some(token) = &*self.current.load() {
            if Instant::now() < token.refresh_at {
                // Another fetch got there first.
                return Ok(token.header.clone());
            }
        }
        self.refresh_locked().await
    }

    /// Fetch a token and keep it, or keep the failure. Called holding `fetch`.
    async fn refresh_locked(&self) -> Result<HeaderValue, String> {
        let started = Instant::now();
        match self.exchange().await {
            Ok((token, lifetime)) => {
                let header = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| "the token endpoint sent a token that is not a header value");
                let mut header = match header {
                    Ok(h) => h,
                    Err(why) => return Err(self.failure(why.to_owned())),
                };
                header.set_sensitive(true);
                let ahead = REFRESH_AHEAD.min(lifetime / 2);
                let margin = EXPIRY_MARGIN.min(lifetime / 4);
                self.current.store(Some(Arc::new(Token {
                    header: header.clone(),
                    refresh_at: started + lifetime - ahead,
                    expires_at: started + lifetime - margin,
                })));
                *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(header)
            }
            Err(why) => Err(self.failure(why)),
        }
    }

    fn failure(&self, why: String) -> String {
        tracing::warn!(error = %why, "vertex: no access token");
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), why.clone()));
        why
    }

    /// One exchange at the token endpoint: the token and how long it lives.
    async fn exchange(&self) -> Result<(String, Duration), String> {
        let (uri, form): (&str, Vec<(&str, String)>) = match &self.credentials {
            GoogleCredentials::AccessToken(_) => {
                return Err("a given token is not exchanged".into())
            }
            GoogleCredentials::ServiceAccount { token_uri, .. } => (
                token_uri,
                vec![
                    ("grant_type", JWT_GRANT.to_owned()),
                    ("assertion", self.assertion(SystemTime::now())?),
                ],
            ),
            GoogleCredentials::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => (
                token_uri,
                vec![
                    ("grant_type", "refresh_token".to_owned()),
                    ("client_id", client_id.clone()),
                    ("client_secret", client_secret.clone()),
                    ("refresh_token", refresh_token.clone()),
                ],
            ),
        };
        let mut body = String::new();
        for (i, (key, value)) in form.iter().enumerate() {
            if i > 0 {
                body.push('&');
            }
            body.push_str(key);
            body.push('=');
            body.push_str(&form_escape(value));
        }
        let mut resp = self
            .client
            .post(uri)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| {
                let what = if e.is_timeout() {
                    "no answer in time".to_owned()
                } else {
                    e.without_url().to_string()
                };
                format!("cannot reach the token endpoint: {what}")
            })?;
        let status = resp.status();
        let mut answer = Vec::new();
        while let Ok(Some(chunk)) = resp.chunk().await {
            if answer.len() + chunk.len() > MAX_ANSWER {
                return Err("the token endpoint's answer is too large".into());
            }
            answer.extend_from_slice(&chunk);
        }
        #[derive(Deserialize)]
        struct Answer {
            access_token: Option<String>,
            expires_in: Option<u64>,
            error: Option<String>,
            error_description: Option<String>,
        }
        let parsed = serde_json::from_slice::<Answer>(&answer).ok();
        match parsed {
            Some(Answer {
                access_token: Some(token),
                expires_in,
                ..
            }) if status.is_success() && !token.is_empty() => {
                let lifetime = Duration::from_secs(expires_in.unwrap_or(3600).clamp(10, 86_400));
                Ok((token, lifetime))
            }
            Some(Answer {
                error: Some(error),
                error_description,
                ..
            }) => {
                let mut why = format!("the token endpoint answered {}: {error}", status.as_u16());
                if let Some(d) = error_description {
                    why.push_str(" (");
                    why.extend(d.chars().take(200));
                    why.push(')');
                }
                Err(why)
            }
            _ => Err(format!(
                "the token endpoint answered {} without a token",
                status.as_u16()
            )),
        }
    }

    /// The signed JWT a service account asks for a token with, issued at `now`.
    fn assertion(&self, now: SystemTime) -> Result<String, String> {
        let (
            GoogleCredentials::ServiceAccount {
                client_email,
                key_id,
                token_uri,
                ..
            },
            Some(key),
        ) = (&self.credentials, &self.key)
        else {
            return Err("not a service account".into());
        };
        let iat = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = key_id {
            header["kid"] = kid.clone().into();
        }
        let claims = serde_json::json!({
            "iss": client_email,
            "scope": SCOPE,
            "aud": token_uri,
            "iat": iat,
            "exp": iat + 3600,
        });
        let mut jwt = URL_SAFE_NO_PAD.encode(header.to_string());
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; key.public().modulus_len()];
        key.sign(
            &RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            jwt.as_bytes(),
            &mut signature,
        )
        .map_err(|_| "cannot sign the token request with the service account's key")?;
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(signature));
        Ok(jwt)
    }
}

#[cfg(test)]
impl TokenSource {
    pub(crate) fn assertion_for_test(&self) -> String {
        self.assertion(SystemTime::now()).unwrap_or_default()
    }
}

/// `application/x-www-form-urlencoded` escaping of one value.
fn form_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_escaped() {
        assert_eq!(form_escape("a b+c/d=e&f"), "a+b%2Bc%2Fd%3De%26f");
        assert_eq!(
            form_escape(JWT_GRANT),
            "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"
        );
    }
}

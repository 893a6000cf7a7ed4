//! Upstream providers: one [`Provider`] per `[[providers]]` entry, holding its pooled HTTP
//! client and credentials, and the per-kind translation of a target into a URL and auth header.
//!
//! The provider files hold translation only; the failover loop lives in `routing`.

mod anthropic;
mod azure;
pub mod bedrock;
mod client;
mod fields;
mod gemini;
mod h1;
mod openai;
pub mod vertex;

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Request, Uri};

use crate::config::{ProviderConfig, ProviderKind, TargetConfig};

pub use self::client::{
    build_client, enter_worker, read_all, read_at_most, stream, Answer, Body, BoxError, ByteStream,
    Dial, HttpClient, SendError,
};
/// Fuzzing: the HTTP/1.1 client reading an upstream's answer (`fuzz/fuzz_targets/h1_response.rs`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub use self::h1::fuzz_response as fuzz_h1_response;

/// A configured upstream API account with its connection pool.
#[derive(Debug)]
pub struct Provider {
    pub config: Arc<ProviderConfig>,
    /// The pooled client, with the headers every call carries unless the call has its own:
    /// `content-type`, `user-agent`, `host`, the credential (marked sensitive so it never
    /// shows in debug output) and the provider's fixed ones (Anthropic's `anthropic-version`).
    pub client: HttpClient,
    /// `bedrock` with signing keys: every call is signed (SigV4) for this region.
    signer: Option<(aws_smithy_runtime_api::client::identity::Identity, String)>,
    /// `vertex` with a service account or a user's credentials: the access tokens.
    tokens: Option<Arc<vertex::auth::TokenSource>>,
}

/// The credential a call carries besides the provider's fixed ones.
pub enum Credential {
    /// Nothing more (a static key, a signature made with the request).
    Fixed,
    Bearer(vertex::auth::Bearer),
}

/// Errors building a provider from its config.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider {provider}: {message}")]
    Invalid { provider: String, message: String },
}

impl Provider {
    /// Build the client and credential header for one provider.
    pub fn new(config: Arc<ProviderConfig>) -> Result<Provider, ProviderError> {
        let invalid = |message: String| ProviderError::Invalid {
            provider: config.name.clone(),
            message,
        };
        let client = build_client(&config);
        let auth = match &config.api_key {
            None => None,
            Some(key) => {
                let (name, value) = match config.kind {
                    ProviderKind::Azure => azure::auth_header(key),
                    ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
                        openai::auth_header(key)
                    }
                    ProviderKind::Anthropic => anthropic::auth_header(key),
                    ProviderKind::Gemini => gemini::auth_header(key),
                    // A Bedrock API key.
                    ProviderKind::Bedrock => openai::auth_header(key),
                    // Refused by the config's validation.
                    ProviderKind::Vertex => {
                        return Err(invalid("api_key is not for vertex".into()))
                    }
                };
                let mut value = HeaderValue::from_str(&value).map_err(|_| {
                    invalid("api_key contains characters not allowed in a header".into())
                })?;
                value.set_sensitive(true);
                Some((name, value))
            }
        };
        let fixed = match config.kind {
            ProviderKind::Anthropic => anthropic::fixed_headers(),
            _ => Vec::new(),
        };
        let mut tokens = None;
        let mut auth = auth;
        if let Some(v) = &config.vertex {
            match &v.credentials {
                crate::config::GoogleCredentials::AccessToken(token) => {
                    let (name, value) = openai::auth_header(token);
                    let mut value = HeaderValue::from_str(&value).map_err(|_| {
                        invalid("access_token contains characters not allowed in a header".into())
                    })?;
                    value.set_sensitive(true);
                    auth = Some((name, value));
                }
                credentials => {
                    tokens = vertex::auth::TokenSource::new(credentials, config.connect_timeout)
                        .map_err(invalid)?;
                }
            }
        }
        let signer = (config.aws.as_ref()).and_then(|aws| {
            let keys = aws.keys.as_ref()?;
            Some((bedrock::identity(keys), aws.region.clone()))
        });
        let mut defaults = vec![
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::USER_AGENT, HeaderValue::from_static(USER_AGENT)),
        ];
        defaults.extend(host_header(&config.base_url).map(|host| (header::HOST, host)));
        defaults.extend(auth.filter(|_| signer.is_none()));
        defaults.extend(fixed);
        Ok(Provider {
            config,
            client: client.with_defaults(defaults),
            signer,
            tokens,
        })
    }

    /// The chat URL for one target of this provider; `stream` matters where the provider has
    /// a separate streaming endpoint (Gemini).
    pub fn chat_url(&self, target: &TargetConfig, stream: bool) -> Result<Uri, ProviderError> {
        let url = match self.config.kind {
            ProviderKind::Azure => azure::chat_url(&self.config, &target.model),
            ProviderKind::Anthropic => anthropic::chat_url(&self.config),
            ProviderKind::Gemini => gemini::chat_url(&self.config, &target.model, stream),
            ProviderKind::Bedrock => bedrock::chat_url(&self.config, &target.model, stream),
            ProviderKind::Vertex => vertex::chat_url(&self.config, &target.model, stream),
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => openai::chat_url(&self.config),
        };
        self.checked_uri(url)
    }

    /// The Responses API URL of this provider, when it serves one natively (`responses`).
    pub fn responses_url(&self) -> Result<Option<Uri>, ProviderError> {
        if !self.config.responses {
            return Ok(None);
        }
        let url = match self.config.kind {
            ProviderKind::Azure => azure::responses_url(&self.config),
            ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
                openai::responses_url(&self.config)
            }
            ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Bedrock
            | ProviderKind::Vertex => return Ok(None),
        };
        self.checked_uri(url).map(Some)
    }

    fn checked_uri(&self, url: String) -> Result<Uri, ProviderError> {
        let invalid = |why: String| ProviderError::Invalid {
            provider: self.config.name.clone(),
            message: format!("bad URL {url}: {why}"),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
        match uri.scheme_str() {
            Some("http" | "https") if uri.host().is_some() => Ok(uri),
            _ => Err(invalid("it must be http:// or https:// with a host".into())),
        }
    }

    /// Whether a same-dialect client's query (`?beta=true`) is sent on: not to the clouds,
    /// whose URLs are their own.
    pub fn takes_client_query(&self) -> bool {
        !matches!(
            self.config.kind,
            ProviderKind::Bedrock | ProviderKind::Vertex
        )
    }

    /// Start fetching what calls will need (a `vertex` provider's first access token), in
    /// the background.
    pub fn warm_up(&self) {
        if let Some(tokens) = &self.tokens {
            tokens.warm_up();
        }
    }

    /// The credential a call to this provider needs fetched: a `vertex` provider's access
    /// token (ready, or to wait for).
    pub fn credential(&self) -> Credential {
        match &self.tokens {
            Some(tokens) => Credential::Bearer(tokens.bearer()),
            None => Credential::Fixed,
        }
    }

    /// A POST of a JSON body for `model` to `uri` with this provider's credentials (`bearer`:
    /// a `vertex` provider's token), and `client`'s protocol headers (they replace the
    /// provider's defaults, `anthropic-version`). For `bedrock` the body is made Bedrock's
    /// (`bedrock::body`: the client's `anthropic-beta` goes into it) and the call is signed,
    /// last; for `vertex` the body is made Vertex's (`vertex::body`). The error is a signature
    /// that could not be made.
    pub fn post(
        &self,
        uri: &Uri,
        model: &str,
        body: Vec<u8>,
        client: &[(HeaderName, HeaderValue)],
        bearer: Option<HeaderValue>,
    ) -> Result<Request<Bytes>, String> {
        let bedrock = self.config.kind == ProviderKind::Bedrock;
        let body = match self.config.kind {
            ProviderKind::Bedrock => {
                let betas = client
                    .iter()
                    .find(|(name, _)| name.as_str() == "anthropic-beta")
                    .and_then(|(_, v)| v.to_str().ok());
                bedrock::body(&body, betas)
            }
            ProviderKind::Vertex => vertex::body(vertex::Publisher::of(model), body),
            _ => body,
        };
        let body = Bytes::from(body);
        let mut req = Request::new(body.clone());
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri.clone();
        // The client's defaults go with every call that has no header of their name: only
        // what differs per call is put here.
        let headers = req.headers_mut();
        if let Some(value) = bearer {
            headers.insert(header::AUTHORIZATION, value);
        }
        if !bedrock {
            for (name, value) in client {
                headers.append(name.clone(), value.clone());
            }
        }
        if let Some((identity, region)) = &self.signer {
            // Signed with the `host` and `content-type` sent.
            for (name, value) in self.client.defaults() {
                headers.insert(name.clone(), value.clone());
            }
            let now = std::time::SystemTime::now();
            let signed = bedrock::signature(identity, region, uri, headers, &body, now)
                .map_err(|e| format!("cannot sign the request: {e}"))?;
            for (name, value) in signed {
                headers.insert(name, value);
            }
        }
        Ok(req)
    }

    /// The events of a stream answer, as SSE bytes: `None` when the answer is not a stream of
    /// this provider's kind (an SSE `content-type`; Bedrock's event-stream, read into SSE).
    pub fn stream_of(&self, resp: Answer) -> Option<ByteStream> {
        let content_type = resp.content_type().unwrap_or_default();
        if self.config.kind == ProviderKind::Bedrock {
            return content_type
                .starts_with(bedrock::STREAM_CONTENT_TYPE.as_bytes())
                .then(|| bedrock::sse(stream(resp.into_body())));
        }
        content_type
            .starts_with(b"text/event-stream")
            .then(|| stream(resp.into_body()))
    }

    /// An error answer for `model` as the dialect's error parser reads it: Bedrock's is
    /// rewritten into Anthropic's envelope (and status), Vertex's own into its model's dialect
    /// (`vertex::error_answer`); the others are as they came.
    pub fn error_answer(
        &self,
        model: &str,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        body: Bytes,
    ) -> (http::StatusCode, Bytes) {
        match self.config.kind {
            ProviderKind::Bedrock => {
                let (status, body) = bedrock::anthropic_error(status, headers, &body);
                (status, Bytes::from(body))
            }
            ProviderKind::Vertex => {
                match vertex::error_answer(vertex::Publisher::of(model), status, &body) {
                    Some((status, body)) => (status, Bytes::from(body)),
                    None => (status, body),
                }
            }
            _ => (status, body),
        }
    }
}

/// The `Host` header for a base URL: the host, and the port unless it is the scheme's default.
fn host_header(base_url: &str) -> Option<HeaderValue> {
    let uri = base_url.parse::<Uri>().ok()?;
    let host = uri.host()?;
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let value = match uri.port_u16() {
        Some(port) if port != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::from_str(&value).ok()
}

const USER_AGENT: &str = concat!("switchyard/", env!("CARGO_PKG_VERSION"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_headers_keep_only_a_non_default_port() {
        let host = |url: &str| host_header(url).map(|v| v.to_str().unwrap_or("").to_owned());
        for (url, want) in [
            ("https://api.openai.com/v1", "api.openai.com"),
            ("https://x.example:443/v1", "x.example"),
            ("http://127.0.0.1:8080/v1", "127.0.0.1:8080"),
            ("http://llm.internal:80", "llm.internal"),
            ("https://llm.internal:80", "llm.internal:80"),
        ] {
            assert_eq!(host(url).as_deref(), Some(want), "{url}");
        }
        assert_eq!(host("not a url"), None);
    }
}

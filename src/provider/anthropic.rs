//! Anthropic: `{base_url}/v1/messages`, `x-api-key`, and the `anthropic-version` every call
//! names. The body is the Messages API's (see `canonical::anthropic`).

use http::{HeaderName, HeaderValue};

use crate::config::ProviderConfig;

/// The Messages API version we speak.
pub(super) const VERSION: &str = "2023-06-01";

pub(super) fn chat_url(config: &ProviderConfig) -> String {
    // The SDK's base URL has no `/v1`; accept one written with it too.
    let base = config.base_url.trim_end_matches("/v1");
    format!("{base}/v1/messages")
}

pub(super) fn auth_header(key: &str) -> (HeaderName, String) {
    (HeaderName::from_static("x-api-key"), key.to_owned())
}

pub(super) fn fixed_headers() -> Vec<(HeaderName, HeaderValue)> {
    vec![(
        HeaderName::from_static("anthropic-version"),
        HeaderValue::from_static(VERSION),
    )]
}

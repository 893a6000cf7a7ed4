//! OpenAI and OpenAI-compatible servers: `{base_url}/chat/completions`, bearer token.

use http::HeaderName;

use crate::config::ProviderConfig;

pub(super) fn chat_url(config: &ProviderConfig) -> String {
    format!("{}/chat/completions", config.base_url)
}

/// The Responses API: `{base_url}/responses`.
pub(super) fn responses_url(config: &ProviderConfig) -> String {
    format!("{}/responses", config.base_url)
}

pub(super) fn auth_header(key: &str) -> (HeaderName, String) {
    (http::header::AUTHORIZATION, format!("Bearer {key}"))
}

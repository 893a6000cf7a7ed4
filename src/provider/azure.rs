//! Azure OpenAI: the deployment is in the URL, the key in an `api-key` header, and every call
//! names an `api-version`. The body is the OpenAI one.

use http::HeaderName;

use crate::config::ProviderConfig;

pub(super) fn chat_url(config: &ProviderConfig, deployment: &str) -> String {
    format!(
        "{}/openai/deployments/{deployment}/chat/completions?api-version={}",
        config.base_url, config.api_version
    )
}

/// The Responses API of the resource, in Azure's v1 API (no `api-version`; the deployment is
/// the body's `model`).
pub(super) fn responses_url(config: &ProviderConfig) -> String {
    format!("{}/openai/v1/responses", config.base_url)
}

pub(super) fn auth_header(key: &str) -> (HeaderName, String) {
    (HeaderName::from_static("api-key"), key.to_owned())
}

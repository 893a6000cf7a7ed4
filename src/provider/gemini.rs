//! Gemini (Generative Language API): `{base_url}/v1beta/models/{model}:generateContent`, or
//! `:streamGenerateContent?alt=sse` for streams, with the key in `x-goog-api-key`.

use http::HeaderName;

use crate::config::ProviderConfig;

pub(super) fn chat_url(config: &ProviderConfig, model: &str, stream: bool) -> String {
    let base = config.base_url.trim_end_matches("/v1beta");
    if stream {
        format!("{base}/v1beta/models/{model}:streamGenerateContent?alt=sse")
    } else {
        format!("{base}/v1beta/models/{model}:generateContent")
    }
}

pub(super) fn auth_header(key: &str) -> (HeaderName, String) {
    (HeaderName::from_static("x-goog-api-key"), key.to_owned())
}

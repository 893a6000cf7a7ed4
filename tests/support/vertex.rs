//! The harness of the Vertex AI tests (`tests/vertex.rs`, `tests/vertex_credentials.rs`):
//! providers `ant`, `bedrock`, `gemini` and `vertex` on three mocks, the mock's test service
//! account as a credentials file, and the requests and readings both files use.

use serde_json::{json, Value};
use switchyard::mock::vertex::service_account_json;
use switchyard::mock::MockServer;

use super::{mocks, Gateway};

pub const CLAUDE: &str = "claude-sonnet-4-5@20250929";
pub const GEMINI: &str = "gemini-2.5-pro";

/// A credentials file, removed when dropped.
pub struct Credentials(pub std::path::PathBuf);

impl Credentials {
    /// The mock's test service account, asking `mock` for its tokens (`query`: the token
    /// URL's, e.g. `expires_in=20`).
    pub fn for_mock(mock: &MockServer, query: &str) -> Credentials {
        let uri = format!("{}/token{query}", mock.root_url());
        Credentials::write(&service_account_json(&uri))
    }

    pub fn write(text: &str) -> Credentials {
        let path = std::env::temp_dir().join(format!(
            "switchyard-vertex-{}-{}.json",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::write(&path, text).unwrap();
        Credentials(path)
    }
}

impl Drop for Credentials {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Providers `ant` (m[0]), `bedrock` (m[1]), `gemini` (m[0], the Gemini API) and `vertex`
/// (m[2], with `auth`), and route `chat` over `targets` (`provider/model`).
pub fn toml(m: &[MockServer], targets: &[&str], auth: &str) -> String {
    use switchyard::mock::sigv4::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
    let mut s = format!(
        "[audit]\nstore = \"off\"\n\n[[providers]]\nname = \"ant\"\nkind = \"anthropic\"\nbase_url = \"{root0}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\nregion = \"us-east-1\"\nbase_url = \"{root1}\"\naws_access_key_id = \"{ACCESS_KEY_ID}\"\naws_secret_access_key = \"{SECRET_ACCESS_KEY}\"\n\n\
         [[providers]]\nname = \"gemini\"\nkind = \"gemini\"\nbase_url = \"{root0}\"\napi_key = \"${{TEST_KEY}}\"\n\n\
         [[providers]]\nname = \"vertex\"\nkind = \"vertex\"\nlocation = \"us-east5\"\nbase_url = \"{root2}\"\n{auth}\n\n",
        root0 = m[0].root_url(),
        root1 = m[1].root_url(),
        root2 = m[2].root_url(),
    );
    s += "[[routes]]\nname = \"chat\"\ntargets = [\n";
    for t in targets {
        let (provider, model) = t.split_once('/').unwrap();
        s += &format!("  {{ provider = \"{provider}\", model = \"{model}\" }},\n");
    }
    s + "]\n[routes.hedge]\nenabled = false\n"
}

pub fn file_auth(creds: &Credentials) -> String {
    format!("credentials_file = \"{}\"", creds.0.display())
}

/// Three mocks, the test service account's credentials from the third, and a gateway whose
/// route `chat` is `targets`.
pub async fn vertex_gateway(targets: &[&str]) -> (Vec<MockServer>, Credentials, Gateway) {
    let m = mocks(3).await;
    let creds = Credentials::for_mock(&m[2], "");
    let gw = Gateway::start(&toml(&m, targets, &file_auth(&creds))).await;
    (m, creds, gw)
}

pub fn chat(stream: bool) -> Value {
    json!({
        "model": "chat",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say the canonical text."}
        ]
    })
}

/// [`super::anthropic_messages`] with a beta, as the Vertex tests send it.
pub async fn messages(gw: &Gateway, stream: bool) -> reqwest::Response {
    super::anthropic_messages(gw, stream, Some("interleaved-thinking-2025-05-14")).await
}

/// The text of an Anthropic SSE stream.
pub fn anthropic_text(text: &str) -> String {
    let mut answer = String::new();
    for ev in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = ev.lines().find_map(|l| l.strip_prefix("data: "));
        if let Some(t) = data
            .and_then(|d| serde_json::from_str::<Value>(d).ok())
            .and_then(|v| v["delta"]["text"].as_str().map(str::to_owned))
        {
            answer.push_str(&t);
        }
    }
    answer
}

/// The model calls a mock saw (its token requests aside).
pub fn model_calls(m: &MockServer) -> Vec<switchyard::mock::RecordedRequest> {
    m.requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v1/"))
        .collect()
}

pub fn token_calls(m: &MockServer) -> usize {
    m.requests()
        .iter()
        .filter(|r| r.path.starts_with("/token"))
        .count()
}

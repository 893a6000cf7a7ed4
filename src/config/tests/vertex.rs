//! `kind = "vertex"`: project, location and endpoint, credentials from a file (service account
//! or application-default user credentials), `GOOGLE_APPLICATION_CREDENTIALS` or a given
//! token, and each mistake at its key path.

use super::{error_at, errors, load, with_route};
use crate::config::{Config, GoogleCredentials, ProviderKind};

fn vertex(lines: &str) -> String {
    with_route(&format!(
        "[[providers]]\nname = \"vertex\"\nkind = \"vertex\"\n{lines}\n"
    ))
}

fn provider(config: &Config) -> &crate::config::ProviderConfig {
    config
        .providers
        .iter()
        .find(|p| p.name == "vertex")
        .map(|p| p.as_ref())
        .unwrap_or_else(|| panic!("no vertex provider"))
}

/// A credentials file in a temporary directory (kept until the test ends).
fn credentials_file(text: &str) -> (std::path::PathBuf, TempDir) {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "switchyard-vertex-config-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    )));
    std::fs::create_dir_all(&dir.0).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.0.join("credentials.json");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    (path, dir)
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_service_account_file_gives_the_project_and_the_regional_endpoint() {
    let json = crate::mock::vertex::service_account_json("https://oauth2.googleapis.com/token");
    let (path, _dir) = credentials_file(&json);
    let config = load(&vertex(&format!(
        "location = \"us-east5\"\ncredentials_file = \"{}\"",
        path.display()
    )));
    let p = provider(&config);
    assert_eq!(p.kind, ProviderKind::Vertex);
    assert_eq!(p.base_url, "https://us-east5-aiplatform.googleapis.com");
    let v = p.vertex.as_ref().unwrap_or_else(|| panic!("vertex"));
    assert_eq!(v.project, crate::mock::vertex::PROJECT);
    assert_eq!(v.location, "us-east5");
    assert!(matches!(
        &v.credentials,
        GoogleCredentials::ServiceAccount { client_email, .. }
            if client_email == crate::mock::vertex::SERVICE_ACCOUNT_EMAIL
    ));
    let shown = format!("{p:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    // The project in the file wins over the key's, and `global` has no regional host.
    let config = load(&vertex(&format!(
        "project = \"other-project\"\nlocation = \"global\"\ncredentials_file = \"{}\"",
        path.display()
    )));
    let p = provider(&config);
    assert_eq!(p.base_url, "https://aiplatform.googleapis.com");
    assert_eq!(
        p.vertex.as_ref().map(|v| v.project.as_str()),
        Some("other-project")
    );
}

#[test]
fn google_application_credentials_is_read_and_a_token_may_be_given() {
    let json = crate::mock::vertex::service_account_json("http://127.0.0.1:1/token");
    let (path, _dir) = credentials_file(&json);
    let text = vertex("location = \"europe-west1\"");
    let file = path.display().to_string();
    let env = |name: &str| match name {
        "GOOGLE_APPLICATION_CREDENTIALS" => Some(file.clone()),
        _ => super::env(name),
    };
    let config = Config::from_toml(&text, &env).unwrap_or_else(|e| panic!("{e}"));
    let v = provider(&config)
        .vertex
        .clone()
        .unwrap_or_else(|| panic!("vertex"));
    assert!(
        matches!(v.credentials, GoogleCredentials::ServiceAccount { token_uri, .. } if token_uri == "http://127.0.0.1:1/token")
    );
    // A ready token, with a base URL of one's own (a test's mock).
    let config = load(&vertex(
        "project = \"p-1\"\nlocation = \"us-central1\"\naccess_token = \"${OPENAI_API_KEY}\"\nbase_url = \"http://127.0.0.1:9400\"",
    ));
    let p = provider(&config);
    assert_eq!(p.base_url, "http://127.0.0.1:9400");
    let v = p.vertex.as_ref().unwrap_or_else(|| panic!("vertex"));
    assert_eq!(
        v.credentials,
        GoogleCredentials::AccessToken(super::OPENAI_KEY.into())
    );
    assert!(!format!("{p:?}").contains(super::OPENAI_KEY));
    // Nothing anywhere: an error at the key that would hold it.
    let e = errors(&text);
    error_at(&e, "providers[2].credentials_file", "needs credentials");
}

#[test]
fn mistakes_are_reported_at_their_key_paths() {
    let e = errors(&vertex("project = \"p\"\naccess_token = \"t\""));
    error_at(&e, "providers[2].location", "required");
    let e = errors(&vertex("location = \"us-east5\"\naccess_token = \"t\""));
    error_at(&e, "providers[2].project", "required");
    let e = errors(&vertex(
        "project = \"My Project\"\nlocation = \"US\"\naccess_token = \"t\"",
    ));
    error_at(&e, "providers[2].project", "not a Google Cloud project id");
    error_at(&e, "providers[2].location", "not a Google Cloud location");
    let e = errors(&vertex(
        "project = \"p\"\nlocation = \"us-east5\"\naccess_token = \"t\"\ncredentials_file = \"/x.json\"",
    ));
    error_at(&e, "providers[2].access_token", "not both");
    let e = errors(&vertex(
        "project = \"p\"\nlocation = \"us-east5\"\napi_key = \"k\"\naccess_token = \"t\"",
    ));
    error_at(&e, "providers[2].api_key", "not api_key");
    let e = errors(&vertex(
        "project = \"p\"\nlocation = \"us-east5\"\ncredentials_file = \"/no/such/credentials.json\"",
    ));
    error_at(
        &e,
        "providers[2].credentials_file",
        "cannot read the credentials file",
    );
    let (path, _dir) = credentials_file(
        r#"{"type":"service_account","client_email":"a@b","private_key":"secret-material"}"#,
    );
    let e = errors(&vertex(&format!(
        "project = \"p\"\nlocation = \"us-east5\"\ncredentials_file = \"{}\"",
        path.display()
    )));
    let err = error_at(
        &e,
        "providers[2].credentials_file",
        "not a PEM PKCS#8 RSA key",
    );
    assert!(!err.message.contains("secret-material"));
    // Keys of vertex on another kind.
    let e = errors(&with_route(
        "[[providers]]\nname = \"x\"\nkind = \"gemini\"\nbase_url = \"https://generativelanguage.googleapis.com\"\nproject = \"p\"\n",
    ));
    error_at(&e, "providers[2].project", "only for vertex");
}

//! `[[providers]]` of the second clouds: `bedrock`'s region and credentials, `vertex`'s
//! project, location and credentials.

use super::Ctx;
use crate::config::file::RawProvider;
use crate::config::{AwsConfig, AwsKeys, GoogleCredentials, ProviderKind, VertexConfig};

const KEYS_HINT: &str = "write aws_access_key_id = \"${AWS_ACCESS_KEY_ID}\" and aws_secret_access_key = \"${AWS_SECRET_ACCESS_KEY}\" (and aws_session_token for temporary credentials), or api_key = \"${AWS_BEARER_TOKEN_BEDROCK}\" for a Bedrock API key";

/// The default endpoint of a `bedrock` provider in `region`.
pub(super) fn bedrock_endpoint(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// `region` and the credentials of a `bedrock` provider; errors for keys that belong to it on
/// another kind. Without keys or an `api_key` in the file, the standard AWS variables are read
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; else
/// `AWS_BEARER_TOKEN_BEDROCK`, returned as the api key to use).
pub(super) fn aws(
    ctx: &mut Ctx<'_>,
    at: &str,
    p: &RawProvider,
    kind: Option<ProviderKind>,
    api_key: &mut Option<String>,
) -> Option<AwsConfig> {
    let fields = [
        ("region", p.region.is_some()),
        ("aws_access_key_id", p.aws_access_key_id.is_some()),
        ("aws_secret_access_key", p.aws_secret_access_key.is_some()),
        ("aws_session_token", p.aws_session_token.is_some()),
    ];
    if kind != Some(ProviderKind::Bedrock) {
        if kind.is_some() {
            for (key, set) in fields {
                if set {
                    ctx.error(
                        format!("{at}.{key}"),
                        format!("{key} is only for bedrock providers"),
                        "remove it, or set kind = \"bedrock\"",
                    );
                }
            }
        }
        return None;
    }
    let region = match &p.region {
        None => {
            ctx.error(
                format!("{at}.region"),
                "region is required for a bedrock provider",
                "write region = \"us-east-1\" (the region whose Bedrock endpoint is called and signed for)",
            );
            String::new()
        }
        Some(raw) => match ctx.text(&format!("{at}.region"), raw) {
            Some(r) if region_ok(&r) => r,
            Some(r) => {
                ctx.error(
                    format!("{at}.region"),
                    format!("`{r}` is not an AWS region name"),
                    "write it as AWS does, e.g. \"us-east-1\" or \"eu-central-1\"",
                );
                String::new()
            }
            None => String::new(),
        },
    };
    let secret = |ctx: &mut Ctx<'_>, key: &str, raw: &Option<String>| -> Option<String> {
        let path = format!("{at}.{key}");
        let value = ctx.text(&path, raw.as_ref()?)?;
        if value.is_empty() || http::HeaderValue::from_str(&value).is_err() {
            // Never echo the value: this is a secret.
            ctx.error(
                path,
                format!("{key} is empty or has a character not allowed in a header"),
                "set the environment variable to the value alone, without a trailing newline",
            );
            return None;
        }
        Some(value)
    };
    let id = secret(ctx, "aws_access_key_id", &p.aws_access_key_id);
    let key = secret(ctx, "aws_secret_access_key", &p.aws_secret_access_key);
    let token = secret(ctx, "aws_session_token", &p.aws_session_token);
    let in_file = p.aws_access_key_id.is_some() || p.aws_secret_access_key.is_some();
    if in_file && p.api_key.is_some() {
        ctx.error(
            format!("{at}.api_key"),
            "a bedrock provider takes signing keys or an api_key, not both",
            KEYS_HINT,
        );
    }
    let keys = match (id, key) {
        (Some(access_key_id), Some(secret_access_key)) => Some(AwsKeys {
            access_key_id,
            secret_access_key,
            session_token: token,
        }),
        _ if in_file => {
            let missing = if p.aws_access_key_id.is_none() {
                "aws_access_key_id"
            } else {
                "aws_secret_access_key"
            };
            if p.aws_access_key_id.is_none() || p.aws_secret_access_key.is_none() {
                ctx.error(
                    format!("{at}.{missing}"),
                    format!("{missing} is required with the other signing key"),
                    KEYS_HINT,
                );
            }
            None
        }
        _ if api_key.is_some() => None,
        _ => from_environment(ctx, at, api_key),
    };
    Some(AwsConfig { region, keys })
}

/// The standard AWS variables, when the file names no credentials.
fn from_environment(ctx: &mut Ctx<'_>, at: &str, api_key: &mut Option<String>) -> Option<AwsKeys> {
    let var = |ctx: &Ctx<'_>, name: &str| ctx.env(name).filter(|v| !v.is_empty());
    if let (Some(access_key_id), Some(secret_access_key)) = (
        var(ctx, "AWS_ACCESS_KEY_ID"),
        var(ctx, "AWS_SECRET_ACCESS_KEY"),
    ) {
        return Some(AwsKeys {
            access_key_id,
            secret_access_key,
            session_token: var(ctx, "AWS_SESSION_TOKEN"),
        });
    }
    if let Some(bearer) = var(ctx, "AWS_BEARER_TOKEN_BEDROCK") {
        *api_key = Some(bearer);
        return None;
    }
    ctx.error(
        format!("{at}.aws_access_key_id"),
        "a bedrock provider needs credentials: none in the file, and neither AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY nor AWS_BEARER_TOKEN_BEDROCK is set",
        KEYS_HINT,
    );
    None
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`: lowercase letters, digits and dashes.
fn region_ok(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 32
        && r.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !r.starts_with('-')
        && r.contains('-')
}

const VERTEX_CREDENTIALS_HINT: &str = "write credentials_file = \"${GOOGLE_APPLICATION_CREDENTIALS}\" (a service-account key or application-default credentials, JSON), or access_token = \"${VERTEX_ACCESS_TOKEN}\"";

/// The default endpoint of a `vertex` provider in `location`: `global` has no regional host.
pub(super) fn vertex_endpoint(location: &str) -> String {
    if location == "global" {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }
}

/// `project`, `location` and the credentials of a `vertex` provider (the file named by
/// `credentials_file` is read and checked here, so `check` finds a bad key); errors for keys
/// that belong to it on another kind. Without credentials in the file,
/// `GOOGLE_APPLICATION_CREDENTIALS` names the credentials file.
pub(super) fn vertex(
    ctx: &mut Ctx<'_>,
    at: &str,
    p: &RawProvider,
    kind: Option<ProviderKind>,
) -> Option<VertexConfig> {
    let fields = [
        ("project", p.project.is_some()),
        ("location", p.location.is_some()),
        ("credentials_file", p.credentials_file.is_some()),
        ("access_token", p.access_token.is_some()),
    ];
    if kind != Some(ProviderKind::Vertex) {
        if kind.is_some() {
            for (key, set) in fields {
                if set {
                    ctx.error(
                        format!("{at}.{key}"),
                        format!("{key} is only for vertex providers"),
                        "remove it, or set kind = \"vertex\"",
                    );
                }
            }
        }
        return None;
    }
    if p.api_key.is_some() {
        ctx.error(
            format!("{at}.api_key"),
            "a vertex provider takes credentials_file or access_token, not api_key",
            VERTEX_CREDENTIALS_HINT,
        );
    }
    let location = match &p.location {
        None => {
            ctx.error(
                format!("{at}.location"),
                "location is required for a vertex provider",
                "write location = \"us-east5\" (a region that serves the models), or \"global\"",
            );
            String::new()
        }
        Some(raw) => match ctx.text(&format!("{at}.location"), raw) {
            Some(l) if name_ok(&l) => l,
            Some(l) => {
                ctx.error(
                    format!("{at}.location"),
                    format!("`{l}` is not a Google Cloud location"),
                    "write it as Google Cloud does, e.g. \"us-east5\", \"europe-west1\" or \"global\"",
                );
                String::new()
            }
            None => String::new(),
        },
    };
    let (credentials, project_id) = google_credentials(ctx, at, p)?;
    let project = match (&p.project, project_id) {
        (Some(raw), _) => match ctx.text(&format!("{at}.project"), raw) {
            Some(id) if name_ok(&id) => id,
            Some(id) => {
                ctx.error(
                    format!("{at}.project"),
                    format!("`{id}` is not a Google Cloud project id"),
                    "write the project's id (lowercase letters, digits and dashes), not its name",
                );
                String::new()
            }
            None => String::new(),
        },
        (None, Some(id)) => id,
        (None, None) => {
            ctx.error(
                format!("{at}.project"),
                "project is required for a vertex provider (its credentials name none)",
                "write project = \"my-project\" (the id of the project whose Vertex AI is called)",
            );
            String::new()
        }
    };
    Some(VertexConfig {
        project,
        location,
        credentials,
    })
}

/// The credentials of a `vertex` provider, and the project its service-account key names.
fn google_credentials(
    ctx: &mut Ctx<'_>,
    at: &str,
    p: &RawProvider,
) -> Option<(GoogleCredentials, Option<String>)> {
    if p.credentials_file.is_some() && p.access_token.is_some() {
        ctx.error(
            format!("{at}.access_token"),
            "a vertex provider takes credentials_file or access_token, not both",
            VERTEX_CREDENTIALS_HINT,
        );
        return None;
    }
    if let Some(raw) = &p.access_token {
        let path = format!("{at}.access_token");
        let token = ctx.text(&path, raw)?;
        if token.is_empty() || http::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
            // Never echo the value: this is a secret.
            ctx.error(
                path,
                "access_token is empty or has a character not allowed in a header",
                "set the environment variable to the token alone, without a trailing newline",
            );
            return None;
        }
        return Some((GoogleCredentials::AccessToken(token), None));
    }
    let path = format!("{at}.credentials_file");
    let file = match &p.credentials_file {
        Some(raw) => ctx.text(&path, raw)?,
        None => match ctx
            .env("GOOGLE_APPLICATION_CREDENTIALS")
            .filter(|v| !v.is_empty())
        {
            Some(file) => file,
            None => {
                ctx.error(
                    path,
                    "a vertex provider needs credentials: none in the file, and GOOGLE_APPLICATION_CREDENTIALS is not set",
                    VERTEX_CREDENTIALS_HINT,
                );
                return None;
            }
        },
    };
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) => {
            ctx.error(
                path,
                format!("cannot read the credentials file {file}: {e}"),
                VERTEX_CREDENTIALS_HINT,
            );
            return None;
        }
    };
    match parse_google_credentials(&text) {
        Ok(found) => Some(found),
        Err(why) => {
            ctx.error(
                path,
                format!("the credentials file {file} {why}"),
                "download a service-account key (JSON) from the Cloud console, or run `gcloud auth application-default login`",
            );
            None
        }
    }
}

/// The credentials in a Google credentials file; the error says what is wrong, never a value.
pub(crate) fn parse_google_credentials(
    text: &str,
) -> Result<(GoogleCredentials, Option<String>), String> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(rename = "type")]
        kind: Option<String>,
        project_id: Option<String>,
        private_key_id: Option<String>,
        private_key: Option<String>,
        client_email: Option<String>,
        token_uri: Option<String>,
        client_id: Option<String>,
        client_secret: Option<String>,
        refresh_token: Option<String>,
        quota_project_id: Option<String>,
    }
    let f: File = serde_json::from_str(text).map_err(|e| {
        // The position only: serde's message could quote a secret.
        format!(
            "is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let need = |v: Option<String>, key: &str| -> Result<String, String> {
        v.filter(|s| !s.is_empty())
            .ok_or_else(|| format!("has no `{key}`"))
    };
    let token_uri = f
        .token_uri
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| GOOGLE_TOKEN_URI.to_owned());
    if !(token_uri.starts_with("https://") || token_uri.starts_with("http://")) {
        return Err("has a `token_uri` that is not an http(s) URL".into());
    }
    match f.kind.as_deref() {
        Some("service_account") => {
            let pem = need(f.private_key, "private_key")?;
            let private_key = pkcs8_of_pem(&pem)?;
            Ok((
                GoogleCredentials::ServiceAccount {
                    client_email: need(f.client_email, "client_email")?,
                    key_id: f.private_key_id.filter(|s| !s.is_empty()),
                    private_key,
                    token_uri,
                },
                f.project_id.filter(|s| !s.is_empty()),
            ))
        }
        Some("authorized_user") => Ok((
            GoogleCredentials::AuthorizedUser {
                client_id: need(f.client_id, "client_id")?,
                client_secret: need(f.client_secret, "client_secret")?,
                refresh_token: need(f.refresh_token, "refresh_token")?,
                token_uri,
            },
            f.quota_project_id.filter(|s| !s.is_empty()),
        )),
        Some(other) => Err(format!(
            "is of type `{other}`; a service_account or authorized_user file is needed"
        )),
        None => Err("has no `type` (service_account or authorized_user)".into()),
    }
}

/// Google's OAuth 2 token endpoint, for files that name none.
const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The DER of a PEM `PRIVATE KEY` (PKCS#8), checked to be an RSA key ring can sign with.
fn pkcs8_of_pem(pem: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let bad = || "has a `private_key` that is not a PEM PKCS#8 RSA key".to_owned();
    let start = pem.find(BEGIN).ok_or_else(bad)? + BEGIN.len();
    let len = pem[start..].find(END).ok_or_else(bad)?;
    let body: String = pem[start..start + len]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| bad())?;
    ring::signature::RsaKeyPair::from_pkcs8(&der).map_err(|_| bad())?;
    Ok(der)
}

/// A project id or location: lowercase letters, digits and dashes.
fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

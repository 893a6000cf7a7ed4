//! `[[providers]]` of the second clouds: `bedrock`'s region and credentials.

use super::Ctx;
use crate::config::file::RawProvider;
use crate::config::{AwsConfig, AwsKeys, ProviderKind};

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

//! `kind = "bedrock"`: its region and endpoint, credentials from the file or the standard AWS
//! variables, and each mistake at its key path.

use super::{error_at, errors, load, with_route};
use crate::config::{AwsKeys, Config, ProviderKind};

fn bedrock(lines: &str) -> String {
    with_route(&format!(
        "[[providers]]\nname = \"bedrock\"\nkind = \"bedrock\"\n{lines}\n"
    ))
}

fn provider(config: &Config) -> &crate::config::ProviderConfig {
    config
        .providers
        .iter()
        .find(|p| p.name == "bedrock")
        .map(|p| p.as_ref())
        .unwrap_or_else(|| panic!("no bedrock provider"))
}

#[test]
fn keys_in_the_file_sign_for_the_region_and_its_endpoint() {
    let config = load(&bedrock(
        "region = \"eu-central-1\"\naws_access_key_id = \"AKID\"\naws_secret_access_key = \"${OPENAI_API_KEY}\"\naws_session_token = \"tok\"",
    ));
    let p = provider(&config);
    assert_eq!(p.kind, ProviderKind::Bedrock);
    assert_eq!(
        p.base_url,
        "https://bedrock-runtime.eu-central-1.amazonaws.com"
    );
    let aws = p.aws.as_ref().unwrap_or_else(|| panic!("aws"));
    assert_eq!(aws.region, "eu-central-1");
    assert_eq!(
        aws.keys,
        Some(AwsKeys {
            access_key_id: "AKID".into(),
            secret_access_key: super::OPENAI_KEY.into(),
            session_token: Some("tok".into()),
        })
    );
    assert!(p.api_key.is_none());
    let shown = format!("{p:?}");
    assert!(
        !shown.contains(super::OPENAI_KEY) && !shown.contains("tok\""),
        "{shown}"
    );
    // A Bedrock API key instead, and a base URL of one's own (a VPC endpoint).
    let config = load(&bedrock(
        "region = \"us-east-1\"\napi_key = \"${OPENAI_API_KEY}\"\nbase_url = \"https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com\"",
    ));
    let p = provider(&config);
    assert_eq!(p.aws.as_ref().and_then(|a| a.keys.as_ref()), None);
    assert_eq!(p.api_key.as_deref(), Some(super::OPENAI_KEY));
    assert!(p.base_url.starts_with("https://vpce-1."));
}

#[test]
fn without_credentials_in_the_file_the_aws_variables_are_read() {
    let text = bedrock("region = \"us-west-2\"");
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("AKIDENV".to_owned()),
        "AWS_SECRET_ACCESS_KEY" => Some("secret-env".to_owned()),
        "AWS_SESSION_TOKEN" => Some("token-env".to_owned()),
        _ => super::env(name),
    };
    let config = Config::from_toml(&text, &env).unwrap_or_else(|e| panic!("{e}"));
    let keys = provider(&config).aws.as_ref().and_then(|a| a.keys.clone());
    assert_eq!(
        keys.map(|k| (k.access_key_id, k.session_token)),
        Some(("AKIDENV".into(), Some("token-env".into())))
    );
    let bearer = |name: &str| match name {
        "AWS_BEARER_TOKEN_BEDROCK" => Some("bedrock-api-key".to_owned()),
        _ => super::env(name),
    };
    let config = Config::from_toml(&text, &bearer).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        provider(&config).api_key.as_deref(),
        Some("bedrock-api-key")
    );
    // Nothing anywhere: an error, at the key that would hold it.
    let e = errors(&text);
    error_at(&e, "providers[2].aws_access_key_id", "needs credentials");
}

#[test]
fn mistakes_are_reported_at_their_key_paths() {
    let e = errors(&bedrock(
        "aws_access_key_id = \"A\"\naws_secret_access_key = \"S\"",
    ));
    error_at(&e, "providers[2].region", "required");
    let e = errors(&bedrock("region = \"US East\"\napi_key = \"k\""));
    error_at(&e, "providers[2].region", "not an AWS region");
    let e = errors(&bedrock(
        "region = \"us-east-1\"\naws_access_key_id = \"A\"",
    ));
    error_at(
        &e,
        "providers[2].aws_secret_access_key",
        "required with the other",
    );
    let e = errors(&bedrock(
        "region = \"us-east-1\"\naws_access_key_id = \"A\"\naws_secret_access_key = \"S\"\napi_key = \"k\"",
    ));
    error_at(&e, "providers[2].api_key", "not both");
    let e = errors(&bedrock(
        "region = \"us-east-1\"\napi_key = \"k\"\nresponses = true",
    ));
    error_at(&e, "providers[2].responses", "Responses API");
    // Keys of bedrock on another kind.
    let e = errors(&with_route(
        "[[providers]]\nname = \"x\"\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com\"\nregion = \"us-east-1\"\n",
    ));
    error_at(&e, "providers[2].region", "only for bedrock");
}

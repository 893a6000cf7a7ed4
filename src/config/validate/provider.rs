//! `[[providers]]`: names, kinds, base URLs, secrets and timeouts.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::Ctx;
use crate::config::file::RawProvider;
use crate::config::{ProviderConfig, ProviderKind};

const DEFAULT_API_VERSION: &str = "2024-10-21";
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const KINDS: &[ProviderKind] = &[
    ProviderKind::OpenAi,
    ProviderKind::Azure,
    ProviderKind::Anthropic,
    ProviderKind::Gemini,
    ProviderKind::OpenAiCompatible,
    ProviderKind::Bedrock,
    ProviderKind::Vertex,
];
const KIND_HINT: &str =
    "kind is one of openai, azure, anthropic, gemini, openai-compatible, bedrock, vertex";

/// The providers in file order, and those targets may refer to by name.
pub(super) struct Providers {
    /// Every provider, placeholders included (the config is discarded if any had errors).
    pub list: Vec<Arc<ProviderConfig>>,
    /// By name, for providers whose name and kind are valid: targets check kind-specific rules.
    pub by_name: HashMap<String, Arc<ProviderConfig>>,
    /// Names that exist but whose kind is invalid: targets naming them skip kind checks.
    pub kind_unknown: Vec<String>,
}

impl Providers {
    /// Valid names in file order, for hints.
    pub(super) fn names(&self) -> Vec<&str> {
        self.list
            .iter()
            .map(|p| p.name.as_str())
            .filter(|n| self.by_name.contains_key(*n))
            .collect()
    }
}

/// Validate every provider.
pub(super) fn providers(ctx: &mut Ctx<'_>, raw: &[RawProvider]) -> Providers {
    let mut out = Providers {
        list: Vec::with_capacity(raw.len()),
        by_name: HashMap::new(),
        kind_unknown: Vec::new(),
    };
    if raw.is_empty() {
        ctx.error(
            "providers",
            "no providers are defined",
            "add a [[providers]] table with name, kind and base_url",
        );
    }
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    for (i, p) in raw.iter().enumerate() {
        let at = format!("providers[{i}]");
        let mut name = provider_name(ctx, &at, p);
        if let Some(n) = &name {
            if let Some(first) = first_seen.get(n) {
                ctx.error(
                    format!("{at}.name"),
                    format!("duplicate provider name `{n}`"),
                    format!(
                        "provider names are unique; `{n}` is first defined at providers[{first}]"
                    ),
                );
                name = None;
            } else {
                first_seen.insert(n.clone(), i);
            }
        }
        let kind = provider_kind(ctx, &at, p);
        let responses = responses(ctx, &at, p, kind);
        let mut api_key = api_key(ctx, &at, p);
        let aws = super::cloud::aws(ctx, &at, p, kind, &mut api_key);
        let vertex = super::cloud::vertex(ctx, &at, p, kind);
        if vertex.is_some() {
            // Refused there (a vertex provider's credentials are its own).
            api_key = None;
        }
        let base_url = match (&aws, &vertex, &p.base_url) {
            // The region's endpoint, unless overridden (a VPC endpoint, a test's mock).
            (Some(aws), _, None) => super::cloud::bedrock_endpoint(&aws.region),
            (_, Some(v), None) => super::cloud::vertex_endpoint(&v.location),
            _ => base_url(ctx, &at, p).unwrap_or_default(),
        };
        let config = Arc::new(ProviderConfig {
            name: name.clone().unwrap_or_default(),
            kind: kind.unwrap_or(ProviderKind::OpenAi),
            base_url,
            api_key,
            aws,
            vertex,
            api_version: api_version(ctx, &at, p),
            connect_timeout: p
                .connect_timeout
                .as_ref()
                .and_then(|t| ctx.duration(&format!("{at}.connect_timeout"), &t.0, true))
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            responses,
        });
        match (name, kind) {
            (Some(n), Some(_)) => {
                out.by_name.insert(n, Arc::clone(&config));
            }
            (Some(n), None) => out.kind_unknown.push(n),
            (None, _) => {}
        }
        out.list.push(config);
    }
    out
}

fn provider_name(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider) -> Option<String> {
    let path = format!("{at}.name");
    let Some(raw) = &p.name else {
        ctx.error(
            path,
            "name is required",
            "give each provider a unique name, e.g. name = \"openai\"",
        );
        return None;
    };
    let name = ctx.text(&path, raw)?;
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(valid) {
        ctx.error(
            path,
            format!("invalid provider name `{name}`"),
            "use letters, digits, '.', '_' and '-' (the name is the first half of target ids)",
        );
        return None;
    }
    Some(name)
}

fn provider_kind(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider) -> Option<ProviderKind> {
    let path = format!("{at}.kind");
    let Some(raw) = &p.kind else {
        ctx.error(path, "kind is required", KIND_HINT);
        return None;
    };
    let kind = ctx.text(&path, raw)?;
    let found = KINDS.iter().copied().find(|k| k.as_str() == kind);
    if found.is_none() {
        ctx.error(path, format!("unknown provider kind `{kind}`"), KIND_HINT);
    }
    found
}

fn base_url(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider) -> Option<String> {
    let path = format!("{at}.base_url");
    let hint = "the URL the provider's own SDK takes, e.g. \"https://api.openai.com/v1\"";
    let Some(raw) = &p.base_url else {
        ctx.error(path, "base_url is required", hint);
        return None;
    };
    let url = ctx.text(&path, raw)?;
    let scheme = ["https://", "http://"]
        .into_iter()
        .find(|s| url.starts_with(s));
    let Some(scheme) = scheme else {
        ctx.error(
            path,
            format!("`{url}` must start with http:// or https://"),
            hint,
        );
        return None;
    };
    let rest = url[scheme.len()..].trim_end_matches('/');
    if rest.is_empty() || rest.starts_with('/') || rest.contains(char::is_whitespace) {
        ctx.error(path, format!("`{url}` is not a valid URL"), hint);
        return None;
    }
    Some(format!("{scheme}{rest}"))
}

fn api_key(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider) -> Option<String> {
    let path = format!("{at}.api_key");
    let key = ctx.text(&path, p.api_key.as_ref()?)?;
    if key.is_empty() {
        // Never echo the value: this is a secret.
        ctx.error(
            path,
            "api_key is empty",
            "set the environment variable to the key, or remove api_key for a provider that needs none",
        );
        return None;
    }
    if http::HeaderValue::from_str(&key).is_err() {
        // The key is sent in a header (`provider::Provider::new` refuses to build one that
        // cannot be): a control character, usually a newline from a file read into the
        // variable. Refused here so `check` says so, at its path. Never echo the value.
        ctx.error(
            path,
            "api_key contains a character not allowed in an HTTP header (a control character such as a newline)",
            "set the environment variable to the key alone, without a trailing newline",
        );
        return None;
    }
    Some(key)
}

/// `responses`: whether Responses API requests use the provider's own endpoint.
fn responses(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider, kind: Option<ProviderKind>) -> bool {
    let native = match kind {
        Some(ProviderKind::OpenAi | ProviderKind::Azure) => true,
        Some(ProviderKind::OpenAiCompatible) => false,
        Some(
            ProviderKind::Anthropic
            | ProviderKind::Gemini
            | ProviderKind::Bedrock
            | ProviderKind::Vertex,
        )
        | None => {
            if p.responses.is_some() && kind.is_some() {
                ctx.error(
                    format!("{at}.responses"),
                    "only openai, azure and openai-compatible providers have a Responses API",
                    "remove it: Responses API requests are translated for this provider",
                );
            }
            return false;
        }
    };
    p.responses.unwrap_or(native)
}

fn api_version(ctx: &mut Ctx<'_>, at: &str, p: &RawProvider) -> String {
    let path = format!("{at}.api_version");
    match &p.api_version {
        None => DEFAULT_API_VERSION.to_owned(),
        Some(raw) => match ctx.text(&path, raw) {
            Some(v) if v.is_empty() => {
                ctx.error(path, "api_version is empty", "omit it to use 2024-10-21");
                DEFAULT_API_VERSION.to_owned()
            }
            Some(v) => v,
            None => DEFAULT_API_VERSION.to_owned(),
        },
    }
}

//! `[[routes]]`: names, strategy, targets (resolved against the providers) and policies.

use std::collections::HashMap;
use std::sync::Arc;

use super::policy::{self, Layer};
use super::provider::Providers;
use super::Ctx;
use crate::config::file::{RawDefaults, RawRoute, RawTarget};
use crate::config::{ProviderKind, RouteConfig, Strategy, TargetConfig};

/// Targets already built, by id and context window: the same model at the same provider is one
/// shared `Arc` across routes (breakers and SLIs are per target id).
type TargetCache = HashMap<(String, Option<u32>, bool), Arc<TargetConfig>>;

/// Validate every route. `[defaults]` is also checked on its own, so its errors are reported
/// (once, at `defaults.*` paths) even where every route overrides them.
pub(super) fn routes(
    ctx: &mut Ctx<'_>,
    raw: &[RawRoute],
    defaults: Option<&RawDefaults>,
    providers: &Providers,
) -> Vec<Arc<RouteConfig>> {
    let defaults_layer = defaults.map(Layer::defaults);
    if let Some(layer) = &defaults_layer {
        policy::resolve(ctx, std::slice::from_ref(layer));
    }
    if raw.is_empty() {
        ctx.error(
            "routes",
            "no routes are defined",
            "add a [[routes]] table with a name and targets; clients send the name as `model`",
        );
    }
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    let mut cache = TargetCache::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = format!("routes[{i}]");
        let name = route_name(ctx, &at, r, i, &mut first_seen);
        let strategy = strategy(ctx, &at, r);
        let targets = targets(ctx, &at, r, providers, &mut cache);
        let mut layers = vec![Layer::route(&at, r)];
        layers.extend(defaults_layer.clone());
        let p = policy::resolve(ctx, &layers);
        out.push(Arc::new(RouteConfig {
            name: name.unwrap_or_default(),
            strategy,
            targets,
            failover: p.failover,
            breaker: p.breaker,
            hedge: p.hedge,
            retry_budget: p.retry_budget,
            context: p.context,
        }));
    }
    out
}

fn route_name(
    ctx: &mut Ctx<'_>,
    at: &str,
    r: &RawRoute,
    i: usize,
    first_seen: &mut HashMap<String, usize>,
) -> Option<String> {
    let path = format!("{at}.name");
    let Some(raw) = &r.name else {
        ctx.error(
            path,
            "name is required",
            "the route name is what clients send as `model`, e.g. name = \"gpt-4o\"",
        );
        return None;
    };
    let name = ctx.text(&path, raw)?;
    if name.trim().is_empty() {
        ctx.error(
            path,
            "route name is empty",
            "the route name is what clients send as `model`",
        );
        return None;
    }
    if let Some(first) = first_seen.get(&name) {
        ctx.error(
            path,
            format!("duplicate route name `{name}`"),
            format!("route names are unique; `{name}` is first defined at routes[{first}]"),
        );
        return None;
    }
    first_seen.insert(name.clone(), i);
    Some(name)
}

fn strategy(ctx: &mut Ctx<'_>, at: &str, r: &RawRoute) -> Strategy {
    let path = format!("{at}.strategy");
    if let Some(text) = r.strategy.as_ref().and_then(|s| ctx.text(&path, s)) {
        if text != "priority" {
            ctx.error(
                path,
                format!("unsupported strategy `{text}`"),
                "only priority is supported in this version",
            );
        }
    }
    Strategy::Priority
}

fn targets(
    ctx: &mut Ctx<'_>,
    at: &str,
    r: &RawRoute,
    providers: &Providers,
    cache: &mut TargetCache,
) -> Vec<Arc<TargetConfig>> {
    let raw = r.targets.as_deref().unwrap_or_default();
    if raw.is_empty() {
        ctx.error(
            format!("{at}.targets"),
            "a route needs at least one target",
            "add targets = [{ provider = \"openai\", model = \"gpt-4o\" }], in priority order",
        );
    }
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::with_capacity(raw.len());
    for (j, t) in raw.iter().enumerate() {
        let tat = format!("{at}.targets[{j}]");
        let Some(target) = target(ctx, &tat, t, providers, cache) else {
            continue;
        };
        if let Some(first) = first_seen.get(&target.id) {
            ctx.error(
                tat,
                format!("duplicate target `{}` in this route", target.id),
                format!(
                    "it is already {at}.targets[{first}]; to retry a target use failover.same_target_retries"
                ),
            );
            continue;
        }
        first_seen.insert(target.id.clone(), j);
        out.push(target);
    }
    out
}

/// Resolve one target against its provider; `None` when it has errors.
fn target(
    ctx: &mut Ctx<'_>,
    at: &str,
    t: &RawTarget,
    providers: &Providers,
    cache: &mut TargetCache,
) -> Option<Arc<TargetConfig>> {
    let provider_path = format!("{at}.provider");
    let model = t
        .model
        .as_ref()
        .and_then(|m| ctx.text(&format!("{at}.model"), m));
    let deployment = t
        .deployment
        .as_ref()
        .and_then(|d| ctx.text(&format!("{at}.deployment"), d));
    let window = context_window(ctx, at, t);
    let Some(raw_provider) = &t.provider else {
        ctx.error(
            provider_path,
            "provider is required",
            known_providers_hint(providers),
        );
        return None;
    };
    let name = ctx.text(&provider_path, raw_provider)?;
    let Some(provider) = providers.by_name.get(&name) else {
        if !providers.kind_unknown.contains(&name) {
            ctx.error(
                provider_path,
                format!("unknown provider `{name}`"),
                known_providers_hint(providers),
            );
        }
        return None;
    };
    let upstream = if provider.kind == ProviderKind::Azure {
        if t.model.is_some() {
            ctx.error(
                format!("{at}.model"),
                format!("`{name}` is an azure provider: `model` is not used"),
                "azure targets name a deployment: write deployment = \"<your deployment name>\"",
            );
            return None;
        }
        required(
            ctx,
            &format!("{at}.deployment"),
            t.deployment.is_some(),
            deployment,
            "deployment = \"<your deployment name>\"",
        )?
    } else {
        if t.deployment.is_some() {
            ctx.error(
                format!("{at}.deployment"),
                format!(
                    "`deployment` is only for azure providers; `{name}` is {}",
                    provider.kind.as_str()
                ),
                "name the upstream model instead: model = \"...\"",
            );
            return None;
        }
        required(
            ctx,
            &format!("{at}.model"),
            t.model.is_some(),
            model,
            "model = \"<upstream model name>\"",
        )?
    };
    let window = window?;
    let id = format!("{name}/{upstream}");
    // OpenAI's own API (and Azure's) answers a trailing assistant message anew rather than
    // continuing it: those targets restart and are checked against what the client has.
    let prefill = t.prefill.unwrap_or(!matches!(
        provider.kind,
        ProviderKind::OpenAi | ProviderKind::Azure
    ));
    let target = cache
        .entry((id.clone(), window, prefill))
        .or_insert_with(|| {
            Arc::new(TargetConfig {
                id,
                provider: Arc::clone(provider),
                model: upstream,
                context_window: window,
                prefill,
            })
        });
    Some(Arc::clone(target))
}

/// A required, non-empty model or deployment name. `present` is whether the key was written
/// (`value` is `None` also when its `${VAR}` failed, already reported).
fn required(
    ctx: &mut Ctx<'_>,
    path: &str,
    present: bool,
    value: Option<String>,
    example: &str,
) -> Option<String> {
    let key = path.rsplit('.').next().unwrap_or(path);
    match value {
        Some(v) if !v.trim().is_empty() => Some(v),
        Some(_) => {
            ctx.error(path, format!("{key} is empty"), format!("write {example}"));
            None
        }
        None if !present => {
            ctx.error(
                path,
                format!("{key} is required"),
                format!("write {example}"),
            );
            None
        }
        None => None,
    }
}

/// `Some(None)` when absent, `None` when invalid.
fn context_window(ctx: &mut Ctx<'_>, at: &str, t: &RawTarget) -> Option<Option<u32>> {
    match t.context_window {
        Some(0) => {
            ctx.error(
                format!("{at}.context_window"),
                "context_window must be greater than 0",
                "give the model's context size in tokens, or omit it when unknown",
            );
            None
        }
        window => Some(window),
    }
}

fn known_providers_hint(providers: &Providers) -> String {
    let names = providers.names();
    if names.is_empty() {
        "no valid providers are defined; add a [[providers]] table".to_owned()
    } else {
        format!("known providers: {}", names.join(", "))
    }
}

//! `[[routes]]`: names, strategy, targets (resolved against the providers) and policies.

use std::collections::HashMap;
use std::sync::Arc;

use super::policy::{self, Layer};
use super::provider::Providers;
use super::Ctx;
use crate::config::file::{RawAdaptive, RawDefaults, RawPrice, RawRoute, RawTarget};
use crate::config::{AdaptivePolicy, Affinity, ProviderKind, RouteConfig, Strategy, TargetConfig};

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
        let resolved = targets(ctx, &at, r, providers, &mut cache, strategy);
        if strategy != Strategy::Priority
            && !resolved.is_empty()
            && resolved.iter().all(|t| t.weight == 0.0)
        {
            ctx.error(
                format!("{at}.targets"),
                "every target has weight 0",
                "give at least one target a positive weight",
            );
        }
        let adaptive = adaptive(ctx, &at, r.adaptive.as_ref(), strategy, resolved.len());
        let weights = resolved.iter().map(|t| t.weight).collect();
        let prices = resolved.iter().map(|t| t.price).collect();
        let targets = resolved.into_iter().map(|t| t.config).collect();
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
            weights,
            prices,
            adaptive,
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
    let Some(text) = r.strategy.as_ref().and_then(|s| ctx.text(&path, s)) else {
        return Strategy::Priority;
    };
    let all = [Strategy::Priority, Strategy::Weighted, Strategy::Adaptive];
    match all.into_iter().find(|s| s.as_str() == text) {
        Some(s) => s,
        None => {
            ctx.error(
                path,
                format!("unknown strategy `{text}`"),
                "expected \"priority\" (targets in order), \"weighted\" (static weights) or \"adaptive\" (shares from live SLIs)",
            );
            Strategy::Priority
        }
    }
}

/// Shortest and longest `adaptive.interval`.
const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
const MAX_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);

/// `[routes.adaptive]`, which only a weighted or adaptive route reads.
fn adaptive(
    ctx: &mut Ctx<'_>,
    at: &str,
    raw: Option<&RawAdaptive>,
    strategy: Strategy,
    targets: usize,
) -> AdaptivePolicy {
    let mut p = AdaptivePolicy::default();
    let Some(raw) = raw else { return p };
    let at = format!("{at}.adaptive");
    if strategy == Strategy::Priority {
        ctx.error(
            &at,
            "only a weighted or adaptive route reads [routes.adaptive]",
            "set strategy = \"adaptive\" (or \"weighted\"), or remove this table",
        );
        return p;
    }
    if let Some(floor) = raw.floor {
        if !(0.0..=0.5).contains(&floor) {
            ctx.error(
                format!("{at}.floor"),
                format!("{floor} is out of range"),
                "a share from 0 to 0.5, e.g. 0.02 for 2%",
            );
        } else if floor * targets as f64 > 1.0 {
            ctx.error(
                format!("{at}.floor"),
                format!(
                    "a floor of {floor} for each of {targets} targets is more than all the traffic"
                ),
                format!("at most {:.3} for {targets} targets", 1.0 / targets as f64),
            );
        } else {
            p.floor = floor;
        }
    }
    if let Some(step) = raw.max_step {
        if step > 0.0 && step <= 1.0 {
            p.max_step = step;
        } else {
            ctx.error(
                format!("{at}.max_step"),
                format!("{step} is out of range"),
                "a share above 0 and at most 1, e.g. 0.20",
            );
        }
    }
    if let Some(text) = &raw.interval {
        let path = format!("{at}.interval");
        if let Some(d) = ctx.duration_within(&path, &text.0, true, MAX_INTERVAL) {
            if d < MIN_INTERVAL {
                ctx.error(path, "must be at least 100ms", "e.g. interval = \"5s\"");
            } else {
                p.interval = d;
            }
        }
    }
    if let Some(raw) = &raw.affinity {
        let path = format!("{at}.affinity");
        match ctx.text(&path, raw).as_deref() {
            Some("session") => p.affinity = Affinity::Session,
            Some("off") => p.affinity = Affinity::Off,
            Some(other) => ctx.error(
                path,
                format!("unknown value `{other}`"),
                "expected \"session\" (a conversation stays on one target) or \"off\"",
            ),
            None => {}
        }
    }
    p
}

/// A target as a route names it: the shared config, and what only this route says of it.
struct RouteTarget {
    config: Arc<TargetConfig>,
    weight: f64,
    price: Option<f64>,
}

/// Largest `weight`.
const MAX_WEIGHT: f64 = 1_000_000.0;

fn weight(ctx: &mut Ctx<'_>, at: &str, t: &RawTarget, strategy: Strategy) -> f64 {
    let Some(w) = t.weight else { return 1.0 };
    let path = format!("{at}.weight");
    if strategy == Strategy::Priority {
        ctx.error(
            path,
            "a priority route does not read weights",
            "set strategy = \"weighted\" or \"adaptive\" on the route, or remove the weight",
        );
        return 1.0;
    }
    if !(0.0..=MAX_WEIGHT).contains(&w) {
        ctx.error(
            path,
            format!("{w} is out of range"),
            "a weight from 0 to 1000000; only the ratios between a route's weights matter",
        );
        return 1.0;
    }
    w
}

/// The blended price (three input tokens to one output token) of `price`, per million tokens.
fn price(ctx: &mut Ctx<'_>, at: &str, raw: Option<&RawPrice>, strategy: Strategy) -> Option<f64> {
    let raw = raw?;
    let at = format!("{at}.price");
    if strategy != Strategy::Adaptive {
        ctx.error(
            &at,
            "only an adaptive route reads prices",
            "set strategy = \"adaptive\" on the route, or remove the price",
        );
        return None;
    }
    let mut side = |key: &str, v: Option<f64>| -> Option<f64> {
        let v = v?;
        if v.is_finite() && v >= 0.0 {
            Some(v)
        } else {
            ctx.error(
                format!("{at}.{key}"),
                format!("{v} is out of range"),
                "US dollars per million tokens, 0 or more",
            );
            None
        }
    };
    let input = side("input", raw.input);
    let output = side("output", raw.output);
    if input.is_none() && output.is_none() && raw.input.is_none() && raw.output.is_none() {
        ctx.error(
            &at,
            "a price needs input, output or both",
            "write price = { input = 2.5, output = 10.0 } (USD per million tokens)",
        );
    }
    // One side given: the blend is that price.
    match (input, output, raw.input.is_some(), raw.output.is_some()) {
        (Some(i), Some(o), _, _) => Some((3.0 * i + o) / 4.0),
        (Some(one), None, _, false) | (None, Some(one), false, _) => Some(one),
        _ => None,
    }
}

fn targets(
    ctx: &mut Ctx<'_>,
    at: &str,
    r: &RawRoute,
    providers: &Providers,
    cache: &mut TargetCache,
    strategy: Strategy,
) -> Vec<RouteTarget> {
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
        let weight = weight(ctx, &tat, t, strategy);
        let price = price(ctx, &tat, t.price.as_ref(), strategy);
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
        out.push(RouteTarget {
            config: target,
            weight,
            price,
        });
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

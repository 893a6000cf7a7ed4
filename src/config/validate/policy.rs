//! Route policies and the `[defaults]` merge: each key comes from the route's own section if it
//! sets it, else from `[defaults]`, else from the built-in default, and an error names the key
//! path where the bad value was written.

use super::pick::{at_least_one, dur, share, shown, word, Picked, Section};
use super::{Ctx, MAX_DURATION};
use crate::config::file::{
    RawBreaker, RawContext, RawDefaults, RawFailover, RawHedge, RawRetryBudget, RawRoute,
};
use crate::config::{
    format_duration, parse_duration, BreakerPolicy, BuiltinTools, ContextPolicy, FailoverPolicy,
    HedgeDelay, HedgePolicy, MidStream, OnOverflow, RetryBudgetPolicy,
};

/// One source of policy keys: a route's sections or `[defaults]`.
#[derive(Clone)]
pub(super) struct Layer<'r> {
    /// `routes[2]` or `defaults`.
    pub(super) prefix: String,
    pub(super) failover: Option<&'r RawFailover>,
    pub(super) breaker: Option<&'r RawBreaker>,
    pub(super) hedge: Option<&'r RawHedge>,
    pub(super) retry_budget: Option<&'r RawRetryBudget>,
    pub(super) context: Option<&'r RawContext>,
}

impl<'r> Layer<'r> {
    /// A route's own sections; `prefix` is its path, `routes[i]`.
    pub(super) fn route(prefix: &str, r: &'r RawRoute) -> Self {
        Layer {
            prefix: prefix.to_owned(),
            failover: r.failover.as_ref(),
            breaker: r.breaker.as_ref(),
            hedge: r.hedge.as_ref(),
            retry_budget: r.retry_budget.as_ref(),
            context: r.context.as_ref(),
        }
    }

    /// The `[defaults]` table.
    pub(super) fn defaults(d: &'r RawDefaults) -> Self {
        Layer {
            prefix: "defaults".to_owned(),
            failover: d.failover.as_ref(),
            breaker: d.breaker.as_ref(),
            hedge: d.hedge.as_ref(),
            retry_budget: d.retry_budget.as_ref(),
            context: d.context.as_ref(),
        }
    }
}

/// A route's resolved policies.
pub(super) struct Policies {
    pub failover: FailoverPolicy,
    pub breaker: BreakerPolicy,
    pub hedge: HedgePolicy,
    pub retry_budget: RetryBudgetPolicy,
    pub context: ContextPolicy,
}

/// Resolve the policies from `layers`, highest priority first (never empty).
pub(super) fn resolve(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> Policies {
    Policies {
        failover: failover(ctx, layers),
        breaker: breaker(ctx, layers),
        hedge: hedge(ctx, layers),
        retry_budget: retry_budget(ctx, layers),
        context: context(ctx, layers),
    }
}

fn failover(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> FailoverPolicy {
    let d = FailoverPolicy::default();
    let s = Section {
        layers,
        name: "failover",
        get: |l| l.failover,
    };
    let on_status = s.key("on_status", |f| f.on_status.as_ref());
    if let Some(list) = on_status.value {
        for (i, status) in list.iter().enumerate() {
            if !(400..=599).contains(status) {
                ctx.error(
                    format!("{}[{i}]", on_status.path),
                    format!("{status} is not an error status"),
                    "on_status lists HTTP error statuses, from 400 to 599",
                );
            }
        }
    }
    let max_attempts = s.key("max_attempts", |f| f.max_attempts.as_ref());
    let max_attempts = at_least_one(
        ctx,
        &max_attempts,
        d.max_attempts,
        "1 means a single attempt with no failover",
    );
    let retries = s.key("same_target_retries", |f| f.same_target_retries.as_ref());
    let retry_after_wait = s.key("retry_after_wait", |f| f.retry_after_wait.as_ref());
    let retry_after_wait = dur(ctx, &retry_after_wait, d.retry_after_wait, false);
    let mid_stream = s.key("mid_stream", |f| f.mid_stream.as_ref());
    let choices = [
        ("continue", MidStream::Continue),
        ("error", MidStream::Error),
    ];
    let mid_stream = word(ctx, &mid_stream, d.mid_stream, &choices);
    let builtin_tools = s.key("builtin_tools", |f| f.builtin_tools.as_ref());
    let choices = [
        ("native", BuiltinTools::Native),
        ("drop", BuiltinTools::Drop),
    ];
    let builtin_tools = word(ctx, &builtin_tools, d.builtin_tools, &choices);
    let attempt = s.key("attempt_timeout", |f| f.attempt_timeout.as_ref());
    let attempt_timeout = dur(ctx, &attempt, d.attempt_timeout, true);
    let first = s.key("first_token_timeout", |f| f.first_token_timeout.as_ref());
    let first_token_timeout = dur(ctx, &first, d.first_token_timeout, true);
    let idle = s.key("idle_timeout", |f| f.idle_timeout.as_ref());
    let idle_timeout = dur(ctx, &idle, d.idle_timeout, true);
    let request = s.key("request_timeout", |f| f.request_timeout.as_ref());
    let request_timeout = dur(ctx, &request, d.request_timeout, true);
    if let Some(r) = request_timeout {
        for (name, p, v) in [
            ("attempt_timeout", &attempt, attempt_timeout),
            ("first_token_timeout", &first, first_token_timeout),
        ] {
            if v.is_some_and(|v| v > r) && s.checks(p, &request) {
                ctx.error(
                    &p.path,
                    format!(
                        "{name} ({}) exceeds request_timeout ({})",
                        shown(p, v.unwrap_or_default()),
                        shown(&request, r)
                    ),
                    format!("an attempt cannot outlive its request: lower {name} or raise request_timeout"),
                );
            }
        }
    }
    FailoverPolicy {
        on_status: on_status.value.cloned().unwrap_or(d.on_status),
        max_attempts: max_attempts.unwrap_or(d.max_attempts),
        same_target_retries: retries.value.copied().unwrap_or(d.same_target_retries),
        retry_after_wait: retry_after_wait.unwrap_or(d.retry_after_wait),
        mid_stream: mid_stream.unwrap_or(d.mid_stream),
        builtin_tools: builtin_tools.unwrap_or(d.builtin_tools),
        attempt_timeout: attempt_timeout.unwrap_or(d.attempt_timeout),
        first_token_timeout: first_token_timeout.unwrap_or(d.first_token_timeout),
        idle_timeout: idle_timeout.unwrap_or(d.idle_timeout),
        request_timeout: request_timeout.unwrap_or(d.request_timeout),
    }
}

fn breaker(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> BreakerPolicy {
    let d = BreakerPolicy::default();
    let s = Section {
        layers,
        name: "breaker",
        get: |l| l.breaker,
    };
    let failure_rate = share(
        ctx,
        &s.key("failure_rate", |b| b.failure_rate.as_ref()),
        d.failure_rate,
        false,
    );
    let window = dur(ctx, &s.key("window", |b| b.window.as_ref()), d.window, true);
    let min_requests = s.key("min_requests", |b| b.min_requests.as_ref());
    let consecutive = s.key("consecutive_failures", |b| b.consecutive_failures.as_ref());
    let open_for_p = s.key("open_for", |b| b.open_for.as_ref());
    let open_for = dur(ctx, &open_for_p, d.open_for, true);
    let open_for_max_p = s.key("open_for_max", |b| b.open_for_max.as_ref());
    let open_for_max = dur(ctx, &open_for_max_p, d.open_for_max, true);
    if let (Some(min), Some(max)) = (open_for, open_for_max) {
        if max < min && s.checks(&open_for_max_p, &open_for_p) {
            ctx.error(
                &open_for_max_p.path,
                format!(
                    "open_for_max ({}) is shorter than open_for ({})",
                    shown(&open_for_max_p, max),
                    shown(&open_for_p, min)
                ),
                "the hold doubles from open_for up to open_for_max: raise open_for_max or lower open_for",
            );
        }
    }
    let probe = s.key("probe", |b| b.probe.as_ref());
    let probe_interval = dur(
        ctx,
        &s.key("probe_interval", |b| b.probe_interval.as_ref()),
        d.probe_interval,
        true,
    );
    let half_open_probes = at_least_one(
        ctx,
        &s.key("half_open_probes", |b| b.half_open_probes.as_ref()),
        d.half_open_probes,
        "the number of successful probes that closes the breaker",
    );
    let ramp = dur(ctx, &s.key("ramp", |b| b.ramp.as_ref()), d.ramp, false);
    let ramp_failure_rate = share(
        ctx,
        &s.key("ramp_failure_rate", |b| b.ramp_failure_rate.as_ref()),
        d.ramp_failure_rate,
        false,
    );
    BreakerPolicy {
        failure_rate: failure_rate.unwrap_or(d.failure_rate),
        window: window.unwrap_or(d.window),
        min_requests: min_requests.value.copied().unwrap_or(d.min_requests),
        consecutive_failures: consecutive.value.copied().unwrap_or(d.consecutive_failures),
        open_for: open_for.unwrap_or(d.open_for),
        open_for_max: open_for_max.unwrap_or(d.open_for_max),
        probe: probe.value.copied().unwrap_or(d.probe),
        probe_interval: probe_interval.unwrap_or(d.probe_interval),
        half_open_probes: half_open_probes.unwrap_or(d.half_open_probes),
        ramp: ramp.unwrap_or(d.ramp),
        ramp_failure_rate: ramp_failure_rate.unwrap_or(d.ramp_failure_rate),
    }
}

fn hedge(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> HedgePolicy {
    let d = HedgePolicy::default();
    let s = Section {
        layers,
        name: "hedge",
        get: |l| l.hedge,
    };
    let enabled = s.key("enabled", |h| h.enabled.as_ref());
    let delay = hedge_delay(ctx, &s.key("delay", |h| h.delay.as_ref()), d.delay);
    let max_parallel = at_least_one(
        ctx,
        &s.key("max_parallel", |h| h.max_parallel.as_ref()),
        d.max_parallel,
        "attempts in flight at once, the first included; use enabled = false to turn hedging off",
    );
    let budget = share(ctx, &s.key("budget", |h| h.budget.as_ref()), d.budget, true);
    HedgePolicy {
        enabled: enabled.value.copied().unwrap_or(d.enabled),
        delay: delay.unwrap_or(d.delay),
        max_parallel: max_parallel.unwrap_or(d.max_parallel),
        budget: budget.unwrap_or(d.budget),
    }
}

/// `"800ms"` or `"p95"` / `"p99.9"`.
fn hedge_delay(
    ctx: &mut Ctx<'_>,
    p: &Picked<'_, String>,
    default: HedgeDelay,
) -> Option<HedgeDelay> {
    const HINT: &str =
        "a duration like \"800ms\", or a latency percentile like \"p95\" or \"p99.9\"";
    let Some(raw) = p.value else {
        return Some(default);
    };
    let text = ctx.text(&p.path, raw)?;
    if let Some(pct) = text.strip_prefix('p') {
        let digits = !pct.is_empty() && pct.chars().all(|c| c.is_ascii_digit() || c == '.');
        return match pct.parse::<f64>() {
            Ok(x) if digits && x > 0.0 && x < 100.0 => Some(HedgeDelay::Percentile(x)),
            _ => {
                ctx.error(
                    &p.path,
                    format!("invalid percentile `{text}`"),
                    "a percentile is above p0 and below p100, like \"p95\" or \"p99.9\"",
                );
                None
            }
        };
    }
    match parse_duration(&text) {
        Ok(d) if d.is_zero() => {
            ctx.error(
                &p.path,
                "must be greater than 0s",
                "use enabled = false to turn hedging off",
            );
            None
        }
        Ok(d) if d > MAX_DURATION => {
            ctx.error(
                &p.path,
                format!(
                    "`{}` is too long: the limit for this key is {}",
                    text.trim(),
                    format_duration(MAX_DURATION)
                ),
                HINT,
            );
            None
        }
        Ok(d) => Some(HedgeDelay::Fixed(d)),
        Err(message) => {
            ctx.error(&p.path, message, HINT);
            None
        }
    }
}

fn retry_budget(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> RetryBudgetPolicy {
    let d = RetryBudgetPolicy::default();
    let s = Section {
        layers,
        name: "retry_budget",
        get: |l| l.retry_budget,
    };
    let ratio = share(ctx, &s.key("ratio", |r| r.ratio.as_ref()), d.ratio, true);
    let min_per_sec = s.key("min_per_sec", |r| r.min_per_sec.as_ref());
    RetryBudgetPolicy {
        ratio: ratio.unwrap_or(d.ratio),
        min_per_sec: min_per_sec.value.copied().unwrap_or(d.min_per_sec),
    }
}

fn context(ctx: &mut Ctx<'_>, layers: &[Layer<'_>]) -> ContextPolicy {
    let d = ContextPolicy::default();
    let s = Section {
        layers,
        name: "context",
        get: |l| l.context,
    };
    let choices = [
        ("trim_oldest", OnOverflow::TrimOldest),
        ("error", OnOverflow::Error),
    ];
    let on_overflow = word(
        ctx,
        &s.key("on_overflow", |c| c.on_overflow.as_ref()),
        d.on_overflow,
        &choices,
    );
    ContextPolicy {
        on_overflow: on_overflow.unwrap_or(d.on_overflow),
    }
}

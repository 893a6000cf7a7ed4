//! Routing: from a route name to an answer. It speaks only the inner wire form ([`crate::wire`])
//! and knows nothing of the HTTP edge.
//!
//! - [`dispatch`] is the entry: a [`request::Request`] in, a [`request::Outcome`] out.
//! - `race` runs the failover loop over one request's attempts (failover, retries, hedges);
//!   `launch` is one attempt as a future; [`pick`] chooses each attempt's target.
//! - [`attempt`] makes one upstream call (whole, or a stream up to its commit point) with the
//!   body [`body`] fitted to the target; [`classify`] decides what its failure means (for
//!   failover, the breaker, the final status); [`path`] records what each attempt came to.
//! - [`relay`] carries a committed stream and ends it honestly; [`continuation`] finishes a
//!   broken one on another target.
//! - [`breaker`] (pure), [`health`], [`budget`] and [`hedge`] decide which targets may take
//!   traffic and how many retries may go out; [`probe`] tests held targets; [`events`] keeps the
//!   recent failovers, hedges and transitions.
//!
//! The runtime table ([`Routing`]) is built from a [`Config`] and swapped whole on reload; what
//! must survive a reload (breakers, SLIs, budgets, metrics) lives in [`Shared`] and is handed
//! back to the new table by target id and route name.

pub mod attempt;
pub mod body;
pub mod breaker;
pub mod budget;
pub mod classify;
pub mod continuation;
pub mod dispatch;
pub mod events;
pub mod health;
pub mod hedge;
mod launch;
pub mod path;
pub mod pick;
pub mod probe;
mod race;
pub mod relay;
pub mod request;
pub mod select;
mod shared;
mod spare_timer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::audit::redact::Redactor;
use crate::config::{Config, MidStream, RouteConfig, TargetConfig};
use crate::metrics::{names, AtomicHistogram, LimitCounters, Registry};
use crate::provider::{Provider, ProviderError};
use budget::RetryBudget;
use events::Events;
use health::Health;
use hedge::HedgeMetrics;
use path::RequestOutcome;
use shared::Closing;
pub use shared::Shared;

/// The runtime routing table.
#[derive(Debug)]
pub struct Routing {
    pub config: Arc<Config>,
    /// Masks the config's secrets (and earlier configs') in error answers to clients and in
    /// audit records: the one redactor of this table, handed to the audit writer on reload.
    pub redactor: Arc<Redactor>,
    /// By name. Fx rather than SipHash: the names are the config's, so a client cannot pick
    /// colliding keys, and SipHash cost ~170 instructions a lookup, one a request.
    routes: rustc_hash::FxHashMap<String, Arc<Route>>,
    /// Every target once, in config order.
    targets: Vec<Arc<Target>>,
}

/// A route with its targets resolved to runtime state.
#[derive(Debug)]
pub struct Route {
    pub config: Arc<RouteConfig>,
    pub targets: Vec<Arc<Target>>,
    pub budget: Arc<RetryBudget>,
    pub hedges: HedgeMetrics,
    pub metrics: Arc<Registry>,
    pub events: Arc<Events>,
    /// The table's redactor ([`Routing::redactor`]), for this route's error answers.
    pub redactor: Arc<Redactor>,
    /// Which target each request starts on, and the order of the rest.
    pub selection: select::Selection,
    /// `requests_total` handles: one row per target, then one for "none", by
    /// [`RequestOutcome::index`].
    requests: Vec<[Arc<AtomicU64>; 4]>,
    duration: Arc<AtomicHistogram>,
    /// `failovers_total{reason="breaker_open"}` by (from, to) target index: counted on every
    /// request of an outage, so resolved once here rather than looked up by labels.
    breaker_open: Vec<Vec<Arc<AtomicU64>>>,
    /// When those were last logged and shown as an event, by the same index.
    breaker_open_noted: Vec<Vec<SkipNote>>,
    origin: Instant,
    /// Watches [`Shared::close_all`].
    closing: Arc<Closing>,
}

/// Failovers past an open breaker happen on every request of an outage: they are logged and
/// shown as an event when they start and then at most every [`SKIP_NOTE_EVERY`], with the
/// number since, rather than once per request.
#[derive(Debug, Default)]
struct SkipNote {
    /// Milliseconds after the route's origin, plus one; 0: never.
    at_ms: AtomicU64,
    /// The counter's value when last noted.
    counted: AtomicU64,
}

/// How often failovers past an open breaker are logged (with their count) while they go on.
pub const SKIP_NOTE_EVERY: Duration = Duration::from_secs(10);

impl Route {
    /// Resolves once the gateway ends what is still open ([`Shared::close_all`]): a request
    /// or stream waiting on it ends at once, with its audit record.
    pub fn closed(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.closing.wait()
    }

    /// As [`Route::closed`], owning what it waits on (a stream outlives its request).
    pub fn closed_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let closing = self.closing.clone();
        async move { closing.wait().await }
    }

    /// Whether a stream that breaks after its first content is continued on another target:
    /// asked for (`mid_stream = "continue"`, the default) and possible. A continuation is
    /// asked of a target that has not streamed the answer, so a route of one target never
    /// has one, and its streams do not keep their text for one (~4,000 instructions a stream
    /// of 12 chunks, bench/instructions).
    pub fn continues_streams(&self) -> bool {
        self.config.failover.mid_stream == MidStream::Continue && self.targets.len() > 1
    }

    /// Count a finished client request: served by target `served` (an index), or none.
    pub fn count_request(&self, served: Option<usize>, outcome: RequestOutcome, elapsed: Duration) {
        self.count_outcome(served, outcome);
        self.duration.observe(elapsed);
    }

    /// Count a request's outcome only (a stream's, when it ends; its duration, to the first
    /// token, was observed at the commit point).
    pub fn count_outcome(&self, served: Option<usize>, outcome: RequestOutcome) {
        let row = served.unwrap_or(self.targets.len());
        if let Some(c) = self.requests.get(row).and_then(|r| r.get(outcome.index())) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Observe a request's duration (streams: to the first token).
    pub fn observe_duration(&self, elapsed: Duration) {
        self.duration.observe(elapsed);
    }

    /// Count a request passed from an open breaker (target `from`) straight to target `to`:
    /// every request of an outage does this, so the counters are resolved once, at build.
    pub fn count_breaker_skip(&self, from: &Target, to: usize) {
        let Some(f) = self
            .targets
            .iter()
            .position(|x| std::ptr::eq(x.as_ref(), from))
        else {
            return;
        };
        let (Some(c), Some(note)) = (
            self.breaker_open.get(f).and_then(|row| row.get(to)),
            self.breaker_open_noted.get(f).and_then(|row| row.get(to)),
        ) else {
            return;
        };
        c.fetch_add(1, Ordering::Relaxed);
        let now_ms = self.origin.elapsed().as_millis() as u64 + 1;
        let last = note.at_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms < last + SKIP_NOTE_EVERY.as_millis() as u64 {
            return;
        }
        if note
            .at_ms
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // another request is noting it
        }
        // The counter outlives reloads; this note does not: the first one counts this request.
        let total = c.load(Ordering::Relaxed);
        let before = note.counted.swap(total, Ordering::Relaxed);
        let count = if last == 0 { 1 } else { total - before };
        let to = &self.targets[to];
        tracing::info!(
            route = %self.config.name, from = %from.id(), to = %to.id(), reason = "breaker_open",
            requests = count, "failover: requests passed over an open breaker"
        );
        self.events.push(
            "failover",
            Some(&self.config.name),
            from.id(),
            to.id(),
            "breaker_open",
        );
    }

    /// Count a move from one target to another after a failed attempt, and show it in the
    /// event ring.
    pub fn count_failover(&self, from: &Target, to: &Target, reason: &'static str) {
        self.metrics.inc(
            names::FAILOVERS,
            &[
                ("route", &self.config.name),
                ("from", from.id()),
                ("to", to.id()),
                ("reason", reason),
            ],
        );
        self.events.push(
            "failover",
            Some(&self.config.name),
            from.id(),
            to.id(),
            reason,
        );
    }
}

/// One model at one provider, with the state the failover loop keeps about it.
#[derive(Debug)]
pub struct Target {
    pub config: Arc<TargetConfig>,
    pub provider: Arc<Provider>,
    pub url: http::Uri,
    /// Where streams go (differs from `url` for Gemini).
    pub stream_url: http::Uri,
    /// The wire dialect the target speaks.
    pub dialect: crate::canonical::Dialect,
    /// Where Responses API requests go as the client sent them, when the provider serves that
    /// API itself (`responses`); else they are translated to the target's `dialect`.
    pub responses_url: Option<http::Uri>,
    /// The id as a response header value (`x-switchyard-target`), made once.
    pub header: http::HeaderValue,
    /// The upstream model name as a JSON string, spliced into same-dialect bodies.
    pub model_json: String,
    pub health: Arc<Health>,
    /// Caps the failed retries and hedges sent here, from every route.
    pub budget: Arc<RetryBudget>,
    /// Probes get at most this long.
    pub probe_timeout: Duration,
    /// `[server] max_response_body`: the most of an answer read whole, or of a stream before
    /// its first content.
    pub max_response_body: usize,
    /// `switchyard_limits_total`, by limit.
    pub limits: LimitCounters,
    /// An adaptive route names this target: its answers' rate-limit headers are read.
    pub watch_limits: bool,
    /// The shapes its streams' events and its whole OpenAI answers were last read by: the next
    /// stream or answer starts with them.
    pub shapes: Arc<crate::wire::chunks::LearnedShapes>,
    origin: Instant,
    /// Milliseconds after `origin` until which a 429's `Retry-After` parks this target; 0: never.
    parked_until_ms: AtomicU64,
}

impl Target {
    /// The `provider/model` name.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// Whether this target takes a request of `dialect` as the client sent it: its own dialect,
    /// and the Responses API where the provider serves it.
    pub fn speaks(&self, dialect: crate::canonical::Dialect) -> bool {
        dialect == self.dialect
            || (dialect == crate::canonical::Dialect::Responses && self.responses_url.is_some())
    }

    /// How long this target stays parked by a `Retry-After`, if it is.
    pub fn parked_for(&self, now: Instant) -> Option<Duration> {
        let until = self.parked_until_ms.load(Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        let now_ms = now.saturating_duration_since(self.origin).as_millis() as u64;
        (until > now_ms).then(|| Duration::from_millis(until - now_ms))
    }

    /// Keep user traffic off this target for `wait` (a longer park already in force stays).
    pub fn park(&self, now: Instant, wait: Duration) {
        let wait = wait.min(classify::MAX_RETRY_AFTER);
        let until = now
            .saturating_duration_since(self.origin)
            .saturating_add(wait)
            .as_millis() as u64;
        self.parked_until_ms
            .fetch_max(until.max(1), Ordering::Relaxed);
    }
}

fn reuse<T>(map: &Mutex<HashMap<String, Arc<T>>>, key: &str, make: impl FnOnce() -> T) -> Arc<T> {
    let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
    map.entry(key.to_owned())
        .or_insert_with(|| Arc::new(make()))
        .clone()
}

impl Routing {
    /// Resolve a config into runtime routes; providers share one pool each. Health, budgets and
    /// metrics of targets and routes that already exist in `shared` are kept.
    pub fn build(config: Arc<Config>, shared: &Shared) -> Result<Routing, ProviderError> {
        let mut providers: HashMap<&str, Arc<Provider>> = HashMap::new();
        for p in &config.providers {
            providers.insert(&p.name, Arc::new(Provider::new(p.clone())?));
        }
        let mut by_id: HashMap<String, Arc<Target>> = HashMap::new();
        let mut targets = Vec::new();
        let mut routes = rustc_hash::FxHashMap::default();
        let origin = Instant::now();
        let redactor = Arc::new(shared.redactor(&config));
        let watched: Vec<&str> = (config.routes.iter())
            .filter(|r| r.strategy == crate::config::Strategy::Adaptive)
            .flat_map(|r| r.targets.iter().map(|t| t.id.as_str()))
            .collect();
        for route in &config.routes {
            let mut resolved = Vec::with_capacity(route.targets.len());
            for t in &route.targets {
                if let Some(existing) = by_id.get(&t.id) {
                    resolved.push(existing.clone());
                    continue;
                }
                let provider = providers
                    .get(t.provider.name.as_str())
                    .cloned()
                    .ok_or_else(|| ProviderError::Invalid {
                        provider: t.provider.name.clone(),
                        message: "unknown provider".into(),
                    })?;
                // A target shared by routes takes the breaker policy of the first route naming it.
                let health = reuse(&shared.health, &t.id, || {
                    Health::new(
                        &t.id,
                        route.breaker.clone(),
                        shared.metrics.clone(),
                        shared.events.clone(),
                        shared.publish.clone(),
                        shared.probe.clone(),
                    )
                });
                health.set_policy(route.breaker.clone());
                let watch_limits = watched.contains(&t.id.as_str());
                if watch_limits {
                    health.watch();
                }
                // And the retry budget policy of that route.
                let budget = reuse(&shared.target_budgets, &t.id, || {
                    RetryBudget::new(route.retry_budget.clone())
                });
                budget.set_policy(route.retry_budget.clone());
                let target = Arc::new(Target {
                    url: provider.chat_url(t, false)?,
                    stream_url: provider.chat_url(t, true)?,
                    dialect: crate::wire::transcode::dialect_of(t.provider.kind, &t.model),
                    responses_url: provider.responses_url()?,
                    header: http::HeaderValue::from_str(&t.id)
                        .unwrap_or_else(|_| http::HeaderValue::from_static("invalid")),
                    model_json: serde_json::Value::from(t.model.as_str()).to_string(),
                    config: t.clone(),
                    provider,
                    health,
                    budget,
                    probe_timeout: route.failover.attempt_timeout.min(Duration::from_secs(10)),
                    max_response_body: shared.max_response_body,
                    limits: shared.limits.clone(),
                    watch_limits,
                    shapes: Arc::default(),
                    origin,
                    parked_until_ms: AtomicU64::new(0),
                });
                by_id.insert(t.id.clone(), target.clone());
                targets.push(target.clone());
                resolved.push(target);
            }
            let budget = reuse(&shared.budgets, &route.name, || {
                RetryBudget::new(route.retry_budget.clone())
            });
            budget.set_policy(route.retry_budget.clone());

            let m = &shared.metrics;
            let rows = resolved
                .iter()
                .map(|t| t.id())
                .chain(std::iter::once("none"))
                .map(|target| {
                    RequestOutcome::ALL.map(|outcome| {
                        m.counter(
                            names::REQUESTS,
                            &[
                                ("route", &route.name),
                                ("target", target),
                                ("outcome", outcome.label()),
                            ],
                        )
                    })
                })
                .collect();
            let breaker_open = resolved
                .iter()
                .enumerate()
                .map(|(i, from)| {
                    resolved
                        .iter()
                        .enumerate()
                        .map(|(j, to)| {
                            if i == j {
                                return Arc::default(); // never a failover: not exported
                            }
                            m.counter(
                                names::FAILOVERS,
                                &[
                                    ("route", &route.name),
                                    ("from", from.id()),
                                    ("to", to.id()),
                                    ("reason", "breaker_open"),
                                ],
                            )
                        })
                        .collect()
                })
                .collect();
            let breaker_open_noted = resolved
                .iter()
                .map(|_| resolved.iter().map(|_| SkipNote::default()).collect())
                .collect();
            let kept = shared
                .adaptive
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&route.name)
                .cloned();
            let selection = select::Selection::new(route, m, kept);
            if let Some(a) = &selection.adaptive {
                let mut map = shared
                    .adaptive
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                map.insert(route.name.clone(), a.clone());
            }
            routes.insert(
                route.name.clone(),
                Arc::new(Route {
                    config: route.clone(),
                    targets: resolved,
                    budget,
                    hedges: HedgeMetrics::new(m, &route.name),
                    metrics: m.clone(),
                    events: shared.events.clone(),
                    redactor: redactor.clone(),
                    selection,
                    requests: rows,
                    duration: m.histogram(names::REQUEST_DURATION, &[("route", &route.name)]),
                    breaker_open,
                    breaker_open_noted,
                    origin,
                    closing: shared.closing.clone(),
                }),
            );
        }
        Ok(Routing {
            config,
            redactor,
            routes,
            targets,
        })
    }

    /// The table of a config given as TOML, with a registry of its own: for unit tests.
    #[cfg(test)]
    pub(crate) fn of_toml(toml: &str) -> (Routing, Arc<Registry>) {
        let config = Config::from_toml(toml, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let metrics = Registry::new();
        let shared = Shared::new(metrics.clone(), 1 << 20);
        let routing = Routing::build(Arc::new(config), &shared).unwrap_or_else(|e| panic!("{e}"));
        (routing, metrics)
    }

    /// The route clients reach with `model`.
    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.get(name)
    }

    /// Every route, in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.routes.values()
    }

    /// Route names in config order.
    pub fn route_names(&self) -> impl Iterator<Item = &str> {
        self.config.routes.iter().map(|r| r.name.as_str())
    }

    /// Start fetching in the background what the providers' calls will need (access tokens),
    /// once per provider: when the server starts serving this table.
    pub fn warm_up(&self) {
        let mut seen: Vec<&str> = Vec::new();
        for t in &self.targets {
            let name = t.provider.config.name.as_str();
            if !seen.contains(&name) {
                seen.push(name);
                t.provider.warm_up();
            }
        }
    }

    /// Every target once, in config order.
    pub fn targets(&self) -> &[Arc<Target>] {
        &self.targets
    }

    /// A target by its `provider/model` id.
    pub fn target(&self, id: &str) -> Option<&Arc<Target>> {
        self.targets.iter().find(|t| t.id() == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROVIDERS: &str = r#"
[[providers]]
name = "p"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
"#;

    /// The route `r` of `targets` (TOML inline tables of provider `p`, an `openai` provider
    /// nothing listens for) with `failover` lines under `[routes.failover]`.
    pub(super) fn route(targets: &str, failover: &str) -> Arc<Route> {
        let toml = format!(
            "{PROVIDERS}\n[[routes]]\nname = \"r\"\ntargets = [{targets}]\n\
             [routes.failover]\n{failover}"
        );
        let (routing, _) = Routing::of_toml(&toml);
        routing.route("r").cloned().expect("the route")
    }

    #[test]
    fn only_a_route_with_another_target_continues_its_streams() {
        let one = r#"{ provider = "p", model = "a" }"#;
        let two = r#"{ provider = "p", model = "a" }, { provider = "p", model = "b" }"#;
        assert!(!route(one, "").continues_streams());
        assert!(route(two, "").continues_streams());
        let off = "mid_stream = \"error\"";
        assert!(!route(two, off).continues_streams());
    }
}

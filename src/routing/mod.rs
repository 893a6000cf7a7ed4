//! Routing: from a route name to an answer. `dispatch` is the failover loop (read it top-down);
//! `attempt` makes one upstream call and classifies how it failed (`failover`); `stream` relays a
//! committed stream and ends it honestly.
//!
//! The runtime table ([`Routing`]) is built from a [`Config`] and swapped whole on reload.

pub mod attempt;
pub mod breaker;
pub mod dispatch;
pub mod failover;
pub mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Config, RouteConfig, TargetConfig};
use crate::provider::{Provider, ProviderError};

/// The runtime routing table.
#[derive(Debug)]
pub struct Routing {
    pub config: Arc<Config>,
    routes: HashMap<String, Arc<Route>>,
}

/// A route with its targets resolved to runtime state.
#[derive(Debug)]
pub struct Route {
    pub config: Arc<RouteConfig>,
    pub targets: Vec<Arc<Target>>,
}

/// One model at one provider, with the state the failover loop keeps about it.
#[derive(Debug)]
pub struct Target {
    pub config: Arc<TargetConfig>,
    pub provider: Arc<Provider>,
    pub url: reqwest::Url,
    origin: Instant,
    /// Milliseconds after `origin` until which a 429's `Retry-After` parks this target; 0: never.
    parked_until_ms: AtomicU64,
}

impl Target {
    /// The `provider/model` name.
    pub fn id(&self) -> &str {
        &self.config.id
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
        let until = (now.saturating_duration_since(self.origin) + wait).as_millis() as u64;
        self.parked_until_ms
            .fetch_max(until.max(1), Ordering::Relaxed);
    }
}

impl Routing {
    /// Resolve a config into runtime routes; providers share one pool each.
    pub fn build(config: Arc<Config>) -> Result<Routing, ProviderError> {
        let mut providers: HashMap<&str, Arc<Provider>> = HashMap::new();
        for p in &config.providers {
            providers.insert(&p.name, Arc::new(Provider::new(p.clone())?));
        }
        let mut targets: HashMap<String, Arc<Target>> = HashMap::new();
        let mut routes = HashMap::new();
        let origin = Instant::now();
        for route in &config.routes {
            let mut resolved = Vec::with_capacity(route.targets.len());
            for t in &route.targets {
                if let Some(existing) = targets.get(&t.id) {
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
                let target = Arc::new(Target {
                    url: provider.chat_url(t)?,
                    config: t.clone(),
                    provider,
                    origin,
                    parked_until_ms: AtomicU64::new(0),
                });
                targets.insert(t.id.clone(), target.clone());
                resolved.push(target);
            }
            routes.insert(
                route.name.clone(),
                Arc::new(Route {
                    config: route.clone(),
                    targets: resolved,
                }),
            );
        }
        Ok(Routing { config, routes })
    }

    /// The route clients reach with `model`.
    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.get(name)
    }

    /// Route names in config order.
    pub fn route_names(&self) -> impl Iterator<Item = &str> {
        self.config.routes.iter().map(|r| r.name.as_str())
    }
}

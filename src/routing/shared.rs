//! What outlives one routing table ([`Shared`]): kept across config reloads, with the
//! shutdown's close signal every race and stream waits on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::budget::RetryBudget;
use super::events::Events;
use super::health::Health;
use super::select;
use crate::audit::redact::Redactor;
use crate::config::Config;
use crate::metrics::{LimitCounters, Registry};

/// State that outlives one routing table: kept across config reloads.
#[derive(Debug)]
pub struct Shared {
    pub metrics: Arc<Registry>,
    /// Recent failovers, breaker transitions and hedges.
    pub events: Arc<Events>,
    pub(super) health: Mutex<HashMap<String, Arc<Health>>>,
    pub(super) budgets: Mutex<HashMap<String, Arc<RetryBudget>>>,
    pub(super) target_budgets: Mutex<HashMap<String, Arc<RetryBudget>>>,
    /// Adaptive routes' tracks, by route name.
    pub(super) adaptive: Mutex<HashMap<String, Arc<select::Adaptive>>>,
    /// Woken when a breaker has a state for the cluster (`[cluster]`).
    pub publish: Arc<tokio::sync::Notify>,
    /// Woken when a breaker leaves `closed`: the health prober ([`super::probe::run`]) looks for due
    /// probes only while some breaker is not closed.
    pub probe: Arc<tokio::sync::Notify>,
    /// Woken when a reload swaps the table: the adaptive shares' task
    /// ([`select::run::run`]) sleeps on it while no route is adaptive.
    pub reloaded: Arc<tokio::sync::Notify>,
    /// Every secret a config of this process has named: a key removed by a reload stays
    /// masked (a request still in flight on the old table may see it echoed).
    pub(super) secrets: Mutex<Vec<String>>,
    /// `switchyard_limits_total`, by limit.
    pub limits: LimitCounters,
    /// `[server] max_response_body` as the gateway started with it (a `[server]` change waits
    /// for a restart, so a reload's value is not taken).
    pub max_response_body: usize,
    /// Set once the shutdown's drain ran out of time: open streams end with an error event
    /// and races with a 503, so that each writes its audit record before the connections
    /// close.
    pub(super) closing: Arc<Closing>,
}

/// Whether [`Shared::close_all`] was called, and the waiters to wake when it is. Every race
/// and stream waits on it, so waiting must cost next to nothing: a flag and a `Notify`, whose
/// waiter registers only when polled (a `watch` channel cost a receiver, a lock on its value
/// and one on its notifier per request, about 1,500 instructions).
#[derive(Debug, Default)]
pub(super) struct Closing {
    closed: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Closing {
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Resolves once closed. The `Notified` is made before the flag is read: `notify_waiters`
    /// wakes every `Notified` made before it, polled or not, so no close is missed.
    pub(super) async fn wait(&self) {
        let notified = self.notify.notified();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }
}

impl Shared {
    /// Empty shared state around a metrics registry, with the `[server]` limits the routing
    /// applies.
    pub fn new(metrics: Arc<Registry>, max_response_body: usize) -> Arc<Shared> {
        Arc::new(Shared {
            limits: LimitCounters::new(&metrics),
            metrics,
            events: Arc::default(),
            health: Mutex::default(),
            budgets: Mutex::default(),
            target_budgets: Mutex::default(),
            adaptive: Mutex::default(),
            publish: Arc::default(),
            probe: Arc::default(),
            reloaded: Arc::default(),
            secrets: Mutex::default(),
            max_response_body,
            closing: Arc::default(),
        })
    }

    /// The redactor for `config`: its secrets and those of every config before it.
    pub(super) fn redactor(&self, config: &Config) -> Redactor {
        let mut known = self.secrets.lock().unwrap_or_else(PoisonError::into_inner);
        for secret in Redactor::secrets_of(config) {
            if !known.contains(&secret) {
                known.push(secret);
            }
        }
        Redactor::new(known.iter().cloned())
    }

    /// End what is still open: streams with an error event, races with a 503 (the drain of a
    /// shutdown ran out of time). Once and for good.
    pub fn close_all(&self) {
        self.closing.close();
    }

    /// Every adaptive route's tracks, by route name (for the cluster sync).
    pub fn adaptives(&self) -> Vec<(String, Arc<select::Adaptive>)> {
        let map = self.adaptive.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Every target's health, by target id (for the cluster sync).
    pub fn healths(&self) -> Vec<(String, Arc<Health>)> {
        let map = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

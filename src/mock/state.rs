//! A mock's shared state: plans, counters, the ring of recorded requests.
//!
//! Locks are `std::sync::Mutex` held only to copy or swap a value, never across an await.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::http::{HeaderMap, HeaderValue, Method, Uri};

use super::{FaultPlan, MockStats, ModelCounts, RecordedRequest};

/// How many requests a mock remembers.
pub(crate) const RECORDED_REQUESTS: usize = 256;

/// Locks `mutex`, ignoring poison: every critical section leaves the data consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One set of request counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ModelCounts {
        ModelCounts {
            requests: self.requests.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }
}

/// All counters of one mock since its last reset. A reset swaps in a new set, so a request still
/// in flight during the reset counts into the discarded set instead of polluting the new one.
#[derive(Debug, Default)]
pub(crate) struct CounterSet {
    total: Counters,
    by_model: Mutex<BTreeMap<String, Arc<Counters>>>,
}

/// The plans in force.
#[derive(Debug, Default)]
struct Plans {
    default: FaultPlan,
    by_model: HashMap<String, FaultPlan>,
}

/// The state behind one mock's router.
#[derive(Debug)]
pub(crate) struct MockState {
    name_header: Option<HeaderValue>,
    plans: Mutex<Plans>,
    counters: Mutex<Arc<CounterSet>>,
    recorded: Mutex<VecDeque<RecordedRequest>>,
    /// TCP connections accepted (tests check that the gateway reuses its upstream connections).
    pub(crate) connections: std::sync::atomic::AtomicU64,
    /// The access tokens its Vertex token endpoint issued (`vertex.rs`).
    pub(crate) issued_tokens: Mutex<std::collections::HashSet<String>>,
}

impl MockState {
    pub(crate) fn new(name: &str) -> Arc<MockState> {
        Arc::new(MockState {
            name_header: HeaderValue::from_str(name).ok(),
            plans: Mutex::default(),
            counters: Mutex::default(),
            recorded: Mutex::new(VecDeque::with_capacity(RECORDED_REQUESTS)),
            connections: std::sync::atomic::AtomicU64::new(0),
            issued_tokens: Mutex::default(),
        })
    }

    /// The `x-mock-name` value (none when the name is not a valid header value).
    pub(crate) fn name_header(&self) -> Option<&HeaderValue> {
        self.name_header.as_ref()
    }

    /// The plan for `model`: its override, else the default plan.
    /// What every dialect does first: count the request, take its plan and random draw, then
    /// play the plan's latency and stall. From here on the guard counts the request cancelled
    /// if the handler's future is dropped.
    pub(crate) async fn arrive(
        &self,
        model: Option<&str>,
    ) -> (RequestGuard, FaultPlan, super::plan::Draw) {
        let guard = self.begin(model);
        let plan = self.plan_for(model);
        let draw = plan.draw(guard.seq());
        let delay = plan.delay(draw);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if plan.stall {
            std::future::pending::<()>().await;
        }
        (guard, plan, draw)
    }

    /// `response` with the `x-mock-name` header.
    pub(crate) fn named(&self, mut response: axum::response::Response) -> axum::response::Response {
        if let Some(name) = self.name_header() {
            response.headers_mut().insert(
                axum::http::HeaderName::from_static("x-mock-name"),
                name.clone(),
            );
        }
        response
    }

    pub(crate) fn plan_for(&self, model: Option<&str>) -> FaultPlan {
        let plans = lock(&self.plans);
        model
            .and_then(|m| plans.by_model.get(m))
            .unwrap_or(&plans.default)
            .clone()
    }

    pub(crate) fn default_plan(&self) -> FaultPlan {
        lock(&self.plans).default.clone()
    }

    pub(crate) fn set_plan(&self, plan: FaultPlan) {
        lock(&self.plans).default = plan;
    }

    pub(crate) fn set_model_plan(&self, model: &str, plan: FaultPlan) {
        lock(&self.plans).by_model.insert(model.to_owned(), plan);
    }

    /// Drops the override for `model`; true when there was one.
    pub(crate) fn remove_model_plan(&self, model: &str) -> bool {
        lock(&self.plans).by_model.remove(model).is_some()
    }

    /// Counts a wire request that just arrived and returns the guard that will count how it ended.
    /// Requests whose model is unknown (an unparsable body) are counted only in the totals.
    pub(crate) fn begin(&self, model: Option<&str>) -> RequestGuard {
        let set = Arc::clone(&lock(&self.counters));
        let seq = set.total.requests.fetch_add(1, Ordering::Relaxed);
        let model = model.map(|m| {
            let counters = Arc::clone(lock(&set.by_model).entry(m.to_owned()).or_default());
            counters.requests.fetch_add(1, Ordering::Relaxed);
            counters
        });
        RequestGuard {
            set,
            model,
            seq,
            done: false,
        }
    }

    pub(crate) fn stats(&self) -> MockStats {
        let set = Arc::clone(&lock(&self.counters));
        let total = set.total.snapshot();
        let by_model = lock(&set.by_model)
            .iter()
            .map(|(model, counters)| (model.clone(), counters.snapshot()))
            .collect();
        MockStats {
            requests: total.requests,
            completed: total.completed,
            cancelled: total.cancelled,
            connections: self.connections.load(std::sync::atomic::Ordering::Relaxed),
            by_model,
        }
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        let mut recorded = lock(&self.recorded);
        if recorded.len() == RECORDED_REQUESTS {
            recorded.pop_front();
        }
        recorded.push_back(request);
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.recorded).iter().cloned().collect()
    }

    /// Back to the state of a fresh mock: default plans, zero counters, nothing recorded.
    pub(crate) fn reset(&self) {
        *lock(&self.plans) = Plans::default();
        *lock(&self.counters) = Arc::default();
        lock(&self.recorded).clear();
        self.connections
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Counts how one wire request ended: `completed` once [`RequestGuard::complete`] is called,
/// else `cancelled` when dropped (the client went away while the handler slept or mid-stream,
/// and hyper dropped the handler future or the body stream holding this guard).
#[derive(Debug)]
pub(crate) struct RequestGuard {
    set: Arc<CounterSet>,
    model: Option<Arc<Counters>>,
    seq: u64,
    done: bool,
}

impl RequestGuard {
    /// The request's number in this mock since the last reset, from 0.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// The mock produced everything the plan asked for; idempotent.
    pub(crate) fn complete(&mut self) {
        if !self.done {
            self.done = true;
            self.bump(|c| &c.completed);
        }
    }

    fn bump(&self, counter: impl Fn(&Counters) -> &AtomicU64) {
        counter(&self.set.total).fetch_add(1, Ordering::Relaxed);
        if let Some(model) = &self.model {
            counter(model).fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if !self.done {
            self.bump(|c| &c.cancelled);
        }
    }
}

impl RecordedRequest {
    /// Captures a wire request; a body that is not JSON is kept as a JSON string.
    pub(crate) fn capture(method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Self {
        let body = serde_json::from_slice(body).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(body).into_owned())
        });
        RecordedRequest {
            method: method.as_str().to_owned(),
            path: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            headers: headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_owned(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_counts_completed_or_cancelled() {
        let state = MockState::new("m");
        let mut done = state.begin(Some("a"));
        done.complete();
        done.complete();
        drop(done);
        drop(state.begin(Some("a")));
        drop(state.begin(None));
        let stats = state.stats();
        assert_eq!(
            (stats.requests, stats.completed, stats.cancelled),
            (3, 1, 2)
        );
        let a = stats.by_model.get("a").copied().unwrap_or_default();
        assert_eq!((a.requests, a.completed, a.cancelled), (2, 1, 1));
    }

    #[test]
    fn reset_ignores_requests_in_flight() {
        let state = MockState::new("m");
        let in_flight = state.begin(Some("a"));
        assert_eq!(in_flight.seq(), 0);
        state.reset();
        drop(in_flight);
        assert_eq!(state.stats(), MockStats::default());
        assert_eq!(state.begin(None).seq(), 0);
    }

    #[test]
    fn recording_is_bounded() {
        let state = MockState::new("m");
        for i in 0..300 {
            let uri: Uri = format!("/v1/chat/completions?i={i}")
                .parse()
                .unwrap_or_default();
            state.record(RecordedRequest::capture(
                &Method::POST,
                &uri,
                &HeaderMap::new(),
                b"{",
            ));
        }
        let recorded = state.requests();
        assert_eq!(recorded.len(), RECORDED_REQUESTS);
        assert_eq!(recorded[0].path, "/v1/chat/completions?i=44");
        assert_eq!(recorded[0].body, serde_json::Value::String("{".into()));
    }
}

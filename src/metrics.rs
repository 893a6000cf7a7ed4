//! Every metric, defined once, rendered as Prometheus text.
//!
//! Hot-path metrics are plain atomics: a route or target asks the [`Registry`] for its handles
//! once, when the routing table is built, and keeps them; the registry keeps every series by
//! name and labels, so a reload hands back the same counters. Labels are low-cardinality:
//! route and target names from the config, and `&'static str` outcomes and reasons.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Metric names.
pub mod names {
    pub const REQUESTS: &str = "switchyard_requests_total";
    pub const REQUEST_DURATION: &str = "switchyard_request_duration_seconds";
    pub const UPSTREAM_DURATION: &str = "switchyard_upstream_duration_seconds";
    pub const TTFT: &str = "switchyard_time_to_first_token_seconds";
    pub const FAILOVERS: &str = "switchyard_failovers_total";
    pub const BREAKER_STATE: &str = "switchyard_breaker_state";
    pub const BREAKER_TRANSITIONS: &str = "switchyard_breaker_transitions_total";
    pub const HEDGES: &str = "switchyard_hedges_total";
    pub const AUDIT_DROPPED: &str = "switchyard_audit_dropped_total";
    pub const RETRY_BUDGET_EXHAUSTED: &str = "switchyard_retry_budget_exhausted_total";
    pub const CLUSTER_CONNECTED: &str = "switchyard_cluster_connected";
    pub const CLUSTER_SYNC_FAILURES: &str = "switchyard_cluster_sync_failures_total";
    pub const LIMITS: &str = "switchyard_limits_total";
    pub const RESPONSES_STORE: &str = "switchyard_responses_store_total";
    pub const TARGET_SHARE: &str = "switchyard_target_share";
    pub const TRACE_SPANS: &str = "switchyard_trace_spans_total";
}

/// The `limit` label of [`names::LIMITS`]: which bound acted. One series per value, made at
/// start ([`LimitCounters`]), so the request path only adds to an atomic.
pub mod limit {
    /// A client did not send its request head within `header_timeout`: closed.
    pub const HEADER_TIMEOUT: &str = "header_timeout";
    /// A kept-alive connection idle for `idle_timeout`: closed.
    pub const IDLE_TIMEOUT: &str = "idle_timeout";
    /// A connection beyond `max_connections`: accepted and closed at once.
    pub const MAX_CONNECTIONS: &str = "max_connections";
    /// A request body not whole within `body_timeout`: 408.
    pub const BODY_TIMEOUT: &str = "body_timeout";
    /// A request beyond `max_in_flight`: 503.
    pub const MAX_IN_FLIGHT: &str = "max_in_flight";
    /// An upstream answer (or stream before its first content) over `max_response_body`: the
    /// attempt failed.
    pub const MAX_RESPONSE_BODY: &str = "max_response_body";
    /// A request or stream still open when `shutdown_timeout` passed: ended.
    pub const SHUTDOWN_TIMEOUT: &str = "shutdown_timeout";
    /// A committed stream whose whole length passed `request_timeout`: ended with an error.
    pub const STREAM_DEADLINE: &str = "stream_deadline";
    /// An upstream SSE line or event over the decoder's bound: the attempt failed.
    pub const SSE_EVENT: &str = "sse_event";
    /// An upstream error body over its bound: read only that far.
    pub const ERROR_BODY: &str = "error_body";
    /// An audit field over its bound: stored truncated, with a marker.
    pub const AUDIT_FIELD: &str = "audit_field";
    /// A token count that could not run (input too large, or the tokenizer panicked): a byte
    /// estimate was used instead.
    pub const TOKEN_COUNT: &str = "token_count";
}

/// A counter per [`limit`] label, resolved once.
#[derive(Debug, Clone)]
pub struct LimitCounters {
    pub header_timeout: Arc<AtomicU64>,
    pub body_timeout: Arc<AtomicU64>,
    pub idle_timeout: Arc<AtomicU64>,
    pub max_connections: Arc<AtomicU64>,
    pub max_in_flight: Arc<AtomicU64>,
    pub max_response_body: Arc<AtomicU64>,
    pub shutdown_timeout: Arc<AtomicU64>,
    pub stream_deadline: Arc<AtomicU64>,
    pub sse_event: Arc<AtomicU64>,
    pub error_body: Arc<AtomicU64>,
    pub audit_field: Arc<AtomicU64>,
    pub token_count: Arc<AtomicU64>,
}

impl LimitCounters {
    /// The counters of `registry` (at zero until a limit acts; they render at once).
    pub fn new(registry: &Registry) -> LimitCounters {
        let c = |label| registry.counter(names::LIMITS, &[("limit", label)]);
        LimitCounters {
            header_timeout: c(limit::HEADER_TIMEOUT),
            body_timeout: c(limit::BODY_TIMEOUT),
            idle_timeout: c(limit::IDLE_TIMEOUT),
            max_connections: c(limit::MAX_CONNECTIONS),
            max_in_flight: c(limit::MAX_IN_FLIGHT),
            max_response_body: c(limit::MAX_RESPONSE_BODY),
            shutdown_timeout: c(limit::SHUTDOWN_TIMEOUT),
            stream_deadline: c(limit::STREAM_DEADLINE),
            sse_event: c(limit::SSE_EVENT),
            error_body: c(limit::ERROR_BODY),
            audit_field: c(limit::AUDIT_FIELD),
            token_count: c(limit::TOKEN_COUNT),
        }
    }
}

/// Add one to a limit's counter.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn help(name: &str) -> (&'static str, &'static str) {
    match name {
        names::REQUESTS => (
            "counter",
            "Client requests by route, serving target and outcome.",
        ),
        names::REQUEST_DURATION => (
            "histogram",
            "Client request duration (streams: to the first token).",
        ),
        names::UPSTREAM_DURATION => (
            "histogram",
            "Upstream attempt duration by target and outcome.",
        ),
        names::TTFT => (
            "histogram",
            "Streams: time from the attempt's start to its first content.",
        ),
        names::FAILOVERS => ("counter", "Moves from one target to the next, by reason."),
        names::BREAKER_STATE => (
            "gauge",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
        ),
        names::BREAKER_TRANSITIONS => ("counter", "Circuit breaker transitions by new state."),
        names::HEDGES => ("counter", "Hedged attempts by outcome."),
        names::AUDIT_DROPPED => (
            "counter",
            "Audit records lost (full queue or failing store).",
        ),
        names::RETRY_BUDGET_EXHAUSTED => (
            "counter",
            "Retries refused because the retry budget was spent.",
        ),
        names::CLUSTER_CONNECTED => (
            "gauge",
            "1 when the last sync with the cluster's Redis succeeded, else 0.",
        ),
        names::CLUSTER_SYNC_FAILURES => ("counter", "Sync rounds with Redis that failed."),
        names::LIMITS => (
            "counter",
            "Times a bound on what a client or upstream controls acted, by limit.",
        ),
        names::TARGET_SHARE => (
            "gauge",
            "Share of a weighted or adaptive route's new requests that start on the target.",
        ),
        names::RESPONSES_STORE => (
            "counter",
            "Responses API responses the gateway's store wrote or did not, by outcome.",
        ),
        names::TRACE_SPANS => (
            "counter",
            "Trace spans exported, dropped (queue full) or failed (collector down), by outcome.",
        ),
        _ => ("untyped", ""),
    }
}

/// Histogram bucket bounds in seconds.
const BUCKETS: [f64; 15] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A Prometheus histogram on atomics.
#[derive(Debug, Default)]
pub struct AtomicHistogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl AtomicHistogram {
    /// Observe one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS.partition_point(|b| *b < secs);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone)]
enum Series {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<AtomicI64>),
    /// A gauge with a fractional value: an `f64`'s bits.
    Ratio(Arc<AtomicU64>),
    Histogram(Arc<AtomicHistogram>),
}

type Labels = Vec<(&'static str, String)>;

/// All series, by name and labels.
#[derive(Debug, Default)]
pub struct Registry {
    series: Mutex<BTreeMap<(&'static str, Labels), Series>>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

impl Registry {
    /// A new, empty registry.
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    fn get(
        &self,
        name: &'static str,
        pairs: &[(&'static str, &str)],
        make: impl FnOnce() -> Series,
    ) -> Series {
        let mut map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry((name, labels(pairs)))
            .or_insert_with(make)
            .clone()
    }

    /// The counter for these labels (created at zero).
    pub fn counter(&self, name: &'static str, pairs: &[(&'static str, &str)]) -> Arc<AtomicU64> {
        match self.get(name, pairs, || Series::Counter(Arc::default())) {
            Series::Counter(c) => c,
            _ => Arc::default(),
        }
    }

    /// The gauge for these labels.
    pub fn gauge(&self, name: &'static str, pairs: &[(&'static str, &str)]) -> Arc<AtomicI64> {
        match self.get(name, pairs, || Series::Gauge(Arc::default())) {
            Series::Gauge(g) => g,
            _ => Arc::default(),
        }
    }

    /// The fractional gauge for these labels: store `f64::to_bits` in it.
    pub fn ratio(&self, name: &'static str, pairs: &[(&'static str, &str)]) -> Arc<AtomicU64> {
        match self.get(name, pairs, || Series::Ratio(Arc::default())) {
            Series::Ratio(g) => g,
            _ => Arc::default(),
        }
    }

    /// The histogram for these labels.
    pub fn histogram(
        &self,
        name: &'static str,
        pairs: &[(&'static str, &str)],
    ) -> Arc<AtomicHistogram> {
        match self.get(name, pairs, || Series::Histogram(Arc::default())) {
            Series::Histogram(h) => h,
            _ => Arc::default(),
        }
    }

    /// Add one to a counter found by labels (for rare events: failovers, transitions).
    pub fn inc(&self, name: &'static str, pairs: &[(&'static str, &str)]) {
        self.counter(name, pairs).fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let map = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::with_capacity(8 * 1024);
        let mut last = "";
        for ((name, labels), series) in map.iter() {
            if *name != last {
                let (kind, text) = help(name);
                let _ = writeln!(out, "# HELP {name} {text}\n# TYPE {name} {kind}");
                last = name;
            }
            let l = render_labels(labels, None);
            match series {
                Series::Counter(c) => {
                    let _ = writeln!(out, "{name}{l} {}", c.load(Ordering::Relaxed));
                }
                Series::Gauge(g) => {
                    let _ = writeln!(out, "{name}{l} {}", g.load(Ordering::Relaxed));
                }
                Series::Ratio(g) => {
                    let v = f64::from_bits(g.load(Ordering::Relaxed));
                    let _ = writeln!(out, "{name}{l} {v}");
                }
                Series::Histogram(h) => {
                    let mut cumulative = 0;
                    for (bound, b) in BUCKETS.iter().zip(&h.buckets) {
                        cumulative += b.load(Ordering::Relaxed);
                        let l = render_labels(labels, Some(&bound.to_string()));
                        let _ = writeln!(out, "{name}_bucket{l} {cumulative}");
                    }
                    let count = h.count.load(Ordering::Relaxed);
                    let l_inf = render_labels(labels, Some("+Inf"));
                    let _ = writeln!(out, "{name}_bucket{l_inf} {count}");
                    let sum = h.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
                    let _ = writeln!(out, "{name}_sum{l} {sum}\n{name}_count{l} {count}");
                }
            }
        }
        out
    }
}

fn render_labels(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}=\"{}\"",
                v.replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n")
            )
        })
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_histograms() {
        let r = Registry::new();
        r.inc(
            names::FAILOVERS,
            &[
                ("route", "r"),
                ("from", "a/x"),
                ("to", "b/y"),
                ("reason", "status"),
            ],
        );
        r.gauge(names::BREAKER_STATE, &[("target", "a/x")])
            .store(2, Ordering::Relaxed);
        let h = r.histogram(names::REQUEST_DURATION, &[("route", "r")]);
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(200));
        let text = r.render();
        assert!(text.contains(
            "switchyard_failovers_total{route=\"r\",from=\"a/x\",to=\"b/y\",reason=\"status\"} 1"
        ));
        assert!(text.contains("switchyard_breaker_state{target=\"a/x\"} 2"));
        assert!(
            text.contains("switchyard_request_duration_seconds_bucket{route=\"r\",le=\"0.001\"} 0")
        );
        assert!(
            text.contains("switchyard_request_duration_seconds_bucket{route=\"r\",le=\"0.005\"} 1")
        );
        assert!(
            text.contains("switchyard_request_duration_seconds_bucket{route=\"r\",le=\"+Inf\"} 2")
        );
        assert!(text.contains("switchyard_request_duration_seconds_count{route=\"r\"} 2"));
        assert!(text.contains("# TYPE switchyard_breaker_state gauge"));
        // The same labels give the same series.
        r.inc(
            names::FAILOVERS,
            &[
                ("route", "r"),
                ("from", "a/x"),
                ("to", "b/y"),
                ("reason", "status"),
            ],
        );
        assert!(r.render().contains("reason=\"status\"} 2"));
    }
}

//! Traces (`[telemetry]`): one server span per client request and one client span per upstream
//! call (hedges and continuations included), with the OpenTelemetry GenAI attributes and the
//! gateway's own (`switchyard.*`), exported over OTLP/HTTP.
//!
//! The request path does three small things for a traced request: it decides whether to trace
//! ([`Telemetry::trace`]: the client's sampled `traceparent`, else `sample_ratio`), sends each
//! attempt's `traceparent` upstream (`routing::attempt`), and, when the request is over, hands
//! what it came to ([`Traced`]) to a bounded queue without waiting ([`Telemetry::submit`]).
//! Everything else (spans, attributes, protobuf, the POST) happens on the exporter's own thread
//! (`export.rs`), off the request path and off the server threads; `spans.rs` writes the spans
//! straight into OTLP protobuf (`proto.rs`). A full queue or a
//! collector that is down costs requests nothing: the spans are dropped and counted in
//! `switchyard_trace_spans_total{outcome}`. Without `[telemetry]` nothing is built.

mod export;
mod proto;
mod spans;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

pub use export::Exporter;

use crate::audit::AuditRecord;
use crate::config::TelemetryConfig;
use crate::metrics::{names, Registry};
use crate::routing::path::Attempt;
use crate::wire::trace::{Trace, TraceParent};

/// Traced requests waiting for the exporter; beyond this they are dropped (and counted).
const QUEUE: usize = 8192;

/// A request that was traced, as it ended.
pub struct Traced {
    pub trace: Trace,
    /// When it ended (a stream: when its last event went out, or the client left).
    pub end: SystemTime,
    /// How long it took, from its arrival.
    pub latency: Duration,
    /// What it came to, as the audit log has it (its `path` is not used: see `path`).
    pub record: AuditRecord,
    /// The targets passed over, then the attempts, in order.
    pub path: Vec<Attempt>,
}

/// The handle the request path uses; cheap to clone. Off (`[telemetry]` absent) it holds
/// nothing.
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    /// Boxed: the exporter moves each through the queue and its batch.
    queue: mpsc::Sender<Box<Traced>>,
    backlog: Arc<Backlog>,
    sample_ratio: f64,
    counts: Counts,
}

/// `switchyard_trace_spans_total`, by outcome.
#[derive(Clone)]
struct Counts {
    exported: Arc<AtomicU64>,
    /// The queue was full.
    dropped: Arc<AtomicU64>,
    /// The collector refused them or could not be reached.
    failed: Arc<AtomicU64>,
}

impl Counts {
    fn new(metrics: &Registry) -> Counts {
        let count = |outcome| metrics.counter(names::TRACE_SPANS, &[("outcome", outcome)]);
        Counts {
            exported: count("exported"),
            dropped: count("dropped"),
            failed: count("failed"),
        }
    }
}

impl Telemetry {
    /// No tracing.
    pub fn off() -> Telemetry {
        Telemetry::default()
    }

    /// Whether `[telemetry]` is on.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Start exporting for `config`: the handle, and the exporter's (to flush at shutdown).
    pub fn start(
        config: &TelemetryConfig,
        metrics: &Registry,
    ) -> Result<(Telemetry, Exporter), String> {
        let counts = Counts::new(metrics);
        let (queue, rx) = mpsc::channel(QUEUE);
        let backlog = Arc::new(Backlog::default());
        let exporter = Exporter::start(config, rx, backlog.clone(), counts.clone())?;
        let inner = Inner {
            queue,
            backlog,
            sample_ratio: config.sample_ratio,
            counts,
        };
        Ok((
            Telemetry {
                inner: Some(Arc::new(inner)),
            },
            exporter,
        ))
    }

    /// The trace of a request whose client sent `client` (its `traceparent`), when it is
    /// traced: a sampled client trace always is, any other request with `sample_ratio`.
    pub fn trace(&self, client: Option<TraceParent>) -> Option<Trace> {
        let inner = self.inner.as_ref()?;
        let sampled = client.is_some_and(|c| c.sampled) || draw(inner.sample_ratio);
        sampled.then(|| Trace::under(client))
    }

    /// Hand a traced request to the exporter, without waiting: when the queue is full its
    /// spans are dropped and counted.
    pub fn submit(&self, traced: Traced) {
        let Some(inner) = &self.inner else { return };
        let sent = inner.queue.try_send(Box::new(traced));
        inner.backlog.sent(QUEUE - inner.queue.capacity());
        if let Err(e) = sent {
            let lost = match &e {
                mpsc::error::TrySendError::Full(t) | mpsc::error::TrySendError::Closed(t) => {
                    spans::count(t)
                }
            };
            inner
                .counts
                .dropped
                .fetch_add(lost as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Tells the exporter, lingering while a batch fills, that a whole batch is waiting: once per
/// batch, so neither a wake-up per request nor a queue that overflows at high rates while the
/// exporter sleeps.
#[derive(Default)]
pub(crate) struct Backlog {
    full: tokio::sync::Notify,
    /// A wake-up is pending (cleared by the exporter when it takes the batch).
    told: std::sync::atomic::AtomicBool,
}

impl Backlog {
    /// After a send: `queued` requests wait.
    pub(crate) fn sent(&self, queued: usize) {
        use std::sync::atomic::Ordering;
        if queued >= export::MAX_BATCH && !self.told.swap(true, Ordering::AcqRel) {
            self.full.notify_one();
        }
    }

    /// When a whole batch waits (at once if one did since the last [`Backlog::taken`]).
    async fn full(&self) {
        self.full.notified().await;
    }

    /// The exporter took what was waiting.
    fn taken(&self) {
        self.told.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// True with probability `ratio`.
fn draw(ratio: f64) -> bool {
    ratio >= 1.0 || (ratio > 0.0 && fastrand::f64() < ratio)
}

//! The writer: the owned tasks between the request path's queue and the store.
//!
//! The writer task takes records off the bounded queue into its buffer and hands them, a batch
//! at a time, to the sink task (`sink.rs`), which owns the store and commits each batch in one
//! transaction. While a batch is being written, the writer keeps draining the queue, so a slow
//! commit does not fill it. Records are handed over at least every second.
//!
//! When the store fails, the sink retries its batch with backoff while the writer keeps
//! buffering, up to [`Limits::pending_max`] records; beyond that the oldest are dropped and
//! counted in `switchyard_audit_dropped_total`. When the store answers again, writing resumes
//! with what was kept. [`AuditWriter::shutdown`] drains the queue and flushes it all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{interval, Instant, MissedTickBehavior};

use super::redact::Redactor;
use super::sink::Sink;
use super::store::{self, Store};
use super::{Audit, AuditError, AuditRecord};
use crate::config::{AuditConfig, AuditStore};
use crate::metrics::{names, Registry};

/// How often the writer takes what the queue holds.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// The writer's sizes and timings. [`start`] uses the defaults; tests shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Records the queue holds between the request path and the writer (10,000).
    pub queue: usize,
    /// Most records written in one transaction (1,000).
    pub batch: usize,
    /// Records waiting are written at least this often (1 s).
    pub flush_every: Duration,
    /// Most records the writer keeps while the store fails; older ones are dropped, counted
    /// (50,000).
    pub pending_max: usize,
    /// How often old records are pruned when `audit.retention` is set (60 s).
    pub prune_every: Duration,
    /// On shutdown, how long a failing store is retried before what is left is counted as
    /// lost (10 s).
    pub shutdown_retry_for: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            queue: 10_000,
            batch: 1_000,
            flush_every: Duration::from_secs(1),
            pending_max: 50_000,
            prune_every: Duration::from_secs(60),
            shutdown_retry_for: Duration::from_secs(10),
        }
    }
}

/// What the writer shares with `/admin/status` and `/admin/audit`.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: AuditStore,
    pub written: AtomicU64,
    /// Taken off the queue, not yet written or dropped.
    pub pending: AtomicU64,
    pub failing: AtomicBool,
    /// The last store error and when (Unix ms).
    pub last_error: Mutex<Option<(String, i64)>>,
    pub dropped: Arc<AtomicU64>,
}

impl Shared {
    pub fn drop_records(&self, n: usize, why: &'static str) {
        let total = self.dropped.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        tracing::error!(
            dropped = n,
            dropped_total = total,
            why,
            "audit records dropped"
        );
    }
}

/// The running writer; [`AuditWriter::shutdown`] flushes it. Dropping it stops the writer too
/// (it still drains and flushes, but nobody waits for it).
#[derive(Debug)]
pub struct AuditWriter {
    running: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl AuditWriter {
    /// Stop taking records, write everything queued, and return when it is written (or, with
    /// a store that stays down, counted as dropped after [`Limits::shutdown_retry_for`]).
    pub async fn shutdown(self) {
        let Some((stop, task)) = self.running else {
            return;
        };
        let _ = stop.send(());
        if let Err(e) = task.await {
            tracing::error!(error = %e, "audit writer task failed");
        }
    }
}

/// Start the audit log for `config`: open the store (SQLite now, PostgreSQL on first use) and
/// spawn the writer. With `store = "off"` nothing starts and the handle keeps nothing.
pub async fn start(
    config: &AuditConfig,
    redactor: Redactor,
    metrics: &Registry,
) -> Result<(Audit, AuditWriter), AuditError> {
    start_with(config, redactor, metrics, Limits::default()).await
}

/// [`start`] with other limits.
pub async fn start_with(
    config: &AuditConfig,
    redactor: Redactor,
    metrics: &Registry,
    limits: Limits,
) -> Result<(Audit, AuditWriter), AuditError> {
    if config.store == AuditStore::Off {
        return Ok((Audit::off(), AuditWriter { running: None }));
    }
    let store = Store::open_writer(&config.store).await?;
    let shared = Arc::new(Shared {
        store: config.store.clone(),
        written: AtomicU64::new(0),
        pending: AtomicU64::new(0),
        failing: AtomicBool::new(false),
        last_error: Mutex::new(None),
        dropped: metrics.counter(names::AUDIT_DROPPED, &[]),
    });
    let (tx, rx) = mpsc::channel(limits.queue.max(1));
    let audit = Audit::new(tx, shared.dropped.clone(), config.bodies).with_shared(shared.clone());
    // One batch in the sink's hands at a time; the next waits in the writer's buffer.
    let (batches, batches_rx) = mpsc::channel(1);
    let give_up = Arc::new(OnceLock::new());
    let sink = tokio::spawn(
        Sink {
            store,
            shared: shared.clone(),
            batches: batches_rx,
            retention: config.retention,
            prune_every: limits.prune_every,
            give_up: give_up.clone(),
        }
        .run(),
    );
    let (stop, stopped) = oneshot::channel();
    let writer = Writer {
        shared,
        rx,
        pending: Vec::new(),
        batches,
        sink,
        give_up,
        limits,
        redactor,
    };
    let task = tokio::spawn(writer.run(stopped));
    tracing::info!(store = store::kind(&config.store), "audit log started");
    Ok((
        audit,
        AuditWriter {
            running: Some((stop, task)),
        },
    ))
}

struct Writer {
    shared: Arc<Shared>,
    rx: mpsc::Receiver<AuditRecord>,
    /// Taken off the queue, not yet handed to the sink (oldest first).
    pending: Vec<AuditRecord>,
    batches: mpsc::Sender<Vec<AuditRecord>>,
    sink: JoinHandle<()>,
    give_up: Arc<OnceLock<Instant>>,
    limits: Limits,
    /// Masks secrets in bodies and error messages before they are stored.
    redactor: Redactor,
}

impl Writer {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let batch = self.limits.batch.max(1);
        let mut flush = interval(self.limits.flush_every.max(Duration::from_millis(1)));
        flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The queue is polled, not awaited: awaiting it would wake this task (and often park
        // and unpark a worker thread) for every record, which under load cost more than the
        // rest of the audit log together. A poll every few milliseconds drains it in bulk.
        let mut poll = interval(POLL_EVERY);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut buf = Vec::with_capacity(batch);
        let batches = self.batches.clone();
        // A full batch goes to the sink as soon as it is free; a partial one when a tick has
        // passed since the last hand-over, so a record waits about a second at most.
        let mut due = false;
        loop {
            let ready = !self.pending.is_empty() && (due || self.pending.len() >= batch);
            tokio::select! {
                _ = poll.tick() => {
                    let open = self.receive(&mut buf);
                    self.take(&mut buf);
                    if !open {
                        break;
                    }
                }
                permit = batches.reserve(), if ready => {
                    let Ok(permit) = permit else {
                        break;
                    };
                    let n = self.pending.len().min(batch);
                    permit.send(self.pending.drain(..n).collect());
                    due = false;
                }
                _ = flush.tick() => due = true,
                _ = &mut stop => break,
            }
        }
        drop(batches);
        self.drain().await;
    }

    /// Move what the queue holds into `buf` without waiting; false once every sender is gone.
    fn receive(&mut self, buf: &mut Vec<AuditRecord>) -> bool {
        for _ in 0..self.limits.queue.max(1) {
            match self.rx.try_recv() {
                Ok(r) => buf.push(r),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
        true
    }

    fn take(&mut self, buf: &mut Vec<AuditRecord>) {
        for r in buf.iter_mut() {
            self.redactor.apply(&mut r.error);
            self.redactor.apply(&mut r.request_body);
            self.redactor.apply(&mut r.response_body);
        }
        self.shared
            .pending
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.pending.append(buf);
        if self.pending.len() > self.limits.pending_max {
            let excess = self.pending.len() - self.limits.pending_max;
            self.pending.drain(..excess);
            self.shared
                .pending
                .fetch_sub(excess as u64, Ordering::Relaxed);
            self.shared.drop_records(
                excess,
                "audit store too slow or failing; the writer's buffer is full",
            );
        }
    }

    /// Shutdown: take what is still queued, hand it all to the sink, and wait for the sink to
    /// write it (retrying a failing store until the deadline).
    async fn drain(mut self) {
        self.rx.close();
        let mut buf = Vec::new();
        while let Some(r) = self.rx.recv().await {
            buf.push(r);
        }
        self.take(&mut buf);
        let _ = self
            .give_up
            .set(Instant::now() + self.limits.shutdown_retry_for);
        let batch = self.limits.batch.max(1);
        while !self.pending.is_empty() {
            let n = self.pending.len().min(batch);
            let chunk: Vec<_> = self.pending.drain(..n).collect();
            if self.batches.send(chunk).await.is_err() {
                // The sink is gone (it panicked): what is left cannot be written.
                let left = n + self.pending.len();
                self.shared
                    .pending
                    .fetch_sub(left as u64, Ordering::Relaxed);
                self.shared.drop_records(left, "audit sink stopped");
                break;
            }
        }
        drop(self.batches);
        if let Err(e) = self.sink.await {
            tracing::error!(error = %e, "audit sink task failed");
        }
        tracing::info!(
            written = self.shared.written.load(Ordering::Relaxed),
            dropped = self.shared.dropped.load(Ordering::Relaxed),
            "audit log flushed"
        );
    }
}

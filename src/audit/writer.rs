//! The writer: one owned task that takes records off the bounded queue and writes them in
//! batches, one transaction each, at least every second.
//!
//! When the store fails, the batch is kept and retried with backoff while new records keep
//! arriving; the writer holds at most [`Limits::pending_max`] records beyond the queue, and counts what
//! it must drop in `switchyard_audit_dropped_total`. When the store answers again, writing
//! resumes with what was kept. [`AuditWriter::shutdown`] drains the queue and flushes it all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};

use super::store::{self, Store};
use super::{Audit, AuditError, AuditRecord};
use crate::config::{AuditConfig, AuditStore};
use crate::metrics::{names, Registry};

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

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What the writer shares with `/admin/status` and `/admin/audit`.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: AuditStore,
    pub written: AtomicU64,
    pub pending: AtomicU64,
    pub failing: AtomicBool,
    /// The last store error and when (Unix ms).
    pub last_error: Mutex<Option<(String, i64)>>,
    pub dropped: Arc<AtomicU64>,
}

impl Shared {
    fn drop_records(&self, n: usize, why: &'static str) {
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
    /// a store that stays down, counted as dropped after a few seconds of retries).
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
    metrics: &Registry,
) -> Result<(Audit, AuditWriter), AuditError> {
    start_with(config, metrics, Limits::default()).await
}

/// [`start`] with other limits.
pub async fn start_with(
    config: &AuditConfig,
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
    let (stop, stopped) = oneshot::channel();
    let writer = Writer {
        store,
        shared,
        rx,
        pending: Vec::new(),
        retention: config.retention,
        limits,
        retry_at: None,
        backoff: BACKOFF_MIN,
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
    store: Store,
    shared: Arc<Shared>,
    rx: mpsc::Receiver<AuditRecord>,
    /// Taken off the queue, not yet written (oldest first).
    pending: Vec<AuditRecord>,
    retention: Option<Duration>,
    limits: Limits,
    /// While the store fails: no write before this.
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Writer {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let batch = self.limits.batch.max(1);
        let tick = |d: Duration| interval(d.max(Duration::from_millis(1)));
        let mut flush = tick(self.limits.flush_every);
        flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut prune = tick(self.limits.prune_every);
        prune.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut buf = Vec::with_capacity(batch);
        loop {
            tokio::select! {
                n = self.rx.recv_many(&mut buf, batch) => {
                    if n == 0 {
                        break;
                    }
                    self.take(&mut buf);
                    if self.pending.len() >= batch {
                        self.flush().await;
                    }
                }
                _ = flush.tick() => self.flush().await,
                _ = prune.tick(), if self.retention.is_some() => self.prune().await,
                _ = &mut stop => break,
            }
        }
        self.drain().await;
    }

    fn take(&mut self, buf: &mut Vec<AuditRecord>) {
        self.pending.append(buf);
        if self.pending.len() > self.limits.pending_max {
            let excess = self.pending.len() - self.limits.pending_max;
            self.pending.drain(..excess);
            self.shared.drop_records(
                excess,
                "audit store failing and the writer's buffer is full",
            );
        }
        self.publish_pending();
    }

    fn publish_pending(&self) {
        self.shared
            .pending
            .store(self.pending.len() as u64, Ordering::Relaxed);
    }

    /// Write everything pending, a batch at a time, unless backing off after a failure.
    async fn flush(&mut self) {
        if self.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        while !self.pending.is_empty() {
            let n = self.pending.len().min(self.limits.batch.max(1));
            match self.store.write(&self.pending[..n]).await {
                Ok(()) => {
                    self.pending.drain(..n);
                    self.publish_pending();
                    self.shared.written.fetch_add(n as u64, Ordering::Relaxed);
                    if self.shared.failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("audit store is back; writing resumed");
                    }
                    self.retry_at = None;
                    self.backoff = BACKOFF_MIN;
                }
                Err(e) => {
                    self.failed(&e, "write");
                    self.retry_at = Some(Instant::now() + self.backoff);
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                    return;
                }
            }
        }
    }

    fn failed(&self, e: &AuditError, op: &'static str) {
        self.shared.failing.store(true, Ordering::Relaxed);
        *self
            .shared
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((e.to_string(), now_ms()));
        tracing::warn!(
            op,
            error = %e,
            pending = self.pending.len(),
            retry_in_ms = self.backoff.as_millis() as u64,
            "audit store failed; records are kept and retried"
        );
    }

    async fn prune(&mut self) {
        let Some(retention) = self.retention else {
            return;
        };
        let before = now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(0));
        match self.store.prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "audit log: old records pruned"),
            Err(e) => self.failed(&e, "prune"),
        }
    }

    /// Shutdown: take what is still queued, write it all, retrying a failing store a while.
    async fn drain(mut self) {
        self.rx.close();
        while let Some(r) = self.rx.recv().await {
            self.pending.push(r);
        }
        let give_up = Instant::now() + self.limits.shutdown_retry_for;
        loop {
            self.retry_at = None;
            self.flush().await;
            if self.pending.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= give_up {
                self.shared
                    .drop_records(self.pending.len(), "audit store unavailable at shutdown");
                self.pending.clear();
                break;
            }
            sleep(self.backoff.min(give_up - now)).await;
        }
        self.publish_pending();
        tracing::info!(
            written = self.shared.written.load(Ordering::Relaxed),
            dropped = self.shared.dropped.load(Ordering::Relaxed),
            "audit log flushed"
        );
    }
}

//! The sink: the task that owns the store and writes the batches the writer hands it, one
//! transaction each, while the writer keeps taking records off the queue (so a slow commit
//! never fills the queue). A batch that fails is retried with backoff until it is written;
//! only on shutdown, past the deadline, is it given up and counted as dropped. Pruning old
//! records happens here too, between batches.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};

use super::store::Store;
use super::writer::{Batch, Shared};
use super::AuditError;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often a write in progress checks whether shutdown's deadline has passed.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);

/// The store's task.
pub(crate) struct Sink {
    pub store: Store,
    pub shared: Arc<Shared>,
    pub batches: mpsc::Receiver<Batch>,
    pub retention: Option<Duration>,
    pub prune_every: Duration,
    /// Set when shutdown begins: past it, a failing store is not retried any more.
    pub give_up: Arc<OnceLock<Instant>>,
}

impl Sink {
    /// Write batches until the writer closes the channel.
    pub(super) async fn run(mut self) {
        let mut prune = interval(self.prune_every.max(Duration::from_millis(1)));
        prune.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                batch = self.batches.recv() => match batch {
                    Some(batch) => self.write(batch).await,
                    None => break,
                },
                _ = prune.tick(), if self.retention.is_some() => self.prune().await,
            }
        }
    }

    fn past_deadline(&self) -> bool {
        past(&self.give_up)
    }

    async fn write(&mut self, batch: Batch) {
        let n = batch.records;
        let mut backoff = BACKOFF_MIN;
        loop {
            // Shutting down with the store still down: do not wait on it batch after batch.
            if self.shared.failing.load(Ordering::Relaxed) && self.past_deadline() {
                self.shared.pending.fetch_sub(n as u64, Ordering::Relaxed);
                self.shared
                    .drop_records(n, "audit store unavailable at shutdown");
                return;
            }
            match bounded(&self.give_up, self.store.write(&batch.chunks)).await {
                Ok(()) => {
                    self.shared.pending.fetch_sub(n as u64, Ordering::Relaxed);
                    self.shared.written.fetch_add(n as u64, Ordering::Relaxed);
                    if self.shared.failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("audit store is back; writing resumed");
                    }
                    return;
                }
                // A batch the store rejects as malformed (a bug) would fail every retry.
                Err(e @ AuditError::Invalid(_)) => {
                    self.failed(&e, "write", Duration::ZERO);
                    self.shared.pending.fetch_sub(n as u64, Ordering::Relaxed);
                    self.shared.drop_records(n, "audit batch malformed");
                    return;
                }
                Err(e) => {
                    self.failed(&e, "write", backoff);
                    if !self.past_deadline() {
                        sleep(backoff).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
            }
        }
    }

    fn failed(&self, e: &AuditError, op: &'static str, retry_in: Duration) {
        self.shared.failing.store(true, Ordering::Relaxed);
        *self
            .shared
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some((e.to_string(), crate::clock::wall_ms_i64()));
        tracing::warn!(
            op,
            error = %e,
            pending = self.shared.pending.load(Ordering::Relaxed),
            retry_in_ms = retry_in.as_millis() as u64,
            "audit store failed; records are kept and retried"
        );
    }

    async fn prune(&mut self) {
        let Some(retention) = self.retention else {
            return;
        };
        let before = crate::clock::wall_ms_i64()
            .saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(0));
        match self.store.prune(before).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "audit log: old records pruned"),
            Err(e) => self.failed(&e, "prune", self.prune_every),
        }
    }
}

/// `op`, cut short once shutdown's deadline (`give_up`) has passed: a store that accepts
/// connections but never answers must not hold the exit past it. A SQLite write cut short may
/// still commit on its blocking thread: its records are then counted as dropped and stored too.
async fn bounded<T>(
    give_up: &OnceLock<Instant>,
    op: impl Future<Output = Result<T, AuditError>>,
) -> Result<T, AuditError> {
    let mut op = std::pin::pin!(op);
    loop {
        match tokio::time::timeout(DEADLINE_CHECK, op.as_mut()).await {
            Ok(r) => return r,
            Err(_) if past(give_up) => return Err(AuditError::ShutdownDeadline),
            Err(_) => {}
        }
    }
}

fn past(give_up: &OnceLock<Instant>) -> bool {
    give_up.get().is_some_and(|t| Instant::now() >= *t)
}

//! The writer: the owned task between the store's memory and its database. It takes the
//! work queued in `Recent` in order (puts in batches, each one transaction; deletes one by
//! one, answering who waits), and prunes what is past the retention (at start, then every
//! [`Limits::prune_every`](super::Limits::prune_every)).
//!
//! A batch the database fails is retried with backoff while puts keep queueing (up to the
//! queue's bytes; then responses are kept in memory only, counted as dropped). At shutdown it
//! writes everything queued; a database still failing then gets
//! [`Limits::shutdown_retry_for`](super::Limits::shutdown_retry_for), and what is left is
//! counted as failed.

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::{interval, sleep, Instant, MissedTickBehavior};

use super::recent::{Put, Work};
use super::store::Db;
use super::{lock, Limits, ResponseStoreError, Shared, StoredResponse};

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often a call in progress checks whether shutdown's deadline has passed.
const DEADLINE_CHECK: Duration = Duration::from_millis(100);
/// Pieces of work done before the writer looks at its timer and stop signal again.
const WORK_PER_TURN: usize = 16;

/// The writer task's state.
pub(super) struct Writer {
    pub shared: Arc<Shared>,
    pub db: Db,
    pub limits: Limits,
    pub retention: Option<Duration>,
}

impl Writer {
    /// Work until `stop` resolves (or its sender is dropped with the last handle), then
    /// write what is queued.
    pub(super) async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut prune = interval(self.limits.prune_every.max(Duration::from_millis(1)));
        prune.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.shared.wake.notified() => self.work(WORK_PER_TURN).await,
                _ = prune.tick(), if self.retention.is_some() => self.prune().await,
                _ = &mut stop => break,
            }
        }
        let _ = self.shared.give_up.set(crate::clock::after(
            Instant::now(),
            self.limits.shutdown_retry_for,
        ));
        lock(&self.shared.recent).close();
        self.work(usize::MAX).await;
        let c = &self.shared.counters;
        tracing::info!(
            stored = c.stored.load(Ordering::Relaxed),
            dropped = c.dropped.load(Ordering::Relaxed),
            failed = c.failed.load(Ordering::Relaxed),
            "responses store flushed"
        );
    }

    /// Do up to `budget` pieces of queued work; with more left, wake again for it (after the
    /// timer and the stop signal have had their turn).
    async fn work(&mut self, budget: usize) {
        for _ in 0..budget {
            let next = lock(&self.shared.recent)
                .next_work(self.limits.batch_rows.max(1), self.limits.batch_bytes);
            match next {
                None => return,
                Some(Work::Puts(puts)) => self.write(puts).await,
                Some(Work::Delete(d)) => {
                    let result = bounded(
                        &self.shared.give_up,
                        self.db.delete(&d.id, d.client_key_id.as_deref()),
                    )
                    .await;
                    match &result {
                        Ok(_) => self.shared.answered(),
                        Err(e) => self.shared.failed(e, "delete", None),
                    }
                    let _ = d.reply.send(result);
                }
            }
        }
        self.shared.wake.notify_one();
    }

    /// Write one batch, retrying until it is written, or until shutdown's deadline passes.
    async fn write(&mut self, puts: Vec<Put>) {
        let rows = latest(&puts);
        let n = puts.len() as u64;
        let mut backoff = BACKOFF_MIN;
        loop {
            match bounded(&self.shared.give_up, self.db.write(&rows)).await {
                Ok(()) => {
                    self.shared.counters.stored.fetch_add(n, Ordering::Relaxed);
                    self.shared.answered();
                    break;
                }
                Err(e) => {
                    // Rows the database refuses as they are (a bug) would fail every retry.
                    let refused = matches!(e, ResponseStoreError::Invalid(_));
                    let give_up = refused || past(&self.shared.give_up);
                    self.shared
                        .failed(&e, "write", (!give_up).then_some(backoff));
                    if give_up {
                        let total = self.shared.counters.failed.fetch_add(n, Ordering::Relaxed) + n;
                        tracing::error!(
                            responses = n,
                            failed_total = total,
                            error = %e,
                            "responses not stored: the store refused them or is still failing at shutdown"
                        );
                        break;
                    }
                    sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        lock(&self.shared.recent).settle(&puts);
    }

    async fn prune(&mut self) {
        let Some(retention) = self.retention else {
            return;
        };
        let before = super::cutoff_ms(retention);
        match bounded(&self.shared.give_up, self.db.prune(before)).await {
            Ok(n) => {
                self.shared.answered();
                self.shared.counters.pruned.fetch_add(n, Ordering::Relaxed);
                if n > 0 {
                    tracing::info!(deleted = n, "responses store: old responses pruned");
                }
            }
            Err(e) => self
                .shared
                .failed(&e, "prune", Some(self.limits.prune_every)),
        }
    }
}

/// The rows of a batch, the last put of each id only: a response put again replaces the
/// earlier one (and one statement must not touch a row twice).
fn latest(puts: &[Put]) -> Vec<Arc<StoredResponse>> {
    let mut seen = HashSet::with_capacity(puts.len());
    let mut rows: Vec<Arc<StoredResponse>> = puts
        .iter()
        .rev()
        .filter(|p| seen.insert(p.response.id.as_str()))
        .map(|p| p.response.clone())
        .collect();
    rows.reverse();
    rows
}

/// `op`, cut short once shutdown's deadline (`give_up`) has passed: a database that accepts
/// connections but never answers must not hold the exit past it.
async fn bounded<T>(
    give_up: &OnceLock<Instant>,
    op: impl Future<Output = Result<T, ResponseStoreError>>,
) -> Result<T, ResponseStoreError> {
    let mut op = std::pin::pin!(op);
    loop {
        match tokio::time::timeout(DEADLINE_CHECK, op.as_mut()).await {
            Ok(r) => return r,
            Err(_) if past(give_up) => return Err(ResponseStoreError::ShutdownDeadline),
            Err(_) => {}
        }
    }
}

fn past(give_up: &OnceLock<Instant>) -> bool {
    give_up.get().is_some_and(|t| Instant::now() >= *t)
}

//! The writer: the owned tasks between the request path's buffers and the store.
//!
//! The writer task takes what the request threads' buffers hold (`Queue::take`, every few
//! milliseconds) into its own list and hands it to the sink task (`sink.rs`), a batch at a
//! time; the sink owns the store and commits each batch in one transaction. While a batch is
//! being written, the writer keeps taking, so a slow commit does not fill the buffers. Records
//! are handed over at least every second.
//!
//! When the store fails, the sink retries its batch with backoff while the writer keeps
//! collecting, up to [`Limits::pending_max`] records and [`Limits::pending_bytes`]; beyond that
//! the oldest are dropped and counted in `switchyard_audit_dropped_total`. Records with an
//! error have it masked, then cut to `MAX_ERROR`, here. When the store answers again, writing resumes
//! with what was kept. [`AuditWriter::shutdown`] takes what is left and flushes it all.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{interval, Instant, MissedTickBehavior};

use super::redact::RedactorCell;
use super::sink::Sink;
use super::store::{self, Store};
use super::{tuple, Audit, AuditError, Buffer, Queue};
use crate::config::{AuditConfig, AuditStore};
use crate::metrics::{limit, names, Registry};

/// How often the writer takes what the buffers hold.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// A batch stops taking chunks past this many bytes: the batch a failing store is retried with
/// is held beside what `pending_bytes` bounds.
const BATCH_BYTES: usize = 8 << 20;

/// The writer's sizes and timings. [`start`] uses the defaults; tests shrink them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Records the request threads' buffers hold until the writer takes them (every 20 ms),
    /// in all: each of the buffers (one per core) holds its share (10,000).
    pub queue: usize,
    /// Records written in one transaction, about (5,000: whole buffers are not split).
    pub batch: usize,
    /// Records waiting are written at least this often (1 s).
    pub flush_every: Duration,
    /// Most records the writer keeps while the store fails; older ones are dropped, counted
    /// (50,000).
    pub pending_max: usize,
    /// Bytes the request threads' buffers hold, in all (32 MiB; each buffer its share, and
    /// always at least one record): records with bodies can be megabytes each.
    pub queue_bytes: usize,
    /// Most bytes the writer keeps while the store fails (64 MiB); older records are dropped,
    /// counted.
    pub pending_bytes: usize,
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
            batch: 5_000,
            flush_every: Duration::from_secs(1),
            pending_max: 50_000,
            queue_bytes: 32 << 20,
            pending_bytes: 64 << 20,
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
    /// Taken from the request threads' buffers, not yet written or dropped.
    pub pending: AtomicU64,
    pub failing: AtomicBool,
    /// The last store error and when (Unix ms).
    pub last_error: Mutex<Option<(String, i64)>>,
    pub dropped: Arc<AtomicU64>,
    /// Records with a field stored cut (`switchyard_limits_total{limit="audit_field"}`).
    pub truncated: Arc<AtomicU64>,
}

impl Shared {
    pub(crate) fn drop_records(&self, n: usize, why: &'static str) {
        let total = self.dropped.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        tracing::error!(
            dropped = n,
            dropped_total = total,
            why,
            "audit records dropped"
        );
    }
}

/// Encoded records: a run of tuples (see `tuple.rs`) and how many.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub bytes: Bytes,
    pub records: usize,
}

#[cfg(test)]
impl Chunk {
    /// `records` encoded, nothing redacted.
    pub(crate) fn of(records: &[super::AuditRecord]) -> Chunk {
        let mut bytes = Vec::new();
        for r in records {
            tuple::encode(r, &super::redact::Redactor::NONE, &mut bytes);
        }
        Chunk {
            bytes: bytes.into(),
            records: records.len(),
        }
    }
}

/// What the sink writes in one transaction.
#[derive(Debug)]
pub(crate) struct Batch {
    pub chunks: Vec<Chunk>,
    pub records: usize,
}

/// Records taken from the shards, not yet handed to the sink, oldest first.
#[derive(Debug, Default)]
struct Pending {
    chunks: VecDeque<Chunk>,
    records: usize,
    /// Encoded bytes of `chunks`.
    bytes: usize,
}

impl Pending {
    fn push(&mut self, chunk: Chunk) {
        self.records += chunk.records;
        self.bytes += chunk.bytes.len();
        self.chunks.push_back(chunk);
    }

    /// Forget the oldest records until at most `max` bytes are kept (or one record is left);
    /// how many were forgotten.
    fn discard_bytes(&mut self, max: usize) -> usize {
        let mut n = 0;
        while self.bytes > max && self.records > 1 {
            self.discard(1);
            n += 1;
        }
        n
    }

    /// Forget the oldest `n` records (a chunk is cut where they end).
    fn discard(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if front.records <= n {
                n -= front.records;
                self.records -= front.records;
                self.bytes -= front.bytes.len();
                self.chunks.pop_front();
            } else {
                let cut = tuple::skip(&front.bytes, n);
                front.bytes = front.bytes.slice(cut..);
                front.records -= n;
                self.records -= n;
                self.bytes -= cut;
                n = 0;
            }
        }
    }

    /// The oldest chunks, at least `size` records if there are, and not more than
    /// [`BATCH_BYTES`] beyond the first chunk (chunks are not split).
    fn batch(&mut self, size: usize) -> Batch {
        let mut out = Batch {
            chunks: Vec::new(),
            records: 0,
        };
        let mut bytes = 0;
        while out.records < size && (out.chunks.is_empty() || bytes < BATCH_BYTES) {
            let Some(chunk) = self.chunks.pop_front() else {
                break;
            };
            out.records += chunk.records;
            bytes += chunk.bytes.len();
            self.bytes -= chunk.bytes.len();
            out.chunks.push(chunk);
        }
        self.records -= out.records;
        out
    }
}

/// The running writer; [`AuditWriter::shutdown`] flushes it. Dropping it stops the writer too
/// (it still takes what is left and flushes it, but nobody waits for it).
#[derive(Debug)]
pub struct AuditWriter {
    running: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl AuditWriter {
    /// Stop taking records, write everything buffered, and return when it is written (or,
    /// with a store that stays down, counted as dropped after [`Limits::shutdown_retry_for`]).
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
    redactor: RedactorCell,
    metrics: &Registry,
) -> Result<(Audit, AuditWriter), AuditError> {
    start_with(config, redactor, metrics, Limits::default()).await
}

/// [`start`] with other limits.
pub async fn start_with(
    config: &AuditConfig,
    redactor: RedactorCell,
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
        truncated: metrics.counter(names::LIMITS, &[("limit", limit::AUDIT_FIELD)]),
    });
    // A shard per core, as many as server threads by default; threads that share a shard
    // only share its lock.
    let shards = std::thread::available_parallelism().map_or(1, |n| n.get().min(64));
    let queue = Arc::new(Queue::new(
        shards,
        limits.queue.div_ceil(shards),
        limits.queue_bytes.div_ceil(shards),
        config.bodies,
        redactor,
        shared.clone(),
    ));
    // One batch in the sink's hands at a time; the next waits in the writer's list.
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
        fresh: (0..queue.shards()).map(|_| Buffer::default()).collect(),
        queue: queue.clone(),
        pending: Pending::default(),
        batches,
        sink,
        give_up,
        limits,
    };
    let task = tokio::spawn(writer.run(stopped));
    tracing::info!(store = store::kind(&config.store), "audit log started");
    Ok((
        Audit::on(queue),
        AuditWriter {
            running: Some((stop, task)),
        },
    ))
}

struct Writer {
    shared: Arc<Shared>,
    queue: Arc<Queue>,
    /// Buffers to swap into the shards, one per shard, with room reserved.
    fresh: Vec<Buffer>,
    pending: Pending,
    batches: mpsc::Sender<Batch>,
    sink: JoinHandle<()>,
    give_up: Arc<OnceLock<Instant>>,
    limits: Limits,
}

impl Writer {
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let batch = self.limits.batch.max(1);
        let mut flush = interval(self.limits.flush_every.max(Duration::from_millis(1)));
        flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The buffers are polled: nothing wakes this task per record.
        let mut poll = interval(POLL_EVERY);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let batches = self.batches.clone();
        // A full batch goes to the sink as soon as it is free; a partial one when a tick has
        // passed since the last hand-over, so a record waits about a second at most.
        let mut due = false;
        loop {
            let ready = self.pending.records > 0 && (due || self.pending.records >= batch);
            tokio::select! {
                _ = poll.tick() => self.collect(),
                permit = batches.reserve(), if ready => {
                    let Ok(permit) = permit else {
                        break;
                    };
                    permit.send(self.pending.batch(batch));
                    due = false;
                }
                _ = flush.tick() => due = true,
                _ = &mut stop => break,
            }
        }
        drop(batches);
        self.drain().await;
    }

    /// Take what the shards hold into `pending`; past [`Limits::pending_max`], drop the oldest.
    fn collect(&mut self) {
        self.queue.take(&mut self.fresh);
        for buf in &mut self.fresh {
            if buf.records() == 0 {
                continue;
            }
            // The next buffer for this shard: room for as much as this one held.
            let room = buf.bytes.len();
            let taken = std::mem::replace(
                buf,
                Buffer {
                    bytes: Vec::with_capacity(room),
                    ..Buffer::default()
                },
            );
            self.shared
                .pending
                .fetch_add(taken.records() as u64, Ordering::Relaxed);
            if taken.encoded > 0 {
                self.pending.push(Chunk {
                    bytes: Bytes::from(taken.bytes),
                    records: taken.encoded,
                });
            }
            if !taken.raw.is_empty() {
                let records = taken.raw.len();
                let mut bytes = Vec::new();
                let redactor = self.queue.redactor.load();
                for mut r in taken.raw {
                    // Masked first, then cut: a secret across the cut would not be masked.
                    redactor.apply(&mut r.error);
                    if r.error
                        .as_mut()
                        .is_some_and(|e| super::bound(e, super::MAX_ERROR))
                    {
                        self.shared.truncated.fetch_add(1, Ordering::Relaxed);
                    }
                    tuple::encode(&r, &redactor, &mut bytes);
                }
                self.pending.push(Chunk {
                    bytes: bytes.into(),
                    records,
                });
            }
        }
        let mut excess = self.pending.records.saturating_sub(self.limits.pending_max);
        if excess > 0 {
            self.pending.discard(excess);
        }
        excess += self.pending.discard_bytes(self.limits.pending_bytes);
        if excess > 0 {
            self.shared
                .pending
                .fetch_sub(excess as u64, Ordering::Relaxed);
            self.shared.drop_records(
                excess,
                "audit store too slow or failing; the writer's buffer is full",
            );
        }
    }

    /// Shutdown: refuse new records, take what the shards hold, hand it all to the sink, and
    /// wait for the sink to write it (retrying a failing store until the deadline).
    async fn drain(mut self) {
        self.queue.close();
        self.collect();
        let _ = self
            .give_up
            .set(Instant::now() + self.limits.shutdown_retry_for);
        let batch = self.limits.batch.max(1);
        while self.pending.records > 0 {
            let next = self.pending.batch(batch);
            let n = next.records;
            if self.batches.send(next).await.is_err() {
                // The sink is gone (it panicked): what is left cannot be written.
                let left = n + self.pending.records;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditRecord;

    fn records(from: usize, n: usize) -> Vec<AuditRecord> {
        (from..from + n)
            .map(|i| AuditRecord::new(format!("r{i}"), 1, "chat".into()))
            .collect()
    }

    /// The request ids in `chunks`, in order.
    fn ids(chunks: &[Chunk]) -> Vec<String> {
        let mut out = Vec::new();
        for c in chunks {
            let mut tuples = tuple::Tuples::new(&c.bytes);
            let mut n = 0;
            while let Some(t) = tuples.next_tuple().unwrap() {
                let tuple::Field::Text(id) = t[0] else {
                    panic!("{:?}", t[0])
                };
                out.push(id.to_owned());
                n += 1;
            }
            assert_eq!(n, c.records);
        }
        out
    }

    #[test]
    fn the_oldest_records_are_discarded_first_cutting_a_chunk_where_they_end() {
        let mut p = Pending::default();
        p.push(Chunk::of(&records(0, 3)));
        p.push(Chunk::of(&records(3, 4)));
        p.discard(5);
        assert_eq!(p.records, 2);
        let all = p.batch(usize::MAX);
        assert_eq!((all.records, p.records), (2, 0));
        assert_eq!(ids(&all.chunks), ["r5", "r6"]);
        p.discard(1);
        assert_eq!(p.records, 0);
    }

    #[test]
    fn bytes_are_accounted_and_the_oldest_go_first_past_a_byte_bound() {
        let mut p = Pending::default();
        p.push(Chunk::of(&records(0, 3)));
        p.push(Chunk::of(&records(3, 4)));
        let total: usize = p.chunks.iter().map(|c| c.bytes.len()).sum();
        assert_eq!(p.bytes, total);
        let one = total / 7;
        assert_eq!(p.discard_bytes(total - 2 * one), 2);
        assert_eq!((p.records, p.bytes), (5, total - 2 * one));
        assert_eq!(p.discard_bytes(0), 4, "one record is always kept");
        let last = p.batch(usize::MAX);
        assert_eq!(ids(&last.chunks), ["r6"]);
        assert_eq!((p.records, p.bytes), (0, 0));
    }

    #[test]
    fn a_batch_takes_whole_chunks_until_it_has_enough() {
        let mut p = Pending::default();
        for i in 0..3 {
            p.push(Chunk::of(&records(i * 4, 4)));
        }
        let b = p.batch(5);
        assert_eq!((b.records, b.chunks.len(), p.records), (8, 2, 4));
        assert_eq!(ids(&b.chunks)[7], "r7");
        assert_eq!(p.batch(5).records, 4);
        assert_eq!(p.batch(5).records, 0);
    }
}

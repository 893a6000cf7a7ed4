//! The audit log: one record per client request with its whole path, written off the request
//! path. The request path only builds an [`AuditRecord`] and hands it to [`Audit::submit`],
//! which encodes it into a buffer of its thread's and never waits: a full buffer is counted
//! (`switchyard_audit_dropped_total`) and logged.
//!
//! Layout: `tuple.rs` (the stored form records are encoded into), [`writer`] (the batching
//! task, started by [`start`]; the store-owning task is `sink.rs`),
//! `store.rs` over `sqlite.rs` and `postgres.rs` (`schema.rs` holds the table and migrations),
//! [`query`] (what `/admin/audit` and `switchyard audit` read), [`show`] (the CLI's table).

mod postgres;
pub mod query;
pub mod redact;
pub mod report;
mod schema;
pub mod show;
mod sink;
mod sqlite;
mod store;
mod tuple;
pub mod writer;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use redact::{Redactor, RedactorCell};

pub use query::AuditQuery;
pub use writer::{start, start_with, AuditWriter, Limits};

/// Why the audit store could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// `store = "off"`: there is nothing to read.
    #[error("the audit log is off (audit.store = \"off\")")]
    Off,
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The server's message (the URL and its password are never part of it).
    #[error("postgres: {0}")]
    Postgres(String),
    #[error("audit store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("audit store still busy when the shutdown deadline passed")]
    ShutdownDeadline,
    /// A bad URL or filter.
    #[error("{0}")]
    Invalid(String),
    #[error("audit task failed: {0}")]
    Task(String),
}

/// The audit log's state, as `/admin/status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditStatus {
    /// `off`, `sqlite` or `postgres` (never the URL).
    pub store: &'static str,
    /// Records waiting to be written (in the queue and held by the writer).
    pub queued: u64,
    /// Records written since the start.
    pub written: u64,
    /// Records lost since the start: full queue, or a store that failed too long.
    pub dropped: u64,
    /// Whether the last write failed (records are kept and retried).
    pub failing: bool,
    /// The last store error (it stays after the store recovers; see `failing`).
    pub last_error: Option<String>,
    /// When the last store error happened, Unix milliseconds.
    pub last_error_ms: Option<i64>,
}

/// A duration as the audit log keeps times: milliseconds, to the microsecond (more digits
/// would only lengthen every stored path).
pub fn millis(d: Duration) -> f64 {
    // Not `as_micros()`: a u128 to f64 conversion is a library call.
    let us = d
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(d.subsec_micros()));
    us as f64 / 1000.0
}

/// One upstream attempt (or a target passed over) in a request's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditAttempt {
    /// `provider/model`.
    pub target: String,
    /// Milliseconds from the request's start.
    pub start_ms: f64,
    pub duration_ms: f64,
    /// `ok`, `status`, `timeout`, `first_token_timeout`, `connect`, `reset`, `malformed`,
    /// `too_large`, `in_band_error`, `empty_stream`, `untranslatable`, `unsupported`, `cut`, `stall`, `shutdown`, `cancelled`,
    /// `hedge_lost`, `skipped_breaker`, `skipped_budget` (see `routing::path::AttemptOutcome`).
    pub outcome: String,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
    /// Mid-stream continuation: characters of the answer this attempt was asked to continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_chars: Option<u64>,
    /// Why the attempt went to its target: `priority`, `share`, `affinity` (the first attempt),
    /// `retry`, `failover`, `hedge`, `continuation` (see `routing::select::Picked`); none for
    /// a target passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub picked: Option<String>,
}

#[cfg(test)]
impl AuditAttempt {
    /// An attempt of a millisecond, for tests of what reads paths.
    pub(crate) fn of(target: &str, outcome: &str, status: Option<u16>) -> AuditAttempt {
        AuditAttempt {
            target: target.into(),
            start_ms: 0.0,
            duration_ms: 1.0,
            outcome: outcome.into(),
            status,
            carried_chars: None,
            picked: None,
        }
    }
}

/// One client request, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub request_id: String,
    /// Wall-clock start, Unix milliseconds.
    pub time_ms: i64,
    /// Which client key was used (its id, never the key itself).
    pub client_key_id: Option<String>,
    pub route: String,
    pub stream: bool,
    /// The HTTP status the client got (a broken stream after its 200 is `status` 200 with
    /// `error` set).
    pub status: u16,
    /// The target that answered.
    pub target: Option<String>,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    /// Prompt tokens, every one: those the provider's prompt cache read or wrote included
    /// (Anthropic's `input_tokens` leaves them out; the record adds them back).
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    pub turns_dropped: u32,
    pub hedged: bool,
    pub error: Option<String>,
    pub path: Vec<AuditAttempt>,
    /// Only with `audit.bodies = true`.
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    /// The conversation the request belongs to (see `wire::session`).
    #[serde(default)]
    pub session: Option<String>,
    /// The W3C trace id of the client's `traceparent`, when it sent one.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// Of `tokens_in`, those read from the provider's prompt cache (OpenAI `cached_tokens`,
    /// Anthropic `cache_read_input_tokens`, Gemini `cachedContentTokenCount`); 0 when the
    /// provider reported usage but no cache read.
    #[serde(default)]
    pub cache_read_tokens: Option<u64>,
    /// Of `tokens_in`, those written to the provider's prompt cache (Anthropic
    /// `cache_creation_input_tokens`).
    #[serde(default)]
    pub cache_write_tokens: Option<u64>,
}

impl AuditRecord {
    /// A record of a request to `route` with nothing known yet: status 0, no target, no
    /// attempts (callers fill in the rest, or use struct update syntax).
    pub fn new(request_id: String, time_ms: i64, route: String) -> AuditRecord {
        AuditRecord {
            request_id,
            time_ms,
            client_key_id: None,
            route,
            stream: false,
            status: 0,
            target: None,
            latency_ms: 0.0,
            ttft_ms: None,
            tokens_in: None,
            tokens_out: None,
            turns_dropped: 0,
            hedged: false,
            error: None,
            path: Vec::new(),
            request_body: None,
            response_body: None,
            session: None,
            trace_id: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
        }
    }
}

/// A field a client or an upstream fills (`route`: the model asked for; `target`;
/// `client_key_id`) is stored cut to this many bytes, ending in [`TRUNCATED`]: a model name a
/// client made 4 MiB long was stored whole, twice per record (as `route` and in the 404's
/// `error`).
pub const MAX_NAME: usize = 256;
/// `error` is stored cut to this many bytes (ending in [`TRUNCATED`]), once its secrets are
/// masked.
pub const MAX_ERROR: usize = 1024;
/// What ends a field stored cut.
pub const TRUNCATED: &str = "...[truncated]";
/// Error text held until the writer masks its secrets and cuts it to [`MAX_ERROR`]: cut this
/// early instead, a secret across the cut (a PEM key is a few KiB) could not be masked.
const MAX_ERROR_HELD: usize = 64 * 1024;

/// Cut `text` to at most `max` bytes, at a character boundary, ending in [`TRUNCATED`];
/// whether it was cut.
pub(crate) fn bound(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let mut end = max.saturating_sub(TRUNCATED.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(TRUNCATED);
    true
}

impl AuditRecord {
    /// About what the record takes in a buffer before it is encoded (the writer's work).
    fn held_bytes(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        128 + self.request_id.len()
            + self.route.len()
            + opt(&self.client_key_id)
            + opt(&self.target)
            + opt(&self.error)
            + opt(&self.request_body)
            + opt(&self.response_body)
            + self.path.len() * 96
    }
}

/// The request path's handle on the audit log. Cheap to clone (one reference count).
#[derive(Debug, Clone)]
pub struct Audit {
    inner: Option<Arc<Queue>>,
}

/// Where the request path leaves records for the writer: one buffer per thread (more or less:
/// threads are spread over [`Queue::shards`] by a number each takes when it first submits),
/// each behind a lock that only its thread and, every few milliseconds, the writer take.
#[derive(Debug)]
pub(crate) struct Queue {
    shards: Box<[Shard]>,
    /// Records a shard holds before more are dropped (counted).
    cap: usize,
    /// Bytes a shard holds before more are dropped (counted); a record alone is always taken.
    cap_bytes: usize,
    bodies: bool,
    /// Masks secrets in bodies and error messages (in the writer); swapped on reload.
    pub(crate) redactor: RedactorCell,
    /// Set when the writer shuts down: what comes later is counted as dropped.
    closed: AtomicBool,
    /// The writer's state.
    shared: Arc<writer::Shared>,
}

/// A buffer of encoded records, on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Buffer>);

/// A shard's records: most in [`tuple`] form, those with text to mask (an error, bodies) as
/// they are, for the writer to mask and encode off the request path.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    pub bytes: Vec<u8>,
    /// Records in `bytes`.
    pub encoded: usize,
    pub raw: Vec<AuditRecord>,
    /// What `raw` holds, about ([`AuditRecord::held_bytes`]).
    pub raw_bytes: usize,
}

impl Buffer {
    pub(crate) fn records(&self) -> usize {
        self.encoded + self.raw.len()
    }

    /// Bytes held, about.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len() + self.raw_bytes
    }
}

/// Threads number themselves in the order they first submit a record.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}

impl Queue {
    pub(crate) fn new(
        shards: usize,
        cap: usize,
        cap_bytes: usize,
        bodies: bool,
        redactor: RedactorCell,
        shared: Arc<writer::Shared>,
    ) -> Queue {
        Queue {
            shards: (0..shards.max(1)).map(|_| Shard::default()).collect(),
            cap: cap.max(1),
            cap_bytes,
            bodies,
            redactor,
            closed: AtomicBool::new(false),
            shared,
        }
    }

    /// Take every shard's records: each non-empty shard's buffer is swapped with `fresh[i]`
    /// (empty, with room reserved, so the shard does not grow again from nothing), which on
    /// return holds what the shard held.
    pub(crate) fn take(&self, fresh: &mut [Buffer]) {
        for (shard, buf) in self.shards.iter().zip(fresh.iter_mut()) {
            let mut held = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            if held.records() > 0 {
                std::mem::swap(&mut *held, buf);
            }
        }
    }

    pub(crate) fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Refuse records from now on (they are counted as dropped).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Records in the shards.
    fn queued(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(PoisonError::into_inner).records() as u64)
            .sum()
    }
}

impl Audit {
    /// An audit log that keeps nothing (`store = "off"`).
    pub fn off() -> Audit {
        Audit { inner: None }
    }

    pub(crate) fn on(queue: Arc<Queue>) -> Audit {
        Audit { inner: Some(queue) }
    }

    /// Queue length, records written and lost, and the last store error.
    pub fn status(&self) -> AuditStatus {
        let Some(q) = &self.inner else {
            return AuditStatus {
                store: "off",
                queued: 0,
                written: 0,
                dropped: 0,
                failing: false,
                last_error: None,
                last_error_ms: None,
            };
        };
        let w = &q.shared;
        let last = w
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        AuditStatus {
            store: store::kind(&w.store),
            queued: q.queued() + w.pending.load(Ordering::Relaxed),
            written: w.written.load(Ordering::Relaxed),
            dropped: w.dropped.load(Ordering::Relaxed),
            failing: w.failing.load(Ordering::Relaxed),
            last_error_ms: last.as_ref().map(|(_, at)| *at),
            last_error: last.map(|(message, _)| message),
        }
    }

    /// Read records from the store this handle writes to.
    pub async fn query(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
        match &self.inner {
            Some(queue) => query::query(&queue.shared.store, q).await,
            None => Err(AuditError::Off),
        }
    }

    /// Whether records are kept at all (builders can skip work when not).
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether bodies are recorded.
    pub fn bodies(&self) -> bool {
        self.inner.as_ref().is_some_and(|q| q.bodies)
    }

    /// Queue a record without waiting: it is encoded into this thread's buffer (one with an
    /// error or bodies is kept whole: masking secrets is the writer's work). Names over
    /// [`MAX_NAME`] are cut first (and counted). A buffer full (in records or in bytes) or a
    /// stopped writer counts it as dropped.
    pub fn submit(&self, mut record: AuditRecord) {
        let Some(q) = &self.inner else { return };
        let mut cut = bound(&mut record.route, MAX_NAME);
        for name in [&mut record.target, &mut record.client_key_id]
            .into_iter()
            .flatten()
        {
            cut |= bound(name, MAX_NAME);
        }
        if cut {
            q.shared.truncated.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(error) = &mut record.error {
            bound(error, MAX_ERROR_HELD);
        }
        // `try_with`: a record submitted while the thread is torn down goes to shard 0 (no panic).
        let shard = &q.shards[SHARD.try_with(|s| *s).unwrap_or(0) % q.shards.len()];
        let mut buf = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
        let refused = if q.closed.load(Ordering::Relaxed) {
            Some("writer stopped")
        } else if buf.records() >= q.cap {
            Some("queue full")
        } else if record.error.is_none()
            && record.request_body.is_none()
            && record.response_body.is_none()
        {
            let before = buf.bytes.len();
            // Nothing to mask: no redactor loaded on the request path.
            tuple::encode(&record, &Redactor::NONE, &mut buf.bytes);
            if buf.records() > 0 && buf.size() > q.cap_bytes {
                buf.bytes.truncate(before);
                Some("queue full (bytes)")
            } else {
                buf.encoded += 1;
                None
            }
        } else {
            let size = record.held_bytes();
            if buf.records() > 0 && buf.size() + size > q.cap_bytes {
                Some("queue full (bytes)")
            } else {
                buf.raw_bytes += size;
                buf.raw.push(record);
                None
            }
        };
        if let Some(why) = refused {
            drop(buf);
            let n = q.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per power of two, so a flood of drops cannot flood the log.
            if n.is_power_of_two() {
                tracing::error!(dropped_total = n, why, "audit record dropped");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AuditStore;
    use std::sync::atomic::AtomicU64;

    fn record(id: &str) -> AuditRecord {
        AuditRecord {
            status: 200,
            ..AuditRecord::new(id.into(), 1, "chat".into())
        }
    }

    #[test]
    fn times_are_kept_to_the_microsecond() {
        assert_eq!(millis(Duration::from_nanos(1_098_654_321)), 1098.654);
        assert_eq!(
            serde_json::to_string(&millis(Duration::from_nanos(999))).unwrap(),
            "0.0"
        );
    }

    fn queue(cap: usize, cap_bytes: usize) -> (Arc<Queue>, Audit) {
        let shared = Arc::new(writer::Shared {
            store: AuditStore::Off,
            written: AtomicU64::new(0),
            pending: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            last_error: Mutex::new(None),
            dropped: Arc::default(),
            truncated: Arc::default(),
        });
        let queue = Arc::new(Queue::new(
            1,
            cap,
            cap_bytes,
            false,
            Redactor::new([]).cell(),
            shared,
        ));
        (queue.clone(), Audit::on(queue))
    }

    #[test]
    fn a_shard_full_in_bytes_drops_the_record_but_always_takes_one() {
        let (queue, audit) = queue(100, 4096);
        let big = |id: &str| AuditRecord {
            request_body: Some("x".repeat(3000)),
            ..record(id)
        };
        audit.submit(big("a"));
        audit.submit(big("b"));
        for id in ["c", "d", "e"] {
            audit.submit(record(id));
        }
        assert_eq!((audit.status().queued, audit.status().dropped), (4, 1));
        let mut taken = vec![Buffer::default()];
        queue.take(&mut taken);
        assert!(taken[0].size() <= 4096, "{}", taken[0].size());
        let (_, alone) = self::queue(100, 10);
        alone.submit(big("f"));
        assert_eq!(alone.status().queued, 1, "one record, however large");
    }

    #[test]
    fn names_are_cut_at_submission_and_errors_held_at_most_64_kib() {
        let (queue, audit) = queue(100, 1 << 30);
        audit.submit(AuditRecord {
            target: Some("é".repeat(200)),
            error: Some("e".repeat(1 << 20)),
            ..AuditRecord::new("a".into(), 1, "r".repeat(1000))
        });
        let mut taken = vec![Buffer::default()];
        queue.take(&mut taken);
        let held = &taken[0].raw[0];
        assert_eq!(held.route.len(), MAX_NAME);
        assert!(held.route.ends_with(TRUNCATED));
        let target = held.target.as_deref().unwrap();
        assert!(target.len() <= MAX_NAME && target.ends_with(TRUNCATED));
        assert!(held.error.as_deref().unwrap().len() <= MAX_ERROR_HELD);
        assert_eq!(queue.shared.truncated.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_full_shard_or_a_closed_queue_counts_the_record_as_dropped() {
        let (queue, audit) = queue(2, 1 << 20);
        let failed = AuditRecord {
            error: Some("upstream said: bad key sk-abcdefghijklmnopqrstuvwx".into()),
            ..record("b")
        };
        for r in [record("a"), failed, record("c")] {
            audit.submit(r);
        }
        assert_eq!((audit.status().queued, audit.status().dropped), (2, 1));
        let mut taken = vec![Buffer::default()];
        queue.take(&mut taken);
        assert_eq!(taken[0].records(), 2);
        // The record with text to mask is left whole for the writer.
        assert_eq!(taken[0].raw.len(), 1);
        assert_eq!(taken[0].raw[0].request_id, "b");
        let mut tuples = tuple::Tuples::new(&taken[0].bytes);
        assert_eq!(
            tuples.next_tuple().unwrap().unwrap()[0],
            tuple::Field::Text("a")
        );
        assert!(tuples.next_tuple().unwrap().is_none());
        assert_eq!(audit.status().queued, 0);
        queue.close();
        audit.submit(record("d"));
        assert_eq!((audit.status().queued, audit.status().dropped), (0, 2));
    }
}

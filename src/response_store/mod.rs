//! The gateway's own store of the Responses API responses it served (`store`, the API's
//! default): each one's full input and its output items under an id the gateway minted, so a
//! client's next turn with `previous_response_id` can be expanded into full input for
//! whichever target serves it, and `GET`/`DELETE /v1/responses/{id}` answer whichever
//! provider served the response.
//!
//! The request path calls [`ResponseStore::put`], which never waits: the response is found by
//! [`ResponseStore::get`] at once (`recent.rs`: the recent responses in memory, written
//! through), and written to the database off the request path by the writer task
//! (`writer.rs`), in batches. A response belongs to the client key that made it: another
//! key's is not found, exactly like a missing one.
//!
//! Layout: `recent.rs` (memory and the writer's queue), `writer.rs` (the task), `store.rs` over
//! `sqlite.rs` and `postgres.rs` (`schema.rs` holds the table and its migrations).

mod postgres;
mod recent;
mod schema;
mod sqlite;
mod store;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{AuditConfig, AuditStore, ResponsesConfig, ResponsesStore};
use crate::metrics::{names, Registry};
use recent::{Bounds, Delete, Recent, Taken};

/// Why the store could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum ResponseStoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The server's message (the URL and its password are never part of it).
    #[error("postgres: {0}")]
    Postgres(String),
    #[error("responses store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("responses store still busy when the shutdown deadline passed")]
    ShutdownDeadline,
    /// A bad URL, or rows the database refuses as they are.
    #[error("{0}")]
    Invalid(String),
    #[error("responses store task failed: {0}")]
    Task(String),
    /// Shut down: a delete can no longer be ordered after the writes before it.
    #[error("the responses store is shut down")]
    Closed,
}

/// One response the gateway served, as it keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Minted by the gateway ([`new_id`]).
    pub id: String,
    /// The client key's id, as the audit log stores it (`None` without `[auth]`): only that
    /// key finds the response.
    pub client_key_id: Option<String>,
    /// Unix milliseconds; retention counts from here.
    pub created_ms: i64,
    /// The model the client asked for (stored cut to [`crate::audit::MAX_NAME`] bytes).
    pub route: String,
    /// The provider that served it: reasoning items go back to it only.
    pub provider: String,
    /// The `previous_response_id` it continued, if any.
    pub previous_id: Option<String>,
    /// JSON array text: the whole input of this turn (history expanded, then the new items).
    pub input: String,
    /// JSON array text: the output items.
    pub output: String,
    /// The response object as sent to the client (what `GET /v1/responses/{id}` answers).
    pub response: String,
}

impl StoredResponse {
    /// What `responses.max_bytes` bounds: the input and output items.
    pub fn items_bytes(&self) -> usize {
        self.input.len() + self.output.len()
    }

    /// About what it takes in memory: what [`Limits`]' bytes count.
    pub fn held_bytes(&self) -> usize {
        let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        128 + self.id.len()
            + opt(&self.client_key_id)
            + self.route.len()
            + self.provider.len()
            + opt(&self.previous_id)
            + self.input.len()
            + self.output.len()
            + self.response.len()
    }
}

/// The prefix of every id the gateway mints.
pub const ID_PREFIX: &str = "resp_";

/// Longest id looked up: anything longer was not minted here (and is not sent to the
/// database).
const MAX_ID: usize = 256;

/// A new response id: `resp_` and 32 lowercase hex digits, 128 bits from the operating
/// system's random source (an id is all a client without `[auth]` needs to read a response).
pub fn new_id() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    if let Err(e) = getrandom::getrandom(&mut bytes) {
        // Not seen on a supported system; an id is still unique, if less unguessable.
        tracing::warn!(error = %e, "no OS randomness for a response id; using fastrand");
        bytes = fastrand::u128(..).to_le_bytes();
    }
    let mut id = String::with_capacity(ID_PREFIX.len() + 32);
    id.push_str(ID_PREFIX);
    for b in bytes {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    id
}

/// The store's sizes and timings. [`ResponseStore::open`] uses the defaults; tests shrink
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of written responses kept in memory for `get` (64 MiB), oldest evicted first.
    pub cache_bytes: usize,
    /// Written responses kept in memory (10,000).
    pub cache_entries: usize,
    /// Bytes of responses waiting to be written (64 MiB; always at least one). Past it, a
    /// response is kept in memory only and counted as dropped.
    pub queue_bytes: usize,
    /// Responses per transaction, at most (100).
    pub batch_rows: usize,
    /// A batch takes no more responses past this many bytes (8 MiB).
    pub batch_bytes: usize,
    /// How often responses past the retention are deleted (60 s; and once at start).
    pub prune_every: Duration,
    /// On shutdown, how long a failing database is retried before what is left is counted as
    /// failed (10 s).
    pub shutdown_retry_for: Duration,
    /// How long a delete waits for the writes queued before it, and its own (15 s).
    pub delete_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cache_bytes: 64 << 20,
            cache_entries: 10_000,
            queue_bytes: 64 << 20,
            batch_rows: 100,
            batch_bytes: 8 << 20,
            prune_every: Duration::from_secs(60),
            shutdown_retry_for: Duration::from_secs(10),
            delete_timeout: Duration::from_secs(15),
        }
    }
}

/// What [`ResponseStore::put`] did with a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Found at once, and queued for the database.
    Queued,
    /// Found while it stays in memory, but never written: the queue was full or the store
    /// shut down (counted as `dropped`).
    MemoryOnly,
    /// Not kept: its items are over `responses.max_bytes` (counted as `too_large`).
    TooLarge,
    /// Not kept: the store is off.
    Off,
}

/// The `outcome` label of [`names::RESPONSES_STORE`].
pub mod outcome {
    /// Written to the database.
    pub const STORED: &str = "stored";
    /// Over `responses.max_bytes`: not kept.
    pub const TOO_LARGE: &str = "too_large";
    /// The queue full (or the store shut down): kept in memory only, never written.
    pub const DROPPED: &str = "dropped";
    /// The database refused it, or still failed at shutdown: not written.
    pub const FAILED: &str = "failed";
}

/// The store's counters, in the metrics registry.
#[derive(Debug)]
struct Counters {
    stored: Arc<AtomicU64>,
    too_large: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    /// Rows deleted past the retention (not a metric).
    pruned: AtomicU64,
}

/// The store's state, as `/admin/status` could show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResponseStoreStatus {
    /// `off`, `sqlite` or `postgres` (never the URL).
    pub store: &'static str,
    /// Responses waiting to be written.
    pub queued: u64,
    /// Responses in memory (queued ones included).
    pub in_memory: u64,
    /// Counted since the start, as in `switchyard_responses_store_total`.
    pub stored: u64,
    pub too_large: u64,
    pub dropped: u64,
    pub failed: u64,
    /// Responses deleted past the retention since the start.
    pub pruned: u64,
    /// Whether the last call to the database failed.
    pub failing: bool,
    /// The last database error (it stays after the database recovers; see `failing`).
    pub last_error: Option<String>,
    /// When it happened, Unix milliseconds.
    pub last_error_ms: Option<i64>,
}

/// What the handles and the writer share.
#[derive(Debug)]
struct Shared {
    recent: Mutex<Recent>,
    /// Woken for every piece of work queued.
    wake: Notify,
    counters: Counters,
    failing: AtomicBool,
    last_error: Mutex<Option<(String, i64)>>,
    /// Set when shutdown begins: past it, a failing database is not retried any more.
    give_up: OnceLock<Instant>,
}

impl Shared {
    /// A call to the database succeeded.
    fn answered(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("responses store is back");
        }
    }

    /// Record and log a failed call; `retry_in`: when it is tried again, if it is.
    fn failed(&self, e: &ResponseStoreError, op: &'static str, retry_in: Option<Duration>) {
        self.failing.store(true, Ordering::Relaxed);
        *lock(&self.last_error) = Some((e.to_string(), crate::clock::wall_ms_i64()));
        tracing::warn!(
            op,
            error = %e,
            queued = lock(&self.recent).queued(),
            retry_in_ms = retry_in.map(|d| d.as_millis() as u64),
            "responses store failed"
        );
    }
}

/// A handle on a store that is on.
struct Inner {
    shared: Arc<Shared>,
    reader: store::Reader,
    kind: &'static str,
    max_bytes: usize,
    retention: Option<Duration>,
    limits: Limits,
    /// Dropped with the last handle, which stops the writer too (it still writes what is
    /// queued, but nobody waits for it).
    writer: tokio::sync::Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
}

/// The gateway's store of Responses API responses. Cheap to clone (one reference count),
/// shared by every server thread.
#[derive(Clone)]
pub struct ResponseStore {
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for ResponseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStore")
            .field("store", &self.inner.as_ref().map_or("off", |i| i.kind))
            .finish()
    }
}

/// Lock `m`, whatever a panicking holder left (the data is counters and maps, never half
/// made).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The oldest `created_ms` still kept with `retention`.
fn cutoff_ms(retention: Duration) -> i64 {
    let ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    crate::clock::wall_ms_i64().saturating_sub(ms)
}

impl ResponseStore {
    /// A store that keeps nothing: `put` does nothing and `get` finds nothing.
    pub fn off() -> ResponseStore {
        ResponseStore { inner: None }
    }

    /// Open the store `config` names (`"audit"`: the audit log's database, in a table of its
    /// own; off when the audit log is off, which the log says): SQLite now (a bad path fails
    /// the start), PostgreSQL on first use; and start its writer on this runtime.
    pub async fn open(
        config: &ResponsesConfig,
        audit: &AuditConfig,
        metrics: &Registry,
    ) -> Result<ResponseStore, ResponseStoreError> {
        Self::open_with(config, audit, metrics, Limits::default()).await
    }

    /// [`ResponseStore::open`] with other limits.
    pub async fn open_with(
        config: &ResponsesConfig,
        audit: &AuditConfig,
        metrics: &Registry,
        limits: Limits,
    ) -> Result<ResponseStore, ResponseStoreError> {
        let db = config.store.resolve(audit);
        if *db == AuditStore::Off {
            match config.store {
                ResponsesStore::Audit => tracing::warn!(
                    "responses store off: responses.store is \"audit\" and the audit log is off \
                     (audit.store = \"off\"); responses are not kept, and previous_response_id \
                     finds nothing"
                ),
                ResponsesStore::Own(_) => {
                    tracing::info!("responses store off (responses.store = \"off\")");
                }
            }
            return Ok(ResponseStore::off());
        }
        let (writer_db, reader) = store::open(db).await?;
        let counter = |outcome| metrics.counter(names::RESPONSES_STORE, &[("outcome", outcome)]);
        let shared = Arc::new(Shared {
            recent: Mutex::new(Recent::new(Bounds {
                cache_bytes: limits.cache_bytes,
                cache_entries: limits.cache_entries,
                queue_bytes: limits.queue_bytes,
            })),
            wake: Notify::new(),
            counters: Counters {
                stored: counter(outcome::STORED),
                too_large: counter(outcome::TOO_LARGE),
                dropped: counter(outcome::DROPPED),
                failed: counter(outcome::FAILED),
                pruned: AtomicU64::new(0),
            },
            failing: AtomicBool::new(false),
            last_error: Mutex::new(None),
            give_up: OnceLock::new(),
        });
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(
            writer::Writer {
                shared: shared.clone(),
                db: writer_db,
                limits,
                retention: config.retention,
            }
            .run(stopped),
        );
        let kind = store::kind(db);
        tracing::info!(
            store = kind,
            audit_database = config.store == ResponsesStore::Audit,
            retention = ?config.retention,
            max_bytes = config.max_bytes,
            "responses store started"
        );
        Ok(ResponseStore {
            inner: Some(Arc::new(Inner {
                shared,
                reader,
                kind,
                max_bytes: config.max_bytes,
                retention: config.retention,
                limits,
                writer: tokio::sync::Mutex::new(Some((stop, task))),
            })),
        })
    }

    /// Whether responses are kept at all.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Keep `response` without waiting: `get` finds it from now on, and the writer stores it
    /// off the request path. Over `responses.max_bytes` it is not kept; with the writer's queue
    /// full it is kept in memory only (both counted and logged).
    pub fn put(&self, mut response: StoredResponse) -> Kept {
        let Some(inner) = &self.inner else {
            return Kept::Off;
        };
        let counters = &inner.shared.counters;
        let bytes = response.items_bytes();
        if bytes > inner.max_bytes {
            let n = counters.too_large.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per power of two, so a flood cannot flood the log.
            if n.is_power_of_two() {
                tracing::warn!(
                    bytes,
                    max_bytes = inner.max_bytes,
                    too_large_total = n,
                    "response not stored: its items are over responses.max_bytes"
                );
            }
            return Kept::TooLarge;
        }
        for name in [&mut response.route, &mut response.provider]
            .into_iter()
            .chain(response.previous_id.as_mut())
        {
            crate::audit::bound(name, crate::audit::MAX_NAME);
        }
        let queued = lock(&inner.shared.recent).put(Arc::new(response));
        match queued {
            Ok(()) => {
                inner.shared.wake.notify_one();
                Kept::Queued
            }
            Err(why) => {
                let n = counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::error!(
                        dropped_total = n,
                        why,
                        "response kept in memory only, not stored"
                    );
                }
                Kept::MemoryOnly
            }
        }
    }

    /// The response `id` if `client_key_id` made it (another key's is `None`, as a missing
    /// one) and it is within the retention: from memory, else from the database.
    pub async fn get(
        &self,
        id: &str,
        client_key_id: Option<&str>,
    ) -> Result<Option<Arc<StoredResponse>>, ResponseStoreError> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        if id.len() > MAX_ID {
            return Ok(None);
        }
        let since = inner.retention.map_or(i64::MIN, cutoff_ms);
        let recent = lock(&inner.shared.recent).get(id).cloned();
        if let Some(r) = recent {
            let found = r.client_key_id.as_deref() == client_key_id && r.created_ms >= since;
            return Ok(found.then_some(r));
        }
        let stored = inner.reader.get(id, client_key_id, since).await?;
        Ok(stored.map(Arc::new))
    }

    /// Delete the response `id` if `client_key_id` made it; whether there was one (another
    /// key's is left alone: `false`, as a missing one). It waits for the writes queued before
    /// it (at most [`Limits::delete_timeout`]), so a response is never written after its
    /// delete.
    pub async fn delete(
        &self,
        id: &str,
        client_key_id: Option<&str>,
    ) -> Result<bool, ResponseStoreError> {
        let Some(inner) = &self.inner else {
            return Ok(false);
        };
        if id.len() > MAX_ID {
            return Ok(false);
        }
        let (reply, answer) = oneshot::channel();
        let delete = Delete {
            id: id.to_owned(),
            client_key_id: client_key_id.map(str::to_owned),
            reply,
        };
        let taken = match lock(&inner.shared.recent).delete(delete) {
            Ok(Taken::OtherKey) => return Ok(false),
            Ok(taken) => taken,
            Err(_) => return Err(ResponseStoreError::Closed),
        };
        inner.shared.wake.notify_one();
        let limit = inner.limits.delete_timeout;
        let in_db = match tokio::time::timeout(limit, answer).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(ResponseStoreError::Task("the writer stopped".into())),
            Err(_) => return Err(ResponseStoreError::Timeout(limit)),
        };
        Ok(taken == Taken::Removed || in_db)
    }

    /// Stop taking responses (later ones are kept in memory only, counted as dropped), write
    /// everything queued, and return when it is written (or, with a database that stays
    /// down, counted as failed after [`Limits::shutdown_retry_for`]). Any handle may call it;
    /// a second call waits for the first.
    pub async fn shutdown(&self) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut writer = inner.writer.lock().await;
        let Some((stop, task)) = writer.take() else {
            return;
        };
        let _ = inner.shared.give_up.set(crate::clock::after(
            Instant::now(),
            inner.limits.shutdown_retry_for,
        ));
        lock(&inner.shared.recent).close();
        let _ = stop.send(());
        if let Err(e) = task.await {
            tracing::error!(error = %e, "responses store writer failed");
        }
    }

    /// Counts, the queue, and the last database error.
    pub fn status(&self) -> ResponseStoreStatus {
        let Some(inner) = &self.inner else {
            return ResponseStoreStatus {
                store: "off",
                queued: 0,
                in_memory: 0,
                stored: 0,
                too_large: 0,
                dropped: 0,
                failed: 0,
                pruned: 0,
                failing: false,
                last_error: None,
                last_error_ms: None,
            };
        };
        let s = &inner.shared;
        let c = &s.counters;
        let (queued, in_memory) = {
            let recent = lock(&s.recent);
            (recent.queued() as u64, recent.len() as u64)
        };
        let last = lock(&s.last_error).clone();
        ResponseStoreStatus {
            store: inner.kind,
            queued,
            in_memory,
            stored: c.stored.load(Ordering::Relaxed),
            too_large: c.too_large.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            pruned: c.pruned.load(Ordering::Relaxed),
            failing: s.failing.load(Ordering::Relaxed),
            last_error_ms: last.as_ref().map(|(_, at)| *at),
            last_error: last.map(|(message, _)| message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_resp_and_32_lowercase_hex_digits() {
        let a = new_id();
        assert_eq!(a.len(), 37);
        assert!(a.starts_with("resp_"));
        assert!(a[5..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_ne!(a, new_id());
    }
}

//! The audit log: one record per client request with its whole path, written off the request
//! path. The request path only builds an [`AuditRecord`] and hands it to [`Audit::submit`],
//! which never blocks: a full queue is counted (`switchyard_audit_dropped_total`) and logged.
//!
//! Layout: [`writer`] (the bounded queue and the batching tasks, started by [`start`]; the
//! store-owning task is `sink.rs`),
//! `store.rs` over `sqlite.rs` and `postgres.rs` (`schema.rs` holds the table and migrations),
//! [`query`] (what `/admin/audit` and `switchyard audit` read), [`show`] (the CLI's table).

mod postgres;
pub mod query;
pub mod redact;
mod schema;
pub mod show;
mod sink;
mod sqlite;
mod store;
pub mod writer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

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

/// One upstream attempt (or a target passed over) in a request's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditAttempt {
    /// `provider/model`.
    pub target: String,
    /// Milliseconds from the request's start.
    pub start_ms: f64,
    pub duration_ms: f64,
    /// `ok`, `status`, `timeout`, `first_token_timeout`, `connect`, `reset`, `malformed`,
    /// `in_band_error`, `empty_stream`, `cut`, `stall`, `cancelled`, `hedge_lost`,
    /// `skipped_breaker`, `skipped_budget`.
    pub outcome: String,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
    /// Mid-stream continuation: characters of the answer this attempt was asked to continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_chars: Option<u64>,
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
    pub tokens_in: Option<u64>,
    pub tokens_out: Option<u64>,
    pub turns_dropped: u32,
    pub hedged: bool,
    pub error: Option<String>,
    pub path: Vec<AuditAttempt>,
    /// Only with `audit.bodies = true`.
    pub request_body: Option<String>,
    pub response_body: Option<String>,
}

/// The request path's handle on the audit log. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Audit {
    tx: Option<mpsc::Sender<AuditRecord>>,
    dropped: Arc<AtomicU64>,
    bodies: bool,
    /// The writer's state, when one runs.
    writer: Option<Arc<writer::Shared>>,
}

impl Audit {
    /// An audit log that keeps nothing (`store = "off"`).
    pub fn off() -> Audit {
        Audit {
            tx: None,
            dropped: Arc::default(),
            bodies: false,
            writer: None,
        }
    }

    /// A handle feeding `tx`; `dropped` counts records that could not be queued.
    pub fn new(tx: mpsc::Sender<AuditRecord>, dropped: Arc<AtomicU64>, bodies: bool) -> Audit {
        Audit {
            tx: Some(tx),
            dropped,
            bodies,
            writer: None,
        }
    }

    pub(crate) fn with_shared(mut self, shared: Arc<writer::Shared>) -> Audit {
        self.writer = Some(shared);
        self
    }

    /// Queue length, records written and lost, and the last store error.
    pub fn status(&self) -> AuditStatus {
        let queued = self
            .tx
            .as_ref()
            .map_or(0, |tx| (tx.max_capacity() - tx.capacity()) as u64);
        let mut status = AuditStatus {
            store: "off",
            queued,
            written: 0,
            dropped: self.dropped.load(Ordering::Relaxed),
            failing: false,
            last_error: None,
            last_error_ms: None,
        };
        if let Some(w) = &self.writer {
            status.store = store::kind(&w.store);
            status.queued += w.pending.load(Ordering::Relaxed);
            status.written = w.written.load(Ordering::Relaxed);
            status.failing = w.failing.load(Ordering::Relaxed);
            let last = w.last_error.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((message, at)) = &*last {
                status.last_error = Some(message.clone());
                status.last_error_ms = Some(*at);
            }
        }
        status
    }

    /// Read records from the store this handle writes to.
    pub async fn query(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
        match &self.writer {
            Some(w) => query::query(&w.store, q).await,
            None => Err(AuditError::Off),
        }
    }

    /// Whether records are kept at all (builders can skip work when not).
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Whether bodies are recorded.
    pub fn bodies(&self) -> bool {
        self.bodies
    }

    /// Queue a record without waiting; a full or closed queue counts it as dropped.
    pub fn submit(&self, record: AuditRecord) {
        let Some(tx) = &self.tx else { return };
        if let Err(e) = tx.try_send(record) {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per power of two, so a flood of drops cannot flood the log.
            if n.is_power_of_two() {
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "queue full",
                    mpsc::error::TrySendError::Closed(_) => "writer stopped",
                };
                tracing::error!(dropped_total = n, why, "audit record dropped");
            }
        }
    }
}

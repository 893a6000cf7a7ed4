//! The audit log: one record per client request with its whole path, written off the request
//! path. The request path only builds an [`AuditRecord`] and hands it to [`Audit::submit`],
//! which never blocks: a full queue is counted (`switchyard_audit_dropped_total`) and logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

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
    /// `skipped_breaker`.
    pub outcome: String,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
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
}

impl Audit {
    /// An audit log that keeps nothing (`store = "off"`).
    pub fn off() -> Audit {
        Audit {
            tx: None,
            dropped: Arc::default(),
            bodies: false,
        }
    }

    /// A handle feeding `tx`; `dropped` counts records that could not be queued.
    pub fn new(tx: mpsc::Sender<AuditRecord>, dropped: Arc<AtomicU64>, bodies: bool) -> Audit {
        Audit {
            tx: Some(tx),
            dropped,
            bodies,
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

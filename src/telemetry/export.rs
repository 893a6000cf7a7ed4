//! The exporter: a thread of its own (with a single-threaded runtime), so writing and posting
//! spans never holds up a server thread. It takes traced requests off the queue in batches,
//! encodes their spans as one OTLP `ExportTraceServiceRequest` (protobuf, `proto.rs`) and
//! posts it to `{otlp_endpoint}/v1/traces`, within a time and answer-size bound. A failed
//! export is not retried: its spans are counted and the next batch goes on.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::proto::{self, Value};
use super::{spans, Backlog, Counts, Traced};
use crate::config::TelemetryConfig;

/// Most traced requests in one export.
pub(super) const MAX_BATCH: usize = 512;
/// How long a batch waits for more requests after its first (unless a whole batch comes
/// first: `Backlog`).
const LINGER: Duration = Duration::from_millis(500);
/// The longest one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a collector's answer read.
const MAX_ANSWER: usize = 64 * 1024;
/// The longest the final flush at shutdown may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The running exporter.
pub struct Exporter {
    stop: oneshot::Sender<()>,
    done: oneshot::Receiver<()>,
}

/// What an export needs besides its batch.
struct Sink {
    client: reqwest::Client,
    url: String,
    /// The encoded `Resource` (`service.name`) and `InstrumentationScope`.
    resource: Vec<u8>,
    scope: Vec<u8>,
    counts: Counts,
    /// The last export failed (the log says so once per outage).
    failing: bool,
}

impl Exporter {
    pub(super) fn start(
        config: &TelemetryConfig,
        queue: mpsc::Receiver<Box<Traced>>,
        backlog: Arc<Backlog>,
        counts: Counts,
    ) -> Result<Exporter, String> {
        // Resource: attributes = 1. InstrumentationScope: name = 1, version = 2.
        let mut resource = Vec::new();
        proto::attribute(
            &mut resource,
            1,
            "service.name",
            Value::Str(&config.service_name),
        );
        let mut scope = Vec::new();
        proto::string(&mut scope, 1, "switchyard");
        proto::string(&mut scope, 2, env!("CARGO_PKG_VERSION"));
        let url = config.traces_url();
        let (stop, stopped) = oneshot::channel();
        let (finished, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("switchyard-traces".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let client = reqwest::Client::builder().timeout(EXPORT_TIMEOUT).build();
                match (runtime, client) {
                    (Ok(runtime), Ok(client)) => {
                        let sink = Sink {
                            client,
                            url,
                            resource,
                            scope,
                            counts,
                            failing: false,
                        };
                        runtime.block_on(run(queue, &backlog, sink, stopped));
                    }
                    (Err(e), _) => tracing::error!(error = %e, "trace exporter: no runtime"),
                    (_, Err(e)) => tracing::error!(error = %e, "trace exporter: no HTTP client"),
                }
                let _ = finished.send(());
            })
            .map_err(|e| format!("telemetry: cannot start the exporter thread: {e}"))?;
        Ok(Exporter { stop, done })
    }

    /// Export what is queued (within a few seconds) and stop.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(FLUSH_TIMEOUT + Duration::from_secs(1), self.done).await;
    }
}

async fn run(
    mut queue: mpsc::Receiver<Box<Traced>>,
    backlog: &Backlog,
    mut sink: Sink,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut stopping = false;
    while !stopping {
        tokio::select! {
            n = queue.recv_many(&mut batch, MAX_BATCH) => if n == 0 { break },
            _ = &mut stopped => break,
        }
        // Then the batch fills while this thread sleeps, until a whole batch waits or the
        // linger is over: waiting on the queue instead would wake it for every request (a
        // wake-up costs more than the request's spans), and sleeping through the linger
        // regardless would let the queue overflow at high rates.
        if queue.len() + batch.len() < MAX_BATCH {
            tokio::select! {
                _ = tokio::time::sleep(LINGER) => {}
                _ = backlog.full() => {}
                // Polled no more: what is queued goes in the last round, below.
                _ = &mut stopped => stopping = true,
            }
        }
        backlog.taken();
        take(&mut queue, &mut batch);
        sink.export(&mut batch, EXPORT_TIMEOUT).await;
    }
    // Shutting down: what is queued now goes in one last round.
    while let Ok(t) = queue.try_recv() {
        batch.push(t);
    }
    if !batch.is_empty() {
        sink.export(&mut batch, FLUSH_TIMEOUT).await;
    }
}

/// What is queued, up to a whole batch, without waiting.
#[allow(
    clippy::vec_box,
    reason = "boxed in the queue, so moving one moves a pointer"
)]
fn take(queue: &mut mpsc::Receiver<Box<Traced>>, batch: &mut Vec<Box<Traced>>) {
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(t) => batch.push(t),
            Err(_) => break,
        }
    }
}

impl Sink {
    /// Export `batch` (emptied).
    #[allow(
        clippy::vec_box,
        reason = "boxed in the queue, so moving one moves a pointer"
    )]
    async fn export(&mut self, batch: &mut Vec<Box<Traced>>, within: Duration) {
        let mut n = 0u64;
        let body = self.encode(batch.drain(..).inspect(|t| n += spans::count(t) as u64));
        let result = match tokio::time::timeout(within, self.post(body)).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {} s", within.as_secs())),
        };
        match result {
            Ok(()) => {
                self.counts.exported.fetch_add(n, Ordering::Relaxed);
                if std::mem::take(&mut self.failing) {
                    tracing::info!("trace export works again");
                }
            }
            Err(error) => {
                self.counts.failed.fetch_add(n, Ordering::Relaxed);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(%error, spans = n, "trace export failed; spans are dropped until it works");
                }
            }
        }
    }

    /// One `ExportTraceServiceRequest` of `traced`'s spans, in one buffer: the spans are
    /// written in place after room left for the envelope (`resource_spans = 1` { `resource =
    /// 1`, `scope_spans = 2` { `scope = 1`, spans... } }), whose lengths are known last and
    /// written into that room, so nothing is copied.
    fn encode(&self, traced: impl Iterator<Item = Box<Traced>>) -> bytes::Bytes {
        // Three keys, three varint lengths of at most ten bytes, and the resource.
        let room = 3 * 11 + self.resource.len();
        let mut out = Vec::with_capacity(room + 64 * 1024);
        out.resize(room, 0);
        proto::bytes(&mut out, 1, &self.scope);
        for t in traced {
            spans::write(&t, &mut out);
        }
        let scope_spans = (out.len() - room) as u64;
        // Backwards from the spans: scope_spans' key and length, the resource, then
        // resource_spans' key and length.
        let mut head = Vec::with_capacity(room);
        proto::bytes(&mut head, 1, &self.resource);
        head.push(2 << 3 | 2);
        proto::varint(&mut head, scope_spans);
        let resource_spans = head.len() as u64 + scope_spans;
        let mut envelope = vec![1 << 3 | 2];
        proto::varint(&mut envelope, resource_spans);
        envelope.extend_from_slice(&head);
        let start = room - envelope.len();
        out[start..room].copy_from_slice(&envelope);
        bytes::Bytes::from(out).slice(start..)
    }

    async fn post(&self, body: bytes::Bytes) -> Result<(), String> {
        let mut resp = self
            .client
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        let status = resp.status();
        // Read (a bounded part of) the answer so the connection can be reused.
        let mut read = 0usize;
        while let Ok(Some(chunk)) = resp.chunk().await {
            read += chunk.len();
            if read > MAX_ANSWER {
                break;
            }
        }
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditRecord;
    use crate::metrics::Registry;
    use crate::wire::trace::Trace;

    fn traced() -> Box<Traced> {
        Box::new(Traced {
            trace: Trace::under(None),
            end: std::time::SystemTime::now(),
            latency: Duration::from_millis(3),
            record: AuditRecord::new("r".into(), 0, "chat".into()),
            path: Vec::new(),
        })
    }

    /// A whole batch waiting ends the linger (a queue filling faster than the linger would
    /// otherwise overflow it).
    #[tokio::test(start_paused = true)]
    async fn a_whole_batch_waiting_ends_the_linger() {
        let metrics = Registry::new();
        let counts = Counts::new(&metrics);
        let (sink, _closed) = closed_sink(&counts);
        let (tx, rx) = mpsc::channel(2 * MAX_BATCH);
        let (_stop, stopped) = oneshot::channel();
        let backlog = Arc::new(Backlog::default());
        let signal = backlog.clone();
        tokio::spawn(async move { run(rx, &backlog, sink, stopped).await });
        assert!(tx.send(traced()).await.is_ok());
        tokio::time::sleep(Duration::from_millis(1)).await;
        // A whole batch queued behind the one lingering.
        for _ in 0..MAX_BATCH {
            // As `Telemetry::submit` does.
            assert!(tx.send(traced()).await.is_ok());
            signal.sent(2 * MAX_BATCH - tx.capacity());
        }
        let full = tokio::time::Instant::now();
        // Well inside the linger: a batch went at once, and its export failed.
        let mut failed = 0;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            failed = counts.failed.load(Ordering::Relaxed);
            if failed > 0 {
                break;
            }
        }
        assert_eq!(failed, MAX_BATCH as u64, "one whole batch");
        assert!(
            full.elapsed() < LINGER,
            "exported after {:?}",
            full.elapsed()
        );
    }

    /// A sink whose connections are refused: its port is held by the socket returned (bound,
    /// not listening), so no other test's listener takes it while the test runs.
    fn closed_sink(counts: &Counts) -> (Sink, tokio::net::TcpSocket) {
        let bound = tokio::net::TcpSocket::new_v4().expect("a socket");
        bound
            .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("a free port");
        let addr = bound.local_addr().expect("its address");
        let closed = format!("http://{addr}/v1/traces");
        let sink = Sink {
            client: reqwest::Client::new(),
            url: closed,
            resource: Vec::new(),
            scope: Vec::new(),
            counts: counts.clone(),
            failing: false,
        };
        (sink, bound)
    }

    /// A stop while a batch lingers ends the loop after that batch and a last round of what
    /// came meanwhile (the stop signal is not polled again once it fired).
    #[tokio::test]
    async fn a_stop_during_the_linger_ends_after_a_last_round() {
        let metrics = Registry::new();
        let counts = Counts::new(&metrics);
        let (sink, _closed) = closed_sink(&counts);
        let (tx, rx) = mpsc::channel(16);
        let (stop, stopped) = oneshot::channel();
        let backlog = Arc::new(Backlog::default());
        let exporter = tokio::spawn(async move { run(rx, &backlog, sink, stopped).await });
        assert!(tx.send(traced()).await.is_ok());
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = stop.send(());
        assert!(tx.send(traced()).await.is_ok());
        let ended = tokio::time::timeout(Duration::from_secs(20), exporter).await;
        assert!(
            matches!(ended, Ok(Ok(()))),
            "the loop ended cleanly: {ended:?}"
        );
        // One span each (no attempts), both tried: the collector is down.
        let failed = counts.failed.load(Ordering::Relaxed);
        assert_eq!(failed, 2);
    }
}

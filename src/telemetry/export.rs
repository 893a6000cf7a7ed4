//! The exporter: a thread of its own (with a single-threaded runtime), so writing and posting
//! spans never holds up a server thread. It takes traced requests off the queue in batches,
//! writes their spans into one OTLP `ExportTraceServiceRequest` (the protocol's published
//! messages, `opentelemetry-proto`), encodes it (protobuf) and posts it to
//! `{otlp_endpoint}/v1/traces`, within a time and answer-size bound. A failed export is not
//! retried: its spans are counted and the next batch goes on.

use std::sync::atomic::Ordering;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use super::{spans, Counts, Traced};
use crate::config::TelemetryConfig;

/// Most traced requests in one export.
const MAX_BATCH: usize = 512;
/// How long a batch waits for more requests after its first.
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
    resource: Resource,
    scope: InstrumentationScope,
    counts: Counts,
    /// The last export failed (the log says so once per outage).
    failing: bool,
}

impl Exporter {
    pub(super) fn start(
        config: &TelemetryConfig,
        queue: mpsc::Receiver<Traced>,
        counts: Counts,
    ) -> Result<Exporter, String> {
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue {
                    value: Some(Value::StringValue(config.service_name.clone())),
                }),
                key_strindex: 0,
            }],
            ..Resource::default()
        };
        let scope = InstrumentationScope {
            name: "switchyard".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..InstrumentationScope::default()
        };
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
                        runtime.block_on(run(queue, sink, stopped));
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
    mut queue: mpsc::Receiver<Traced>,
    mut sink: Sink,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        tokio::select! {
            n = queue.recv_many(&mut batch, MAX_BATCH) => if n == 0 { break },
            _ = &mut stopped => break,
        }
        // Then the batch fills while this thread sleeps: waiting on the queue instead would wake
        // it for every request (a wake-up costs more than the request's spans).
        tokio::select! {
            _ = tokio::time::sleep(LINGER) => {}
            _ = &mut stopped => {}
        }
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(t) => batch.push(t),
                Err(_) => break,
            }
        }
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

impl Sink {
    /// Export `batch` (emptied).
    async fn export(&mut self, batch: &mut Vec<Traced>, within: Duration) {
        let mut spans = Vec::with_capacity(batch.len() * 3);
        for t in batch.drain(..) {
            spans::spans(t, &mut spans);
        }
        let n = spans.len() as u64;
        let body = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(self.scope.clone()),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec();
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

    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
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

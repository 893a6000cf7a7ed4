//! The exporter task: takes traced requests off the queue in batches, writes their spans and
//! posts them to the collector with the OpenTelemetry OTLP/HTTP exporter (protobuf), over a
//! client of our own (rustls, the request timeout enforced, the answer read within a bound).
//! A failed export is not retried: its spans are counted and the next batch goes on.

use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SpanExporter as _;
use opentelemetry_sdk::Resource;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

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

/// The running exporter task.
pub struct Exporter {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Exporter {
    pub(super) fn start(
        config: &TelemetryConfig,
        queue: mpsc::Receiver<Traced>,
        counts: Counts,
    ) -> Result<Exporter, String> {
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("telemetry: the HTTP client: {e}"))?;
        let mut otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url())
            .with_timeout(EXPORT_TIMEOUT)
            // Retries would sleep on a thread of ours: a failed batch is counted instead.
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .with_http_client(Poster(client))
            .build()
            .map_err(|e| format!("telemetry: {e}"))?;
        otlp.set_resource(
            &Resource::builder_empty()
                .with_service_name(config.service_name.clone())
                .build(),
        );
        let scope = InstrumentationScope::builder("switchyard")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(queue, otlp, scope, counts, stopped));
        Ok(Exporter { stop, task })
    }

    /// Export what is queued (within a few seconds) and stop.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "trace exporter task failed");
        }
    }
}

async fn run(
    mut queue: mpsc::Receiver<Traced>,
    otlp: opentelemetry_otlp::SpanExporter,
    scope: InstrumentationScope,
    counts: Counts,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut failing = false;
    loop {
        tokio::select! {
            n = queue.recv_many(&mut batch, MAX_BATCH) => if n == 0 { break },
            _ = &mut stopped => break,
        }
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < MAX_BATCH {
            let room = MAX_BATCH - batch.len();
            tokio::select! {
                n = queue.recv_many(&mut batch, room) => if n == 0 { break },
                _ = &mut linger => break,
            }
        }
        export(
            &otlp,
            &scope,
            &counts,
            &mut batch,
            EXPORT_TIMEOUT,
            &mut failing,
        )
        .await;
    }
    // Shutting down: what is queued now goes in one last round.
    while let Ok(t) = queue.try_recv() {
        batch.push(t);
    }
    if !batch.is_empty() {
        export(
            &otlp,
            &scope,
            &counts,
            &mut batch,
            FLUSH_TIMEOUT,
            &mut failing,
        )
        .await;
    }
}

/// Export `batch` (emptied); `failing` keeps the log to one line per outage.
async fn export(
    otlp: &opentelemetry_otlp::SpanExporter,
    scope: &InstrumentationScope,
    counts: &Counts,
    batch: &mut Vec<Traced>,
    within: Duration,
    failing: &mut bool,
) {
    let mut data = Vec::with_capacity(batch.len() * 3);
    for t in batch.drain(..) {
        spans::spans(t, scope, &mut data);
    }
    let n = data.len() as u64;
    let result = match tokio::time::timeout(within, otlp.export(data)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", within.as_secs())),
    };
    match result {
        Ok(()) => {
            counts.exported.fetch_add(n, Ordering::Relaxed);
            if std::mem::take(failing) {
                tracing::info!("trace export works again");
            }
        }
        Err(error) => {
            counts.failed.fetch_add(n, Ordering::Relaxed);
            if !std::mem::replace(failing, true) {
                tracing::warn!(%error, spans = n, "trace export failed; spans are dropped until it works");
            }
        }
    }
}

/// The OTLP exporter's HTTP client: reqwest (rustls), bounded in time and answer size.
#[derive(Debug)]
struct Poster(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Poster {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut resp = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut answer = http::Response::builder().status(resp.status());
        if let Some(h) = answer.headers_mut() {
            *h = std::mem::take(resp.headers_mut());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err("the collector's answer is too large".into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(answer.body(Bytes::from(body))?)
    }
}

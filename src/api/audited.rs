//! Filing a request at the edge, to the audit log and (when it is traced) the trace exporter:
//! at once for whole answers and errors, and when the stream ends for streams (complete,
//! broken, or abandoned by the client).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::ApiError;
use crate::audit::millis;
use crate::audit::{Audit, AuditRecord};
use crate::routing::path::{Attempt, AttemptOutcome};
use crate::routing::relay::StreamReport;
use crate::routing::request::Request;
use crate::telemetry::{Telemetry, Traced};
use crate::wire::trace::Trace;
use crate::wire::Usage;

/// Where a finished request goes: the audit log, and the trace exporter when it is traced.
#[derive(Clone)]
pub(crate) struct Recorder {
    pub(crate) audit: Audit,
    pub(crate) telemetry: Telemetry,
}

/// A request as it ends: its audit record (whose `path` is written from `path` when it is
/// filed), its path as the race kept it, and its trace.
pub(super) struct Finished {
    pub record: AuditRecord,
    /// Targets passed over (breaker open, then retry budget spent), then the attempts.
    pub path: Vec<Attempt>,
    pub trace: Option<Trace>,
}

impl Recorder {
    /// Whether a request's record is kept at all: the audit log is on or the request is traced.
    pub(super) fn keeps(&self, trace: Option<&Trace>) -> bool {
        self.audit.enabled() || trace.is_some()
    }

    /// What is known when the request starts.
    pub(super) fn draft(
        &self,
        req: &Request,
        route: &str,
        client_key_id: Option<String>,
    ) -> Finished {
        let record = AuditRecord {
            client_key_id,
            stream: req.stream,
            // What the client sent, in its own dialect.
            request_body: self.audit.bodies().then(|| {
                let body = match req.forms.client_body() {
                    Some(body) => &body[..],
                    None => req.forms.chat().map_or(&[][..], |c| &c.body()[..]),
                };
                String::from_utf8_lossy(body).into_owned()
            }),
            session: req.session.as_ref().map(|s| s.key.clone()),
            trace_id: req.trace_id.clone(),
            ..AuditRecord::new(req.id.clone(), time_ms(&req.id), route.to_owned())
        };
        Finished {
            record,
            path: Vec::new(),
            trace: req.trace,
        }
    }

    /// File a request that took `latency`: its record to the audit log, its spans to the
    /// exporter.
    pub(super) fn file(&self, f: Finished, latency: Duration) {
        let Finished {
            mut record,
            path,
            trace,
        } = f;
        record.latency_ms = millis(latency);
        let Some(trace) = trace else {
            record.path = path.iter().map(Attempt::audit).collect();
            self.audit.submit(record);
            return;
        };
        let traced = if self.audit.enabled() {
            record.path = path.iter().map(Attempt::audit).collect();
            // The spans carry neither bodies nor the stored path.
            let request_body = record.request_body.take();
            let response_body = record.response_body.take();
            let stored = std::mem::take(&mut record.path);
            let copy = record.clone();
            record.request_body = request_body;
            record.response_body = response_body;
            record.path = stored;
            self.audit.submit(record);
            copy
        } else {
            record
        };
        self.telemetry.submit(Traced {
            trace,
            end: SystemTime::now(),
            latency,
            record: traced,
            path,
        });
    }
}

/// The record of a request refused before any attempt (bad key, header or body, unknown
/// model): its status and error, an empty path. `route` is the model asked for, when known.
pub(super) fn refused(
    audit: &Audit,
    id: &str,
    route: &str,
    stream: bool,
    client_key_id: Option<String>,
    err: &ApiError,
    started: Instant,
) {
    if !audit.enabled() {
        return;
    }
    audit.submit(AuditRecord {
        client_key_id,
        stream,
        status: err.status.as_u16(),
        latency_ms: millis(started.elapsed()),
        error: Some(err.message.clone()),
        ..AuditRecord::new(id.to_owned(), time_ms(id), route.to_owned())
    });
}

/// The time in the id (so a lookup by id can use the time index), else now.
fn time_ms(id: &str) -> i64 {
    crate::request_id::time_ms(id).unwrap_or_else(crate::clock::wall_ms_i64)
}

/// Fill in token counts.
pub(super) fn set_usage(rec: &mut AuditRecord, usage: Option<Usage>) {
    if let Some(u) = usage {
        rec.tokens_in = Some(u.prompt_tokens);
        rec.tokens_out = Some(u.completion_tokens);
        rec.cache_read_tokens = Some(u.cache_read_tokens);
        rec.cache_write_tokens = Some(u.cache_write_tokens);
    }
}

/// A stream body that files its request when it ends or is dropped.
pub(super) struct AuditedStream {
    inner: BoxStream<'static, Result<Bytes, Infallible>>,
    finished: Option<Finished>,
    /// The entry of the path whose attempt committed the stream.
    served: Option<usize>,
    recorder: Recorder,
    report: oneshot::Receiver<StreamReport>,
    started: Instant,
}

impl AuditedStream {
    /// Wrap `inner`; `finished` has everything but how the stream ends; `served` is the entry
    /// of its path that committed the stream.
    pub(super) fn new(
        inner: BoxStream<'static, Result<Bytes, Infallible>>,
        finished: Finished,
        served: Option<usize>,
        recorder: Recorder,
        report: oneshot::Receiver<StreamReport>,
        started: Instant,
    ) -> Self {
        AuditedStream {
            inner,
            finished: Some(finished),
            served,
            recorder,
            report,
            started,
        }
    }

    fn submit(&mut self) {
        let Some(mut f) = self.finished.take() else {
            return;
        };
        // The report says how the committed attempt really ended and which targets continued
        // the answer after it.
        let served = self.served.filter(|&i| i < f.path.len());
        match self.report.try_recv() {
            Ok(report) => {
                set_usage(&mut f.record, report.usage);
                let mut attempts = report.attempts.into_iter();
                if let (Some(i), Some(first)) = (served, attempts.next()) {
                    f.path[i].duration = first.duration;
                    f.path[i].outcome = first.outcome;
                }
                for a in attempts {
                    f.record.target = Some(a.target.id().to_owned());
                    f.path.push(a);
                }
                f.record.error = report.error;
            }
            Err(_) => {
                if let Some(i) = served {
                    f.path[i].outcome = AttemptOutcome::Cancelled;
                }
                f.record.error = Some("the client disconnected before the stream ended".into());
            }
        }
        self.recorder.file(f, self.started.elapsed());
    }
}

impl Stream for AuditedStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(None) = item {
            self.submit();
        }
        item
    }
}

impl Drop for AuditedStream {
    fn drop(&mut self) {
        self.submit();
    }
}

//! Building a request's audit record at the edge: at once for whole answers and errors, and
//! when the stream ends for streams (complete, broken, or abandoned by the client).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::ApiError;
use crate::audit::millis;
use crate::audit::{Audit, AuditRecord};
use crate::routing::path::AttemptOutcome;
use crate::routing::relay::StreamReport;
use crate::routing::request::Request;
use crate::wire::Usage;

/// A record with what is known when the request starts.
pub(super) fn draft(
    audit: &Audit,
    req: &Request,
    route: &str,
    client_key_id: Option<String>,
) -> AuditRecord {
    AuditRecord {
        client_key_id,
        stream: req.chat.stream,
        request_body: audit
            .bodies()
            .then(|| String::from_utf8_lossy(req.chat.body()).into_owned()),
        session: req.session.as_ref().map(|s| s.key.clone()),
        trace_id: req.trace_id.clone(),
        ..AuditRecord::new(req.id.clone(), time_ms(&req.id), route.to_owned())
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
    }
}

/// A stream body that submits its audit record when it ends or is dropped.
pub(super) struct AuditedStream {
    inner: BoxStream<'static, Result<Bytes, Infallible>>,
    record: Option<AuditRecord>,
    /// The entry of the record's path whose attempt committed the stream.
    served: Option<usize>,
    audit: Audit,
    report: oneshot::Receiver<StreamReport>,
    started: Instant,
}

impl AuditedStream {
    /// Wrap `inner`; `record` has everything but how the stream ends; `served` is the entry
    /// of its path that committed the stream.
    pub(super) fn new(
        inner: BoxStream<'static, Result<Bytes, Infallible>>,
        record: AuditRecord,
        served: Option<usize>,
        audit: Audit,
        report: oneshot::Receiver<StreamReport>,
        started: Instant,
    ) -> Self {
        AuditedStream {
            inner,
            record: Some(record),
            served,
            audit,
            report,
            started,
        }
    }

    fn submit(&mut self) {
        let Some(mut rec) = self.record.take() else {
            return;
        };
        rec.latency_ms = millis(self.started.elapsed());
        // The report says how the committed attempt really ended and which targets continued
        // the answer after it.
        let served = self.served.filter(|&i| i < rec.path.len());
        match self.report.try_recv() {
            Ok(report) => {
                set_usage(&mut rec, report.usage);
                let mut attempts = report.attempts.iter();
                if let (Some(i), Some(first)) = (served, attempts.next()) {
                    rec.path[i].duration_ms = millis(first.duration);
                    rec.path[i].outcome = first.outcome.label().to_owned();
                }
                for a in attempts {
                    rec.target = Some(a.target.id().to_owned());
                    rec.path.push(a.audit());
                }
                rec.error = report.error;
            }
            Err(_) => {
                if let Some(i) = served {
                    rec.path[i].outcome = AttemptOutcome::Cancelled.label().to_owned();
                }
                rec.error = Some("the client disconnected before the stream ended".into());
            }
        }
        self.audit.submit(rec);
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

//! What every client API shares once its dialect's body is read: client keys, per-request
//! controls, the route, the failover loop, the audit record, and the answer written back in
//! the client's dialect (OpenAI chunks and bodies inside, converted at this edge for others).

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::time::Instant;

use super::audited::{self, AuditedStream, Finished, Recorder};
use super::error::ApiError;
use super::stamp::{Answered, Content, Stamp};
use super::{headers, AppState};

mod body;
pub(super) use self::body::read_body;
use crate::audit::millis;
use crate::canonical::Dialect;
use crate::config::parse_duration;
use crate::routing::dispatch::dispatch;
use crate::routing::request::{Answer, Request};
use crate::wire::trace::TraceParent;
use crate::wire::transcode;
use crate::wire::{ClientWire, Forms};

/// `resp` under request `id` (a client API answer carries its id in its [`Stamp`]).
pub(super) fn with_id(mut resp: Response, id: String) -> Response {
    resp.headers_mut()
        .insert(headers::REQUEST_ID, super::stamp::id_value(id));
    resp
}

/// The headers the edge reads of every client request, found in one pass over them: a hashed
/// lookup per name cost about 230 instructions (bench/instructions), six a request, where a
/// client sends a handful of headers. The first value of each, as `HeaderMap::get`. Each is
/// one of [`headers::READ`], the fields the client API is given.
#[derive(Default)]
struct EdgeHeaders<'h> {
    origin: Option<&'h HeaderValue>,
    host: Option<&'h HeaderValue>,
    failover: Option<&'h HeaderValue>,
    timeout: Option<&'h HeaderValue>,
    session: Option<&'h HeaderValue>,
    traceparent: Option<&'h HeaderValue>,
}

impl<'h> EdgeHeaders<'h> {
    fn of(h: &'h HeaderMap) -> EdgeHeaders<'h> {
        let mut found = EdgeHeaders::default();
        for (name, value) in h {
            // The names of `header::ORIGIN`, `header::HOST`, `headers::FAILOVER`,
            // `headers::TIMEOUT`, `session::HEADER` and `TRACEPARENT` (a test checks them).
            let slot = match name.as_str() {
                "origin" => &mut found.origin,
                "host" => &mut found.host,
                "x-switchyard-failover" => &mut found.failover,
                "x-switchyard-timeout" => &mut found.timeout,
                "x-switchyard-session" => &mut found.session,
                "traceparent" => &mut found.traceparent,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        found
    }

    /// Per-request controls: whether to fail over, and the client's timeout.
    fn controls(&self) -> Result<(bool, Option<std::time::Duration>), ApiError> {
        let failover = match self.failover.map(|v| v.to_str()) {
            None => true,
            Some(Ok(v)) if v.eq_ignore_ascii_case("off") => false,
            Some(Ok(v)) if v.eq_ignore_ascii_case("on") => true,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "invalid_header",
                    format!("{} must be `on` or `off`", headers::FAILOVER),
                ))
            }
        };
        let timeout = match self.timeout.map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) => match parse_duration(v) {
                Ok(d) if !d.is_zero() => Some(d),
                _ => {
                    return Err(ApiError::bad_request(
                        "invalid_header",
                        format!(
                            "{} must be a duration such as `20s` or `800ms`",
                            headers::TIMEOUT
                        ),
                    ))
                }
            },
            Some(Err(_)) => {
                return Err(ApiError::bad_request(
                    "invalid_header",
                    "invalid timeout header",
                ))
            }
        };
        Ok((failover, timeout))
    }
}

/// A client request at the edge, before its body is parsed: who sent it and what it asks.
pub(super) struct Edge {
    /// When the request arrived (latency and time to first token count from here).
    pub started: Instant,
    pub client_key_id: Option<String>,
    pub failover: bool,
    pub timeout: Option<std::time::Duration>,
    pub body: Bytes,
    /// `x-switchyard-session`, when sent.
    pub session: Option<HeaderValue>,
    /// The client's `traceparent`, when it sent a valid one.
    pub traceparent: Option<TraceParent>,
}

impl Edge {
    /// Check who may ask (`guard::client`: the client key, or a browser's origin and host)
    /// and the control headers, read the body within `max_body` and `body_timeout`.
    pub(super) async fn open(
        state: &AppState,
        h: &HeaderMap,
        body: Body,
        started: Instant,
    ) -> Result<Edge, ApiError> {
        let found = EdgeHeaders::of(h);
        let client_key_id = super::guard::client_of(state, h, found.origin, found.host)?;
        let (failover, timeout) = found.controls()?;
        let session = found.session.cloned();
        let traceparent = found.traceparent.and_then(TraceParent::parse);
        let body = read_body(state, body).await?;
        Ok(Edge {
            started,
            client_key_id,
            failover,
            timeout,
            body,
            session,
            traceparent,
        })
    }
}

/// A JSON body with `status` (its content type goes in the stamp).
fn json_response(status: StatusCode, body: Bytes) -> (Response, Content) {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    (r, Content::Json)
}

/// A whole answer of dialect `from` (the inner one, or the client's own) in the client's.
fn full_body(dialect: Dialect, body: Bytes, from: Dialect) -> Bytes {
    if dialect == from {
        return body;
    }
    match from
        .parse_response(&body)
        .and_then(|r| dialect.write_response(&r))
    {
        Ok(out) => Bytes::from(out),
        Err(_) => body,
    }
}

/// A provider's client error of dialect `from` in the client's dialect.
fn error_body(dialect: Dialect, status: StatusCode, body: Bytes, from: Dialect) -> Bytes {
    if dialect == from {
        return body;
    }
    let err = from.parse_error(status.as_u16(), &body);
    Bytes::from(dialect.write_error(&err))
}

/// Files a request whose client disconnected before its answer. Holds what its record is drafted
/// from rather than the draft: the draft (~400 bytes) would be carried through every await of
/// the request, and moved with it.
struct Abandoned<'a> {
    recorder: &'a Recorder,
    /// The request, its route's name and the client's key id, while it is to be filed.
    draft: Option<(&'a Request, &'a str, Option<String>)>,
    started: Instant,
}

impl Abandoned<'_> {
    /// The record's draft, if the request is filed; the guard files nothing after this.
    fn take(&mut self) -> Option<Finished> {
        let (req, route, client_key_id) = self.draft.take()?;
        Some(self.recorder.draft(req, route, client_key_id))
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if let Some(mut f) = self.take() {
            f.record.status = 499;
            f.record.error =
                Some("the client disconnected before the answer; attempts were cancelled".into());
            self.recorder.file(f, self.started.elapsed());
        }
    }
}

/// What a client API asks of [`respond`], its body read.
pub(super) struct Asked {
    /// The client's dialect: the answer is written in it.
    pub dialect: Dialect,
    /// The route the client asked for (`model`).
    pub model: String,
    /// The client asked for SSE.
    pub stream: bool,
    /// The client wants a stream's final usage (always, in a dialect other than OpenAI).
    pub client_wants_usage: bool,
    /// The request's inner and canonical forms (made when a target needs them). Shared from
    /// the start: the request carries them to every attempt.
    pub forms: Arc<Forms>,
    /// What targets of the client's own dialect get as it came.
    pub client: ClientWire,
    /// A Responses API request: the id the answer goes under, and what the gateway keeps.
    pub minted: Option<super::responses::Minted>,
}

/// Route, dispatch, audit and answer one request under request `id`, which it takes (the
/// answer carries it: moved through the request, not copied); an unknown model is answered
/// (404) and recorded here too.
pub(super) async fn respond(
    state: &AppState,
    edge: Edge,
    id: &mut String,
    asked: Asked,
) -> Answered {
    let Asked {
        dialect,
        model,
        stream,
        client_wants_usage,
        forms,
        client,
        mut minted,
    } = asked;
    let started = edge.started;
    let routing = state.routing.load_full();
    let Some(route) = routing.route(&model) else {
        let err = ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "the model `{model}` does not exist on this gateway; GET /v1/models lists them"
            ),
        );
        audited::refused(
            &state.audit,
            id,
            &model,
            stream,
            edge.client_key_id,
            &err,
            started,
        );
        return Answered::refused(err.into_dialect_response(dialect)).with_id(std::mem::take(id));
    };
    // For the audit record, and where a route keeps conversations on one target.
    let session = (route.selection.affinity || state.audit.enabled())
        .then(|| crate::wire::session::session(edge.session.as_ref(), dialect, &forms));
    let trace = state.telemetry.trace(edge.traceparent);
    let req = Request {
        id: std::mem::take(id),
        stream,
        client_wants_usage,
        failover: edge.failover,
        timeout: edge.timeout,
        forms,
        client,
        session: session.flatten(),
        // For the audit record: the gateway's trace when it traces the request, else the
        // client's.
        trace_id: (trace.map(|t| t.trace_id))
            .or(edge.traceparent.map(|p| p.trace_id))
            .filter(|_| state.audit.enabled())
            .map(|id| format!("{id:032x}")),
        trace,
    };
    let recorder = &state.recorder();
    // A client that goes away drops this future mid-dispatch: the guard still files a record.
    let mut guard = Abandoned {
        recorder,
        draft: recorder
            .keeps(req.trace.as_ref())
            .then(|| (&req, &*route.config.name, edge.client_key_id)),
        started,
    };
    let mut outcome = dispatch(route, &req).await;
    let mut finished = guard.take();
    let attempts = outcome.path.len();
    let hedged = outcome.hedged;
    let turns_dropped = outcome.turns_dropped;
    let served = outcome.served_by().cloned();
    // The entry of the path that committed a stream (kept only when the request is filed).
    let mut served_entry = None;
    if let Some(f) = &mut finished {
        (f.path, served_entry) = outcome.take_path();
        f.record.target = served.as_ref().map(|t| t.id().to_owned());
        f.record.hedged = hedged;
        f.record.turns_dropped = turns_dropped as u32;
    }
    let mut record = finished.as_mut().map(|f| &mut f.record);
    let (response, content) = match outcome.result {
        Ok(Answer::Full {
            body,
            usage,
            dialect: from,
        }) => {
            if let Some(rec) = &mut record {
                rec.status = 200;
                audited::set_usage(rec, usage);
                if state.audit.bodies() {
                    rec.response_body = Some(String::from_utf8_lossy(&body).into_owned());
                }
            }
            let body = match &mut minted {
                Some(m) => m.full(body, from, served.as_deref()),
                None => full_body(dialect, body, from),
            };
            json_response(StatusCode::OK, body)
        }
        Ok(Answer::Stream {
            body,
            report,
            dialect: from,
        }) => {
            // The client's time to first token: from its request, failed attempts included
            // (the attempt's own is in the target's SLIs).
            let ttft = started.elapsed();
            let body = match finished.take() {
                Some(mut f) => {
                    f.record.status = 200;
                    f.record.ttft_ms = Some(millis(ttft));
                    Box::pin(AuditedStream::new(
                        body,
                        f,
                        served_entry,
                        recorder.clone(),
                        report,
                        started,
                    ))
                }
                None => body,
            };
            let body = match &mut minted {
                Some(m) => m.stream(body, from, served.as_deref()),
                None if dialect == from => body,
                None => transcode::stream_from_openai(body, dialect),
            };
            (Response::new(Body::from_stream(body)), Content::EventStream)
        }
        Ok(Answer::Upstream {
            status,
            body,
            dialect: from,
        }) => {
            // A provider's error may echo its credential ("Incorrect API key provided: sk-..."):
            // masked before it reaches the client. Only error answers are scanned: a success
            // is the model's answer, which never saw our keys, and scanning every answer (and
            // every stream chunk) would cost a pass over each body on the hot path.
            let body = route.redactor.redact_bytes(body);
            if let Some(rec) = &mut record {
                rec.status = status.as_u16();
                rec.error = Some(String::from_utf8_lossy(&body).chars().take(1000).collect());
            }
            json_response(status, error_body(dialect, status, body, from))
        }
        Err(f) => {
            // The message lists each attempt's error, a provider's own words included.
            let message = route.redactor.redact(&f.message).into_owned();
            if let Some(rec) = &mut record {
                rec.status = f.status.as_u16();
                rec.error = Some(message.clone());
            }
            let resp = ApiError::new(f.status, "upstream_error", f.code, message)
                .into_dialect_response(dialect);
            (resp, Content::Own)
        }
    };
    if let Some(f) = finished {
        recorder.file(f, started.elapsed());
    }
    // The guard (its draft taken above) borrows the request, whose id the answer takes.
    drop(guard);
    Answered {
        response,
        stamp: Stamp {
            request_id: req.id,
            content,
            target: served.map(|target| target.header.clone()),
            attempts,
            hedged,
            turns_dropped,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    /// The one pass finds each header under the name the rest of the gateway uses for it, and
    /// the first value of a repeated one.
    #[test]
    fn the_edge_finds_its_headers_by_their_names() {
        let mut h = HeaderMap::new();
        let v = |s: &'static str| HeaderValue::from_static(s);
        h.insert(header::CONTENT_TYPE, v("application/json"));
        h.insert(header::ORIGIN, v("o"));
        h.insert(header::HOST, v("h"));
        h.insert(headers::FAILOVER, v("off"));
        h.append(headers::FAILOVER, v("on"));
        h.insert(headers::TIMEOUT, v("2s"));
        h.insert(crate::wire::session::HEADER, v("s"));
        h.insert(crate::wire::trace::TRACEPARENT, v("t"));
        let found = EdgeHeaders::of(&h);
        assert_eq!(found.origin, Some(&v("o")));
        assert_eq!(found.host, Some(&v("h")));
        assert_eq!(found.failover, Some(&v("off")));
        assert_eq!(found.timeout, Some(&v("2s")));
        assert_eq!(found.session, Some(&v("s")));
        assert_eq!(found.traceparent, Some(&v("t")));
        assert_eq!(
            found.controls().unwrap(),
            (false, Some(std::time::Duration::from_secs(2)))
        );
        // The client API is given only the fields of `headers::READ` (`app::conn::h1`).
        for name in h.keys().filter(|n| **n != header::CONTENT_TYPE) {
            assert!(headers::READ.contains(name), "{name}");
        }
        let none = HeaderMap::new();
        let found = EdgeHeaders::of(&none);
        assert!(found.origin.is_none() && found.host.is_none() && found.session.is_none());
        assert_eq!(found.controls().unwrap(), (true, None));
    }
}

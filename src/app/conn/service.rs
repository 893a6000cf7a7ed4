//! A connection's service: each request routed (a client API's answer, the router's, or a
//! refusal over `max_in_flight`) and its response body tracked, so that the connection knows
//! when the request is done.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use hyper::body::{Frame, Incoming, SizeHint};
use tower_service::Service as _;

use super::ConnState;
use crate::api::error::ApiError;
use crate::api::{headers, Answered, Answering, App, ClientApi, Stamp};
use crate::canonical::Dialect;
use crate::metrics::bump;

/// What a 503 for `max_in_flight` asks the client to wait: requests finish in seconds.
const RETRY_AFTER_SECS: &str = "1";

/// The gateway as one connection's hyper service: it marks each request's phases and admits
/// client API requests under `max_in_flight`.
pub(super) struct Svc {
    pub(super) app: App,
    pub(super) conn: Arc<ConnState>,
}

impl hyper::service::Service<Request<Incoming>> for Svc {
    type Response = http::Response<Tracked>;
    type Error = Infallible;
    type Future = Routed;

    fn call(&self, req: Request<Incoming>) -> Routed {
        self.route(req.map(Body::new), false)
    }
}

impl Svc {
    /// `req`'s response on its way. With `stamped`, the writer writes a client API answer's
    /// gateway fields from its [`Tracked::stamp`] (the gateway's own HTTP/1.1 writer);
    /// without, they go into the response's map (hyper).
    pub(super) fn route(&self, req: Request<Body>, stamped: bool) -> Routed {
        self.conn.begin();
        let mut done = Done {
            conn: self.conn.clone(),
            in_flight: false,
        };
        let gate = &self.conn.slot.0;
        if let Some(api) = ClientApi::of(req.uri().path()) {
            if !gate.admit() {
                bump(&gate.counters.max_in_flight);
                let id = crate::request_id::new();
                let resp = overloaded(api.dialect(), gate.max_in_flight, &id);
                gate.record_refusal(&id, OVERLOADED);
                return Routed::Refused(Some(Box::new((resp, done))));
            }
            done.in_flight = true;
            if req.method() == http::Method::POST {
                let future = self.app.client_api(api, req);
                return Routed::Direct(future, Some(done), stamped);
            }
        }
        // The router is always ready; a clone is a reference count.
        let future = Box::new(self.app.router().clone().call(req));
        Routed::Running(future, Some(done))
    }
}

/// The audit record's error for a request over `max_in_flight`.
const OVERLOADED: &str = "refused: the gateway was at its max_in_flight";

/// The 503 for a request over `max_in_flight`, in the client's dialect, under request `id`.
fn overloaded(dialect: Dialect, max: usize, id: &str) -> Response {
    let message = format!(
        "the gateway is at its max_in_flight ({max} requests); retry after {RETRY_AFTER_SECS} s"
    );
    let err = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "overloaded_error",
        "gateway_overloaded",
        message,
    );
    let mut resp = err.into_dialect_response(dialect);
    let h = resp.headers_mut();
    h.insert(
        http::header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECS),
    );
    h.insert(headers::ATTEMPTS, HeaderValue::from_static("0"));
    if let Ok(id) = HeaderValue::from_str(id) {
        h.insert(headers::REQUEST_ID, id);
    }
    resp
}

/// A request's response on its way: a client API's, the router's, or a refusal.
///
/// The rarer variants are boxed: a client API request's `Routed` is moved a few times on its
/// way to being polled, and held the size of a router's future or a response (336 bytes,
/// a `memcpy` each time).
pub(super) enum Routed {
    /// A client API's answer; whether its stamp is the writer's to write.
    Direct(Answering, Option<Done>, bool),
    Running(
        Box<axum::routing::future::RouteFuture<Infallible>>,
        Option<Done>,
    ),
    Refused(Option<Box<(Response, Done)>>),
}

impl Future for Routed {
    type Output = Result<http::Response<Tracked>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (resp, done, stamp) = match self.get_mut() {
            Routed::Direct(future, done, stamped) => match future.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Answered { response, stamp }) if *stamped => {
                    (response, done.take(), Some(stamp))
                }
                Poll::Ready(answered) => (answered.into_response(), done.take(), None),
            },
            Routed::Running(future, done) => match Pin::new(&mut **future).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(resp)) => (resp, done.take(), None),
                Poll::Ready(Err(never)) => match never {},
            },
            Routed::Refused(refusal) => match refusal.take().map(|refused| *refused) {
                Some((resp, done)) => (resp, Some(done), None),
                None => return Poll::Pending, // polled after it completed: never
            },
        };
        Poll::Ready(Ok(resp.map(|body| Tracked { body, done, stamp })))
    }
}

/// Marks a request done when dropped: its response ended (or never will).
#[derive(Debug)]
pub(super) struct Done {
    conn: Arc<ConnState>,
    /// Holds a place under `max_in_flight`.
    in_flight: bool,
}

impl Drop for Done {
    fn drop(&mut self) {
        if self.in_flight {
            self.conn.slot.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        self.conn.end();
    }
}

/// A response body that marks its request done when it ends: a stream holds its place under
/// `max_in_flight` until its last chunk, and the connection is idle only from then on. (A type
/// of its own rather than a boxed body: no allocation per request.)
pub(super) struct Tracked {
    pub(super) body: Body,
    pub(super) done: Option<Done>,
    /// A client API answer's gateway fields, for the writer to write (see [`Svc::route`]).
    pub(super) stamp: Option<Stamp>,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.done = None;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

//! The upstream HTTP client: hyper connections over rustls, one pool per provider, HTTP/1.1
//! keep-alive and HTTP/2 (negotiated by ALPN), no retries or redirects (the failover loop owns
//! retries).
//!
//! HTTP/1.1 is our own (`h1`): a call writes its request and reads its answer from its own
//! task, with no connection task in between. HTTP/2 is hyper's.
//!
//! The pool is our own rather than hyper-util's: a provider has one destination, so a pool is
//! a stack of idle HTTP/1 connections (the most recently used on top) and at most one shared
//! HTTP/2 connection behind one lock. An HTTP/1 connection goes back on the stack when its
//! response body has been read to the end, from inside the body itself; hyper-util's pool spawns
//! a task per response to wait for that, hashes a pool key and races a connect on every
//! checkout: together 9% of the gateway's instructions per request (`bench/instructions`).
//! An idle connection the upstream closed (or sent anything on) is found at checkout, without
//! waiting, and dropped. Idle connections are closed after 60 to 90 s by a sweep every 30 s,
//! without reading the clock per request.
//!
//! With the server on several threads of its own (`app::Server`), each has its own pools: a
//! connection's socket belongs to the runtime that opened it, so a request served on one
//! thread never waits for another thread to be woken to write or read its upstream call.
//!
//! A request that could not be written on a pooled connection (it was closing) is sent on
//! another one; a request once written is never sent again here.
//!
//! A provider behind an egress proxy: the proxy the environment names for its URL
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, minus `NO_PROXY`, read as curl reads them) is
//! used through a `CONNECT` tunnel, with the proxy URL's user and password as basic auth.

use std::borrow::Cow;
use std::cell::Cell;
use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use http::{header, HeaderMap, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyDataStream, BodyExt, Full};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http2;
use hyper_rustls::builderstates::WantsSchemes;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tower_service::Service;

use super::h1;
use crate::config::ProviderConfig;

/// A response body as it arrives.
pub type ByteStream = BoxStream<'static, Result<Bytes, BoxError>>;

/// Why a call or its body failed: the transport's own error.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// An upstream connection's transport: TCP, or TLS over TCP.
type Io = TokioIo<MaybeHttpsStream<TokioIo<TcpStream>>>;

/// Idle HTTP/1 connections kept per provider.
const MAX_IDLE: usize = 256;
/// How often idle connections are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Sweeps an idle connection survives (it is closed after 60 to 90 s idle).
const IDLE_SWEEPS: u64 = 2;

/// How a provider's connections are made (TLS goes on top): straight to it, or through a
/// `CONNECT` tunnel of a proxy.
#[derive(Clone, Debug)]
pub enum Dial {
    Direct(HttpConnector),
    Tunnel(Tunnel<HttpConnector>),
}

impl Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Dial::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Dial::Tunnel(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self {
            Dial::Direct(c) => {
                let connect = c.call(dst);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
            Dial::Tunnel(t) => {
                let connect = t.call(dst);
                Box::pin(async move { connect.await.map_err(Into::into) })
            }
        }
    }
}

/// The dialer for a provider at `base_url`, given the environment's proxy settings.
fn dial(config: &ProviderConfig, proxies: &Matcher) -> Dial {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout));
    let intercept = config
        .base_url
        .parse::<Uri>()
        .ok()
        .and_then(|uri| proxies.intercept(&uri));
    let Some(proxy) = intercept else {
        return Dial::Direct(http);
    };
    tracing::info!(
        provider = %config.name,
        proxy = %proxy.uri().authority().map_or("?", |a| a.host()),
        "provider reached through a CONNECT proxy (from the environment)"
    );
    let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
    if let Some(auth) = proxy.basic_auth() {
        tunnel = tunnel.with_auth(auth.clone());
    }
    Dial::Tunnel(tunnel)
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// No connection: refused, unreachable, DNS, TLS, the proxy's tunnel.
    #[error("connect: {0}")]
    Connect(BoxError),
    /// The connection broke (or the peer spoke no HTTP) before a response head arrived.
    #[error("{0}")]
    Http(BoxError),
}

/// A pooled client for one provider: every request goes to the provider's one destination.
#[derive(Debug)]
pub struct HttpClient {
    connector: HttpsConnector<Dial>,
    /// What every request carries unless it has its own (see [`HttpClient::with_defaults`]).
    defaults: h1::Defaults,
    /// One pool per server thread (see [`enter_worker`]); threads beyond the machine's cores
    /// share them.
    pools: Box<[Arc<Pool>]>,
}

thread_local! {
    /// Which server thread this is (0 for every other thread).
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Mark this thread as server thread `index`: its upstream calls use their own pools.
pub fn enter_worker(index: usize) {
    WORKER.with(|w| w.set(index));
}

/// A connection taken from the pool or just made.
enum Conn {
    H1(Box<h1::Conn<Io>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
    /// Counts sweeps; an idle connection remembers the count it was put back at.
    sweeps: AtomicU64,
    sweeper: OnceLock<()>,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<(Box<h1::Conn<Io>>, u64)>,
    h2: Option<http2::SendRequest<Full<Bytes>>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A panic while holding the lock leaves only a list of connections: still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection for a request: the shared HTTP/2 one, else the idle HTTP/1 one used
    /// last that is still open (those found closed are dropped).
    fn checkout(&self) -> Option<Conn> {
        loop {
            let (mut conn, _) = {
                let mut state = self.lock();
                if let Some(h2) = &state.h2 {
                    if !h2.is_closed() {
                        return Some(Conn::H2(h2.clone()));
                    }
                    state.h2 = None;
                }
                state.idle.pop()?
            };
            if conn.is_open() {
                return Some(Conn::H1(conn));
            }
        }
    }

    fn put(&self, conn: Box<h1::Conn<Io>>) {
        let sweep = self.sweeps.load(Ordering::Relaxed);
        let mut state = self.lock();
        if state.idle.len() < MAX_IDLE {
            state.idle.push((conn, sweep));
        }
    }

    fn set_h2(&self, conn: &http2::SendRequest<Full<Bytes>>) {
        let mut state = self.lock();
        if state.h2.as_ref().is_none_or(|h2| h2.is_closed()) {
            state.h2 = Some(conn.clone());
        }
    }

    /// Close connections idle for `IDLE_SWEEPS` whole sweeps, and those the upstream closed.
    fn sweep(&self) {
        let now = self.sweeps.fetch_add(1, Ordering::Relaxed) + 1;
        let closed = {
            let mut state = self.lock();
            if state.h2.as_ref().is_some_and(|h2| h2.is_closed()) {
                state.h2 = None;
            }
            let before = state.idle.len();
            state
                .idle
                .retain_mut(|(conn, at)| now - *at <= IDLE_SWEEPS && conn.is_open());
            before - state.idle.len()
        };
        if closed > 0 {
            tracing::debug!(closed, "idle upstream connections closed");
        }
    }

    /// Start the sweeps (once, from inside the runtime, at the first connect).
    fn start_sweeping(self: &Arc<Self>) {
        self.sweeper.get_or_init(|| {
            let pool: Weak<Pool> = Arc::downgrade(self);
            tokio::spawn(async move {
                let mut every = tokio::time::interval(SWEEP_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                every.tick().await;
                loop {
                    every.tick().await;
                    let Some(pool) = pool.upgrade() else { break };
                    pool.sweep();
                }
            });
        });
    }
}

/// Build the client for one provider.
pub fn build_client(config: &ProviderConfig) -> HttpClient {
    client_over(config, HttpsConnectorBuilder::new().with_webpki_roots())
}

/// The client for one provider, over `tls` (the roots it trusts).
fn client_over(config: &ProviderConfig, tls: HttpsConnectorBuilder<WantsSchemes>) -> HttpClient {
    let connector = tls
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(dial(config, &Matcher::from_env()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    HttpClient {
        connector,
        defaults: h1::Defaults::default(),
        pools: (0..threads).map(|_| Arc::default()).collect(),
    }
}

impl HttpClient {
    /// The headers every request carries unless it has its own of the name.
    pub fn defaults(&self) -> &[(http::HeaderName, http::HeaderValue)] {
        self.defaults.fields()
    }

    /// The client with `fields` on every request that has no header of the same name.
    pub fn with_defaults(self, fields: Vec<(http::HeaderName, http::HeaderValue)>) -> HttpClient {
        HttpClient {
            defaults: h1::Defaults::new(fields),
            ..self
        }
    }

    /// Send `req` (an absolute URI at this provider, with its `Host` header) and wait for the
    /// response head.
    pub async fn request(&self, req: Request<Bytes>) -> Result<Answer, SendError> {
        let pool = &self.pools[WORKER.with(Cell::get) % self.pools.len()];
        loop {
            let (conn, pooled_conn) = match pool.checkout() {
                Some(conn) => (conn, true),
                // Boxed: a connect (TCP, TLS, handshake) is a large future, and rare; inline,
                // it would make every request's future (moved into a box per attempt) that
                // much larger.
                None => (Box::pin(self.connect(pool, req.uri())).await?, false),
            };
            match conn {
                Conn::H2(conn) => return send_h2(conn, req, &self.defaults).await,
                Conn::H1(conn) => match conn.send(&req, &self.defaults).await {
                    Ok(resp) => return Ok(pooled(pool, resp)),
                    // Not written on a pooled connection: it was closing. Another one takes it.
                    Err(e) if !e.written && pooled_conn => continue,
                    Err(e) => return Err(SendError::Http(e.error.into())),
                },
            }
        }
    }

    /// A new connection to `uri`'s scheme and authority, HTTP/2 if the server chose it by ALPN
    /// (then shared through `pool`).
    async fn connect(&self, pool: &Arc<Pool>, uri: &Uri) -> Result<Conn, SendError> {
        pool.start_sweeping();
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(SendError::Connect)?;
        if io.connected().is_negotiated_h2() {
            let (conn, driver) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(|e| SendError::Http(e.into()))?;
            tokio::spawn(async move {
                if let Err(e) = driver.await {
                    tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
                }
            });
            pool.set_h2(&conn);
            Ok(Conn::H2(conn))
        } else {
            Ok(Conn::H1(h1::Conn::new(TokioIo::new(io))))
        }
    }
}

/// `req` with `defaults` on a shared HTTP/2 connection.
async fn send_h2(
    mut conn: http2::SendRequest<Full<Bytes>>,
    req: Request<Bytes>,
    defaults: &h1::Defaults,
) -> Result<Answer, SendError> {
    let mut req = req.map(Full::new);
    let headers = req.headers_mut();
    for (name, value) in defaults.fields() {
        if !headers.contains_key(name) {
            headers.insert(name.clone(), value.clone());
        }
    }
    // HTTP/2 carries the authority in `:authority`, from the absolute URI.
    headers.remove(header::HOST);
    let resp = conn
        .send_request(req)
        .await
        .map_err(|e| SendError::Http(e.into()))?;
    let (parts, body) = resp.into_parts();
    Ok(Answer {
        status: parts.status,
        head: Head::H2(parts.headers),
        body: Body(Inner::H2(body)),
    })
}

/// An HTTP/1 answer whose connection goes back to `pool` when its body has been read.
fn pooled(pool: &Arc<Pool>, answer: h1::Answer<Io>) -> Answer {
    Answer {
        status: answer.status,
        head: Head::H1(answer.head),
        body: Body(Inner::H1(answer.body, Arc::clone(pool))),
    }
}

/// An upstream's answer: its status, its header fields and its body.
#[derive(Debug)]
pub struct Answer {
    status: StatusCode,
    head: Head,
    body: Body,
}

#[derive(Debug)]
enum Head {
    /// As it came: parsed into a map when asked.
    H1(h1::RawHead),
    H2(HeaderMap),
}

impl Answer {
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The header fields. An HTTP/1 answer's are made into a map by this call (a call that
    /// reads none of them parses none): ask once.
    pub fn headers(&self) -> Cow<'_, HeaderMap> {
        match &self.head {
            Head::H1(head) => Cow::Owned(head.map()),
            Head::H2(map) => Cow::Borrowed(map),
        }
    }

    /// The `content-type`, when there is one.
    pub fn content_type(&self) -> Option<&[u8]> {
        match &self.head {
            Head::H1(head) => head.content_type(),
            Head::H2(map) => map.get(header::CONTENT_TYPE).map(HeaderValue::as_bytes),
        }
    }

    pub fn into_body(self) -> Body {
        self.body
    }
}

/// An upstream response body. An HTTP/1 connection is given back to its pool once the body
/// has been read to its end; a body dropped before that closes its connection.
#[derive(Debug)]
pub struct Body(Inner);

#[derive(Debug)]
enum Inner {
    H1(h1::Body<Io>, Arc<Pool>),
    H2(Incoming),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match &mut self.0 {
            Inner::H1(body, pool) => {
                let data = std::task::ready!(body.poll_data(cx));
                if data.is_none() {
                    if let Some(conn) = body.take_idle() {
                        pool.put(conn);
                    }
                }
                Poll::Ready(data.map(|d| d.map(Frame::data).map_err(Into::into)))
            }
            Inner::H2(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::H1(body, _) => body.is_end_stream(),
            Inner::H2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::H1(body, _) => body
                .exact_len()
                .map_or_else(SizeHint::new, SizeHint::with_exact),
            Inner::H2(body) => body.size_hint(),
        }
    }
}

/// A body read whole (tests; the request path reads with [`read_at_most`]).
pub async fn read_all(body: Body) -> Result<Bytes, BoxError> {
    Ok(body.collect().await?.to_bytes())
}

/// A body read up to `max` bytes: the whole body, or, when it is longer (by its
/// `Content-Length` or as it arrives), its first `max` bytes and `true`. What an upstream
/// sends is the upstream's choice: nothing it sends is held beyond `max`. A body left unread
/// closes its connection instead of going back to the pool.
pub async fn read_at_most(mut body: Body, max: usize) -> Result<(Bytes, bool), BoxError> {
    let declared = hyper::body::Body::size_hint(&body).exact();
    let mut buf = bytes::BytesMut::new();
    if declared.is_some_and(|n| n > max as u64) {
        // Read the head of it only (classifying an error body needs its start).
        buf.reserve(max.min(64 * 1024));
    } else if let Some(n) = declared {
        buf.reserve(n as usize);
    }
    let mut first: Option<Bytes> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        // One frame, the usual case, is kept as it came (no copy).
        if first.is_none() && buf.is_empty() && data.len() <= max {
            first = Some(data);
            continue;
        }
        if let Some(f) = first.take() {
            buf.extend_from_slice(&f);
        }
        let room = max - buf.len();
        if data.len() > room {
            buf.extend_from_slice(&data[..room]);
            return Ok((buf.freeze(), true));
        }
        buf.extend_from_slice(&data);
    }
    Ok((first.unwrap_or_else(|| buf.freeze()), false))
}

/// A body as a stream of its data frames.
pub fn stream(body: Body) -> ByteStream {
    BodyDataStream::new(body).boxed()
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;

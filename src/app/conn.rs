//! Client connections: one listener's accept loop and each connection's bounds.
//!
//! A connection is served by [`h1`] (HTTP/1.1 as clients send it, from the connection's own
//! task) until a request that path does not serve arrives; from that request on, by hyper's
//! HTTP/1 and HTTP/2 (h2c) server, below. Both keep the bounds that follow.
//!
//! A client the gateway does not control decides how slowly it sends and how long it keeps a
//! connection; each of these costs a file descriptor, and with too many of them the gateway
//! stops answering anyone (its health checks included). So, per `[server]`:
//!
//! - `header_timeout`: from its accept (on the gateway's own listeners, once its first bytes
//!   came: [`defer_accept`]; or from the first byte of a request on a kept-alive
//!   connection; HTTP/2: from a HEADERS frame), a connection must deliver its request head
//!   within this, else it is closed. Measured while no other request of the connection is in
//!   flight (HTTP/2: a head begun beside a running stream is bounded from when that ends).
//! - `idle_timeout`: a connection with no request in flight and no new one started is closed
//!   (HTTP/2: no stream open; its pings and settings do not keep it open), HTTP/2 with GOAWAY.
//! - `max_connections`: over every server thread; one more is accepted and closed at once.
//! - `max_in_flight`: client API requests (completions, messages and responses; streams until they end)
//!   over every server thread; one more gets 503 with `Retry-After` at once, in the client
//!   dialect's envelope. Operations endpoints (`/healthz`, `/metrics`, ...) are not counted, so
//!   they still answer under overload.
//! - `shutdown_timeout`: the drain after the shutdown signal lasts at most this; then what is
//!   still open is ended (`Shared::close_all`: streams get an error event, races a 503, each
//!   writes its audit record), given [`CLOSE_GRACE`] to say so, and closed.
//!
//! Under hyper, hyper's own `header_read_timeout` is not used: it also runs while a kept-alive
//! connection waits for its next request, which would make `idle_timeout` the header timeout.
//! Instead each connection's I/O notes when a new request starts arriving ([`heads`]; [`h1`]
//! sees it itself) and its service when a request's head is complete and when its response
//! ended ([`service::Done`]); the connection's task holds one timer, moved sooner when a phase is due
//! sooner and later only when it fires early (not once per request), but set anew once a head
//! it was set for has arrived ([`ConnState::poll_due`]). Each of these limits counts in
//! `switchyard_limits_total` when it acts.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

mod h1;
mod heads;
mod service;

use heads::Watched;
use service::{Svc, Tracked};

#[cfg(fuzzing)]
pub use self::h1::fuzz_request;

use super::AppError;
use crate::api::App;
use crate::config::ServerConfig;
use crate::metrics::{bump, LimitCounters};
use crate::routing::Shared;

/// After `shutdown_timeout`, how long what is still open has to write its error event and
/// audit record before its connection is closed.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What every listener of one gateway shares: the `[server]` bounds, the counts they are
/// checked against, and what acts when they are reached.
#[derive(Debug)]
pub(super) struct Gate {
    header_timeout: Duration,
    idle_timeout: Duration,
    max_connections: usize,
    max_in_flight: usize,
    /// `max_body`: a larger body is hyper's to read (the service answers 413).
    max_body: usize,
    pub(super) shutdown_timeout: Duration,
    connections: AtomicUsize,
    in_flight: AtomicUsize,
    counters: LimitCounters,
    shared: Arc<Shared>,
    /// The audit log, once its writer runs: a request refused for `max_in_flight` is recorded.
    audit: std::sync::OnceLock<crate::audit::Audit>,
}

impl Gate {
    pub(super) fn new(server: &ServerConfig, shared: Arc<Shared>) -> Arc<Gate> {
        Arc::new(Gate {
            header_timeout: server.header_timeout,
            idle_timeout: server.idle_timeout,
            max_connections: server.max_connections as usize,
            max_in_flight: server.max_in_flight as usize,
            max_body: server.max_body,
            shutdown_timeout: server.shutdown_timeout,
            connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            counters: shared.limits.clone(),
            shared,
            audit: std::sync::OnceLock::new(),
        })
    }

    /// Record refusals in `audit` from now on (set once: the first call wins).
    pub(super) fn set_audit(&self, audit: &crate::audit::Audit) {
        let _ = self.audit.set(audit.clone());
    }

    /// The audit record of a request refused for `max_in_flight`: no route (its body was not
    /// read), no attempt.
    fn record_refusal(&self, id: &str, message: &str) {
        let Some(audit) = self.audit.get().filter(|a| a.enabled()) else {
            return;
        };
        let time = crate::request_id::time_ms(id).unwrap_or_else(crate::clock::wall_ms_i64);
        let mut record = crate::audit::AuditRecord::new(id.to_owned(), time, String::new());
        record.status = StatusCode::SERVICE_UNAVAILABLE.as_u16();
        record.error = Some(message.to_owned());
        audit.submit(record);
    }

    /// Take a place for one more connection, if there is one.
    fn connect(self: &Arc<Self>) -> Option<ConnSlot> {
        take(&self.connections, self.max_connections).then(|| ConnSlot(self.clone()))
    }

    /// Take a place for one more client API request, if there is one.
    fn admit(&self) -> bool {
        take(&self.in_flight, self.max_in_flight)
    }
}

/// One more of `count`, unless it is at `max`.
fn take(count: &AtomicUsize, max: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

/// A connection's place under `max_connections`, given back when it closes.
#[derive(Debug)]
struct ConnSlot(Arc<Gate>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether the connections `listener` accepts have `TCP_NODELAY` from it: Linux copies it
/// from a listener that had it when they connected, as [`super::Server`]'s listeners have
/// from before they listen. That spares a `setsockopt` a connection; elsewhere (another
/// system, a listener bound by the caller of [`super::serve`]) each connection sets its own.
fn no_delay_from(listener: &TcpListener) -> bool {
    cfg!(any(target_os = "linux", target_os = "android"))
        && socket2::SockRef::from(listener)
            .tcp_nodelay()
            .unwrap_or(false)
}

/// How long the kernel holds a new connection that has sent nothing before handing it over
/// anyway (see [`defer_accept`]); from then on `header_timeout` bounds it, as any other.
pub(super) const DEFER_ACCEPT_SECS: u32 = 1;

/// Have `listener` hand a new connection over only once its first bytes have arrived (Linux's
/// `TCP_DEFER_ACCEPT`), or after [`DEFER_ACCEPT_SECS`] without any: a client speaks first in
/// HTTP, so the accept and the first request's read are one wake-up of the server thread, not
/// two. Without it the listener's wake-up lands on the core where the client has just
/// connected and waits to send, and the client sends only once the accept's work is done (a
/// new connection's first request ~45 µs slower, docs/BENCHMARKS.md, "sixteenth session").
/// Apache's `AcceptFilter http data` and nginx's `listen ... deferred` are the same option.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
pub(super) fn defer_accept(listener: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let seconds = libc::c_int::try_from(DEFER_ACCEPT_SECS).unwrap_or(libc::c_int::MAX);
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .unwrap_or(libc::socklen_t::MAX);
    // SAFETY: the descriptor is borrowed from a live socket for the call, and the value is an
    // initialised `c_int` on the stack whose size is passed with it; the kernel only reads it.
    let done = unsafe {
        libc::setsockopt(
            listener.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&seconds).cast(),
            len,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Serve `listener` until `shutdown` resolves, then drain its connections (at most
/// `shutdown_timeout`, then [`CLOSE_GRACE`] for what is ended).
pub(super) async fn serve_on(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
    gate: Arc<Gate>,
) -> Result<(), AppError> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Ours instead (see the module doc); hyper's would also cut idle kept-alive connections.
    builder.http1().header_read_timeout(None);
    let builder = Arc::new(builder);
    let inherited = no_delay_from(&listener);
    let (drain, draining) = tokio::sync::watch::channel(false);
    let mut conns = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let Some(slot) = gate.connect() else {
                        bump(&gate.counters.max_connections);
                        drop(tcp);
                        continue;
                    };
                    // Small writes (SSE chunks, headers then body) must leave at once: no
                    // Nagle.
                    if !inherited {
                        let _ = tcp.set_nodelay(true);
                    }
                    let (app, builder, draining) = (app.clone(), builder.clone(), draining.clone());
                    // Boxed: the task then holds a pointer, not the connection's whole state,
                    // which tokio copies into the task and at each change of its stage (~3,400
                    // instructions of copying a connection, `FRESH=1 bench/instructions`).
                    conns.spawn(Box::pin(connection(tcp, slot, app, builder, draining)));
                    // The connection first: its request is there (`defer_accept`), while the
                    // next turn of this loop (the listener asked again, for nothing most
                    // times, the drain and the finished connections looked at) can wait.
                    behind_ready().await;
                }
                Err(e) => accept_failed(e).await,
            },
        }
    }
    drop(listener);
    let _ = drain.send(true);
    if tokio::time::timeout(gate.shutdown_timeout, all_closed(&mut conns))
        .await
        .is_err()
    {
        let left = conns.len();
        gate.counters
            .shutdown_timeout
            .fetch_add(left as u64, Ordering::Relaxed);
        tracing::warn!(
            connections = left,
            "shutdown_timeout passed: ending the requests and streams still open"
        );
        gate.shared.close_all();
        if tokio::time::timeout(CLOSE_GRACE, all_closed(&mut conns))
            .await
            .is_err()
        {
            conns.shutdown().await;
        }
    }
    Ok(())
}

/// Give the thread up once, queued again at once behind the tasks already ready: unlike
/// `tokio::task::yield_now`, whose task waits for the runtime's next look at its I/O (a
/// system call more), this one runs again as soon as those have.
async fn behind_ready() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

async fn all_closed(conns: &mut JoinSet<()>) {
    while conns.join_next().await.is_some() {}
}

/// An accept that failed: a connection reset before it was taken is nothing; anything else
/// (out of file descriptors) is logged and accepting pauses a second, as hyper's own loops do.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Which bound ended a connection.
enum Ended {
    /// hyper ended it (the client closed, an error, or the graceful shutdown finished).
    Served,
    HeaderTimeout,
    IdleTimeout,
}

/// Serve one connection under its timeouts; gracefully shut down when `draining` turns true.
/// HTTP/1.1 as most clients send it is served by [`h1`]; what it does not serve (HTTP/2,
/// HTTP/1.0, chunked bodies...) by hyper, from the request where it begins.
async fn connection(
    tcp: TcpStream,
    slot: ConnSlot,
    app: App,
    builder: Arc<auto::Builder<TokioExecutor>>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    let state = Arc::new(ConnState::new(slot));
    let service = Svc {
        app,
        conn: state.clone(),
    };
    let (tcp, read) = match h1::serve(tcp, &service, &mut draining).await {
        h1::Outcome::Ended(ended) => {
            let counters = &state.slot.0.counters;
            match ended {
                Ended::Served => {}
                Ended::HeaderTimeout => bump(&counters.header_timeout),
                Ended::IdleTimeout => bump(&counters.idle_timeout),
            }
            return;
        }
        h1::Outcome::Hyper(tcp, read) => (tcp, read),
    };
    let io = TokioIo::new(Watched::new(tcp, read, state.clone()));
    // Boxed: the connection's future is then as small as the common path's (`h1`).
    let mut conn = Box::pin(builder.serve_connection(io, service));
    let mut drain = std::pin::pin!(async move {
        let _ = draining.wait_for(|d| *d).await;
    });
    let mut armed = Armed::new(&state);
    let mut timer = std::pin::pin!(tokio::time::sleep_until(armed.at));
    let mut shutting_down = false;
    let ended = std::future::poll_fn(|cx| {
        if !shutting_down && drain.as_mut().poll(cx).is_ready() {
            shutting_down = true;
            conn.as_mut().graceful_shutdown();
        }
        if conn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Ended::Served);
        }
        if state.busy.load(Ordering::Acquire) > 0 {
            return Poll::Pending; // a request is in flight: its own timeouts bound it
        }
        state.poll_due(timer.as_mut(), &mut armed, cx)
    })
    .await;
    let counters = &state.slot.0.counters;
    match ended {
        Ended::Served => {}
        // Closed without an answer: nothing of a request arrived whole.
        Ended::HeaderTimeout => bump(&counters.header_timeout),
        Ended::IdleTimeout => {
            bump(&counters.idle_timeout);
            // Nothing in flight: HTTP/1 closes at once; HTTP/2 says GOAWAY first.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
        }
    }
}

/// What a connection's timer is set for: when, and whether for a request head's deadline
/// (see [`ConnState::poll_due`]).
#[derive(Debug, Clone, Copy)]
struct Armed {
    at: Instant,
    head: bool,
}

impl Armed {
    /// A timer for a deadline [`ConnState::due`] gave.
    fn of(at: Instant, ended: &Ended) -> Armed {
        Armed {
            at,
            head: matches!(ended, Ended::HeaderTimeout),
        }
    }

    /// The timer a connection starts with: its first head's deadline.
    fn new(state: &ConnState) -> Armed {
        let (at, ended) = state.due();
        Armed::of(at, &ended)
    }
}

/// Where a connection is between requests, shared by its I/O, its service and its task.
#[derive(Debug)]
struct ConnState {
    slot: ConnSlot,
    origin: Instant,
    /// Requests whose head arrived and whose response has not ended.
    busy: AtomicUsize,
    /// Bytes of a request arrived since the connection went idle (or it is new): its head is
    /// due by `since` + `header_timeout`.
    reading_head: AtomicBool,
    /// Nanoseconds after `origin` of the last change of phase.
    since: AtomicU64,
}

impl ConnState {
    fn new(slot: ConnSlot) -> ConnState {
        ConnState {
            slot,
            origin: Instant::now(),
            busy: AtomicUsize::new(0),
            // A new connection owes its first request head from its accept on.
            reading_head: AtomicBool::new(true),
            since: AtomicU64::new(0),
        }
    }

    fn mark(&self) {
        let nanos = self.origin.elapsed().as_nanos();
        self.since
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Release);
    }

    /// When the connection is due to close if nothing changes, and why.
    fn due(&self) -> (Instant, Ended) {
        let gate = &self.slot.0;
        let since = self.origin + Duration::from_nanos(self.since.load(Ordering::Acquire));
        if self.reading_head.load(Ordering::Acquire) {
            (since + gate.header_timeout, Ended::HeaderTimeout)
        } else {
            (since + gate.idle_timeout, Ended::IdleTimeout)
        }
    }

    /// A request head may have begun arriving ([`heads`]): with no request in flight, its
    /// head is due within `header_timeout` from now.
    fn head_begins(&self) {
        if self.busy.load(Ordering::Acquire) == 0 && !self.reading_head.load(Ordering::Acquire) {
            self.mark();
            self.reading_head.store(true, Ordering::Release);
        }
    }

    /// Ready with why when the connection is due to close (`timer` set for `armed`, moved).
    ///
    /// The phase may have changed while the connection ran: the deadline with it. Each request
    /// ends later than the last, so on a busy connection the deadline only moves later: the
    /// timer is moved when it fires early rather than after every request (a removal from the
    /// timer wheel and an insertion each). A head begun on an idle connection may be due
    /// sooner: then it is moved at once. A timer set for a head's deadline (from the accept,
    /// or from a head's first bytes) is set anew once that head has arrived: moved later,
    /// tokio's timer would still fire at the head's deadline, waking the thread for nothing
    /// `header_timeout` after each new connection.
    fn poll_due(
        &self,
        mut timer: Pin<&mut tokio::time::Sleep>,
        armed: &mut Armed,
        cx: &mut Context<'_>,
    ) -> Poll<Ended> {
        let (due, ended) = self.due();
        let next = Armed::of(due, &ended);
        if due < armed.at {
            timer.as_mut().reset(due);
            *armed = next;
        } else if armed.head && !next.head {
            timer.set(tokio::time::sleep_until(due));
            *armed = next;
        }
        loop {
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) if due > armed.at => {
                    timer.as_mut().reset(due);
                    *armed = next;
                }
                Poll::Ready(()) => return Poll::Ready(ended),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// A request's head arrived whole.
    fn begin(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.reading_head.store(false, Ordering::Release);
    }

    /// A response ended (or was dropped).
    fn end(&self) {
        if self.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.mark();
        }
    }
}

#[cfg(test)]
mod tests;

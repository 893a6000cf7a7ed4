//! Serving a mock: [`serve`] for `switchyard mock`, [`MockServer`] for tests and the demo.
//!
//! Shutdown is abrupt on purpose: the listener closes and every open connection is aborted at
//! once. A mock has nothing worth draining, and a graceful drain would wait forever on the
//! connections a `stall` plan holds open.

use std::future::{Future, IntoFuture as _};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::state::MockState;
use super::{app, FaultPlan, MockStats, RecordedRequest};

/// Serves a fresh mock named `name` (wire endpoints and control API) on `listener` until
/// `shutdown` resolves, then closes every connection.
pub async fn serve(
    listener: TcpListener,
    name: String,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let state = MockState::new(&name);
    serve_app(listener, Arc::clone(&state), shutdown).await
}

async fn serve_app(
    listener: TcpListener,
    state: Arc<MockState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (kill, killed) = watch::channel(false);
    let app = app(Arc::clone(&state));
    let listener = AbortableListener {
        inner: listener,
        killed,
        state,
    };
    tokio::select! {
        served = axum::serve(listener, app).into_future() => served,
        () = shutdown => {
            // Every connection watches this channel (and its closing, when `kill` drops).
            let _ = kill.send(true);
            Ok(())
        }
    }
}

/// A TCP listener whose connections all fail at once when `killed` turns true (or its sender
/// is dropped), so hyper closes them and drops their handlers.
struct AbortableListener {
    inner: TcpListener,
    killed: watch::Receiver<bool>,
    state: Arc<MockState>,
}

impl axum::serve::Listener for AbortableListener {
    type Io = AbortableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    self.state
                        .connections
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // Stream chunks are small and timed; Nagle would delay them.
                    let _ = stream.set_nodelay(true);
                    let mut killed = self.killed.clone();
                    let dead = Box::pin(async move {
                        let _ = killed.wait_for(|killed| *killed).await;
                    });
                    return (
                        AbortableStream {
                            inner: stream,
                            dead,
                            is_dead: false,
                        },
                        addr,
                    );
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a bit instead of spinning.
                    tracing::warn!(error = %e, "mock: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails every read and write once its mock is shut down.
struct AbortableStream {
    inner: TcpStream,
    dead: Pin<Box<dyn Future<Output = ()> + Send>>,
    is_dead: bool,
}

impl AbortableStream {
    /// Checks (and registers interest in) the shutdown signal.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.is_dead && self.dead.as_mut().poll(cx).is_ready() {
            self.is_dead = true;
        }
        if self.is_dead {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "mock shut down",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for AbortableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AbortableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A mock running in a tokio task on `127.0.0.1` and a free port. Dropping it (or
/// [`MockServer::shutdown`]) stops it and aborts its open connections.
pub struct MockServer {
    state: Arc<MockState>,
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

impl std::fmt::Debug for MockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Starts a fresh mock named `name` on `127.0.0.1:0`.
    pub async fn spawn(name: &str) -> io::Result<MockServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let state = MockState::new(name);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            // Resolves on `send` and when the sender is dropped with the server.
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve_app(listener, Arc::clone(&state), shutdown));
        Ok(MockServer {
            state,
            addr,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1` (what an OpenAI SDK takes).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The server root, `http://127.0.0.1:PORT` (an Azure endpoint; the control API is under it).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets the default plan, for every model without an override.
    pub fn set_plan(&self, plan: FaultPlan) {
        self.state.set_plan(plan);
    }

    /// Sets the plan for one model (or Azure deployment), overriding the default.
    pub fn set_model_plan(&self, model: &str, plan: FaultPlan) {
        self.state.set_model_plan(model, plan);
    }

    /// Counters since the start or the last reset.
    pub fn stats(&self) -> MockStats {
        self.state.stats()
    }

    /// The last 256 wire requests, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests()
    }

    /// Default plans, zero counters, nothing recorded.
    pub fn reset(&self) {
        self.state.reset();
    }

    /// Stops the mock: closes the listener and aborts open connections, then waits for the
    /// serving task to end.
    pub async fn shutdown(self) {
        let MockServer { stop, task, .. } = self;
        let _ = stop.send(());
        let _ = task.await;
    }
}

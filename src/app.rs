//! Wiring: build the state from a config, serve the router, reload on SIGHUP or a file change,
//! drain in-flight requests and streams on shutdown. Tests and the binary share [`serve`].
//! `conn.rs` holds the accept loop and what bounds each client connection (`[server]`).

mod conn;

/// Fuzzing: a client's first bytes read by the gateway's HTTP/1.1 server
/// (`fuzz/fuzz_targets/h1_request.rs`).
#[cfg(fuzzing)]
pub use self::conn::fuzz_request as fuzz_h1_request;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use crate::api::auth::Auth;
use crate::api::guard::Hosts;
use crate::api::readiness::Readiness;
use crate::api::{App, AppState, StateParts};
use crate::audit::Audit;
use crate::cluster::Cluster;
use crate::config::{Config, ConfigErrors};
use crate::metrics::Registry;
use crate::provider::ProviderError;
use crate::response_store::ResponseStore;
use crate::routing::{probe, Routing, Shared};

/// Why the gateway could not start or reload.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("invalid configuration:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("audit log: {0}")]
    Audit(#[from] crate::audit::AuditError),
    #[error("responses store: {0}")]
    Responses(#[from] crate::response_store::ResponseStoreError),
    #[error("{0}")]
    Telemetry(String),
}

/// Build the shared state for a config.
pub fn build_state(config: Config) -> Result<AppState, AppError> {
    let max_body = config.server.max_body;
    let body_timeout = config.server.body_timeout;
    let hosts = Arc::new(Hosts::new(&config.server));
    let config_auth = config.auth.clone();
    let shared = Shared::new(Registry::new(), config.server.max_response_body);
    let routing = Routing::build(Arc::new(config), &shared)?;
    let redactor = Arc::new(ArcSwap::new(routing.redactor.clone()));
    let auth = config_auth.map(|a| Arc::new(Auth::new(&a)));
    let cluster = routing
        .config
        .cluster
        .as_ref()
        .map(|c| Arc::new(Cluster::new(c)));
    Ok(AppState::new(StateParts {
        routing: Arc::new(ArcSwap::from_pointee(routing)),
        shared,
        audit: Audit::off(),
        telemetry: crate::telemetry::Telemetry::off(),
        responses: ResponseStore::off(),
        reasoning: Arc::default(),
        auth: Arc::new(arc_swap::ArcSwapOption::new(auth)),
        max_body,
        body_timeout,
        cluster,
        readiness: Readiness::new(),
        hosts,
        redactor,
    }))
}

/// Serve the gateway on `listener` until `shutdown` resolves, then drain in-flight requests
/// (at most `[server] shutdown_timeout`; then what is left is ended), on the runtime it is
/// called from (tests, the demo; `serve` uses [`Server`]). The health prober runs alongside and
/// stops with it. The audit writer and the responses store (unless `state` already has them)
/// start here, once: a reload does not restart them; they are flushed after the last request
/// drained. `state.readiness` is
/// ready once the background runs and the listener serves, and draining from the moment
/// `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    mut state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let background = Background::start(&mut state).await?;
    let readiness = state.readiness.clone();
    let shutdown = draining(readiness.clone(), shutdown);
    let gate = gate(&state);
    gate.set_audit(&state.audit);
    // The listener is bound: what connects now is served as soon as the accept loop runs.
    readiness.set_ready();
    let result = conn::serve_on(listener, App::new(state), shutdown, gate).await;
    background.stop().await;
    result
}

/// The `[server]` bounds of `state`'s config (as it started: a reload does not change them),
/// shared by every listener.
fn gate(state: &AppState) -> Arc<conn::Gate> {
    conn::Gate::new(&state.routing.load().config.server, state.shared.clone())
}

/// `shutdown`, marking the gateway draining the moment it resolves (before in-flight requests
/// drain).
async fn draining(readiness: Readiness, shutdown: impl Future<Output = ()>) {
    shutdown.await;
    readiness.set_draining();
}

/// What runs beside the server: the audit writer, the responses store's writer, the trace
/// exporter, the health prober, the cluster sync.
struct Background {
    audit_writer: Option<crate::audit::AuditWriter>,
    /// Started here (and so shut down here).
    responses: Option<ResponseStore>,
    /// The trace exporter, with `[telemetry]`.
    traces: Option<crate::telemetry::Exporter>,
    prober: tokio::task::JoinHandle<()>,
    /// Recomputes adaptive routes' shares.
    shares: tokio::task::JoinHandle<()>,
    cluster: Option<tokio::task::JoinHandle<()>>,
}

impl Background {
    async fn start(state: &mut AppState) -> Result<Background, AppError> {
        let mut audit_writer = None;
        if !state.audit.enabled() {
            let config = state.routing.load().config.clone();
            let (handle, writer) =
                crate::audit::start(&config.audit, state.redactor.clone(), &state.shared.metrics)
                    .await?;
            *state = state.with_audit(handle);
            audit_writer = Some(writer);
        }
        let mut responses = None;
        if !state.responses.enabled() {
            let config = state.routing.load().config.clone();
            let store =
                ResponseStore::open(&config.responses, &config.audit, &state.shared.metrics)
                    .await?;
            *state = state.with_responses(store.clone());
            responses = Some(store);
        }
        state.routing.load().warm_up();
        let mut traces = None;
        let telemetry = state.routing.load().config.telemetry.clone();
        if let (Some(config), false) = (telemetry, state.telemetry.enabled()) {
            let (handle, exporter) =
                crate::telemetry::Telemetry::start(&config, &state.shared.metrics)
                    .map_err(AppError::Telemetry)?;
            *state = state.with_telemetry(handle);
            traces = Some(exporter);
        }
        Ok(Background {
            audit_writer,
            responses,
            traces,
            prober: tokio::spawn(probe::run(
                state.routing.clone(),
                state.shared.probe.clone(),
            )),
            shares: tokio::spawn(crate::routing::select::run::run(
                state.routing.clone(),
                state.shared.reloaded.clone(),
            )),
            cluster: state
                .cluster
                .clone()
                .map(|c| tokio::spawn(crate::cluster::run(c, state.shared.clone()))),
        })
    }

    /// After the last request drained: stop, and flush the audit log and the responses
    /// store (together: each may wait on its own database).
    async fn stop(self) {
        self.prober.abort();
        self.shares.abort();
        if let Some(sync) = self.cluster {
            sync.abort();
        }
        let audit = async {
            if let Some(writer) = self.audit_writer {
                writer.shutdown().await;
            }
        };
        let responses = async {
            if let Some(store) = &self.responses {
                store.shutdown().await;
            }
        };
        let traces = async {
            if let Some(exporter) = self.traces {
                exporter.shutdown().await;
            }
        };
        tokio::join!(audit, responses, traces);
    }
}

/// The gateway's own server threads (`switchyard serve`): `workers` listeners on one address
/// (`SO_REUSEPORT`: the kernel spreads new connections over them), each served by a thread
/// with a single-threaded runtime of its own, and upstream connections of its own (see
/// [`crate::provider::enter_worker`]). A request, its upstream call and its stream's chunks
/// then stay on one thread: no hand-off wakes another thread, which on a multi-threaded
/// runtime cost a streamed answer ~0.1 ms before its first chunk (`docs/BENCHMARKS.md`).
/// What runs beside the server (audit writer, prober, cluster sync) runs on thread 0's
/// runtime; the config watcher on the caller's.
#[derive(Debug)]
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    addr: std::net::SocketAddr,
}

impl Server {
    /// Bind `workers` listeners on `addr` (port 0: one free port for all). Fails as a plain
    /// bind would when the address is taken, even by a process that shares ports this way.
    /// On Linux a listener hands a new connection over once its first bytes arrive (or after
    /// about a second without any: `conn::defer_accept`). Call from inside a tokio runtime.
    pub fn bind(addr: std::net::SocketAddr, workers: usize) -> Result<Server, AppError> {
        Self::bind_all(addr, workers).map_err(|e| {
            AppError::Io(std::io::Error::new(
                e.kind(),
                format!("cannot listen on {addr}: {e}"),
            ))
        })
    }

    fn bind_all(addr: std::net::SocketAddr, workers: usize) -> std::io::Result<Server> {
        if addr.port() != 0 {
            // Sockets that share a port all set SO_REUSEPORT, so a second switchyard on this
            // address would bind too, and take half the connections: refuse, as bind does.
            drop(std::net::TcpListener::bind(addr)?);
        }
        let mut listeners = Vec::with_capacity(workers.max(1));
        let mut bound = addr;
        for _ in 0..workers.max(1) {
            let socket = if addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            #[cfg(all(unix, not(any(target_os = "solaris", target_os = "illumos"))))]
            socket.set_reuseport(true)?;
            socket.bind(bound)?;
            // Before it listens, so that every connection has it from the listener (see
            // `conn::no_delay_from`).
            socket.set_nodelay(true)?;
            // An optimisation: without it connections are accepted as they come.
            #[cfg(any(target_os = "linux", target_os = "android"))]
            if let Err(e) = conn::defer_accept(&socket) {
                tracing::debug!(error = %e, "TCP_DEFER_ACCEPT not set");
            }
            let listener = socket.listen(1024)?;
            bound = listener.local_addr()?;
            listeners.push(listener.into_std()?);
            if cfg!(not(all(
                unix,
                not(any(target_os = "solaris", target_os = "illumos"))
            ))) {
                break; // no port sharing here: one server thread
            }
        }
        Ok(Server {
            listeners,
            addr: bound,
        })
    }

    /// The address the listeners are bound to.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Serve until `shutdown` resolves (or a server thread fails), then drain every thread's
    /// in-flight requests and streams (at most `[server] shutdown_timeout`; then what is left
    /// is ended), and flush the audit log. `[server]` bounds apply over all threads together. `state.readiness` is ready once
    /// the background runs and every server thread was spawned, and draining from the moment
    /// `shutdown` resolves (or a thread fails).
    ///
    /// What runs beside the server (audit writer, prober, cluster sync) runs on thread 0's
    /// runtime: the audit writer's work then shares a thread with requests instead of adding
    /// threads for the two cores to switch between.
    pub async fn run(
        self,
        mut state: AppState,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let stopped = move |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        };
        let readiness = state.readiness.clone();
        let gate = gate(&state);
        let mut listeners = self.listeners.into_iter();
        let Some(first) = listeners.next() else {
            return Err(std::io::Error::other("no listener").into());
        };
        // Thread 0 starts the background, hands the router over, serves, and flushes the audit
        // log once every thread has drained (`flush`).
        let (ready, router_rx) = tokio::sync::oneshot::channel();
        let (flush, flush_rx) = tokio::sync::oneshot::channel::<()>();
        let stop0 = stopped(stopping.clone());
        let gate0 = gate.clone();
        let mut threads = vec![spawn_thread(0, move || async move {
            let background = match Background::start(&mut state).await {
                Ok(b) => b,
                Err(e) => {
                    let _ = ready.send(None);
                    return Err(e);
                }
            };
            gate0.set_audit(&state.audit);
            let app = App::new(state);
            let _ = ready.send(Some(app.clone()));
            let result = match TcpListener::from_std(first) {
                Ok(listener) => conn::serve_on(listener, app, stop0, gate0).await,
                Err(e) => Err(e.into()),
            };
            let _ = flush_rx.await;
            background.stop().await;
            result
        })?];
        let Ok(Some(app)) = router_rx.await else {
            // Thread 0 could not start the background (the audit store): its error says why.
            let thread0 = threads.remove(0);
            return Err(thread0
                .await
                .ok()
                .and_then(Result::err)
                .unwrap_or_else(|| std::io::Error::other("server thread 0 stopped").into()));
        };
        let mut all_spawned = true;
        for (i, listener) in listeners.enumerate() {
            let (app, stop_i, gate) = (app.clone(), stopped(stopping.clone()), gate.clone());
            let spawned = spawn_thread(i + 1, move || async move {
                conn::serve_on(TcpListener::from_std(listener)?, app, stop_i, gate).await
            });
            match spawned {
                Ok(done) => threads.push(done),
                Err(e) => {
                    tracing::error!(error = %e, "could not start a server thread");
                    let _ = stop.send(true);
                    all_spawned = false;
                    break;
                }
            }
        }
        if all_spawned {
            readiness.set_ready();
        }
        // Until the signal, or until a thread ends on its own (an error).
        let early = {
            let first_done = futures_util::future::select_all(threads.iter_mut());
            tokio::select! {
                () = shutdown => None,
                (_, index, _) = first_done => Some(index),
            }
        };
        readiness.set_draining();
        let _ = stop.send(true);
        let mut result = Ok(());
        if let Some(index) = early {
            tracing::error!(thread = index, "a server thread ended early: stopping");
            result = Err(std::io::Error::other(format!("server thread {index} stopped")).into());
        }
        // Thread 0 flushes the audit log once the others have drained. (A thread that ended
        // early was awaited already: a oneshot is not awaited twice.)
        let mut rest: Vec<_> = threads
            .into_iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != early)
            .collect();
        let thread0 = match rest.first() {
            Some((0, _)) => Some(rest.remove(0)),
            _ => None,
        };
        for (i, done) in rest {
            if let Ok(Err(e)) = done.await {
                tracing::error!(thread = i, error = %e, "server thread failed");
                result = Err(e);
            }
        }
        let _ = flush.send(());
        if let Some((_, done)) = thread0 {
            if let Ok(Err(e)) = done.await {
                tracing::error!(thread = 0, error = %e, "server thread failed");
                result = Err(e);
            }
        }
        result
    }
}

/// Run `serve()` on a thread of its own with a single-threaded runtime, as server thread
/// `index`; the receiver gets its result (an error if the thread panicked: dropped sender).
fn spawn_thread<F, Fut>(
    index: usize,
    serve: F,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), AppError>>, AppError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), AppError>>,
{
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("switchyard-{index}"))
        .spawn(move || {
            crate::provider::enter_worker(index);
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(AppError::from)
                .and_then(|rt| rt.block_on(serve()));
            let _ = done.send(result);
        })?;
    Ok(finished)
}

/// Swap in a new config, keeping breakers, SLIs, budgets and metrics of what still exists; on
/// error the running config stays and the error is returned. `[auth]` keys are swapped too
/// (rotation). Returns the tables whose changes wait for a restart (`[server]`, `[audit]`,
/// `[responses]`, `[cluster]`), which keep their running settings.
pub fn reload(state: &AppState, path: &std::path::Path) -> Result<Vec<&'static str>, AppError> {
    let config = Config::load(path)?;
    let running = state.routing.load().config.clone();
    let pending = [
        ("[server]", config.server != running.server),
        ("[audit]", config.audit != running.audit),
        ("[responses]", config.responses != running.responses),
        ("[cluster]", config.cluster != running.cluster),
        ("[telemetry]", config.telemetry != running.telemetry),
    ]
    .into_iter()
    .filter_map(|(table, changed)| changed.then_some(table))
    .collect();
    let auth = config.auth.as_ref().map(|a| Arc::new(Auth::new(a)));
    let routing = Routing::build(Arc::new(config), &state.shared)?;
    // The new keys are masked from here on: in client answers (the table's redactor) and in
    // what the audit writer encodes next.
    state.redactor.store(routing.redactor.clone());
    routing.warm_up();
    state.routing.store(Arc::new(routing));
    state.shared.reloaded.notify_one();
    state.auth.store(auth);
    Ok(pending)
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reload the config on SIGHUP or when the file changes (polled every 2 s). Never exits while
/// the process runs; the caller drops it on shutdown.
pub async fn watch_config(state: AppState, path: PathBuf) {
    let mut last = modified(&path);
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        #[cfg(unix)]
        let sighup = async {
            match hup.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let sighup = std::future::pending::<Option<()>>();
        let reason = tokio::select! {
            _ = sighup => "SIGHUP",
            _ = tick.tick() => {
                let now = modified(&path);
                if now == last { continue; }
                last = now;
                "file changed"
            }
        };
        match reload(&state, &path) {
            Ok(pending) => {
                tracing::info!(reason, path = %path.display(), "configuration reloaded");
                for table in pending {
                    tracing::warn!(
                        table,
                        "changed: it keeps its running settings until a restart"
                    );
                }
            }
            Err(e) => {
                tracing::error!(reason, path = %path.display(), error = %e, "reload failed; keeping the running configuration")
            }
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: draining in-flight requests");
}

//! Wiring: build the state from a config, serve the router, reload on SIGHUP or a file change,
//! drain in-flight requests and streams on shutdown. Tests and the binary share [`serve`].

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;

use crate::api::auth::Auth;
use crate::api::{router, AppState};
use crate::audit::redact::Redactor;
use crate::audit::Audit;
use crate::cluster::Cluster;
use crate::config::{Config, ConfigErrors};
use crate::metrics::Registry;
use crate::provider::ProviderError;
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
}

/// Build the shared state for a config.
pub fn build_state(config: Config) -> Result<AppState, AppError> {
    let max_body = config.server.max_body;
    let config_auth = config.auth.clone();
    let shared = Shared::new(Registry::new());
    let routing = Routing::build(Arc::new(config), &shared)?;
    let auth = config_auth.map(|a| Arc::new(Auth::new(&a.keys)));
    let cluster = routing
        .config
        .cluster
        .as_ref()
        .map(|c| Arc::new(Cluster::new(c)));
    Ok(AppState {
        routing: Arc::new(ArcSwap::from_pointee(routing)),
        shared,
        audit: Audit::off(),
        auth,
        max_body,
        cluster,
    })
}

/// Serve the gateway on `listener` until `shutdown` resolves, then drain in-flight requests.
/// The health prober runs alongside and stops with it. The audit writer (unless `state`
/// already has one) starts here, once: a reload does not restart it; it is flushed after the
/// last request drained.
pub async fn serve(
    listener: TcpListener,
    mut state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    let mut audit_writer = None;
    if !state.audit.enabled() {
        let config = state.routing.load().config.clone();
        let (handle, writer) = crate::audit::start(
            &config.audit,
            Redactor::for_config(&config),
            &state.shared.metrics,
        )
        .await?;
        state.audit = handle;
        audit_writer = Some(writer);
    }
    let prober = tokio::spawn(probe::run(state.routing.clone()));
    let cluster = state
        .cluster
        .clone()
        .map(|c| tokio::spawn(crate::cluster::run(c, state.shared.clone())));
    let app = router(state);
    // Small writes (SSE chunks, headers then body) must leave at once: no Nagle.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    prober.abort();
    if let Some(sync) = cluster {
        sync.abort();
    }
    if let Some(writer) = audit_writer {
        writer.shutdown().await;
    }
    result?;
    Ok(())
}

/// Swap in a new config, keeping breakers, SLIs, budgets and metrics of what still exists; on
/// error the running config stays and the error is returned.
pub fn reload(state: &AppState, path: &std::path::Path) -> Result<(), AppError> {
    let config = Config::load(path)?;
    if config.audit != state.routing.load().config.audit {
        tracing::warn!("[audit] changed: the audit log keeps its current settings until a restart");
    }
    if config.cluster != state.routing.load().config.cluster {
        tracing::warn!(
            "[cluster] changed: the cluster link keeps its current settings until a restart"
        );
    }
    let routing = Routing::build(Arc::new(config), &state.shared)?;
    state.routing.store(Arc::new(routing));
    Ok(())
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
            Ok(()) => tracing::info!(reason, path = %path.display(), "configuration reloaded"),
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

//! Whether the gateway takes traffic, for `/readyz`: starting until what runs beside the
//! server and its listeners run, ready while it serves, draining from the shutdown signal on
//! (in-flight requests still finish, new traffic should go elsewhere). `/healthz` is liveness
//! only and does not read it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// Where the gateway is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Built, not serving yet: the audit writer, prober, cluster sync or a server thread is
    /// still being started.
    Starting,
    /// Serving.
    Ready,
    /// The shutdown signal came: in-flight requests drain.
    Draining,
}

impl Phase {
    /// The word `/readyz` answers.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Draining => "draining",
        }
    }
}

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

/// The shared [`Phase`]: one atomic, cloned as a reference count. It only moves forward:
/// starting, ready, draining.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicU8>);

impl Readiness {
    /// Starting.
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        match self.0.load(Ordering::Acquire) {
            STARTING => Phase::Starting,
            READY => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    /// Serving: starting becomes ready (a draining gateway stays draining).
    pub fn set_ready(&self) {
        let _ = self
            .0
            .compare_exchange(STARTING, READY, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The shutdown signal came: draining, for good.
    pub fn set_draining(&self) {
        self.0.store(DRAINING, Ordering::Release);
    }
}

/// `GET /readyz`: 200 `ready` while serving, else 503 `starting` or `draining`.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    match state.readiness.phase() {
        Phase::Ready => Phase::Ready.label().into_response(),
        phase => (StatusCode::SERVICE_UNAVAILABLE, phase.label()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_forward_only() {
        let readiness = Readiness::new();
        assert_eq!(readiness.phase(), Phase::Starting);
        let shared = readiness.clone();
        shared.set_ready();
        assert_eq!(readiness.phase(), Phase::Ready);
        readiness.set_draining();
        assert_eq!(shared.phase(), Phase::Draining);
        shared.set_ready();
        assert_eq!(readiness.phase(), Phase::Draining, "never ready again");
        let stopped_early = Readiness::new();
        stopped_early.set_draining();
        stopped_early.set_ready();
        assert_eq!(stopped_early.phase(), Phase::Draining);
    }
}

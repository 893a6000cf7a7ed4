//! The inbound edge: the client API (OpenAI shape) and operations endpoints on one port.

mod admin;
mod anthropic;
mod audit;
mod audited;
pub mod auth;
mod count_tokens;
mod dashboard;
pub mod error;
pub mod guard;
mod openai;
pub mod readiness;
mod respond;
mod responses;
pub(crate) mod stamp;

/// Entry points into the edge's private handling for the fuzz targets (`fuzz/`), built only by
/// `cargo fuzz` (`--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub use responses::fuzzing::responses_request as fuzz_responses_request;

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::routing::{get, post};
use axum::Router;

use crate::audit::Audit;
use crate::boxed::pinned;
use crate::canonical::Dialect;
use crate::response_store::ResponseStore;
use crate::routing::{Routing, Shared};
use auth::Auth;
use readiness::Readiness;
pub(crate) use stamp::{Answered, Stamp};

/// What every handler can reach. Cloned for every request (axum's `State`), so it is one
/// reference count: cloning the parts would touch one count each, on cache lines every
/// server thread shares.
#[derive(Clone)]
pub struct AppState(Arc<StateParts>);

impl AppState {
    pub fn new(parts: StateParts) -> AppState {
        AppState(Arc::new(parts))
    }

    /// The same state with another audit log handle.
    pub fn with_audit(&self, audit: Audit) -> AppState {
        AppState::new(StateParts {
            audit,
            ..StateParts::clone(&self.0)
        })
    }

    /// The same state with another trace exporter handle.
    pub fn with_telemetry(&self, telemetry: crate::telemetry::Telemetry) -> AppState {
        AppState::new(StateParts {
            telemetry,
            ..StateParts::clone(&self.0)
        })
    }

    /// The same state with another responses store.
    pub fn with_responses(&self, responses: ResponseStore) -> AppState {
        AppState::new(StateParts {
            responses,
            ..StateParts::clone(&self.0)
        })
    }
}

impl StateParts {
    /// Where finished requests go.
    pub(crate) fn recorder(&self) -> audited::Recorder {
        audited::Recorder {
            audit: self.audit.clone(),
            telemetry: self.telemetry.clone(),
        }
    }
}

impl std::ops::Deref for AppState {
    type Target = StateParts;

    fn deref(&self) -> &StateParts {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Clone)]
pub struct StateParts {
    /// The routing table; swapped whole on reload.
    pub routing: Arc<ArcSwap<Routing>>,
    /// What outlives a reload: health, budgets, metrics.
    pub shared: Arc<Shared>,
    /// The audit log's handle.
    pub audit: Audit,
    /// The trace exporter's handle (`[telemetry]`).
    pub telemetry: crate::telemetry::Telemetry,
    /// The Responses API responses the gateway served (`[responses]`), for
    /// `previous_response_id` and `/v1/responses/{id}`.
    pub responses: ResponseStore,
    /// Who made the encrypted reasoning items the gateway passed on (Responses API).
    pub(crate) reasoning: Arc<responses::provenance::Provenance>,
    /// Client keys, when `[auth]` is set; swapped on reload (key rotation).
    pub auth: Arc<arc_swap::ArcSwapOption<Auth>>,
    /// Largest accepted request body.
    pub max_body: usize,
    /// `[server] body_timeout`: a request body must have arrived within this.
    pub body_timeout: std::time::Duration,
    /// The link to the other replicas, with `[cluster]`.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// Starting, ready or draining: what `/readyz` answers. Set by `app::serve` and
    /// `app::Server::run`.
    pub readiness: Readiness,
    /// The hosts the admin endpoints and the dashboard answer to (from `[server]`, kept until
    /// a restart as the listener is).
    pub hosts: Arc<guard::Hosts>,
    /// The audit writer's redactor: the routing table's, swapped in with it on reload.
    pub redactor: crate::audit::redact::RedactorCell,
}

/// Headers every answer carries, and the client's per-request controls. Typed names: a `&str`
/// would be checked and lowercased again on every use.
pub mod headers {
    use http::HeaderName;

    /// A field every answer may carry: its name, and its `name: ` for a head written by hand
    /// (`api::stamp`, a constant copied in place), from the one literal.
    macro_rules! answer_field {
        ($name:ident, $line:ident, $text:literal) => {
            pub const $name: HeaderName = HeaderName::from_static($text);
            pub(crate) const $line: &[u8] = concat!($text, ": ").as_bytes();
        };
    }
    answer_field!(REQUEST_ID, REQUEST_ID_LINE, "x-switchyard-request-id");
    answer_field!(TARGET, TARGET_LINE, "x-switchyard-target");
    answer_field!(ATTEMPTS, ATTEMPTS_LINE, "x-switchyard-attempts");
    answer_field!(HEDGED, HEDGED_LINE, "x-switchyard-hedged");
    answer_field!(
        TURNS_DROPPED,
        TURNS_DROPPED_LINE,
        "x-switchyard-turns-dropped"
    );
    pub const FAILOVER: HeaderName = HeaderName::from_static("x-switchyard-failover");
    pub const TIMEOUT: HeaderName = HeaderName::from_static("x-switchyard-timeout");

    /// Every request field the client API reads (a `POST` to a [`super::ClientApi`]
    /// endpoint): the guard's `host` and `origin`, the client key (`authorization`,
    /// `x-api-key`), the client's controls and trace context, and the protocol fields sent on
    /// to same-dialect targets. The gateway's own HTTP/1.1 server gives those requests these
    /// fields and no others (`app::conn::h1`: an agent's SDK sends a dozen more, each costing
    /// a map entry no one reads): a reader of another field adds its name here.
    pub const READ: [HeaderName; 11] = [
        http::header::HOST,
        http::header::ORIGIN,
        http::header::AUTHORIZATION,
        HeaderName::from_static("x-api-key"),
        FAILOVER,
        TIMEOUT,
        crate::wire::session::HEADER,
        crate::wire::trace::TRACEPARENT,
        HeaderName::from_static("anthropic-beta"),
        HeaderName::from_static("anthropic-version"),
        HeaderName::from_static("openai-beta"),
    ];
}

/// The client API endpoints that call providers: counted under `[server] max_in_flight`, and
/// served without the router's matching (see [`App`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientApi {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/responses`.
    Responses,
}

impl ClientApi {
    /// The endpoint at `path`, if it is one (any method).
    pub fn of(path: &str) -> Option<ClientApi> {
        match path {
            "/v1/chat/completions" => Some(ClientApi::Chat),
            "/v1/messages" => Some(ClientApi::Messages),
            "/v1/responses" => Some(ClientApi::Responses),
            _ => None,
        }
    }

    /// The dialect its answers and errors are written in.
    pub fn dialect(self) -> Dialect {
        match self {
            ClientApi::Chat => Dialect::OpenAi,
            ClientApi::Messages => Dialect::Anthropic,
            ClientApi::Responses => Dialect::Responses,
        }
    }
}

/// A client API request's answer on its way.
pub type Answering = std::pin::Pin<Box<dyn std::future::Future<Output = Answered> + Send>>;

/// The gateway's HTTP service: the router, and the three client API endpoints that carry the
/// traffic served directly. Those are most of what a gateway answers, and the router's work for
/// each (matching the path, the method router, the handler's boxed service and its layers) was
/// about 2,000 instructions a request (bench/instructions) for a decision the connection layer
/// has already made by looking at the path. Other requests, and another method on those paths
/// (405), go through the router. Cloning is two reference counts.
#[derive(Clone)]
pub struct App {
    router: Router,
    state: AppState,
}

impl App {
    pub fn new(state: AppState) -> App {
        App {
            router: router(state.clone()),
            state,
        }
    }

    /// The router, for every request that is not a client API `POST`.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Serve a `POST` to `api`, as the router would.
    pub fn client_api(&self, api: ClientApi, request: axum::extract::Request) -> Answering {
        let state = axum::extract::State(self.state.clone());
        match api {
            ClientApi::Chat => pinned(|| openai::chat_completions(state, request)),
            ClientApi::Messages => pinned(|| anthropic::messages(state, request)),
            ClientApi::Responses => pinned(|| responses::create(state, request)),
        }
    }
}

/// The gateway's HTTP router.
pub fn router(state: AppState) -> Router {
    use axum::middleware::{from_fn, from_fn_with_state};
    // What changes routing needs the gateway's own origin and a JSON body (`guard`), checked
    // before the key.
    let mutations = Router::new()
        .route("/admin/targets/{*path}", post(admin::breaker))
        .route_layer(from_fn_with_state(state.clone(), auth::require_admin))
        .route_layer(from_fn(guard::same_origin_json));
    // What changes routing or reads request data needs an admin key when `[auth]` is set.
    let admin = Router::new()
        .route("/admin/audit", get(audit::records))
        .route_layer(from_fn_with_state(state.clone(), auth::require_admin))
        .merge(mutations);
    // The admin endpoints and the dashboard answer only the gateway's own host names (DNS
    // rebinding); the status and the events need no key, for monitoring.
    let browser_facing = Router::new()
        .merge(admin)
        .route("/admin/status", get(admin::status))
        .route("/admin/events", get(admin::events))
        .route("/dashboard", get(dashboard::page))
        .route_layer(from_fn_with_state(state.clone(), guard::check_host));
    Router::new()
        .merge(browser_facing)
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/messages", post(anthropic::messages))
        .route(
            "/v1/messages/count_tokens",
            post(count_tokens::count_tokens),
        )
        .route("/v1/responses", post(responses::create))
        .route(
            "/v1/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items),
        )
        .route("/v1/models", get(openai::models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readiness::readyz))
        .route("/metrics", get(admin::metrics))
        .fallback(openai::not_found)
        .method_not_allowed_fallback(openai::method_not_allowed)
        .with_state(state)
}

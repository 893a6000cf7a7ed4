//! switchyard: an LLM gateway that keeps AI agents answering when a model provider fails.
//!
//! # Layout
//! - [`cli`], [`app`]: the command line; wiring (build state, serve, reload, drain).
//! - [`config`]: the TOML file, parsed and validated into a [`config::Config`] that cannot be
//!   invalid; every error names its key path.
//! - [`api`]: the inbound edge: the OpenAI (`/v1/chat/completions`) and Anthropic
//!   (`/v1/messages`) client APIs over one shared edge (`api::respond`: client keys, controls,
//!   audit record, answer in the client's dialect), SSE codec, admin and dashboard, the error
//!   envelope.
//! - [`routing`]: from a route to an answer: [`routing::dispatch`] runs the race
//!   (`routing::race`: failover, retries, hedges), [`routing::attempt`] makes one call,
//!   [`routing::failover`] classifies its errors, [`routing::relay`] carries a committed stream
//!   and [`routing::continuation`] finishes a broken one elsewhere, [`routing::wire`] speaks
//!   other dialects; [`routing::breaker`] (pure), [`routing::health`], [`routing::budget`],
//!   [`routing::hedge`] and [`routing::probe`] decide who gets traffic.
//! - [`stats`]: per-target SLIs in rolling windows (HDR histograms); [`metrics`]: every metric,
//!   Prometheus text.
//! - [`provider`]: per-kind URL and credentials over one pooled client per provider.
//! - [`canonical`]: our own request/response/stream-event model and its translation to and from
//!   the OpenAI, Anthropic and Gemini wire formats; token estimates and context trimming.
//! - [`mock`]: the fault-injecting mock provider behind `switchyard mock`, the tests and benches.
//! - [`demo`]: `switchyard demo`: mocks, gateway, agent traffic and a scripted incident, reported.
//! - [`audit`]: one record per request with its path, queued off the request path and written
//!   in batches to SQLite or PostgreSQL; read by `/admin/audit` and `switchyard audit`.
//! - [`cluster`]: with `[cluster] redis`, replicas share breaker states and windows through
//!   Redis, off the request path (a sync task, once a second).
//!
//! # The request path
//! 1. `api::openai::chat_completions` (or `api::anthropic::messages`, which translates the body
//!    to the OpenAI shape once) reads the body within `max_body`; an OpenAI body is parsed
//!    shallowly (`api::chat_request`): only `model`, `stream`, `stream_options`, `messages`.
//! 2. `api::respond` checks the client key and controls and looks the route up in the current
//!    [`routing::Routing`] (one atomic load).
//! 3. `routing::dispatch` starts the race: the first usable target (breaker admits, not parked)
//!    gets an attempt with the client's bytes and the target's model spliced in (another
//!    dialect: written from the canonical model; a too-long conversation: trimmed to fit),
//!    under `attempt_timeout` (streams: `first_token_timeout`).
//! 4. A failed attempt is classified ([`routing::failover::AttemptError`]): retry here, move
//!    on, or return the provider's client error as is. A slow one is hedged after the hedge
//!    delay; the first good answer wins and the others are dropped (connections closed).
//! 5. A stream is committed at its first content; until then nothing reaches the client. After
//!    it, `routing::relay` forwards chunks; a break is continued on another target or ends with
//!    an error event, never a silently truncated answer.
//! 6. Every outcome feeds the target's breaker and SLIs; the edge writes the audit record (for
//!    a stream, when it ends) and the response headers.
//!
//! # Glossary
//! - provider: one upstream API account (kind, base URL, key, pool).
//! - target: one model at one provider, named `provider/model`.
//! - route: a public model name with its ordered targets and policy.
//! - attempt: one upstream call made for a client request; the attempts form its path.
//! - hedge: a second attempt started in parallel when the first is slow; the first good answer
//!   wins.
//! - commit point: a stream's first content; before it everything can fail over.

pub mod api;
pub mod app;
pub mod audit;
pub mod canonical;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod metrics;
pub mod mock;
pub mod provider;
pub mod routing;
pub mod stats;

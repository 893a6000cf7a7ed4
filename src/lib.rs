//! switchyard: an LLM gateway that keeps AI agents answering when a model provider fails.
//!
//! # Layout
//! - [`cli`], [`app`]: the command line; wiring (build state, serve, reload, drain); the accept
//!   loop and what bounds each client connection (`[server]` timeouts and caps) in `app/conn.rs`.
//! - [`config`]: the TOML file, parsed and validated into a [`config::Config`] that cannot be
//!   invalid; every error names its key path.
//! - [`api`]: the inbound edge: the OpenAI (`/v1/chat/completions`) and Anthropic
//!   (`/v1/messages`) client APIs over one shared edge (`api::respond`: client keys, controls,
//!   audit record, answer in the client's dialect), admin and dashboard (admin keys apart from
//!   client keys, `api::auth`; the defences against hostile pages, `api::guard`), the error
//!   envelope.
//! - [`wire`]: the inner wire form the edge and the core share: the request
//!   ([`wire::ChatRequest`], OpenAI chat bytes read shallowly), SSE framing, chunk reading, and
//!   transcoding to and from the other dialects.
//! - [`routing`]: from a route to an answer, in the inner form only (it imports nothing from
//!   [`api`]): [`routing::dispatch`] runs the race (failover, retries, hedges),
//!   [`routing::pick`] picks each attempt's target, [`routing::attempt`] makes one call,
//!   [`routing::classify`] decides what its failure means, [`routing::path`] records what each
//!   attempt came to, [`routing::relay`] carries a committed stream and
//!   [`routing::continuation`] finishes a broken one elsewhere; [`routing::breaker`] (pure),
//!   [`routing::health`], [`routing::budget`], [`routing::hedge`] and [`routing::probe`] decide
//!   who gets traffic.
//! - [`stats`]: per-target SLIs in rolling windows (HDR histograms); [`metrics`]: every metric,
//!   Prometheus text.
//! - [`provider`]: per-kind URL and credentials over one pooled client per provider.
//! - [`canonical`]: our own request/response/stream-event model and its translation to and from
//!   the OpenAI, Anthropic and Gemini wire formats; each dialect's error classification; token
//!   estimates and context trimming.
//! - [`clock`] (wall time, and deadlines that cannot overflow) and [`request_id`] (UUIDv7 ids
//!   whose first bits are that time).
//! - [`mock`]: the fault-injecting mock provider behind `switchyard mock`, the tests and benches.
//! - [`demo`]: `switchyard demo`: mocks, gateway, agent traffic and a scripted incident, reported.
//! - [`audit`]: one record per request with its path, queued off the request path and written
//!   in batches to SQLite or PostgreSQL; read by `/admin/audit` and `switchyard audit`.
//! - [`response_store`]: the Responses API responses the gateway served (`[responses]`), kept
//!   under ids it mints so `previous_response_id` works across providers: found in memory at
//!   once, written in batches off the request path to SQLite or PostgreSQL (by default the
//!   audit log's database).
//! - [`telemetry`]: with `[telemetry]`, OpenTelemetry traces (a server span per request, a
//!   client span per upstream call) written and exported over OTLP/HTTP off the request path;
//!   the W3C trace context itself is [`wire::trace`].
//! - [`cluster`]: with `[cluster] redis`, replicas share breaker states and windows through
//!   Redis, off the request path (a sync task, once a second).
//!
//! # The request path
//! 0. The connection was accepted under `max_connections` and delivered its head within
//!    `header_timeout`; a client API request is admitted under `max_in_flight` (else 503 at
//!    once) and holds its place until its answer (a stream: its last chunk) ends.
//! 1. `api::openai::chat_completions` (or `api::anthropic::messages`, which translates the body
//!    to the OpenAI shape once) takes a [`request_id`]; `api::respond::Edge::open` checks the
//!    client key and controls and reads the body within `max_body`; an OpenAI body is parsed
//!    shallowly ([`wire::ChatRequest`]): only `model`, `stream`, `stream_options`, `messages`.
//! 2. `api::respond::respond` looks the route up in the current [`routing::Routing`] (one
//!    atomic load), decides whether the request is traced, drafts its record (with the audit
//!    log on, or traced) and calls [`routing::dispatch::dispatch`].
//! 3. The race (`routing::race`) picks the first usable target ([`routing::pick`]: breaker
//!    admits, not parked) and launches an attempt (`routing::launch`) with the body
//!    [`routing::body`] fits to it: the client's bytes with the target's model spliced in
//!    (another dialect: written from the canonical model; a too-long conversation: counted and
//!    trimmed on the blocking pool), under `attempt_timeout` (streams: `first_token_timeout`);
//!    its answer is read within `max_response_body`.
//! 4. A failed attempt is classified ([`routing::classify::AttemptError`]): retry here, move
//!    on, or return the provider's client error as is. A slow one is hedged after the hedge
//!    delay; the first good answer wins and the others are dropped (connections closed). Each
//!    attempt's [`routing::path::Attempt`] joins the path.
//! 5. A stream is committed at its first content ([`wire::chunks`]); until then nothing
//!    reaches the client. After it, [`routing::relay`] forwards chunks until the request's
//!    deadline; a break (a cut, no content for `idle_timeout`, an error event) is continued on
//!    another target or ends with an error event, never a silently truncated answer.
//! 6. Every outcome feeds the target's breaker and SLIs and `requests_total`
//!    ([`routing::path::RequestOutcome`]); the edge files the request (for a stream, when it
//!    ends: its audit record, its spans), writes the response headers, and converts the answer
//!    to the client's dialect.
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
pub mod boxed;
pub mod canonical;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
mod db;
pub mod demo;
pub mod metrics;
pub mod mock;
pub mod provider;
pub mod request_id;
pub mod response_store;
pub mod routing;
pub mod stats;
pub mod telemetry;
pub mod wire;

//! switchyard: an LLM gateway that keeps AI agents answering when a model provider fails.
//!
//! # Layout
//! - [`cli`], [`app`]: the command line; wiring (build state, serve, reload, drain).
//! - [`config`]: the TOML file, parsed and validated into a [`config::Config`] that cannot be
//!   invalid; every error names its key path.
//! - [`api`]: the inbound edge: OpenAI-shaped client API, SSE codec, the error envelope.
//! - [`routing`]: the failover loop ([`routing::dispatch`]), one attempt
//!   ([`routing::attempt`]), error classification ([`routing::failover`]), honest stream relay
//!   ([`routing::stream`]).
//! - [`provider`]: per-kind URL and credentials over one pooled client per provider.
//! - [`canonical`]: our own request/response/stream-event model and its translation to and from
//!   the OpenAI, Anthropic and Gemini wire formats; token estimates and context trimming.
//! - [`mock`]: the fault-injecting mock provider behind `switchyard mock`, the tests and benches.
//! - [`demo`]: `switchyard demo`: mocks, gateway, agent traffic and a scripted incident, reported.
//! - [`audit`]: one record per request with its path, queued off the request path and written
//!   in batches to SQLite or PostgreSQL; read by `/admin/audit` and `switchyard audit`.
//!
//! # The request path
//! 1. `api::openai::chat_completions` reads the body within `max_body` and parses it shallowly
//!    (`api::chat_request`): only `model`, `stream`, `stream_options`, `messages` are looked at.
//! 2. The route is looked up in the current [`routing::Routing`] (one atomic load).
//! 3. `routing::dispatch` picks the first usable target (skipping targets parked by a 429's
//!    `Retry-After`), splices the target's model name into the client's bytes and makes an
//!    attempt under `attempt_timeout` (streams: `first_token_timeout`).
//! 4. A failed attempt is classified ([`routing::failover::AttemptError`]) and the loop retries
//!    the same target, moves to the next, or returns the provider's client error as is.
//! 5. A stream is committed at its first content; until then nothing reaches the client. After
//!    it, `routing::stream::relay` forwards chunks and ends a broken stream with an error event.
//!
//! # Glossary
//! - provider: one upstream API account (kind, base URL, key, pool).
//! - target: one model at one provider, named `provider/model`.
//! - route: a public model name with its ordered targets and policy.
//! - attempt: one upstream call made for a client request; the attempts form its path.
//! - hedge: a second attempt started in parallel when the first is slow (a later issue).

pub mod api;
pub mod app;
pub mod audit;
pub mod canonical;
pub mod cli;
pub mod config;
pub mod demo;
pub mod metrics;
pub mod mock;
pub mod provider;
pub mod routing;
pub mod stats;

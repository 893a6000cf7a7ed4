//! A route's resilience policy: `[routes.failover]`, `[routes.breaker]`, `[routes.hedge]`,
//! `[routes.retry_budget]`, `[routes.context]` and `[routes.adaptive]`.
//!
//! The `Default` impls are the built-in defaults from the product contract (docs/CONTRACT.md), used for
//! every key that neither the route nor `[defaults]` sets.

use std::num::NonZeroU32;
use std::time::Duration;

/// What a failure after the stream's commit point does (`failover.mid_stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MidStream {
    /// Ask the next target to continue the answer (`"continue"`).
    Continue,
    /// End the stream with an error event (`"error"`).
    Error,
}

/// What a Responses API request that offers built-in tools (`web_search`, ...) gets from a
/// target without the provider's own Responses API (`failover.builtin_tools`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinTools {
    /// Such a target is not asked (`"native"`): the request goes only where its tools run.
    Native,
    /// Such a target gets the request without the built-in tools it only offers (`"drop"`);
    /// one that uses them (in its input, or forced by `tool_choice`) is still not sent there.
    Drop,
}

/// `[routes.failover]`: per-request retries on the next target.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverPolicy {
    /// Statuses that move to the next target (each in 400..=599).
    pub on_status: Vec<u16>,
    /// Upstream calls per client request, at least one.
    pub max_attempts: NonZeroU32,
    /// Quick failures retried on the same target before moving on; 0 moves on at once.
    pub same_target_retries: u32,
    /// A 429 whose `Retry-After` is at most this is retried on the same target after the wait.
    pub retry_after_wait: Duration,
    /// What a failure after the commit point does.
    pub mid_stream: MidStream,
    /// Whether a Responses request offering built-in tools may go to a translated target.
    pub builtin_tools: BuiltinTools,
    /// A stalled attempt is abandoned after this; never above `request_timeout`.
    pub attempt_timeout: Duration,
    /// Streams: no first token by then counts as a stall; never above `request_timeout`.
    pub first_token_timeout: Duration,
    /// Streams: no chunk for this long counts as a stall.
    pub idle_timeout: Duration,
    /// The whole client request, all attempts included.
    pub request_timeout: Duration,
}

impl Default for FailoverPolicy {
    fn default() -> Self {
        FailoverPolicy {
            on_status: vec![401, 403, 404, 408, 429, 500, 502, 503, 504, 529],
            max_attempts: NonZeroU32::MIN.saturating_add(2),
            same_target_retries: 0,
            retry_after_wait: Duration::ZERO,
            mid_stream: MidStream::Continue,
            builtin_tools: BuiltinTools::Native,
            attempt_timeout: Duration::from_secs(30),
            first_token_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(120),
        }
    }
}

/// `[routes.breaker]`: the circuit breaker kept per target.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// Failure share in the window that opens the breaker, in (0, 1].
    pub failure_rate: f64,
    /// Length of the sliding window; greater than zero.
    pub window: Duration,
    /// Requests needed in the window before `failure_rate` applies.
    pub min_requests: u32,
    /// Failures in a row that open the breaker at once (with a high recent failure share);
    /// 0 disables this fast trip.
    pub consecutive_failures: u32,
    /// The first hold with no user traffic; greater than zero.
    pub open_for: Duration,
    /// The longest hold, reached by doubling when a target flip-flops; at least `open_for`.
    pub open_for_max: Duration,
    /// After the hold, test the target with small synthetic requests (else a user-traffic trickle).
    pub probe: bool,
    /// How often a held target is probed; greater than zero.
    pub probe_interval: Duration,
    /// Successes needed to close.
    pub half_open_probes: NonZeroU32,
    /// After closing, traffic returns gradually over this long; zero returns it at once.
    pub ramp: Duration,
    /// A failure share above this during the ramp reopens the breaker, in (0, 1].
    pub ramp_failure_rate: f64,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failure_rate: 0.40,
            window: Duration::from_secs(60),
            min_requests: 20,
            consecutive_failures: 5,
            open_for: Duration::from_secs(30),
            open_for_max: Duration::from_secs(20 * 60),
            probe: true,
            probe_interval: Duration::from_secs(10),
            half_open_probes: NonZeroU32::MIN.saturating_add(4),
            ramp: Duration::from_secs(5 * 60),
            ramp_failure_rate: 0.10,
        }
    }
}

/// How long the first attempt may run before a hedge starts (`hedge.delay`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeDelay {
    /// A fixed delay (`"800ms"`); greater than zero.
    Fixed(Duration),
    /// A percentile of the target's recent latency (`"p95"` is 95.0, `"p99.9"` is 99.9), in
    /// (0, 100); time to first token for streams.
    Percentile(f64),
}

/// `[routes.hedge]`: delayed parallel retries.
#[derive(Debug, Clone, PartialEq)]
pub struct HedgePolicy {
    /// Whether hedging is on for the route.
    pub enabled: bool,
    /// When the hedge starts.
    pub delay: HedgeDelay,
    /// Attempts in flight at once, the first included; at least one.
    pub max_parallel: NonZeroU32,
    /// At most this share of requests may be hedged, in [0, 1].
    pub budget: f64,
}

impl Default for HedgePolicy {
    fn default() -> Self {
        HedgePolicy {
            enabled: true,
            delay: HedgeDelay::Percentile(95.0),
            max_parallel: NonZeroU32::MIN.saturating_add(1),
            budget: 0.10,
        }
    }
}

/// `[routes.retry_budget]`: retries and hedges together, per target and overall.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryBudgetPolicy {
    /// Extra attempts allowed as a share of recent requests, in [0, 1].
    pub ratio: f64,
    /// Extra attempts always allowed per second, whatever the ratio.
    pub min_per_sec: u32,
}

impl Default for RetryBudgetPolicy {
    fn default() -> Self {
        RetryBudgetPolicy {
            ratio: 0.20,
            min_per_sec: 10,
        }
    }
}

/// What to do when a conversation does not fit a target's `context_window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOverflow {
    /// Drop the oldest turns, keeping the system prompt and the newest turns (`"trim_oldest"`).
    TrimOldest,
    /// Never trim: a conversation that does not fit is not sent to that target, and the client
    /// gets a context-length error when no target fits (`"error"`).
    Error,
}

/// `[routes.context]`: context carry-over between targets of different sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextPolicy {
    /// What to do on overflow.
    pub on_overflow: OnOverflow,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        ContextPolicy {
            on_overflow: OnOverflow::TrimOldest,
        }
    }
}

/// Whether a weighted or adaptive route keeps one conversation on one target
/// (`adaptive.affinity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// A conversation's requests go to the target its session key hashes to among the shares,
    /// while that target stays eligible (`"session"`).
    Session,
    /// Every request draws its target from the shares (`"off"`).
    Off,
}

/// `[routes.adaptive]`: how a weighted or adaptive route shares its traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptivePolicy {
    /// Every healthy target of an adaptive route keeps at least this share, so it stays
    /// measured (and can win its traffic back).
    pub floor: f64,
    /// Shares are recomputed this often, off the request path.
    pub interval: Duration,
    /// A share moves at most this much per interval (a breaker that opens takes its target's
    /// share away at once).
    pub max_step: f64,
    pub affinity: Affinity,
}

impl Default for AdaptivePolicy {
    fn default() -> Self {
        AdaptivePolicy {
            floor: 0.02,
            interval: Duration::from_secs(5),
            max_step: 0.20,
            affinity: Affinity::Session,
        }
    }
}

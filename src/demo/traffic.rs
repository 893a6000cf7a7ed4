//! The load generator: open loop at a fixed rate (a slow gateway does not slow the clients
//! down, as in production), each request one turn of a conversation taken from a pool of idle
//! ones, so histories grow and tool results follow tool calls. Outcomes are recorded per phase.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::agent::{send, Conversation, Outcome};
use super::setup::PRIMARY;

/// Requests in flight beyond which a tick is skipped (the gateway is far behind).
const MAX_IN_FLIGHT_PER_RPS: usize = 20;

/// What the clients saw during one phase.
#[derive(Debug, Clone)]
pub(super) struct PhaseStats {
    /// Requests sent.
    pub requests: u64,
    /// Of those, answered in full and correctly.
    pub ok: u64,
    /// Answered by the primary.
    pub on_primary: u64,
    /// Answered by a hedge.
    pub hedged: u64,
    /// Needed more than one upstream attempt.
    pub retried: u64,
    /// Streamed.
    pub streams: u64,
    /// Planning turns answered with a tool call.
    pub tool_steps: u64,
    /// Whole-answer latency in microseconds.
    pub latency: Histogram<u64>,
    /// The first few errors, for the report.
    pub errors: Vec<String>,
}

impl PhaseStats {
    fn new() -> PhaseStats {
        PhaseStats {
            requests: 0,
            ok: 0,
            on_primary: 0,
            hedged: 0,
            retried: 0,
            streams: 0,
            tool_steps: 0,
            latency: latency_histogram(),
            errors: Vec::new(),
        }
    }

    fn add(&mut self, o: &Outcome) {
        self.requests += 1;
        self.ok += u64::from(o.ok);
        let primary = o
            .target
            .as_deref()
            .is_some_and(|t| t.starts_with(&format!("{PRIMARY}/")));
        self.on_primary += u64::from(o.ok && primary);
        self.hedged += u64::from(o.hedged);
        self.retried += u64::from(o.attempts > 1);
        self.streams += u64::from(o.stream);
        self.tool_steps += u64::from(o.tool_step);
        let micros = u64::try_from(o.latency.as_micros()).unwrap_or(u64::MAX);
        self.latency.saturating_record(micros.max(1));
        if let (false, Some(e), true) = (o.ok, &o.error, self.errors.len() < 5) {
            self.errors.push(e.clone());
        }
    }

    /// Merge another phase's numbers (for the totals).
    pub(super) fn merge(&mut self, other: &PhaseStats) {
        self.requests += other.requests;
        self.ok += other.ok;
        self.on_primary += other.on_primary;
        self.hedged += other.hedged;
        self.retried += other.retried;
        self.streams += other.streams;
        self.tool_steps += other.tool_steps;
        let _ = self.latency.add(&other.latency);
        self.errors.extend(
            other
                .errors
                .iter()
                .take(5 - self.errors.len().min(5))
                .cloned(),
        );
    }

    /// An empty set of numbers.
    pub(super) fn empty() -> PhaseStats {
        PhaseStats::new()
    }
}

/// Latency in microseconds, 1 µs to 10 min, 3 significant digits.
#[expect(
    clippy::expect_used,
    reason = "constant bounds that hdrhistogram accepts; a failure is a bug caught by the tests"
)]
fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Outcomes by phase; the slot after the last phase collects `--keep-running` traffic.
#[derive(Debug)]
pub(super) struct Recorder {
    phases: Mutex<Vec<PhaseStats>>,
}

impl Recorder {
    /// Room for `phases` phases and the time after them.
    pub(super) fn new(phases: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            phases: Mutex::new((0..=phases).map(|_| PhaseStats::new()).collect()),
        })
    }

    fn record(&self, phase: usize, o: &Outcome) {
        let mut p = self.phases.lock().unwrap_or_else(PoisonError::into_inner);
        let last = p.len() - 1;
        if let Some(s) = p.get_mut(phase.min(last)) {
            s.add(o);
        }
    }

    /// A copy of every phase's numbers.
    pub(super) fn snapshot(&self) -> Vec<PhaseStats> {
        self.phases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A running load generator.
pub(super) struct Traffic {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Traffic {
    /// Send `rps` requests a second to the gateway at `base`; `phase` tells which phase a
    /// request started in.
    pub(super) fn start(
        base: String,
        rps: u32,
        recorder: Arc<Recorder>,
        phase: impl Fn() -> usize + Send + Sync + 'static,
    ) -> reqwest::Result<Traffic> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(generate(client, base, rps, recorder, phase, stopped));
        Ok(Traffic { stop, task })
    }

    /// Stop sending and wait (at most `grace`) for the requests in flight.
    pub(super) async fn stop(self, grace: Duration) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

async fn generate(
    client: reqwest::Client,
    base: String,
    rps: u32,
    recorder: Arc<Recorder>,
    phase: impl Fn() -> usize + Send + Sync + 'static,
    mut stopped: watch::Receiver<bool>,
) {
    let idle: Arc<Mutex<Vec<Conversation>>> = Arc::default();
    let mut in_flight = JoinSet::new();
    let mut rng = fastrand::Rng::with_seed(7);
    let period = Duration::from_secs(1) / rps.max(1);
    let mut tick = tokio::time::interval_at(Instant::now(), period);
    let limit = MAX_IN_FLIGHT_PER_RPS * rps as usize;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopped.changed() => break,
        }
        while in_flight.try_join_next().is_some() {}
        if in_flight.len() >= limit {
            continue;
        }
        let taken = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let mut conversation = taken.unwrap_or_else(|| Conversation::new(&mut rng));
        let mut turn_rng = fastrand::Rng::with_seed(rng.u64(..));
        let (client, base, idle, recorder) =
            (client.clone(), base.clone(), idle.clone(), recorder.clone());
        let started_in = phase();
        in_flight.spawn(async move {
            let turn = conversation.turn(&mut turn_rng);
            let (outcome, answer) = send(&client, &base, &turn).await;
            recorder.record(started_in, &outcome);
            // A failed turn ends the conversation, as an agent would give up on its task.
            if let Some(answer) = answer {
                conversation.absorb(answer, &mut turn_rng);
                if !conversation.is_done() {
                    idle.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(0, conversation);
                }
            }
        });
    }
    while in_flight.join_next().await.is_some() {}
}

//! Health probes: once a held target's hold has elapsed, small synthetic requests (one token,
//! hard timeout) test it every `probe_interval`, so recovery never waits on user traffic.
//! Probes carry `x-switchyard-probe: 1` ([`super::attempt::PROBE_HEADER`]).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use super::attempt::{call_full, Forward};
use super::body::request_body;
use super::health::Verdict;
use super::{Routing, Target};
use crate::wire::{ChatRequest, Forms};

/// How often the prober looks for due probes.
const TICK: Duration = Duration::from_millis(100);

/// The probe's request: as small as a chat request gets, in the target's own dialect.
fn probe_body(target: &Target) -> Option<Vec<u8>> {
    let openai = serde_json::json!({
        "model": target.config.model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
    });
    let chat = ChatRequest::parse(bytes::Bytes::from(openai.to_string())).ok()?;
    request_body(target, &Forms::openai(chat), None).ok()
}

/// Probe one target and report the result to its breaker.
pub async fn probe(target: Arc<Target>) {
    let start = Instant::now();
    let Some(body) = probe_body(&target) else {
        return;
    };
    let deadline = crate::clock::after(start, target.probe_timeout);
    let result = call_full(&target, body, deadline, true, Forward::default()).await;
    let elapsed = start.elapsed();
    let verdict = match &result {
        Ok(_) => Verdict::Ok,
        Err(e) => {
            tracing::info!(target = %target.id(), kind = e.kind(), status = e.status().map(|s| s.as_u16()), "probe failed");
            // A probe's client error still means the target is down for us (e.g. a 400 about
            // the probe's own shape would otherwise hold it half-open forever).
            Verdict::Failed
        }
    };
    target.health.attempt(Instant::now(), verdict, elapsed);
}

/// Run until dropped: every tick, start the probes that are due.
pub async fn run(routing: Arc<ArcSwap<Routing>>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let table = routing.load();
        for target in table.targets() {
            if target.health.probe_due(now) {
                tokio::spawn(probe(target.clone()));
            }
        }
    }
}

//! Health probes: once a held target's hold has elapsed, small synthetic requests (one token,
//! hard timeout) test it every `probe_interval`, so recovery never waits on user traffic.
//! Probes carry `x-switchyard-probe: 1` ([`super::attempt::PROBE_HEADER`]).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
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
    let verdict = match &result {
        Ok(_) => Verdict::Ok,
        Err(e) => {
            tracing::info!(target = %target.id(), kind = e.kind(), status = e.status().map(|s| s.as_u16()), "probe failed");
            // A probe's client error still means the target is down for us (e.g. a 400 about
            // the probe's own shape would otherwise hold it half-open forever).
            Verdict::Failed
        }
    };
    target.health.attempt(start, Instant::now(), verdict);
}

/// Run until dropped: every tick, start the probes that are due. While every breaker is
/// closed it sleeps until one leaves `closed` (`wake`, [`super::Shared::probe`]) instead of
/// ticking: an idle gateway's runtime is not woken ten times a second for nothing.
pub async fn run(routing: Arc<ArcSwap<Routing>>, wake: Arc<Notify>) {
    run_with(&wake, |now| {
        let table = routing.load();
        let mut held = false;
        for target in table.targets() {
            if target.health.probe_due(now) {
                tokio::spawn(probe(target.clone()));
            }
            held |= target.health.held();
        }
        held
    })
    .await;
}

/// The prober's loop around `scan`, which starts what is due and says whether any breaker is
/// still held.
async fn run_with(wake: &Notify, mut scan: impl FnMut(Instant) -> bool) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !scan(Instant::now()) {
            wake.notified().await;
            // The first scan right away: a hold may be zero long.
            tick.reset_immediately();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// While nothing is held the prober sleeps; a breaker leaving `closed` wakes it (even one
    /// that left before the prober began to wait), and it ticks until nothing is held.
    #[tokio::test(start_paused = true)]
    async fn the_prober_ticks_only_while_a_breaker_is_held() {
        let wake = Notify::new();
        let scans = Cell::new(0u32);
        let held_for = Cell::new(0u32); // scans left that find a breaker held
        let trip_after_scan = Cell::new(false);
        let scan = |_| {
            scans.set(scans.get() + 1);
            if trip_after_scan.replace(false) {
                // A breaker trips after the scan read it, before the prober waits.
                wake.notify_one();
            }
            let held = held_for.get() > 0;
            held_for.set(held_for.get().saturating_sub(1));
            held
        };
        let prober = run_with(&wake, scan);
        tokio::pin!(prober);
        crate::clock::run_for(prober.as_mut(), 10).await;
        assert_eq!(scans.get(), 1, "idle: one scan, then asleep");

        held_for.set(5);
        wake.notify_one();
        crate::clock::run_for(prober.as_mut(), 10).await;
        assert_eq!(
            scans.get(),
            1 + 6,
            "five scans find it held, the sixth finds none"
        );

        // Woken before it waits: the permit is kept, and the next scan comes at once.
        trip_after_scan.set(true);
        held_for.set(1);
        wake.notify_one();
        crate::clock::run_for(prober.as_mut(), 10).await;
        assert_eq!(
            scans.get(),
            7 + 3,
            "a scan finds it held, one more, one for the trip"
        );
    }
}

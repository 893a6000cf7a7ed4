//! The recomputation of adaptive shares, off the request path: one task for every adaptive
//! route of the current table. Each route's shares are recomputed every `adaptive.interval`
//! from the difference between two reads of its targets' signals; requests only read the
//! published shares.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::share::{Rules, Sample};
use crate::routing::health::Signals;
use crate::routing::{Route, Routing};

/// The quantile of an interval's latencies that stands for its tail.
const TAIL: f64 = 0.90;

/// Run until dropped: recompute the shares that are due, then sleep until the next are, or
/// until a reload swaps the table (`reloaded`, [`crate::routing::Shared::reloaded`]: it may
/// add, change or remove adaptive routes). With no adaptive route it sleeps until a reload: a
/// gateway without one is not woken for it at all.
pub async fn run(routing: Arc<ArcSwap<Routing>>, reloaded: Arc<Notify>) {
    run_with(&reloaded, |now| {
        let table = routing.load();
        table
            .routes()
            .filter_map(|route| recompute_if_due(route, now))
            .min()
    })
    .await;
}

/// [`run`] over `scan`, which recomputes what is due at `now` and says when the next is due
/// (`None`: nothing adaptive).
async fn run_with(reloaded: &Notify, mut scan: impl FnMut(Instant) -> Option<Instant>) {
    loop {
        let next = scan(Instant::now());
        // A reload during the scan is not missed: `notify_one` keeps a permit for the next
        // wait.
        let reload = reloaded.notified();
        match next {
            Some(next) => {
                tokio::select! {
                    () = tokio::time::sleep_until(next) => {}
                    () = reload => {}
                }
            }
            None => reload.await,
        }
    }
}

/// Recompute `route`'s shares if its interval has passed; when it is next due. `None` for a
/// route that is not adaptive.
pub fn recompute_if_due(route: &Route, now: Instant) -> Option<Instant> {
    let adaptive = route.selection.adaptive.as_ref()?;
    let policy = &route.config.adaptive;
    let mut state = adaptive.lock();
    let due = state
        .at
        .map_or(now, |at| crate::clock::after(at, policy.interval));
    if now < due {
        return Some(due);
    }
    let reads: Vec<Option<Signals>> = route.targets.iter().map(|t| t.health.signals()).collect();
    let first = state.at.is_none();
    let samples: Vec<Sample> = route
        .targets
        .iter()
        .zip(&reads)
        .zip(&state.last)
        .map(|((t, read), last)| Sample {
            gate: t.health.traffic_share(now),
            headroom: t.health.headroom(),
            ..difference(read.as_ref(), last.as_ref())
        })
        .collect();
    state.last = reads;
    state.at = Some(now);
    if !first {
        let rules = Rules {
            interval: policy.interval,
            floor: policy.floor,
            max_step: policy.max_step,
            trip_rate: route.config.breaker.failure_rate,
        };
        let c = &route.config;
        let adopted = adaptive.follower.load(std::sync::atomic::Ordering::Relaxed);
        let kept = adaptive.shares();
        state.shares.step(&rules, &c.weights, &c.prices, &samples);
        if adopted {
            // Another replica's shares stand; this one's scores are still shown.
            for (t, s) in state.shares.tracks.iter_mut().zip(kept) {
                t.share = s;
            }
        } else {
            let shares: Vec<f64> = state.shares.tracks.iter().map(|t| t.share).collect();
            route.selection.set_shares(&shares);
        }
    }
    Some(crate::clock::after(now, policy.interval))
}

/// What happened between two reads of a target's signals.
fn difference(now: Option<&Signals>, last: Option<&Signals>) -> Sample {
    let Some(now) = now else {
        return Sample::default();
    };
    let tail = |h: &hdrhistogram::Histogram<u64>, before: Option<&hdrhistogram::Histogram<u64>>| {
        let mut h = h.clone();
        if let Some(b) = before {
            if h.subtract(b).is_err() {
                return None;
            }
        }
        let n = h.len();
        (n > 0).then(|| (Duration::from_micros(h.value_at_quantile(TAIL)), n))
    };
    Sample {
        ok: now.ok - last.map_or(0, |l| l.ok.min(now.ok)),
        failed: now.failed - last.map_or(0, |l| l.failed.min(now.failed)),
        latency: tail(&now.latency, last.map(|l| &l.latency)),
        ttft: tail(&now.ttft, last.map(|l| &l.ttft)),
        headroom: None,
        gate: 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::metrics::Registry;
    use crate::routing::breaker::Manual;
    use crate::routing::health::Verdict;
    use crate::routing::Shared;

    const CONFIG: &str = r#"
[[providers]]
name = "p"
kind = "openai-compatible"
base_url = "http://127.0.0.1:1"

[[routes]]
name = "smart"
strategy = "adaptive"
targets = [{ provider = "p", model = "a" }, { provider = "p", model = "b" }, { provider = "p", model = "c" }]
[routes.adaptive]
interval = "5s"
"#;

    fn table() -> (Routing, Arc<Registry>) {
        Routing::of_toml(CONFIG)
    }

    /// Without an adaptive route the task sleeps until a reload; with one, until its next
    /// interval or a reload, whichever comes first; a reload during a scan is not missed.
    #[tokio::test(start_paused = true)]
    async fn the_shares_task_wakes_for_its_intervals_and_reloads_only() {
        let reloaded = Notify::new();
        let scans = std::cell::Cell::new(0u32);
        let every: std::cell::Cell<Option<Duration>> = std::cell::Cell::new(None);
        let reload_in_scan = std::cell::Cell::new(false);
        let task = run_with(&reloaded, |now| {
            scans.set(scans.get() + 1);
            if reload_in_scan.replace(false) {
                reloaded.notify_one();
            }
            every.get().map(|d| now + d)
        });
        tokio::pin!(task);
        crate::clock::run_for(task.as_mut(), 30).await;
        assert_eq!(scans.get(), 1, "nothing adaptive: one scan, then asleep");

        // A reload makes a route adaptive, with a 5 s interval.
        every.set(Some(Duration::from_secs(5)));
        reloaded.notify_one();
        crate::clock::run_for(task.as_mut(), 12).await;
        assert_eq!(
            scans.get(),
            1 + 3,
            "the reload's scan, then at 5 s and 10 s"
        );

        // A reload lands while a scan runs: the next scan comes at once, not at the interval.
        reload_in_scan.set(true);
        reloaded.notify_one();
        crate::clock::run_for(task.as_mut(), 1).await;
        assert_eq!(
            scans.get(),
            4 + 2,
            "the reload's scan, and one for the reload in it"
        );
    }

    /// One interval of traffic: 50 answers per target, the first at `first_ms`.
    async fn interval(route: &Route, first_ms: u64) {
        let now = Instant::now();
        for (i, t) in route.targets.iter().enumerate() {
            let ms = if i == 0 { first_ms } else { 100 };
            for _ in 0..50 {
                t.health
                    .attempt(now - Duration::from_millis(ms), now, Verdict::Ok);
            }
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        recompute_if_due(route, Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn shares_follow_the_targets_signals_interval_by_interval() {
        let (routing, metrics) = table();
        let route = routing
            .route("smart")
            .cloned()
            .unwrap_or_else(|| panic!("route"));
        // The first recomputation only takes the first read.
        assert_eq!(
            recompute_if_due(&route, Instant::now()),
            Some(Instant::now() + Duration::from_secs(5))
        );
        for _ in 0..10 {
            interval(&route, 100).await;
        }
        let even = route.selection.shares();
        assert!(
            even.iter().all(|s| (s - 1.0 / 3.0).abs() < 1e-9),
            "{even:?}"
        );
        // Not due yet: nothing moves.
        assert!(recompute_if_due(&route, Instant::now()).is_some_and(|t| t > Instant::now()));
        // A brownout of the first target: three times slower, no failures.
        for _ in 0..3 {
            interval(&route, 300).await;
        }
        let brownout = route.selection.shares();
        assert!(brownout[0] < 0.1, "{brownout:?}");
        let text = metrics.render();
        assert!(
            text.contains(&format!(
                "switchyard_target_share{{route=\"smart\",target=\"p/a\"}} {}",
                brownout[0]
            )),
            "{text}"
        );
        for _ in 0..6 {
            interval(&route, 100).await;
        }
        let back = route.selection.shares();
        assert!((back[0] - 1.0 / 3.0).abs() < 0.02, "{back:?}");
        // Its breaker held open by an operator: no share at the next recomputation.
        route.targets[0].health.manual(Instant::now(), Manual::Open);
        interval(&route, 100).await;
        let open = route.selection.shares();
        assert_eq!(open[0], 0.0, "{open:?}");
        assert!((open[1] - 0.5).abs() < 1e-9, "{open:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_keeps_the_tracks_of_the_same_targets() {
        let config = Config::from_toml(CONFIG, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let config = Arc::new(config);
        let shared = Shared::new(Registry::new(), 1 << 20);
        let first = Routing::build(config.clone(), &shared).unwrap_or_else(|e| panic!("{e}"));
        let route = first
            .route("smart")
            .cloned()
            .unwrap_or_else(|| panic!("route"));
        recompute_if_due(&route, Instant::now());
        for _ in 0..4 {
            interval(&route, 400).await;
        }
        let before = route.selection.shares();
        assert!(before[0] < 0.1, "{before:?}");
        let second = Routing::build(config, &shared).unwrap_or_else(|e| panic!("{e}"));
        let reloaded = second
            .route("smart")
            .cloned()
            .unwrap_or_else(|| panic!("route"));
        assert_eq!(reloaded.selection.shares(), before);
    }
}

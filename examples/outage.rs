//! `bench/outage`: a primary outage and recovery under steady load, measured from the client.
//!
//! 100 requests/s for 90 s against a route with two targets: the primary returns 503 for 30 s,
//! then 50% errors for 20 s, then recovers. Reports the client-visible success rate, the user
//! attempts the primary got while down, the time to open its breaker, the time until user
//! traffic was back on it, and p99 latency by phase. Run: `bench/outage` (or
//! `cargo run --release --example outage -- --rps 100 --scale 1.0`).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use switchyard::mock::{FaultPlan, MockServer};
use tokio::time::Instant;

#[derive(Default)]
struct Phase {
    ok: AtomicU64,
    failed: AtomicU64,
    on_primary: AtomicU64,
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: f64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rps = arg("--rps", 100.0);
    let scale = arg("--scale", 1.0);
    let secs = |s: f64| Duration::from_secs_f64(s * scale);

    let primary = MockServer::spawn("primary").await.unwrap();
    let backup = MockServer::spawn("backup").await.unwrap();
    let toml = format!(
        "[[providers]]\nname = \"primary\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"backup\"\nkind = \"openai\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"primary\", model = \"p\" }}, {{ provider = \"backup\", model = \"b\" }}]\n\
         [routes.hedge]\nenabled = false\n\n[audit]\nstore = \"off\"\n",
        primary.base_url(),
        backup.base_url()
    );
    let config = switchyard::config::Config::from_toml(&toml, &|_| None).unwrap();
    let state = switchyard::app::build_state(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let events_state = state.shared.events.clone();
    tokio::spawn(switchyard::app::serve(
        listener,
        state,
        std::future::pending(),
    ));

    let phases = [
        "healthy",
        "outage (503)",
        "partial (50% errors)",
        "recovered",
    ];
    let bounds = [secs(20.0), secs(50.0), secs(70.0), secs(110.0)];
    let stats: Arc<Vec<Phase>> = Arc::new((0..4).map(|_| Phase::default()).collect());
    let hists: Arc<Vec<Mutex<Histogram<u64>>>> = Arc::new(
        (0..4)
            .map(|_| Mutex::new(Histogram::new(3).unwrap()))
            .collect(),
    );
    let client = reqwest::Client::new();
    let body =
        serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rps));
    let mut phase = 0;
    let mut recovered_at = None;
    let back_on_primary = Arc::new(Mutex::new(None::<Duration>));
    let mut primary_calls_at_outage = 0;
    let mut primary_calls_at_partial = 0;
    println!(
        "bench/outage: {rps} req/s, phases {:?} ending at {:?}",
        phases, bounds
    );
    loop {
        tick.tick().await;
        let now = t0.elapsed();
        while phase < 4 && now >= bounds[phase] {
            phase += 1;
            match phase {
                1 => {
                    primary_calls_at_outage = primary.stats().requests;
                    primary.set_plan(FaultPlan {
                        status: Some(503),
                        ..Default::default()
                    });
                }
                2 => {
                    primary_calls_at_partial = primary.stats().requests;
                    primary.set_plan(FaultPlan {
                        status: Some(500),
                        error_rate: 0.5,
                        seed: 1,
                        ..Default::default()
                    });
                }
                3 => {
                    primary.set_plan(FaultPlan::default());
                    recovered_at = Some(now);
                }
                _ => {}
            }
        }
        if phase >= 4 {
            break;
        }
        let (client, url, body, stats, hists, back) = (
            client.clone(),
            url.clone(),
            body.clone(),
            stats.clone(),
            hists.clone(),
            back_on_primary.clone(),
        );
        let p = phase;
        tokio::spawn(async move {
            let start = Instant::now();
            let resp = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            let elapsed = start.elapsed();
            let ok = resp.as_ref().is_ok_and(|r| r.status().is_success());
            let target = resp
                .as_ref()
                .ok()
                .and_then(|r| r.headers().get("x-switchyard-target"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if let Ok(r) = resp {
                let _ = r.bytes().await;
            }
            let s = &stats[p];
            if ok {
                s.ok.fetch_add(1, Ordering::Relaxed)
            } else {
                s.failed.fetch_add(1, Ordering::Relaxed)
            };
            if target.starts_with("primary/") {
                s.on_primary.fetch_add(1, Ordering::Relaxed);
                if p == 3 {
                    let mut b = back.lock().unwrap();
                    b.get_or_insert(t0.elapsed());
                }
            }
            let _ = hists[p].lock().unwrap().record(elapsed.as_micros() as u64);
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let opened = events_state
        .since(0, 500)
        .into_iter()
        .find(|e| e.kind == "breaker" && e.to == "open")
        .map(|e| e.time_ms);
    let wall_t0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - t0.elapsed().as_millis() as u64;
    let (ok, failed): (u64, u64) = stats.iter().fold((0, 0), |(o, f), s| {
        (
            o + s.ok.load(Ordering::Relaxed),
            f + s.failed.load(Ordering::Relaxed),
        )
    });
    println!("\n| phase | requests | success | served by primary | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|");
    for (i, name) in phases.iter().enumerate() {
        let s = &stats[i];
        let (o, f) = (
            s.ok.load(Ordering::Relaxed),
            s.failed.load(Ordering::Relaxed),
        );
        let h = hists[i].lock().unwrap();
        println!(
            "| {name} | {} | {:.2}% | {} | {:.2} | {:.2} |",
            o + f,
            100.0 * o as f64 / (o + f).max(1) as f64,
            s.on_primary.load(Ordering::Relaxed),
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0
        );
    }
    println!(
        "\nclient-visible success rate: {:.3}% ({ok} ok, {failed} failed)",
        100.0 * ok as f64 / (ok + failed).max(1) as f64
    );
    println!(
        "upstream calls to the primary during the 503 phase (user attempts and probes): {}",
        primary_calls_at_partial.saturating_sub(primary_calls_at_outage)
    );
    if let Some(open_ms) = opened {
        println!(
            "time to open after the outage began: {:.0} ms",
            open_ms as f64 - (wall_t0 as f64 + bounds[0].as_secs_f64() * 1000.0)
        );
    }
    if let (Some(r), Some(b)) = (recovered_at, *back_on_primary.lock().unwrap()) {
        println!(
            "time until user traffic was back on the primary after recovery: {:.1} s",
            (b - r).as_secs_f64()
        );
    }
    let h = |i: usize| hists[i].lock().unwrap().value_at_quantile(0.99) as f64 / 1000.0;
    println!(
        "added p99 during the outage over the healthy phase: {:.2} ms",
        h(1) - h(0)
    );
}

//! `bench/adaptive`: priority against adaptive selection on the same load, in one run.
//!
//! 1. A brownout: a primary and two healthy backups (20 ms each). After 20 s the primary turns
//!    three times slower with 10% errors (503) for 60 s, never enough to trip its breaker, then
//!    recovers for 40 s. 100 requests/s, open loop, measured from the client: p50/p90/p99 and
//!    errors per phase (the brownout's first 20 s, while the shares move, apart from the rest),
//!    the primary's part of the answers, and its share over time. Priority, and adaptive with
//!    weights 2:1:1 (the primary half the traffic while healthy), each with hedging off (the
//!    strategies alone) and on (the default: delay p95, budget 10%).
//! 2. Two equal targets for 60 s: how far the first one's share swings, and, with session
//!    affinity, how many of each session's requests land on its usual target.
//!
//! Run: `bench/adaptive` (or `cargo run --release --example adaptive -- --rps 100 --scale 1.0`;
//! `--scale 0.25` runs the same story four times faster).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use switchyard::mock::{FaultPlan, MockServer};
use tokio::time::Instant;

fn plan(ms: u64, errors: f64) -> FaultPlan {
    FaultPlan {
        latency_ms: ms,
        status: (errors > 0.0).then_some(503),
        error_rate: if errors > 0.0 { errors } else { 1.0 },
        ..FaultPlan::default()
    }
}

/// `n` mocks named `{prefix}0`, `{prefix}1`, ..., answering in 20 ms.
async fn healthy_mocks(prefix: &str, n: usize) -> Vec<MockServer> {
    let spawn =
        (0..n).map(|i| async move { MockServer::spawn(&format!("{prefix}{i}")).await.unwrap() });
    let mocks = futures_util::future::join_all(spawn).await;
    for m in &mocks {
        m.set_plan(plan(20, 0.0));
    }
    mocks
}

/// A gateway in this process over `mocks` with `route` (TOML after the providers); its base URL.
async fn gateway(mocks: &[&MockServer], route: &str) -> String {
    let mut toml = String::from("[audit]\nstore = \"off\"\n\n");
    for (i, m) in mocks.iter().enumerate() {
        toml += &format!(
            "[[providers]]\nname = \"p{i}\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n",
            m.base_url()
        );
    }
    toml += route;
    let config = switchyard::config::Config::from_toml(&toml, &|_| None).unwrap();
    let state = switchyard::app::build_state(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(switchyard::app::serve(
        listener,
        state,
        std::future::pending(),
    ));
    url
}

fn targets(n: usize, weights: &[u32]) -> String {
    let t: Vec<String> = (0..n)
        .map(|i| match weights.get(i) {
            Some(w) => format!("{{ provider = \"p{i}\", model = \"m{i}\", weight = {w} }}"),
            None => format!("{{ provider = \"p{i}\", model = \"m{i}\" }}"),
        })
        .collect();
    format!("targets = [{}]\n", t.join(", "))
}

/// What the client saw in one phase.
struct Phase {
    hist: Histogram<u64>,
    failed: u64,
    by_target: HashMap<String, u64>,
    /// Answers per target, by session.
    by_session: HashMap<String, HashMap<String, u64>>,
}

impl Phase {
    fn new() -> Phase {
        Phase {
            hist: Histogram::new(3).unwrap(),
            failed: 0,
            by_target: HashMap::new(),
            by_session: HashMap::new(),
        }
    }
}

/// The first target's share in `/admin/status`.
async fn share(client: &reqwest::Client, url: &str) -> Option<f64> {
    let st: serde_json::Value = client
        .get(format!("{url}/admin/status"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    st["routes"][0]["shares"][0]["share"].as_f64()
}

/// Drive `rps` requests/s at `url` for `bounds.last()`, with `at(t)` called as each phase
/// starts; `session(i)` names request `i`'s session, if any. Per phase, what the client saw;
/// and the first target's share every `sample`.
async fn drive(
    url: &str,
    rps: f64,
    bounds: &[Duration],
    mut at: impl FnMut(usize),
    session: impl Fn(u64) -> Option<String>,
    sample: Duration,
) -> (Vec<Phase>, Vec<f64>) {
    let client = reqwest::Client::new();
    let phases: Arc<Vec<Mutex<Phase>>> =
        Arc::new(bounds.iter().map(|_| Mutex::new(Phase::new())).collect());
    let shares = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (client, url, shares) = (client.clone(), url.to_owned(), shares.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sample);
            loop {
                tick.tick().await;
                if let Some(s) = share(&client, &url).await {
                    shares.lock().unwrap().push(s);
                }
            }
        })
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rps));
    let t0 = Instant::now();
    let mut phase = 0;
    at(0);
    let mut tasks = Vec::new();
    let mut i = 0u64;
    let end = *bounds.last().unwrap();
    while t0.elapsed() < end {
        tick.tick().await;
        while phase + 1 < bounds.len() && t0.elapsed() >= bounds[phase] {
            phase += 1;
            at(phase);
        }
        i += 1;
        let body = serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": format!("q{i}")}]})
            .to_string();
        let mut req = client
            .post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body);
        let session = session(i);
        if let Some(s) = &session {
            req = req.header("x-switchyard-session", s.as_str());
        }
        let phases = phases.clone();
        let p = phase;
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let target = match req.send().await {
                Ok(r) if r.status().is_success() => {
                    let t = r
                        .headers()
                        .get("x-switchyard-target")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_owned();
                    r.bytes().await.ok().map(|_| t)
                }
                _ => None,
            };
            let mut phase = phases[p].lock().unwrap();
            match target {
                Some(t) => {
                    let _ = phase.hist.record(start.elapsed().as_micros() as u64);
                    if let Some(s) = session {
                        *phase
                            .by_session
                            .entry(s)
                            .or_default()
                            .entry(t.clone())
                            .or_default() += 1;
                    }
                    *phase.by_target.entry(t).or_default() += 1;
                }
                None => phase.failed += 1,
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    sampler.abort();
    let phases = Arc::try_unwrap(phases)
        .ok()
        .unwrap()
        .into_iter()
        .map(|m| m.into_inner().unwrap())
        .collect();
    let shares = shares.lock().unwrap().clone();
    (phases, shares)
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

    println!(
        "bench/adaptive: {rps} req/s; primary and two backups at 20 ms; brownout: primary 60 ms with 10% 503s \
         from {:.0} s to {:.0} s; adaptive interval {:.2} s, max_step 0.20\n",
        20.0 * scale,
        80.0 * scale,
        5.0 * scale
    );
    println!("| strategy | phase | p50 ms | p90 ms | p99 ms | errors | answered by the primary |");
    println!("|---|---|---|---|---|---|---|");
    let bounds = [secs(20.0), secs(40.0), secs(80.0), secs(120.0)];
    // The adaptive interval scales with the story (5 s at scale 1).
    let interval = format!("interval = \"{}ms\"\n", secs(5.0).as_millis().max(100));
    let names = [
        "healthy",
        "brownout, first 20 s",
        "brownout, last 40 s",
        "recovered",
    ];
    let adaptive = "[routes.adaptive]\naffinity = \"off\"\n";
    let (off, on) = ("enabled = false\n", "");
    let runs = [
        ("priority", "strategy = \"priority\"\n", vec![], "", off),
        (
            "adaptive",
            "strategy = \"adaptive\"\n",
            vec![2, 1, 1],
            adaptive,
            off,
        ),
        (
            "priority, hedging",
            "strategy = \"priority\"\n",
            vec![],
            "",
            on,
        ),
        (
            "adaptive, hedging",
            "strategy = \"adaptive\"\n",
            vec![2, 1, 1],
            adaptive,
            on,
        ),
    ];
    let mut series = Vec::new();
    for (label, strategy, weights, table, hedge) in &runs {
        let table = if table.is_empty() {
            String::new()
        } else {
            format!("{table}{interval}")
        };
        let m = healthy_mocks("m", 3).await;
        let route = format!(
            "[[routes]]\nname = \"chat\"\n{strategy}{}\n[routes.hedge]\n{hedge}{table}",
            targets(3, weights)
        );
        let url = gateway(&m.iter().collect::<Vec<_>>(), &route).await;
        let primary = &m[0];
        let (phases, shares) = drive(
            &url,
            rps,
            &bounds,
            |p| match p {
                1 => primary.set_plan(plan(60, 0.10)),
                3 => primary.set_plan(plan(20, 0.0)),
                _ => {}
            },
            |_| None,
            secs(5.0),
        )
        .await;
        // The whole brownout as well as its two parts.
        let mut whole = Phase::new();
        for ph in &phases[1..3] {
            whole.hist.add(&ph.hist).expect("same histogram bounds");
            whole.failed += ph.failed;
            for (t, n) in &ph.by_target {
                *whole.by_target.entry(t.clone()).or_default() += n;
            }
        }
        let rows = names.iter().zip(&phases).take(3);
        let rows = rows.chain([(&"brownout, all 60 s", &whole), (&names[3], &phases[3])]);
        for (name, ph) in rows {
            let n: u64 = ph.by_target.values().sum();
            let on_primary = ph.by_target.get("p0/m0").copied().unwrap_or(0);
            let ms = |q: f64| ph.hist.value_at_quantile(q) as f64 / 1000.0;
            println!(
                "| {label} | {name} | {:.1} | {:.1} | {:.1} | {:.2}% | {:.1}% |",
                ms(0.5),
                ms(0.9),
                ms(0.99),
                100.0 * ph.failed as f64 / (n + ph.failed).max(1) as f64,
                100.0 * on_primary as f64 / n.max(1) as f64
            );
        }
        if !shares.is_empty() {
            series.push((label.to_owned(), shares));
        }
    }
    println!("\nThe primary's share, every {:.2} s:\n", 5.0 * scale);
    for (label, s) in &series {
        let v: Vec<String> = s.iter().map(|x| format!("{x:.2}")).collect();
        println!("- {label}: {}", v.join(" "));
    }

    // Two equal targets, sessions from a pool of 200.
    let m = healthy_mocks("e", 2).await;
    let route = format!(
        "[[routes]]\nname = \"chat\"\nstrategy = \"adaptive\"\n{}\n[routes.hedge]\nenabled = false\n[routes.adaptive]\n{interval}",
        targets(2, &[])
    );
    let url = gateway(&m.iter().collect::<Vec<_>>(), &route).await;
    let pool = 200u64;
    let (phases, shares) = drive(
        &url,
        rps,
        &[secs(10.0), secs(70.0)],
        |_| {},
        |_| Some(format!("s{}", fastrand::u64(..pool))),
        secs(1.0),
    )
    .await;
    // Each session's requests on its most used target, over all sessions' requests.
    let (mut modal, mut all) = (0u64, 0u64);
    for targets in phases[1].by_session.values() {
        modal += targets.values().max().copied().unwrap_or(0);
        all += targets.values().sum::<u64>();
    }
    let steady: Vec<f64> = shares.iter().skip(shares.len() / 7).copied().collect();
    let lo = steady.iter().copied().fold(1.0, f64::min);
    let hi = steady.iter().copied().fold(0.0, f64::max);
    let served: u64 = phases[1].by_target.values().sum();
    println!(
        "\nTwo equal targets, {:.0} s at {rps} req/s, 200 sessions: the first target's share from {lo:.3} to {hi:.3} \
         (a swing of {:.1} points); {:.1}% of each session's requests on its usual target; {} answers, {} failed",
        60.0 * scale,
        100.0 * (hi - lo),
        100.0 * modal as f64 / all.max(1) as f64,
        served,
        phases[1].failed
    );
}

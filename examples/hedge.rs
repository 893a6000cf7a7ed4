//! `bench/hedge`: tail latency with and without hedging, side by side in one run.
//!
//! A primary with a heavy tail (3% of requests take 2 s more) and a healthy backup, 50
//! requests/s for 60 s, once with hedging off and once on (the default `p95` delay), for
//! non-streamed and streamed requests. Reports p50, p99, p99.9 and the extra upstream requests.
//! Run: `bench/hedge` (or `cargo run --release --example hedge -- --rps 50 --secs 60`).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use switchyard::mock::{FaultPlan, MockServer};
use tokio::time::Instant;

struct Run {
    hist: Histogram<u64>,
    failed: u64,
    upstream: u64,
    requests: u64,
}

async fn run(hedging: bool, stream: bool, rps: f64, secs: f64) -> Run {
    let primary = MockServer::spawn("primary").await.unwrap();
    let backup = MockServer::spawn("backup").await.unwrap();
    let tail = FaultPlan {
        latency_ms: 20,
        tail_rate: 0.03,
        tail_ms: 2000,
        seed: 42,
        ..Default::default()
    };
    primary.set_plan(tail);
    backup.set_plan(FaultPlan {
        latency_ms: 20,
        ..Default::default()
    });
    let toml = format!(
        "[[providers]]\nname = \"primary\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n\
         [[providers]]\nname = \"backup\"\nkind = \"openai-compatible\"\nbase_url = \"{}\"\n\n\
         [[routes]]\nname = \"chat\"\ntargets = [{{ provider = \"primary\", model = \"p\" }}, {{ provider = \"backup\", model = \"b\" }}]\n\
         [routes.hedge]\nenabled = {hedging}\n\n[audit]\nstore = \"off\"\n",
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
    tokio::spawn(switchyard::app::serve(
        listener,
        state,
        std::future::pending(),
    ));

    let client = reqwest::Client::new();
    let body = serde_json::json!({"model": "chat", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let hist = Arc::new(Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let failed = Arc::new(Mutex::new(0u64));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rps));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    let mut requests = 0;
    while t0.elapsed() < Duration::from_secs_f64(secs) {
        tick.tick().await;
        requests += 1;
        let (client, url, body, hist, failed) = (
            client.clone(),
            url.clone(),
            body.clone(),
            hist.clone(),
            failed.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ok = match client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
            {
                // Time to the first byte of the body: the first token, for streams.
                Ok(mut r) if r.status().is_success() => r.chunk().await.is_ok_and(|c| c.is_some()),
                _ => false,
            };
            if ok {
                let _ = hist
                    .lock()
                    .unwrap()
                    .record(start.elapsed().as_micros() as u64);
            } else {
                *failed.lock().unwrap() += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let upstream = primary.stats().requests + backup.stats().requests;
    let hist = hist.lock().unwrap().clone();
    let failed = *failed.lock().unwrap();
    Run {
        hist,
        failed,
        upstream,
        requests,
    }
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
    let (rps, secs) = (arg("--rps", 50.0), arg("--secs", 60.0));
    println!("bench/hedge: primary 20 ms + 2 s for 3% of requests (seeded), backup 20 ms; {rps} req/s for {secs} s each\n");
    println!(
        "| requests | hedging | p50 ms | p99 ms | p99.9 ms | failed | upstream requests | extra |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for stream in [false, true] {
        for hedging in [false, true] {
            let r = run(hedging, stream, rps, secs).await;
            let ms = |q: f64| r.hist.value_at_quantile(q) as f64 / 1000.0;
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {} | {} | {:+.1}% |",
                if stream {
                    "streamed (time to first token)"
                } else {
                    "non-streamed"
                },
                if hedging { "on (p95)" } else { "off" },
                ms(0.5),
                ms(0.99),
                ms(0.999),
                r.failed,
                r.upstream,
                100.0 * (r.upstream as f64 - r.requests as f64) / r.requests as f64
            );
        }
    }
}

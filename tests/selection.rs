//! Weighted and adaptive routes through the running gateway: the weighted split, session
//! affinity (by header, by the client's hint, by the conversation's first turn), a brownout
//! that moves traffic before any breaker trips and back on recovery (on tokio's paused clock),
//! shares in `/admin/status` and `/metrics`, and why each attempt was picked in the audit path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{json, Value};
use support::audit::TestStore;
use support::*;
use switchyard::audit::AuditQuery;
use switchyard::mock::{FaultPlan, MockServer};

/// One provider per mock and a route `chat` of `strategy` over them with these `weights`;
/// `extra` is TOML after the route (its `[routes.adaptive]`, say).
fn route(mocks: &[MockServer], strategy: &str, weights: &[f64], extra: &str) -> String {
    let mut s = config(mocks, "");
    let targets: Vec<String> = (0..mocks.len())
        .map(|i| {
            format!(
                "{{ provider = \"p{i}\", model = \"model-{i}\", weight = {} }}",
                weights[i]
            )
        })
        .collect();
    let start = s.find("[[routes]]").unwrap();
    s.truncate(start);
    s += &format!(
        "[[routes]]\nname = \"chat\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n{extra}\n",
        targets.join(", ")
    );
    s
}

fn ask(text: &str) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": text}]})
}

/// Which target served each of `n` requests made by `make(i)`.
async fn served(
    gw: &Gateway,
    n: usize,
    make: impl Fn(usize) -> (Value, Vec<(String, String)>),
) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (body, headers) = make(i);
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let resp = gw.chat_with(body, &headers).await;
        assert_eq!(resp.status(), 200);
        out.push(header(&resp, "x-switchyard-target"));
    }
    out
}

fn share_of(served: &[String], target: &str) -> f64 {
    served.iter().filter(|t| *t == target).count() as f64 / served.len() as f64
}

#[tokio::test]
async fn a_weighted_route_splits_by_its_weights() {
    let m = mocks(3).await;
    let toml = route(
        &m,
        "weighted",
        &[3.0, 1.0, 0.0],
        "[routes.adaptive]\naffinity = \"off\"",
    );
    let gw = Gateway::start(&toml).await;
    let got = served(&gw, 800, |i| (ask(&format!("q{i}")), vec![])).await;
    let first = share_of(&got, "p0/model-0");
    assert!((first - 0.75).abs() < 0.06, "p0 served {first}");
    assert_eq!(
        share_of(&got, "p2/model-2"),
        0.0,
        "weight 0 takes no first attempts"
    );
    // The shares are in /admin/status and /metrics.
    let st = status(&gw).await;
    let r = &st["routes"][0];
    assert_eq!(r["strategy"], "weighted");
    assert_eq!(r["shares"][0]["share"], 0.75);
    assert_eq!(r["shares"][1]["weight"], 1.0);
    let text = metrics(&gw).await;
    assert!(
        text.contains("switchyard_target_share{route=\"chat\",target=\"p1/model-1\"} 0.25"),
        "{text}"
    );
    // A priority route shows none.
    let gw2 = Gateway::start(&config(&m, "")).await;
    let st = status(&gw2).await;
    assert_eq!(st["routes"][0]["strategy"], "priority");
    assert!(st["routes"][0]["shares"].is_null());
}

#[tokio::test]
async fn with_affinity_each_session_stays_on_one_target_and_sessions_spread() {
    let m = mocks(3).await;
    let gw = Gateway::start(&route(&m, "weighted", &[1.0, 1.0, 1.0], "")).await;
    // By header: 30 sessions of 6 requests each, their bodies all different.
    let got = served(&gw, 180, |i| {
        let session = format!("task-{}", i % 30);
        (
            ask(&format!("turn {i}")),
            vec![("x-switchyard-session".into(), session)],
        )
    })
    .await;
    let mut by_session: HashMap<usize, HashSet<&String>> = HashMap::new();
    for (i, t) in got.iter().enumerate() {
        by_session.entry(i % 30).or_default().insert(t);
    }
    assert!(by_session.values().all(|s| s.len() == 1), "{by_session:?}");
    let used: HashSet<&String> = got.iter().collect();
    assert!(used.len() >= 2, "30 sessions all on {used:?}");

    // By the client's own hint (OpenAI prompt_cache_key), and by the conversation's first turn:
    // each conversation grows turn by turn, as an agent's does.
    for hinted in [true, false] {
        let mut targets: HashMap<usize, HashSet<String>> = HashMap::new();
        for conv in 0..12 {
            let mut messages = vec![
                json!({"role": "system", "content": "You are an agent."}),
                json!({"role": "user", "content": format!("task {conv}")}),
            ];
            for turn in 0..4 {
                let mut body = json!({"model": "chat", "messages": messages});
                if hinted {
                    body["prompt_cache_key"] = json!(format!("conv-{conv}"));
                    // The hint decides, whatever the first turn says.
                    body["messages"][1]["content"] = json!(format!("task {conv}.{turn}"));
                }
                let resp = gw.chat(body).await;
                assert_eq!(resp.status(), 200);
                targets
                    .entry(conv)
                    .or_default()
                    .insert(header(&resp, "x-switchyard-target"));
                messages.push(json!({"role": "assistant", "content": "ok"}));
                messages.push(json!({"role": "user", "content": format!("next {turn}")}));
            }
        }
        assert!(
            targets.values().all(|s| s.len() == 1),
            "hinted {hinted}: {targets:?}"
        );
        let used: HashSet<&String> = targets.values().flatten().collect();
        assert!(
            used.len() >= 2,
            "hinted {hinted}: 12 conversations all on {used:?}"
        );
    }
}

#[tokio::test]
async fn a_sessions_target_held_open_sends_it_to_the_same_next_target_and_back() {
    let m = mocks(3).await;
    let gw = Gateway::start(&route(&m, "weighted", &[1.0, 1.0, 1.0], "")).await;
    let with = |s: &str| vec![("x-switchyard-session".to_owned(), s.to_owned())];
    let home = served(&gw, 1, |_| (ask("a"), with("s-1"))).await.remove(0);
    let (provider, model) = home.split_once('/').unwrap();
    let resp = client()
        .post(gw.url(&format!("/admin/targets/{provider}/{model}/breaker")))
        .json(&json!({"action": "open"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let away = served(&gw, 5, |i| (ask(&format!("b{i}")), with("s-1"))).await;
    assert!(
        away.iter().all(|t| *t == away[0] && *t != home),
        "{home} then {away:?}"
    );
    client()
        .post(gw.url(&format!("/admin/targets/{provider}/{model}/breaker")))
        .json(&json!({"action": "reset"}))
        .send()
        .await
        .unwrap();
    let back = served(&gw, 3, |i| (ask(&format!("c{i}")), with("s-1"))).await;
    assert!(back.iter().all(|t| *t == home), "{back:?}");
}

fn slow(ms: u64) -> FaultPlan {
    FaultPlan {
        latency_ms: ms,
        ..FaultPlan::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_brownout_moves_traffic_off_the_slow_target_with_no_breaker_trip_and_back() {
    let m = mocks(3).await;
    for mock in &m {
        mock.set_plan(slow(20));
    }
    let extra = "[routes.adaptive]\ninterval = \"1s\"\naffinity = \"off\"";
    let gw = Gateway::start(&route(&m, "adaptive", &[1.0, 1.0, 1.0], extra)).await;
    // Ten seconds healthy, one request at a time.
    let healthy = served(&gw, 500, |i| (ask(&format!("h{i}")), vec![])).await;
    let before = share_of(&healthy, "p0/model-0");
    assert!(
        (before - 1.0 / 3.0).abs() < 0.1,
        "p0 served {before} while healthy"
    );
    // The first target browns out: ten times slower, never failing.
    m[0].set_plan(slow(200));
    let _settling = served(&gw, 250, |i| (ask(&format!("s{i}")), vec![])).await;
    let mut took = Vec::with_capacity(300);
    let mut during = Vec::with_capacity(300);
    for i in 0..300 {
        let t0 = tokio::time::Instant::now();
        during.extend(served(&gw, 1, |_| (ask(&format!("b{i}")), vec![])).await);
        took.push(t0.elapsed());
    }
    let share = share_of(&during, "p0/model-0");
    assert!(share < 0.08, "p0 served {share} of the brownout");
    // What the client waits: the healthy targets' 20 ms, but for the floor's few requests (a
    // priority route would wait 200 ms for every one).
    took.sort();
    let p95 = took[took.len() * 95 / 100];
    assert!(p95 < Duration::from_millis(50), "p95 {p95:?}");
    let st = status(&gw).await;
    let view = &st["routes"][0]["shares"][0];
    assert_eq!(view["reason"], "slower_than_baseline", "{view}");
    assert!(view["share"].as_f64().unwrap() <= 0.05, "{view}");
    assert_eq!(breaker_state(&st, "p0/model-0"), "closed");
    let text = metrics(&gw).await;
    let failovers: Vec<&str> = (text.lines())
        .filter(|l| l.starts_with("switchyard_failovers_total") && !l.ends_with(" 0"))
        .collect();
    assert!(failovers.is_empty(), "nothing failed over: {failovers:?}");
    // It recovers: its share comes back within a few intervals.
    m[0].set_plan(slow(20));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let _ = served(&gw, 1000, |i| (ask(&format!("r{i}")), vec![])).await;
    let after = served(&gw, 300, |i| (ask(&format!("a{i}")), vec![])).await;
    let back = share_of(&after, "p0/model-0");
    assert!(
        (back - 1.0 / 3.0).abs() < 0.1,
        "p0 served {back} after recovery"
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_that_beat_a_slow_target_still_move_its_share() {
    // Every request to the slow target is hedged at 30 ms and the hedge wins, so none of its
    // attempts ever answers: each lost race must count as a latency of at least its time, or
    // its share would never move.
    let m = mocks(3).await;
    for mock in &m {
        mock.set_plan(slow(20));
    }
    let extra = "[routes.adaptive]\ninterval = \"1s\"\naffinity = \"off\"\n\
                 [routes.hedge]\ndelay = \"30ms\"\nbudget = 1.0\n\
                 [routes.retry_budget]\nratio = 1.0\nmin_per_sec = 1000";
    let gw = Gateway::start(&route(&m, "adaptive", &[1.0, 1.0, 1.0], extra)).await;
    let _healthy = served(&gw, 500, |i| (ask(&format!("h{i}")), vec![])).await;
    m[0].set_plan(slow(300));
    let during = served(&gw, 600, |i| (ask(&format!("b{i}")), vec![])).await;
    assert!(
        share_of(&during, "p0/model-0") == 0.0,
        "the hedges answered for p0"
    );
    let st = status(&gw).await;
    let view = &st["routes"][0]["shares"][0];
    assert_eq!(view["reason"], "slower_than_baseline", "{view}");
    assert!(view["share"].as_f64().unwrap() <= 0.05, "{view}");
}

#[tokio::test]
async fn the_audit_path_says_why_each_attempt_went_where_it_did() {
    let m = mocks(2).await;
    let store = TestStore::sqlite();
    let toml = with_audit(
        &route(
            &m,
            "weighted",
            &[1.0, 0.0],
            "[routes.failover]\nmax_attempts = 3\nsame_target_retries = 1",
        ),
        &store.url(),
        "",
    );
    let gw = Gateway::start(&toml).await;
    let resp = gw
        .chat_with(ask("one"), &[("x-switchyard-session", "s-9")])
        .await;
    assert_eq!(resp.status(), 200);
    // The first target fails twice with a 500: a retry there, then the next target.
    m[0].set_plan(FaultPlan {
        status: Some(500),
        ..FaultPlan::default()
    });
    let resp = gw.chat(ask("two")).await;
    assert_eq!(resp.status(), 200);
    gw.stop().await;
    let records = store.records(AuditQuery::default()).await;
    let picked = |i: usize| -> Vec<String> {
        records[i]
            .path
            .iter()
            .map(|a| a.picked.clone().unwrap_or_default())
            .collect()
    };
    let (first, second) = if records[0].time_ms <= records[1].time_ms {
        (0, 1)
    } else {
        (1, 0)
    };
    assert_eq!(picked(first), vec!["affinity"]);
    // Its session is its first turn's: the weight-0 target is its second choice.
    assert_eq!(picked(second), vec!["affinity", "retry", "failover"]);
    store.cleanup().await;
}

#[tokio::test]
async fn an_anthropic_clients_metadata_user_id_keeps_its_session_on_one_target() {
    let m = mocks(3).await;
    let gw = Gateway::start(&route(&m, "weighted", &[1.0, 1.0, 1.0], "")).await;
    let mut targets: HashMap<usize, HashSet<String>> = HashMap::new();
    for conv in 0..12 {
        for turn in 0..4 {
            // Every turn's first message differs: only the hint ties them together.
            let body = json!({
                "model": "chat", "max_tokens": 64,
                "metadata": {"user_id": format!("user_abc_session_{conv}")},
                "messages": [{"role": "user", "content": format!("turn {turn} of {conv}")}],
            });
            let resp = client()
                .post(gw.url("/v1/messages"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            targets
                .entry(conv)
                .or_default()
                .insert(header(&resp, "x-switchyard-target"));
        }
    }
    assert!(targets.values().all(|s| s.len() == 1), "{targets:?}");
    let used: HashSet<&String> = targets.values().flatten().collect();
    assert!(used.len() >= 2, "12 sessions all on {used:?}");
}

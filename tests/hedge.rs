//! Delayed parallel retries on tokio's paused clock: the hedge fires exactly at its delay, the
//! first good answer wins whole, and the loser's upstream call is cancelled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};
use tokio::time::Instant;

fn slow(ms: u64) -> FaultPlan {
    FaultPlan {
        latency_ms: ms,
        ..Default::default()
    }
}

const FIXED: &str = "[routes.hedge]\ndelay = \"500ms\"\nbudget = 1.0";

async fn settle() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_attempt_is_hedged_at_the_delay_and_the_loser_cancelled() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    m[0].set_plan(slow(3000));
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    let elapsed = t0.elapsed();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed < Duration::from_millis(520),
        "{elapsed:?}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        completion_text(&body),
        canonical_text(12, 0),
        "the winner's answer, whole"
    );
    settle().await;
    let primary = m[0].stats();
    assert_eq!(
        (primary.requests, primary.cancelled, primary.completed),
        (1, 1, 0)
    );
    let text = metrics(&gw).await;
    assert!(text.contains("switchyard_hedges_total{route=\"chat\",outcome=\"fired\"} 1"));
    assert!(text.contains("switchyard_hedges_total{route=\"chat\",outcome=\"won\"} 1"));
}

#[tokio::test(start_paused = true)]
async fn no_hedge_before_the_delay() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    m[0].set_plan(slow(490));
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(header(&resp, "x-switchyard-hedged"), "");
    assert!(t0.elapsed() >= Duration::from_millis(490));
    assert_eq!(m[1].stats().requests, 0);
}

#[tokio::test(start_paused = true)]
async fn when_the_first_attempt_wins_the_hedge_is_cancelled() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    m[0].set_plan(slow(700));
    m[1].set_plan(slow(1000));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(header(&resp, "x-switchyard-hedged"), "");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "2");
    settle().await;
    assert_eq!(m[1].stats().cancelled, 1);
    assert!(metrics(&gw)
        .await
        .contains("switchyard_hedges_total{route=\"chat\",outcome=\"lost\"} 1"));
}

#[tokio::test(start_paused = true)]
async fn streams_hedge_on_the_first_token() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    m[0].set_plan(FaultPlan {
        first_token_ms: 5000,
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(true)).await;
    assert!(
        t0.elapsed() < Duration::from_millis(520),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    settle().await;
    assert_eq!(
        m[0].stats().cancelled,
        1,
        "the slow stream's connection is closed"
    );
}

#[tokio::test(start_paused = true)]
async fn an_early_failure_does_not_end_the_race_and_the_next_target_joins() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, &format!("{FIXED}\nmax_parallel = 2"))).await;
    m[0].set_plan(slow(5000));
    m[1].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p2/model-2");
    assert!(
        t0.elapsed() < Duration::from_millis(600),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(header(&resp, "x-switchyard-attempts"), "3");
    settle().await;
    assert_eq!(m[0].stats().cancelled, 1);
}

/// Three attempts at once (`max_parallel = 3`, more than a race keeps inline): each hedge
/// joins the attempts still running, the last one answers, and both it outran are cancelled.
#[tokio::test(start_paused = true)]
async fn three_attempts_race_at_once_and_the_two_outrun_are_cancelled() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, &format!("{FIXED}\nmax_parallel = 3"))).await;
    // The hedge budget (1.0) allows as many hedges as requests in its window: two answered
    // first make room for this request's two.
    for _ in 0..2 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    m[0].set_plan(slow(5000));
    m[1].set_plan(slow(5000));
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    let elapsed = t0.elapsed();
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-target"), "p2/model-2");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "3");
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    assert!(
        elapsed >= Duration::from_millis(1000) && elapsed < Duration::from_millis(1020),
        "a hedge at each delay: {elapsed:?}"
    );
    settle().await;
    for outrun in &m[..2] {
        assert_eq!(outrun.stats().cancelled, 1);
    }
    let text = metrics(&gw).await;
    assert!(text.contains("switchyard_hedges_total{route=\"chat\",outcome=\"fired\"} 2"));
}

#[tokio::test(start_paused = true)]
async fn no_hedge_to_a_target_whose_breaker_is_open() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    client()
        .post(gw.url("/admin/targets/p1/model-1/breaker"))
        .json(&json!({"action": "open"}))
        .send()
        .await
        .unwrap();
    m[0].set_plan(slow(2000));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    assert_eq!(m[1].stats().requests, 0);
    assert!(metrics(&gw)
        .await
        .contains("switchyard_hedges_total{route=\"chat\",outcome=\"skipped_no_target\"} 1"));
}

/// With no target after the running one (a route of one target), no hedge is timed: a slow
/// answer is waited for, and no skipped hedge is counted.
#[tokio::test(start_paused = true)]
async fn no_hedge_is_timed_where_no_target_follows() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, FIXED)).await;
    m[0].set_plan(slow(2000));
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains("switchyard_hedges_total{route=\"chat\",outcome=\"skipped_no_target\"} 0"),
        "{metrics}"
    );
    assert_eq!(m[0].stats().requests, 1);
}

#[tokio::test(start_paused = true)]
async fn the_budget_caps_hedges_under_sustained_slowness() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(
        &m,
        "[routes.hedge]\ndelay = \"100ms\"\nbudget = 0.1",
    ))
    .await;
    m[0].set_plan(slow(300));
    for _ in 0..100 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let fired = m[1].stats().requests;
    assert!(
        (9..=11).contains(&fired),
        "{fired} hedges for 100 requests at a 10% budget"
    );
    assert!(metrics(&gw)
        .await
        .contains("switchyard_hedges_total{route=\"chat\",outcome=\"skipped_budget\"}"));
}

/// Hedges that did not fail give the hedge target's retry budget back, whether they won (the
/// primary slow) or were cancelled as losers (the hedge target slower still): only failed
/// hedges are capped there. After 40 quick requests the route's budget (50% of the requests
/// plus the floor of 10) lets the next 30 all be hedged; without the refunds the backup's own
/// budget (the same rule over the 21 hedges it was sent) would stop them after about 21.
#[tokio::test(start_paused = true)]
async fn hedges_that_do_not_fail_keep_the_hedge_target_budget() {
    for (primary, backup) in [(1_000, 0), (150, 1_000)] {
        let m = mocks(2).await;
        let gw = Gateway::start(&config(
            &m,
            "[routes.hedge]\ndelay = \"100ms\"\nbudget = 1.0\n\
             [routes.retry_budget]\nratio = 0.5\nmin_per_sec = 1",
        ))
        .await;
        for _ in 0..40 {
            assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
        }
        m[0].set_plan(slow(primary));
        m[1].set_plan(slow(backup));
        for _ in 0..30 {
            assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
        }
        settle().await;
        assert_eq!(m[1].stats().requests, 30, "primary at {primary} ms");
        let text = metrics(&gw).await;
        assert!(!text.contains("scope=\"target\""), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_percentile_delay_follows_live_latency() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "[routes.hedge]\ndelay = \"p95\"\nbudget = 1.0")).await;
    // Until 20 samples exist, the fixed fallback is what a hedge would wait, and says so.
    let before = status(&gw).await;
    assert_eq!(before["targets"][0]["hedge_delay_ms"], 2000.0, "{before}");
    m[0].set_plan(slow(100));
    for _ in 0..30 {
        gw.chat(chat_body(false)).await;
    }
    assert_eq!(
        m[1].stats().requests,
        0,
        "no hedge while the primary is steady"
    );
    tokio::time::sleep(Duration::from_secs(2)).await; // the cached delay refreshes each second
    let status = status(&gw).await;
    let delay = status["targets"][0]["hedge_delay_ms"].as_f64().unwrap();
    assert!((95.0..=110.0).contains(&delay), "{delay}");
    m[0].set_plan(slow(5000));
    let t0 = Instant::now();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    assert!(
        t0.elapsed() < Duration::from_millis(120),
        "{:?}",
        t0.elapsed()
    );
}

#[tokio::test]
async fn status_shows_no_hedge_delay_where_hedging_is_off_and_the_clamped_one_where_on() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "[routes.hedge]\nenabled = false")).await;
    let off = status(&gw).await;
    assert!(off["targets"][0]["hedge_delay_ms"].is_null(), "{off}");
    // A fixed delay beyond half the attempt timeout is clamped to it, and shown clamped.
    let gw = Gateway::start(&config(
        &m,
        "attempt_timeout = \"2s\"\n[routes.hedge]\ndelay = \"5s\"",
    ))
    .await;
    let on = status(&gw).await;
    assert_eq!(on["targets"][0]["hedge_delay_ms"], 1000.0, "{on}");
}

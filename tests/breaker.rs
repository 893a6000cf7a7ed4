//! Circuit breakers seen from outside: against mock providers, on tokio's paused clock where
//! holds and probe intervals matter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;
use switchyard::mock::{FaultPlan, MockServer};
use tokio::time::Instant;

fn probes(m: &MockServer) -> usize {
    m.requests()
        .iter()
        .filter(|r| r.header("x-switchyard-probe").is_some())
        .count()
}

const POLICY: &str =
    "[routes.breaker]\nopen_for = \"30s\"\nprobe_interval = \"10s\"\nramp = \"0s\"";

#[tokio::test(start_paused = true)]
async fn a_hard_outage_trips_after_consecutive_failures_and_the_backup_serves_with_no_wasted_attempt(
) {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    for _ in 0..10 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    m[0].set_plan(down());
    for i in 0..20 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(
            resp.status(),
            200,
            "request {i}: every client request is answered"
        );
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
        if i >= 5 {
            assert_eq!(
                header(&resp, "x-switchyard-attempts"),
                "1",
                "request {i}: no attempt on the open target"
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        user_requests(&m[0]),
        10 + 5,
        "the primary saw exactly consecutive_failures while down"
    );
    assert_eq!(breaker_state(&status(&gw).await, "p0/model-0"), "open");
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains("switchyard_breaker_state{target=\"p0/model-0\"} 2"),
        "{metrics}"
    );
    assert!(metrics
        .contains("switchyard_breaker_transitions_total{target=\"p0/model-0\",to=\"open\"} 1"));
    assert!(metrics.contains(
        "switchyard_failovers_total{route=\"chat\",from=\"p0/model-0\",to=\"p1/model-1\",reason=\"breaker_open\"}"
    ));
    assert!(metrics.contains(
        "switchyard_requests_total{route=\"chat\",target=\"p1/model-1\",outcome=\"ok\"} 20"
    ));
    // The 15 requests passed over the open breaker in 7.5 s are one event (and one log line),
    // not 15; while it goes on, another every 10 s.
    assert_eq!(breaker_open_events(&gw).await, 1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    assert_eq!(breaker_open_events(&gw).await, 2);
}

async fn breaker_open_events(gw: &Gateway) -> usize {
    let events = get_json(gw, "/admin/events").await;
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "failover" && e["reason"] == "breaker_open")
        .inspect(|e| {
            assert_eq!(
                (e["target"].as_str(), e["to"].as_str()),
                (Some("p0/model-0"), Some("p1/model-1"))
            )
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_target_down_for_a_minute_is_probed_and_returns_within_a_probe_interval() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, POLICY)).await;
    m[0].set_plan(down());
    for _ in 0..5 {
        gw.chat(chat_body(false)).await;
    }
    assert_eq!(breaker_state(&status(&gw).await, "p0/model-0"), "open");
    let user_before = user_requests(&m[0]);
    // Down for a minute, user traffic at 2 req/s served by the backup.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        user_requests(&m[0]),
        user_before,
        "no user request reached the open target"
    );
    let p = probes(&m[0]);
    assert!(
        (3..=5).contains(&p),
        "probes after the 30 s hold, every 10 s: {p}"
    );
    // Recovery: user traffic returns within one probe interval (plus the quick confirmations).
    m[0].set_plan(FaultPlan::default());
    let recovered = Instant::now();
    loop {
        let resp = gw.chat(chat_body(false)).await;
        if header(&resp, "x-switchyard-target") == "p0/model-0" {
            break;
        }
        assert!(
            recovered.elapsed() < Duration::from_secs(12),
            "still not back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recovered.elapsed() <= Duration::from_secs(11),
        "{:?}",
        recovered.elapsed()
    );
    assert_eq!(breaker_state(&status(&gw).await, "p0/model-0"), "closed");
}

#[tokio::test]
async fn a_steady_twenty_percent_error_rate_never_trips() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    m[0].set_plan(FaultPlan {
        status: Some(500),
        error_rate: 0.2,
        seed: 7,
        ..Default::default()
    });
    for _ in 0..300 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let s = status(&gw).await;
    assert_eq!(breaker_state(&s, "p0/model-0"), "closed");
    assert_eq!(
        m[0].stats().requests,
        300,
        "every request tried the primary first"
    );
    let rate = s["targets"][0]["sli"]["attempt_success_rate"]
        .as_f64()
        .unwrap();
    assert!((0.7..0.9).contains(&rate), "{rate}");
    assert_eq!(s["targets"][0]["sli"]["request_success_rate"], 1.0);
}

#[tokio::test]
async fn a_partial_outage_trips_once_min_requests_is_reached() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "[routes.breaker]\nconsecutive_failures = 0")).await;
    m[0].set_plan(FaultPlan {
        status: Some(500),
        error_rate: 0.5,
        seed: 3,
        ..Default::default()
    });
    for _ in 0..60 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let s = status(&gw).await;
    assert_eq!(breaker_state(&s, "p0/model-0"), "open");
    let seen = user_requests(&m[0]);
    assert!(
        (20..40).contains(&seen),
        "tripped soon after min_requests: {seen}"
    );
}

#[tokio::test]
async fn manual_override_through_the_admin_api() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    let url = gw.url("/admin/targets/p0/model-0/breaker");
    let resp = client()
        .post(&url)
        .json(&json!({"action": "open"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["state"], "open");
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(m[0].stats().requests, 0);

    client()
        .post(&url)
        .json(&json!({"action": "close"}))
        .send()
        .await
        .unwrap();
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");

    let bad = client()
        .post(&url)
        .json(&json!({"action": "explode"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let missing = client()
        .post(gw.url("/admin/targets/nope/x/breaker"))
        .json(&json!({"action": "open"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn with_every_target_open_the_closest_to_recovery_is_still_tried() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, "")).await;
    for t in ["p0/model-0", "p1/model-1"] {
        let url = gw.url(&format!("/admin/targets/{t}/breaker"));
        client()
            .post(&url)
            .json(&json!({"action": "open"}))
            .send()
            .await
            .unwrap();
    }
    // Both are held by an operator (no recovery time): the first in order is tried.
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    assert_eq!(m[0].stats().requests + m[1].stats().requests, 1);
}

/// Every target down and no breaker to stop it: retries stay within the route's budget (20%
/// of the requests plus the floor of 5 a second over the 10 s window: 90) and each backup's
/// own (its failed retries under 20% of what it was sent, plus the floor: 62).
#[tokio::test]
async fn the_retry_budget_keeps_a_total_outage_from_multiplying_load() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, &budget_only(0.2, 5))).await;
    for mock in &m {
        mock.set_plan(down());
    }
    for _ in 0..200 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 503);
    }
    let calls: Vec<u64> = m.iter().map(|m| m.stats().requests).collect();
    let retries = calls[1] + calls[2];
    assert_eq!(calls[0], 200, "every request starts on the primary");
    assert!(retries <= 91, "at most 20% + 50 retries: {calls:?}");
    assert!(retries >= 85, "the route's budget is used: {calls:?}");
    assert!(calls[1] <= 63, "the backup's own budget holds: {calls:?}");
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains("switchyard_retry_budget_exhausted_total{route=\"chat\",scope=\"route\"}")
    );
}

/// After a healthy spell, the primary and the first backup go down, the second backup stays
/// healthy, and no breaker steps in: the first backup takes its share of failed retries (20%
/// of what it was sent, plus the floor of 1 a second over 10 s: 13) and is then passed over, so
/// it is not flooded with the primary's failures. Its failures stop spending the route's
/// budget too (which they would exhaust after 25 requests: 20% of 50 + 25, plus 10), so every
/// client is still answered by the second backup.
#[tokio::test]
async fn a_backup_that_fails_too_is_passed_over_once_its_budget_is_spent() {
    let m = mocks(3).await;
    let gw = Gateway::start(&config(&m, &budget_only(0.2, 1))).await;
    for _ in 0..50 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    m[0].set_plan(down());
    m[1].set_plan(down());
    for i in 0..200 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200, "request {i}");
        assert_eq!(header(&resp, "x-switchyard-target"), "p2/model-2");
    }
    let calls: Vec<u64> = m.iter().map(|m| m.stats().requests).collect();
    assert_eq!(calls[0], 250);
    assert_eq!(calls[1], 13, "the first backup's budget: {calls:?}");
    assert_eq!(calls[2], 200);
    let metrics = metrics(&gw).await;
    assert!(metrics
        .contains("switchyard_retry_budget_exhausted_total{route=\"chat\",scope=\"target\"}"));
}

/// With nothing left to try, the error says which target was not retried and why.
#[tokio::test]
async fn a_target_passed_over_for_its_budget_is_named_in_the_error() {
    let m = mocks(2).await;
    let gw = Gateway::start(&config(&m, &budget_only(0.2, 0))).await;
    m[0].set_plan(down());
    m[1].set_plan(down());
    // The route's budget allows 20% of 10 requests, the backup's its first retry only.
    for _ in 0..9 {
        gw.chat(chat_body(false)).await;
    }
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("not retried on p1/model-1: retry budget spent"),
        "{message}"
    );
    assert_eq!(m[1].stats().requests, 1);
}

/// A failing primary below its breaker's threshold with a healthy backup: every failover
/// succeeds, so the budget is given back each time and never runs out. Clients see no error,
/// however long it lasts (the budget only caps retries that fail, as in the test above).
#[tokio::test]
async fn failovers_that_succeed_do_not_spend_the_retry_budget() {
    let m = mocks(2).await;
    let extra = "[routes.breaker]\nconsecutive_failures = 0\nmin_requests = 100000\n\
                 [routes.retry_budget]\nratio = 0.2\nmin_per_sec = 0";
    let gw = Gateway::start(&config(&m, extra)).await;
    m[0].set_plan(down());
    for i in 0..200 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200, "request {i}");
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    }
    assert_eq!(m[0].stats().requests, 200);
    assert_eq!(m[1].stats().requests, 200);
}

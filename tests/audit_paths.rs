//! The audit log keeps every request's full path: after a failover, after a breaker skip or a
//! retry-budget skip, for a stream (time to first token and tokens) and for a stream the client
//! abandoned. Each scenario runs against SQLite and against the machine's PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::json;
use support::audit::TestStore;
use support::*;
use switchyard::audit::AuditRecord;
use switchyard::mock::FaultPlan;

/// Each attempt as (target, outcome, upstream status).
fn path(rec: &AuditRecord) -> Vec<(String, String, Option<u16>)> {
    rec.path
        .iter()
        .map(|a| (a.target.clone(), a.outcome.clone(), a.status))
        .collect()
}

fn step(target: &str, outcome: &str, status: Option<u16>) -> (String, String, Option<u16>) {
    (target.to_owned(), outcome.to_owned(), status)
}

/// The one record the store holds, after the gateway stopped (which flushes it).
async fn only_record(store: &TestStore) -> AuditRecord {
    let all = store.all().await;
    assert_eq!(all.len(), 1, "{all:#?}");
    all.into_iter().next().unwrap()
}

async fn failover(store: TestStore) {
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    let id = header(&resp, "x-switchyard-request-id");
    gw.stop().await;
    let rec = only_record(&store).await;
    assert_eq!(rec.request_id, id);
    assert_eq!(rec.route, "chat");
    assert_eq!((rec.status, rec.stream), (200, false));
    assert_eq!(rec.target.as_deref(), Some("p1/model-1"));
    assert_eq!(
        path(&rec),
        vec![
            step("p0/model-0", "status", Some(503)),
            step("p1/model-1", "ok", Some(200)),
        ]
    );
    assert!(rec.path[1].start_ms >= rec.path[0].start_ms);
    assert!(rec.latency_ms > 0.0 && rec.tokens_in.is_some() && rec.tokens_out.is_some());
    assert!(rec.request_body.is_none() && rec.response_body.is_none());
    assert!(rec.error.is_none());
    assert!((rec.time_ms - now_ms()).abs() < 60_000);
    store.cleanup().await;
}
both!(failover);

async fn breaker_skip(store: TestStore) {
    let m = mocks(2).await;
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let resp = client()
        .post(gw.url("/admin/targets/p0/model-0/breaker"))
        .json(&json!({"action": "open"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(resp.status(), 200);
    gw.stop().await;
    let rec = only_record(&store).await;
    assert_eq!(rec.target.as_deref(), Some("p1/model-1"));
    assert_eq!(
        path(&rec),
        vec![
            step("p0/model-0", "skipped_breaker", None),
            step("p1/model-1", "ok", Some(200)),
        ]
    );
    assert_eq!(m[0].stats().requests, 0);
    store.cleanup().await;
}
both!(breaker_skip);

/// The primary and the first backup down after ten good requests, no breaker, and a retry
/// budget of 20% with no floor: the first backup takes one failed retry, the next request
/// passes it over for its spent budget, and the record says so.
async fn budget_skip(store: TestStore) {
    let m = mocks(3).await;
    let toml = config(&m, &budget_only(0.2, 0));
    let gw = Gateway::start(&with_audit(&toml, &store.url(), "")).await;
    for _ in 0..10 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    m[0].set_plan(down());
    m[1].set_plan(down());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let resp = gw.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200);
        ids.push(header(&resp, "x-switchyard-request-id"));
    }
    gw.stop().await;
    let all = store.all().await;
    let rec = |id: &str| all.iter().find(|r| r.request_id == id).unwrap();
    assert_eq!(
        path(rec(&ids[0])),
        vec![
            step("p0/model-0", "status", Some(503)),
            step("p1/model-1", "status", Some(503)),
            step("p2/model-2", "ok", Some(200)),
        ]
    );
    assert_eq!(
        path(rec(&ids[1])),
        vec![
            step("p1/model-1", "skipped_budget", None),
            step("p0/model-0", "status", Some(503)),
            step("p2/model-2", "ok", Some(200)),
        ]
    );
    assert_eq!(m[1].stats().requests, 1);
    store.cleanup().await;
}
both!(budget_skip);

async fn stream(store: TestStore) {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        first_token_ms: 30,
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(body.contains("[DONE]"));
    gw.stop().await;
    let rec = only_record(&store).await;
    assert_eq!((rec.status, rec.stream), (200, true));
    assert_eq!(path(&rec), vec![step("p0/model-0", "ok", Some(200))]);
    let ttft = rec.ttft_ms.unwrap();
    assert!(ttft >= 25.0 && ttft <= rec.latency_ms, "{rec:?}");
    assert!(
        rec.tokens_in.unwrap() > 0 && rec.tokens_out.unwrap() > 0,
        "{rec:?}"
    );
    assert!(rec.error.is_none());
    store.cleanup().await;
}
both!(stream);

async fn abandoned_stream(store: TestStore) {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        words: 200,
        chunk_delay_ms: 50,
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let mut resp = gw.chat(chat_body(true)).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.chunk().await.unwrap().is_some());
    drop(resp);
    let cancelled =
        support::audit::eventually(5, || async { (m[0].stats().cancelled == 1).then_some(()) })
            .await;
    assert!(cancelled.is_some(), "the upstream call was cancelled");
    gw.stop().await;
    let rec = only_record(&store).await;
    assert_eq!((rec.status, rec.stream), (200, true));
    assert_eq!(path(&rec), vec![step("p0/model-0", "cancelled", Some(200))]);
    assert!(rec.ttft_ms.is_some());
    assert!(rec.error.as_deref().unwrap().contains("disconnected"));
    store.cleanup().await;
}
both!(abandoned_stream);

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

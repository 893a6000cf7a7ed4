//! Audit paths of races: a stream continued on another target (both attempts, how the first
//! broke, how much of the answer the second was handed) and a hedged request (the loser kept
//! as `hedge_lost`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::audit::TestStore;
use support::*;
use switchyard::mock::{canonical_text, FaultPlan};

#[tokio::test]
async fn a_continued_stream_records_both_attempts_and_the_text_carried_over() {
    let store = TestStore::sqlite();
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let resp = gw.chat(chat_body(true)).await;
    let events = sse_events(&resp.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    gw.stop().await;
    let all = store.all().await;
    assert_eq!(all.len(), 1, "{all:#?}");
    let rec = &all[0];
    let steps: Vec<_> = rec
        .path
        .iter()
        .map(|a| (a.target.as_str(), a.outcome.as_str(), a.carried_chars))
        .collect();
    let carried = "alpha-1 bravo-2 charlie-3".len() as u64;
    assert_eq!(
        steps,
        [
            ("p0/model-0", "cut", None),
            ("p1/model-1", "ok", Some(carried))
        ]
    );
    assert_eq!(
        rec.target.as_deref(),
        Some("p1/model-1"),
        "the target that finished the answer"
    );
    assert!(rec.error.is_none(), "{rec:?}");
    store.cleanup().await;
}

#[tokio::test]
async fn a_hedged_request_records_the_winner_and_the_loser() {
    let store = TestStore::sqlite();
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 2_000,
        ..Default::default()
    });
    let extra = "[routes.hedge]\ndelay = \"100ms\"\nbudget = 1.0";
    let gw = Gateway::start(&with_audit(&config(&m, extra), &store.url(), "")).await;
    let resp = gw.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-hedged"), "true");
    gw.stop().await;
    let all = store.all().await;
    assert_eq!(all.len(), 1, "{all:#?}");
    let rec = &all[0];
    assert!(rec.hedged);
    assert_eq!(rec.target.as_deref(), Some("p1/model-1"));
    let mut steps: Vec<_> = rec
        .path
        .iter()
        .map(|a| (a.target.as_str(), a.outcome.as_str()))
        .collect();
    steps.sort_unstable();
    assert_eq!(steps, [("p0/model-0", "hedge_lost"), ("p1/model-1", "ok")]);
    store.cleanup().await;
}

#[tokio::test]
async fn a_rejected_prefill_is_in_the_audit_path_before_the_restart() {
    let store = TestStore::sqlite();
    let m = mocks(2).await;
    m[0].set_plan(FaultPlan {
        cut_after_chunks: Some(3),
        ..Default::default()
    });
    m[1].set_plan(FaultPlan {
        reject_prefill: true,
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    let events = sse_events(&gw.chat(chat_body(true)).await.text().await.unwrap());
    assert_eq!(stream_text(&events), canonical_text(12, 0));
    gw.stop().await;
    let all = store.all().await;
    let steps: Vec<_> = all[0]
        .path
        .iter()
        .map(|a| (a.target.as_str(), a.outcome.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("p0/model-0", "cut"),
            ("p1/model-1", "prefill_rejected"),
            ("p1/model-1", "ok")
        ]
    );
    store.cleanup().await;
}

//! Nothing is lost across a clean shutdown under load; a database that goes away mid-run does
//! not touch clients, its failure and any loss are counted and reported, and writing resumes
//! when it comes back. SQLite and the machine's PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::audit::{eventually, TcpProxy, TestStore};
use support::*;
use switchyard::audit::redact::Redactor;
use switchyard::audit::{start_with, Audit, AuditRecord, Limits};
use switchyard::config::{AuditConfig, AuditStore};
use switchyard::metrics::Registry;
use switchyard::mock::FaultPlan;

/// `n` non-stream requests, `conc` at a time; every one must succeed.
async fn load(gw: &Gateway, n: usize, conc: usize) {
    let client = client();
    let url = gw.url("/v1/chat/completions");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let resp = client
                    .post(&url)
                    .json(&chat_body(false))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
                resp.bytes().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn audit_status(gw: &Gateway) -> Value {
    status(gw).await["audit"].clone()
}

async fn shutdown_under_load(store: TestStore) {
    let m = mocks(1).await;
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    load(&gw, 2_000, 32).await;
    // Stop at once: most records are still queued or pending when the server stops.
    gw.stop().await;
    let all = store.all().await;
    assert_eq!(all.len(), 2_000);
    let mut ids: Vec<&str> = all.iter().map(|r| r.request_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2_000, "one record per request");
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_load_loses_nothing_sqlite() {
    shutdown_under_load(TestStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_load_loses_nothing_postgres() {
    shutdown_under_load(TestStore::postgres().await).await;
}

/// The gateway serves while `outage` holds the store down, reports it, and catches up after.
async fn outage(store: &TestStore, url: &str, down: impl FnOnce(), up: impl FnOnce()) {
    let m = mocks(1).await;
    m[0].set_plan(FaultPlan {
        latency_ms: 1,
        ..Default::default()
    });
    let gw = Gateway::start(&with_audit(&config(&m, ""), url, "")).await;
    load(&gw, 50, 4).await;
    let written = eventually(5, || async {
        (audit_status(&gw).await["written"] == 50).then_some(())
    });
    assert!(written.await.is_some(), "{}", audit_status(&gw).await);

    down();
    let started = tokio::time::Instant::now();
    load(&gw, 300, 8).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "clients are not slowed down by the store"
    );
    let failing = eventually(10, || async {
        let s = audit_status(&gw).await;
        (s["failing"] == true).then_some(s)
    })
    .await
    .expect("the failure is reported in /admin/status");
    assert!(failing["last_error"]
        .as_str()
        .is_some_and(|e| !e.is_empty()));
    assert_eq!(failing["written"], 50);
    assert_eq!(failing["queued"], 300, "kept for later: {failing}");

    up();
    let resumed = eventually(15, || async {
        let s = audit_status(&gw).await;
        (s["written"] == 350).then_some(s)
    })
    .await;
    let s = resumed.unwrap_or(audit_status(&gw).await);
    assert_eq!(s["written"], 350, "writing resumed: {s}");
    assert_eq!(
        (&s["failing"], &s["dropped"], &s["queued"]),
        (&false.into(), &0.into(), &0.into())
    );
    let metrics = client().get(gw.url("/metrics")).send().await.unwrap();
    assert!(metrics
        .text()
        .await
        .unwrap()
        .contains("switchyard_audit_dropped_total 0"));
    gw.stop().await;
    assert_eq!(store.all().await.len(), 350);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_database_is_retried_and_writing_resumes() {
    let store = TestStore::sqlite();
    let TestStore::Sqlite(path) = &store else {
        unreachable!()
    };
    // Another process holding the write lock: the writer's transactions fail with "busy".
    let blocker = rusqlite::Connection::open(path).unwrap();
    blocker.busy_timeout(Duration::from_secs(5)).unwrap();
    let url = store.url();
    outage(
        &store,
        &url,
        || blocker.execute_batch("BEGIN EXCLUSIVE").unwrap(),
        || blocker.execute_batch("COMMIT").unwrap(),
    )
    .await;
    drop(blocker);
    store.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_going_away_is_retried_and_writing_resumes() {
    let store = TestStore::postgres().await;
    let proxy = TcpProxy::start("127.0.0.1:5432").await;
    let url = store.url_via(&proxy.addr.to_string());
    outage(&store, &url, || proxy.set_up(false), || proxy.set_up(true)).await;
    store.cleanup().await;
}

fn record(i: usize, time_ms: i64) -> AuditRecord {
    AuditRecord {
        status: 200,
        target: Some("p0/m".into()),
        latency_ms: 1.0,
        tokens_in: Some(1),
        tokens_out: Some(2),
        ..AuditRecord::new(format!("req-{i}"), time_ms, "chat".into())
    }
}

/// The audit log alone (no gateway) on `store`, with `limits`.
async fn start_log(
    store: AuditStore,
    retention: Option<Duration>,
    limits: Limits,
    metrics: &Registry,
) -> (Audit, switchyard::audit::AuditWriter) {
    let config = AuditConfig {
        store,
        bodies: false,
        retention,
    };
    start_with(&config, Redactor::new([]).cell(), metrics, limits)
        .await
        .unwrap()
}

fn submit(audit: &Audit, range: std::ops::Range<usize>, time_ms: i64) {
    for i in range {
        audit.submit(record(i, time_ms));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_while_the_store_is_down_is_counted_and_reported() {
    let store = TestStore::postgres().await;
    let proxy = TcpProxy::start("127.0.0.1:5432").await;
    let metrics = Registry::new();
    let limits = Limits {
        queue: 100,
        pending_max: 200,
        shutdown_retry_for: Duration::from_secs(1),
        ..Limits::default()
    };
    let url = store.url_via(&proxy.addr.to_string());
    let (audit, writer) = start_log(AuditStore::Postgres(url), None, limits, &metrics).await;
    proxy.set_up(false);
    let now = 1_700_000_000_000;
    // More than the queue and the writer's buffer hold together, faster than they drain.
    for chunk in 0..10 {
        submit(&audit, chunk * 100..chunk * 100 + 100, now);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lost = eventually(10, || async {
        let s = audit.status();
        (s.failing && s.dropped + s.queued == 1_000).then_some(s)
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", audit.status()));
    assert!(lost.dropped >= 700 && lost.queued <= 300, "{lost:?}");
    assert!(metrics
        .render()
        .contains(&format!("switchyard_audit_dropped_total {}", lost.dropped)));

    proxy.set_up(true);
    let resumed = eventually(15, || async {
        let s = audit.status();
        (s.written == lost.queued && !s.failing).then_some(s)
    })
    .await;
    assert!(resumed.is_some(), "{:?}", audit.status());
    submit(&audit, 1_000..1_010, now);
    writer.shutdown().await;
    assert_eq!(audit.status().written, lost.queued + 10);
    assert_eq!(store.all().await.len() as u64, lost.queued + 10);
    store.cleanup().await;
}

/// A database that accepts connections and never answers cannot hold the exit past the
/// shutdown deadline: the write in progress is cut short there and its records are counted as
/// lost. (Virtual time: without the cut, the connection attempt's own 5 s would run out first.)
#[tokio::test(start_paused = true)]
async fn a_store_that_hangs_does_not_hold_the_shutdown_past_its_deadline() {
    let store = TestStore::postgres().await;
    let proxy = TcpProxy::start("127.0.0.1:5432").await;
    proxy.stall();
    let limits = Limits {
        shutdown_retry_for: Duration::from_secs(1),
        ..Limits::default()
    };
    let url = store.url_via(&proxy.addr.to_string());
    let (audit, writer) =
        start_log(AuditStore::Postgres(url), None, limits, &Registry::new()).await;
    submit(&audit, 0..10, 1_700_000_000_000);
    let started = tokio::time::Instant::now();
    writer.shutdown().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
    let s = audit.status();
    assert_eq!((s.written, s.dropped, s.queued), (0, 10, 0), "{s:?}");
    assert!(s.failing, "{s:?}");
    store.cleanup().await;
}

#[tokio::test]
async fn retention_prunes_old_records_sqlite() {
    retention_prunes_old_records(TestStore::sqlite()).await;
}

#[tokio::test]
async fn retention_prunes_old_records_postgres() {
    retention_prunes_old_records(TestStore::postgres().await).await;
}

async fn retention_prunes_old_records(store: TestStore) {
    let limits = Limits {
        prune_every: Duration::from_millis(200),
        ..Limits::default()
    };
    let (audit, writer) = start_log(
        switchyard::audit::query::parse_db_url(&store.url()).unwrap(),
        Some(Duration::from_secs(3600)),
        limits,
        &Registry::new(),
    )
    .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    submit(&audit, 0..5, now - 2 * 3_600_000);
    submit(&audit, 5..8, now);
    let pruned = eventually(10, || async {
        let all = store.all().await;
        (audit.status().written == 8 && all.len() == 3).then_some(all)
    })
    .await
    .expect("the old records are pruned");
    assert!(pruned.iter().all(|r| r.time_ms == now));
    writer.shutdown().await;
    store.cleanup().await;
}

/// A record of about 10 KiB (a request body; records with bodies can be megabytes).
fn big_record(i: usize, time_ms: i64) -> AuditRecord {
    AuditRecord {
        request_body: Some("x".repeat(10 * 1024)),
        ..record(i, time_ms)
    }
}

/// The request threads' buffers are bounded in bytes as well as in records: records of
/// 10 KiB beyond `queue_bytes` are dropped (counted), never held. (Before: 10,000 records in
/// all, whatever their size.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_in_bytes() {
    let store = TestStore::sqlite();
    let limits = Limits {
        queue_bytes: 100 * 1024,
        ..Limits::default()
    };
    let metrics = Registry::new();
    let (audit, writer) = start_log(
        switchyard::audit::query::parse_db_url(&store.url()).unwrap(),
        None,
        limits,
        &metrics,
    )
    .await;
    // Faster than the writer takes them (every 20 ms), from one thread: one buffer.
    for i in 0..100 {
        audit.submit(big_record(i, 1_700_000_000_000));
    }
    let s = audit.status();
    assert!(s.queued < 20 && s.dropped > 80, "{s:?}");
    assert_eq!(s.queued + s.dropped, 100, "{s:?}");
    writer.shutdown().await;
    assert_eq!(store.all().await.len() as u64, 100 - s.dropped);
    assert!(metrics
        .render()
        .contains(&format!("switchyard_audit_dropped_total {}", s.dropped)));
    store.cleanup().await;
}

/// While the store is down, the writer keeps at most `pending_bytes` of records; the oldest
/// beyond that are dropped (counted), and what is kept is written once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_writer_keeps_for_a_failing_store_is_bounded_in_bytes() {
    let store = TestStore::postgres().await;
    let proxy = TcpProxy::start("127.0.0.1:5432").await;
    let limits = Limits {
        pending_bytes: 200 * 1024,
        shutdown_retry_for: Duration::from_secs(1),
        ..Limits::default()
    };
    let url = store.url_via(&proxy.addr.to_string());
    let (audit, writer) =
        start_log(AuditStore::Postgres(url), None, limits, &Registry::new()).await;
    proxy.set_up(false);
    for chunk in 0..10 {
        for i in chunk * 10..chunk * 10 + 10 {
            audit.submit(big_record(i, 1_700_000_000_000));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let lost = eventually(10, || async {
        let s = audit.status();
        (s.failing && s.dropped + s.queued == 100).then_some(s)
    })
    .await
    .unwrap_or_else(|| panic!("{:?}", audit.status()));
    // Kept: what fits 200 KiB, and the batch the sink is retrying (its first 10 records).
    assert!(lost.dropped >= 60 && lost.queued <= 35, "{lost:?}");
    proxy.set_up(true);
    writer.shutdown().await;
    let all = store.all().await;
    assert_eq!(all.len() as u64, lost.queued);
    assert_eq!(
        all.last().unwrap().request_id,
        "req-99",
        "the newest are kept"
    );
    store.cleanup().await;
}

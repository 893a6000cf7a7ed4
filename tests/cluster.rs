//! Replicas sharing breaker states and windows through the real Redis on 127.0.0.1:6379
//! (`[cluster]`). Real time: the sync runs once a second over a real connection, so these wait
//! for a state to appear (bounded polls), never for a fixed time. Each test writes under a key
//! prefix of its own and deletes it at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::audit::{eventually, TcpProxy};
use support::*;
use switchyard::mock::{FaultPlan, MockServer};

const REDIS: &str = "127.0.0.1:6379";

/// A key prefix no other test (or run) uses.
fn prefix() -> String {
    format!("switchyard-test-{:016x}", fastrand::u64(..))
}

/// `toml` joined to a cluster through Redis at `addr`.
fn clustered(toml: &str, addr: &str, prefix: &str) -> String {
    format!("{toml}\n[cluster]\nredis = \"redis://{addr}\"\nkey_prefix = \"{prefix}\"\n")
}

async fn breaker(gw: &Gateway, target: &str) -> String {
    breaker_state(&status(gw).await, target)
}

/// Take the primary (`m[0]`) down and send `gw` enough requests (all answered, by the backup)
/// to open its breaker there.
async fn trip_primary(gw: &Gateway, m: &[MockServer]) {
    m[0].set_plan(down());
    for _ in 0..6 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    assert_eq!(breaker(gw, "p0/model-0").await, "open");
}

/// Wait (up to 10 s) until `target`'s breaker on `gw` is in `state`.
async fn until_breaker(gw: &Gateway, target: &str, state: &str) -> bool {
    eventually(10, || async {
        (breaker(gw, target).await == state).then_some(())
    })
    .await
    .is_some()
}

async fn manual(gw: &Gateway, action: &str) {
    let resp = client()
        .post(gw.url("/admin/targets/p0/model-0/breaker"))
        .json(&json!({ "action": action }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// Wait (up to 10 s) until `/admin/status` on `gw` has `cluster.{key}` equal to `value`;
/// returns that status.
async fn until_cluster(gw: &Gateway, key: &str, value: Value) -> Option<Value> {
    eventually(10, || async {
        let s = status(gw).await;
        (s["cluster"][key] == value).then_some(s)
    })
    .await
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{REDIS}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The stored breaker state of `target` under `prefix`.
async fn stored_state(prefix: &str, target: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(format!("{prefix}:states"))
        .arg(target)
        .query_async(&mut redis_conn().await)
        .await
        .unwrap()
}

/// Store `value` as the breaker state of `target` under `prefix`, as a replica would.
async fn store_state(prefix: &str, target: &str, value: &str) {
    let _: () = redis::cmd("HSET")
        .arg(format!("{prefix}:states"))
        .arg(target)
        .arg(value)
        .query_async(&mut redis_conn().await)
        .await
        .unwrap();
}

/// Delete every key under `prefix`.
/// Breakers trip on the failure share only (no run of consecutive failures).
const NO_RUN_RULE: &str = "[routes.breaker]\nconsecutive_failures = 0";

/// Requests are answered while Redis cannot be reached, and `/admin/status` reports the failed
/// link; its status is returned.
async fn answered_with_the_link_down(gw: &Gateway) -> Value {
    for _ in 0..3 {
        assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    }
    let s = eventually(10, || async {
        let s = status(gw).await;
        s["cluster"]["error"].is_string().then_some(s)
    })
    .await
    .expect("the failed link is reported");
    assert_eq!(s["cluster"]["connected"], false);
    s
}

/// Two replicas of one config.
async fn replicas(toml: &str) -> (Gateway, Gateway) {
    (Gateway::start(toml).await, Gateway::start(toml).await)
}

/// Stop the replicas, then remove what they stored under `prefix`.
async fn finish<const N: usize>(prefix: &str, replicas: [Gateway; N]) {
    for gw in replicas {
        gw.stop().await;
    }
    cleanup(prefix).await;
}

async fn cleanup(prefix: &str) {
    let mut conn = redis_conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn an_outage_one_replica_sees_opens_the_breaker_on_the_other() {
    let m = mocks(2).await;
    let p = prefix();
    let toml = clustered(&config(&m, ""), REDIS, &p);
    let (a, b) = replicas(&toml).await;
    assert!(until_cluster(&b, "replicas", json!(2)).await.is_some());

    trip_primary(&a, &m).await;
    // B saw nothing itself, and takes the open state over.
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    let seen = user_requests(&m[0]);
    for _ in 0..5 {
        let resp = b.chat(chat_body(false)).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
        assert_eq!(header(&resp, "x-switchyard-attempts"), "1");
    }
    assert_eq!(
        user_requests(&m[0]),
        seen,
        "B sent nothing to the open target"
    );
    let s = status(&b).await;
    assert_eq!(s["cluster"]["connected"], true);
    assert!(s["cluster"]["error"].is_null());
    let metrics = metrics(&b).await;
    assert!(
        metrics
            .contains(r#"switchyard_breaker_transitions_total{target="p0/model-0",to="open"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_cluster_connected 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_cluster_sync_failures_total 0"),
        "{metrics}"
    );
    finish(&p, [a, b]).await;
}

#[tokio::test]
async fn the_clusters_windows_trip_a_breaker_no_replica_could_trip_alone() {
    let m = mocks(2).await;
    let p = prefix();
    // No run rule: only the failure share over min_requests = 20 can trip.
    let toml = clustered(&config(&m, NO_RUN_RULE), REDIS, &p);
    let (a, b) = replicas(&toml).await;
    m[0].set_plan(down());
    // 12 failures each: under min_requests alone, 24 together.
    for _ in 0..12 {
        assert_eq!(a.chat(chat_body(false)).await.status(), 200);
        assert_eq!(b.chat(chat_body(false)).await.status(), 200);
    }
    assert!(until_breaker(&a, "p0/model-0", "open").await);
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    finish(&p, [a, b]).await;
}

#[tokio::test]
async fn the_same_replicas_alone_do_not_trip_on_those_counts() {
    // The control for the test above: without [cluster], 12 failures stay under min_requests.
    let m = mocks(2).await;
    let toml = config(&m, NO_RUN_RULE);
    let a = Gateway::start(&toml).await;
    m[0].set_plan(down());
    for _ in 0..12 {
        assert_eq!(a.chat(chat_body(false)).await.status(), 200);
    }
    assert_eq!(breaker(&a, "p0/model-0").await, "closed");
    assert!(status(&a).await["cluster"].is_null());
    a.stop().await;
}

#[tokio::test]
async fn an_operators_override_on_one_replica_applies_to_all() {
    let m = mocks(2).await;
    let p = prefix();
    let toml = clustered(&config(&m, ""), REDIS, &p);
    let (a, b) = replicas(&toml).await;
    manual(&a, "open").await;
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    let resp = b.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p1/model-1");
    manual(&a, "close").await;
    assert!(until_breaker(&b, "p0/model-0", "closed").await);
    let resp = b.chat(chat_body(false)).await;
    assert_eq!(header(&resp, "x-switchyard-target"), "p0/model-0");
    finish(&p, [a, b]).await;
}

#[tokio::test]
async fn with_redis_down_a_replica_carries_on_alone_says_so_and_publishes_when_it_is_back() {
    let m = mocks(2).await;
    let p = prefix();
    let proxy = TcpProxy::start(REDIS).await;
    let via_proxy = clustered(&config(&m, ""), &proxy.addr.to_string(), &p);
    let direct = clustered(&config(&m, ""), REDIS, &p);
    let (a, b) = (
        Gateway::start(&via_proxy).await,
        Gateway::start(&direct).await,
    );
    assert!(until_cluster(&a, "connected", json!(true)).await.is_some());

    proxy.set_up(false);
    let s = until_cluster(&a, "connected", json!(false))
        .await
        .expect("A reports the lost link");
    assert!(s["cluster"]["error"].is_string(), "{s}");
    // The others' counts are kept a few seconds (a blip), then dropped.
    assert!(until_cluster(&a, "windows", json!("local")).await.is_some());
    // Alone, A still trips on what it sees, and clients are answered.
    trip_primary(&a, &m).await;
    assert_eq!(
        breaker(&b, "p0/model-0").await,
        "closed",
        "B cannot know yet"
    );

    // Redis back: A publishes the state it kept, and B takes it over.
    proxy.set_up(true);
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    assert_eq!(status(&a).await["cluster"]["connected"], true);
    finish(&p, [a, b]).await;
}

#[tokio::test]
async fn an_unreachable_redis_never_blocks_a_request() {
    let m = mocks(1).await;
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gw = Gateway::start(&clustered(
        &config(&m, ""),
        &format!(":s3cret@127.0.0.1:{port}"),
        &prefix(),
    ))
    .await;
    let s = answered_with_the_link_down(&gw).await;
    assert_eq!(s["cluster"]["windows"], "local");
    assert!(s["cluster"]["failed_rounds"].as_u64().unwrap() >= 1);
    assert!(
        !s.to_string().contains("s3cret"),
        "the password leaked: {s}"
    );
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains("switchyard_cluster_connected 0"),
        "{metrics}"
    );
    let failures: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("switchyard_cluster_sync_failures_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sync failure count: {metrics}"));
    assert!(failures >= 1, "{metrics}");
    assert!(!metrics.contains("s3cret"));
    gw.stop().await;
}

#[tokio::test]
async fn a_state_kept_through_an_outage_never_replaces_a_newer_one() {
    let m = mocks(2).await;
    let p = prefix();
    let proxy = TcpProxy::start(REDIS).await;
    let a = Gateway::start(&clustered(&config(&m, ""), &proxy.addr.to_string(), &p)).await;
    assert!(until_cluster(&a, "connected", json!(true)).await.is_some());
    proxy.set_up(false);
    assert!(until_cluster(&a, "connected", json!(false)).await.is_some());
    trip_primary(&a, &m).await;
    // Meanwhile another replica closed the target (an operator, a minute later by its clock).
    let newer = format!("{} other close 0 0 0", wall_ms() + 60_000);
    store_state(&p, "p0/model-0", &newer).await;
    m[0].set_plan(FaultPlan::default());

    proxy.set_up(true);
    // A's older open does not replace it; A takes the newer state over instead.
    assert!(until_breaker(&a, "p0/model-0", "closed").await);
    assert_eq!(stored_state(&p, "p0/model-0").await, Some(newer));
    finish(&p, [a]).await;
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn a_malformed_stored_state_is_replaced_not_a_reason_to_stop_syncing() {
    let m = mocks(2).await;
    let p = prefix();
    store_state(&p, "p0/model-0", "written by a future version").await;
    let toml = clustered(&config(&m, ""), REDIS, &p);
    let (a, b) = replicas(&toml).await;
    trip_primary(&a, &m).await;
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    assert_eq!(status(&a).await["cluster"]["connected"], true);
    finish(&p, [a, b]).await;
}

#[tokio::test]
async fn a_redis_that_never_answers_times_the_round_out_and_requests_go_on() {
    let m = mocks(1).await;
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            conns.push(c);
        }
    });
    let gw = Gateway::start(&clustered(&config(&m, ""), &addr.to_string(), &prefix())).await;
    answered_with_the_link_down(&gw).await;
    gw.stop().await;
    held.abort();
}

#[tokio::test]
async fn an_open_state_redis_lost_is_published_again() {
    let m = mocks(2).await;
    let p = prefix();
    let toml = clustered(&config(&m, ""), REDIS, &p);
    let a = Gateway::start(&toml).await;
    trip_primary(&a, &m).await;
    // Redis restarted without persistence: the states are gone.
    let stored = eventually(10, || stored_state(&p, "p0/model-0")).await;
    assert!(stored.is_some(), "A published its open state");
    let _: () = redis::cmd("DEL")
        .arg(format!("{p}:states"))
        .query_async(&mut redis_conn().await)
        .await
        .unwrap();
    // A replica that starts now learns of the outage all the same.
    let b = Gateway::start(&toml).await;
    assert!(until_breaker(&b, "p0/model-0", "open").await);
    finish(&p, [a, b]).await;
}

//! Adaptive shares across replicas through the real Redis on 127.0.0.1:6379: one replica
//! computes them, the others take them over, so a session lands on the same target through
//! any replica. Real time (the sync runs once a second): bounded polls, never fixed waits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{json, Value};
use support::audit::eventually;
use support::*;
use switchyard::mock::FaultPlan;

fn slow(ms: u64) -> FaultPlan {
    FaultPlan {
        latency_ms: ms,
        ..FaultPlan::default()
    }
}

fn shares(st: &Value) -> Vec<f64> {
    st["routes"][0]["shares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["share"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn replicas_agree_on_the_shares_and_send_a_session_to_the_same_target() {
    let m = mocks(3).await;
    for mock in &m {
        mock.set_plan(slow(5));
    }
    let prefix = format!("switchyard-test-{:016x}", fastrand::u64(..));
    let mut toml = config(&m, "");
    let start = toml.find("[[routes]]").unwrap();
    toml.truncate(start);
    toml += "[[routes]]\nname = \"chat\"\nstrategy = \"adaptive\"\ntargets = [\
             { provider = \"p0\", model = \"model-0\" }, { provider = \"p1\", model = \"model-1\" }, \
             { provider = \"p2\", model = \"model-2\" }]\n[routes.adaptive]\ninterval = \"2s\"\n";
    toml +=
        &format!("\n[cluster]\nredis = \"redis://127.0.0.1:6379\"\nkey_prefix = \"{prefix}\"\n");
    let a = Gateway::start(&toml).await;
    let b = Gateway::start(&toml).await;
    let ask = || json!({"model": "chat", "messages": [{"role": "user", "content": format!("q{}", fastrand::u64(..))}]});
    // The first target browns out, seen by one replica only: alone, it would move its shares
    // and the other would not; in the cluster they hold the same (the leader's).
    m[0].set_plan(slow(150));
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(8);
    while tokio::time::Instant::now() < until {
        assert_eq!(a.chat(ask()).await.status(), 200);
    }
    // The leader recomputes every interval (2 s) and publishes within the second after; the
    // other takes the shares over within a second more: between the two, they are the same.
    let agreed = eventually(15, || async {
        let (sa, sb) = (shares(&status(&a).await), shares(&status(&b).await));
        (sa == sb).then_some(())
    })
    .await;
    assert!(
        agreed.is_some(),
        "one replica's view of the brownout is the cluster's"
    );
    // Traffic reaches both: whichever leads sees the brownout.
    let moved = eventually(45, || async {
        for i in 0..20 {
            let gw = if i % 2 == 0 { &a } else { &b };
            assert_eq!(gw.chat(ask()).await.status(), 200);
        }
        let (sa, sb) = (shares(&status(&a).await), shares(&status(&b).await));
        (sa[0] < 0.1 && sa == sb).then_some((sa, sb))
    })
    .await;
    let (sa, sb) = moved.expect("the replicas' shares agree, off the slow target");
    assert_eq!(sa, sb);
    // One session, either replica: one target.
    for s in 0..20 {
        let session = format!("conv-{s}");
        let mut seen = Vec::new();
        for gw in [&a, &b, &a, &b] {
            let body = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
            let resp = gw
                .chat_with(body, &[("x-switchyard-session", &session)])
                .await;
            assert_eq!(resp.status(), 200);
            seen.push(header(&resp, "x-switchyard-target"));
        }
        seen.dedup();
        assert_eq!(seen.len(), 1, "{session}: {seen:?}");
    }
    a.stop().await;
    b.stop().await;
    let client = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    for k in keys {
        let _: () = redis::cmd("DEL")
            .arg(k)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

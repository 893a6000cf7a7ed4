//! Sessions in the audit log: a three-turn conversation with a failover on turn two reads back
//! in order, with its session key and the client's trace id, from `GET /admin/audit?session=`
//! and `switchyard audit --session`, on SQLite and PostgreSQL, and `switchyard audit --report`
//! sums it up; the key comes from the header, the client's own hint, or the conversation's
//! first turn.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use serde_json::{json, Value};
use support::audit::{eventually, TestStore};
use support::*;
use switchyard::mock::FaultPlan;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn session_records(gw: &Gateway, key: &str, n: usize) -> Vec<Value> {
    eventually(5, || async {
        let body = get_json(gw, &format!("/admin/audit?session={key}")).await;
        let records = body["records"].as_array().cloned().unwrap_or_default();
        (records.len() == n).then_some(records)
    })
    .await
    .unwrap_or_else(|| panic!("{n} records of session {key}"))
}

/// Three turns of one conversation, the second failing over; another conversation between.
async fn a_conversation_reads_back_in_order(store: TestStore) {
    let m = mocks(2).await;
    let toml = config(&m, "[routes.breaker]\nconsecutive_failures = 0");
    let gw = Gateway::start(&with_audit(&toml, &store.url(), "")).await;
    let traceparent = format!("00-{TRACE}-00f067aa0ba902b7-01");
    let mut messages = vec![json!({"role": "user", "content": "plan the change"})];
    let mut ids = Vec::new();
    for turn in 0..3 {
        m[0].set_plan(if turn == 1 {
            FaultPlan {
                status: Some(503),
                ..FaultPlan::default()
            }
        } else {
            FaultPlan::default()
        });
        let body = json!({"model": "chat", "messages": messages});
        let resp = gw
            .chat_with(
                body,
                &[
                    ("x-switchyard-session", "task-42"),
                    ("traceparent", &traceparent),
                ],
            )
            .await;
        assert_eq!(resp.status(), 200);
        ids.push(header(&resp, "x-switchyard-request-id"));
        // Another agent's turn in between, with the primary healthy.
        m[0].set_plan(FaultPlan::default());
        let other = json!({"model": "chat", "messages": [{"role": "user", "content": "other"}]});
        assert_eq!(gw.chat(other).await.status(), 200);
        messages.push(json!({"role": "assistant", "content": "ok"}));
        messages.push(json!({"role": "user", "content": format!("turn {turn}")}));
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let turns = session_records(&gw, "task-42", 3).await;
    let got: Vec<&str> = turns
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        got,
        ids.iter().map(String::as_str).collect::<Vec<_>>(),
        "in order"
    );
    for r in &turns {
        assert_eq!(r["session"], "task-42");
        assert_eq!(r["trace_id"], TRACE);
    }
    let targets: Vec<&str> = turns
        .iter()
        .map(|r| r["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["p0/model-0", "p1/model-1", "p0/model-0"]);
    assert_eq!(
        turns[1]["path"].as_array().unwrap().len(),
        2,
        "turn two failed over"
    );
    // The other conversation has a session of its own: the hash of its first turn.
    let all = get_json(&gw, "/admin/audit").await;
    let other = all["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session"] != "task-42")
        .cloned()
        .unwrap();
    let key = other["session"].as_str().unwrap();
    assert!(key.starts_with("prompt:"), "{key}");
    assert_eq!(other["trace_id"], Value::Null);
    assert_eq!(
        session_records(&gw, key, 3).await.len(),
        3,
        "three turns of `other`"
    );
    gw.stop().await;

    // The CLI: the turns in order under a summary, and as JSON.
    let url = store.url();
    let out = cli(&["audit", "--db", &url, "--session", "task-42"]);
    assert!(out.starts_with("session task-42: 3 turns"), "{out}");
    assert!(
        out.contains("1 failed over, 0 hedged, 0 turns dropped, 0 failed"),
        "{out}"
    );
    assert!(out.contains("served by p0/model-0, p1/model-1"), "{out}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(&ids[0]) || l.contains(&ids[1]) || l.contains(&ids[2]))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains(&ids[0]) && lines[2].contains(&ids[2]),
        "in order:\n{out}"
    );
    assert!(
        lines[1].contains("p0/model-0:503 -> p1/model-1:ok"),
        "{out}"
    );
    let json: Vec<Value> = serde_json::from_str(&cli(&[
        "audit",
        "--db",
        &url,
        "--session",
        "task-42",
        "--json",
    ]))
    .unwrap();
    assert_eq!(json.len(), 3);
    assert_eq!(json[0]["request_id"], ids[0].as_str());
    assert_eq!(json[2]["trace_id"], TRACE);

    // The report over the same records: one failover in six requests, one of two sessions.
    let text = cli(&["audit", "--db", &url, "--report", "--since", "1h"]);
    assert!(text.starts_with("audit report: 6 records"), "{text}");
    assert!(text.contains("status 503 1"), "{text}");
    assert!(
        text.contains("sessions: 2, 1 of them saw a failover (50.0%)"),
        "{text}"
    );
    let rep: Value =
        serde_json::from_str(&cli(&["audit", "--db", &url, "--report", "--json"])).unwrap();
    assert_eq!(rep["routes"]["chat"]["requests"], 6);
    assert_eq!(rep["routes"]["chat"]["failed_over"], 1);
    assert_eq!(rep["targets"]["p1/model-1"]["answered"], 1);
    assert_eq!(rep["targets"]["p0/model-0"]["turns_dropped"]["0"], 5);
    store.cleanup().await;
}
both!(a_conversation_reads_back_in_order);

fn cli(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn the_clients_own_hint_names_the_session_and_a_bad_traceparent_is_no_trace() {
    let store = TestStore::sqlite();
    let m = mocks(1).await;
    let gw = Gateway::start(&with_audit(&config(&m, ""), &store.url(), "")).await;
    for turn in 0..2 {
        let body = json!({"model": "chat", "prompt_cache_key": "conv-7",
            "messages": [{"role": "user", "content": format!("differs {turn}")}]});
        let resp = gw
            .chat_with(body, &[("traceparent", "00-zz-00f067aa0ba902b7-01")])
            .await;
        assert_eq!(resp.status(), 200);
    }
    let turns = session_records(&gw, "conv-7", 2).await;
    assert!(turns.iter().all(|r| r["trace_id"].is_null()), "{turns:?}");
    gw.stop().await;
    store.cleanup().await;
}

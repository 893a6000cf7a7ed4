//! Reading the audit log: `GET /admin/audit` and its filters, the `audit` object of
//! `/admin/status`, what a record holds with client keys and bodies, and `switchyard audit`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::audit::{eventually, TestStore};
use support::*;
use switchyard::mock::FaultPlan;

async fn get(gw: &Gateway, path: &str) -> (u16, Value) {
    let resp = client().get(gw.url(path)).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

async fn audit(gw: &Gateway, query: &str) -> Vec<Value> {
    let (status, body) = get(gw, &format!("/admin/audit{query}")).await;
    assert_eq!(status, 200, "{body}");
    body["records"].as_array().unwrap().clone()
}

#[tokio::test]
async fn admin_audit_filters_by_route_target_status_time_and_id() {
    let store = TestStore::sqlite();
    let m = mocks(2).await;
    let toml = config(&m, "[routes.breaker]\nconsecutive_failures = 0");
    let gw = Gateway::start(&with_audit(&toml, &store.url(), "")).await;
    let mut ids = Vec::new();
    for plan in [None, None, Some(503), Some(500)] {
        if let Some(status) = plan {
            m[0].set_plan(FaultPlan {
                status: Some(status),
                ..Default::default()
            });
        }
        if plan == Some(500) {
            m[1].set_plan(FaultPlan {
                status: Some(500),
                ..Default::default()
            });
        }
        let resp = gw.chat(chat_body(false)).await;
        ids.push(header(&resp, "x-switchyard-request-id"));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let all = eventually(5, || async {
        let all = audit(&gw, "").await;
        (all.len() == 4).then_some(all)
    })
    .await
    .expect("the four records are written within a second or so");
    let newest_first: Vec<&str> = all
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.reverse();
    assert_eq!(newest_first, want);
    let failed_status = all[0]["status"].as_u64().unwrap();
    assert!(failed_status >= 500, "{}", all[0]);

    let count = |q: &'static str| {
        let gw = &gw;
        async move { audit(gw, q).await.len() }
    };
    assert_eq!(count("?route=chat").await, 4);
    assert_eq!(count("?route=other").await, 0);
    assert_eq!(count("?target=p1/model-1").await, 1);
    assert_eq!(count("?target=p0/model-0").await, 2);
    assert_eq!(count("?status=200").await, 3);
    assert_eq!(count("?route=&target=&status=&since=&limit=").await, 4);
    let only = audit(&gw, &format!("?status={failed_status}")).await;
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["target"], Value::Null);
    assert_eq!(only[0]["path"].as_array().unwrap().len(), 2);
    let two = audit(&gw, "?limit=2").await;
    assert_eq!(two[..], all[..2]);
    let third = all[1]["time_ms"].as_i64().unwrap();
    assert!(audit(&gw, &format!("?since={third}")).await.len() >= 2);
    let newest = all[0]["time_ms"].as_i64().unwrap();
    assert_eq!(audit(&gw, &format!("?since={}", newest + 1)).await.len(), 0);
    let one = audit(&gw, &format!("?request_id={}", ids[2])).await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["path"][0]["status"], 503);

    let (status, body) = get(&gw, "/admin/audit?status=teapot").await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("status"));
    let (_, status) = get(&gw, "/admin/status").await;
    let a = &status["audit"];
    assert_eq!(
        (&a["store"], &a["written"], &a["dropped"]),
        (&"sqlite".into(), &4.into(), &0.into())
    );
    assert_eq!(
        (&a["failing"], &a["last_error"]),
        (&false.into(), &Value::Null)
    );
    gw.stop().await;
    store.cleanup().await;
}

#[tokio::test]
async fn with_the_audit_log_off_nothing_is_kept_and_status_says_so() {
    let m = mocks(1).await;
    let gw = Gateway::start(&config(&m, "")).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    let (status, body) = get(&gw, "/admin/audit").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "audit_off");
    let (_, status) = get(&gw, "/admin/status").await;
    assert_eq!(status["audit"]["store"], "off");
    assert_eq!(status["audit"]["written"], 0);
}

#[tokio::test]
async fn records_name_the_client_key_by_id_and_keep_bodies_only_when_asked_secrets_masked() {
    let store = TestStore::sqlite();
    let m = mocks(1).await;
    let toml = with_client_key(&config(&m, ""));
    let gw = Gateway::start(&with_audit(&toml, &store.url(), "bodies = true")).await;
    let resp = gw
        .chat_with(
            chat_body(false),
            &[("authorization", "Bearer sk-test-secret")],
        )
        .await;
    assert_eq!(resp.status(), 200);
    // Secrets a user pastes into a prompt are masked before the body is stored: the configured
    // keys wherever they appear, credentials by their shape, values of secret-named fields.
    let pasted = serde_json::json!({
        "model": "chat",
        "messages": [{"role": "user", "content":
            "my key is sk-test-secret, AWS AKIAIOSFODNN7EXAMPLE, config {\"password\":\"hunter2\"}"}],
    });
    let resp = gw
        .chat_with(pasted, &[("authorization", "Bearer sk-test-secret")])
        .await;
    assert_eq!(resp.status(), 200);
    gw.stop().await;
    let all = store.all().await;
    assert_eq!(all.len(), 2);
    let stored = all[1].request_body.as_deref().unwrap();
    assert!(
        stored.contains(
            r#"my key is [REDACTED], AWS [REDACTED], config {\"password\":\"[REDACTED]\"}"#
        ),
        "{stored}"
    );
    assert!(
        !stored.contains("hunter2") && !stored.contains("AKIA"),
        "{stored}"
    );
    let rec = &all[0];
    assert!(rec
        .client_key_id
        .as_deref()
        .is_some_and(|id| !id.is_empty()));
    assert!(rec
        .request_body
        .as_deref()
        .unwrap()
        .contains("Say the canonical text."));
    assert!(rec.response_body.as_deref().unwrap().contains("choices"));
    let text = serde_json::to_string(rec).unwrap();
    assert!(
        !text.contains("sk-test-secret"),
        "no key in the record: {text}"
    );
    store.cleanup().await;
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env("TEST_KEY", "sk-test-secret")
        .output()
        .unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn the_cli_prints_a_table_or_json() {
    let store = TestStore::sqlite();
    let m = mocks(2).await;
    let toml = with_audit(&config(&m, ""), &store.url(), "");
    let gw = Gateway::start(&toml).await;
    assert_eq!(gw.chat(chat_body(false)).await.status(), 200);
    m[0].set_plan(FaultPlan {
        status: Some(503),
        ..Default::default()
    });
    let resp = gw.chat(chat_body(true)).await;
    let failover_id = header(&resp, "x-switchyard-request-id");
    resp.text().await.unwrap();
    gw.stop().await;
    let db = store.url();

    let table = stdout(&cli(&["audit", "--db", &db]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("TIME (UTC)") && lines[0].contains("PATH"),
        "{table}"
    );
    assert_eq!(lines.len(), 4, "header, two records, legend:\n{table}");
    assert!(lines[1].ends_with("p0/model-0:ok"), "{table}");
    assert!(lines[2].contains(&failover_id), "newest last:\n{table}");
    assert!(
        lines[2].ends_with("p0/model-0:503 -> p1/model-1:ok"),
        "{table}"
    );
    assert!(lines[2].contains(" 200~ "), "a stream is marked:\n{table}");

    let json: Value =
        serde_json::from_str(&stdout(&cli(&["audit", "--db", &db, "--json"]))).unwrap();
    let records = json.as_array().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1]["request_id"], failover_id.as_str());
    assert_eq!(records[1]["path"][0]["status"], 503);
    assert_eq!(records[1]["stream"], true);

    let last: Value = serde_json::from_str(&stdout(&cli(&[
        "audit", "--db", &db, "--last", "1", "--json",
    ])))
    .unwrap();
    assert_eq!(last[0]["request_id"], failover_id.as_str());
    assert_eq!(last.as_array().unwrap().len(), 1);
    let one = stdout(&cli(&["audit", "--db", &db, "--request-id", &failover_id]));
    assert_eq!(one.lines().count(), 3, "{one}");

    // Without --db the config's store is read.
    let config_file =
        std::env::temp_dir().join(format!("switchyard-cli-{}.toml", std::process::id()));
    std::fs::write(&config_file, &toml).unwrap();
    let via_config = stdout(&cli(&["audit", "-c", config_file.to_str().unwrap()]));
    assert_eq!(via_config, table);
    let _ = std::fs::remove_file(&config_file);

    let bad = cli(&["audit", "--db", "mysql://root@db/audit"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sqlite://"));
    store.cleanup().await;
}

/// PostgreSQL: versions 2 and 3 of the schema drop the request-id and route indexes of version 1
/// (every index costs each insert), version 4 hands ids out from a per-connection cache, and a
/// lookup by id still finds its record, through the time in the id. The columns of later
/// versions (session and trace id, 6; cache counts, 7) come back too: the records of the
/// second round are written into them.
#[tokio::test]
async fn postgres_lookups_by_id_need_no_index_and_old_schemas_are_migrated() {
    let store = TestStore::postgres().await;
    let TestStore::Postgres { schema, admin } = &store else {
        unreachable!()
    };
    let m = mocks(1).await;
    let toml = with_audit(&config(&m, ""), &store.url(), "");
    let indexes = || async {
        admin
            .query(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 \
                 AND tablename = 'audit_records' ORDER BY indexname",
                &[schema],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| {
                let def: String = r.get(0);
                def.split(" USING btree ").nth(1).unwrap_or(&def).to_owned()
            })
            .collect::<Vec<_>>()
    };
    for round in 0..2 {
        let gw = Gateway::start(&toml).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let resp = gw.chat(chat_body(false)).await;
            ids.push(header(&resp, "x-switchyard-request-id"));
        }
        gw.stop().await;
        // One btree: the key, on time then id (version 5).
        assert_eq!(indexes().await, ["(time_ms, id)"], "round {round}");
        let id_cache: i64 = admin
            .query_one(
                &format!(
                    "SELECT seqcache FROM pg_sequence \
                     WHERE seqrelid = '\"{schema}\".audit_records_id_seq'::regclass"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(id_cache, 1000, "round {round}");
        let want = &ids[1];
        let q = switchyard::audit::AuditQuery {
            request_id: Some(want.clone()),
            limit: 10,
            ..Default::default()
        };
        let found = store.records(q).await;
        assert_eq!(found.len(), 1, "round {round}");
        assert_eq!(&found[0].request_id, want);
        // The mock reports usage without cache counts: 0, not unknown.
        assert_eq!(
            (found[0].cache_read_tokens, found[0].cache_write_tokens),
            (Some(0), Some(0)),
            "round {round}"
        );
        // Make it a version-1 database again: the next start must migrate it.
        admin
            .batch_execute(&format!(
                "ALTER TABLE \"{schema}\".audit_records DROP CONSTRAINT audit_records_pkey, \
                    ADD PRIMARY KEY (id); \
                 CREATE INDEX audit_records_time ON \"{schema}\".audit_records (time_ms); \
                 CREATE INDEX audit_records_request_id ON \"{schema}\".audit_records (request_id); \
                 CREATE INDEX audit_records_route_time ON \"{schema}\".audit_records (route, time_ms); \
                 ALTER SEQUENCE \"{schema}\".audit_records_id_seq CACHE 1; \
                 ALTER TABLE \"{schema}\".audit_records DROP COLUMN session, DROP COLUMN trace_id, \
                    DROP COLUMN cache_read_tokens, DROP COLUMN cache_write_tokens; \
                 DELETE FROM \"{schema}\".audit_schema_version WHERE version >= 2"
            ))
            .await
            .unwrap();
        assert_eq!(
            indexes().await,
            ["(id)", "(request_id)", "(route, time_ms)", "(time_ms)"]
        );
    }
    store.cleanup().await;
}

/// Requests refused before any attempt get a record too ("one record per client request"):
/// an unknown model (with the model asked for and the client key's id), a bad key, a body that
/// is not JSON, an unknown model on the Anthropic API. No path, the status and the reason.
#[tokio::test]
async fn refused_requests_are_recorded_with_their_status_and_no_path() {
    let store = TestStore::sqlite();
    let m = mocks(1).await;
    let toml = with_client_key(&config(&m, ""));
    let gw = Gateway::start(&with_audit(&toml, &store.url(), "")).await;
    let key = [("authorization", "Bearer sk-test-secret")];

    let mut body = chat_body(true);
    body["model"] = "no-such-model".into();
    let resp = gw.chat_with(body, &key).await;
    assert_eq!(resp.status(), 404);
    let unknown_id = header(&resp, "x-switchyard-request-id");
    let resp = gw
        .chat_with(chat_body(false), &[("authorization", "Bearer wrong")])
        .await;
    assert_eq!(resp.status(), 401);
    let resp = client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", "Bearer sk-test-secret")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let resp = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", "sk-test-secret")
        .json(&serde_json::json!({
            "model": "nope", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    gw.stop().await;

    let all = store.all().await;
    let summary: Vec<(u16, &str, bool)> = all
        .iter()
        .map(|r| (r.status, r.route.as_str(), r.client_key_id.is_some()))
        .collect();
    assert_eq!(
        summary,
        [
            (404, "no-such-model", true),
            (401, "", false),
            (400, "", false),
            (404, "nope", true)
        ]
    );
    assert_eq!(all[0].request_id, unknown_id);
    assert!(all[0].stream);
    for r in &all {
        assert!(r.path.is_empty() && r.target.is_none(), "{r:?}");
        assert!(r.error.as_deref().is_some_and(|e| !e.is_empty()), "{r:?}");
    }
    assert!(all[0].error.as_deref().unwrap().contains("does not exist"));
    assert_eq!(m[0].stats().requests, 0, "none reached the provider");
    store.cleanup().await;
}

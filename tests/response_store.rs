//! The gateway's store of Responses API responses, on a real SQLite file and the machine's
//! PostgreSQL (127.0.0.1:5432, database `test`, a fresh schema per test): a response is found
//! the moment it is put, and after a restart from the database; only the key that made it
//! gets or deletes it; retention prunes, too large is not kept, a full queue is counted, and
//! shutdown writes everything queued. Timers run on tokio's paused clock (SQLite: its calls on
//! the blocking pool hold the clock while they run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard::clock::wall_ms_i64;
use switchyard::config::{AuditConfig, AuditStore, ResponsesConfig, ResponsesStore};
use switchyard::metrics::Registry;
use switchyard::response_store::{new_id, Kept, Limits, ResponseStore, StoredResponse};

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
const PG_PREFIX: &str = "swy_resp_";

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{tag}{secs}_{}_{n}", std::process::id())
}

/// A database for one test: a SQLite file (not created yet) or a new PostgreSQL schema.
enum Db {
    Sqlite(PathBuf),
    Postgres {
        schema: String,
        admin: tokio_postgres::Client,
    },
}

async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at 127.0.0.1:5432 is needed: {e}"));
    tokio::spawn(conn);
    client
}

impl Db {
    fn sqlite() -> Db {
        Db::Sqlite(std::env::temp_dir().join(format!("{}.db", unique("switchyard-resp-"))))
    }

    /// A new, empty schema; leftovers of runs more than an hour old are dropped.
    async fn postgres() -> Db {
        let admin = pg_connect(PG_ADMIN).await;
        let schema = unique(PG_PREFIX);
        let born = |name: &str| {
            name[PG_PREFIX.len()..]
                .split('_')
                .next()
                .and_then(|s| s.parse::<u64>().ok())
        };
        let now = born(&schema).unwrap();
        let old = admin
            .query(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'swy\\_resp\\_%'",
                &[],
            )
            .await
            .unwrap();
        for row in old {
            let name: String = row.get(0);
            if born(&name).is_some_and(|b| b + 3600 < now) {
                let _ = admin
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .await;
            }
        }
        admin
            .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
            .await
            .unwrap();
        Db::Postgres { schema, admin }
    }

    fn store(&self) -> AuditStore {
        match self {
            Db::Sqlite(path) => AuditStore::Sqlite(path.display().to_string()),
            Db::Postgres { schema, .. } => AuditStore::Postgres(format!(
                "postgres://postgres@127.0.0.1:5432/test?options=-c%20search_path%3D{schema}"
            )),
        }
    }

    /// The ids in the `responses` table, sorted, read around the store.
    async fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = match self {
            Db::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).unwrap();
                let mut stmt = conn.prepare("SELECT id FROM responses").unwrap();
                let rows = stmt.query_map([], |r| r.get(0)).unwrap();
                rows.map(Result::unwrap).collect()
            }
            Db::Postgres { schema, admin } => admin
                .query(&format!("SELECT id FROM \"{schema}\".responses"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
        };
        ids.sort();
        ids
    }

    async fn cleanup(self) {
        match self {
            Db::Sqlite(path) => {
                for ext in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
                }
            }
            Db::Postgres { schema, admin } => {
                admin
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await
                    .unwrap();
            }
        }
    }
}

/// `[responses]` with its defaults (the audit log's database, here `db`) and `retention`.
fn configs(db: &Db, retention: Option<Duration>) -> (ResponsesConfig, AuditConfig) {
    let responses = ResponsesConfig {
        retention,
        ..ResponsesConfig::default()
    };
    let audit = AuditConfig {
        store: db.store(),
        ..AuditConfig::default()
    };
    (responses, audit)
}

async fn open(db: &Db, limits: Limits) -> ResponseStore {
    let (responses, audit) = configs(db, None);
    ResponseStore::open_with(&responses, &audit, &Registry::new(), limits)
        .await
        .unwrap()
}

fn response(key: Option<&str>, created_ms: i64) -> StoredResponse {
    let id = new_id();
    StoredResponse {
        client_key_id: key.map(str::to_owned),
        created_ms,
        route: "gpt-4o".into(),
        provider: "openai".into(),
        previous_id: Some("resp_0123".into()),
        input: r#"[{"role":"user","content":"hi"}]"#.into(),
        output: format!(r#"[{{"type":"message","id":"msg_{id}"}}]"#),
        response: format!(r#"{{"id":"{id}","object":"response"}}"#),
        id,
    }
}

async fn put_then_get_at_once_then_after_a_restart(db: Db) {
    let store = open(&db, Limits::default()).await;
    assert!(store.enabled());
    let a = response(Some("key-a"), wall_ms_i64());
    assert_eq!(store.put(a.clone()), Kept::Queued);
    // Nothing has yielded to the writer yet: this is memory.
    let got = store.get(&a.id, Some("key-a")).await.unwrap().unwrap();
    assert_eq!(*got, a);
    if let Db::Sqlite(_) = db {
        assert!(db.ids().await.is_empty(), "not written yet");
    }
    store.shutdown().await;
    assert_eq!(db.ids().await, [a.id.as_str()]);
    assert_eq!(store.status().stored, 1);

    // A new store (a restart): from the database.
    let store = open(&db, Limits::default()).await;
    assert_eq!(store.status().in_memory, 0);
    let got = store.get(&a.id, Some("key-a")).await.unwrap().unwrap();
    assert_eq!(*got, a);
    assert!(store.get(&new_id(), Some("key-a")).await.unwrap().is_none());
    store.shutdown().await;
    db.cleanup().await;
}

#[tokio::test]
async fn put_then_get_at_once_then_after_a_restart_sqlite() {
    put_then_get_at_once_then_after_a_restart(Db::sqlite()).await;
}

#[tokio::test]
async fn put_then_get_at_once_then_after_a_restart_postgres() {
    put_then_get_at_once_then_after_a_restart(Db::postgres().await).await;
}

/// Only `key-a` gets or deletes `a`; only a request without a key (no `[auth]`) gets
/// `open_one`.
async fn only_the_key_that_made_it(
    store: &ResponseStore,
    a: &StoredResponse,
    open_one: &StoredResponse,
) {
    for other in [Some("key-b"), None] {
        assert!(
            store.get(&a.id, other).await.unwrap().is_none(),
            "{other:?}"
        );
        assert!(!store.delete(&a.id, other).await.unwrap(), "{other:?}");
    }
    assert!(store
        .get(&open_one.id, Some("key-a"))
        .await
        .unwrap()
        .is_none());
    assert!(!store.delete(&open_one.id, Some("key-a")).await.unwrap());
    assert!(store.get(&a.id, Some("key-a")).await.unwrap().is_some());
    assert!(store.get(&open_one.id, None).await.unwrap().is_some());
}

async fn another_key_neither_gets_nor_deletes(db: Db) {
    let store = open(&db, Limits::default()).await;
    let a = response(Some("key-a"), wall_ms_i64());
    let open_one = response(None, wall_ms_i64());
    store.put(a.clone());
    store.put(open_one.clone());
    only_the_key_that_made_it(&store, &a, &open_one).await;
    store.shutdown().await;
    // From the database.
    let store = open(&db, Limits::default()).await;
    assert_eq!(store.status().in_memory, 0);
    only_the_key_that_made_it(&store, &a, &open_one).await;
    store.shutdown().await;
    let mut both = vec![a.id, open_one.id];
    both.sort();
    assert_eq!(db.ids().await, both);
    db.cleanup().await;
}

#[tokio::test]
async fn another_key_neither_gets_nor_deletes_sqlite() {
    another_key_neither_gets_nor_deletes(Db::sqlite()).await;
}

#[tokio::test]
async fn another_key_neither_gets_nor_deletes_postgres() {
    another_key_neither_gets_nor_deletes(Db::postgres().await).await;
}

async fn delete_from_memory_and_from_the_database(db: Db) {
    let store = open(&db, Limits::default()).await;
    let (a, b) = (
        response(Some("k"), wall_ms_i64()),
        response(Some("k"), wall_ms_i64()),
    );
    store.put(a.clone());
    store.put(b.clone());
    // Still queued: the delete follows its write, so it is never written back after.
    assert!(store.delete(&a.id, Some("k")).await.unwrap());
    assert!(store.get(&a.id, Some("k")).await.unwrap().is_none());
    assert!(!store.delete(&a.id, Some("k")).await.unwrap(), "gone");
    store.shutdown().await;
    assert_eq!(db.ids().await, [b.id.as_str()]);

    let store = open(&db, Limits::default()).await;
    assert!(store.get(&a.id, Some("k")).await.unwrap().is_none());
    assert!(
        store.delete(&b.id, Some("k")).await.unwrap(),
        "from the database"
    );
    assert!(store.get(&b.id, Some("k")).await.unwrap().is_none());
    assert!(!store.delete(&b.id, Some("k")).await.unwrap());
    assert!(db.ids().await.is_empty());
    store.shutdown().await;
    assert!(
        store.delete(&b.id, Some("k")).await.is_err(),
        "shut down: a delete cannot be ordered any more"
    );
    db.cleanup().await;
}

#[tokio::test]
async fn delete_from_memory_and_from_the_database_sqlite() {
    delete_from_memory_and_from_the_database(Db::sqlite()).await;
}

#[tokio::test]
async fn delete_from_memory_and_from_the_database_postgres() {
    delete_from_memory_and_from_the_database(Db::postgres().await).await;
}

/// Every `prune_every` (virtual), responses past the retention are deleted; they are not
/// found even before.
#[tokio::test(start_paused = true)]
async fn retention_prunes_every_interval_sqlite() {
    let db = Db::sqlite();
    let hour = Duration::from_secs(3600);
    let (responses, audit) = configs(&db, Some(hour));
    let limits = Limits {
        prune_every: Duration::from_secs(60),
        ..Limits::default()
    };
    let store = ResponseStore::open_with(&responses, &audit, &Registry::new(), limits)
        .await
        .unwrap();
    // The prune at start runs (on an empty table) before anything is put.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let now = wall_ms_i64();
    let old = response(Some("k"), now - 2 * 3_600_000);
    let new = response(Some("k"), now);
    store.put(old.clone());
    store.put(new.clone());
    assert!(store.get(&old.id, Some("k")).await.unwrap().is_none());
    assert!(store.get(&new.id, Some("k")).await.unwrap().is_some());
    while store.status().stored < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut both = vec![old.id.clone(), new.id.clone()];
    both.sort();
    assert_eq!(db.ids().await, both, "written, not pruned yet");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(db.ids().await, both, "not before the interval");
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(store.status().pruned, 1);
    assert_eq!(db.ids().await, [new.id.as_str()]);
    store.shutdown().await;
    db.cleanup().await;
}

/// PostgreSQL, on the real clock (a paused clock would fire the connection's deadlines while
/// it waits on the socket): pruned at start.
#[tokio::test]
async fn retention_prunes_at_start_postgres() {
    let db = Db::postgres().await;
    let store = open(&db, Limits::default()).await;
    let now = wall_ms_i64();
    let old = response(None, now - 2 * 3_600_000);
    let new = response(None, now);
    store.put(old.clone());
    store.put(new.clone());
    store.shutdown().await;
    assert_eq!(db.ids().await.len(), 2);
    let (responses, audit) = configs(&db, Some(Duration::from_secs(3600)));
    let store = ResponseStore::open(&responses, &audit, &Registry::new())
        .await
        .unwrap();
    assert!(store.get(&old.id, None).await.unwrap().is_none());
    for _ in 0..200 {
        if store.status().pruned == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(store.status().pruned, 1);
    assert_eq!(db.ids().await, [new.id.as_str()]);
    assert!(store.get(&new.id, None).await.unwrap().is_some());
    store.shutdown().await;
    db.cleanup().await;
}

#[tokio::test]
async fn a_response_over_max_bytes_is_not_kept_and_is_counted() {
    let db = Db::sqlite();
    let (mut responses, audit) = configs(&db, None);
    responses.max_bytes = 100;
    let metrics = Registry::new();
    let store = ResponseStore::open_with(&responses, &audit, &metrics, Limits::default())
        .await
        .unwrap();
    let big = StoredResponse {
        input: "x".repeat(60),
        output: "y".repeat(41),
        ..response(None, wall_ms_i64())
    };
    assert_eq!(store.put(big.clone()), Kept::TooLarge);
    assert!(store.get(&big.id, None).await.unwrap().is_none());
    // Exactly the bound: kept. (The response object is not counted.)
    let fits = StoredResponse {
        output: "y".repeat(40),
        response: "z".repeat(1000),
        ..big.clone()
    };
    assert_eq!(store.put(fits.clone()), Kept::Queued);
    store.shutdown().await;
    assert_eq!(db.ids().await, [fits.id]);
    let text = metrics.render();
    for line in [
        "# TYPE switchyard_responses_store_total counter",
        "switchyard_responses_store_total{outcome=\"too_large\"} 1",
        "switchyard_responses_store_total{outcome=\"stored\"} 1",
        "switchyard_responses_store_total{outcome=\"dropped\"} 0",
        "switchyard_responses_store_total{outcome=\"failed\"} 0",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    db.cleanup().await;
}

async fn shutdown_writes_everything_queued(db: Db) {
    let limits = Limits {
        batch_rows: 64,
        ..Limits::default()
    };
    let store = open(&db, limits).await;
    let all: Vec<StoredResponse> = (0..300)
        .map(|_| response(Some("k"), wall_ms_i64()))
        .collect();
    for r in &all {
        assert_eq!(store.put(r.clone()), Kept::Queued);
    }
    assert_eq!(store.status().queued, 300);
    store.shutdown().await;
    let s = store.status();
    assert_eq!(
        (s.stored, s.queued, s.failed, s.dropped),
        (300, 0, 0, 0),
        "{s:?}"
    );
    let mut ids: Vec<String> = all.iter().map(|r| r.id.clone()).collect();
    ids.sort();
    assert_eq!(db.ids().await, ids);
    // After shutdown: kept in memory only, counted.
    assert_eq!(store.put(response(Some("k"), 1)), Kept::MemoryOnly);
    assert_eq!(store.status().dropped, 1);
    db.cleanup().await;
}

#[tokio::test]
async fn shutdown_writes_everything_queued_sqlite() {
    shutdown_writes_everything_queued(Db::sqlite()).await;
}

#[tokio::test]
async fn shutdown_writes_everything_queued_postgres() {
    shutdown_writes_everything_queued(Db::postgres().await).await;
}

/// Past the queue's bytes a response is still found (in memory) but never written: counted
/// as dropped, never silently.
#[tokio::test]
async fn a_full_queue_keeps_responses_in_memory_only_and_counts_them() {
    let db = Db::sqlite();
    let one = response(None, 1);
    let metrics = Registry::new();
    let (responses, audit) = configs(&db, None);
    let limits = Limits {
        // Room for three and a half (all are the same size).
        queue_bytes: 3 * one.held_bytes() + one.held_bytes() / 2,
        ..Limits::default()
    };
    let store = ResponseStore::open_with(&responses, &audit, &metrics, limits)
        .await
        .unwrap();
    let all: Vec<StoredResponse> = (0..10).map(|_| response(None, wall_ms_i64())).collect();
    let kept: Vec<Kept> = all.iter().map(|r| store.put(r.clone())).collect();
    assert_eq!(kept[..3], [Kept::Queued; 3]);
    assert_eq!(kept[3..], [Kept::MemoryOnly; 7]);
    assert_eq!(store.status().dropped, 7);
    assert!(metrics
        .render()
        .contains("switchyard_responses_store_total{outcome=\"dropped\"} 7"));
    for r in &all {
        assert!(store.get(&r.id, None).await.unwrap().is_some());
    }
    store.shutdown().await;
    let mut written: Vec<String> = all[..3].iter().map(|r| r.id.clone()).collect();
    written.sort();
    assert_eq!(db.ids().await, written);
    db.cleanup().await;
}

#[tokio::test]
async fn with_the_audit_log_off_the_default_store_is_off_but_its_own_is_not() {
    let off = AuditConfig {
        store: AuditStore::Off,
        ..AuditConfig::default()
    };
    let store = ResponseStore::open(&ResponsesConfig::default(), &off, &Registry::new())
        .await
        .unwrap();
    assert!(!store.enabled());
    let r = response(None, wall_ms_i64());
    assert_eq!(store.put(r.clone()), Kept::Off);
    assert!(store.get(&r.id, None).await.unwrap().is_none());
    assert!(!store.delete(&r.id, None).await.unwrap());
    assert_eq!(store.status().store, "off");
    store.shutdown().await;

    let db = Db::sqlite();
    let own = ResponsesConfig {
        store: ResponsesStore::Own(db.store()),
        ..ResponsesConfig::default()
    };
    let store = ResponseStore::open(&own, &off, &Registry::new())
        .await
        .unwrap();
    assert_eq!(store.status().store, "sqlite");
    store.put(r.clone());
    store.shutdown().await;
    assert_eq!(db.ids().await, [r.id.as_str()]);
    db.cleanup().await;
}

/// By default the audit log's SQLite file holds both tables, each written by its own writer.
#[tokio::test]
async fn the_audit_database_holds_both_tables() {
    use switchyard::audit::redact::Redactor;
    use switchyard::audit::AuditRecord;

    let db = Db::sqlite();
    let (responses, audit) = configs(&db, None);
    let metrics = Registry::new();
    let (log, writer) = switchyard::audit::start(&audit, Redactor::new([]).cell(), &metrics)
        .await
        .unwrap();
    let store = ResponseStore::open(&responses, &audit, &metrics)
        .await
        .unwrap();
    let r = response(None, wall_ms_i64());
    store.put(r.clone());
    log.submit(AuditRecord::new(
        "req-1".into(),
        wall_ms_i64(),
        "gpt-4o".into(),
    ));
    store.shutdown().await;
    writer.shutdown().await;
    assert_eq!(db.ids().await, [r.id.as_str()]);
    let Db::Sqlite(path) = &db else {
        unreachable!()
    };
    let conn = rusqlite::Connection::open(path).unwrap();
    let audited: i64 = conn
        .query_row("SELECT COUNT(*) FROM audit_records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(audited, 1);
    db.cleanup().await;
}

/// `app::serve` opens the store at start (by default in the audit log's SQLite file) and
/// shuts it down after the drain.
#[tokio::test]
async fn the_gateway_opens_the_store_in_the_audit_database() {
    use switchyard::api::readiness::Phase;

    let db = Db::sqlite();
    let Db::Sqlite(path) = &db else {
        unreachable!()
    };
    let toml = format!(
        r#"
[audit]
store = "sqlite://{}"

[[providers]]
name = "p"
kind = "openai-compatible"
base_url = "http://127.0.0.1:9/v1"

[[routes]]
name = "chat"
targets = [{{ provider = "p", model = "m" }}]
"#,
        path.display()
    );
    let config = switchyard::config::Config::from_toml(&toml, &|_| None).unwrap();
    let state = switchyard::app::build_state(config).unwrap();
    assert!(!state.responses.enabled(), "opened by serve, not before");
    let readiness = state.readiness.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(switchyard::app::serve(listener, state, async {
        let _ = stopped.await;
    }));
    while readiness.phase() == Phase::Starting {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(db.ids().await.is_empty(), "the table is there, empty");
    let _ = stop.send(());
    served.await.unwrap().unwrap();
    db.cleanup().await;
}

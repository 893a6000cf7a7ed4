//! Audit stores for tests: a SQLite file under the temp dir, or a fresh schema in the machine's
//! PostgreSQL (127.0.0.1:5432, database `test`), each unique so tests run in parallel; and a TCP
//! proxy that can cut a database off and bring it back.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard::audit::query::{parse_db_url, query};
use switchyard::audit::{AuditQuery, AuditRecord};
use tokio::net::{TcpListener, TcpStream};

/// The machine's PostgreSQL, as the admin connection sees it.
pub const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
const PG_PREFIX: &str = "swy_audit_";

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{tag}{secs}_{}_{n}", std::process::id())
}

/// A store for one test.
pub enum TestStore {
    Sqlite(PathBuf),
    Postgres {
        schema: String,
        admin: tokio_postgres::Client,
    },
}

impl TestStore {
    /// A new SQLite file (not created yet).
    pub fn sqlite() -> TestStore {
        TestStore::Sqlite(std::env::temp_dir().join(format!("{}.db", unique("switchyard-audit-"))))
    }

    /// A new, empty schema; leftovers of runs more than an hour old are dropped.
    pub async fn postgres() -> TestStore {
        let admin = pg_connect(PG_ADMIN).await;
        let schema = unique(PG_PREFIX);
        let old = admin
            .query(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'swy\\_audit\\_%'",
                &[],
            )
            .await
            .unwrap();
        let now = schema[PG_PREFIX.len()..]
            .split('_')
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap();
        for row in old {
            let name: String = row.get(0);
            let born = name[PG_PREFIX.len()..]
                .split('_')
                .next()
                .and_then(|s| s.parse::<u64>().ok());
            if born.is_some_and(|b| b + 3600 < now) {
                let _ = admin
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                    .await;
            }
        }
        admin
            .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
            .await
            .unwrap();
        TestStore::Postgres { schema, admin }
    }

    /// The URL for `[audit] store` and `--db`.
    pub fn url(&self) -> String {
        self.url_via("127.0.0.1:5432")
    }

    /// For PostgreSQL: the URL through another address (a proxy).
    pub fn url_via(&self, addr: &str) -> String {
        match self {
            TestStore::Sqlite(path) => format!("sqlite://{}", path.display()),
            TestStore::Postgres { schema, .. } => {
                format!("postgres://postgres@{addr}/test?options=-c%20search_path%3D{schema}")
            }
        }
    }

    /// Records matching `q` (at most 10,000), newest first.
    pub async fn records(&self, mut q: AuditQuery) -> Vec<AuditRecord> {
        if q.limit == 0 {
            q.limit = 10_000;
        }
        query(&parse_db_url(&self.url()).unwrap(), &q)
            .await
            .unwrap()
    }

    /// Every record, oldest first.
    pub async fn all(&self) -> Vec<AuditRecord> {
        let mut all = self.records(AuditQuery::default()).await;
        all.reverse();
        all
    }

    /// Remove the file or the schema.
    pub async fn cleanup(self) {
        match self {
            TestStore::Sqlite(path) => {
                for ext in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
                }
            }
            TestStore::Postgres { schema, admin } => {
                admin
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await
                    .unwrap();
            }
        }
    }
}

/// A connected client (its connection driven by a task).
pub async fn pg_connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at 127.0.0.1:5432 is needed: {e}"));
    tokio::spawn(conn);
    client
}

/// A TCP proxy to `upstream`; [`TcpProxy::set_up`]`(false)` cuts every connection and refuses
/// new ones (accepted and closed at once), like a database that went down.
pub struct TcpProxy {
    pub addr: SocketAddr,
    up: Arc<AtomicBool>,
    /// Accept connections and hold them, answering nothing (a server that hangs).
    stalled: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(upstream: &str) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let stalled = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let upstream = upstream.to_owned();
        let (up2, stalled2, conns2) = (up.clone(), stalled.clone(), conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let stall = stalled2.load(Ordering::SeqCst);
                let t = tokio::spawn(async move {
                    if stall {
                        let _ = tokio::io::copy(&mut inbound, &mut tokio::io::sink()).await;
                    } else if let Ok(mut out) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                conns2.lock().unwrap().push(t.abort_handle());
            }
        });
        TcpProxy {
            addr,
            up,
            stalled,
            conns,
            task,
        }
    }

    /// From now on, hold connections without answering (those open are cut).
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for c in self.conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.set_up(false);
        self.task.abort();
    }
}

/// Poll `f` every 50 ms until it returns `Some`, for at most `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Run the scenario `async fn $name(store: TestStore)` against a new SQLite file and a new
/// PostgreSQL schema, as two tests (`$name::sqlite`, `$name::postgres`); `TestStore` must be
/// in scope where it is used.
#[macro_export]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::TestStore::sqlite()).await;
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(super::TestStore::postgres().await).await;
            }
        }
    };
}

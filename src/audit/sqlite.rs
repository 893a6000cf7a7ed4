//! The SQLite store: one file in WAL mode (readers never block the writer), one transaction per
//! batch. rusqlite is blocking, so every call runs on tokio's blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::{ToSql, ToSqlOutput, Value, ValueRef};
use rusqlite::{params_from_iter, Connection, OpenFlags};

use super::query::{AuditQuery, Param};
use super::schema::{Row, COLUMNS};
use super::tuple::{Field, Tuples};
use super::writer::Chunk;
use super::{AuditError, AuditRecord};

/// How long a statement waits for another connection's lock before failing with "busy".
const BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// Rows per multi-row `INSERT` (22 parameters each, well under SQLite's limit).
const ROWS_PER_INSERT: usize = 32;

/// `INSERT` of `n` rows.
fn insert_sql(n: usize) -> String {
    let row = format!("({})", vec!["?"; super::tuple::FIELDS].join(", "));
    format!(
        "INSERT INTO audit_records ({COLUMNS}) VALUES {}",
        vec![row; n].join(", ")
    )
}

impl ToSql for Field<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match *self {
            Field::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Field::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Field::Int(n) => ToSqlOutput::Owned(Value::Integer(n)),
            Field::Float(f) => ToSqlOutput::Owned(Value::Real(f)),
            Field::Bool(b) => ToSqlOutput::Owned(Value::Integer(i64::from(b))),
        })
    }
}

/// Rows deleted per statement when pruning, so the write lock is never held for long.
const PRUNE_CHUNK: usize = 10_000;

/// One open SQLite database.
pub(crate) struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
}

impl SqliteStore {
    /// Open (creating it if needed) for writing: WAL mode, migrations applied.
    pub(super) async fn open_writer(path: &str) -> Result<SqliteStore, AuditError> {
        let path = path.to_owned();
        let conn = blocking(move || {
            let mut conn = Connection::open(&path)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            // WAL with NORMAL sync is durable across a process crash; an OS crash may lose the
            // last transactions, never corrupt the file.
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            migrate(&mut conn)?;
            Ok(conn)
        })
        .await?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Open an existing database for reading.
    pub(super) async fn open_reader(path: &str) -> Result<SqliteStore, AuditError> {
        if !Path::new(path).exists() {
            return Err(AuditError::Invalid(format!(
                "no audit database at {path} (has the gateway written one yet?)"
            )));
        }
        let path = path.to_owned();
        let conn = blocking(move || {
            let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
            conn.busy_timeout(BUSY_TIMEOUT * 5)?;
            Ok(conn)
        })
        .await?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, AuditError> + Send + 'static,
    ) -> Result<T, AuditError> {
        let conn = self.conn.clone();
        blocking(move || f(&mut conn.lock().unwrap_or_else(PoisonError::into_inner))).await
    }

    /// Insert a batch in one transaction: all or nothing. Rows go [`ROWS_PER_INSERT`] to a
    /// statement (fewer statement steps per row), the rest one by one.
    pub(super) async fn write(&self, chunks: Vec<Chunk>) -> Result<(), AuditError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            {
                let mut many = tx.prepare_cached(&insert_sql(ROWS_PER_INSERT))?;
                let mut one = tx.prepare_cached(&insert_sql(1))?;
                let mut rows = Vec::with_capacity(ROWS_PER_INSERT);
                for chunk in &chunks {
                    let mut tuples = Tuples::new(&chunk.bytes);
                    while let Some(row) = tuples.next_tuple()? {
                        rows.push(row);
                        if rows.len() == ROWS_PER_INSERT {
                            many.execute(params_from_iter(rows.iter().flatten()))?;
                            rows.clear();
                        }
                    }
                }
                for row in &rows {
                    one.execute(params_from_iter(row))?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// Delete records older than `before_ms`; returns how many.
    pub(super) async fn prune(&self, before_ms: i64) -> Result<u64, AuditError> {
        self.with(move |conn| {
            let sql = format!(
                "DELETE FROM audit_records WHERE id IN \
                 (SELECT id FROM audit_records WHERE time_ms < ?1 LIMIT {PRUNE_CHUNK})"
            );
            Ok(crate::db::prune_sqlite(conn, &sql, PRUNE_CHUNK, before_ms)?)
        })
        .await
    }

    /// Records matching `q`, newest first.
    pub(super) async fn query(&self, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
        let (sql, params) = q.sql(|n| format!("?{n}"));
        self.with(move |conn| {
            let values: Vec<Value> = params
                .into_iter()
                .map(|p| match p {
                    Param::Text(s) => Value::Text(s),
                    Param::Int4(n) => Value::Integer(i64::from(n)),
                    Param::Int8(n) => Value::Integer(n),
                })
                .collect();
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(values), |r| {
                Ok(Row {
                    request_id: r.get(0)?,
                    time_ms: r.get(1)?,
                    client_key_id: r.get(2)?,
                    route: r.get(3)?,
                    stream: r.get(4)?,
                    status: r.get(5)?,
                    target: r.get(6)?,
                    latency_ms: r.get(7)?,
                    ttft_ms: r.get(8)?,
                    tokens_in: r.get(9)?,
                    tokens_out: r.get(10)?,
                    turns_dropped: r.get(11)?,
                    hedged: r.get(12)?,
                    error: r.get(13)?,
                    attempts: r.get(14)?,
                    path: r.get(15)?,
                    request_body: r.get(16)?,
                    response_body: r.get(17)?,
                    session: r.get(18)?,
                    trace_id: r.get(19)?,
                    cache_read_tokens: r.get(20)?,
                    cache_write_tokens: r.get(21)?,
                })
            })?;
            let mut out = Vec::new();
            for row in rows {
                out.push(row?.into_record());
            }
            Ok(out)
        })
        .await
    }
}

/// Apply the migrations this database has not seen, in one transaction.
fn migrate(conn: &mut Connection) -> Result<(), AuditError> {
    Ok(crate::db::sqlite(conn, &super::schema::SCHEMA)?)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AuditError> + Send + 'static,
) -> Result<T, AuditError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AuditError::Task(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditAttempt;

    #[tokio::test]
    async fn migrates_once_and_round_trips_a_record() {
        let path = std::env::temp_dir().join(format!(
            "switchyard-sqlite-unit-{}-{}.db",
            std::process::id(),
            fastrand::u64(..)
        ));
        let path_str = path.to_str().unwrap_or_default().to_owned();
        let rec = AuditRecord {
            request_id: "r1".into(),
            time_ms: 42,
            client_key_id: Some("key-1".into()),
            route: "chat".into(),
            stream: true,
            status: 200,
            target: Some("p1/m".into()),
            latency_ms: 12.5,
            ttft_ms: Some(3.0),
            tokens_in: Some(10),
            tokens_out: Some(u64::MAX),
            turns_dropped: 2,
            hedged: true,
            error: Some("nul \0 inside".into()),
            path: vec![AuditAttempt {
                target: "p0/m".into(),
                start_ms: 0.0,
                duration_ms: 1.0,
                outcome: "status".into(),
                status: Some(503),
                carried_chars: None,
                picked: None,
            }],
            request_body: None,
            response_body: Some("{}".into()),
            session: Some("task-1".into()),
            trace_id: None,
            cache_read_tokens: Some(1024),
            cache_write_tokens: Some(0),
        };
        let store = SqliteStore::open_writer(&path_str)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        store
            .write(vec![Chunk::of(std::slice::from_ref(&rec))])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Multi-row statements and the rest one by one (2 x 32 + 6), across chunks.
        let many: Vec<AuditRecord> = (0..70)
            .map(|i| AuditRecord {
                request_id: format!("m{i}"),
                time_ms: 1,
                ..rec.clone()
            })
            .collect();
        store
            .write(vec![Chunk::of(&many[..40]), Chunk::of(&many[40..])])
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        drop(store);
        // Opening again applies nothing twice.
        let store = SqliteStore::open_writer(&path_str)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let got = store
            .query(&AuditQuery {
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // One index besides the key: the route index of version 1 is gone (version 2).
        let indexes = store
            .with(|conn| {
                let mut stmt = conn.prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'index' \
                     AND tbl_name = 'audit_records' ORDER BY name",
                )?;
                let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
                Ok(names.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(indexes, ["audit_records_time"]);
        let want = AuditRecord {
            tokens_out: Some(i64::MAX as u64),
            error: Some("nul \u{FFFD} inside".into()),
            ..rec
        };
        assert_eq!(got.len(), 71);
        assert_eq!(got[0], want);
        assert_eq!(got[1].request_id, "m69", "newest first, ties by insertion");
        assert_eq!(got[70].request_id, "m0");
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path_str}{ext}"));
        }
    }
}

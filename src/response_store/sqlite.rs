//! The SQLite store: one file in WAL mode (the audit log's, by default), one connection for
//! the writer and one for reads, so a read never waits behind a batch being committed.
//! rusqlite is blocking, so every call runs on tokio's blocking pool.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::schema::{insert_sql, COLUMNS};
use super::{ResponseStoreError, StoredResponse};

/// How long a statement waits for another connection's lock (the audit writer's, sharing the
/// file) before failing with "busy"; the batch is then retried.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Rows deleted per statement when pruning, so the write lock is never held for long.
const PRUNE_CHUNK: usize = 1_000;

/// One connection to a SQLite database.
#[derive(Debug, Clone)]
pub(super) struct Sqlite {
    conn: Arc<Mutex<Connection>>,
}

impl Sqlite {
    /// Open (creating the file if needed), in WAL mode; `migrate`: apply the migrations.
    pub(super) async fn open(path: &str, migrate: bool) -> Result<Sqlite, ResponseStoreError> {
        let path = path.to_owned();
        let conn = blocking(move || {
            let mut conn = Connection::open(&path)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            if migrate {
                conn.pragma_update(None, "journal_mode", "WAL")?;
                // As the audit log: durable across a process crash; an OS crash may lose the
                // last transactions, never corrupt the file.
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                self::migrate(&mut conn)?;
            }
            Ok(conn)
        })
        .await?;
        Ok(Sqlite {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, ResponseStoreError> + Send + 'static,
    ) -> Result<T, ResponseStoreError> {
        let conn = self.conn.clone();
        blocking(move || f(&mut conn.lock().unwrap_or_else(PoisonError::into_inner))).await
    }

    /// Write `rows` in one transaction: all or none.
    pub(super) async fn write(
        &self,
        rows: Vec<Arc<StoredResponse>>,
    ) -> Result<(), ResponseStoreError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut insert = tx.prepare_cached(&insert_sql(1, |n| format!("?{n}")))?;
                for r in &rows {
                    insert.execute(params![
                        r.id,
                        r.client_key_id,
                        r.created_ms,
                        r.route,
                        r.provider,
                        r.previous_id,
                        r.input,
                        r.output,
                        r.response,
                    ])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
    }

    /// The response `id` of `client_key_id`, created at or after `since_ms`.
    pub(super) async fn get(
        &self,
        id: &str,
        client_key_id: Option<&str>,
        since_ms: i64,
    ) -> Result<Option<StoredResponse>, ResponseStoreError> {
        let (id, key) = (id.to_owned(), client_key_id.map(str::to_owned));
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM responses \
                 WHERE id = ?1 AND client_key_id IS ?2 AND created_ms >= ?3"
            ))?;
            let row = stmt
                .query_row(params![id, key, since_ms], |r| {
                    Ok(StoredResponse {
                        id: r.get(0)?,
                        client_key_id: r.get(1)?,
                        created_ms: r.get(2)?,
                        route: r.get(3)?,
                        provider: r.get(4)?,
                        previous_id: r.get(5)?,
                        input: r.get(6)?,
                        output: r.get(7)?,
                        response: r.get(8)?,
                    })
                })
                .optional()?;
            Ok(row)
        })
        .await
    }

    /// Delete the response `id` of `client_key_id`; whether there was one.
    pub(super) async fn delete(
        &self,
        id: &str,
        client_key_id: Option<&str>,
    ) -> Result<bool, ResponseStoreError> {
        let (id, key) = (id.to_owned(), client_key_id.map(str::to_owned));
        self.with(move |conn| {
            let n = conn.execute(
                "DELETE FROM responses WHERE id = ?1 AND client_key_id IS ?2",
                params![id, key],
            )?;
            Ok(n > 0)
        })
        .await
    }

    /// Delete responses created before `before_ms`; how many.
    pub(super) async fn prune(&self, before_ms: i64) -> Result<u64, ResponseStoreError> {
        self.with(move |conn| {
            let sql = format!(
                "DELETE FROM responses WHERE rowid IN \
                 (SELECT rowid FROM responses WHERE created_ms < ?1 LIMIT {PRUNE_CHUNK})"
            );
            Ok(crate::db::prune_sqlite(conn, &sql, PRUNE_CHUNK, before_ms)?)
        })
        .await
    }
}

/// Apply the migrations this database has not seen, in one transaction.
fn migrate(conn: &mut Connection) -> Result<(), ResponseStoreError> {
    Ok(crate::db::sqlite(conn, &super::schema::SCHEMA)?)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ResponseStoreError> + Send + 'static,
) -> Result<T, ResponseStoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ResponseStoreError::Task(e.to_string()))?
}

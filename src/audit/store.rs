//! The two stores behind one face, so the writer and the readers do not care which is in use.

use super::postgres::PgStore;
use super::query::AuditQuery;
use super::sqlite::SqliteStore;
use super::writer::Chunk;
use super::{AuditError, AuditRecord};
use crate::config::AuditStore;

/// An open audit store.
pub(crate) enum Store {
    Sqlite(SqliteStore),
    /// Boxed: its config is large, and there is one store per writer.
    Postgres(Box<PgStore>),
}

impl Store {
    /// Open for writing. SQLite is opened and migrated now (a bad path fails the start);
    /// PostgreSQL is connected on first use, so a database that is down when the gateway
    /// starts delays the audit log, not the gateway.
    pub(super) async fn open_writer(store: &AuditStore) -> Result<Store, AuditError> {
        match store {
            AuditStore::Off => Err(AuditError::Invalid("the audit log is off".into())),
            AuditStore::Sqlite(path) => Ok(Store::Sqlite(SqliteStore::open_writer(path).await?)),
            AuditStore::Postgres(url) => Ok(Store::Postgres(Box::new(PgStore::new(url)?))),
        }
    }

    /// Open for reading (connected now).
    pub(super) async fn open_reader(store: &AuditStore) -> Result<Store, AuditError> {
        match store {
            AuditStore::Off => Err(AuditError::Invalid(
                "the audit log is off (audit.store = \"off\")".into(),
            )),
            AuditStore::Sqlite(path) => Ok(Store::Sqlite(SqliteStore::open_reader(path).await?)),
            AuditStore::Postgres(url) => {
                let mut pg = PgStore::new(url)?;
                pg.connect().await?;
                Ok(Store::Postgres(Box::new(pg)))
            }
        }
    }

    /// Write a batch of encoded records atomically (a failed write is retried with the same
    /// chunks).
    pub(super) async fn write(&mut self, chunks: &[Chunk]) -> Result<(), AuditError> {
        match self {
            Store::Sqlite(s) => s.write(chunks.to_vec()).await,
            Store::Postgres(p) => p.write(chunks).await,
        }
    }

    /// Delete records older than `before_ms`.
    pub(super) async fn prune(&mut self, before_ms: i64) -> Result<u64, AuditError> {
        match self {
            Store::Sqlite(s) => s.prune(before_ms).await,
            Store::Postgres(p) => p.prune(before_ms).await,
        }
    }

    /// Records matching `q`, in its order (newest first; a session's oldest first).
    pub(super) async fn query(&mut self, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
        let newest_first = match self {
            Store::Sqlite(s) => s.query(q).await?,
            Store::Postgres(p) => p.query(q).await?,
        };
        Ok(super::query::in_order(q, newest_first))
    }
}

/// The store's kind, for `/admin/status` and logs (never its URL: it may hold a password).
pub(crate) fn kind(store: &AuditStore) -> &'static str {
    match store {
        AuditStore::Off => "off",
        AuditStore::Sqlite(_) => "sqlite",
        AuditStore::Postgres(_) => "postgres",
    }
}

//! The two databases behind one face, for the writer and for reads.

use std::sync::Arc;

use super::postgres::{self, Target};
use super::sqlite::Sqlite;
use super::{ResponseStoreError, StoredResponse};
use crate::config::AuditStore;

/// The writer's side of the database.
#[derive(Debug)]
pub(super) enum Db {
    Sqlite(Sqlite),
    /// Boxed: its config is large, and there is one per store.
    Postgres(Box<postgres::Writer>),
}

/// The side every read goes through.
#[derive(Debug)]
pub(super) enum Reader {
    Sqlite(Sqlite),
    Postgres(Box<postgres::Reader>),
}

/// Open `store` for the writer and for reads. SQLite is opened and migrated now (a bad path
/// fails the start); PostgreSQL is connected on first use, so a database that is down when the
/// gateway starts delays the store, not the gateway.
pub(super) async fn open(store: &AuditStore) -> Result<(Db, Reader), ResponseStoreError> {
    match store {
        AuditStore::Off => Err(ResponseStoreError::Invalid(
            "the responses store is off".into(),
        )),
        AuditStore::Sqlite(path) => {
            let writer = Sqlite::open(path, true).await?;
            let reader = Sqlite::open(path, false).await?;
            Ok((Db::Sqlite(writer), Reader::Sqlite(reader)))
        }
        AuditStore::Postgres(url) => {
            let target = Target::new(url)?;
            Ok((
                Db::Postgres(Box::new(postgres::Writer::new(target.clone()))),
                Reader::Postgres(Box::new(postgres::Reader::new(target))),
            ))
        }
    }
}

impl Db {
    /// Write `rows` atomically (a failed write is retried with the same rows).
    pub(super) async fn write(
        &mut self,
        rows: &[Arc<StoredResponse>],
    ) -> Result<(), ResponseStoreError> {
        match self {
            Db::Sqlite(s) => s.write(rows.to_vec()).await,
            Db::Postgres(p) => p.write(rows).await,
        }
    }

    /// Delete the response `id` of `client_key_id`; whether there was one.
    pub(super) async fn delete(
        &mut self,
        id: &str,
        client_key_id: Option<&str>,
    ) -> Result<bool, ResponseStoreError> {
        match self {
            Db::Sqlite(s) => s.delete(id, client_key_id).await,
            Db::Postgres(p) => p.delete(id, client_key_id).await,
        }
    }

    /// Delete responses created before `before_ms`; how many.
    pub(super) async fn prune(&mut self, before_ms: i64) -> Result<u64, ResponseStoreError> {
        match self {
            Db::Sqlite(s) => s.prune(before_ms).await,
            Db::Postgres(p) => p.prune(before_ms).await,
        }
    }
}

impl Reader {
    /// The response `id` of `client_key_id`, created at or after `since_ms`.
    pub(super) async fn get(
        &self,
        id: &str,
        client_key_id: Option<&str>,
        since_ms: i64,
    ) -> Result<Option<StoredResponse>, ResponseStoreError> {
        match self {
            Reader::Sqlite(s) => s.get(id, client_key_id, since_ms).await,
            Reader::Postgres(p) => p.get(id, client_key_id, since_ms).await,
        }
    }
}

/// The store's kind, for logs and status (never its URL: it may hold a password).
pub(super) fn kind(store: &AuditStore) -> &'static str {
    match store {
        AuditStore::Off => "off",
        AuditStore::Sqlite(_) => "sqlite",
        AuditStore::Postgres(_) => "postgres",
    }
}

//! The PostgreSQL store, for a fleet of gateways sharing one database (the audit log's, by
//! default): every replica finds the responses any of them served. Connections are made
//! lazily and remade after any failure, so a database that comes back is used again without a
//! restart; every call has a deadline, so a hung server cannot hang the writer or a request.
//! The writer has a connection of its own; reads share another (queries on one connection
//! are pipelined), so a read never waits behind a batch being committed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

use super::schema::{insert_sql, COLUMNS, WIDTH};
use super::{ResponseStoreError, StoredResponse};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(120);
const PRUNE_CHUNK: u64 = 1_000;
/// Rows per `INSERT` (9 parameters each; PostgreSQL takes at most 65,535).
const ROWS_PER_INSERT: usize = 100;

impl From<tokio_postgres::Error> for ResponseStoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        match crate::db::postgres_error(&e) {
            (text, true) => ResponseStoreError::Invalid(text),
            (text, false) => ResponseStoreError::Postgres(text),
        }
    }
}

/// How to reach the database, and whether its schema was seen up to date.
#[derive(Debug, Clone)]
pub(super) struct Target {
    config: tokio_postgres::Config,
    /// Later connections check the schema within the usual deadline, not the first one's.
    migrated: bool,
}

impl Target {
    /// For `url` (checked now, connected on first use).
    pub(super) fn new(url: &str) -> Result<Target, ResponseStoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|_| {
            ResponseStoreError::Invalid("the responses store's postgres URL is invalid".into())
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("switchyard-responses");
        }
        Ok(Target {
            config,
            migrated: false,
        })
    }

    /// A new connection, the schema migrated.
    async fn connect(&mut self) -> Result<Client, ResponseStoreError> {
        let (mut client, connection) = deadline(CONNECT_TIMEOUT, async {
            Ok(self.config.connect(NoTls).await?)
        })
        .await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                let e = ResponseStoreError::from(e);
                tracing::debug!(error = %e, "responses store: postgres connection ended");
            }
        });
        let limit = if self.migrated {
            CALL_TIMEOUT
        } else {
            MIGRATE_TIMEOUT
        };
        deadline(limit, migrate(&mut client)).await?;
        self.migrated = true;
        Ok(client)
    }
}

/// The writer's connection.
#[derive(Debug)]
pub(super) struct Writer {
    target: Target,
    client: Option<Client>,
}

impl Writer {
    pub(super) fn new(target: Target) -> Writer {
        Writer {
            target,
            client: None,
        }
    }

    /// Run `op` on the connection (made now unless open); any failure drops the connection,
    /// to be remade next time.
    async fn call<T>(
        &mut self,
        op: impl AsyncFnOnce(&mut Client) -> Result<T, ResponseStoreError>,
    ) -> Result<T, ResponseStoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            self.client = Some(self.target.connect().await?);
        }
        let Some(client) = self.client.as_mut() else {
            return Err(ResponseStoreError::Postgres("not connected".into()));
        };
        let result = deadline(CALL_TIMEOUT, op(client)).await;
        if result.is_err() {
            self.client = None;
        }
        result
    }

    /// Write `rows` in one transaction.
    pub(super) async fn write(
        &mut self,
        rows: &[Arc<StoredResponse>],
    ) -> Result<(), ResponseStoreError> {
        let rows = without_nul(rows);
        self.call(async |client| {
            let tx = client.transaction().await?;
            for chunk in rows.chunks(ROWS_PER_INSERT) {
                let sql = insert_sql(chunk.len(), |n| format!("${n}"));
                let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(chunk.len() * WIDTH);
                for r in chunk {
                    params.extend_from_slice(&[
                        &r.id,
                        &r.client_key_id,
                        &r.created_ms,
                        &r.route,
                        &r.provider,
                        &r.previous_id,
                        &r.input,
                        &r.output,
                        &r.response,
                    ]);
                }
                tx.execute(&sql, &params).await?;
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Delete the response `id` of `client_key_id`; whether there was one.
    pub(super) async fn delete(
        &mut self,
        id: &str,
        client_key_id: Option<&str>,
    ) -> Result<bool, ResponseStoreError> {
        self.call(async |client| {
            let n = client
                .execute(
                    "DELETE FROM responses WHERE id = $1 AND client_key_id IS NOT DISTINCT FROM $2",
                    &[&id, &client_key_id],
                )
                .await?;
            Ok(n > 0)
        })
        .await
    }

    /// Delete responses created before `before_ms`; how many.
    pub(super) async fn prune(&mut self, before_ms: i64) -> Result<u64, ResponseStoreError> {
        self.call(async |client| {
            let sql = format!(
                "DELETE FROM responses WHERE id IN \
                 (SELECT id FROM responses WHERE created_ms < $1 LIMIT {PRUNE_CHUNK})"
            );
            let mut total = 0;
            loop {
                let n = client.execute(&sql, &[&before_ms]).await?;
                total += n;
                if n < PRUNE_CHUNK {
                    return Ok(total);
                }
            }
        })
        .await
    }
}

/// `rows` as PostgreSQL can hold them: its text cannot hold NUL (SQLite's can, and JSON
/// escapes it, but a client's model name may carry one), which becomes U+FFFD, as in the audit
/// log. Checked here, off the request path.
fn without_nul(rows: &[Arc<StoredResponse>]) -> Vec<Arc<StoredResponse>> {
    let fix = |s: &str| s.contains('\0').then(|| s.replace('\0', "\u{FFFD}"));
    rows.iter()
        .map(|r| {
            let texts = [
                &r.id,
                &r.route,
                &r.provider,
                &r.input,
                &r.output,
                &r.response,
            ];
            let options = [&r.client_key_id, &r.previous_id];
            let clean = texts.iter().all(|s| !s.contains('\0'))
                && options
                    .iter()
                    .all(|s| s.as_deref().is_none_or(|s| !s.contains('\0')));
            if clean {
                return r.clone();
            }
            let mut r = StoredResponse::clone(r);
            for s in [
                &mut r.id,
                &mut r.route,
                &mut r.provider,
                &mut r.input,
                &mut r.output,
                &mut r.response,
            ]
            .into_iter()
            .chain(r.client_key_id.as_mut())
            .chain(r.previous_id.as_mut())
            {
                if let Some(fixed) = fix(s) {
                    *s = fixed;
                }
            }
            Arc::new(r)
        })
        .collect()
}

/// The readers' shared connection.
#[derive(Debug)]
pub(super) struct Reader {
    target: tokio::sync::Mutex<(Target, Option<Arc<Client>>)>,
}

impl Reader {
    pub(super) fn new(target: Target) -> Reader {
        Reader {
            target: tokio::sync::Mutex::new((target, None)),
        }
    }

    /// The open connection, or a new one.
    async fn client(&self) -> Result<Arc<Client>, ResponseStoreError> {
        let mut held = self.target.lock().await;
        let (target, client) = &mut *held;
        match client {
            Some(c) if !c.is_closed() => Ok(c.clone()),
            _ => {
                let c = Arc::new(target.connect().await?);
                *client = Some(c.clone());
                Ok(c)
            }
        }
    }

    /// The response `id` of `client_key_id`, created at or after `since_ms`.
    pub(super) async fn get(
        &self,
        id: &str,
        client_key_id: Option<&str>,
        since_ms: i64,
    ) -> Result<Option<StoredResponse>, ResponseStoreError> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM responses WHERE id = $1 \
             AND client_key_id IS NOT DISTINCT FROM $2 AND created_ms >= $3"
        );
        let result = deadline(CALL_TIMEOUT, async {
            let row = client
                .query_opt(&sql, &[&id, &client_key_id, &since_ms])
                .await?;
            let Some(r) = row else {
                return Ok(None);
            };
            Ok(Some(StoredResponse {
                id: r.try_get(0)?,
                client_key_id: r.try_get(1)?,
                created_ms: r.try_get(2)?,
                route: r.try_get(3)?,
                provider: r.try_get(4)?,
                previous_id: r.try_get(5)?,
                input: r.try_get(6)?,
                output: r.try_get(7)?,
                response: r.try_get(8)?,
            }))
        })
        .await;
        if matches!(result, Err(ResponseStoreError::Timeout(_))) {
            // A server that hangs: the next read connects again.
            let mut held = self.target.lock().await;
            if held.1.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                held.1 = None;
            }
        }
        result
    }
}

/// Apply the migrations this database has not seen, in one transaction, under an advisory lock
/// so replicas starting together do not race.
async fn migrate(client: &mut Client) -> Result<(), ResponseStoreError> {
    Ok(crate::db::postgres(client, &super::schema::SCHEMA).await?)
}

async fn deadline<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, ResponseStoreError>>,
) -> Result<T, ResponseStoreError> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(ResponseStoreError::Timeout(limit)))
}

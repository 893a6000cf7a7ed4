//! The PostgreSQL store, for a fleet of gateways writing to one database. A batch is one binary
//! `COPY`: one statement, atomic. The connection
//! is made lazily and remade after any failure, so a database that comes back is used again
//! without a restart; every call has a deadline, so a hung server cannot hang the writer.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::SinkExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

use super::query::{AuditQuery, Param};
use super::schema::{Row, COLUMNS};
use super::tuple::{COPY_HEADER, COPY_TRAILER};
use super::writer::Chunk;
use super::{AuditError, AuditRecord};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The first connection's migrations may rebuild an index of a large table.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(600);
const PRUNE_CHUNK: u64 = 10_000;

impl From<tokio_postgres::Error> for AuditError {
    fn from(e: tokio_postgres::Error) -> Self {
        match crate::db::postgres_error(&e) {
            (text, true) => AuditError::Invalid(text),
            (text, false) => AuditError::Postgres(text),
        }
    }
}

struct Conn {
    client: Client,
}

/// A PostgreSQL database, connected on demand.
pub(crate) struct PgStore {
    config: tokio_postgres::Config,
    conn: Option<Conn>,
    /// Whether a connection has seen the schema up to date: later connections check it
    /// within the usual deadline, not the first one's (which may rebuild an index).
    migrated: bool,
}

impl PgStore {
    /// A store for `url` (checked now, connected on first use).
    pub(super) fn new(url: &str) -> Result<PgStore, AuditError> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|_| AuditError::Invalid("the audit store's postgres URL is invalid".into()))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("switchyard-audit");
        }
        Ok(PgStore {
            config,
            conn: None,
            migrated: false,
        })
    }

    /// Connect (and migrate) unless connected.
    pub(super) async fn connect(&mut self) -> Result<(), AuditError> {
        if self.conn.as_ref().is_some_and(|c| !c.client.is_closed()) {
            return Ok(());
        }
        self.conn = None;
        let (mut client, connection) = deadline(CONNECT_TIMEOUT, async {
            Ok(self.config.connect(NoTls).await?)
        })
        .await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %AuditError::from(e), "audit log: postgres connection ended");
            }
        });
        let limit = if self.migrated {
            CALL_TIMEOUT
        } else {
            MIGRATE_TIMEOUT
        };
        deadline(limit, migrate(&mut client)).await?;
        self.migrated = true;
        self.conn = Some(Conn { client });
        Ok(())
    }

    /// Run `op` on the connection; any failure drops the connection, to be remade next time.
    async fn call<T, F>(&mut self, op: impl FnOnce(Conn) -> F) -> Result<T, AuditError>
    where
        F: Future<Output = (Conn, Result<T, AuditError>)>,
    {
        self.connect().await?;
        let Some(conn) = self.conn.take() else {
            return Err(AuditError::Postgres("not connected".into()));
        };
        match tokio::time::timeout(CALL_TIMEOUT, op(conn)).await {
            Ok((conn, Ok(v))) => {
                self.conn = Some(conn);
                Ok(v)
            }
            Ok((_, Err(e))) => Err(e),
            Err(_) => Err(AuditError::Timeout(CALL_TIMEOUT)),
        }
    }

    /// Insert a batch with one statement.
    pub(super) async fn write(&mut self, chunks: &[Chunk]) -> Result<(), AuditError> {
        self.call(|mut conn| async move {
            let r = insert(&mut conn, chunks).await;
            (conn, r)
        })
        .await
    }

    /// Delete records older than `before_ms`; returns how many.
    pub(super) async fn prune(&mut self, before_ms: i64) -> Result<u64, AuditError> {
        self.call(|conn| async move {
            let r = prune(&conn.client, before_ms).await;
            (conn, r)
        })
        .await
    }

    /// Records matching `q`, newest first.
    pub(super) async fn query(&mut self, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
        let (sql, params) = q.sql(|n| format!("${n}"));
        self.call(|conn| async move {
            let r = select(&conn.client, &sql, params).await;
            (conn, r)
        })
        .await
    }
}

async fn prune(client: &Client, before_ms: i64) -> Result<u64, AuditError> {
    let sql = format!(
        "DELETE FROM audit_records WHERE (time_ms, id) IN \
         (SELECT time_ms, id FROM audit_records WHERE time_ms < $1 LIMIT {PRUNE_CHUNK})"
    );
    let mut total = 0;
    loop {
        let n = client.execute(&sql, &[&before_ms]).await?;
        total += n;
        if n < PRUNE_CHUNK {
            return Ok(total);
        }
    }
}

async fn select(
    client: &Client,
    sql: &str,
    params: Vec<Param>,
) -> Result<Vec<AuditRecord>, AuditError> {
    let values: Vec<Box<dyn ToSql + Sync + Send>> = params
        .into_iter()
        .map(|p| -> Box<dyn ToSql + Sync + Send> {
            match p {
                Param::Text(s) => Box::new(s),
                Param::Int4(n) => Box::new(n),
                Param::Int8(n) => Box::new(n),
            }
        })
        .collect();
    let refs: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = client.query(sql, &refs).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(
            Row {
                request_id: r.try_get(0)?,
                time_ms: r.try_get(1)?,
                client_key_id: r.try_get(2)?,
                route: r.try_get(3)?,
                stream: r.try_get(4)?,
                status: r.try_get(5)?,
                target: r.try_get(6)?,
                latency_ms: r.try_get(7)?,
                ttft_ms: r.try_get(8)?,
                tokens_in: r.try_get(9)?,
                tokens_out: r.try_get(10)?,
                turns_dropped: r.try_get(11)?,
                hedged: r.try_get(12)?,
                error: r.try_get(13)?,
                attempts: r.try_get(14)?,
                path: r.try_get(15)?,
                request_body: r.try_get(16)?,
                response_body: r.try_get(17)?,
                session: r.try_get(18)?,
                trace_id: r.try_get(19)?,
                cache_read_tokens: r.try_get(20)?,
                cache_write_tokens: r.try_get(21)?,
            }
            .into_record(),
        );
    }
    Ok(out)
}

/// Write the encoded records with one binary `COPY`: a single statement (atomic), its body
/// the tuples as the request threads encoded them, sent whole. (Encoding them here, row by row
/// through `BinaryCopyInWriter`, cost the gateway more, and sent them in 4 KiB messages that
/// woke the server's backend ~250 times per thousand records.)
async fn insert(conn: &mut Conn, chunks: &[Chunk]) -> Result<(), AuditError> {
    let sink = conn
        .client
        .copy_in::<_, Bytes>(&format!(
            "COPY audit_records ({COLUMNS}) FROM STDIN (FORMAT binary)"
        ))
        .await?;
    let mut sink = std::pin::pin!(sink);
    sink.feed(Bytes::from_static(COPY_HEADER)).await?;
    for c in chunks {
        sink.feed(c.bytes.clone()).await?;
    }
    sink.feed(Bytes::from_static(COPY_TRAILER)).await?;
    sink.as_mut().finish().await?;
    Ok(())
}

/// Apply the migrations this database has not seen, in one transaction, under an advisory lock
/// so replicas starting together do not race.
async fn migrate(client: &mut Client) -> Result<(), AuditError> {
    Ok(crate::db::postgres(client, &super::schema::SCHEMA).await?)
}

async fn deadline<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, AuditError>>,
) -> Result<T, AuditError> {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| Err(AuditError::Timeout(limit)))
}

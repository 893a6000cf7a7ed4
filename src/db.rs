//! What the gateway's two databases (the audit log, the response store) share: schema
//! migrations (each schema keeps a version table and numbered migrations per database kind,
//! applied in one transaction; PostgreSQL's under an advisory lock, so replicas starting
//! together do not race), deletes in chunks, and PostgreSQL's error text.

/// One schema: its version table and migrations.
pub(crate) struct Schema {
    /// Its name in the log (`audit log`, `responses store`).
    pub label: &'static str,
    /// The version table's name.
    pub version_table: &'static str,
    /// `CREATE TABLE IF NOT EXISTS` of the version table.
    pub create_version_table: &'static str,
    /// SQLite's migrations, by version.
    pub sqlite: &'static [(i64, &'static str)],
    /// PostgreSQL's migrations, by version.
    pub postgres: &'static [(i64, &'static str)],
    /// The advisory lock PostgreSQL's migrations take.
    pub lock: i64,
}

/// Apply the migrations this SQLite database has not seen, in one transaction.
pub(crate) fn sqlite(conn: &mut rusqlite::Connection, schema: &Schema) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(schema.create_version_table)?;
    let current: i64 = tx.query_row(
        &format!(
            "SELECT COALESCE(MAX(version), 0) FROM {}",
            schema.version_table
        ),
        [],
        |r| r.get(0),
    )?;
    let insert = format!("INSERT INTO {} (version) VALUES (?1)", schema.version_table);
    for (version, sql) in schema.sqlite.iter().filter(|(v, _)| *v > current) {
        tx.execute_batch(sql)?;
        tx.execute(&insert, [version])?;
        tracing::info!(version, "{}: sqlite schema migrated", schema.label);
    }
    tx.commit()
}

/// Apply the migrations this PostgreSQL database has not seen, in one transaction, under the
/// schema's advisory lock.
pub(crate) async fn postgres(
    client: &mut tokio_postgres::Client,
    schema: &Schema,
) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema.lock])
        .await?;
    tx.batch_execute(schema.create_version_table).await?;
    let current: i64 = tx
        .query_one(
            &format!(
                "SELECT COALESCE(MAX(version), 0)::int8 FROM {}",
                schema.version_table
            ),
            &[],
        )
        .await?
        .try_get(0)?;
    let insert = format!(
        "INSERT INTO {} (version) VALUES ($1::int8::int4)",
        schema.version_table
    );
    for (version, sql) in schema.postgres.iter().filter(|(v, _)| *v > current) {
        tx.batch_execute(sql).await?;
        tx.execute(&insert, &[version]).await?;
        tracing::info!(version, "{}: postgres schema migrated", schema.label);
    }
    tx.commit().await
}

/// Runs `sql`, a `DELETE` of at most `chunk` rows taking `before_ms` as its one parameter,
/// until a run deletes fewer: a prune never holds SQLite's write lock for long. How many went.
pub(crate) fn prune_sqlite(
    conn: &rusqlite::Connection,
    sql: &str,
    chunk: usize,
    before_ms: i64,
) -> rusqlite::Result<u64> {
    let mut total = 0u64;
    loop {
        let n = conn.execute(sql, [before_ms])?;
        total += n as u64;
        if n < chunk {
            return Ok(total);
        }
    }
}

/// A tokio-postgres error's whole text (its `Display` is terse, "db error": the server's
/// message is in its sources), and whether it is a data exception (class 22: a value the
/// server cannot take, which fails every retry alike).
pub(crate) fn postgres_error(e: &tokio_postgres::Error) -> (String, bool) {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    let data = e.code().is_some_and(|c| c.code().starts_with("22"));
    (text, data)
}

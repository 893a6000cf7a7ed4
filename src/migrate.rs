//! Schema migrations for the databases the gateway writes (the audit log, the response store):
//! each keeps a version table and a list of numbered migrations per database kind, applied in
//! one transaction (PostgreSQL: under an advisory lock, so replicas starting together do not
//! race).

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

//! The stored shape of a response, and the migrations that create it in SQLite and PostgreSQL.
//!
//! One table, `responses`, beside the audit log's when they share a database: a row per
//! response, its items as JSON text (always read whole). The key is the id (every read and
//! delete is by id); one index, on `created_ms`, for pruning. `responses_schema_version` holds
//! the versions applied; a migration is applied once, in a transaction, in order.

/// Stored columns, in the order of [`super::StoredResponse`]'s fields (every insert and
/// select uses this order).
pub(super) const COLUMNS: &str =
    "id, client_key_id, created_ms, route, provider, previous_id, input, output, response";

/// Columns per row.
pub(super) const WIDTH: usize = 9;

/// An insert that replaces a row of the same id (a response put again; a batch retried after
/// a commit whose answer was lost).
pub(super) const UPSERT: &str = "ON CONFLICT (id) DO UPDATE SET \
     client_key_id = excluded.client_key_id, created_ms = excluded.created_ms, \
     route = excluded.route, provider = excluded.provider, previous_id = excluded.previous_id, \
     input = excluded.input, output = excluded.output, response = excluded.response";

/// The version table, created before any migration runs.
pub(super) const VERSION_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS responses_schema_version (version INTEGER NOT NULL)";

/// SQLite migrations: (version, SQL). A rowid table: rows are up to megabytes, which a table
/// clustered on its text key would hold in its b-tree pages.
pub(super) const SQLITE_MIGRATIONS: &[(i64, &str)] = &[(
    1,
    "CREATE TABLE responses (
        id TEXT NOT NULL UNIQUE,
        client_key_id TEXT,
        created_ms INTEGER NOT NULL,
        route TEXT NOT NULL,
        provider TEXT NOT NULL,
        previous_id TEXT,
        input TEXT NOT NULL,
        output TEXT NOT NULL,
        response TEXT NOT NULL
    );
    CREATE INDEX responses_created ON responses (created_ms);",
)];

/// PostgreSQL migrations: (version, SQL). Large values go to TOAST on their own.
pub(super) const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[(
    1,
    "CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        client_key_id TEXT,
        created_ms BIGINT NOT NULL,
        route TEXT NOT NULL,
        provider TEXT NOT NULL,
        previous_id TEXT,
        input TEXT NOT NULL,
        output TEXT NOT NULL,
        response TEXT NOT NULL
    );
    CREATE INDEX responses_created ON responses (created_ms);",
)];

/// `INSERT` of `rows` rows, each written by `placeholder(n)` for its n-th (1-based)
/// parameter.
pub(super) fn insert_sql(rows: usize, placeholder: fn(usize) -> String) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let row: Vec<String> = (1..=WIDTH).map(|c| placeholder(r * WIDTH + c)).collect();
            format!("({})", row.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO responses ({COLUMNS}) VALUES {} {UPSERT}",
        values.join(", ")
    )
}

/// This schema, for [`crate::db`].
pub(super) const SCHEMA: crate::db::Schema = crate::db::Schema {
    label: "responses store",
    version_table: "responses_schema_version",
    create_version_table: VERSION_TABLE,
    sqlite: SQLITE_MIGRATIONS,
    postgres: POSTGRES_MIGRATIONS,
    // The advisory lock its PostgreSQL migrations take.
    lock: 0x5357_5245_5350,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_number_their_parameters_row_by_row() {
        let sql = insert_sql(2, |n| format!("${n}"));
        assert!(sql.contains("VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9), ($10,"));
        assert!(sql.ends_with("response = excluded.response"));
    }
}

//! The stored shape of an audit record, and the migrations that create it in SQLite and
//! PostgreSQL.
//!
//! One table, `audit_records`: a column for every field a reader filters or sorts on, and the
//! path as JSON text (it is always read whole). `audit_schema_version` holds the versions
//! applied; a migration is applied once, in a transaction, in order.

use super::{AuditAttempt, AuditRecord};

/// Stored columns, in the order of [`Row`]'s fields (every insert and select uses this order).
pub(crate) const COLUMNS: &str = "request_id, time_ms, client_key_id, route, stream, status, \
     target, latency_ms, ttft_ms, tokens_in, tokens_out, turns_dropped, hedged, error, attempts, \
     path, request_body, response_body, session, trace_id, cache_read_tokens, cache_write_tokens";

/// The version table, created before any migration runs.
pub(crate) const VERSION_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS audit_schema_version (version INTEGER NOT NULL)";

/// SQLite migrations: (version, SQL).
///
/// One index on `time_ms` in either store (SQLite's besides the table's own rowid key;
/// PostgreSQL's is the key, `(time_ms, id)`, since version 5): every index costs each insert
/// (in PostgreSQL ~1.4 to 1.7 µs of server CPU per record, a fifth of the whole). Every query
/// reads newest first, so it walks the time index back from the newest and filters (by route,
/// target, status) as it goes; a record's `time_ms` is the time inside its id
/// (`api::request_id`), so a lookup by id goes through the time index too. (Ids made before they
/// were UUIDv7 have no time in them: looking one up walks back from the newest.)
pub(crate) const SQLITE_MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE audit_records (
        id INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL,
        time_ms INTEGER NOT NULL,
        client_key_id TEXT,
        route TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        target TEXT,
        latency_ms REAL NOT NULL,
        ttft_ms REAL,
        tokens_in INTEGER,
        tokens_out INTEGER,
        turns_dropped INTEGER NOT NULL,
        hedged INTEGER NOT NULL,
        error TEXT,
        attempts INTEGER NOT NULL,
        path TEXT NOT NULL,
        request_body TEXT,
        response_body TEXT
    );
    CREATE INDEX audit_records_time ON audit_records (time_ms);
    CREATE INDEX audit_records_route_time ON audit_records (route, time_ms);",
    ),
    // Every index costs each insert; a query by route walks the time index newest first and
    // filters, as queries by target or status always have.
    (2, "DROP INDEX IF EXISTS audit_records_route_time;"),
    // A request's session and its client's trace id. No index (each costs every insert): a
    // session's turns are read newest first through the time index, like every query.
    (
        3,
        "ALTER TABLE audit_records ADD COLUMN session TEXT;
        ALTER TABLE audit_records ADD COLUMN trace_id TEXT;",
    ),
    // How many of `tokens_in` the provider's prompt cache read and wrote. Records written
    // before have NULL (not known).
    (
        4,
        "ALTER TABLE audit_records ADD COLUMN cache_read_tokens INTEGER;
        ALTER TABLE audit_records ADD COLUMN cache_write_tokens INTEGER;",
    ),
];

/// PostgreSQL migrations: (version, SQL).
pub(crate) const POSTGRES_MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        "CREATE TABLE audit_records (
        id BIGSERIAL PRIMARY KEY,
        request_id TEXT NOT NULL,
        time_ms BIGINT NOT NULL,
        client_key_id TEXT,
        route TEXT NOT NULL,
        stream BOOLEAN NOT NULL,
        status INTEGER NOT NULL,
        target TEXT,
        latency_ms DOUBLE PRECISION NOT NULL,
        ttft_ms DOUBLE PRECISION,
        tokens_in BIGINT,
        tokens_out BIGINT,
        turns_dropped INTEGER NOT NULL,
        hedged BOOLEAN NOT NULL,
        error TEXT,
        attempts INTEGER NOT NULL,
        path TEXT NOT NULL,
        request_body TEXT,
        response_body TEXT
    );
    CREATE INDEX audit_records_time ON audit_records (time_ms);
    CREATE INDEX audit_records_request_id ON audit_records (request_id);
    CREATE INDEX audit_records_route_time ON audit_records (route, time_ms);",
    ),
    (2, "DROP INDEX IF EXISTS audit_records_request_id;"),
    // As SQLite's version 2: the route index cost each insert ~1.4 µs of the server's CPU
    // (psql, 600,000 rows) for queries by route only.
    (3, "DROP INDEX IF EXISTS audit_records_route_time;"),
    // Ids from a cache of 1,000 per connection instead of one sequence access per row (~0.4 µs
    // of the server's ~3 per row in psql). Ids stay unique; across gateways writing at once they
    // interleave by blocks, which only orders records of the same millisecond.
    (4, "ALTER SEQUENCE audit_records_id_seq CACHE 1000;"),
    // One btree instead of two: the key is (time_ms, id), which every query's order (time,
    // then id) and pruning (by time) walk, so the index on time alone goes. In psql, 300,000
    // rows by `COPY`: 2.8 µs of the server's CPU per row with the key on id and the time
    // index, 2.45 with this key (2.25 with no key at all, not worth losing it).
    (
        5,
        "ALTER TABLE audit_records DROP CONSTRAINT audit_records_pkey, \
            ADD PRIMARY KEY (time_ms, id);
        DROP INDEX IF EXISTS audit_records_time;",
    ),
    // As SQLite's version 3.
    (
        6,
        "ALTER TABLE audit_records ADD COLUMN IF NOT EXISTS session TEXT, \
            ADD COLUMN IF NOT EXISTS trace_id TEXT;",
    ),
    // As SQLite's version 4.
    (
        7,
        "ALTER TABLE audit_records ADD COLUMN IF NOT EXISTS cache_read_tokens BIGINT, \
            ADD COLUMN IF NOT EXISTS cache_write_tokens BIGINT;",
    ),
];

/// One record as stored: plain column values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub request_id: String,
    pub time_ms: i64,
    pub client_key_id: Option<String>,
    pub route: String,
    pub stream: bool,
    pub status: i32,
    pub target: Option<String>,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    pub tokens_in: Option<i64>,
    pub tokens_out: Option<i64>,
    pub turns_dropped: i32,
    pub hedged: bool,
    pub error: Option<String>,
    pub attempts: i32,
    /// The path as a JSON array of [`AuditAttempt`].
    pub path: String,
    pub request_body: Option<String>,
    pub response_body: Option<String>,
    pub session: Option<String>,
    pub trace_id: Option<String>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
}

impl Row {
    /// The record back; a path that does not parse reads as empty.
    pub(super) fn into_record(self) -> AuditRecord {
        let path: Vec<AuditAttempt> = serde_json::from_str(&self.path).unwrap_or_default();
        AuditRecord {
            request_id: self.request_id,
            time_ms: self.time_ms,
            client_key_id: self.client_key_id,
            route: self.route,
            stream: self.stream,
            status: u16::try_from(self.status).unwrap_or(0),
            target: self.target,
            latency_ms: self.latency_ms,
            ttft_ms: self.ttft_ms,
            tokens_in: self.tokens_in.map(count),
            tokens_out: self.tokens_out.map(count),
            turns_dropped: u32::try_from(self.turns_dropped).unwrap_or(0),
            hedged: self.hedged,
            error: self.error,
            path,
            request_body: self.request_body,
            response_body: self.response_body,
            session: self.session,
            trace_id: self.trace_id,
            cache_read_tokens: self.cache_read_tokens.map(count),
            cache_write_tokens: self.cache_write_tokens.map(count),
        }
    }
}

/// A stored token count (a negative one, which the gateway never writes, reads as 0).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// This schema, for [`crate::db`].
pub(crate) const SCHEMA: crate::db::Schema = crate::db::Schema {
    label: "audit log",
    version_table: "audit_schema_version",
    create_version_table: VERSION_TABLE,
    sqlite: SQLITE_MIGRATIONS,
    postgres: POSTGRES_MIGRATIONS,
    // The advisory lock its PostgreSQL migrations take.
    lock: 0x5357_4954_4348,
};

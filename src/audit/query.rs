//! Reading the audit log: the filters `/admin/audit` and `switchyard audit` share, turned into
//! one SQL query for either store, and [`query`], which opens the store, reads and closes it.

use super::store::Store;
use super::{AuditError, AuditRecord};
use crate::config::AuditStore;

/// Most records one query returns.
pub const MAX_LIMIT: usize = 10_000;
/// Most records a report (`switchyard audit --report`) reads.
pub const MAX_REPORT: usize = 200_000;

/// Which records to read; every filter is optional. Results are newest first, except a
/// session's (`session`): its turns in order, oldest first (the newest `limit` of them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    /// The public model name clients sent.
    pub route: Option<String>,
    /// The target that answered (`provider/model`).
    pub target: Option<String>,
    /// The HTTP status the client got.
    pub status: Option<u16>,
    /// Only records at or after this time, Unix milliseconds.
    pub since: Option<i64>,
    /// One request's record.
    pub request_id: Option<String>,
    /// One session's records.
    pub session: Option<String>,
    /// At most this many records (capped at [`MAX_LIMIT`], or [`MAX_REPORT`] for a report).
    pub limit: usize,
    /// For a report: the cap is [`MAX_REPORT`].
    pub report: bool,
}

/// A bound value of a query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Text(String),
    /// An `INTEGER` column (PostgreSQL types parameters strictly).
    Int4(i32),
    /// A `BIGINT` column.
    Int8(i64),
}

impl AuditQuery {
    /// The `SELECT` for this query and its parameters; `placeholder(n)` writes the n-th
    /// (1-based) parameter in the store's syntax (`?1` or `$1`).
    pub(crate) fn sql(&self, placeholder: fn(usize) -> String) -> (String, Vec<Param>) {
        let mut clauses = Vec::new();
        let mut params = Vec::new();
        let mut add = |column: &str, op: &str, p: Param| {
            params.push(p);
            clauses.push(format!("{column} {op} {}", placeholder(params.len())));
        };
        if let Some(v) = &self.route {
            add("route", "=", Param::Text(v.clone()));
        }
        if let Some(v) = &self.target {
            add("target", "=", Param::Text(v.clone()));
        }
        if let Some(v) = self.status {
            add("status", "=", Param::Int4(i32::from(v)));
        }
        if let Some(v) = self.since {
            add("time_ms", ">=", Param::Int8(v));
        }
        if let Some(v) = &self.request_id {
            // A gateway's record is stamped with the time in its id: look there first, so the
            // time index finds it (there is no index on the id itself).
            if let Some(t) = crate::request_id::time_ms(v) {
                add("time_ms", "=", Param::Int8(t));
            }
            add("request_id", "=", Param::Text(v.clone()));
        }
        if let Some(v) = &self.session {
            add("session", "=", Param::Text(v.clone()));
        }
        let filter = if clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", clauses.join(" AND "))
        };
        let mut limit = self
            .limit
            .min(if self.report { MAX_REPORT } else { MAX_LIMIT });
        if self.request_id.is_some() {
            // One record per request: stop at the first.
            limit = limit.min(1);
        }
        let sql = format!(
            "SELECT {} FROM audit_records{filter} ORDER BY time_ms DESC, id DESC LIMIT {limit}",
            super::schema::COLUMNS
        );
        (sql, params)
    }
}

/// Read records from `store` (opened for this query only).
pub async fn query(store: &AuditStore, q: &AuditQuery) -> Result<Vec<AuditRecord>, AuditError> {
    let mut store = Store::open_reader(store).await?;
    store.query(q).await
}

/// Records read newest first, in the order `q` asks for: a session's oldest first.
pub(crate) fn in_order(q: &AuditQuery, mut records: Vec<AuditRecord>) -> Vec<AuditRecord> {
    if q.session.is_some() {
        records.reverse();
    }
    records
}

/// The store a `--db` value names: `sqlite://FILE`, `sqlite:FILE`, `postgres://...` or
/// `postgresql://...`.
pub fn parse_db_url(url: &str) -> Result<AuditStore, AuditError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(AuditStore::Postgres(url.to_owned()));
    }
    match url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        Some(path) if !path.is_empty() => Ok(AuditStore::Sqlite(path.to_owned())),
        _ => Err(AuditError::Invalid(
            "the audit database must be sqlite://FILE or postgres://USER@HOST/DB".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_filters_in_order() {
        let q = AuditQuery {
            route: Some("chat".into()),
            status: Some(503),
            since: Some(10),
            limit: 5,
            ..Default::default()
        };
        let (sql, params) = q.sql(|n| format!("${n}"));
        assert!(
            sql.ends_with(
                "FROM audit_records WHERE route = $1 AND status = $2 AND time_ms >= $3 \
                 ORDER BY time_ms DESC, id DESC LIMIT 5"
            ),
            "{sql}"
        );
        assert_eq!(
            params,
            vec![
                Param::Text("chat".into()),
                Param::Int4(503),
                Param::Int8(10)
            ]
        );
        let q = AuditQuery {
            request_id: Some("017f22e2-79b0-7000-8000-000000000000".into()),
            limit: 10,
            ..Default::default()
        };
        let (sql, params) = q.sql(|n| format!("?{n}"));
        assert!(
            sql.ends_with(
                "WHERE time_ms = ?1 AND request_id = ?2 ORDER BY time_ms DESC, id DESC LIMIT 1"
            ),
            "{sql}"
        );
        assert_eq!(params[0], Param::Int8(0x017F_22E2_79B0));
        let q = AuditQuery {
            request_id: Some("0123456789abcdef".into()),
            limit: 10,
            ..Default::default()
        };
        let (sql, _) = q.sql(|n| format!("?{n}"));
        assert!(sql.contains("WHERE request_id = ?1 ORDER"), "{sql}");
        let (sql, params) = AuditQuery::default().sql(|n| format!("?{n}"));
        assert!(sql.ends_with("audit_records ORDER BY time_ms DESC, id DESC LIMIT 0"));
        assert!(params.is_empty());
    }

    #[test]
    fn parses_db_urls() {
        assert_eq!(
            parse_db_url("sqlite://a.db").ok(),
            Some(AuditStore::Sqlite("a.db".into()))
        );
        assert_eq!(
            parse_db_url("sqlite:/tmp/a.db").ok(),
            Some(AuditStore::Sqlite("/tmp/a.db".into()))
        );
        assert!(matches!(
            parse_db_url("postgresql://u@h/db"),
            Ok(AuditStore::Postgres(_))
        ));
        assert!(parse_db_url("mysql://x").is_err());
        assert!(parse_db_url("sqlite://").is_err());
    }
}

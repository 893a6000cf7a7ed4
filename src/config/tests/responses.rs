//! `[responses]`: its defaults follow `[audit]`, and each mistake is reported at its key path.

use std::time::Duration;

use super::{error_at, errors, load, with_route};
use crate::config::{AuditStore, ResponsesStore, DEFAULT_RESPONSES_MAX_BYTES};

#[test]
fn defaults_follow_the_audit_log() {
    let config = load(&with_route(""));
    assert_eq!(config.responses.store, ResponsesStore::Audit);
    assert_eq!(
        config.responses.store.resolve(&config.audit),
        &AuditStore::Sqlite("switchyard-audit.db".into())
    );
    assert_eq!(config.responses.retention, None);
    assert_eq!(config.responses.max_bytes, DEFAULT_RESPONSES_MAX_BYTES);
    assert_eq!(DEFAULT_RESPONSES_MAX_BYTES, 4 * 1024 * 1024);

    // The audit log's retention unless `[responses]` has its own.
    let config = load(&with_route("[audit]\nretention = \"7d\"\n[responses]"));
    assert_eq!(
        config.responses.retention,
        Some(Duration::from_secs(7 * 86_400))
    );
    let config = load(&with_route(
        "[audit]\nretention = \"7d\"\n[responses]\nretention = \"12h\"",
    ));
    assert_eq!(
        config.responses.retention,
        Some(Duration::from_secs(12 * 3600))
    );

    // The audit log off: so is the store that follows it.
    let config = load(&with_route("[audit]\nstore = \"off\""));
    assert_eq!(
        config.responses.store.resolve(&config.audit),
        &AuditStore::Off
    );
}

#[test]
fn stores_are_written_as_audit_store_takes_them() {
    for (store, want) in [
        ("audit", ResponsesStore::Audit),
        ("off", ResponsesStore::Own(AuditStore::Off)),
        (
            "sqlite:///var/lib/responses.db",
            ResponsesStore::Own(AuditStore::Sqlite("/var/lib/responses.db".into())),
        ),
        (
            "sqlite:responses.db",
            ResponsesStore::Own(AuditStore::Sqlite("responses.db".into())),
        ),
        (
            "postgresql://u:p@db/llm",
            ResponsesStore::Own(AuditStore::Postgres("postgresql://u:p@db/llm".into())),
        ),
    ] {
        let config = load(&with_route(&format!(
            "[audit]\nstore = \"off\"\n[responses]\nstore = \"{store}\""
        )));
        assert_eq!(config.responses.store, want, "{store}");
    }
    let config = load(&with_route(
        "[responses]\nstore = \"sqlite:own.db\"\nmax_bytes = \"512KiB\"",
    ));
    assert_eq!(
        config.responses.store.resolve(&config.audit),
        &AuditStore::Sqlite("own.db".into())
    );
    assert_eq!(config.responses.max_bytes, 512 * 1024);
    let config = load(&with_route("[responses]\nmax_bytes = 1000"));
    assert_eq!(config.responses.max_bytes, 1000);
}

#[test]
fn mistakes_name_their_key_path() {
    let errs = errors(&with_route(
        "[responses]\nstore = \"mysql://root:hunter2@db/x\"\nretention = \"0s\"\nmax_bytes = \"4M\"",
    ));
    let e = error_at(
        &errs,
        "responses.store",
        "unsupported responses store scheme `mysql`",
    );
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(e.hint.as_deref().unwrap_or("").contains("\"audit\""), "{e}");
    error_at(&errs, "responses.retention", "greater than 0s");
    error_at(&errs, "responses.max_bytes", "unknown unit");
    assert_eq!(errs.len(), 3, "{errs:#?}");

    let errs = errors(&with_route(
        "[responses]\nstore = \"sqlite://\"\nretention = \"36501d\"\nmax_bytes = \"1GiB\"",
    ));
    error_at(&errs, "responses.store", "needs a file name");
    error_at(
        &errs,
        "responses.retention",
        "`36501d` is too long: the limit for this key is 36500d",
    );
    error_at(
        &errs,
        "responses.max_bytes",
        "the limit for this key is 256MiB",
    );
    assert_eq!(errs.len(), 3, "{errs:#?}");

    let errs = errors(&with_route("[responses]\nstor = \"off\""));
    let e = error_at(&errs, "responses.stor", "unknown field `stor`");
    assert!(e.hint.as_deref().unwrap_or("").contains("store"), "{e}");

    let errs = errors(&with_route("[responses]\nmax_bytes = 0"));
    error_at(&errs, "responses.max_bytes", "greater than 0");
    let errs = errors(&with_route("[responses]\nretention = 30"));
    error_at(&errs, "responses.retention", "invalid type: integer");
    let errs = errors(&with_route("[responses]\nstore = \"${NO_SUCH_URL}\""));
    error_at(
        &errs,
        "responses.store",
        "environment variable NO_SUCH_URL is not set",
    );
    let errs = errors(&format!("responses = 1\n{}", with_route("")));
    error_at(&errs, "responses", "invalid type");
}

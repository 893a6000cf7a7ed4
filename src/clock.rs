//! Wall-clock time, for what is stored or shared across machines: request ids, audit records,
//! events, breaker states published to the cluster. Durations and deadlines on the request
//! path use tokio's monotonic clock instead (virtual in tests).

/// Milliseconds since the Unix epoch.
pub fn wall_ms() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// [`wall_ms`] as the audit log stores it.
pub fn wall_ms_i64() -> i64 {
    i64::try_from(wall_ms()).unwrap_or(i64::MAX)
}

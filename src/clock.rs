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

/// Tests: poll `task`, one that never ends (a background loop), for `secs` of tokio's paused
/// clock.
#[cfg(test)]
pub(crate) async fn run_for(
    task: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    secs: u64,
) {
    tokio::select! {
        () = task => unreachable!("the task never ends"),
        () = tokio::time::sleep(std::time::Duration::from_secs(secs)) => {}
    }
}

/// `now + d` on tokio's clock, or, when that cannot be represented, a time further than any
/// deadline matters (about a century on). `Instant + Duration` panics on overflow, and the
/// durations added on the request path come from the config (bounded when it is loaded, but a
/// `Config` can be built in code), from Redis (another replica's hold) or from a provider's
/// `Retry-After`: none may panic a request.
pub fn after(now: tokio::time::Instant, d: std::time::Duration) -> tokio::time::Instant {
    const FAR: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn after_never_overflows() {
        let now = tokio::time::Instant::now();
        assert_eq!(
            super::after(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        let far = super::after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(50 * 365 * 86_400));
    }
}

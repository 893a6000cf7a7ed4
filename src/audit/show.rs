//! The audit log as `switchyard audit` prints it: one line per record, the path compact
//! (`openai/gpt-4o:503 -> azure/gpt-4o-prod:ok`).

use std::fmt::Write as _;

use super::{AuditAttempt, AuditRecord};

/// One attempt as `target:result`, the result being the HTTP status for a status failure and
/// the outcome otherwise (`ok`, `timeout`, `skipped_breaker`, ...).
fn attempt(a: &AuditAttempt) -> String {
    match (a.outcome.as_str(), a.status) {
        ("status", Some(status)) => format!("{}:{status}", a.target),
        (outcome, _) => format!("{}:{outcome}", a.target),
    }
}

/// The path on one line: attempts in order, joined by ` -> `.
pub fn compact_path(path: &[AuditAttempt]) -> String {
    if path.is_empty() {
        return "-".into();
    }
    path.iter().map(attempt).collect::<Vec<_>>().join(" -> ")
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
pub fn format_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn tokens(r: &AuditRecord) -> String {
    match (r.tokens_in, r.tokens_out) {
        (None, None) => "-".into(),
        (i, o) => format!(
            "{}/{}",
            i.map_or_else(|| "-".into(), |n| n.to_string()),
            o.map_or_else(|| "-".into(), |n| n.to_string())
        ),
    }
}

/// What the prompt cache did, when it did anything: `cache: 1024 read, 100 written` (both
/// counts are part of TOKENS' input).
fn cache(r: &AuditRecord) -> Option<String> {
    let read = r.cache_read_tokens.unwrap_or(0);
    let written = r.cache_write_tokens.unwrap_or(0);
    (read > 0 || written > 0).then(|| format!("cache: {read} read, {written} written"))
}

/// One session's turns (in order) under a summary: how many turns, which targets served them,
/// how many failed over or were hedged, turns dropped, and time per turn.
pub fn session(key: &str, turns: &[AuditRecord]) -> String {
    if turns.is_empty() {
        return format!("session {key}: no records\n");
    }
    let failed_over = turns
        .iter()
        .filter(|r| {
            r.path
                .iter()
                .filter(|a| a.outcome != "skipped_breaker" && a.outcome != "skipped_budget")
                .count()
                > 1
        })
        .count();
    let hedged = turns.iter().filter(|r| r.hedged).count();
    let dropped: u32 = turns.iter().map(|r| r.turns_dropped).sum();
    let mut targets: Vec<&str> = Vec::new();
    for t in turns.iter().filter_map(|r| r.target.as_deref()) {
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    let total_ms: f64 = turns.iter().map(|r| r.latency_ms).sum();
    let failed = turns
        .iter()
        .filter(|r| r.status >= 400 || r.error.is_some())
        .count();
    let span = turns.last().map_or(0, |l| l.time_ms) - turns[0].time_ms;
    let mut out = format!(
        "session {key}: {} turns over {:.1} s, served by {}; {failed_over} failed over, {hedged} hedged, \
         {dropped} turns dropped, {failed} failed; {:.0} ms per turn on average\n\n",
        turns.len(),
        span as f64 / 1000.0,
        if targets.is_empty() { "-".to_owned() } else { targets.join(", ") },
        total_ms / turns.len() as f64,
    );
    out.push_str(&table(turns));
    out
}

/// A readable table: a header, then one line per record in the order given.
pub fn table(records: &[AuditRecord]) -> String {
    let route_w = records
        .iter()
        .map(|r| r.route.len())
        .chain([5])
        .max()
        .unwrap_or(5);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<23}  {:<36}  {:<route_w$}  {:>6}  {:>7}  {:>6}  {:<11}  PATH",
        "TIME (UTC)", "REQUEST ID", "ROUTE", "STATUS", "MS", "TTFT", "TOKENS"
    );
    for r in records {
        let mut status = r.status.to_string();
        if r.stream {
            status.push('~');
        }
        let _ = write!(
            out,
            "{:<23}  {:<36}  {:<route_w$}  {:>6}  {:>7}  {:>6}  {:<11}  {}",
            format_time(r.time_ms),
            r.request_id,
            if r.route.is_empty() { "-" } else { &r.route },
            status,
            opt_ms(Some(r.latency_ms)),
            opt_ms(r.ttft_ms),
            tokens(r),
            compact_path(&r.path),
        );
        if let Some(cache) = cache(r) {
            let _ = write!(out, "  [{cache}]");
        }
        if r.turns_dropped > 0 {
            let _ = write!(out, "  [{} turns dropped]", r.turns_dropped);
        }
        if r.hedged {
            out.push_str("  [hedged]");
        }
        if let Some(e) = &r.error {
            let short: String = e.chars().take(80).collect();
            let _ = write!(out, "  error: {}", short.replace('\n', " "));
        }
        out.push('\n');
    }
    if records.is_empty() {
        out.push_str("(no records)\n");
    } else {
        out.push_str("(~ marks a stream; MS is the whole request, TTFT the time to first token)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(target: &str, outcome: &str, status: Option<u16>) -> AuditAttempt {
        AuditAttempt::of(target, outcome, status)
    }

    #[test]
    fn paths_are_compact() {
        let path = [
            a("openai/gpt-4o", "status", Some(503)),
            a("azure/gpt-4o-prod", "ok", Some(200)),
        ];
        assert_eq!(
            compact_path(&path),
            "openai/gpt-4o:503 -> azure/gpt-4o-prod:ok"
        );
        assert_eq!(
            compact_path(&[
                a("p0/m", "skipped_breaker", None),
                a("p1/m", "timeout", None)
            ]),
            "p0/m:skipped_breaker -> p1/m:timeout"
        );
        assert_eq!(compact_path(&[]), "-");
    }

    #[test]
    fn a_line_says_what_the_prompt_cache_did_only_when_it_did_something() {
        let record = |read, written| AuditRecord {
            status: 200,
            tokens_in: Some(1200),
            tokens_out: Some(5),
            cache_read_tokens: read,
            cache_write_tokens: written,
            path: vec![a("anthropic/claude", "ok", Some(200))],
            ..AuditRecord::new("r".into(), 0, "chat".into())
        };
        let out = table(&[
            record(Some(1024), Some(100)),
            record(Some(0), Some(0)),
            record(None, None),
        ]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(
            lines[1].contains(" 1200/5 ")
                && lines[1].ends_with("anthropic/claude:ok  [cache: 1024 read, 100 written]"),
            "{out}"
        );
        assert!(lines[2].ends_with("anthropic/claude:ok"), "{out}");
        assert!(lines[3].ends_with("anthropic/claude:ok"), "{out}");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00.000");
        assert_eq!(format_time(1_709_251_199_999), "2024-02-29 23:59:59.999");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00.000");
    }
}

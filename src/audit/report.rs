//! `switchyard audit --report`: what the audit log says about failover over a time range, the
//! figures to tune `context_window`, the breaker and hedging with: per route, how many requests
//! failed over and why; per serving target, latency and turns dropped; how many sessions saw a
//! failover.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::AuditRecord;

/// A route's failovers.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RouteReport {
    pub requests: u64,
    /// Requests that moved to another target (an attempt failed and another followed, or an
    /// open breaker or spent retry budget passed one over).
    pub failed_over: u64,
    pub failover_rate: f64,
    /// Moves by reason: the failed attempt's outcome (`status 503`, `timeout`, ...) or why a
    /// target was passed over (`breaker_open`, `retry_budget`).
    pub reasons: BTreeMap<String, u64>,
    /// Requests that got an error.
    pub failed: u64,
}

/// One serving target's answers.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TargetReport {
    pub answered: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Requests by turns dropped to fit its context window: `"0"`, `"1-2"`, `"3-5"`, `"6-10"`,
    /// `"11+"`.
    pub turns_dropped: BTreeMap<&'static str, u64>,
}

/// The report over a set of records.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Report {
    pub records: u64,
    /// Unix ms of the oldest and newest record read.
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
    pub routes: BTreeMap<String, RouteReport>,
    pub targets: BTreeMap<String, TargetReport>,
    pub sessions: u64,
    pub sessions_failed_over: u64,
    pub sessions_failover_share: f64,
}

fn bucket(dropped: u32) -> &'static str {
    match dropped {
        0 => "0",
        1..=2 => "1-2",
        3..=5 => "3-5",
        6..=10 => "6-10",
        _ => "11+",
    }
}

/// The reasons a request moved on, one per move.
fn moves(r: &AuditRecord) -> Vec<String> {
    let mut out = Vec::new();
    let last = r.path.len().saturating_sub(1);
    for (i, a) in r.path.iter().enumerate() {
        match a.outcome.as_str() {
            "skipped_breaker" => out.push("breaker_open".to_owned()),
            "skipped_budget" => out.push("retry_budget".to_owned()),
            // The answer, the hedges that lost to it and what the request's end cut short.
            "ok" | "hedge_lost" | "cancelled" | "shutdown" => {}
            _ if i == last => {}
            "status" => out.push(
                a.status
                    .map_or("status".to_owned(), |s| format!("status {s}")),
            ),
            other => out.push(other.to_owned()),
        }
    }
    out
}

/// Sum up `records`.
pub fn report(records: &[AuditRecord]) -> Report {
    let mut rep = Report {
        records: records.len() as u64,
        from_ms: records.iter().map(|r| r.time_ms).min(),
        to_ms: records.iter().map(|r| r.time_ms).max(),
        ..Report::default()
    };
    let mut latency: HashMap<&str, Histogram<u64>> = HashMap::new();
    let mut sessions: HashSet<&str> = HashSet::new();
    let mut sessions_moved: HashSet<&str> = HashSet::new();
    for r in records {
        let route = rep.routes.entry(r.route.clone()).or_default();
        route.requests += 1;
        if r.status >= 400 || r.error.is_some() {
            route.failed += 1;
        }
        let moved = moves(r);
        if !moved.is_empty() {
            route.failed_over += 1;
        }
        for m in moved.iter() {
            *route.reasons.entry(m.clone()).or_default() += 1;
        }
        if let Some(s) = r.session.as_deref() {
            sessions.insert(s);
            if !moved.is_empty() {
                sessions_moved.insert(s);
            }
        }
        let Some(target) = r.target.as_deref() else {
            continue;
        };
        let t = rep.targets.entry(target.to_owned()).or_default();
        t.answered += 1;
        *t.turns_dropped.entry(bucket(r.turns_dropped)).or_default() += 1;
        let h = latency
            .entry(target)
            .or_insert_with(crate::stats::histogram);
        h.saturating_record(((r.latency_ms * 1000.0) as u64).clamp(1, crate::stats::MAX_MICROS));
    }
    for route in rep.routes.values_mut() {
        route.failover_rate = ratio(route.failed_over, route.requests);
    }
    for (target, h) in latency {
        if let Some(t) = rep.targets.get_mut(target) {
            t.p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
            t.p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
        }
    }
    rep.sessions = sessions.len() as u64;
    rep.sessions_failed_over = sessions_moved.len() as u64;
    rep.sessions_failover_share = ratio(rep.sessions_failed_over, rep.sessions);
    rep
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The report as text.
pub fn render(rep: &Report) -> String {
    let mut out = String::new();
    let span = match (rep.from_ms, rep.to_ms) {
        (Some(a), Some(b)) => format!(
            "{} to {} UTC",
            super::show::format_time(a),
            super::show::format_time(b)
        ),
        _ => "no records".to_owned(),
    };
    let _ = writeln!(out, "audit report: {} records, {span}\n", rep.records);
    let _ = writeln!(out, "failover by route");
    let _ = writeln!(
        out,
        "  {:<24} {:>9} {:>11} {:>7} {:>7}  reasons",
        "route", "requests", "failed over", "rate", "failed"
    );
    for (name, r) in &rep.routes {
        let reasons: Vec<String> = r.reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            out,
            "  {name:<24} {:>9} {:>11} {:>6.1}% {:>7}  {}",
            r.requests,
            r.failed_over,
            100.0 * r.failover_rate,
            r.failed,
            if reasons.is_empty() {
                "-".to_owned()
            } else {
                reasons.join(", ")
            }
        );
    }
    let _ = writeln!(out, "\nserving targets");
    let _ = writeln!(
        out,
        "  {:<36} {:>8} {:>9} {:>9}  turns dropped (requests)",
        "target", "answered", "p50 ms", "p99 ms"
    );
    for (name, t) in &rep.targets {
        let dropped: Vec<String> = ["0", "1-2", "3-5", "6-10", "11+"]
            .iter()
            .filter_map(|b| t.turns_dropped.get(b).map(|n| format!("{b}: {n}")))
            .collect();
        let _ = writeln!(
            out,
            "  {name:<36} {:>8} {:>9.1} {:>9.1}  {}",
            t.answered,
            t.p50_ms,
            t.p99_ms,
            dropped.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nsessions: {}, {} of them saw a failover ({:.1}%)",
        rep.sessions,
        rep.sessions_failed_over,
        100.0 * rep.sessions_failover_share
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::AuditAttempt;

    fn attempt(target: &str, outcome: &str, status: Option<u16>) -> AuditAttempt {
        AuditAttempt::of(target, outcome, status)
    }

    fn record(
        session: &str,
        latency_ms: f64,
        path: Vec<AuditAttempt>,
        dropped: u32,
    ) -> AuditRecord {
        let target = path
            .iter()
            .find(|a| a.outcome == "ok")
            .map(|a| a.target.clone());
        AuditRecord {
            status: if target.is_some() { 200 } else { 503 },
            target,
            latency_ms,
            path,
            turns_dropped: dropped,
            session: Some(session.into()),
            ..AuditRecord::new("id".into(), 1_000, "chat".into())
        }
    }

    #[test]
    fn failovers_by_reason_latency_and_drops_by_target_and_sessions() {
        let records = vec![
            record("s1", 10.0, vec![attempt("a", "ok", Some(200))], 0),
            record(
                "s1",
                30.0,
                vec![
                    attempt("a", "status", Some(503)),
                    attempt("b", "ok", Some(200)),
                ],
                2,
            ),
            record(
                "s2",
                12.0,
                vec![
                    attempt("a", "skipped_breaker", None),
                    attempt("b", "ok", Some(200)),
                ],
                0,
            ),
            record(
                "s3",
                11.0,
                vec![
                    attempt("a", "timeout", None),
                    attempt("b", "hedge_lost", None),
                    attempt("c", "ok", Some(200)),
                ],
                7,
            ),
            record(
                "s4",
                9.0,
                vec![
                    attempt("a", "ok", Some(200)),
                    attempt("b", "hedge_lost", None),
                ],
                0,
            ),
            record(
                "s5",
                50.0,
                vec![
                    attempt("a", "status", Some(500)),
                    attempt("b", "status", Some(500)),
                ],
                0,
            ),
        ];
        let rep = report(&records);
        let chat = &rep.routes["chat"];
        assert_eq!((chat.requests, chat.failed_over, chat.failed), (6, 4, 1));
        let reasons: Vec<(&str, u64)> =
            chat.reasons.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            reasons,
            [
                ("breaker_open", 1),
                ("status 500", 1),
                ("status 503", 1),
                ("timeout", 1)
            ]
        );
        assert_eq!(rep.targets["a"].answered, 2);
        assert_eq!(rep.targets["b"].turns_dropped.get("1-2"), Some(&1));
        assert_eq!(rep.targets["c"].turns_dropped.get("6-10"), Some(&1));
        assert!(
            (rep.targets["b"].p99_ms - 30.0).abs() < 0.1,
            "{:?}",
            rep.targets["b"]
        );
        // s1, s2, s3, s5 moved; s4 only raced a hedge.
        assert_eq!((rep.sessions, rep.sessions_failed_over), (5, 4));
        let text = render(&rep);
        assert!(
            text.contains("sessions: 5, 4 of them saw a failover (80.0%)"),
            "{text}"
        );
        assert!(
            text.contains("breaker_open 1, status 500 1, status 503 1, timeout 1"),
            "{text}"
        );
    }
}

//! The report at the end: one row per phase (what the clients saw, what the gateway did), the
//! totals, and where to look next (audit log, gateway log, dashboard).

use std::fmt::Write as _;

use super::phases::{Kind, Scheduled};
use super::scrape::Counters;
use super::setup::{CHAT_ROUTE, PRIMARY};
use super::traffic::PhaseStats;

/// Everything the report shows.
#[derive(Debug)]
pub(super) struct Report<'a> {
    /// The phases that ran.
    pub schedule: &'a [Scheduled],
    /// Per phase, as the clients saw it (at least one per scheduled phase).
    pub phases: &'a [PhaseStats],
    /// Per phase, what the gateway counted.
    pub counters: &'a [Counters],
    /// Requests per second asked for.
    pub rps: u32,
    /// `(path, records)` of the audit log, or why there is none.
    pub audit: Result<(String, usize), String>,
    /// A session that failed over mid-conversation, if one did.
    pub failed_over: Option<FailedOver>,
    /// Where the gateway's log went.
    pub gateway_log: String,
    /// Where the config the demo ran is.
    pub config: String,
    /// The dashboard's URL.
    pub dashboard: String,
    /// Whether it stays up after the report.
    pub keep_running: bool,
}

/// A session that failed over on a turn after its first.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FailedOver {
    pub session: String,
    /// Which turn failed over (1 is the first).
    pub turn: usize,
    pub turns: usize,
    /// That turn's path, compact.
    pub path: String,
}

fn ms(micros: u64) -> String {
    let ms = micros as f64 / 1000.0;
    if ms < 10.0 {
        format!("{ms:.1}ms")
    } else {
        format!("{ms:.0}ms")
    }
}

/// A counter difference as a whole number (scrapes are integers; never "-0").
fn n(v: f64) -> u64 {
    v.max(0.0).round() as u64
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

impl Report<'_> {
    /// The clients' numbers over every phase.
    pub(super) fn total(&self) -> PhaseStats {
        let mut total = PhaseStats::empty();
        for p in self.phases.iter().take(self.schedule.len()) {
            total.merge(p);
        }
        total
    }

    /// The gateway's numbers over every phase.
    fn total_counters(&self) -> Counters {
        let mut t = Counters::default();
        for c in self.counters {
            t.failovers += c.failovers;
            t.failovers_breaker_open += c.failovers_breaker_open;
            t.hedges_fired += c.hedges_fired;
            t.hedges_won += c.hedges_won;
            for (to, n) in &c.transitions {
                *t.transitions.entry(to.clone()).or_default() += n;
            }
        }
        t
    }

    fn row(out: &mut String, name: &str, time: &str, s: &PhaseStats, c: &Counters) {
        let (p50, p99) = if s.requests == 0 {
            ("-".to_owned(), "-".to_owned())
        } else {
            (
                ms(s.latency.value_at_quantile(0.5)),
                ms(s.latency.value_at_quantile(0.99)),
            )
        };
        let _ = writeln!(
            out,
            "  {name:<17} {time:>8} {:>9} {:>8} {:>8} {:>10} {:>7} {:>8} {p50:>8} {p99:>8}",
            s.requests,
            pct(s.ok, s.requests),
            pct(s.on_primary, s.ok),
            n(c.failovers),
            format!("{}/{}", n(c.hedges_won), n(c.hedges_fired)),
            n(c.transitions_total()),
        );
    }

    /// What the adaptive route did with the brownout: the primary's share at its start, at its
    /// end and once it was over, and the breaker transitions meanwhile.
    fn brownout(&self) -> Option<String> {
        let at = |kind: Kind| {
            let i = self.schedule.iter().position(|p| p.kind == kind)?;
            self.counters.get(i)
        };
        let (before, during, after) = (
            at(Kind::Healthy)?,
            at(Kind::Brownout)?,
            at(Kind::BrownoutOver)?,
        );
        let share = |c: &Counters| {
            c.primary_share
                .map_or("-".to_owned(), |s| format!("{:.0}%", s * 100.0))
        };
        Some(format!(
            "  brownout: {CHAT_ROUTE}'s share on {PRIMARY} {} at its start, {} at its end ({} breaker transitions), {} once it was over",
            share(before),
            share(during),
            n(during.transitions_total()),
            share(after)
        ))
    }

    /// The report text.
    pub(super) fn render(&self) -> String {
        let total = self.total();
        let tc = self.total_counters();
        let end = self.schedule.last().map_or(0.0, |p| p.end.as_secs_f64());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nswitchyard demo report: {} client requests in {end:.0}s at {}/s\n",
            total.requests, self.rps
        );
        let _ = writeln!(
            out,
            "  {:<17} {:>8} {:>9} {:>8} {:>8} {:>10} {:>7} {:>8} {:>8} {:>8}",
            "phase",
            "time",
            "requests",
            "success",
            "primary",
            "failovers",
            "hedges",
            "breaker",
            "p50",
            "p99"
        );
        let empty = PhaseStats::empty();
        for (i, p) in self.schedule.iter().enumerate() {
            let time = format!("{:.0}-{:.0}s", p.start.as_secs_f64(), p.end.as_secs_f64());
            let stats = self.phases.get(i).unwrap_or(&empty);
            let counters = self.counters.get(i).cloned().unwrap_or_default();
            Self::row(&mut out, p.kind.name(), &time, stats, &counters);
        }
        Self::row(&mut out, "total", &format!("0-{end:.0}s"), &total, &tc);
        let _ = writeln!(
            out,
            "  (success: answered in full; primary: share of answers from {PRIMARY}; hedges: won/fired;\n   \
             breaker: transitions; p50/p99: whole-answer latency seen by the client)"
        );
        let failed = total.requests - total.ok;
        let t = |to: &str| n(tc.transitions.get(to).copied().unwrap_or(0.0));
        let _ = writeln!(
            out,
            "\n  client-visible success: {} ({} of {} requests answered in full; {failed} failed)",
            pct(total.ok, total.requests),
            total.ok,
            total.requests
        );
        let _ = writeln!(
            out,
            "  answers checked word for word: {} ({} streamed, {} tool calls answered with a tool result)",
            total.ok, total.streams, total.tool_steps
        );
        let _ = writeln!(
            out,
            "  failovers: {} ({} after a failed attempt, {} straight past an open breaker)",
            n(tc.failovers),
            n(tc.failovers - tc.failovers_breaker_open),
            n(tc.failovers_breaker_open)
        );
        let _ = writeln!(
            out,
            "  breaker transitions: {} (to open {}, to half_open {}, to closed {})",
            n(tc.transitions_total()),
            t("open"),
            t("half_open"),
            t("closed")
        );
        let _ = writeln!(
            out,
            "  hedges: {} fired, {} won",
            n(tc.hedges_fired),
            n(tc.hedges_won)
        );
        if let Some(line) = self.brownout() {
            let _ = writeln!(out, "{line}");
        }
        for e in &total.errors {
            let _ = writeln!(out, "  error: {e}");
        }
        let _ = writeln!(out);
        match &self.audit {
            Ok((path, n)) => {
                let _ = writeln!(out, "  audit log:   {path} ({n} records)");
                let _ = writeln!(
                    out,
                    "               switchyard audit --db sqlite://{path} --last 20"
                );
                if let Some(f) = &self.failed_over {
                    let _ = writeln!(
                        out,
                        "  a session:   {} failed over on turn {} of {} ({})\n               \
                         switchyard audit --db sqlite://{path} --session {}",
                        f.session, f.turn, f.turns, f.path, f.session
                    );
                }
            }
            Err(why) => {
                let _ = writeln!(out, "  audit log:   {why}");
            }
        }
        let _ = writeln!(out, "  gateway log: {}", self.gateway_log);
        let _ = writeln!(out, "  config:      {}", self.config);
        let up = if self.keep_running {
            "(up until Ctrl-C)"
        } else {
            "(stopped with the demo; `switchyard demo --keep-running` keeps it up)"
        };
        let _ = writeln!(out, "  dashboard:   {} {up}", self.dashboard);
        let verdict = if failed == 0 && total.requests > 0 {
            "every client request succeeded".to_owned()
        } else {
            format!("{failed} client requests failed")
        };
        let _ = writeln!(out, "\n  result: {verdict}");
        out
    }
}

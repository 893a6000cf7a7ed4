//! The live display. On a terminal, one status line redrawn in place (plain ANSI) with events
//! scrolling above it; otherwise (a pipe, a CI log) the same as plain lines, a status line every
//! few seconds.

use std::io::IsTerminal;
use std::time::Duration;

use super::phases::Scheduled;
use super::scrape::{Counters, Event, TargetStatus};
use super::traffic::PhaseStats;

const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";

/// Where progress goes and how.
#[derive(Debug)]
pub(super) struct Progress {
    tty: bool,
    /// A status line is on screen and will be redrawn.
    drawn: bool,
    /// Plain mode: when the next status line is due.
    next_plain: Duration,
    plain_every: Duration,
    /// Terminal columns.
    width: usize,
}

/// What the status line shows.
#[derive(Debug)]
pub(super) struct Status<'a> {
    /// Since the demo's start.
    pub elapsed: Duration,
    /// The demo's length.
    pub total: Duration,
    /// The phase's name.
    pub phase: &'a str,
    /// The clients' numbers so far.
    pub stats: &'a PhaseStats,
    /// The gateway's counters so far.
    pub counters: &'a Counters,
    /// Breaker states now.
    pub targets: &'a [TargetStatus],
}

impl Progress {
    /// A display for stdout; plain lines every `plain_every` when it is not a terminal.
    pub(super) fn new(plain_every: Duration) -> Progress {
        let tty = std::io::stdout().is_terminal();
        Progress {
            tty,
            width: if tty { terminal_width() } else { usize::MAX },
            drawn: false,
            next_plain: Duration::ZERO,
            plain_every,
        }
    }

    fn paint(&self, colour: &str, text: &str) -> String {
        if self.tty {
            format!("{colour}{text}{RESET}")
        } else {
            text.to_owned()
        }
    }

    fn state(&self, state: &str) -> String {
        self.paint(state_colour(state), state)
    }

    /// Print a line above the status line.
    pub(super) fn line(&mut self, text: &str) {
        let clear = if self.tty && self.drawn {
            "\r\x1b[2K"
        } else {
            ""
        };
        out(&format!("{clear}{text}\n"));
        self.drawn = false;
    }

    /// A phase starts.
    pub(super) fn phase(&mut self, p: &Scheduled, total: Duration) {
        let head = format!(
            "[{:>5.1}s/{:.0}s] phase: {}",
            p.start.as_secs_f64(),
            total.as_secs_f64(),
            p.kind.name()
        );
        let text = format!(
            "{}  {}",
            self.paint(BOLD, &head),
            self.paint(DIM, p.kind.story())
        );
        self.line(&text);
        self.next_plain = p.start;
    }

    /// Breaker transitions as they happen (failovers and hedges are counted in the status line).
    pub(super) fn events(&mut self, events: &[Event], start_ms: u64) {
        for e in events.iter().filter(|e| e.kind == "breaker") {
            let at = e.time_ms.saturating_sub(start_ms) as f64 / 1000.0;
            let text = format!(
                "[{at:>5.1}s] breaker {} -> {} ({})",
                e.target,
                self.state(&e.to),
                e.reason.replace('_', " ")
            );
            self.line(&text);
        }
    }

    /// Redraw (terminal) or print when due (plain) the status line.
    pub(super) fn status(&mut self, s: &Status<'_>) {
        if !self.tty && s.elapsed < self.next_plain {
            return;
        }
        let st = s.stats;
        let success = if st.requests == 0 {
            100.0
        } else {
            st.ok as f64 * 100.0 / st.requests as f64
        };
        let c = s.counters;
        let n = |v: f64| v.max(0.0).round() as u64;
        let mut parts: Vec<(String, Option<&str>)> = vec![
            (
                format!(
                    "[{:>5.1}s/{:.0}s] ",
                    s.elapsed.as_secs_f64(),
                    s.total.as_secs_f64()
                ),
                None,
            ),
            (s.phase.to_owned(), Some(BOLD)),
            (
                format!(
                    " | {} req, {success:.1}% ok | {} failovers | hedges {}/{} won | ",
                    st.requests,
                    n(c.failovers),
                    n(c.hedges_won),
                    n(c.hedges_fired),
                ),
                None,
            ),
        ];
        let mut any = false;
        let troubled = s
            .targets
            .iter()
            .filter(|t| t.breaker.state != "closed" || t.breaker.traffic_share < 1.0);
        for t in troubled {
            let sep = if any { ", " } else { "" };
            parts.push((format!("{sep}{} ", t.target), None));
            parts.push((
                t.breaker.state.clone(),
                Some(state_colour(&t.breaker.state)),
            ));
            if t.breaker.state == "closed" {
                let share = t.breaker.traffic_share * 100.0;
                parts.push((format!(" (ramp {share:.0}%)"), None));
            }
            any = true;
        }
        if !any {
            parts.push(("breakers closed".to_owned(), Some(GREEN)));
        }
        if self.tty {
            out(&format!(
                "\r\x1b[2K{}",
                fit(&parts, self.width.saturating_sub(1))
            ));
            self.drawn = true;
        } else {
            let text: String = parts.into_iter().map(|(t, _)| t).collect();
            out(&format!("{text}\n"));
            self.next_plain = s.elapsed + self.plain_every;
        }
    }

    /// Leave the status line on screen and move below it.
    pub(super) fn finish(&mut self) {
        if self.tty && self.drawn {
            out("\n");
            self.drawn = false;
        }
    }
}

/// To stdout (a closed pipe ends the demo quietly, see [`crate::cli::write_stdout`]); the
/// display is best effort: any other write error is not the demo's failure.
fn out(text: &str) {
    let _ = crate::cli::write_stdout(text);
}

fn state_colour(state: &str) -> &'static str {
    match state {
        "open" => RED,
        "half_open" => YELLOW,
        _ => GREEN,
    }
}

/// The coloured segments, cut to `width` visible characters (a wrapped status line could not
/// be redrawn in place).
fn fit(parts: &[(String, Option<&str>)], width: usize) -> String {
    let mut out = String::new();
    let mut left = width;
    for (text, colour) in parts {
        let piece: String = text.chars().take(left).collect();
        left -= piece.chars().count();
        match colour {
            Some(c) => out.push_str(&format!("{c}{piece}{RESET}")),
            None => out.push_str(&piece),
        }
        if left == 0 {
            break;
        }
    }
    out
}

/// The terminal's width: `$COLUMNS`, else what `stty size` says about the terminal, else 100.
fn terminal_width() -> usize {
    let from_env = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    from_env
        .or_else(|| {
            let tty = std::fs::File::open("/dev/tty").ok()?;
            let out = std::process::Command::new("stty")
                .arg("size")
                .stdin(tty)
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .filter(|w| *w >= 20)
        .unwrap_or(100)
}

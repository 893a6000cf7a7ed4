//! The live display. On a terminal, one status line redrawn in place (plain ANSI) with events
//! scrolling above it; otherwise (a pipe, a CI log) the same as plain lines, a status line every
//! few seconds.

use std::io::{IsTerminal, Write};
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
pub struct Progress {
    tty: bool,
    /// A status line is on screen and will be redrawn.
    drawn: bool,
    /// Plain mode: when the next status line is due.
    next_plain: Duration,
    plain_every: Duration,
}

/// What the status line shows.
#[derive(Debug)]
pub struct Status<'a> {
    pub elapsed: Duration,
    pub total: Duration,
    pub phase: &'a str,
    pub stats: &'a PhaseStats,
    pub counters: &'a Counters,
    pub targets: &'a [TargetStatus],
}

impl Progress {
    /// A display for stdout; plain lines every `plain_every` when it is not a terminal.
    pub fn new(plain_every: Duration) -> Progress {
        Progress {
            tty: std::io::stdout().is_terminal(),
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
        let colour = match state {
            "open" => RED,
            "half_open" => YELLOW,
            _ => GREEN,
        };
        self.paint(colour, state)
    }

    /// Print a line above the status line.
    #[expect(clippy::print_stdout, reason = "the demo's display")]
    pub fn line(&mut self, text: &str) {
        if self.tty && self.drawn {
            print!("\r\x1b[2K");
        }
        println!("{text}");
        self.drawn = false;
        let _ = std::io::stdout().flush();
    }

    /// A phase starts.
    pub fn phase(&mut self, p: &Scheduled, total: Duration) {
        let head = format!(
            "[{:>5.1}s/{:.0}s] phase: {}",
            p.start.as_secs_f64(),
            total.as_secs_f64(),
            p.kind.name()
        );
        let text = format!("{}  {}", self.paint(BOLD, &head), self.paint(DIM, p.kind.story()));
        self.line(&text);
        self.next_plain = p.start;
    }

    /// Breaker transitions as they happen (failovers and hedges are counted in the status line).
    pub fn events(&mut self, events: &[Event], start_ms: u64) {
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
    #[expect(clippy::print_stdout, reason = "the demo's display")]
    pub fn status(&mut self, s: &Status<'_>) {
        if !self.tty && s.elapsed < self.next_plain {
            return;
        }
        let st = s.stats;
        let success = if st.requests == 0 {
            100.0
        } else {
            st.ok as f64 * 100.0 / st.requests as f64
        };
        let breakers: Vec<String> = s
            .targets
            .iter()
            .filter(|t| t.breaker.state != "closed" || t.breaker.traffic_share < 1.0)
            .map(|t| {
                let ramp = if t.breaker.state == "closed" {
                    format!(" {:.0}%", t.breaker.traffic_share * 100.0)
                } else {
                    String::new()
                };
                format!("{} {}{ramp}", t.target, self.state(&t.breaker.state))
            })
            .collect();
        let breakers = if breakers.is_empty() {
            self.state("all closed")
        } else {
            breakers.join(", ")
        };
        let text = format!(
            "[{:>5.1}s] {:<16} requests {:>5}  ok {:>5.1}%  failovers {:>4}  hedges {}/{}  breakers: {breakers}",
            s.elapsed.as_secs_f64(),
            s.phase,
            st.requests,
            success,
            s.counters.failovers,
            s.counters.hedges_won,
            s.counters.hedges_fired,
        );
        if self.tty {
            print!("\r\x1b[2K{text}");
            self.drawn = true;
            let _ = std::io::stdout().flush();
        } else {
            println!("{text}");
            self.next_plain = s.elapsed + self.plain_every;
        }
    }

    /// Leave the status line on screen and move below it.
    pub fn finish(&mut self) {
        if self.tty && self.drawn {
            self.line("");
        }
    }
}

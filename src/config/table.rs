//! The resolved routing table that `switchyard check` prints: per route its key policy values,
//! then its targets in priority order. Secrets are never printed (no api keys; passwords in
//! URLs are masked).

use std::fmt::Write;

use super::{
    format_duration, redact_url, Affinity, Config, HedgeDelay, MidStream, RouteConfig, Strategy,
};

/// Render the routing table of `config`.
pub(super) fn routing_table(config: &Config) -> String {
    let mut out = String::new();
    for (i, route) in config.routes.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        write_route(&mut out, route);
    }
    out
}

fn write_route(out: &mut String, route: &RouteConfig) {
    let f = &route.failover;
    let b = &route.breaker;
    let h = &route.hedge;
    let mid_stream = match f.mid_stream {
        MidStream::Continue => "continue",
        MidStream::Error => "error",
    };
    let hedge = if h.enabled {
        let delay = match h.delay {
            HedgeDelay::Fixed(d) => format_duration(d),
            HedgeDelay::Percentile(p) => format!("p{p}"),
        };
        format!(
            "after {delay}, max_parallel {}, budget {:.2}",
            h.max_parallel, h.budget
        )
    } else {
        "off".to_owned()
    };
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "route {} (strategy {})",
        route.name,
        route.strategy.as_str()
    );
    if route.strategy != Strategy::Priority {
        let a = &route.adaptive;
        let affinity = match a.affinity {
            Affinity::Session => "session",
            Affinity::Off => "off",
        };
        if route.strategy == Strategy::Adaptive {
            let _ = writeln!(
                out,
                "  adaptive: floor {:.2}, interval {}, max_step {:.2}, affinity {affinity}",
                a.floor,
                format_duration(a.interval),
                a.max_step
            );
        } else {
            let _ = writeln!(out, "  weighted: affinity {affinity}");
        }
    }
    let _ = writeln!(
        out,
        "  failover: max_attempts {}, attempt_timeout {}, first_token_timeout {}, idle_timeout {}, request_timeout {}, mid_stream {mid_stream}",
        f.max_attempts,
        format_duration(f.attempt_timeout),
        format_duration(f.first_token_timeout),
        format_duration(f.idle_timeout),
        format_duration(f.request_timeout),
    );
    let _ = writeln!(out, "  hedge: {hedge}");
    let _ = writeln!(
        out,
        "  breaker: failure_rate {:.2} over {} (min {} requests), {} in a row, hold {} up to {}",
        b.failure_rate,
        format_duration(b.window),
        b.min_requests,
        b.consecutive_failures,
        format_duration(b.open_for),
        format_duration(b.open_for_max),
    );

    let header = [
        "#",
        "target",
        "kind",
        "base_url",
        "context_window",
        "weight",
    ];
    let weighted = route.strategy != Strategy::Priority;
    let rows: Vec<[String; 6]> = route
        .targets
        .iter()
        .enumerate()
        .map(|(n, t)| {
            let weight = match route.weights.get(n) {
                Some(w) if weighted => format!("{w}"),
                _ => "-".to_owned(),
            };
            [
                (n + 1).to_string(),
                t.id.clone(),
                t.provider.kind.as_str().to_owned(),
                redact_url(&t.provider.base_url),
                t.context_window.map_or("-".to_owned(), |w| w.to_string()),
                weight,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header = header.map(str::to_owned);
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::from(" ");
        for (cell, w) in row.iter().zip(widths) {
            let _ = write!(line, " {cell:<w$} ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

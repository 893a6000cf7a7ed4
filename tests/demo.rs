//! `switchyard demo`, run as a user would (the built binary, a short duration): it exits 0,
//! and its report shows every phase, a 100% client success rate, failovers and breaker
//! transitions, and the adaptive route's traffic moved off the browned-out primary with no
//! breaker trip.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

/// The number after `label` on the report line that starts with it.
fn count(report: &str, label: &str) -> u64 {
    let line = report
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` line in the report:\n{report}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in `{line}`"))
}

/// A directory removed with what it holds when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_short_demo_rides_out_the_incident_without_a_failed_request() {
    // The demo keeps its files (audit database, log, config) in the temp dir for the user to
    // read after it; the test's run keeps them in a directory of its own, removed after.
    let scratch = Scratch(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("demo-{}", std::process::id())),
    );
    std::fs::create_dir_all(&scratch.0).expect("a scratch directory");
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["demo", "--duration", "20s"])
        .env("RUST_LOG", "warn")
        .env("TMPDIR", &scratch.0)
        .output()
        .expect("run switchyard demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let report = stdout
        .split("switchyard demo report:")
        .nth(1)
        .unwrap_or_else(|| panic!("no report:\n{stdout}"));
    for phase in [
        "healthy",
        "brownout",
        "brownout over",
        "latency spike",
        "primary outage",
        "partial recovery",
        "recovery",
        "total",
    ] {
        assert!(
            report.lines().any(|l| l.trim_start().starts_with(phase)),
            "no `{phase}` row:\n{report}"
        );
    }
    assert!(
        report.contains("client-visible success: 100.0%"),
        "{report}"
    );
    assert!(report.contains("; 0 failed)"), "{report}");
    assert!(count(report, "failovers:") > 0, "{report}");
    assert!(count(report, "breaker transitions:") > 0, "{report}");
    // The brownout moved the adaptive route's traffic off the primary, with no breaker trip.
    let brownout = report
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("brownout: "))
        .unwrap_or_else(|| panic!("no brownout line:\n{report}"));
    let shares: Vec<f64> = brownout
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('%').and_then(|n| n.parse().ok()))
        .collect();
    assert_eq!(shares.len(), 3, "{brownout}");
    // Twenty seconds leave the brownout two and about forty requests.
    assert!(shares[0] > 80.0 && shares[1] < 50.0, "{brownout}");
    assert!(brownout.contains("(0 breaker transitions)"), "{brownout}");
    assert!(
        count(report, "answers checked word for word:") > 100,
        "{report}"
    );
    assert!(
        report.contains("audit log:") && report.contains("audit.db ("),
        "{report}"
    );
    assert!(report.contains("/dashboard"), "{report}");
    // A session that failed over mid-conversation, and the command that shows it.
    let session = report
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("a session:"))
        .unwrap_or_else(|| panic!("no session line:\n{report}"));
    assert!(session.contains("failed over on turn"), "{session}");
    let command = report
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("switchyard audit") && l.contains("--session"))
        .unwrap_or_else(|| panic!("no session command:\n{report}"));
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let shown = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(&args)
        .output()
        .expect("run the report's audit command");
    let shown = String::from_utf8_lossy(&shown.stdout);
    let key = args.last().copied().unwrap_or_default();
    assert!(shown.starts_with(&format!("session {key}: ")), "{shown}");
    assert!(!shown.contains(" 0 failed over"), "{shown}");
    assert!(
        report.contains("result: every client request succeeded"),
        "{report}"
    );
    // Not a terminal: progress comes as plain lines, with no escape sequences.
    assert!(!stdout.contains('\u{1b}'), "{stdout}");
    assert!(stdout.contains("phase: primary outage"), "{stdout}");
}

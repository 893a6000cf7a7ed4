//! `switchyard demo`: the gateway and two mock providers in one process, agent-like traffic
//! through it, and a scripted incident on the primary (latency spike, outage, partial
//! recovery, recovery), told live and summed up in a report. No keys; nothing leaves
//! 127.0.0.1.
//!
//! Layout:
//! - `setup.rs`: the mocks, the demo's config (breaker timings scaled to `--duration`), the
//!   gateway's listener.
//! - `phases.rs`: the incident script: what the primary does in each phase, and when.
//! - `agent.rs`: one conversation (growing history, tool calls and their results) and the
//!   check of every answer, word for word.
//! - `traffic.rs`: the open-loop load generator and what it records per phase.
//! - `scrape.rs`: reading `/metrics`, `/admin/status` and `/admin/events` like an operator.
//! - `progress.rs`: the live display (in place on a terminal, plain lines otherwise).
//! - `report.rs`: the final table.
//!
//! The demo runs on its own runtime whose threads log to a file in the demo's directory, so
//! the gateway's warnings (every failed attempt is one) do not scribble over the display.

mod agent;
mod phases;
mod progress;
mod report;
mod run;
mod scrape;
mod setup;
mod traffic;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tracing::dispatcher::{self, DefaultGuard, Dispatch};

use crate::app::AppError;
use crate::config::parse_duration;

/// `switchyard demo` options.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// How long the scripted incident takes (at least 5s); phases scale with it.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Client requests per second (1 to 500).
    #[arg(long, default_value_t = 20)]
    pub rps: u32,
    /// After the report, keep the gateway, the mocks, the traffic and the dashboard up until
    /// Ctrl-C (the gateway on 127.0.0.1:8080 when that port is free).
    #[arg(long)]
    pub keep_running: bool,
}

/// Where the demo keeps its files: the audit database, the gateway log, the config it ran.
#[derive(Debug, Clone)]
pub struct DemoDir {
    /// The directory, under the system's temp dir.
    pub path: PathBuf,
}

impl DemoDir {
    fn create() -> std::io::Result<DemoDir> {
        let path = std::env::temp_dir().join(format!("switchyard-demo-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(DemoDir { path })
    }

    /// A file in the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

fn invalid(message: String) -> AppError {
    AppError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        message,
    ))
}

thread_local! {
    /// The demo runtime's threads log through this (see [`run`]).
    static LOG_GUARD: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// A subscriber writing to `file` with `RUST_LOG`'s filter (default `info`).
fn file_logger(file: std::fs::File) -> Dispatch {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    Dispatch::new(
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(Mutex::new(file))
            .finish(),
    )
}

/// Run the demo; an error (including "a client request failed") makes the exit status 1.
pub async fn run(args: DemoArgs) -> Result<(), AppError> {
    if args.duration < Duration::from_secs(5) || args.duration > Duration::from_secs(3600) {
        return Err(invalid(format!(
            "demo: --duration must be between 5s and 1h (got {:?})",
            args.duration
        )));
    }
    if !(1..=500).contains(&args.rps) {
        return Err(invalid(format!(
            "demo: --rps must be between 1 and 500 (got {})",
            args.rps
        )));
    }
    let dir = DemoDir::create()?;
    let log = file_logger(std::fs::File::create(dir.file("gateway.log"))?);
    let on_start = log.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("switchyard-demo")
        .on_thread_start(move || {
            let guard = dispatcher::set_default(&on_start);
            LOG_GUARD.with(|g| *g.borrow_mut() = Some(guard));
        })
        .on_thread_stop(|| LOG_GUARD.with(|g| drop(g.borrow_mut().take())))
        .build()?;
    // The demo's runtime blocks a thread of the outer one until it is done.
    let demo = tokio::task::spawn_blocking(move || {
        dispatcher::with_default(&log, || runtime.block_on(run::demo(args, dir)))
    });
    demo.await
        .map_err(|e| AppError::Io(std::io::Error::other(format!("demo: {e}"))))?
}

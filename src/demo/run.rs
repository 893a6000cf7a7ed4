//! The demo from start to end: start the mocks and the gateway, drive traffic through the
//! phases while showing progress, drain, report, and (with `--keep-running`) stay up.

use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::phases::{self, Scheduled};
use super::progress::{Progress, Status};
use super::report::Report;
use super::scrape::{Counters, Scraper};
use super::setup::{self, Mocks, BACKUP, CHAT_ROUTE, PRIMARY, TOOLS_ROUTE};
use super::traffic::{PhaseStats, Recorder, Traffic};
use super::{DemoArgs, DemoDir};
use crate::app::{self, AppError};
use crate::audit::{self, AuditQuery};
use crate::config::{AuditStore, Config};

/// How often the display is refreshed and the gateway scraped.
const TICK: Duration = Duration::from_millis(250);
/// How long requests still in flight at the end may take.
const DRAIN: Duration = Duration::from_secs(30);

fn other(e: impl std::fmt::Display) -> AppError {
    AppError::Io(std::io::Error::other(e.to_string()))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A gateway serving in a task of this runtime.
struct Gateway {
    base: String,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), AppError>>,
}

impl Gateway {
    async fn start(config: Config, keep_running: bool) -> Result<Gateway, AppError> {
        let state = app::build_state(config)?;
        let listener = setup::listener(keep_running).await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let mut task = tokio::spawn(app::serve(listener, state, async move {
            let _ = stopped.await;
        }));
        // `serve` opens the audit store before it answers; a failure there ends it at once.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if task.is_finished() {
            return match (&mut task).await {
                Ok(Err(e)) => Err(e),
                _ => Err(other("demo: the gateway stopped at start")),
            };
        }
        Ok(Gateway { base, stop, task })
    }

    async fn stop(self) -> Result<(), AppError> {
        let _ = self.stop.send(());
        self.task.await.map_err(other)?
    }
}

/// Scrape the gateway and refresh the display; returns the last event seen.
async fn refresh(
    scraper: &Scraper,
    progress: &mut Progress,
    seq: u64,
    start_ms: u64,
    status: (&str, Duration, Duration, &PhaseStats),
) -> u64 {
    let events = scraper.events(seq).await;
    progress.events(&events, start_ms);
    let counters = scraper.counters().await;
    let targets = scraper.targets().await;
    let (phase, elapsed, total, stats) = status;
    progress.status(&Status {
        elapsed,
        total,
        phase,
        stats,
        counters: &counters,
        targets: &targets,
    });
    events.last().map_or(seq, |e| e.seq)
}

fn totals(recorder: &Recorder) -> PhaseStats {
    let mut t = PhaseStats::empty();
    for p in recorder.snapshot() {
        t.merge(&p);
    }
    t
}

/// Run the demo in `dir`.
pub(super) async fn demo(args: DemoArgs, dir: DemoDir) -> Result<(), AppError> {
    let mocks = Mocks::start().await?;
    let audit_db = dir.file("audit.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", audit_db.display()));
    }
    let toml = setup::config_toml(&mocks, &audit_db, args.duration);
    let config_path = dir.file("switchyard.toml");
    std::fs::write(&config_path, &toml)?;
    let config = Config::from_toml(&toml, &|_| None)?;
    let gateway = Gateway::start(config, args.keep_running).await?;
    let base = gateway.base.clone();
    let scraper = Scraper::new(&base).map_err(other)?;

    let mut schedule = phases::schedule(args.duration);
    let plain_every = (args.duration / 15).max(Duration::from_secs(1));
    let mut progress = Progress::new(plain_every);
    progress.line(&format!(
        "switchyard demo: mock providers {PRIMARY} (openai) and {BACKUP} (azure) behind routes \
         {CHAT_ROUTE} and {TOOLS_ROUTE}\nagent traffic: {} requests/s for {}s (multi-turn, ~30% \
         streamed, some tool calls), every answer checked\ngateway: {base}   dashboard: \
         {base}/dashboard\nfiles: {}\n",
        args.rps,
        args.duration.as_secs(),
        dir.path.display()
    ));

    let recorder = Recorder::new(schedule.len());
    let t0 = Instant::now();
    let start_ms = unix_ms();
    let shared: Arc<Vec<Scheduled>> = Arc::new(schedule.clone());
    // A request sent in the last tick, just after the end, counts in the last phase.
    let last = shared.len() - 1;
    let phase_of = move || phases::index_at(&shared, t0.elapsed()).min(last);
    let traffic =
        Traffic::start(base.clone(), args.rps, recorder.clone(), phase_of).map_err(other)?;
    let mut ctrl_c = pin!(tokio::signal::ctrl_c());
    let (mut seq, mut snapshots, mut interrupted) = (0, Vec::new(), false);
    for p in &schedule {
        mocks.set_primary(p.kind.primary_plan());
        snapshots.push(scraper.counters().await);
        progress.phase(p, args.duration);
        while t0.elapsed() < p.end && !interrupted {
            let wait = (p.end - t0.elapsed()).min(TICK);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = &mut ctrl_c => interrupted = true,
            }
            let status = (
                p.kind.name(),
                t0.elapsed(),
                args.duration,
                &totals(&recorder),
            );
            seq = refresh(&scraper, &mut progress, seq, start_ms, status).await;
        }
        if interrupted {
            break;
        }
    }
    let stopped_at = t0.elapsed();
    traffic.stop(DRAIN).await;
    progress.finish();
    let end = scraper.counters().await;
    let events = scraper.events(seq).await;
    progress.events(&events, start_ms);
    seq = events.last().map_or(seq, |e| e.seq);

    schedule.truncate(snapshots.len());
    if let Some(last) = schedule.last_mut() {
        last.end = last.end.min(stopped_at);
    }
    let mut counters: Vec<Counters> = snapshots.windows(2).map(|w| w[1].since(&w[0])).collect();
    if let Some(last) = snapshots.last() {
        counters.push(end.since(last));
    }
    let dashboard = format!("{base}/dashboard");
    let keep = args.keep_running && !interrupted;
    let gateway = if keep {
        Some(gateway)
    } else {
        // Stopping flushes the audit log, so the count below is complete.
        gateway.stop().await?;
        None
    };
    let audit_path = audit_db.display().to_string();
    let store = AuditStore::Sqlite(audit_path.clone());
    let query = AuditQuery {
        limit: audit::query::MAX_LIMIT,
        ..AuditQuery::default()
    };
    let records = audit::query::query(&store, &query).await;
    let failed_over = records.as_deref().ok().and_then(failed_over_session);
    let audit = records
        .map(|r| (audit_path, r.len()))
        .map_err(|e| format!("could not be read: {e}"));
    let phases = recorder.snapshot();
    let report = Report {
        schedule: &schedule,
        phases: &phases,
        counters: &counters,
        rps: args.rps,
        audit,
        failed_over,
        gateway_log: dir.file("gateway.log").display().to_string(),
        config: config_path.display().to_string(),
        dashboard,
        keep_running: keep,
    };
    progress.line(&report.render());
    let total = report.total();

    if let Some(gateway) = gateway {
        stay_up(
            &args,
            &mocks,
            &scraper,
            &mut progress,
            seq,
            start_ms,
            recorder,
        )
        .await?;
        gateway.stop().await?;
    }
    mocks.shutdown().await;
    let failed = total.requests - total.ok;
    if interrupted {
        Err(other("demo: interrupted"))
    } else if failed > 0 || total.requests == 0 {
        Err(other(format!(
            "demo: {failed} of {} client requests failed",
            total.requests
        )))
    } else {
        Ok(())
    }
}

/// `--keep-running`: the primary healthy again, traffic on, breaker changes shown, until Ctrl-C.
async fn stay_up(
    args: &DemoArgs,
    mocks: &Mocks,
    scraper: &Scraper,
    progress: &mut Progress,
    mut seq: u64,
    start_ms: u64,
    recorder: Arc<Recorder>,
) -> Result<(), AppError> {
    mocks.set_primary(phases::primary_base());
    let base = scraper.base().to_owned();
    let after = usize::MAX;
    let traffic = Traffic::start(base.clone(), args.rps, recorder, move || after).map_err(other)?;
    progress.line(&format!(
        "\nStill running, with traffic at {}/s; Ctrl-C stops. Try:\n  open {base}/dashboard and press \
         \"open\" on {PRIMARY}/gpt-4o\n  curl -X PUT {}/mock/plan -d '{{\"status\":503}}'    # break the primary's gpt-4o\n  \
         curl -X PUT {}/mock/plan -d '{{}}'                # mend it",
        args.rps,
        mocks.primary.root_url(),
        mocks.primary.root_url(),
    ));
    let mut ctrl_c = pin!(tokio::signal::ctrl_c());
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut ctrl_c => break,
        }
        let events = scraper.events(seq).await;
        progress.events(&events, start_ms);
        seq = events.last().map_or(seq, |e| e.seq);
    }
    traffic.stop(Duration::from_secs(5)).await;
    progress.line("stopping: draining requests and flushing the audit log");
    Ok(())
}

/// A session that failed over mid-conversation (on a turn after its first), the longest such:
/// its key, the turn that failed over, its number of turns, and that turn's path.
fn failed_over_session(records: &[audit::AuditRecord]) -> Option<super::report::FailedOver> {
    let mut turns: std::collections::HashMap<&str, Vec<&audit::AuditRecord>> =
        std::collections::HashMap::new();
    for r in records {
        if let Some(s) = r.session.as_deref() {
            turns.entry(s).or_default().push(r);
        }
    }
    let tries = |r: &audit::AuditRecord| {
        (r.path.iter())
            .filter(|a| !a.outcome.starts_with("skipped_"))
            .count()
    };
    let mut best: Option<super::report::FailedOver> = None;
    for (session, mut t) in turns {
        t.sort_by_key(|r| r.time_ms);
        let Some(at) = t
            .iter()
            .skip(1)
            .position(|r| tries(r) > 1 && r.status == 200)
        else {
            continue;
        };
        if best.as_ref().is_none_or(|b| t.len() > b.turns) {
            best = Some(super::report::FailedOver {
                session: session.to_owned(),
                turn: at + 2,
                turns: t.len(),
                path: audit::show::compact_path(&t[at + 1].path),
            });
        }
    }
    best
}

//! The command line: `serve`, `check`, `demo`, `mock`, `audit`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::app::{self, AppError};
use crate::audit::{self, AuditError, AuditQuery};
use crate::config::{AuditStore, Config};

/// switchyard: an LLM gateway that keeps AI agents answering when a model provider fails.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve {
        /// Config file.
        #[arg(short, long, default_value = "switchyard.toml")]
        config: PathBuf,
    },
    /// Validate the config and print the resolved routing table.
    Check {
        /// Config file.
        #[arg(short, long, default_value = "switchyard.toml")]
        config: PathBuf,
    },
    /// Mock providers, the gateway and agent traffic through an outage and a recovery, in one
    /// process: live progress, then a report.
    Demo(crate::demo::DemoArgs),
    /// Run a fault-injecting mock provider (OpenAI Chat Completions and Responses, Azure,
    /// Anthropic and Gemini wire formats).
    Mock {
        /// Port to listen on (0 picks a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Name reported in `x-mock-name`.
        #[arg(long, default_value = "mock")]
        name: String,
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
    },
    /// Read the audit log: the newest records (printed oldest first), as a table or JSON.
    Audit {
        /// The audit database, `sqlite://FILE` or `postgres://USER@HOST/DB`; by default the
        /// config's `audit.store`, or `sqlite://switchyard-audit.db` without a config file.
        #[arg(long)]
        db: Option<String>,
        /// Config file that names the store when `--db` is not given.
        #[arg(short, long, default_value = "switchyard.toml")]
        config: PathBuf,
        /// How many records to show.
        #[arg(long, default_value_t = 20)]
        last: usize,
        /// Only the record of this request (its `x-switchyard-request-id`).
        #[arg(long)]
        request_id: Option<String>,
        /// One session's turns, in order (its `x-switchyard-session`, the client's own key,
        /// or the `prompt:` hash the gateway made), with a summary: failovers, hedges, turns
        /// dropped, time per turn.
        #[arg(long)]
        session: Option<String>,
        /// A summary instead of records: failovers per route and reason, latency and turns
        /// dropped per serving target, the share of sessions that saw a failover.
        #[arg(long, conflicts_with_all = ["session", "request_id"])]
        report: bool,
        /// With `--report`: over this long before now (`24h`, `30m`); default: every record,
        /// up to the newest 200,000.
        #[arg(long, requires = "report", value_parser = crate::config::parse_duration)]
        since: Option<std::time::Duration>,
        /// Print the records as a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Exit status for a bad config (EX_USAGE, as sysexits.h has it).
pub const EXIT_CONFIG: u8 = 64;

/// Run a command; the error decides the exit status in `main`.
pub async fn run(cli: Cli) -> Result<(), AppError> {
    match cli.command {
        Command::Serve { config: path } => {
            let config = Config::load(&path)?;
            let listen = config.server.listen;
            let workers = config.server.workers.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |n| n.get() as usize,
            );
            let state = app::build_state(config)?;
            let server = app::Server::bind(listen, workers)?;
            tracing::info!(addr = %server.local_addr(), workers, config = %path.display(), "switchyard listening");
            let watcher = tokio::spawn(app::watch_config(state.clone(), path));
            let result = server.run(state, app::shutdown_signal()).await;
            watcher.abort();
            result
        }
        Command::Check { config: path } => {
            let config = Config::load(&path)?;
            let table = config.routing_table();
            // What `serve` builds from the file, built and dropped: whatever it would refuse
            // (a provider it cannot make, a URL it cannot call) `check` refuses too. Nothing
            // is bound, connected or started.
            drop(app::build_state(config)?);
            write_stdout(&format!("{} is valid\n\n{table}\n", path.display()))?;
            Ok(())
        }
        Command::Demo(args) => crate::demo::run(args).await,
        Command::Mock { port, name, host } => {
            let listener = TcpListener::bind((host.as_str(), port)).await?;
            // Scripts read the mock's address.
            write_stdout(&format!(
                "mock {name} listening on http://{}\n",
                listener.local_addr()?
            ))?;
            crate::mock::serve(listener, name, app::shutdown_signal()).await?;
            Ok(())
        }
        Command::Audit {
            db,
            config,
            last,
            request_id,
            session,
            report,
            since,
            json,
        } => {
            let store = match db {
                Some(url) => audit::query::parse_db_url(&url)?,
                None => audit_store_of(&config)?,
            };
            if report {
                let q = AuditQuery {
                    since: since.map(|d| {
                        crate::clock::wall_ms_i64()
                            .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    }),
                    limit: audit::query::MAX_REPORT,
                    report: true,
                    ..Default::default()
                };
                let records = audit::query::query(&store, &q).await?;
                let rep = audit::report::report(&records);
                let out = if json {
                    serde_json::to_string_pretty(&rep)
                        .map_err(|e| AuditError::Invalid(e.to_string()))?
                } else {
                    audit::report::render(&rep)
                };
                write_stdout(&format!("{}\n", out.trim_end()))?;
                return Ok(());
            }
            let by_session = session.is_some();
            let q = AuditQuery {
                request_id,
                session,
                // A session's turns: all of them, up to the most one query returns.
                limit: if by_session {
                    audit::query::MAX_LIMIT
                } else {
                    last
                },
                ..Default::default()
            };
            let mut records = audit::query::query(&store, &q).await?;
            if !by_session {
                // Newest last, like the tail of a log (a session's come in order).
                records.reverse();
            }
            let out = if json {
                serde_json::to_string_pretty(&records)
                    .map_err(|e| AuditError::Invalid(e.to_string()))?
            } else if let Some(s) = &q.session {
                audit::show::session(s, &records)
            } else {
                audit::show::table(&records)
            };
            write_stdout(&format!("{}\n", out.trim_end()))?;
            Ok(())
        }
    }
}

/// Exit status when stdout's reader went away: 128 + SIGPIPE, what a shell reports for a
/// tool a closed pipe stopped.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// Write `text` to stdout, as is, and flush it. Every CLI output goes through here: Rust
/// ignores SIGPIPE, so a write to a pipe whose reader is gone (`switchyard check | head -1`)
/// fails, and `println!` would panic on it. Here it ends the process at once, quietly, with
/// [`EXIT_BROKEN_PIPE`], as a tool that SIGPIPE stops would: nobody reads what would follow.
/// Other write errors (a full disk) are returned.
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(EXIT_BROKEN_PIPE)
        }
        other => other,
    }
}

/// The store `switchyard audit` reads without `--db`: the config's, or the default file.
fn audit_store_of(path: &std::path::Path) -> Result<AuditStore, AppError> {
    if !path.exists() {
        return Ok(AuditStore::Sqlite("switchyard-audit.db".into()));
    }
    match Config::load(path)?.audit.store {
        AuditStore::Off => Err(AuditError::Invalid(format!(
            "the audit log is off in {}; name a database with --db",
            path.display()
        ))
        .into()),
        store => Ok(store),
    }
}

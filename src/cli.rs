//! The command line: `serve`, `check`, `mock`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tokio::net::TcpListener;

use crate::app::{self, AppError};
use crate::config::Config;

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
    /// Run a fault-injecting mock provider (OpenAI and Azure wire formats).
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
}

/// Exit status for a bad config (EX_USAGE, as sysexits.h has it).
pub const EXIT_CONFIG: u8 = 64;

/// Run a command; the error decides the exit status in `main`.
pub async fn run(cli: Cli) -> Result<(), AppError> {
    match cli.command {
        Command::Serve { config: path } => {
            let config = Config::load(&path)?;
            let listen = config.server.listen;
            let state = app::build_state(config)?;
            let listener = TcpListener::bind(listen).await?;
            tracing::info!(addr = %listener.local_addr()?, config = %path.display(), "switchyard listening");
            let watcher = tokio::spawn(app::watch_config(state.clone(), path));
            let result = app::serve(listener, state, app::shutdown_signal()).await;
            watcher.abort();
            result
        }
        Command::Check { config: path } => {
            let config = Config::load(&path)?;
            #[expect(clippy::print_stdout, reason = "check prints the routing table")]
            {
                println!("{} is valid\n\n{}", path.display(), config.routing_table());
            }
            Ok(())
        }
        Command::Mock { port, name, host } => {
            let listener = TcpListener::bind((host.as_str(), port)).await?;
            #[expect(clippy::print_stdout, reason = "scripts read the mock's address")]
            {
                println!("mock {name} listening on http://{}", listener.local_addr()?);
            }
            crate::mock::serve(listener, name, app::shutdown_signal()).await?;
            Ok(())
        }
    }
}

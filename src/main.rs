use std::process::ExitCode;

use clap::Parser;
use switchyard::app::AppError;
use switchyard::cli::{self, Cli};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard: {e}");
            match e {
                AppError::Config(_) => ExitCode::from(cli::EXIT_CONFIG),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

use std::process::ExitCode;

/// glibc's allocator costs a gateway ~15% of its CPU per request; mimalloc about a third of
/// that. Linked in as `malloc` itself (the `override` feature), not as Rust's global allocator:
/// the `mimalloc` crate's allocator asks for every block with its alignment, which mimalloc
/// serves on a slow path (over-allocation) for blocks over 1 KiB, 8 of a request's; Rust's
/// system allocator calls plain `malloc` for the alignments mimalloc always gives.
use mimalloc as _;

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
            // Not `eprintln!`: it panics when stderr is closed.
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "switchyard: {e}");
            match e {
                // A provider the file describes but that cannot be built is a config error.
                AppError::Config(_) | AppError::Provider(_) => ExitCode::from(cli::EXIT_CONFIG),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

//! The `intentgate` command: parses the command line, sets up logging and runs one command.
//!
//! Kept thin on purpose: each command lives in its own module and receives its parsed
//! arguments; errors travel as `anyhow` errors, are printed here with their causes, and end
//! the process with a non-zero status.

mod bench;
mod cli;
mod config_command;
mod demo;
mod faults;
mod mcp;
mod mock_provider;
mod serve;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// Log filter when `RUST_LOG` is unset: only what an operator must see.
const LOG_FILTER_DEFAULT: &str = "warn";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT));
    // Logs go to stderr so that stdout stays the command's output (a table or JSON).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::Serve(arguments) => serve::run(arguments).await,
        Command::Mcp(arguments) => mcp::run(arguments).await,
        Command::Demo(arguments) => demo::run(arguments).await,
        Command::MockProvider(arguments) => mock_provider::run(arguments).await,
        Command::Config(arguments) => config_command::run(arguments),
        Command::Bench(arguments) => bench::run(arguments).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line with every cause, for an operator; never a backtrace (those are for
            // bugs, which panic).
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

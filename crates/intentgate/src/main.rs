//! The `intentgate` command: parses the command line, sets up logging and runs one command.
//!
//! Kept thin on purpose: each command lives in its own module and receives its parsed
//! arguments; errors travel as `anyhow` errors, are printed here with their causes, and end
//! the process with a non-zero status.

mod audit;
mod bench;
mod cli;
mod config_command;
mod demo;
mod faults;
mod flags;
mod intents;
mod mcp;
mod mock_provider;
mod open_files;
mod reconcile;
mod serve;
mod smoke;
mod time;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// mimalloc instead of the system allocator: the gateway's tasks hand buffers between threads
/// (ledger pages, provider pages, responses), and glibc's malloc takes an arena lock for each
/// such free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Log filter when `RUST_LOG` is unset: only what an operator must see, and what a
/// long-running command says when it starts (its port, ledger and admin API).
const LOG_FILTER_DEFAULT: &str = "warn,intentgate::startup=info";
/// The environment variable that picks the log format: `text` (the default) or `json`.
const LOG_FORMAT_ENV: &str = "INTENTGATE_LOG_FORMAT";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    /// One human-readable line per event, with its spans' fields.
    Text,
    /// One JSON object per line: the event's fields at the top level, the current span's
    /// fields (a call's `tool`, `key` and `tenant`) under `span`.
    Json,
}

/// The log format [`LOG_FORMAT_ENV`] asks for; unset or empty is text.
fn log_format() -> Result<LogFormat, String> {
    let value = match std::env::var(LOG_FORMAT_ENV) {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => return Ok(LogFormat::Text),
        Err(std::env::VarError::NotUnicode(value)) => value.to_string_lossy().into_owned(),
    };
    match value.trim() {
        "" | "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!(
            "{LOG_FORMAT_ENV}={other:?} is not a log format; use `text` (the default) or `json`"
        )),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match log_format() {
        Ok(format) => format,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT));
    // Logs go to stderr so that stdout stays the command's output (a table or JSON).
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_ansi(false)
            .init(),
    }
    let result = match cli.command {
        Command::Serve(arguments) => serve::run(arguments).await,
        Command::Mcp(arguments) => mcp::run(arguments).await,
        Command::Demo(arguments) => demo::run(arguments).await,
        Command::MockProvider(arguments) => mock_provider::run(arguments).await,
        Command::Config(arguments) => config_command::run(arguments),
        Command::Bench(arguments) => bench::run(arguments).await,
        Command::Flags(arguments) => flags::run(arguments).await,
        Command::Intents(arguments) => intents::run(arguments).await,
        Command::Reconcile(arguments) => reconcile::run(arguments).await,
        Command::Audit(arguments) => audit::run(arguments).await,
        Command::Smoke(arguments) => smoke::run(arguments).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<Exit>() => {
            let exit = error.downcast::<Exit>().expect("checked above");
            eprintln!("{}", exit.message);
            ExitCode::from(exit.status)
        }
        Err(error) => {
            // One line with every cause, for an operator; never a backtrace (those are for
            // bugs, which panic).
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command's verdict that is not a failure of the command itself (`reconcile` found a
/// critical mismatch): printed as it is, with its own exit status, so that scripts can tell
/// "the check ran and failed" from "the check could not run" (status 1).
#[derive(Debug)]
pub struct Exit {
    pub status: u8,
    pub message: String,
}

impl Exit {
    pub fn new(status: u8, message: String) -> Exit {
        Exit { status, message }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

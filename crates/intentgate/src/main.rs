//! The `intentgate` command: parses the command line, sets up logging and traces
//! (`intentgate_runtime::logs`, `intentgate_runtime::telemetry`) and runs
//! one command.
//!
//! Kept thin on purpose: each command lives in its own module and receives its parsed
//! arguments; errors travel as `anyhow` errors, are printed here with their causes, and end
//! the process with a non-zero status.
mod audit;
mod auth;
mod cli;
mod config_command;
mod demo;
mod faults;
mod mcp;
mod mock_provider;
mod reconcile;
mod serve;
mod smoke;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// mimalloc instead of the system allocator: the gateway's tasks hand buffers between threads
/// (ledger pages, provider pages, responses), and glibc's malloc takes an arena lock for each
/// such free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let tracing = match start_traces(&cli.command) {
        Ok(tracing) => tracing,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(message) =
        intentgate_runtime::logs::init(tracing.as_ref().map(|tracing| tracing.tracer.clone()))
    {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Serve(arguments) => serve::run(arguments).await,
        Command::Mcp(arguments) => mcp::run(arguments).await,
        Command::Demo(arguments) => demo::run(arguments).await,
        Command::MockProvider(arguments) => mock_provider::run(arguments).await,
        Command::Config(arguments) => config_command::run(arguments),
        Command::Auth(arguments) => auth::run(arguments),
        Command::Bench(arguments) => intentgate_bench::run(arguments).await,
        Command::Flags(arguments) => intentgate_ledger_cli::flags::run(arguments).await,
        Command::Intents(arguments) => intentgate_ledger_cli::intents::run(arguments).await,
        Command::Approvals(arguments) => intentgate_ledger_cli::approvals::run(arguments).await,
        Command::Reconcile(arguments) => reconcile::run(arguments).await,
        Command::Audit(arguments) => audit::run(arguments).await,
        Command::Smoke(arguments) => smoke::run(arguments).await,
    };
    if tracing.is_some() {
        // The last spans (the shutdown's own) are sent before the process ends.
        tokio::task::block_in_place(intentgate_runtime::telemetry::shutdown);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is::<intentgate_terminal::Exit>() => {
            let exit = error
                .downcast::<intentgate_terminal::Exit>()
                .expect("checked above");
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

/// Starts exporting traces when a collector is named (`intentgate_runtime::telemetry`): by the standard
/// `OTEL_*` variables, or for `serve` and `mcp` by the config's `telemetry:` section. A
/// config that can't be read here is left to the command, which reports it in full.
fn start_traces(
    command: &Command,
) -> Result<Option<intentgate_runtime::telemetry::Tracing>, String> {
    let section = match command {
        Command::Serve(arguments) => intentgate_config::telemetry_section(&arguments.config)?,
        Command::Mcp(arguments) => intentgate_config::telemetry_section(&arguments.config)?,
        _ => intentgate_config::TelemetryConfig::default(),
    };
    let env = |name: &str| std::env::var(name).ok();
    match intentgate_runtime::telemetry::settings(&env, &section)? {
        Some(settings) => intentgate_runtime::telemetry::start(&settings).map(Some),
        None => Ok(None),
    }
}

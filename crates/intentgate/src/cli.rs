//! The command line, as clap definitions only: what each command and flag means.
//!
//! The commands run elsewhere (one module per command); `main` dispatches on [`Command`].
//! Flags that an operator may want to set once for a machine also read the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use intentgate_ledger::Durability;

use crate::bench::gateway::{CALLS_DEFAULT, CALLS_MAX};
use crate::bench::ledger::{INTENTS_DEFAULT, INTENTS_MAX, SEQUENTIAL_INTENTS_MAX};

/// The `intentgate` command.
#[derive(Debug, Parser)]
#[command(
    name = "intentgate",
    version,
    about = "A retry-safe tool gateway for AI agents.",
    long_about = "A retry-safe tool gateway for AI agents: it runs between agents and the APIs \
their tools call, and gives every side-effecting call one key per business intent, so that \
retries from the model, the framework, the HTTP client or the user land on the same answer \
instead of acting twice. After an ambiguous error it checks whether the effect happened \
instead of trying again blindly, and it keeps a durable ledger of every intent."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Every top-level command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the configured tools over HTTP, through the intent ledger.
    Serve(ServeArgs),
    /// Serve the configured tools over MCP on stdin and stdout, for an agent that starts
    /// intentgate as its MCP server (`intentgate serve` serves MCP over HTTP at /mcp).
    Mcp(McpArgs),
    /// Replay the double-refund incident: a naive wrapper against intentgate, side by side.
    Demo(DemoArgs),
    /// Run the mock payments provider (Stripe-like keys, seeded faults) for tests and demos.
    MockProvider(MockProviderArgs),
    /// Print the config file's JSON Schema, or check a config file.
    Config(ConfigArgs),
    /// Measure intentgate on this machine against the SPEC targets.
    Bench(BenchArgs),
}

/// `intentgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The tool config (YAML); `intentgate config check FILE` explains any error in it.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// Address to listen on (overrides `gateway.listen`; port 0 picks a free port).
    #[arg(long, env = "INTENTGATE_LISTEN")]
    pub listen: Option<String>,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL
    /// (postgres://user@host:port/database) shared by every replica.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// Durability of the ledger (overrides `gateway.durability`).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum)]
    pub durability: Option<DurabilityArgument>,
}

/// `intentgate mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The tool config (YAML); `intentgate config check FILE` explains any error in it.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL. Point
    /// every gateway process of one deployment (this one and `intentgate serve`) at the
    /// same ledger.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// Durability of the ledger (overrides `gateway.durability`).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum)]
    pub durability: Option<DurabilityArgument>,
}

/// `intentgate demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Customers, each wanting one refund.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub customers: u32,
    /// Seed of the customers, the agents' retries and the provider's faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fault plan of the mock provider: `stormy` (every fault shape, often), `none`, or a
    /// JSON file with the fields of `PUT /admin/faults`.
    #[arg(long, default_value = "stormy")]
    pub faults: String,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// `intentgate mock-provider`.
#[derive(Debug, Args)]
pub struct MockProviderArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, env = "INTENTGATE_MOCK_LISTEN", default_value = "127.0.0.1:8090")]
    pub listen: String,
    /// Fault plan: `none` (no faults, realistic latency), `quiet` (no faults, no latency),
    /// `stormy` (every fault shape, often), or a JSON file with the fields of
    /// `PUT /admin/faults`. Change it at runtime with `PUT /admin/faults`.
    #[arg(long, default_value = "none")]
    pub faults: String,
    /// Seed of the fault draws (overrides the plan's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Multiplies every latency (0.01 turns a 4.8 s p95 into 48 ms).
    #[arg(long)]
    pub latency_scale: Option<f64>,
}

/// `intentgate config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// What to do with a config.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the JSON Schema of the config file (for editors and CI).
    Schema,
    /// Check a config file: every error with its line, what is wrong and how to fix it.
    Check {
        /// The config file (YAML).
        file: PathBuf,
    },
}

/// `intentgate bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// Every benchmark.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Measure the overhead of a new side-effecting call through the gate and its ledger
    /// (SQLite, or PostgreSQL with --ledger), against one fsync of the same disk.
    #[command(
        long_about = "Measure the overhead of a new side-effecting call through the gate \
and its ledger.

Builds a fresh SQLite ledger in a temporary folder inside --dir (or, with --ledger URL, a \
fresh schema on that PostgreSQL database, dropped afterwards), and a gate with one side-effecting \
tool (refund_order) whose upstream answers at once, so only the gateway and the ledger are \
measured. In the same run it measures one fsync of the same disk (the baseline), the \
throughput of new intents with 1 caller and with 64 concurrent callers, and the latency of \
one new intent. It checks that every call returned `done` and that the ledger holds one \
intent per call, and compares the figures with the SPEC targets. The temporary folder is \
removed afterwards."
    )]
    Ledger(LedgerBenchArgs),
    /// Measure a call through the gateway's HTTP server against the same call made directly
    /// to the provider, and a repeated call against a bare HTTP round trip.
    #[command(
        long_about = "Measure the gateway over HTTP, against baselines measured in the same run.

Starts the mock payments provider (no faults, no latency) and the real gateway HTTP server \
in this process, on loopback ports, with the tools of examples/support-agent.yaml and a fresh \
SQLite ledger in a temporary folder inside --dir. With one keep-alive HTTP client it then \
measures, call by call and alternating between each pair so that both see the same machine:

  1. a new refund through the gateway (POST /v1/tools/refund_order/call) against the same \
refund sent directly to the provider (POST /v1/refunds): p50, p99, their ratio and the \
gateway's overhead;
  2. a repeated refund answered from the ledger (`already_done`) against GET /healthz of \
the same server (a bare HTTP round trip to an empty handler): p50, p99 and their ratio, \
beside the SPEC target (at most 2).

It checks that every new call returned `done`, every repeat `already_done`, every direct \
call succeeded, and that the provider holds exactly one refund per intent and per direct \
call. Both servers are shut down and the temporary folder removed afterwards."
    )]
    Gateway(GatewayBenchArgs),
}

/// `intentgate bench ledger`.
#[derive(Debug, Args)]
pub struct LedgerBenchArgs {
    /// The folder to measure in: the ledger and the fsync probe go in a temporary folder
    /// inside it. Pick a folder on the disk that will hold the real ledger.
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    // The help is built at run time so that it states the limits' actual values.
    #[arg(
        long,
        default_value_t = INTENTS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(INTENTS_MAX)),
        help = format!(
            "New intents per concurrency level (1 to {INTENTS_MAX}). The 1-caller level makes \
at most {SEQUENTIAL_INTENTS_MAX} of them, since under strict durability each costs an fsync"
        )
    )]
    pub intents: u32,

    /// What a ledger write promises before the upstream call: `strict` fsyncs it (survives a
    /// power loss), `relaxed` does not (survives a crash of the process).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum, default_value_t = DurabilityArgument::Strict)]
    pub durability: DurabilityArgument,

    /// Measure a PostgreSQL ledger instead (postgres://user@host:port/database): in a fresh
    /// schema named for the run, dropped afterwards. The fsync probe still runs in --dir.
    #[arg(long, value_name = "URL")]
    pub ledger: Option<String>,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `intentgate bench gateway`.
#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// The folder the ledger goes in (in a temporary folder inside it). Pick a folder on the
    /// disk that will hold the real ledger: under strict durability its fsyncs are measured.
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    // The help is built at run time so that it states the limit's actual value.
    #[arg(
        long,
        default_value_t = CALLS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(CALLS_MAX)),
        help = format!(
            "Measured calls of each kind (1 to {CALLS_MAX}): new refunds through the gateway, \
direct refunds, repeated refunds and health checks"
        )
    )]
    pub calls: u32,

    /// What a ledger write promises before the upstream call: `strict` fsyncs it (survives a
    /// power loss), `relaxed` does not (survives a crash of the process).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum, default_value_t = DurabilityArgument::Strict)]
    pub durability: DurabilityArgument,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The ledger's durability as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArgument {
    /// The write before the upstream call is on disk (fsync) before the request leaves.
    Strict,
    /// No fsync: survives a crash of the process, not a power loss.
    Relaxed,
}

impl DurabilityArgument {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityArgument::Strict => "strict",
            DurabilityArgument::Relaxed => "relaxed",
        }
    }
}

impl From<DurabilityArgument> for Durability {
    fn from(argument: DurabilityArgument) -> Durability {
        match argument {
            DurabilityArgument::Strict => Durability::Strict,
            DurabilityArgument::Relaxed => Durability::Relaxed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

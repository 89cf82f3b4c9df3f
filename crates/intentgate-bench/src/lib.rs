//! `intentgate bench`: measurements of this machine against the design targets (section 12
//! of `docs/design.md`), with their command-line arguments.
//!
//! Each benchmark measures its own baseline in the same run and reports ratios to it, so
//! that figures from different machines compare. None of them is a timed test. The binary's
//! `bench` command wraps [`BenchArgs`] and calls [`run`]; each benchmark's module holds its
//! flags (`LedgerBenchArgs` in `ledger.rs`, ...) next to the limits their help states.

pub mod gateway;
pub mod intents;
pub mod ledger;
mod loopback;
pub mod mcp;
mod measure;
pub mod policies;
mod proxy;
pub mod reconcile;

use clap::{Args, Subcommand};

use gateway::GatewayBenchArgs;
use intents::IntentsBenchArgs;
use ledger::LedgerBenchArgs;
use mcp::McpBenchArgs;
use policies::PoliciesBenchArgs;
use reconcile::ReconcileBenchArgs;

/// Runs the benchmark the command line names.
pub async fn run(arguments: BenchArgs) -> anyhow::Result<()> {
    match arguments.command {
        BenchCommand::Ledger(arguments) => ledger::run(arguments).await,
        BenchCommand::Gateway(arguments) => gateway::run(arguments).await,
        BenchCommand::Reconcile(arguments) => reconcile::run(arguments).await,
        BenchCommand::Intents(arguments) => intents::run(arguments).await,
        BenchCommand::Mcp(arguments) => mcp::run(arguments).await,
        BenchCommand::Policies(arguments) => policies::run(arguments).await,
    }
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
intent per call, and compares the figures with the design targets. The temporary folder is \
removed afterwards."
    )]
    Ledger(LedgerBenchArgs),
    /// Measure a call through the gateway's HTTP server against the same call made directly
    /// to the provider, and a repeated call against a bare HTTP round trip.
    #[command(
        long_about = "Measure the gateway over HTTP, against baselines measured in the same run.

Starts the mock payments provider (no faults, no latency), a bare forwarding proxy in front \
of it, and the real gateway HTTP server in this process, on loopback ports, with the tools of \
examples/support-agent.yaml and a fresh SQLite ledger in a temporary folder inside --dir (or \
PostgreSQL, with --ledger). With one keep-alive HTTP client it then measures, call by call \
and taking turns within each set so that all of a set see the same machine:

  1. a new refund through the gateway (POST /v1/tools/refund_order/call) against the same \
refund sent directly to the provider (POST /v1/refunds): p50, p99, their ratio and the \
gateway's overhead at p50 and p99; and the same refund through the proxy, which forwards it \
with the HTTP client the gateway's upstream calls use and does nothing else: what any hop in \
front of the provider costs (proxy minus direct), and what intentgate adds beyond it \
(gateway minus proxy), beside the design targets (strict: at most one fsync + 100 us at p50; \
relaxed: at most 100 us at p50; the gateway's p99 minus the proxy's p50 at most 3 x the p50 \
figure);
  2. a repeated refund answered from the ledger (`already_done`) against GET /healthz of \
the same server (a bare HTTP round trip to an empty handler): p50, p99 and their ratio, \
beside the design target (at most 1.5).

Then 64 concurrent callers make new refunds through the gateway (--concurrent-calls in \
all): their rate, p50 and p99, beside the rate of as many callers through the ledger alone (a \
gate whose upstream answers at once, on a new ledger of the same kind), whose design target \
is 20,000 new intents per second on SQLite and 3,000 on PostgreSQL (on 2 cores).

With --ledger postgres://... the gateway serves a PostgreSQL ledger (fresh schemas, dropped \
afterwards), and the paired series run again over a strict SQLite ledger: PostgreSQL's target \
is what the gateway adds beyond the proxy at p50, at most 1.5 x SQLite strict's, in the same \
run.

Then it measures one fsync of the ledger's disk (the strict target's allowance) and splits a \
new call's mean into its phases from the gate's own histograms: the HTTP round trip, the \
ledger's get and begin (on PostgreSQL its create, which does both in one round trip), the \
upstream request, and the rest of the gateway; the ledger's finish, committed after the call \
is answered, is shown apart.

It checks that every new call returned `done`, every repeat `already_done`, every direct or \
proxied call succeeded, and that the provider holds exactly one refund per intent and per \
direct or proxied call. The servers are shut down and the temporary folder removed \
afterwards."
    )]
    Gateway(GatewayBenchArgs),
    /// Measure reconciliation of a large window: 1,000,000 intents against about as many
    /// provider records, with the time and the peak memory.
    #[command(
        long_about = "Measure reconciliation of a large window (target: 1,000,000 intents \
against 1,000,000 provider records in under 10 s and under 1 GiB).

Fills a fresh SQLite ledger (in a temporary folder inside --dir, removed afterwards) with the \
intents of one side-effecting tool spread over an hour, then reconciles them against provider \
records generated a page (1,000 records) at a time, the way a provider's list hands them over. \
Every 10,000 intents hold one of each mismatch kind and one record made around the gateway; \
the run must find exactly those, or the benchmark fails. Reports the time, the peak resident \
memory during the run (Linux), and a baseline measured in the same run: a plain scan of the \
same intents through the same ledger query."
    )]
    Reconcile(ReconcileBenchArgs),
    /// Measure what the intent API (grant and settle, over HTTP) adds to a client-executed
    /// side effect, over the ledger's own cost of the same intent.
    #[command(
        long_about = "Measure what the intent API adds to a client-executed side effect.

Opens a fresh SQLite ledger in a temporary folder inside --dir, a gate with one \
client-executed tool (refund_order_sdk) over it, and the real gateway HTTP server on a \
loopback port, in this process. Each round then makes three new intents, one per series, in \
turn so that all three see the same machine:

  1. ledger: Ledger::begin then Ledger::finish (done) on the ledger directly, the baseline;
  2. gate: Gate::grant then Gate::settle in process;
  3. HTTP: POST /v1/tools/refund_order_sdk/intents then POST /v1/intents/{id}/settle over \
one keep-alive connection.

Reports each series' p50 and p99, and what the intent API adds over the ledger (HTTP minus \
ledger), split into the gate's share and the two HTTP round trips. It checks that every \
grant was `execute`, every settle `done`, that the ledger holds one done intent per intent \
made and that nothing was sent upstream. The temporary folder is removed afterwards."
    )]
    Intents(IntentsBenchArgs),
    /// Measure a side-effecting tool of an MCP server called through the gate (in process,
    /// over HTTP and over the gateway's MCP) against the same call made to the server directly.
    #[command(
        long_about = "Measure what the gateway adds to a call of an MCP server's tool.

Starts an MCP server with a `refund` tool (the official Rust SDK's server, Streamable HTTP on \
a loopback port, in this process), a fresh SQLite ledger in a temporary folder inside --dir, a \
gate whose side-effecting tool refund_order is performed on that server through the MCP \
upstream, and the real gateway HTTP server, which serves MCP at /mcp too. Each round then \
makes one new refund per series, the series taking turns to go first so that all of them see \
the same machine:

  1. direct: the SDK's client calls `refund` on the server, with a new idempotency key in \
_meta: the baseline;
  2. gate: Gate::call in process, over the MCP upstream;
  3. HTTP: POST /v1/tools/refund_order/call to the gateway over one keep-alive connection;
  4. MCP: the SDK's client calls refund_order on the gateway's /mcp.

Reports each series' p50 and p99, what each adds over the direct call at both, and the ratio \
of its p50 to the direct call's. It checks that every call through the gateway was `done`, that \
the server made exactly one refund per call and never replayed a key, and that the ledger holds \
one done intent per call through the gateway. The servers are shut down and the temporary \
folder removed afterwards."
    )]
    Mcp(McpBenchArgs),
    /// Measure what a side-effecting tool's approval policy and budgets cost a new call,
    /// against the same tool without policies, in one run.
    #[command(
        long_about = "Measure what approval and budget policies cost a new side-effecting call.

Opens a fresh SQLite ledger in a temporary folder inside --dir (or, with --ledger URL, a fresh \
schema on that PostgreSQL database, dropped afterwards) and one gate with three side-effecting \
refund tools whose upstream answers at once, so only the gate and the ledger are measured. Each \
round makes one new refund per tool through Gate::call, in process, the series taking turns to \
go first so that all of them see the same machine:

  1. refund_plain: no policies, the baseline;
  2. refund_approval: an approval policy (when: amount > 1000000.00) that no call reaches, so \
its condition is evaluated and nothing is held;
  3. refund_budget: two budgets never reached (a count per tool, an amount per tenant), which \
the ledger reads and counts in the transaction that creates the intent.

Reports each series' p50 and p99 and their ratios to refund_plain's, beside the design targets \
(refund_approval p50 at most 1.05 x plain, refund_budget p50 at most 1.25 x plain). It checks \
that every call was `done`, that the upstream saw one request per call, that the ledger holds \
one done intent per call and that the budgets counted every call of refund_budget and nothing \
of the other tools. The temporary folder is removed afterwards."
    )]
    Policies(PoliciesBenchArgs),
}

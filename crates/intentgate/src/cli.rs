//! The command line, as clap definitions only: what each command and flag means.
//!
//! The commands run elsewhere (one module per command); `main` dispatches on [`Command`].
//! Flags that an operator may want to set once for a machine also read the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use intentgate_terminal::DurabilityArgument;

use intentgate_bench::BenchArgs;
use intentgate_demo::DemoArgs;
use intentgate_ledger_cli::{ApprovalsArgs, FlagsArgs, IntentsArgs};

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
    #[command(
        long_about = "Serve the configured tools over HTTP, through the intent ledger.

Routes: GET /v1/tools; POST /v1/tools/{name}/call (tools the gateway executes); the intent \
API for tools with `executor: client`, which the caller's own code executes: POST \
/v1/tools/{name}/intents (a grant: answer, execute or look_up), POST /v1/intents/{id}/settle, \
POST /v1/intents/{id}/renew, GET /v1/intents/{id} (docs/intent-api.md; the Python client is \
clients/python); GET /v1/intents/{tool}/{key}; MCP over Streamable HTTP at /mcp; /healthz, \
/readyz, /metrics; and GET /openapi.json, the OpenAPI 3.1 document of these routes (and of \
the admin API's, when it is on). The sweeper runs in the same process, driving unknown \
intents to an answer.

With an admin token (or credentials that can carry the `admin` scope), the admin API is at \
/v1/admin/ and the operator console at /console: open http://<listen address>/console in a \
browser and sign in with the admin token or an admin-scoped API key (overview, intents, \
unknown intents, kill switch, reconciliation, alerts). Browsers keep its session cookie over \
plain HTTP only from localhost and 127.0.0.1; elsewhere serve it behind HTTPS.

MCP upstreams (`kind: mcp` in `upstreams:`) are started (stdio) or connected to (Streamable \
HTTP) before anything is served, and their tools listed; a server that does not start, an \
imported tool the config does not classify, or a call of a tool the server does not list \
stops the start with a fix per problem (docs/mcp-upstreams.md).

Traces (OpenTelemetry, OTLP over HTTP) are off until a collector is named: OTEL_EXPORTER_OTLP_ENDPOINT (spans go to its /v1/traces) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or `telemetry.endpoint` in the config; OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME and OTEL_TRACES_SAMPLER(_ARG) as usual. A call continues the caller's W3C `traceparent` (HTTP header, or `_meta.traceparent` over MCP) and sends its own upstream. Spans a slow collector can't take are dropped and counted in intentgate_trace_spans_dropped_total."
    )]
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
    /// Make API keys for the `auth.api_keys` section of the config.
    Auth(AuthArgs),
    /// Measure intentgate on this machine against the design targets.
    Bench(BenchArgs),
    /// The kill switch: switch a tool off or on for every gateway sharing the ledger, or
    /// list which tools are off.
    Flags(FlagsArgs),
    /// List, show and resolve intents (an unknown intent as `done` or `not_executed`), reopen
    /// a rejected one whose refusal was the gateway's own error, and erase a tenant's on
    /// request, on the ledger directly.
    Intents(IntentsArgs),
    /// List the intents held for approval, and approve or deny one, on the ledger directly
    /// (the admin API and the console do the same with the `approve` scope).
    Approvals(ApprovalsArgs),
    /// Check a config (and prompts, observed latencies, an MCP server's tools) for what
    /// makes retries act twice; non-zero exit for CI.
    #[command(
        long_about = "Check a config, and optionally the agent's prompts, observed upstream \
latencies and a live MCP server's tools, for what makes retries act twice. Nothing is called \
and nothing is written (a config's MCP upstreams are started, to list their tools).

Checks (each finding has a severity, a rule id, a file:line:column, what is wrong and a fix):

  config                      the loader's errors (per-attempt-key: a key built from \
{tool_call_id}, a timestamp...; no-effect)
  tool-classified             every tool's effect and where a side effect's key comes from
  kill-switch                 the tools behind the gateway, which the kill switch covers
  no-lookup                   a side effect whose ambiguous errors can't be resolved (error)
  import-classified           the config's MCP upstreams started and listed: how each \
imported tool is classified (import-unclassified: one the gateway would refuse; \
mcp-upstream-down: a server that did not start)
  no-owner, no-list           nobody hears of its mismatches; reconciliation can't compare it
  per-attempt-argument        a key argument named or typed (format: uuid, date-time) like a \
per-attempt value
  timeout-below-p99/-p50      --latency: a timeout below the upstream's observed latency
  prompt-retry-side-effect    --prompts: a line telling the model to retry a side-effecting \
tool (error); prompt-retry-generic: retry advice naming no tool (warning). \
\"Do not retry\" is fine.
  no-kill-switch              --mcp-server: a server tool not in the config, so not behind \
the gateway
  mcp-side-effect-by-default  --mcp-server: neither readOnlyHint nor idempotentHint true
  missing-once-per-sentence   a side effect's description lacks \"once per ...\"

--latency FILE is JSON by tool name: {\"refund_order\": {\"p50_ms\": 800, \"p99_ms\": 6200}} \
(p50_ms optional) or raw samples in milliseconds {\"refund_order\": [640, 720, 6100]}. The \
ledger keeps no per-call latencies today, so --ledger does not supply them.

Needs none of the upstreams' secrets: an unset `${NAME}` is an `unset-variable` warning. An \
MCP server that uses one is not started, so its imported tools are not audited.

Exit status: 0 when no error-level finding exists, 2 when one does, 1 when the audit could \
not run (a missing file, an MCP server that did not list its tools within 10 s)."
    )]
    Audit(AuditArgs),
    /// Compare the ledger with each side-effecting tool's provider records over a window:
    /// resolve what is proved, report every mismatch to the tool's owner.
    #[command(
        long_about = "Compare the ledger with each side-effecting tool's provider \
records over a window, and report every mismatch to the tool's owner.

For every side-effecting tool with a `list` in the config, the provider's records created in \
the window are paged through (one page in memory at a time) and matched to the intents first \
seen in the window by the intent key the gateway sent with each effect (or by the list's \
`match` fields). A list is an HTTP request, or a tool of the call's MCP server; the MCP \
upstreams are started for the run when a tool lists through one. Mismatches:

  unknown_found          an unknown intent the provider has: resolved to done (info)
  unknown_missing        an unknown intent the provider lacks, past the grace period: the owner decides
  no_intent              a provider record no intent explains: someone bypassed the gateway
  missing_record         a done intent with no provider record
  duplicate              several provider records for one intent (critical)
  amount                 the provider's amount differs from the intent's
  effect_despite_status  the model was told rejected/not_executed, the provider has it (critical)

The report names who was affected (the record's subject, the intent's key, arguments and \
provider ids). Each owner gets one notice per tool: a log line and, if configured, a webhook. \
The run and its mismatches are stored in the ledger. `intentgate serve` runs the same job \
every `reconcile.every_seconds` (hourly by default).

It reads the providers' records, so it needs the upstreams' secrets: an unset `${NAME}` stops \
it before anything is read, naming the variable and where it is used. The ledger's absolute \
path is printed on stderr.

Exit status: 0 when nothing critical was found, 2 when a critical mismatch exists, 3 when a \
tool could not be reconciled (its provider listing failed), 1 when the run could not start."
    )]
    Reconcile(ReconcileArgs),
    /// A deploy gate: for each side-effecting tool, inject an ambiguous failure, ask again
    /// as users and frameworks do, and check that exactly one effect exists.
    #[command(
        long_about = "A deploy gate: for each side-effecting tool of the config, prove that \
an ambiguous failure followed by retries makes exactly one effect, and that the kill switch \
holds.

The config is loaded as `serve` loads it, and a real gate is built over a fresh SQLite ledger \
in a temporary folder (with a random hash key for sensitive arguments when the variable that \
`gateway.hash_key` names is unset: that ledger is thrown away). By default every upstream is replaced by the built-in mock payments \
provider, started in this process (a tool whose request the mock does not serve fails, and \
says to use --live). The mock speaks its own JSON API, or with --mock-dialect stripe Stripe's \
v1 API (form bodies, amounts in minor units, lists paged by starting_after/has_more; it serves \
POST /v1/refunds and POST /v1/payment_intents), which a config written for Stripe such as \
examples/stripe.yaml needs. With --live the configured upstreams (a sandbox, never production) are \
called as they are, through a loopback proxy that injects the failure. For each tool:

  1. valid arguments are made from its input schema (enum: the first value, email: \
smoke+...@example.com, simple patterns, number and length bounds) and checked by the gate; \
a key that uses {intent_id} gets a generated intent id, the same for every repeat;
  2. the effect is requested and the provider commits it but the answer is lost (the \
connection is cut after the request);
  3. the same call is repeated 3 times one after another and 3 times at once: every answer \
must be done or already_done, and the provider must hold exactly one effect for the intent \
(the mock's effect log; with --live the tool's `list`, by provider key or `match`). A tool with \
no `lookup` can't resolve the ambiguity and fails;
  4. the tool's lookup, called as the gate calls it, for intents that differ in one business \
field of the key each (or only in the intent id): each must find the effect its own call \
made, never another's; for intents never executed it must find nothing;
  5. the tool is switched off in the ledger: within 1.5 s a call must answer disabled and a \
new intent must send nothing; switched on again, that intent must be done, once.

Prints a table (or, with --format json, one JSON object) with each tool's steps and why any \
failed.

Exit status: 0 when every tool passed, 2 when a check failed, 1 when the smoke could not run \
(the config was refused: its errors are printed; a key built from a per-attempt value such as \
{tool_call_id} is refused there)."
    )]
    Smoke(SmokeArgs),
}

/// `intentgate smoke`.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    /// The tool config (YAML) to check before deploying it.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// Call the configured upstreams (a sandbox) instead of the built-in mock provider; the
    /// ambiguous failure is injected by a loopback proxy in front of them.
    #[arg(long)]
    pub live: bool,
    /// What the built-in mock provider speaks: `json` (its own API: JSON bodies, decimal
    /// amounts) or `stripe` (Stripe's v1 API: form bodies in bracket notation, amounts in
    /// minor units, Stripe's lists and key layer; serves POST /v1/refunds and POST
    /// /v1/payment_intents). A config written for Stripe, such as examples/stripe.yaml,
    /// needs `stripe`. Not with --live.
    #[arg(long, value_enum, default_value_t = MockDialect::Json, conflicts_with = "live")]
    pub mock_dialect: MockDialect,
    /// `text` (a table) or `json` (one object with every tool's results).
    #[arg(long, value_enum, default_value_t = SmokeFormat::Text)]
    pub format: SmokeFormat,
}

/// What the built-in mock provider speaks (`smoke --mock-dialect`, `demo --provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MockDialect {
    /// The mock's own API: JSON bodies, decimal amounts.
    Json,
    /// Stripe's v1 API: form bodies, amounts in minor units, Stripe's lists.
    Stripe,
}

impl MockDialect {
    pub fn dialect(self) -> intentgate_mock::Dialect {
        match self {
            MockDialect::Json => intentgate_mock::Dialect::Json,
            MockDialect::Stripe => intentgate_mock::Dialect::Stripe,
        }
    }
}

/// How `smoke` prints its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SmokeFormat {
    /// A table.
    Text,
    /// One JSON object.
    Json,
}

/// `intentgate reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// The tool config (YAML): the tools' list requests, owners and the grace period. It
    /// lists the providers' records, so every `${NAME}` its upstreams use must be set.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// The ledger (overrides `gateway.ledger`): a SQLite file or a PostgreSQL URL. A
    /// relative path is read from the working directory (a relative `gateway.ledger`, from
    /// the config file's folder); the absolute one is printed on stderr.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// How far back to compare: 30s, 15m, 1h, 2d. The newest `reconcile.settle_seconds`
    /// are left out (calls still being written).
    #[arg(long, default_value = "1h")]
    pub since: String,
    /// `text` (a table and one line per mismatch) or `json` (one JSON object per line:
    /// each mismatch, then a summary).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// Who runs it, in the event log of every intent it resolves.
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
}

/// `intentgate audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The tool config (YAML) to audit.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// A folder of prompt files (.txt, .md, .markdown, .yaml, .yml, .json; symlinks not
    /// followed, files over 1 MiB skipped, at most 10,000 files), or one file.
    #[arg(long, value_name = "DIR")]
    pub prompts: Option<PathBuf>,
    /// An MCP server whose tools to list: an http(s) URL (Streamable HTTP), or a command
    /// line started as a child process speaking MCP on stdio.
    #[arg(long, value_name = "CMD|URL")]
    pub mcp_server: Option<String>,
    /// Observed latencies by tool (JSON: `{"tool": {"p50_ms": N, "p99_ms": N}}` or
    /// `{"tool": [ms, ...]}`), compared with each tool's `timeout_ms`.
    #[arg(long, value_name = "FILE")]
    pub latency: Option<PathBuf>,
    /// The ledger (accepted for symmetry with other commands; it keeps no per-call
    /// latencies yet, so use --latency).
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// `text` (for a person), `json` (one object: findings and summary) or `sarif` (SARIF
    /// 2.1.0, for code scanning in CI).
    #[arg(long, value_enum, default_value_t = AuditFormat::Text)]
    pub format: AuditFormat,
}

/// How `audit` prints its findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    /// `file:line:col: severity[rule] message`, with a fix line.
    Text,
    /// One JSON object.
    Json,
    /// SARIF 2.1.0.
    Sarif,
}

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// For a human.
    Text,
    /// For a program: JSON lines.
    Json,
}

/// `intentgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The tool config (YAML); `intentgate config check FILE` explains any error in it.
    /// When a tool marks an argument `sensitive: true`, the variable `gateway.hash_key`
    /// names (INTENTGATE_HASH_KEY in the example) must hold the ledger's hash key. Every
    /// `${NAME}` without a default must be set: the gateway refuses to start otherwise,
    /// naming the variable and where it is used.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// Address to listen on (overrides `gateway.listen`; port 0 picks a free port).
    #[arg(long, env = "INTENTGATE_LISTEN")]
    pub listen: Option<String>,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL
    /// (postgres://user@host:port/database) shared by every replica. A relative path is
    /// read from the working directory, as a shell reads it; a relative `gateway.ledger`
    /// is read from the config file's folder. The absolute path is logged at start.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// Durability of the ledger (overrides `gateway.durability`).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum)]
    pub durability: Option<DurabilityArgument>,
    /// Turns the admin API on (/v1/admin/: flags, intents, reconciliation) and the operator
    /// console (/console, signed in with this token): the bearer token its requests must
    /// carry, at least 32 bytes (make one with `openssl rand -hex 32`). Prefer the
    /// environment variable: a command-line value is visible in the process list. Without it
    /// the admin API is off. The owner's notice of a call held for approval links to the
    /// intent's console page, from the address in INTENTGATE_PUBLIC_URL when it is set
    /// (`https://intentgate.example.com`), else as a path.
    #[arg(
        long,
        env = "INTENTGATE_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<AdminToken>,
}

/// A secret flag value: `Debug` never shows it.
#[derive(Clone)]
pub struct AdminToken(pub String);

impl std::str::FromStr for AdminToken {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<AdminToken, Self::Err> {
        Ok(AdminToken(text.to_owned()))
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<hidden>)")
    }
}

/// `intentgate mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The tool config (YAML); `intentgate config check FILE` explains any error in it.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL. Point
    /// every gateway process of one deployment (this one and `intentgate serve`) at the
    /// same ledger. A relative path is read from the working directory; a relative
    /// `gateway.ledger` from the config file's folder. The absolute path is logged (on
    /// stderr) at start.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
    /// Durability of the ledger (overrides `gateway.durability`).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum)]
    pub durability: Option<DurabilityArgument>,
}

/// `intentgate auth`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub command: AuthCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Make a random API key: prints the key once (give it to the caller, keep it in its
    /// secret store) and the config entry that holds only its SHA-256 digest.
    NewKey(NewKeyArgs),
}

/// `intentgate auth new-key`.
#[derive(Debug, Args)]
pub struct NewKeyArgs {
    /// Who holds the key, named in logs (`support-agent`).
    #[arg(long)]
    pub name: String,
    /// The tenant every call made with the key belongs to.
    #[arg(long)]
    pub tenant: String,
    /// What the key may do: `call`, `intents:read`, `admin` (repeat or separate with commas).
    #[arg(long, value_delimiter = ',', default_value = "call")]
    pub scopes: Vec<String>,
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
    /// What the side effects speak: `json` (the mock's own API) or `stripe` (Stripe's v1 API
    /// on /v1/refunds and /v1/payment_intents, with cancel: form bodies in bracket notation,
    /// amounts in minor units, Stripe's lists and `Idempotent-Replayed` replays; see
    /// docs/mock-provider.md).
    #[arg(long, default_value = "json", value_parser = ["json", "stripe"])]
    pub dialect: String,
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
    #[command(
        long_about = "Check a config file: every error with its line, what is wrong and how to \
fix it. Exits non-zero when there is any.

Needs none of the upstreams' secrets: an unset `${NAME}` (without a `:-default`) is a warning \
on stderr naming the variable and where it is used, not an error, so CI can check a config \
without credentials. `serve`, `mcp`, `smoke` and `reconcile` refuse to start until each is set. \
A variable that is set is checked (a base URL must be a URL, the hash key long enough)."
    )]
    Check {
        /// The config file (YAML).
        file: PathBuf,
    },
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

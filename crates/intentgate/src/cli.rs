//! The command line, as clap definitions only: what each command and flag means.
//!
//! The commands run elsewhere (one module per command); `main` dispatches on [`Command`].
//! Flags that an operator may want to set once for a machine also read the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use intentgate_core::IntentStatus;
use intentgate_terminal::DurabilityArgument;

use intentgate_bench::BenchArgs;
use intentgate_demo::DemoArgs;

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

/// `intentgate flags`.
#[derive(Debug, Args)]
pub struct FlagsArgs {
    #[command(subcommand)]
    pub command: FlagsCommand,
}

/// What to do with the kill-switch flags. Each works on the ledger directly, whether or
/// not a gateway is running.
#[derive(Debug, Subcommand)]
pub enum FlagsCommand {
    /// List every tool of the config as on or off, with the reason, who and when.
    #[command(
        long_about = "List every tool of the config as on or off, with the reason, who \
switched it and when (UTC), as stored in the ledger. Flags stored for tools that are no longer \
in the config are listed too, marked as such. A switch is honoured by every gateway sharing \
the ledger within a second."
    )]
    List(FlagsListArgs),
    /// Switch a tool off: every gateway sharing the ledger answers its calls with status
    /// `disabled` within a second.
    #[command(long_about = "Switch a tool off (the kill switch).

The flag is written to the ledger, so it is honoured by every gateway sharing the ledger within a \
second (`intentgate serve` replicas and `intentgate mcp`), whether or not one is running now: \
calls to the tool do nothing and return status `disabled` (the model is told a person will \
follow up), while the agent keeps running. MCP clients connected over stdio are told that the \
tool list changed. `intentgate flags enable TOOL` switches it back on.")]
    Disable(FlagsDisableArgs),
    /// Switch a tool back on: every gateway sharing the ledger runs its calls again within
    /// a second.
    #[command(long_about = "Switch a tool back on.

The flag is written to the ledger, so it is honoured by every gateway sharing the ledger within a \
second (`intentgate serve` replicas and `intentgate mcp`): calls to the tool run again. \
MCP clients connected over stdio are told that the tool list changed.")]
    Enable(FlagsEnableArgs),
}

/// Where the flags live: the config names the tools and, unless --ledger is given, the
/// ledger and its durability.
#[derive(Debug, Args)]
pub struct FlagsLedgerArgs {
    /// The tool config (YAML) of the gateways: its tool names, and its `gateway.ledger`.
    /// Its upstreams' secrets (`${NAME}`) need not be set: flags call no upstream.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
    /// The ledger (overrides `gateway.ledger`): a SQLite file, or a PostgreSQL URL. The
    /// one every gateway of the deployment uses. A relative path is read from the working
    /// directory (a relative `gateway.ledger`, from the config file's folder); the absolute
    /// one is printed on stderr.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
}

/// `intentgate flags list`.
#[derive(Debug, Args)]
pub struct FlagsListArgs {
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
    /// `text` (a table) or `json` (one object).
    #[arg(long, value_enum, default_value_t = FlagsFormat::Text)]
    pub format: FlagsFormat,
}

/// `intentgate flags disable`.
#[derive(Debug, Args)]
pub struct FlagsDisableArgs {
    /// The tool to switch off, as named in the config.
    pub tool: String,
    /// Why it is switched off, for whoever reads the list next (stored in the ledger and
    /// its event log).
    #[arg(long)]
    pub reason: String,
    /// Who switches it off.
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
}

/// `intentgate flags enable`.
#[derive(Debug, Args)]
pub struct FlagsEnableArgs {
    /// The tool to switch back on, as named in the config.
    pub tool: String,
    /// Why it is switched back on (stored in the ledger and its event log).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who switches it on.
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: FlagsLedgerArgs,
}

/// How `flags list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlagsFormat {
    /// A table.
    Text,
    /// One JSON object.
    Json,
}

/// `intentgate intents`.
#[derive(Debug, Args)]
pub struct IntentsArgs {
    #[command(subcommand)]
    pub command: IntentsCommand,
}

/// What to do with intents. Each works on the ledger directly, whether or not a gateway is
/// running.
#[derive(Debug, Subcommand)]
pub enum IntentsCommand {
    /// List intents, newest first: id, tenant, tool, key, status, calls, attempts, when
    /// first seen (UTC) and the provider's external id.
    List(IntentsListArgs),
    /// Show one intent and its event log.
    Show(IntentsShowArgs),
    /// Resolve an intent by hand: `done` with the provider's external id, or `not_executed`.
    #[command(
        long_about = "Resolve an intent by hand: `done` with the provider's external id \
(the effect happened), or `not_executed` (it certainly did not).

Only an intent whose outcome is unknown (or left in_flight with an expired lease) can be \
resolved; a done or otherwise settled intent can't be changed. Check the provider first (its \
dashboard, or a lookup by the intent key). The change is written to the intent's event log with \
--actor and --reason, and every repeat of the call then gets the resolved answer: `done` \
replays the external id as already_done, `not_executed` lets the next call try again. A \
rejected intent is not resolved but reopened (`intentgate intents reopen`)."
    )]
    Resolve(IntentsResolveArgs),
    /// Reopen a rejected intent whose refusal was the gateway's own error (a wrong API key,
    /// a wrong route): it becomes `not_executed`, and the next call executes it.
    #[command(
        long_about = "Reopen a rejected intent whose stored refusal was wrong: the provider \
refused the gateway, not the customer's request (a wrong or expired API key answered 401, a \
key without a permission 403, a misconfigured route 404), and every repeat of the call has been \
answered with that refusal since.

Fix the gateway's config first (and restart it), then reopen: the intent becomes not_executed, \
its stored refusal is dropped and its provider idempotency key moves to a new epoch (`#2`, as \
a retry of a rejection does: the refused attempt did nothing, and a provider that stored its \
refusal under the old key would replay it). The next call of the tool with the same arguments \
then executes it, once. Only a rejected intent can be reopened; an unknown one is resolved \
(`intentgate intents resolve`), a done one is final.

The intent is named by its tool and key, as `intentgate intents list --status rejected` and the \
gateway's log lines show them, within --tenant. The change is written to the intent's event \
log (kind `reopen`) with --actor and --reason.

Since calls that fail because the gateway is misconfigured now end not_executed rather than \
rejected, this is for refusals stored before that, or by an older gateway."
    )]
    Reopen(IntentsReopenArgs),
    /// Erase a tenant's intents (or one tool's, or one key's) on request, with their events.
    #[command(
        long_about = "Erase a tenant's intents (or one tool's, or one intent key's) on request, \
with their event log and the reconciliation mismatches that name them: for a customer who \
leaves, or a data-protection request.

Settled intents (done, rejected, not_executed) are erased. An intent that is not settled \
(pending, in flight, unknown) may have had its effect; once erased the gateway forgets it, and \
a repeat of its call would execute again: such intents are refused unless --force is given \
(resolve them first with `intentgate intents resolve`). An intent a call holds right now is \
never erased. A repeat of an erased intent's call is a new intent, so erase only what no agent \
will ask for again.

The erasure is written to the ledger's event log (kind `erased`: tenant, tool, counts, actor \
and reason, never what was erased) and to this command's log (stderr). Keep personal data out \
of --reason. SQLite overwrites deleted rows and truncates its WAL when it can; PostgreSQL keeps \
deleted rows until VACUUM reclaims them."
    )]
    Erase(IntentsEraseArgs),
}

/// Which ledger: the config's `gateway.ledger`, or --ledger.
#[derive(Debug, Args)]
pub struct IntentsLedgerArgs {
    /// The tool config (YAML) of the gateways: its `gateway.ledger` is the ledger read (a
    /// relative path from the config file's folder). Its upstreams' secrets (`${NAME}`)
    /// need not be set: these commands call no upstream.
    #[arg(long, env = "INTENTGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The ledger (overrides the config's `gateway.ledger`): a SQLite file, or a PostgreSQL
    /// URL. The one the gateways use. A relative path is read from the working directory;
    /// the absolute one is printed on stderr.
    #[arg(long, env = "INTENTGATE_LEDGER")]
    pub ledger: Option<String>,
}

/// `intentgate intents list`.
#[derive(Debug, Args)]
pub struct IntentsListArgs {
    /// Only this tool's intents.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only intents in this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArgument>,
    /// Only this tenant's intents.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only the intent with this key.
    #[arg(long)]
    pub key: Option<String>,
    /// Most intents listed.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limit: u32,
    /// Oldest first instead of newest first.
    #[arg(long)]
    pub oldest: bool,
    /// `text` (a table) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents show`.
#[derive(Debug, Args)]
pub struct IntentsShowArgs {
    /// The intent's id (the first column of `intents list`).
    pub id: i64,
    /// `text` or `json` (one object: the intent and its events).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents resolve`.
#[derive(Debug, Args)]
pub struct IntentsResolveArgs {
    /// The intent's id (the first column of `intents list`).
    pub id: i64,
    /// What happened: `done` (needs --external-id) or `not_executed`.
    #[arg(long, value_enum)]
    pub status: ManualStatusArgument,
    /// The provider's id for the effect (the refund's or charge's id); required for `done`.
    #[arg(long)]
    pub external_id: Option<String>,
    /// Why: what the provider or the customer showed. Written to the event log.
    #[arg(long)]
    pub reason: String,
    /// Who resolves it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents reopen`.
#[derive(Debug, Args)]
pub struct IntentsReopenArgs {
    /// The intent's tool (the TOOL column of `intents list`).
    pub tool: String,
    /// The intent's key (the KEY column of `intents list`).
    pub key: String,
    /// The intent's tenant.
    #[arg(long, default_value = "default")]
    pub tenant: String,
    /// Why the stored refusal was wrong (the misconfiguration, and that it is fixed).
    /// Written to the event log.
    #[arg(long)]
    pub reason: String,
    /// Who reopens it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate intents erase`.
#[derive(Debug, Args)]
pub struct IntentsEraseArgs {
    /// Whose data: the tenant's intents.
    #[arg(long)]
    pub tenant: String,
    /// Only this tool's intents of the tenant.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only the intent with this key (as `intents list` shows it); needs --tool.
    #[arg(long, requires = "tool")]
    pub key: Option<String>,
    /// Why: the request this answers. Kept in the event log, so name no personal data.
    #[arg(long)]
    pub reason: String,
    /// Who asks for it (written to the event log).
    #[arg(long, env = "USER", default_value = "cli")]
    pub actor: String,
    /// Also erase intents that are not settled (pending, in flight with an expired lease,
    /// unknown), whose effect may have happened.
    #[arg(long)]
    pub force: bool,
    /// `text` (one line) or `json` (one object with the counts).
    #[arg(long, value_enum, default_value_t = IntentsFormat::Text)]
    pub format: IntentsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// An intent status as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArgument {
    #[value(name = "pending")]
    Pending,
    #[value(name = "in_flight")]
    InFlight,
    #[value(name = "done")]
    Done,
    #[value(name = "rejected")]
    Rejected,
    #[value(name = "not_executed")]
    NotExecuted,
    #[value(name = "unknown")]
    Unknown,
}

impl From<StatusArgument> for IntentStatus {
    fn from(argument: StatusArgument) -> IntentStatus {
        match argument {
            StatusArgument::Pending => IntentStatus::Pending,
            StatusArgument::InFlight => IntentStatus::InFlight,
            StatusArgument::Done => IntentStatus::Done,
            StatusArgument::Rejected => IntentStatus::Rejected,
            StatusArgument::NotExecuted => IntentStatus::NotExecuted,
            StatusArgument::Unknown => IntentStatus::Unknown,
        }
    }
}

/// The statuses an operator may set by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManualStatusArgument {
    /// The effect happened at the provider.
    #[value(name = "done")]
    Done,
    /// The effect certainly did not happen.
    #[value(name = "not_executed")]
    NotExecuted,
}

impl From<ManualStatusArgument> for IntentStatus {
    fn from(argument: ManualStatusArgument) -> IntentStatus {
        match argument {
            ManualStatusArgument::Done => IntentStatus::Done,
            ManualStatusArgument::NotExecuted => IntentStatus::NotExecuted,
        }
    }
}

/// `intentgate approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

/// What to do with intents held for approval (docs/design.md section 13). Each works on the
/// ledger directly, whether or not a gateway is running.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List held intents, newest first: id, tenant, tool, who asked, when (UTC), the
    /// deadline, the decision, what held it and the exact arguments.
    #[command(
        long_about = "List the intents held for approval, newest first: id, tenant, tool, who \
asked, when and the deadline (UTC), the decision, what held it (the approval policy, or a \
budget) and the exact arguments as the ledger keeps them (sensitive ones as their keyed \
hashes, `hmac-sha256:...`).

--state open (the default) lists the requests nobody has decided yet, approved those approved \
whose intent has not started yet, closed those decided or expired."
    )]
    List(ApprovalsListArgs),
    /// Approve a held intent, as --actor; the running gateway's sweeper then starts it.
    #[command(
        long_about = "Approve one held intent, recorded in the ledger under --actor \
(with --reason, if given) in the intent's event log.

Refused (exit status 1, saying why): when --actor is the subject that asked for the intent \
(nobody approves their own request), when the request is no longer open (decided already, or \
never held), and when its deadline has passed (the request is then settled: expired, the intent \
not_executed, and a new call of it is held again).

Unlike the admin API (POST /v1/admin/approvals/ID/approve) and the console, this command does \
not execute the intent and does not count it against the tool's budgets: it works on the \
ledger alone, without the gateway's gate. The running gateway's sweeper starts an approved \
intent within its sweep interval (or the intent's next call does), and it is not counted \
against the budgets that would have counted it had it been approved through the gateway. \
The command checks no scope and no tenant: whoever can open the ledger can decide. Prefer the \
admin API or the console, where only a credential with the `approve` scope of the intent's \
tenant decides."
    )]
    Approve(ApprovalsDecideArgs),
    /// Deny a held intent with --reason, as --actor: it is settled rejected.
    #[command(
        long_about = "Deny one held intent, recorded in the ledger under --actor with \
--reason (required) in the intent's event log. The intent is settled rejected, and every call \
of it, from any layer, is answered rejected with the reason, also for a tool that retries \
rejections.

Refused (exit status 1, saying why): when --actor is the subject that asked, when the request \
is no longer open, and when its deadline has passed (the request is then settled expired)."
    )]
    Deny(ApprovalsDecideArgs),
}

/// Which held intents `approvals list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalStateArgument {
    /// Nobody has decided yet.
    Open,
    /// Approved, its attempt not started yet.
    Approved,
    /// Decided or expired.
    Closed,
}

/// `intentgate approvals list`.
#[derive(Debug, Args)]
pub struct ApprovalsListArgs {
    /// Which requests: open, approved or closed.
    #[arg(long, value_enum, default_value_t = ApprovalStateArgument::Open)]
    pub state: ApprovalStateArgument,
    /// Only this tool's held intents.
    #[arg(long)]
    pub tool: Option<String>,
    /// Only this tenant's held intents.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Most held intents listed.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// `text` (a table) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = ApprovalsFormat::Text)]
    pub format: ApprovalsFormat,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// `intentgate approvals approve` and `intentgate approvals deny`.
#[derive(Debug, Args)]
pub struct ApprovalsDecideArgs {
    /// The held intent's id (the first column of `approvals list`).
    pub id: i64,
    /// Who decides, as the event log records it: never the subject that asked.
    #[arg(long)]
    pub actor: String,
    /// Why: optional for an approval, required for a denial (the model that asked reads
    /// it). At most 1024 bytes.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub location: IntentsLedgerArgs,
}

/// How `approvals list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalsFormat {
    /// A table.
    Text,
    /// JSON: one object per line.
    Json,
}

/// How `intents list` and `intents show` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntentsFormat {
    /// A table.
    Text,
    /// JSON: one object per line.
    Json,
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

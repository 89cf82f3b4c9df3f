//! `intentgate bench intents`: what the intent API adds to a client-executed side effect, over
//! the ledger's own cost of the same intent (docs/design.md section 11, measured as section 12 asks).
//!
//! One process holds a SQLite ledger, a gate with one client-executed tool over it, and the
//! real gateway HTTP server on a loopback port. Each round makes three new intents, one per
//! series, in turn, so that a burst of noise on a shared machine lands on all three:
//!
//! 1. `ledger`: `Ledger::begin` (the intent created `in_flight` under a lease) then
//!    `Ledger::finish` (`done`) on the ledger directly: the writes every such intent costs,
//!    whoever drives them. The baseline.
//! 2. `gate`: `Gate::grant` then `Gate::settle` in process: the same two writes with what the
//!    gate does around them (validation, the kill switch, the key and fingerprint, the settled
//!    read, the lease token and its hash).
//! 3. `http`: `POST /v1/tools/{name}/intents` then `POST /v1/intents/{id}/settle` over one
//!    keep-alive connection: what a caller's code really waits for.
//!
//! The report gives each series' p50 and p99 and what the intent API adds over the ledger
//! (`http - ledger`), split into the gate's share and the two HTTP round trips. Every grant
//! must be `execute`, every settle `done`, the ledger must hold one `done` intent per intent
//! made, and the upstream must never be asked for anything; otherwise the run fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use clap::Args;
use intentgate_core::{
    CallStatus, Effect, Executor, IntentStatus, ToolDefinition, UpstreamObservation, fingerprint,
};
use intentgate_gate::{
    CallContext, Gate, GateOptions, Grant, LookupOutcome, Settlement, SystemClock, Upstream,
    UpstreamCall,
};
use intentgate_ledger::{
    Begin, BeginRequest, Finish, Finished, Ledger, SqliteLedger, SqliteOptions,
};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::gateway::GatewayServer;
use crate::measure::{
    cores, existing_folder, microseconds, percentile, progress, rounded, scratch_folder,
};
use intentgate_terminal::DurabilityArgument;
use intentgate_terminal::table::{self, Align};

/// `intentgate bench intents`.
#[derive(Debug, Args)]
pub struct IntentsBenchArgs {
    /// The folder the ledger goes in (in a temporary folder inside it). Pick a folder on the
    /// disk that will hold the real ledger: under strict durability its fsyncs are measured.
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    #[arg(
        long,
        default_value_t = ROUNDS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(ROUNDS_MAX)),
        help = format!(
            "Measured rounds (1 to {ROUNDS_MAX}), each making one new intent per series"
        )
    )]
    pub rounds: u32,

    /// What a ledger write promises: `strict` fsyncs it (survives a power loss), `relaxed`
    /// does not (survives a crash of the process).
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum, default_value_t = DurabilityArgument::Strict)]
    pub durability: DurabilityArgument,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Default measured rounds: a stable p50 and a meaningful p99 in well under a minute under
/// strict durability (each round makes three intents, each with an fsync).
pub const ROUNDS_DEFAULT: u32 = 1_000;
/// Most measured rounds: bounds the run's time and the memory of the latencies kept.
pub const ROUNDS_MAX: u32 = 50_000;
/// Unmeasured rounds made first, so that opening the connection and filling statement
/// caches are not counted.
const WARM_UP_ROUNDS: u32 = 50;
/// Longest wait for one HTTP answer: every one here takes milliseconds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The client-executed tool measured, keyed as the example config keys its refunds.
const TOOL_NAME: &str = "refund_order_sdk";
const TOOL_KEY: &str = "refund:{order_id}:{amount:.2}";
/// The lease a grant hands out is this plus the gate's lease margin.
const TOOL_TIMEOUT: Duration = Duration::from_secs(30);
const AMOUNT: &str = "10.00";
/// The tenant of every intent (`auth: none` has one).
const TENANT: &str = "default";

/// Runs the benchmark and prints its report.
pub async fn run(arguments: IntentsBenchArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = existing_folder(&arguments.dir)?;
    // Declared first so that it is removed after the ledger has closed.
    let scratch = scratch_folder(&dir, "intentgate-bench-")?;
    let progress = progress(arguments.json);

    progress("opening a SQLite ledger and serving the gate on a loopback port ...");
    let ledger = Arc::new(
        SqliteLedger::open(
            scratch.path().join("ledger.sqlite3"),
            SqliteOptions {
                durability: arguments.durability.into(),
                inline: false,
            },
        )
        .context("opening the intent ledger")?,
    );
    let upstream = Arc::new(Unreachable::default());
    let gate = Arc::new(Gate::new(
        vec![client_tool()?],
        ledger.clone(),
        upstream.clone(),
        Arc::new(SystemClock),
        GateOptions::default(),
    )?);
    let server = GatewayServer::serve(gate.clone()).await?;
    let bench = Bench {
        gate: gate.clone(),
        ledger: ledger.clone(),
        http: reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the benchmark's HTTP client")?,
        grant_url: format!("{}/v1/tools/{TOOL_NAME}/intents", server.url),
        intents_url: format!("{}/v1/intents", server.url),
    };

    let measured = bench.measure(arguments.rounds, &progress).await;
    let stopped = server.stop().await;
    let measured = measured?;
    stopped?;

    let intents = u64::from(3 * (WARM_UP_ROUNDS + arguments.rounds));
    let done: u64 = ledger
        .status_counts()
        .await?
        .iter()
        .filter(|count| count.status == IntentStatus::Done)
        .map(|count| count.count)
        .sum();
    ensure!(
        done == intents,
        "the ledger holds {done} done intents after {intents} were made and settled done"
    );
    let requests = upstream.requests.load(Ordering::Relaxed);
    ensure!(
        requests == 0,
        "the upstream was asked {requests} times for a tool the caller executes"
    );
    drop(bench);
    drop(gate);
    drop(ledger);
    scratch
        .close()
        .with_context(|| format!("can't remove the temporary folder in {}", dir.display()))?;

    let report = Report::new(
        arguments.durability,
        &dir,
        arguments.rounds,
        &measured,
        done,
    );
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The measured tool: a client-executed refund, as `examples/support-agent.yaml` has one.
fn client_tool() -> anyhow::Result<ToolDefinition> {
    let schema = json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,2})?$"}
        },
        "required": ["order_id", "amount"],
        "additionalProperties": false
    });
    let mut tool = ToolDefinition::new(
        TOOL_NAME,
        "Refund an order through the payments SDK.",
        Effect::SideEffect,
        schema,
        Some(TOOL_KEY),
        TOOL_TIMEOUT,
        0,
    )?;
    tool.executor = Executor::Client;
    tool.listed_over_mcp = false;
    Ok(tool)
}

/// The gate's upstream: a client-executed tool never reaches it, and the benchmark fails if
/// anything does.
#[derive(Debug, Default)]
struct Unreachable {
    requests: AtomicU64,
}

#[async_trait]
impl Upstream for Unreachable {
    async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
        self.requests.fetch_add(1, Ordering::Relaxed);
        UpstreamObservation::NotSent {
            reason: "a client-executed tool has no upstream".to_owned(),
        }
    }

    async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
        self.requests.fetch_add(1, Ordering::Relaxed);
        LookupOutcome::Unsupported
    }
}

/// What every series drives, and the URLs of the HTTP one.
struct Bench {
    gate: Arc<Gate>,
    ledger: Arc<SqliteLedger>,
    http: reqwest::Client,
    grant_url: String,
    /// `.../v1/intents`; a settle is `{intents_url}/{id}/settle`.
    intents_url: String,
}

/// Latencies of every measured intent, one series each, in round order.
struct Measured {
    ledger: Vec<Duration>,
    gate: Vec<Duration>,
    http: Vec<Duration>,
}

/// The part of a grant's answer the benchmark reads.
#[derive(Debug, Deserialize)]
struct GrantView {
    action: String,
    intent_id: Option<i64>,
    lease: Option<LeaseView>,
}

#[derive(Debug, Deserialize)]
struct LeaseView {
    token: String,
}

/// The part of a settle's answer the benchmark reads.
#[derive(Debug, Deserialize)]
struct SettledView {
    action: String,
    outcome: Option<OutcomeView>,
}

#[derive(Debug, Deserialize)]
struct OutcomeView {
    status: CallStatus,
}

impl Bench {
    async fn measure(&self, rounds: u32, progress: &impl Fn(&str)) -> anyhow::Result<Measured> {
        progress(&format!(
            "warming up with {WARM_UP_ROUNDS} rounds of three new intents (ledger, gate, HTTP) ..."
        ));
        self.rounds("warm-up", WARM_UP_ROUNDS).await?;
        progress(&format!(
            "measuring {rounds} rounds of three new intents, one per series, in turn ..."
        ));
        self.rounds("measured", rounds).await
    }

    async fn rounds(&self, label: &str, rounds: u32) -> anyhow::Result<Measured> {
        let mut measured = Measured {
            ledger: Vec::with_capacity(rounds as usize),
            gate: Vec::with_capacity(rounds as usize),
            http: Vec::with_capacity(rounds as usize),
        };
        for round in 0..rounds {
            measured.ledger.push(
                self.ledger_intent(&format!("{label}-ledger-{round}"))
                    .await?,
            );
            measured
                .gate
                .push(self.gate_intent(&format!("{label}-gate-{round}")).await?);
            measured
                .http
                .push(self.http_intent(&format!("{label}-http-{round}")).await?);
        }
        Ok(measured)
    }

    /// `begin` and `finish` of a new intent on the ledger itself, as the gate would ask them.
    async fn ledger_intent(&self, order_id: &str) -> anyhow::Result<Duration> {
        let arguments = arguments(order_id);
        let started = Instant::now();
        let begun_ms = now_ms();
        let owner = format!("bench/{order_id}");
        let begun = self
            .ledger
            .begin(BeginRequest {
                tenant: TENANT.to_owned(),
                tool: TOOL_NAME.to_owned(),
                key: format!("refund:{order_id}:{AMOUNT}"),
                fingerprint: fingerprint(&arguments).as_str().to_owned(),
                arguments,
                lease_owner: owner.clone(),
                lease_expires_ms: begun_ms + TOOL_TIMEOUT.as_millis() as i64,
                now_ms: begun_ms,
                count_call: true,
                retry_rejected: false,
                lookup_interval_ms: 5_000,
                resend_unknown: false,
                // As the gateway asks, its read having found no intent for the key.
                expect_new: true,
                policies: None,
            })
            .await?;
        let Begin::Execute(intent) = begun else {
            bail!("the ledger did not start a new intent for order {order_id}: {begun:?}");
        };
        let finished = self
            .ledger
            .finish(Finish {
                id: intent.id,
                lease_owner: owner,
                attempt: intent.attempt,
                now_ms: now_ms(),
                status: IntentStatus::Done,
                result: Some(json!({"id": format!("re_{order_id}")})),
                external_id: Some(format!("re_{order_id}")),
                resolved_by: "client",
                looked_up: false,
                lease_required: true,
                detail: "the caller's code confirmed it".to_owned(),
                resend_stopped: None,
            })
            .await?;
        let latency = started.elapsed();
        ensure!(
            matches!(finished, Finished::Recorded(_)),
            "the ledger did not record order {order_id} done: {finished:?}"
        );
        Ok(latency)
    }

    /// `Gate::grant` and `Gate::settle` of a new intent, in process.
    async fn gate_intent(&self, order_id: &str) -> anyhow::Result<Duration> {
        let context = CallContext::default();
        let started = Instant::now();
        let granted = self
            .gate
            .grant(TOOL_NAME, arguments(order_id), &context)
            .await?;
        let Grant::Execute(lease) = granted else {
            bail!("the gate did not grant execute for order {order_id}: {granted:?}");
        };
        let settled = self
            .gate
            .settle(
                TENANT,
                lease.intent_id,
                lease.token.as_str(),
                Settlement::Done {
                    result: Some(json!({"id": format!("re_{order_id}")})),
                    external_id: Some(format!("re_{order_id}")),
                },
            )
            .await?;
        let latency = started.elapsed();
        match settled {
            Grant::Answer(outcome) if outcome.status == CallStatus::Done => Ok(latency),
            other => bail!("the settle of order {order_id} answered {other:?} instead of done"),
        }
    }

    /// `POST .../intents` and `POST .../settle` of a new intent over HTTP.
    async fn http_intent(&self, order_id: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let (status, body) = self
            .post(&self.grant_url, &json!({"arguments": arguments(order_id)}))
            .await
            .with_context(|| format!("the grant of order {order_id}"))?;
        let grant: GrantView = answer(status, &body, "grant", order_id)?;
        let (Some(id), Some(lease)) = (grant.intent_id, grant.lease) else {
            bail!(
                "the grant of order {order_id} was `{}`, not execute: {}",
                grant.action,
                String::from_utf8_lossy(&body)
            );
        };
        ensure!(
            grant.action == "execute",
            "the grant of order {order_id} was `{}`, not execute",
            grant.action
        );
        let settle = json!({
            "lease": lease.token,
            "outcome": "done",
            "result": {"id": format!("re_{order_id}")},
            "external_id": format!("re_{order_id}"),
        });
        let (status, body) = self
            .post(&format!("{}/{id}/settle", self.intents_url), &settle)
            .await
            .with_context(|| format!("the settle of order {order_id}"))?;
        let latency = started.elapsed();
        let settled: SettledView = answer(status, &body, "settle", order_id)?;
        match settled.outcome {
            Some(OutcomeView {
                status: CallStatus::Done,
            }) if settled.action == "answer" => Ok(latency),
            _ => bail!(
                "the settle of order {order_id} did not answer done: {}",
                String::from_utf8_lossy(&body)
            ),
        }
    }

    async fn post(&self, url: &str, body: &Value) -> anyhow::Result<(StatusCode, Vec<u8>)> {
        let response = self
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body)?)
            .send()
            .await?;
        let status = response.status();
        Ok((status, response.bytes().await?.to_vec()))
    }
}

fn arguments(order_id: &str) -> Value {
    json!({"order_id": order_id, "amount": AMOUNT})
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// An HTTP 200 answer of the intent API, read as `T`.
fn answer<T: for<'de> Deserialize<'de>>(
    status: StatusCode,
    body: &[u8],
    what: &str,
    order_id: &str,
) -> anyhow::Result<T> {
    ensure!(
        status == StatusCode::OK,
        "the {what} of order {order_id} answered HTTP {status}: {}",
        String::from_utf8_lossy(body)
    );
    serde_json::from_slice(body).with_context(|| {
        format!(
            "the {what} of order {order_id} is not the intent API's answer: {}",
            String::from_utf8_lossy(body)
        )
    })
}

/// p50 and p99 of a series, in microseconds.
fn p50_p99_us(samples: &[Duration]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    (
        microseconds(percentile(&sorted, 0.5)),
        microseconds(percentile(&sorted, 0.99)),
    )
}

/// What the run measured. Serialised by `--json`: its field names are a promise to users.
#[derive(Debug, Serialize)]
struct Report {
    durability: &'static str,
    /// The folder the ledger was in (absolute).
    dir: String,
    /// Cores this process may use; the server, the client and the ledger share them.
    cores: usize,
    warm_up_rounds: u32,
    /// Measured rounds; each made one intent per series.
    rounds: u32,
    /// `begin` and `finish` on the ledger directly: the baseline.
    ledger_p50_us: f64,
    ledger_p99_us: f64,
    /// `Gate::grant` and `Gate::settle` in process.
    gate_p50_us: f64,
    gate_p99_us: f64,
    /// `POST .../intents` and `POST .../settle` over HTTP.
    http_p50_us: f64,
    http_p99_us: f64,
    /// What the intent API adds over the ledger's own cost: `http` minus `ledger`, at each
    /// percentile.
    added_p50_us: f64,
    added_p99_us: f64,
    /// Its share in the gate (`gate` minus `ledger`) and in the two HTTP round trips
    /// (`http` minus `gate`), at p50.
    added_by_gate_p50_us: f64,
    added_by_http_p50_us: f64,
    /// `http` p50 over `ledger` p50.
    ratio_http_to_ledger_p50: f64,
    /// Intents the ledger holds `done` afterwards: every one made, warm-up included.
    intents_done: u64,
}

impl Report {
    fn new(
        durability: DurabilityArgument,
        dir: &Path,
        rounds: u32,
        measured: &Measured,
        intents_done: u64,
    ) -> Report {
        let (ledger_p50, ledger_p99) = p50_p99_us(&measured.ledger);
        let (gate_p50, gate_p99) = p50_p99_us(&measured.gate);
        let (http_p50, http_p99) = p50_p99_us(&measured.http);
        Report {
            durability: durability.as_str(),
            dir: dir.display().to_string(),
            cores: cores(),
            warm_up_rounds: WARM_UP_ROUNDS,
            rounds,
            ledger_p50_us: rounded(ledger_p50, 1),
            ledger_p99_us: rounded(ledger_p99, 1),
            gate_p50_us: rounded(gate_p50, 1),
            gate_p99_us: rounded(gate_p99, 1),
            http_p50_us: rounded(http_p50, 1),
            http_p99_us: rounded(http_p99, 1),
            added_p50_us: rounded(http_p50 - ledger_p50, 1),
            added_p99_us: rounded(http_p99 - ledger_p99, 1),
            added_by_gate_p50_us: rounded(gate_p50 - ledger_p50, 1),
            added_by_http_p50_us: rounded(http_p50 - gate_p50, 1),
            ratio_http_to_ledger_p50: rounded(http_p50 / ledger_p50, 3),
            intents_done,
        }
    }

    fn table(&self) -> String {
        let row = |label: &str, p50: String, p99: String| [label.to_owned(), p50, p99];
        let us = |value: f64| format!("{value:.1} us");
        let rows = [
            row("measure", "p50".to_owned(), "p99".to_owned()),
            row(
                "ledger: begin + finish (baseline)",
                us(self.ledger_p50_us),
                us(self.ledger_p99_us),
            ),
            row(
                "gate: grant + settle, in process",
                us(self.gate_p50_us),
                us(self.gate_p99_us),
            ),
            row(
                "HTTP: POST intents + POST settle",
                us(self.http_p50_us),
                us(self.http_p99_us),
            ),
            row(
                "  added by the intent API (HTTP - ledger)",
                us(self.added_p50_us),
                us(self.added_p99_us),
            ),
            row(
                "    of which the gate (gate - ledger)",
                us(self.added_by_gate_p50_us),
                String::new(),
            ),
            row(
                "    of which two HTTP round trips (HTTP - gate)",
                us(self.added_by_http_p50_us),
                String::new(),
            ),
            row(
                "  HTTP / ledger",
                format!("{:.2}", self.ratio_http_to_ledger_p50),
                String::new(),
            ),
        ];
        let mut text = format!(
            "intentgate bench intents: a client-executed tool over a SQLite ledger, durability \
             {}, in {} ({} cores), the HTTP server on loopback\n\
             {} rounds measured after {} warm-up rounds, each making one new intent per \
             series in turn; every grant was `execute`, every settle `done`, and the ledger \
             holds {} done intents.\n\n",
            self.durability,
            self.dir,
            self.cores,
            self.rounds,
            self.warm_up_rounds,
            self.intents_done,
        );
        text.push_str(&table::render(
            rows,
            &[Align::Left, Align::Right, Align::Right],
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn the_report_splits_what_the_intent_api_adds() {
        let measured = Measured {
            ledger: milliseconds(&[2, 4]),
            gate: milliseconds(&[3, 5]),
            http: milliseconds(&[4, 8]),
        };
        let report = Report::new(
            DurabilityArgument::Strict,
            Path::new("/bench"),
            2,
            &measured,
            6,
        );
        assert_eq!(report.added_p50_us, 2_000.0);
        assert_eq!(report.added_p99_us, 4_000.0);
        assert_eq!(report.added_by_gate_p50_us, 1_000.0);
        assert_eq!(report.added_by_http_p50_us, 1_000.0);
        assert_eq!(report.ratio_http_to_ledger_p50, 2.0);
        assert!(report.table().contains("added by the intent API"));
    }

    #[tokio::test]
    async fn a_short_run_makes_every_intent_done_through_each_series() {
        let dir = tempfile::tempdir().unwrap();
        run(IntentsBenchArgs {
            dir: dir.path().to_owned(),
            rounds: 3,
            durability: DurabilityArgument::Relaxed,
            json: true,
        })
        .await
        .unwrap();
    }
}

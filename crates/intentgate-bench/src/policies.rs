//! `intentgate bench policies`: what a side-effecting tool's approval policy and budgets
//! (docs/design.md section 13) cost a new call, against the same tool without any, and that a
//! tool without policies pays nothing for them.
//!
//! One process holds a ledger (a fresh SQLite file, or a fresh PostgreSQL schema with
//! `--ledger`) and one gate with three side-effecting refund tools whose upstream answers at
//! once, so only the gate and the ledger are measured. Each round makes one new intent per
//! series through `Gate::call`, the series taking turns to go first, so that a burst of noise
//! on a shared machine lands on all three:
//!
//! 1. `refund_plain`: no policies (`policies: None`). The baseline.
//! 2. `refund_approval`: an approval policy whose condition never holds for the amounts sent
//!    (`amount > 1000000.00`): the condition is evaluated, nothing is held.
//! 3. `refund_budget`: two budgets never reached, as a real config has them (a count per
//!    tool, an amount per tenant): the ledger reads and increments both budget rows in the
//!    transaction that creates the intent.
//!
//! The report gives each series' p50 and p99, the ratios of both to `refund_plain`'s in the
//! same run, and the design targets (section 13): `refund_approval` p50 at most 1.05 x plain,
//! `refund_budget` p50 at most 1.25 x plain. Every call must be `done`, the upstream must see
//! one request per call, the ledger must hold one `done` intent per call of each tool, and
//! the budgets must have counted every call of `refund_budget` and nothing of the other two
//! tools; otherwise the run fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use clap::Args;
use intentgate_core::{
    ApprovalPolicy, BeyondBudget, Budget, BudgetScope, CallStatus, Condition, Decimal, Effect,
    IntentStatus, ToolDefinition, ToolPolicies, UpstreamObservation,
};
use intentgate_gate::{
    CallContext, Gate, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
use intentgate_ledger::{Ledger, SqliteLedger, SqliteOptions};
use serde::Serialize;
use serde_json::{Value, json};

use crate::ledger::{PostgresLedger, fresh_postgres};
use crate::measure::{
    TargetCheck, cores, existing_folder, microseconds, percentile, progress, rounded,
    scratch_folder, target_cells,
};
use intentgate_terminal::DurabilityArgument;
use intentgate_terminal::table::{self, Align};

/// `intentgate bench policies`.
#[derive(Debug, Args)]
pub struct PoliciesBenchArgs {
    /// The folder the ledger goes in (in a temporary folder inside it).
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    #[arg(
        long,
        default_value_t = ROUNDS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(ROUNDS_MAX)),
        help = format!(
            "Measured rounds (1 to {ROUNDS_MAX}), each making one new refund per series"
        )
    )]
    pub rounds: u32,

    /// What a ledger write promises: `strict` fsyncs it (survives a power loss), `relaxed`
    /// does not (survives a crash of the process). Relaxed by default here: an fsync costs
    /// far more than what the policies add, and its noise would hide the difference.
    #[arg(long, env = "INTENTGATE_DURABILITY", value_enum, default_value_t = DurabilityArgument::Relaxed)]
    pub durability: DurabilityArgument,

    /// Measure a PostgreSQL ledger instead (postgres://user@host:port/database): in a fresh
    /// schema named for the run, dropped afterwards.
    #[arg(long, value_name = "URL")]
    pub ledger: Option<String>,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Default measured rounds: a stable p50 and a meaningful p99 in well under a minute under
/// relaxed durability (each round makes three new intents).
pub const ROUNDS_DEFAULT: u32 = 2_000;
/// Most measured rounds: bounds the run's time and the memory of the latencies kept.
pub const ROUNDS_MAX: u32 = 50_000;
/// Unmeasured rounds made first, so that filling statement caches and creating the budget
/// rows are not counted.
const WARM_UP_ROUNDS: u32 = 50;
/// The series, in the order of the first round.
const SERIES: u32 = 3;

/// design target (section 13): `refund_approval` p50 over `refund_plain` p50.
const TARGET_RATIO_APPROVAL_P50: f64 = 1.05;
/// design target (section 13): `refund_budget` p50 over `refund_plain` p50 (the budgets cost
/// one indexed read and one upsert each, in the same transaction).
const TARGET_RATIO_BUDGET_P50: f64 = 1.25;

/// The three measured tools: the same refund, keyed as the example config keys its refunds.
const TOOL_PLAIN: &str = "refund_plain";
const TOOL_APPROVAL: &str = "refund_approval";
const TOOL_BUDGET: &str = "refund_budget";
const TOOL_KEY: &str = "refund:{order_id}:{amount:.2}";
/// The upstream answers at once, so the timeout never fires; a realistic value keeps the
/// gate's lease arithmetic the same as in production.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);
/// Every refund is of the same amount; the order ids keep the intents distinct.
const AMOUNT: &str = "49.00";
/// `AMOUNT` in cents, as the amount budget counts it.
const AMOUNT_UNITS: u64 = 4_900;
/// The approval policy's condition: no amount the benchmark sends reaches it.
const APPROVAL_WHEN: &str = "amount > 1000000.00";
/// How long a held intent would wait; none is ever held.
const APPROVAL_DEADLINE_MS: u64 = 60 * 60 * 1000;
/// The budgets' window: an hour, as an operator would set a rate guard.
const BUDGET_WINDOW_MS: u64 = 60 * 60 * 1000;
/// The per-tenant amount budget, never reached (in cents: 10^14, well inside a u64).
const BUDGET_AMOUNT_MAX: &str = "1000000000000.00";

/// Runs the benchmark and prints its report.
pub async fn run(arguments: PoliciesBenchArgs) -> anyhow::Result<()> {
    let dir = existing_folder(&arguments.dir)?;
    // Declared before the ledger so that it is removed after the ledger has closed, also
    // when the run fails.
    let scratch = scratch_folder(&dir, "intentgate-bench-")?;
    let progress = progress(arguments.json);

    let durability = arguments.durability.into();
    let (ledger, postgres): (Arc<dyn Ledger>, Option<Arc<PostgresLedger>>) = match &arguments.ledger
    {
        None => {
            progress("opening a SQLite ledger ...");
            let ledger = SqliteLedger::open(
                scratch.path().join("ledger.sqlite3"),
                SqliteOptions {
                    durability,
                    inline: false,
                },
            )
            .context("opening the intent ledger")?;
            (Arc::new(ledger), None)
        }
        Some(url) => {
            let (ledger, postgres) = fresh_postgres(url, durability).await?;
            progress(&format!(
                "using the fresh schema of {} ...",
                postgres.location()
            ));
            (ledger, Some(postgres))
        }
    };
    let ledger_location = match &postgres {
        Some(postgres) => postgres.location(),
        None => format!("a temporary file in {}", dir.display()),
    };
    let measured = measure(arguments.rounds, ledger, &progress).await;
    // The run's schema goes also when the run failed.
    if let Some(postgres) = postgres {
        postgres.destroy().await.with_context(|| {
            format!("can't drop the benchmark's schema {}", postgres.location())
        })?;
    }
    let measured = measured?;
    scratch
        .close()
        .with_context(|| format!("can't remove the temporary folder in {}", dir.display()))?;

    let report = Report::new(
        arguments.durability,
        &dir,
        (
            if arguments.ledger.is_some() {
                "postgresql"
            } else {
                "sqlite"
            },
            ledger_location,
        ),
        arguments.rounds,
        &measured,
    );
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// Builds the gate over `ledger`, runs the warm-up and the measured rounds, and checks what
/// the upstream and the ledger hold afterwards.
async fn measure(
    rounds: u32,
    ledger: Arc<dyn Ledger>,
    progress: &impl Fn(&str),
) -> anyhow::Result<Measured> {
    let upstream = Arc::new(InstantUpstream::default());
    let gate = Gate::new(
        vec![
            refund_tool(TOOL_PLAIN, None)?,
            refund_tool(TOOL_APPROVAL, Some(approval_policies()?))?,
            refund_tool(TOOL_BUDGET, Some(budget_policies()?))?,
        ],
        ledger.clone(),
        upstream.clone(),
        Arc::new(SystemClock),
        GateOptions::default(),
    )?;
    let started_ms = now_ms();

    progress(&format!(
        "warming up with {WARM_UP_ROUNDS} rounds of three new refunds (plain, approval, budget) ..."
    ));
    rounds_of(&gate, "warm-up", WARM_UP_ROUNDS).await?;
    progress(&format!(
        "measuring {rounds} rounds of three new refunds, one per series, each round started by \
         the next series ..."
    ));
    let mut measured = rounds_of(&gate, "measured", rounds).await?;
    // The gate answers once an outcome is queued; the checks read what committed.
    ledger.drain_queued().await;

    let calls = u64::from(WARM_UP_ROUNDS + rounds);
    let requests = upstream.requests.load(Ordering::Relaxed);
    ensure!(
        requests == u64::from(SERIES) * calls,
        "the upstream received {requests} requests for {} calls; expected one per call",
        u64::from(SERIES) * calls
    );
    for count in ledger.status_counts().await? {
        ensure!(
            count.status == IntentStatus::Done,
            "the ledger holds {} `{}` intents of {}; every call returned `done`",
            count.count,
            count.status,
            count.tool
        );
        ensure!(
            count.count == calls,
            "the ledger holds {} done intents of {} after {calls} calls; expected one per call",
            count.count,
            count.tool
        );
        measured.intents_done += count.count;
    }
    ensure!(
        measured.intents_done == u64::from(SERIES) * calls,
        "the ledger holds {} done intents after {} calls; expected one per call of each tool",
        measured.intents_done,
        u64::from(SERIES) * calls
    );
    // Windows that had not ended when the run started: every one it counted in.
    for tool in [TOOL_PLAIN, TOOL_APPROVAL] {
        let rows = ledger.budget_usage(tool, started_ms).await?;
        ensure!(
            rows.is_empty(),
            "{tool} has no budget, yet the ledger counted it: {rows:?}"
        );
    }
    let usage = ledger.budget_usage(TOOL_BUDGET, started_ms).await?;
    for budget in budget_policies()?.budgets {
        let (count, units) = usage
            .iter()
            .filter(|row| row.budget == budget.name)
            .fold((0, 0), |(count, units), row| {
                (count + row.count, units + row.units)
            });
        let units_expected = if budget.amount_max.is_some() {
            calls * AMOUNT_UNITS
        } else {
            0
        };
        ensure!(
            count == calls && units == units_expected,
            "budget `{}` of {TOOL_BUDGET} counted {count} intents and {units} units after \
             {calls} calls; expected {calls} and {units_expected}",
            budget.name
        );
        measured.budget_counts += count;
    }
    Ok(measured)
}

/// Makes `rounds` rounds of one new refund per tool, the series taking turns to go first.
async fn rounds_of(gate: &Gate, label: &str, rounds: u32) -> anyhow::Result<Measured> {
    let mut measured = Measured {
        plain: Vec::with_capacity(rounds as usize),
        approval: Vec::with_capacity(rounds as usize),
        budget: Vec::with_capacity(rounds as usize),
        intents_done: 0,
        budget_counts: 0,
    };
    for round in 0..rounds {
        for turn in 0..SERIES {
            match (round + turn) % SERIES {
                0 => {
                    let order_id = format!("{label}-plain-{round}");
                    measured
                        .plain
                        .push(call_refund(gate, TOOL_PLAIN, &order_id).await?);
                }
                1 => {
                    let order_id = format!("{label}-approval-{round}");
                    measured
                        .approval
                        .push(call_refund(gate, TOOL_APPROVAL, &order_id).await?);
                }
                _ => {
                    let order_id = format!("{label}-budget-{round}");
                    measured
                        .budget
                        .push(call_refund(gate, TOOL_BUDGET, &order_id).await?);
                }
            }
        }
    }
    Ok(measured)
}

/// One new refund of `tool` through the gate, timed; anything but `done` is an error.
async fn call_refund(gate: &Gate, tool: &str, order_id: &str) -> anyhow::Result<Duration> {
    let arguments = arguments(order_id);
    let context = CallContext::default();
    let started = Instant::now();
    let outcome = gate
        .call(tool, arguments, &context)
        .await
        .with_context(|| format!("the gate failed the {tool} of order {order_id}"))?;
    let latency = started.elapsed();
    if outcome.status != CallStatus::Done {
        bail!(
            "the {tool} of order {order_id} returned `{}` instead of `done`: {}",
            outcome.status,
            outcome.message
        );
    }
    Ok(latency)
}

fn arguments(order_id: &str) -> Value {
    json!({"order_id": order_id, "amount": AMOUNT})
}

/// A side-effecting refund named `name`, with `policies`, as an operator would configure it.
fn refund_tool(name: &str, policies: Option<ToolPolicies>) -> anyhow::Result<ToolDefinition> {
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
        name,
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some(TOOL_KEY),
        TOOL_TIMEOUT,
        0,
    )?;
    tool.policies = policies;
    Ok(tool)
}

/// `refund_approval`'s policies: approval above an amount no call reaches, no budget.
fn approval_policies() -> anyhow::Result<ToolPolicies> {
    Ok(ToolPolicies {
        approval: Some(ApprovalPolicy {
            when: Some(Condition::parse(APPROVAL_WHEN)?),
            tenants: None,
            deadline_ms: APPROVAL_DEADLINE_MS,
        }),
        budgets: Vec::new(),
    })
}

/// `refund_budget`'s policies: no approval, and two budgets no run reaches: a count per
/// tool, and an amount per tenant.
fn budget_policies() -> anyhow::Result<ToolPolicies> {
    let amount_max = Decimal::parse(BUDGET_AMOUNT_MAX)?;
    Ok(ToolPolicies {
        approval: None,
        budgets: vec![
            Budget {
                name: "tool-hourly-count".to_owned(),
                scope: BudgetScope::Tool,
                window_ms: BUDGET_WINDOW_MS,
                count_max: Some(u64::MAX),
                amount_max: None,
                amount_argument: None,
                amount_places: 0,
                beyond: BeyondBudget::Refuse,
            },
            Budget {
                name: "tenant-hourly-amount".to_owned(),
                scope: BudgetScope::Tenant,
                window_ms: BUDGET_WINDOW_MS,
                count_max: None,
                amount_max: Some(amount_max),
                amount_argument: Some("amount".to_owned()),
                amount_places: 2,
                beyond: BeyondBudget::Refuse,
            },
        ],
    })
}

/// An upstream that performs every request at once and successfully, so that only the gate
/// and the ledger are measured. Counts requests, to prove one per call.
#[derive(Debug, Default)]
struct InstantUpstream {
    requests: AtomicU64,
}

#[async_trait]
impl Upstream for InstantUpstream {
    async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
        let request = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        UpstreamObservation::response(200, json!({"id": format!("re_bench_{request}")}))
    }

    async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
        // Every request succeeds, so no outcome is ambiguous and nothing is ever looked up.
        LookupOutcome::NotFound
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// Latencies of every measured call, one series each, in round order, and what the ledger
/// held afterwards.
struct Measured {
    plain: Vec<Duration>,
    approval: Vec<Duration>,
    budget: Vec<Duration>,
    /// Intents the ledger holds `done`, warm-up included.
    intents_done: u64,
    /// Intents the budgets of `refund_budget` counted, summed over its budgets.
    budget_counts: u64,
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
    /// The store measured: `sqlite` or `postgresql`.
    ledger: &'static str,
    /// Where the ledger was (never with a password).
    ledger_location: String,
    /// The folder the SQLite ledger goes in (absolute).
    dir: String,
    /// Cores this process may use; the gate and the ledger share them.
    cores: usize,
    warm_up_rounds: u32,
    /// Measured rounds; each made one new intent per series.
    rounds: u32,
    /// `refund_plain`, without policies: the baseline.
    plain_p50_us: f64,
    plain_p99_us: f64,
    /// `refund_approval`, whose approval policy's condition is evaluated and never holds.
    approval_p50_us: f64,
    approval_p99_us: f64,
    /// `refund_budget`, whose two budgets count every new intent.
    budget_p50_us: f64,
    budget_p99_us: f64,
    /// What each adds over `refund_plain`, at each percentile (may be negative on a noisy
    /// machine).
    added_by_approval_p50_us: f64,
    added_by_approval_p99_us: f64,
    added_by_budget_p50_us: f64,
    added_by_budget_p99_us: f64,
    /// Each percentile over `refund_plain`'s.
    ratio_approval_to_plain_p50: f64,
    ratio_approval_to_plain_p99: f64,
    ratio_budget_to_plain_p50: f64,
    ratio_budget_to_plain_p99: f64,
    /// Intents the ledger holds `done` afterwards: one per call, warm-up included.
    intents_done: u64,
    /// Intents counted by `refund_budget`'s budgets, summed over its two budgets: each
    /// counted every call of it, and nothing of the other tools.
    budget_counts: u64,
    /// The design targets, and whether each is met.
    targets: Vec<TargetCheck>,
}

impl Report {
    fn new(
        durability: DurabilityArgument,
        dir: &Path,
        (ledger, ledger_location): (&'static str, String),
        rounds: u32,
        measured: &Measured,
    ) -> Report {
        let (plain_p50, plain_p99) = p50_p99_us(&measured.plain);
        let (approval_p50, approval_p99) = p50_p99_us(&measured.approval);
        let (budget_p50, budget_p99) = p50_p99_us(&measured.budget);
        let ratio_approval_p50 = approval_p50 / plain_p50;
        let ratio_budget_p50 = budget_p50 / plain_p50;
        let targets = vec![
            TargetCheck {
                field: "ratio_approval_to_plain_p50",
                target: format!("at most {TARGET_RATIO_APPROVAL_P50}"),
                met: ratio_approval_p50 <= TARGET_RATIO_APPROVAL_P50,
            },
            TargetCheck {
                field: "ratio_budget_to_plain_p50",
                target: format!("at most {TARGET_RATIO_BUDGET_P50}"),
                met: ratio_budget_p50 <= TARGET_RATIO_BUDGET_P50,
            },
        ];
        Report {
            durability: durability.as_str(),
            ledger,
            ledger_location,
            dir: dir.display().to_string(),
            cores: cores(),
            warm_up_rounds: WARM_UP_ROUNDS,
            rounds,
            plain_p50_us: rounded(plain_p50, 1),
            plain_p99_us: rounded(plain_p99, 1),
            approval_p50_us: rounded(approval_p50, 1),
            approval_p99_us: rounded(approval_p99, 1),
            budget_p50_us: rounded(budget_p50, 1),
            budget_p99_us: rounded(budget_p99, 1),
            added_by_approval_p50_us: rounded(approval_p50 - plain_p50, 1),
            added_by_approval_p99_us: rounded(approval_p99 - plain_p99, 1),
            added_by_budget_p50_us: rounded(budget_p50 - plain_p50, 1),
            added_by_budget_p99_us: rounded(budget_p99 - plain_p99, 1),
            ratio_approval_to_plain_p50: rounded(ratio_approval_p50, 3),
            ratio_approval_to_plain_p99: rounded(approval_p99 / plain_p99, 3),
            ratio_budget_to_plain_p50: rounded(ratio_budget_p50, 3),
            ratio_budget_to_plain_p99: rounded(budget_p99 / plain_p99, 3),
            intents_done: measured.intents_done,
            budget_counts: measured.budget_counts,
            targets,
        }
    }

    /// The human report: one row per series, with its ratios to the baseline and the design
    /// target its p50 ratio has.
    fn table(&self) -> String {
        let us = |value: f64| format!("{value:.1} us");
        let ratio = |value: f64| format!("{value:.3}");
        let row = |label: &str, p50: String, p99: String, ratios: Option<(f64, f64)>, field| {
            let (target, met) = target_cells(&self.targets, field);
            let (p50_ratio, p99_ratio) =
                ratios.map_or_else(Default::default, |(p50, p99)| (ratio(p50), ratio(p99)));
            [
                label.to_owned(),
                p50,
                p99,
                p50_ratio,
                p99_ratio,
                target,
                met,
            ]
        };
        let rows = [
            [
                "series".to_owned(),
                "p50".to_owned(),
                "p99".to_owned(),
                "p50 / plain".to_owned(),
                "p99 / plain".to_owned(),
                "target (p50 / plain)".to_owned(),
                "met".to_owned(),
            ],
            row(
                "refund_plain: no policies (baseline)",
                us(self.plain_p50_us),
                us(self.plain_p99_us),
                None,
                "",
            ),
            row(
                "refund_approval: approval, condition not met",
                us(self.approval_p50_us),
                us(self.approval_p99_us),
                Some((
                    self.ratio_approval_to_plain_p50,
                    self.ratio_approval_to_plain_p99,
                )),
                "ratio_approval_to_plain_p50",
            ),
            row(
                "  added by the approval policy",
                us(self.added_by_approval_p50_us),
                us(self.added_by_approval_p99_us),
                None,
                "",
            ),
            row(
                "refund_budget: two budgets, counted",
                us(self.budget_p50_us),
                us(self.budget_p99_us),
                Some((
                    self.ratio_budget_to_plain_p50,
                    self.ratio_budget_to_plain_p99,
                )),
                "ratio_budget_to_plain_p50",
            ),
            row(
                "  added by the budgets",
                us(self.added_by_budget_p50_us),
                us(self.added_by_budget_p99_us),
                None,
                "",
            ),
        ];
        let mut text = self.heading();
        text.push_str(&table::render(
            rows,
            &[
                Align::Left,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Right,
                Align::Left,
                Align::Left,
            ],
        ));
        text
    }

    /// The lines above the table: what was measured, over which ledger, and what was checked.
    fn heading(&self) -> String {
        let store = match self.ledger {
            "postgresql" => format!("a PostgreSQL ledger at {}", self.ledger_location),
            _ => format!("a SQLite ledger in {}", self.dir),
        };
        format!(
            "intentgate bench policies: three side-effecting refund tools through one gate \
             (Gate::call, in process, an upstream that answers at once), over {store}, \
             durability {} ({} cores)\n\
             {} rounds measured after {} warm-up rounds, each making one new refund per series, \
             the series taking turns to go first; every call was `done`, the upstream saw one \
             request per call, the ledger holds {} done intents (one per call), and \
             refund_budget's two budgets counted {} intents (each budget every call of it, \
             nothing of the other tools).\n\n",
            self.durability,
            self.cores,
            self.rounds,
            self.warm_up_rounds,
            self.intents_done,
            self.budget_counts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milliseconds(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    #[test]
    fn the_report_compares_each_series_with_the_plain_tool() {
        let measured = Measured {
            plain: milliseconds(&[4, 8]),
            approval: milliseconds(&[4, 8]),
            budget: milliseconds(&[6, 8]),
            intents_done: 6,
            budget_counts: 4,
        };
        let report = Report::new(
            DurabilityArgument::Relaxed,
            Path::new("/bench"),
            ("sqlite", "a temporary file in /bench".to_owned()),
            2,
            &measured,
        );
        assert_eq!(report.ratio_approval_to_plain_p50, 1.0);
        assert_eq!(report.ratio_budget_to_plain_p50, 1.5);
        assert_eq!(report.added_by_budget_p50_us, 2_000.0);
        assert_eq!(report.ratio_budget_to_plain_p99, 1.0);
        let met: Vec<_> = report
            .targets
            .iter()
            .map(|check| (check.field, check.met))
            .collect();
        assert_eq!(
            met,
            [
                ("ratio_approval_to_plain_p50", true),
                ("ratio_budget_to_plain_p50", false),
            ]
        );
        let table = report.table();
        assert!(table.contains("refund_budget"), "{table}");
        assert!(table.contains("NO"), "{table}");
    }

    #[test]
    fn the_policies_hold_nothing_the_benchmark_sends() {
        let arguments = arguments("8812");
        let approval = approval_policies().unwrap().approval.unwrap();
        assert!(!approval.requires("default", &arguments));
        for budget in budget_policies().unwrap().budgets {
            let units = budget.units(&arguments).unwrap();
            assert!(budget.admits(Default::default(), units), "{}", budget.name);
        }
        assert_eq!(
            budget_policies().unwrap().budgets[1].units(&arguments),
            Ok(AMOUNT_UNITS)
        );
    }

    #[tokio::test]
    async fn a_short_run_makes_every_call_done_and_counts_the_budgets() {
        let dir = tempfile::tempdir().unwrap();
        run(PoliciesBenchArgs {
            dir: dir.path().to_owned(),
            rounds: 3,
            durability: DurabilityArgument::Relaxed,
            ledger: None,
            json: true,
        })
        .await
        .unwrap();
    }
}

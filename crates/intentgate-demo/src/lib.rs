//! `intentgate demo`: the incident, replayed in seconds.
//!
//! A population of customers each wants one refund. Their support agent retries the way real
//! agents do: the framework re-runs a tool that raised (same tool call), the model calls the
//! tool again after an error because its prompt says "retry once" (a new tool call), and
//! some customers come back to ask "did my refund go through?", which makes the model call
//! the tool again (another new tool call). The same seeded customers and agents run twice
//! against the mock payments provider over real HTTP, with the same fault plan:
//!
//! 1. through a naive wrapper whose idempotency key is the tool call id, with an HTTP client
//!    that retries timeouts and 5xx twice under the same key;
//! 2. through intentgate (a `Gate` over a SQLite ledger in a temporary folder and the HTTP
//!    upstream that `examples/support-agent.yaml` describes).
//!
//! With `--provider stripe` the same storm runs against the mock in Stripe's dialect, with
//! the tools of `examples/stripe.yaml`: the customers' refunds are of payment intents, sent as
//! form bodies with the amount in cents, found again by listing the payment's refunds.
//!
//! Latencies and timeouts are scaled down a hundredfold so the replay takes seconds; the
//! provider's faults and its independence of commit from answer are unchanged. Afterwards
//! intentgate's ledger is reconciled with the provider's refunds, as `serve` does hourly.
//!
//! Last, the runaway-refund incident: an agent told to "retry refunds that may have failed"
//! refunds 212 customers twice under new intent ids, which no key can stop, replayed without
//! and then with a per-order budget (`incident.rs`).
//!
//! The binary's `demo` command wraps [`DemoArgs`], reads the fault plan `--faults` names and
//! calls [`run`]; the README's first command is this one.

mod agent;
mod incident;
mod naive;
mod report;
mod summary;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use intentgate_config::HashKeySource;
use intentgate_core::IntentStatus;
use intentgate_gate::{Clock, Gate, GateOptions, SystemClock};
use intentgate_http::HttpUpstream;
use intentgate_ledger::{Durability, Ledger, SqliteLedger, SqliteOptions};
use intentgate_mock::{Dialect, EffectKind, HttpFaultPlan, MockOptions, MockProvider, MockServer};
use intentgate_ops::reconcile::{PROVIDER_PAGE, Pairing, ToolToReconcile};
use intentgate_ops::{Mismatch, ReconcileOptions, reconcile_tool};
use tokio::sync::Semaphore;

use agent::{AGENTS_AT_ONCE, Agent, Customer, Tool};
pub use report::{Amounts, Report, Run};

/// The example config, embedded so the demo needs no files.
const EXAMPLE_CONFIG: &str = include_str!("../../../examples/support-agent.yaml");
/// The Stripe example, embedded the same way, for `--provider stripe`.
const STRIPE_CONFIG: &str = include_str!("../../../examples/stripe.yaml");
/// The secret the Stripe example reads; the mock takes any.
const STRIPE_DUMMY_SECRET: &str = "sk_test_intentgate_demo";
/// Everything slow is scaled by this: a 4.8 s p95 becomes 48 ms, a 10 s timeout 100 ms.
const TIME_SCALE: f64 = 0.01;
/// The window reconciled after the run: far more than the run takes.
const RECONCILE_WINDOW_MS: i64 = 60 * 60 * 1000;
/// Sweeps after the provider recovers, [`RECOVERY_PAUSE`] apart: five scaled minutes, for
/// intents with many attempts behind them to have their next step.
const RECOVERY_SWEEPS: usize = 10;
/// Time between two of those sweeps, before scaling.
const RECOVERY_PAUSE: Duration = Duration::from_secs(30);
/// Intents one sweep takes: every one the demo makes.
const SWEEP_LIMIT: u32 = 10_000;

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
    /// Which API the storm runs against: `mock` (the mock's own API, with the tools of
    /// examples/support-agent.yaml) or `stripe` (the mock in Stripe's dialect, with the tools
    /// of examples/stripe.yaml: form bodies, refunds of payment intents in cents, Stripe's
    /// lists and key layer).
    #[arg(long, value_enum, default_value_t = DemoProvider::Mock)]
    pub provider: DemoProvider,
}

/// The API `demo` runs its storm against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DemoProvider {
    /// The mock's own JSON API and examples/support-agent.yaml.
    Mock,
    /// The mock in Stripe's dialect and examples/stripe.yaml.
    Stripe,
}

/// Runs the demo with the fault plan `arguments.faults` names (`plan`), and prints its
/// report on stdout: a table, or one JSON object with `--json`.
pub async fn run(arguments: DemoArgs, plan: HttpFaultPlan) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let started = Instant::now();
    let customers = agent::customers(arguments.seed, arguments.customers as usize);
    let progress = if arguments.json {
        ProgressBar::hidden()
    } else {
        // The storm's customers in both runs, then the incident's in both of its runs.
        let bar = ProgressBar::new((customers.len() + incident::INCIDENT_CUSTOMERS) as u64 * 2);
        bar.set_style(
            ProgressStyle::with_template("{msg:>22} [{bar:40}] {pos}/{len} customers")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar
    };

    progress.set_message("naive wrapper");
    let naive = run_naive(&arguments, &plan, &customers, &progress).await?;
    progress.set_message("intentgate");
    let gated = run_intentgate(&arguments, &plan, &customers, &progress).await?;
    progress.set_message("runaway agent");
    let incident = incident::run(arguments.seed, &progress).await?;
    progress.finish_and_clear();

    let report = Report {
        customers: customers.len(),
        seed: arguments.seed,
        faults: arguments.faults.clone(),
        provider: (arguments.provider == DemoProvider::Stripe).then(|| "stripe".to_owned()),
        naive,
        intentgate: gated,
        incident,
        seconds: started.elapsed().as_secs_f64(),
    };
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The mock provider with the demo's plan, on a loopback port.
async fn start_provider(arguments: &DemoArgs, plan: &HttpFaultPlan) -> anyhow::Result<MockServer> {
    let mut plan = plan.clone();
    plan.seed = arguments.seed;
    plan.latency_scale *= TIME_SCALE;
    plan.retry_after_ms = scale(Duration::from_millis(plan.retry_after_ms)).as_millis() as u64;
    plan.timeout_hold_ms = scale(Duration::from_millis(plan.timeout_hold_ms)).as_millis() as u64;
    let dialect = match arguments.provider {
        DemoProvider::Mock => Dialect::Json,
        DemoProvider::Stripe => Dialect::Stripe,
    };
    let provider = MockProvider::new(MockOptions::new(plan).with_dialect(dialect))
        .context("the fault plan")?;
    MockServer::start(provider)
        .await
        .context("starting the mock provider on a loopback port")
}

fn scale(duration: Duration) -> Duration {
    duration.mul_f64(TIME_SCALE).max(Duration::from_millis(1))
}

/// Serves every customer with at most [`AGENTS_AT_ONCE`] agents at a time.
async fn serve_customers(
    customers: &[Customer],
    tool: Arc<dyn Tool>,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<agent::Served>> {
    let slots = Arc::new(Semaphore::new(AGENTS_AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    for customer in customers.iter().cloned() {
        let slot = slots.clone().acquire_owned().await?;
        let tool = tool.clone();
        running.spawn(async move {
            let served = Agent::new(customer).serve(&*tool).await;
            drop(slot);
            served
        });
    }
    let mut served = Vec::with_capacity(customers.len());
    while let Some(done) = running.join_next().await {
        served.push(done.context("an agent task failed")?);
        progress.inc(1);
    }
    Ok(served)
}

async fn run_naive(
    arguments: &DemoArgs,
    plan: &HttpFaultPlan,
    customers: &[Customer],
    progress: &ProgressBar,
) -> anyhow::Result<Run> {
    let server = start_provider(arguments, plan).await?;
    let stripe = arguments.provider == DemoProvider::Stripe;
    let tool: Arc<dyn Tool> = Arc::new(naive::NaiveRefund::new(
        &server.url(),
        scale(Duration::from_secs(10)),
        stripe,
    )?);
    let served = serve_customers(customers, tool, progress).await?;
    let mut run = Run::collect(
        "naive wrapper (key = tool call id)",
        &served,
        server.provider(),
        None,
    );
    if stripe {
        run.amounts = Some(amounts(server.provider(), customers));
    }
    server.stop().await?;
    Ok(run)
}

async fn run_intentgate(
    arguments: &DemoArgs,
    plan: &HttpFaultPlan,
    customers: &[Customer],
    progress: &ProgressBar,
) -> anyhow::Result<Run> {
    let server = start_provider(arguments, plan).await?;
    let url = server.url();
    let stripe = arguments.provider == DemoProvider::Stripe;
    // The example's only variables: the provider's address, and Stripe's secret.
    let environment = move |name: &str| match name {
        "INTENTGATE_MOCK_URL" | "STRIPE_API_BASE" => Some(url.clone()),
        "STRIPE_SECRET_KEY" => Some(STRIPE_DUMMY_SECRET.to_owned()),
        _ => None,
    };
    let (text, name) = if stripe {
        (STRIPE_CONFIG, "examples/stripe.yaml")
    } else {
        (EXAMPLE_CONFIG, "examples/support-agent.yaml")
    };
    // The ledger is thrown away afterwards: a random hash key will do, and the demo needs no
    // environment.
    let hash_key = HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key()?);
    let mut loaded = intentgate_config::load_str_with(text, name, &environment, &hash_key)
        .map_err(|errors| anyhow::anyhow!("{errors}"))?;
    for tool in &mut loaded.tools {
        tool.timeout = scale(tool.timeout);
    }
    let folder = tempfile::tempdir().context("a temporary folder for the ledger")?;
    let ledger = Arc::new(SqliteLedger::open(
        folder.path().join("ledger.db"),
        SqliteOptions {
            durability: Durability::Strict,
            inline: false,
        },
    )?);
    let options = GateOptions {
        lookup_interval: scale(intentgate_gate::LOOKUP_INTERVAL),
        retry_after_cap: scale(intentgate_gate::RETRY_AFTER_CAP),
        backoff_base: scale(intentgate_gate::BACKOFF_BASE),
        resolution: intentgate_gate::Resolution {
            backoff_initial: scale(intentgate_gate::RESEND_BACKOFF_INITIAL),
            backoff_max: scale(intentgate_gate::RESEND_BACKOFF_MAX),
            ..intentgate_runtime::resolution(&loaded.config.resolution)
        },
        ..GateOptions::default()
    };
    let gate = Arc::new(intentgate_runtime::build_gate_with(
        &loaded,
        ledger.clone(),
        Arc::new(SystemClock),
        options,
    )?);
    let tool: Arc<dyn Tool> = Arc::new(agent::GatedRefund {
        gate: gate.clone(),
        stripe,
    });
    let served = serve_customers(customers, tool, progress).await?;

    // The provider recovers, and the sweeper settles what the storm left unknown, as in
    // `serve`: a lookup, then the same request with the same key while the key window lasts.
    server
        .provider()
        .set_plan(HttpFaultPlan::quiet())
        .context("healing the mock provider")?;
    let unknown = settle_unknown(&gate, &ledger).await?;
    let mut run = Run::collect("intentgate", &served, server.provider(), Some(unknown));
    if stripe {
        run.amounts = Some(amounts(server.provider(), customers));
    }
    // Then reconciliation, as `serve` runs it every hour.
    run.reconciliation = Some(reconcile_refunds(&loaded, ledger).await?);
    server.stop().await?;
    Ok(run)
}

/// Sweeps until no intent is unknown or [`RECOVERY_SWEEPS`] sweeps have run; how
/// many are still unknown then (those whose provider key replays a stored server error: no
/// request under that key can settle them, reconciliation and their owner do).
async fn settle_unknown(gate: &Gate, ledger: &SqliteLedger) -> anyhow::Result<usize> {
    for _ in 0..RECOVERY_SWEEPS {
        gate.sweep(SWEEP_LIMIT).await?;
        if count_unknown(ledger).await? == 0 {
            break;
        }
        tokio::time::sleep(scale(RECOVERY_PAUSE)).await;
    }
    count_unknown(ledger).await
}

async fn count_unknown(ledger: &SqliteLedger) -> anyhow::Result<usize> {
    let mut unknown = 0;
    let mut after_id = 0;
    loop {
        let page = ledger.list(after_id, 1000).await?;
        let Some(last) = page.last() else {
            return Ok(unknown);
        };
        after_id = last.id;
        unknown += page
            .iter()
            .filter(|intent| intent.status == IntentStatus::Unknown)
            .count();
    }
}

/// Reconciles the refunds of the last hour; mismatches by kind. Unknown intents get no grace
/// period: the demo's hour is over.
async fn reconcile_refunds(
    loaded: &intentgate_config::LoadedConfig,
    ledger: Arc<SqliteLedger>,
) -> anyhow::Result<BTreeMap<String, u64>> {
    let ledger: Arc<dyn Ledger> = ledger;
    let upstream = HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools())
        .context("the example's upstreams")?;
    let tool = loaded
        .config
        .tools
        .iter()
        .find(|tool| tool.name == "refund_order")
        .context("the example config has refund_order")?;
    let list = tool
        .list
        .as_ref()
        .context("the example's refund_order has a list")?;
    let now_ms = SystemClock.now_ms();
    let options = ReconcileOptions {
        since_ms: now_ms - RECONCILE_WINDOW_MS,
        until_ms: now_ms + 1,
        now_ms,
        unknown_grace_ms: 0,
        actor: "demo".to_owned(),
    };
    let pager = upstream.list_records(
        &tool.name,
        list,
        options.since_ms,
        options.until_ms,
        PROVIDER_PAGE,
    )?;
    let mut found = BTreeMap::new();
    let mut count = |mismatch: Mismatch| {
        *found.entry(mismatch.kind.as_str().to_owned()).or_default() += 1;
    };
    let to_reconcile = ToolToReconcile {
        tool: tool.name.clone(),
        owner: None,
        amount_argument: Some("/amount".to_owned()),
        // The Stripe example's refunds are in cents (`amount_minor_units: USD`).
        amount_minor_units: list
            .fields
            .amount_minor_units
            .as_deref()
            .and_then(|source| intentgate_core::currency::CurrencySource::parse(source).ok()),
        pairing: Pairing::ProviderKey,
        // Refunds have no sensitive arguments.
        definition: None,
        source: Box::new(pager),
        // The demo refunds through this tool only: no other tool's records to pair.
        other_tools: Vec::new(),
    };
    reconcile_tool(&ledger, to_reconcile, &options, &mut count)
        .await
        .context("reconciling the refunds")?;
    Ok(found)
}

/// The provider's refunds against what each customer asked for: how many hold the
/// customer's amount in cents (Stripe's minor units), and one of them as an example.
fn amounts(provider: &MockProvider, customers: &[Customer]) -> Amounts {
    let asked: BTreeMap<String, &Customer> = customers
        .iter()
        .map(|customer| (customer.payment_intent(), customer))
        .collect();
    let mut found = Amounts::default();
    for effect in provider
        .effects()
        .iter()
        .filter(|effect| effect.kind == EffectKind::Refund)
    {
        found.refunds += 1;
        let payment_intent = effect.object["payment_intent"].as_str().unwrap_or_default();
        let cents = effect.object["amount"].as_u64();
        let Some(customer) = asked.get(payment_intent) else {
            continue;
        };
        if cents == Some(customer.cents) {
            found.in_cents_asked += 1;
            if found.example.is_none() {
                found.example = Some(format!(
                    "{payment_intent}: amount={} for {}",
                    customer.cents, customer.amount
                ));
            }
        }
    }
    found
}

//! `intentgate bench ledger`: the overhead of a new side-effecting call through the gate and
//! its ledger, against one fsync of the same disk (docs/design.md section 12).
//!
//! Everything runs in one temporary folder inside `--dir`, so that the baseline (one fsync)
//! and the ledger share a disk. With `--ledger URL` the ledger is PostgreSQL instead, in a
//! fresh schema named for the run and dropped afterwards; the fsync probe still runs in
//! `--dir`. The gate is the real [`Gate`] with one side-effecting tool;
//! its upstream answers at once, so the figures are the gateway's and the ledger's alone.
//! A benchmark that silently measured failures would be worthless, so every call must return
//! `done`, the upstream must see exactly one request per call, and the ledger must hold
//! exactly one `done` intent per call; anything else ends the run with an error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use clap::Args;
use intentgate_core::{CallStatus, Effect, IntentStatus, ToolDefinition, UpstreamObservation};
use intentgate_gate::{
    CallContext, Gate, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
#[cfg(feature = "postgres")]
use intentgate_ledger::PostgresOptions;
use intentgate_ledger::{IntentId, Ledger, SqliteLedger, SqliteOptions};
use serde::Serialize;
use serde_json::json;

use intentgate_terminal::table::{self, Align};

use crate::measure::{
    TargetCheck, cores, existing_folder, measure_fsync, microseconds, percentile, progress,
    rounded, scratch_folder, target_cells,
};
use intentgate_terminal::DurabilityArgument;

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

/// Default new intents per concurrency level: enough for a stable figure at 64 callers in
/// a few seconds.
pub const INTENTS_DEFAULT: u32 = 5_000;
/// Most new intents per level. Bounds the run's time, its disk use and the memory of the
/// per-call latencies it keeps.
pub const INTENTS_MAX: u32 = 1_000_000;
/// Most new intents at 1 caller. Under strict durability each costs one fsync (about 0.1 ms
/// on a local SSD, several ms on some virtual disks), so more would only make the run longer.
pub const SEQUENTIAL_INTENTS_MAX: u32 = 2_000;
/// Concurrent callers of the throughput level the design target names.
pub const CONCURRENT_CALLERS: u32 = 64;
/// Calls made before measuring, so that opening read connections and filling statement
/// caches is not counted as the cost of an intent.
const WARM_UP_CALLS: u32 = 20;

/// Intents read per page when counting the ledger; bounds the memory of the check.
const LIST_PAGE_SIZE: u32 = 1_000;

/// The benchmark's one side-effecting tool.
const TOOL_NAME: &str = "refund_order";
/// Its intent key, as an operator would configure it.
const TOOL_KEY: &str = "refund:{order_id}:{amount:.2}";
/// The upstream answers at once, so the timeout never fires; a realistic value keeps the
/// gate's lease arithmetic the same as in production.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of not-processed shapes; never used, since the upstream always answers 200.
const TOOL_RETRY_BUDGET: u32 = 2;
/// Every refund is of the same amount; the order ids keep the intents distinct.
const REFUND_AMOUNT: f64 = 49.0;

/// design target: new side-effecting intents per second at 64 concurrent callers on SQLite
/// (the design states it for 2 cores), which grouped commits make possible.
const TARGET_INTENTS_PER_SECOND_64_SQLITE: f64 = 20_000.0;
/// The same on PostgreSQL.
const TARGET_INTENTS_PER_SECOND_64_POSTGRES: f64 = 3_000.0;

/// The design target of new intents per second at [`CONCURRENT_CALLERS`] on `ledger`
/// (`sqlite` or `postgresql`).
pub(super) fn target_intents_per_second_64(ledger: &str) -> f64 {
    if ledger == "postgresql" {
        TARGET_INTENTS_PER_SECOND_64_POSTGRES
    } else {
        TARGET_INTENTS_PER_SECOND_64_SQLITE
    }
}

/// Runs the benchmark and prints its report.
pub async fn run(arguments: LedgerBenchArgs) -> anyhow::Result<()> {
    let dir = existing_folder(&arguments.dir)?;
    // Declared before the ledger so that it is removed after the ledger has closed, also
    // when the run fails.
    let scratch = scratch_folder(&dir, "intentgate-bench-")?;
    let progress = progress(arguments.json);

    progress("measuring one fsync of this disk ...");
    let probe_dir = scratch.path().to_path_buf();
    let fsync_samples = tokio::task::spawn_blocking(move || measure_fsync(&probe_dir))
        .await
        .context("the fsync probe panicked")?
        .with_context(|| format!("can't measure an fsync in {}", dir.display()))?;

    let durability = arguments.durability.into();
    let (ledger, postgres): (Arc<dyn Ledger>, Option<Arc<PostgresLedger>>) = match &arguments.ledger
    {
        None => {
            let path = scratch.path().join("ledger.sqlite3");
            let options = SqliteOptions {
                durability,
                inline: false,
            };
            (Arc::new(SqliteLedger::open(path, options)?), None)
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
    let measured = measure(&arguments, ledger, &progress).await;
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
        &fsync_samples,
        &measured,
    );
    if arguments.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// In a build without PostgreSQL no run has a schema to drop: the type has no values.
#[cfg(not(feature = "postgres"))]
pub(super) enum PostgresLedger {}

#[cfg(not(feature = "postgres"))]
impl PostgresLedger {
    pub(super) fn location(&self) -> String {
        match *self {}
    }

    pub(super) async fn destroy(&self) -> intentgate_ledger::Result<()> {
        match *self {}
    }
}

#[cfg(feature = "postgres")]
pub(super) use intentgate_ledger::PostgresLedger;

/// A PostgreSQL ledger at `url` in a fresh schema of its own, for one measurement, as the
/// gate's ledger and as itself: drop it with `destroy` afterwards, also when the measurement
/// failed.
#[cfg(feature = "postgres")]
pub(super) async fn fresh_postgres(
    url: &str,
    durability: intentgate_ledger::Durability,
) -> anyhow::Result<(Arc<dyn Ledger>, Arc<PostgresLedger>)> {
    ensure!(
        matches!(
            intentgate_ledger::Location::parse(url),
            intentgate_ledger::Location::Postgres(_)
        ),
        "--ledger takes a PostgreSQL URL (postgres://user@host:port/database); without it the \
         benchmark uses a fresh SQLite file in --dir"
    );
    let options = PostgresOptions {
        schema: run_schema(),
        durability,
        ..PostgresOptions::default()
    };
    let postgres = Arc::new(PostgresLedger::connect(url, options).await?);
    Ok((postgres.clone(), postgres))
}

#[cfg(not(feature = "postgres"))]
pub(super) async fn fresh_postgres(
    _url: &str,
    _durability: intentgate_ledger::Durability,
) -> anyhow::Result<(Arc<dyn Ledger>, Arc<PostgresLedger>)> {
    anyhow::bail!(
        "--ledger needs PostgreSQL, which this build of intentgate leaves out: build it with \
         its default features (or `--features postgres`)"
    )
}

/// A schema name for one run: unique on one database across runs and concurrent runs.
#[cfg(feature = "postgres")]
fn run_schema() -> String {
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    format!("intentgate_bench_{started_ms}_{}", std::process::id())
}

/// What the measured levels found.
struct Measured {
    intents_1: u32,
    sequential: Sequential,
    intents_64: u32,
    concurrent_elapsed: Duration,
    intents_in_ledger: u64,
}

/// Runs the warm-up and both levels through a gate over `ledger`, then checks that the
/// upstream saw one request per call and the ledger holds one `done` intent per call.
async fn measure(
    arguments: &LedgerBenchArgs,
    ledger: Arc<dyn Ledger>,
    progress: &dyn Fn(&str),
) -> anyhow::Result<Measured> {
    let (gate, upstream) = warmed_up_gate(ledger.clone()).await?;
    let intents_1 = arguments.intents.min(SEQUENTIAL_INTENTS_MAX);
    progress(&format!(
        "measuring {intents_1} new intents with 1 caller ..."
    ));
    let sequential = measure_sequential(&gate, intents_1).await?;
    let intents_64 = arguments.intents;
    progress(&format!(
        "measuring {intents_64} new intents with {CONCURRENT_CALLERS} callers ..."
    ));
    let concurrent_elapsed = measure_concurrent(&gate, intents_64).await?;

    let calls = u64::from(WARM_UP_CALLS + intents_1 + intents_64);
    let requests = upstream.requests.load(Ordering::Relaxed);
    ensure!(
        requests == calls,
        "the upstream received {requests} requests for {calls} calls; expected one per call"
    );
    let intents_in_ledger = count_done_intents(ledger.as_ref()).await?;
    ensure!(
        intents_in_ledger == calls,
        "the ledger holds {intents_in_ledger} intents after {calls} calls; expected one per call"
    );
    Ok(Measured {
        intents_1,
        sequential,
        intents_64,
        concurrent_elapsed,
        intents_in_ledger,
    })
}

/// New intents per second through a gate over `ledger` whose upstream answers at once, made
/// by [`CONCURRENT_CALLERS`] callers: the ledger-only rate `bench gateway` compares its
/// callers through the HTTP server with. Checks one upstream request and one `done` answer
/// per call.
pub(super) async fn concurrent_rate(ledger: Arc<dyn Ledger>, intents: u32) -> anyhow::Result<f64> {
    let (gate, upstream) = warmed_up_gate(ledger).await?;
    let elapsed = measure_concurrent(&gate, intents).await?;
    let calls = u64::from(WARM_UP_CALLS + intents);
    let requests = upstream.requests.load(Ordering::Relaxed);
    ensure!(
        requests == calls,
        "the upstream received {requests} requests for {calls} calls; expected one per call"
    );
    Ok(per_second(intents, elapsed))
}

/// The benchmark's gate over `ledger`, with its upstream that answers at once, after
/// [`WARM_UP_CALLS`] unmeasured calls.
async fn warmed_up_gate(
    ledger: Arc<dyn Ledger>,
) -> anyhow::Result<(Arc<Gate>, Arc<InstantUpstream>)> {
    let upstream = Arc::new(InstantUpstream::default());
    let gate = Arc::new(Gate::new(
        vec![refund_tool()?],
        ledger,
        upstream.clone(),
        Arc::new(SystemClock),
        GateOptions::default(),
    )?);
    for index in 0..WARM_UP_CALLS {
        call_refund(&gate, &format!("warm-up-{index}")).await?;
    }
    Ok((gate, upstream))
}

/// What the 1-caller level measured.
struct Sequential {
    elapsed: Duration,
    /// One entry per call, in call order.
    latencies: Vec<Duration>,
}

/// Makes `intents` new intents one after another, timing each.
async fn measure_sequential(gate: &Gate, intents: u32) -> anyhow::Result<Sequential> {
    let mut latencies = Vec::with_capacity(intents as usize);
    let started = Instant::now();
    for index in 0..intents {
        let call_started = Instant::now();
        call_refund(gate, &format!("sequential-{index}")).await?;
        latencies.push(call_started.elapsed());
    }
    Ok(Sequential {
        elapsed: started.elapsed(),
        latencies,
    })
}

/// Makes `intents` new intents from `CONCURRENT_CALLERS` tasks, each issuing its share one
/// after another; returns the time until the last one finished.
async fn measure_concurrent(gate: &Arc<Gate>, intents: u32) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let callers: Vec<_> = (0..CONCURRENT_CALLERS)
        .map(|caller| {
            let share =
                intents / CONCURRENT_CALLERS + u32::from(caller < intents % CONCURRENT_CALLERS);
            let gate = gate.clone();
            tokio::spawn(async move {
                for index in 0..share {
                    call_refund(&gate, &format!("concurrent-{caller}-{index}")).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for caller in callers {
        caller.await.context("a benchmark caller panicked")??;
    }
    Ok(started.elapsed())
}

/// One new refund through the gate; anything but `done` is an error.
async fn call_refund(gate: &Gate, order_id: &str) -> anyhow::Result<()> {
    let arguments = json!({"order_id": order_id, "amount": REFUND_AMOUNT});
    let outcome = gate
        .call(TOOL_NAME, arguments, &CallContext::default())
        .await
        .with_context(|| format!("the gate failed the refund of order {order_id}"))?;
    if outcome.status != CallStatus::Done {
        bail!(
            "the refund of order {order_id} returned `{}` instead of `done`: {}",
            outcome.status,
            outcome.message
        );
    }
    Ok(())
}

/// Counts the ledger's intents, page by page; every one must be `done`.
async fn count_done_intents(ledger: &dyn Ledger) -> anyhow::Result<u64> {
    let mut count = 0;
    let mut after_id = IntentId::MIN;
    loop {
        let page = ledger.list(after_id, LIST_PAGE_SIZE).await?;
        let Some(last) = page.last() else {
            return Ok(count);
        };
        after_id = last.id;
        if let Some(intent) = page
            .iter()
            .find(|intent| intent.status != IntentStatus::Done)
        {
            bail!(
                "intent {} ({}) is `{}` in the ledger instead of `done`",
                intent.id,
                intent.key,
                intent.status
            );
        }
        count += page.len() as u64;
    }
}

/// The benchmark's tool, defined the way an operator would configure it.
fn refund_tool() -> anyhow::Result<ToolDefinition> {
    let schema = json!({
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "number"}
        },
        "required": ["order_id", "amount"],
        "additionalProperties": false
    });
    Ok(ToolDefinition::new(
        TOOL_NAME,
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some(TOOL_KEY),
        TOOL_TIMEOUT,
        TOOL_RETRY_BUDGET,
    )?)
}

/// An upstream that performs every request at once and successfully, so that only the
/// gateway and the ledger are measured. Counts requests, to prove one per intent.
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

fn per_second(count: u32, elapsed: Duration) -> f64 {
    f64::from(count) / elapsed.as_secs_f64()
}

/// A whole number with commas between thousands ("5,000"), as the design writes them.
pub(super) fn grouped_thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut text = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            text.push(',');
        }
        text.push(digit);
    }
    if value.round() < 0.0 {
        text.insert(0, '-');
    }
    text
}

/// What the run measured. Serialised by `--json`: its field names are a promise to users.
#[derive(Debug, Serialize)]
struct Report {
    durability: &'static str,
    /// The store measured: `sqlite` or `postgresql`.
    ledger: &'static str,
    /// Where the ledger was (never with a password).
    ledger_location: String,
    /// The folder measured in (absolute).
    dir: String,
    /// Cores this process may use; the design's throughput target is stated for 2.
    cores: usize,
    fsync_samples: usize,
    fsync_median_us: f64,
    fsync_p99_us: f64,
    /// Unmeasured calls made first.
    warm_up_intents: u32,
    /// New intents measured at 1 caller.
    intents_1: u32,
    /// New intents measured at 64 callers.
    intents_64: u32,
    concurrent_callers: u32,
    intents_per_second_1: f64,
    intents_per_second_64: f64,
    /// Latency of one new intent at 1 caller.
    latency_p50_us: f64,
    latency_p99_us: f64,
    /// p50 latency over the fsync median: what a new intent costs in fsyncs.
    ratio_p50_to_fsync: f64,
    /// 64-caller throughput over 1-caller throughput: how much grouped commits gain.
    ratio_64_to_1: f64,
    /// Intents found in the ledger afterwards, all `done`: one per call, warm-up included.
    intents_in_ledger: u64,
    /// The design targets that apply to this durability, and whether each is met.
    targets: Vec<TargetCheck>,
}

impl Report {
    fn new(
        durability: DurabilityArgument,
        dir: &Path,
        (ledger, ledger_location): (&'static str, String),
        fsync_samples: &[Duration],
        measured: &Measured,
    ) -> Report {
        let Measured {
            intents_1,
            ref sequential,
            intents_64,
            concurrent_elapsed,
            intents_in_ledger,
        } = *measured;
        let mut fsyncs = fsync_samples.to_vec();
        fsyncs.sort_unstable();
        let mut latencies = sequential.latencies.clone();
        latencies.sort_unstable();
        let fsync_median_us = microseconds(percentile(&fsyncs, 0.5));
        let latency_p50_us = microseconds(percentile(&latencies, 0.5));
        let intents_per_second_1 = per_second(intents_1, sequential.elapsed);
        let intents_per_second_64 = per_second(intents_64, concurrent_elapsed);
        let ratio_p50_to_fsync = latency_p50_us / fsync_median_us;

        let target_per_second = target_intents_per_second_64(ledger);
        // The latency of one new intent has no target of its own: the gateway's overhead
        // targets (`bench gateway`) hold the whole call, this latency included.
        let targets = vec![TargetCheck {
            field: "intents_per_second_64",
            target: format!(
                "at least {} per second on {ledger} (on 2 cores)",
                grouped_thousands(target_per_second)
            ),
            met: intents_per_second_64 >= target_per_second,
        }];

        Report {
            durability: durability.as_str(),
            ledger,
            ledger_location,
            dir: dir.display().to_string(),
            cores: cores(),
            fsync_samples: fsyncs.len(),
            fsync_median_us: rounded(fsync_median_us, 1),
            fsync_p99_us: rounded(microseconds(percentile(&fsyncs, 0.99)), 1),
            warm_up_intents: WARM_UP_CALLS,
            intents_1,
            intents_64,
            concurrent_callers: CONCURRENT_CALLERS,
            intents_per_second_1: rounded(intents_per_second_1, 1),
            intents_per_second_64: rounded(intents_per_second_64, 1),
            latency_p50_us: rounded(latency_p50_us, 1),
            latency_p99_us: rounded(microseconds(percentile(&latencies, 0.99)), 1),
            ratio_p50_to_fsync: rounded(ratio_p50_to_fsync, 3),
            ratio_64_to_1: rounded(intents_per_second_64 / intents_per_second_1, 2),
            intents_in_ledger,
            targets,
        }
    }

    /// The human report: one row per figure, with its design target where one applies.
    fn table(&self) -> String {
        let target = |field: &str| target_cells(&self.targets, field);
        let plain = |label: String, value: String| [label, value, String::new(), String::new()];
        let checked = |label: String, value: String, field: &str| {
            let (target, met) = target(field);
            [label, value, target, met]
        };
        let rows = [
            [
                "measure".to_owned(),
                "value".to_owned(),
                "target".to_owned(),
                "met".to_owned(),
            ],
            plain(
                "one fsync of this disk, median".to_owned(),
                format!("{:.1} us", self.fsync_median_us),
            ),
            plain(
                "one fsync of this disk, p99".to_owned(),
                format!("{:.1} us", self.fsync_p99_us),
            ),
            plain(
                "new intents per second, 1 caller".to_owned(),
                grouped_thousands(self.intents_per_second_1),
            ),
            checked(
                format!(
                    "new intents per second, {} callers",
                    self.concurrent_callers
                ),
                grouped_thousands(self.intents_per_second_64),
                "intents_per_second_64",
            ),
            plain(
                "latency of a new intent, 1 caller, p50".to_owned(),
                format!("{:.1} us", self.latency_p50_us),
            ),
            plain(
                "latency of a new intent, 1 caller, p99".to_owned(),
                format!("{:.1} us", self.latency_p99_us),
            ),
            plain(
                "p50 latency / fsync median".to_owned(),
                format!("{:.2}", self.ratio_p50_to_fsync),
            ),
            plain(
                format!("throughput, {} callers / 1 caller", self.concurrent_callers),
                format!("{:.1}", self.ratio_64_to_1),
            ),
        ];
        let store = match self.ledger {
            "postgresql" => format!(
                "PostgreSQL ledger at {}, durability {}, fsync probe in {}",
                self.ledger_location, self.durability, self.dir
            ),
            _ => format!(
                "SQLite ledger, durability {}, in {}",
                self.durability, self.dir
            ),
        };
        let mut text = format!(
            "intentgate bench ledger: {store} ({} cores)\n\
             {} + {} new intents measured ({} callers for the second); every call returned \
             `done`, the upstream saw one request per call, and the ledger holds {} `done` \
             intents, one per call ({} warm-up calls included).\n\n",
            self.cores,
            self.intents_1,
            self.intents_64,
            self.concurrent_callers,
            self.intents_in_ledger,
            self.warm_up_intents,
        );
        text.push_str(&table::render(rows, &[Align::Left, Align::Right]));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped_as_the_spec_writes_them() {
        assert_eq!(grouped_thousands(5_000.0), "5,000");
        assert_eq!(grouped_thousands(999.4), "999");
        assert_eq!(grouped_thousands(1_234_567.8), "1,234,568");
        assert_eq!(grouped_thousands(0.0), "0");
        assert_eq!(grouped_thousands(-12_345.0), "-12,345");
    }

    /// An upstream that refuses every request, as a misconfigured benchmark would see.
    struct RefusingUpstream;

    #[async_trait]
    impl Upstream for RefusingUpstream {
        async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
            UpstreamObservation::response(400, json!({"error": {"message": "no such order"}}))
        }

        async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
            LookupOutcome::NotFound
        }
    }

    #[tokio::test]
    async fn a_call_that_is_not_done_fails_the_benchmark() {
        let scratch = tempfile::tempdir().unwrap();
        let ledger = Arc::new(
            SqliteLedger::open(
                scratch.path().join("ledger.sqlite3"),
                SqliteOptions::inline(intentgate_ledger::Durability::Relaxed),
            )
            .unwrap(),
        );
        let gate = Gate::new(
            vec![refund_tool().unwrap()],
            ledger.clone(),
            Arc::new(RefusingUpstream),
            Arc::new(SystemClock),
            GateOptions::default(),
        )
        .unwrap();
        let error = call_refund(&gate, "8812").await.unwrap_err().to_string();
        assert!(
            error.contains("order 8812") && error.contains("`rejected` instead of `done`"),
            "{error}"
        );
        // The intent exists but is not done, so the ledger check refuses it too.
        let error = count_done_intents(ledger.as_ref()).await.unwrap_err();
        assert!(error.to_string().contains("`rejected`"), "{error}");
    }

    #[test]
    fn the_benchmark_tool_is_a_valid_side_effecting_tool() {
        let tool = refund_tool().unwrap();
        assert_eq!(tool.effect, Effect::SideEffect);
        let key = tool
            .key
            .unwrap()
            .render(&json!({"order_id": "8812", "amount": 49}), None)
            .unwrap();
        assert_eq!(key, "refund:8812:49.00");
    }
}

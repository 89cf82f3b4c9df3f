//! `intentgate bench reconcile`: reconciliation of a large window (docs/design.md section 12: 1,000,000
//! intents against 1,000,000 provider records in under 10 s and under 1 GiB).
//!
//! A fresh SQLite ledger in a temporary folder inside `--dir` is filled with the intents of
//! one side-effecting tool, spread over an hour. The provider's records are generated page
//! by page (1,000 a page, as the HTTP pager hands them over, without their raw JSON), so the
//! figures are reconciliation's own, not a provider's transfer and parsing. Every 10,000 intents hold one of each
//! mismatch kind (an unknown intent the provider has, one it lacks, a done intent without
//! a record, a duplicate, a different amount, an effect the model was told was rejected)
//! and one provider record made around the gateway; the run must find exactly those, or the
//! benchmark fails. The baseline, measured in the same run, is a plain scan of the same
//! intents through the same ledger query. Peak memory is the process's peak resident set
//! during the run (reset before it, Linux only).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use async_trait::async_trait;
use clap::Args;
use intentgate_core::IntentStatus;
use intentgate_http::ListedRecord;
use intentgate_ledger::{
    Durability, IntentFilter, IntentRecord, Ledger, Order, SqliteLedger, SqliteOptions,
};
use intentgate_ops::reconcile::{LEDGER_PAGE, PROVIDER_PAGE, Pairing, ToolToReconcile};
use intentgate_ops::{MismatchKind, ReconcileOptions, RecordSource, reconcile_tool};
use serde::Serialize;
use serde_json::json;

use crate::measure::{existing_folder, progress, scratch_folder};

use intentgate_terminal::table::{self, Align};

/// `intentgate bench reconcile`.
#[derive(Debug, Args)]
pub struct ReconcileBenchArgs {
    /// The folder the ledger goes in (in a temporary folder inside it).
    #[arg(long, env = "INTENTGATE_BENCH_DIR", default_value = ".")]
    pub dir: PathBuf,

    // The help is built at run time so that it states the limits' actual values.
    #[arg(
        long,
        default_value_t = INTENTS_DEFAULT,
        value_parser = clap::value_parser!(u32).range(i64::from(INTENTS_MIN)..=i64::from(INTENTS_MAX)),
        help = format!("Intents in the window ({INTENTS_MIN} to {INTENTS_MAX})")
    )]
    pub intents: u32,

    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Default intents (and about as many provider records): the design target's size.
pub const INTENTS_DEFAULT: u32 = 1_000_000;
/// Most intents: bounds the run's disk use and time.
pub const INTENTS_MAX: u32 = 5_000_000;
/// Smallest run: one block of each mismatch kind.
pub const INTENTS_MIN: u32 = BLOCK;
/// Every block of this many intents holds one intent of each mismatch kind and one
/// record made around the gateway: about 0.06 % of a window, a bad hour.
const BLOCK: u32 = 10_000;
/// Intents inserted per transaction while filling the ledger; bounds the setup's memory.
const INSERT_CHUNK: usize = 50_000;
/// The window the intents are spread over.
const WINDOW_MS: i64 = 60 * 60 * 1000;
/// Start of the window (2026-01-01T00:00:00Z): fixed, so runs compare.
const WINDOW_START_MS: i64 = 1_767_225_600_000;
/// Grace of unknown intents; every unknown intent of the run is older.
const UNKNOWN_GRACE_MS: i64 = 15 * 60 * 1000;
const TOOL: &str = "refund_order";

/// design target: seconds for 1,000,000 intents against 1,000,000 records.
const TARGET_SECONDS: f64 = 10.0;
/// design target: peak memory, in MiB.
const TARGET_PEAK_MIB: f64 = 1024.0;

/// What intent `i` of the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Done, one record with its amount.
    Matched,
    UnknownFound,
    UnknownMissing,
    MissingRecord,
    Duplicate,
    Amount,
    EffectDespiteStatus,
}

fn shape(i: u32) -> Shape {
    match i % BLOCK {
        0 => Shape::UnknownFound,
        1 => Shape::UnknownMissing,
        2 => Shape::MissingRecord,
        3 => Shape::Duplicate,
        4 => Shape::Amount,
        5 => Shape::EffectDespiteStatus,
        _ => Shape::Matched,
    }
}

fn key(i: u32) -> String {
    format!("refund:{i}:49.00")
}

fn first_seen_ms(i: u32, intents: u32) -> i64 {
    WINDOW_START_MS + i64::from(i) * WINDOW_MS / i64::from(intents)
}

#[derive(Debug, Serialize)]
struct Figures {
    intents: u32,
    provider_records: u64,
    seconds: f64,
    baseline_scan_seconds: f64,
    ratio_to_scan: f64,
    peak_rss_mib: Option<f64>,
    rss_before_mib: Option<f64>,
    mismatches: std::collections::BTreeMap<String, u64>,
    target_seconds: f64,
    target_peak_mib: f64,
    /// Targets are stated for 1,000,000 intents; only a run of that size can meet them.
    target_seconds_met: Option<bool>,
    target_peak_met: Option<bool>,
    fill_seconds: f64,
}

pub async fn run(arguments: ReconcileBenchArgs) -> anyhow::Result<()> {
    let dir = existing_folder(&arguments.dir)?;
    let intents = arguments.intents;
    let temporary = scratch_folder(&dir, "intentgate-bench-reconcile-")?;
    let figures = measure(temporary.path(), intents, arguments.json).await?;
    temporary
        .close()
        .context("can't remove the temporary folder")?;
    if arguments.json {
        println!("{}", serde_json::to_string(&figures)?);
    } else {
        print!("{}", table(&figures));
    }
    Ok(())
}

async fn measure(folder: &Path, intents: u32, json: bool) -> anyhow::Result<Figures> {
    let progress = progress(json);
    let sqlite = Arc::new(
        SqliteLedger::open(
            folder.join("ledger.db"),
            SqliteOptions {
                durability: Durability::Strict,
                inline: false,
            },
        )
        .context("opening the benchmark's ledger")?,
    );
    let ledger: Arc<dyn Ledger> = sqlite.clone();
    progress(&format!("filling the ledger with {intents} intents ..."));
    let fill_started = Instant::now();
    fill(&sqlite, intents).await?;
    let fill_seconds = fill_started.elapsed().as_secs_f64();

    let options = ReconcileOptions {
        since_ms: WINDOW_START_MS,
        until_ms: WINDOW_START_MS + WINDOW_MS,
        now_ms: WINDOW_START_MS + WINDOW_MS + 2 * UNKNOWN_GRACE_MS,
        unknown_grace_ms: UNKNOWN_GRACE_MS,
        actor: "bench".to_owned(),
    };

    // Baseline: the same ledger query, every page, nothing else.
    let scan_started = Instant::now();
    let scanned = scan(&sqlite, &options).await?;
    let baseline = scan_started.elapsed();
    ensure!(
        scanned == u64::from(intents),
        "the scan read {scanned} intents; the ledger holds {intents}"
    );

    let rss_before = resident_mib("VmRSS");
    let peak_reset = reset_peak();
    let tool = ToolToReconcile {
        tool: TOOL.to_owned(),
        owner: None,
        amount_argument: Some("/amount".to_owned()),
        amount_minor_units: None,
        pairing: Pairing::ProviderKey,
        // Refunds have no sensitive arguments.
        definition: None,
        // The generated records are all this tool's.
        other_tools: Vec::new(),
        source: Box::new(GeneratedRecords {
            next: 0,
            intents,
            emitted: 0,
        }),
    };
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut found = |mismatch: intentgate_ops::Mismatch| {
        *counts.entry(mismatch.kind.as_str().to_owned()).or_default() += 1;
    };
    progress("reconciling ...");
    let started = Instant::now();
    let report = reconcile_tool(&ledger, tool, &options, &mut found)
        .await
        .context("the reconciliation failed")?;
    let elapsed = started.elapsed();
    let peak = peak_reset.then(|| resident_mib("VmHWM")).flatten();

    for kind in MismatchKind::ALL {
        let expected = expected(kind, intents);
        let got = counts.get(kind.as_str()).copied().unwrap_or(0);
        if got != expected {
            bail!(
                "reconciliation found {got} `{}` mismatches; the run holds {expected}",
                kind.as_str()
            );
        }
    }
    ensure!(
        report.intents_checked == u64::from(intents),
        "reconciliation checked {} intents of {intents}",
        report.intents_checked
    );
    let full_size = intents == INTENTS_DEFAULT;
    Ok(Figures {
        intents,
        provider_records: report.records_checked,
        seconds: elapsed.as_secs_f64(),
        baseline_scan_seconds: baseline.as_secs_f64(),
        ratio_to_scan: elapsed.as_secs_f64() / baseline.as_secs_f64().max(1e-9),
        peak_rss_mib: peak,
        rss_before_mib: rss_before,
        mismatches: counts,
        target_seconds: TARGET_SECONDS,
        target_peak_mib: TARGET_PEAK_MIB,
        target_seconds_met: full_size.then_some(elapsed.as_secs_f64() < TARGET_SECONDS),
        target_peak_met: full_size
            .then(|| peak.map(|peak| peak < TARGET_PEAK_MIB))
            .flatten(),
        fill_seconds,
    })
}

/// How many mismatches of `kind` a run of `intents` holds: one per block, for the blocks
/// long enough to hold that shape (and one record made around the gateway per block).
fn expected(kind: MismatchKind, intents: u32) -> u64 {
    let offset = match kind {
        MismatchKind::UnknownFound => 0,
        MismatchKind::UnknownMissing => 1,
        MismatchKind::MissingRecord => 2,
        MismatchKind::Duplicate => 3,
        MismatchKind::Amount => 4,
        MismatchKind::EffectDespiteStatus => 5,
        MismatchKind::NoIntent => return u64::from(intents.div_ceil(BLOCK)),
    };
    u64::from(intents / BLOCK) + u64::from(intents % BLOCK > offset)
}

/// Inserts the run's intents, a chunk per transaction.
async fn fill(ledger: &SqliteLedger, intents: u32) -> anyhow::Result<()> {
    let mut chunk = Vec::with_capacity(INSERT_CHUNK);
    for i in 0..intents {
        chunk.push(intent(i, intents));
        if chunk.len() == INSERT_CHUNK {
            ledger
                .bulk_insert(std::mem::take(&mut chunk))
                .await
                .context("filling the ledger")?;
        }
    }
    if !chunk.is_empty() {
        ledger
            .bulk_insert(chunk)
            .await
            .context("filling the ledger")?;
    }
    Ok(())
}

fn intent(i: u32, intents: u32) -> IntentRecord {
    let seen_ms = first_seen_ms(i, intents);
    let status = match shape(i) {
        Shape::UnknownFound | Shape::UnknownMissing => IntentStatus::Unknown,
        Shape::EffectDespiteStatus => IntentStatus::Rejected,
        _ => IntentStatus::Done,
    };
    let done = status == IntentStatus::Done;
    IntentRecord {
        id: 0,
        tenant: "default".to_owned(),
        tool: TOOL.to_owned(),
        key: key(i),
        fingerprint: format!("{:064x}", i),
        arguments: json!({"order_id": i.to_string(), "amount": 49, "reason": "requested_by_customer"}),
        status,
        attempt: 1,
        epoch: 1,
        lease_owner: None,
        lease_expires_ms: None,
        result: done.then(|| json!({"id": format!("re_{i}"), "amount": "49.00"})),
        external_id: done.then(|| format!("re_{i}")),
        resolved_by: Some("upstream".to_owned()),
        call_count: 1,
        first_seen_ms: seen_ms,
        last_seen_ms: seen_ms,
        updated_ms: seen_ms,
        last_lookup_ms: None,
        resend_stopped: None,
    }
}

async fn scan(ledger: &SqliteLedger, options: &ReconcileOptions) -> anyhow::Result<u64> {
    let filter = IntentFilter {
        tool: Some(TOOL.to_owned()),
        first_seen_from_ms: Some(options.since_ms),
        first_seen_until_ms: Some(options.until_ms),
        ..IntentFilter::default()
    };
    let mut cursor = None;
    let mut count = 0u64;
    loop {
        let page = ledger
            .intents(&filter, Order::Oldest, cursor, LEDGER_PAGE)
            .await?;
        count += page.len() as u64;
        match page.last() {
            Some(last) if page.len() == LEDGER_PAGE as usize => cursor = Some(last.id),
            _ => return Ok(count),
        }
    }
}

/// The provider's records of the run, generated a page at a time.
struct GeneratedRecords {
    next: u32,
    intents: u32,
    emitted: u64,
}

impl GeneratedRecords {
    /// A record as the HTTP pager hands it over, without its raw JSON body: the pager moves
    /// the parsed item in, so building one here would measure this generator, not
    /// reconciliation (the provider's transfer and parsing are the listing's cost).
    fn record(i: u32, key: Option<String>, external_id: String, amount: &str) -> ListedRecord {
        ListedRecord {
            // As the gateway sent it: the default tenant's, first epoch.
            provider_key: key
                .as_deref()
                .map(|key| intentgate_core::key::provider_key("default", TOOL, key, 1)),
            intent_key: key,
            external_id,
            amount: Some(amount.to_owned()),
            subject: Some(i.to_string()),
            raw: serde_json::Value::Null,
        }
    }
}

#[async_trait]
impl RecordSource for GeneratedRecords {
    async fn next_page(&mut self) -> Result<Option<Vec<ListedRecord>>, String> {
        if self.next >= self.intents {
            return Ok(None);
        }
        let mut page = Vec::with_capacity(PROVIDER_PAGE as usize + 2);
        while page.len() < PROVIDER_PAGE as usize && self.next < self.intents {
            let i = self.next;
            self.next += 1;
            let id = format!("re_{i}");
            match shape(i) {
                Shape::UnknownMissing | Shape::MissingRecord => {}
                Shape::Duplicate => {
                    page.push(Self::record(i, Some(key(i)), id, "49.00"));
                    page.push(Self::record(
                        i,
                        Some(key(i)),
                        format!("re_{i}_again"),
                        "49.00",
                    ));
                }
                Shape::Amount => page.push(Self::record(i, Some(key(i)), id, "94.00")),
                _ => page.push(Self::record(i, Some(key(i)), id, "49.00")),
            }
            // One refund per block made around the gateway: no provider key.
            if i % BLOCK == BLOCK - 1 || i + 1 == self.intents {
                page.push(Self::record(i, None, format!("re_direct_{i}"), "49.00"));
            }
        }
        self.emitted += page.len() as u64;
        Ok(Some(page))
    }
}

/// A field of /proc/self/status (VmRSS, VmHWM) in MiB; `None` off Linux.
fn resident_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Resets the peak resident set (VmHWM) to the current one, so the peak measured is the
/// run's, not the setup's. True when it worked.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The human report: one row per figure, with its design target where one applies.
fn table(figures: &Figures) -> String {
    let verdict = |met: Option<bool>| match met {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a (target is for 1,000,000)",
    };
    let peak = figures
        .peak_rss_mib
        .map(|mib| format!("{mib:.0} MiB"))
        .unwrap_or_else(|| "not measured (needs Linux)".to_owned());
    let row = |label: &str, value: String, target: String, met: &str| {
        [label.to_owned(), value, target, met.to_owned()]
    };
    let rows = [
        row("measure", "value".to_owned(), "target".to_owned(), "met"),
        row(
            "reconciliation time",
            format!("{:.2} s", figures.seconds),
            format!("under {:.0} s", figures.target_seconds),
            verdict(figures.target_seconds_met),
        ),
        row(
            "peak memory",
            peak,
            format!("under {:.0} MiB", figures.target_peak_mib),
            verdict(figures.target_peak_met),
        ),
        row(
            "baseline scan (reading, no matching)",
            format!("{:.2} s", figures.baseline_scan_seconds),
            String::new(),
            "",
        ),
        row(
            "  reconciliation / baseline scan",
            format!("{:.2}", figures.ratio_to_scan),
            String::new(),
            "",
        ),
        row(
            "filling the ledger (not counted)",
            format!("{:.1} s", figures.fill_seconds),
            String::new(),
            "",
        ),
    ];
    let mut out = format!(
        "reconciliation of {} intents against {} provider records (SQLite, strict)\n\n",
        figures.intents, figures.provider_records
    );
    out.push_str(&table::render(rows, &[Align::Left, Align::Right]));
    out.push_str(&format!(
        "\nmismatches found: {}\n",
        figures
            .mismatches
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_holds_one_intent_of_each_mismatch_shape() {
        let shapes: Vec<Shape> = (0..BLOCK).map(shape).collect();
        for wanted in [
            Shape::UnknownFound,
            Shape::UnknownMissing,
            Shape::MissingRecord,
            Shape::Duplicate,
            Shape::Amount,
            Shape::EffectDespiteStatus,
        ] {
            assert_eq!(shapes.iter().filter(|s| **s == wanted).count(), 1);
        }
    }

    #[test]
    fn intents_are_spread_over_the_window() {
        assert_eq!(first_seen_ms(0, 1000), WINDOW_START_MS);
        assert!(first_seen_ms(999, 1000) < WINDOW_START_MS + WINDOW_MS);
    }

    #[test]
    fn the_table_gives_each_figure_its_target_and_verdict() {
        let figures = Figures {
            intents: 20_000,
            provider_records: 20_002,
            seconds: 0.25,
            baseline_scan_seconds: 0.125,
            ratio_to_scan: 2.0,
            peak_rss_mib: None,
            rss_before_mib: None,
            mismatches: std::collections::BTreeMap::from([("amount".to_owned(), 2)]),
            target_seconds: TARGET_SECONDS,
            target_peak_mib: TARGET_PEAK_MIB,
            target_seconds_met: Some(true),
            target_peak_met: None,
            fill_seconds: 1.0,
        };
        let text = table(&figures);
        let row = |label: &str| {
            text.lines()
                .find(|line| line.starts_with(label))
                .unwrap_or_else(|| panic!("no `{label}` in\n{text}"))
                .to_owned()
        };
        let words = |label: &str| row(label).split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            words("reconciliation time"),
            "reconciliation time 0.25 s under 10 s yes"
        );
        assert_eq!(
            words("peak memory"),
            "peak memory not measured (needs Linux) under 1024 MiB n/a (target is for 1,000,000)"
        );
        assert_eq!(
            words("  reconciliation / baseline scan"),
            "reconciliation / baseline scan 2.00"
        );
        assert!(text.ends_with("mismatches found: 2 amount\n"), "{text}");
    }
}

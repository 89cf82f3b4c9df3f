//! The runaway-refund incident, replayed with a budget on: the demo's last section.
//!
//! A prompt line told a support agent to "retry refunds that may have failed", and it
//! refunded 212 customers twice; a customer's ticket found it. Keys could not stop it: the
//! application creates an intent id per request (per conversation turn), and each retry was
//! a new turn, so a new intent with a new key (`refund:{intent_id}`). Here the runaway agent
//! refunds every order, then, told to retry, refunds every order again under new intent
//! ids. It runs twice against the mock provider (in process, without faults), each time
//! with a provider and a ledger of its own: with the refund tool of `incident.yaml` as it
//! was, and with its budget `per-order` (one refund per order a day, a second one held for a
//! person's approval). Every figure is counted from the provider's refunds, the agent's
//! answers and the ledger.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use indicatif::ProgressBar;
use intentgate_config::HashKeySource;
use intentgate_core::Decimal;
use intentgate_gate::{CallContext, Clock, Gate, GateOptions, SystemClock};
use intentgate_ledger::{
    ApprovalFilter, ApprovalState, Durability, Ledger, SqliteLedger, SqliteOptions,
};
use intentgate_mock::{Effect, EffectKind, FakeProvider, FaultPlan, Rng};
use serde::Serialize;
use serde_json::json;
use tokio::sync::Semaphore;

use intentgate_terminal::table::{self, Align};

use crate::agent::{self, AGENTS_AT_ONCE, Customer};
use crate::summary::summary;

/// The incident's tool and budget, embedded so the demo needs no files.
const INCIDENT_CONFIG: &str = include_str!("incident.yaml");
/// Customers refunded twice in the incident: each has one order to refund.
pub const INCIDENT_CUSTOMERS: usize = 212;
/// The refund tool of [`INCIDENT_CONFIG`].
const TOOL: &str = "refund_order";
/// The budget's window, as [`INCIDENT_CONFIG`] writes it.
const BUDGET_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;
/// The budget, as [`INCIDENT_CONFIG`] writes it, for the report.
const BUDGET: &str =
    "per-order (per: subject \"{order_id}\", window: 24h, count: 1, beyond: approval)";
/// The turns of the runaway agent: the refunds, then the retry of every one of them.
const TURNS: usize = 2;

/// How the section reads one figure of a run.
type Figure = fn(&IncidentRun) -> String;

/// Both runs of the incident.
#[derive(Debug, Serialize)]
pub struct Incident {
    /// Customers, each with one order to refund.
    pub customers: usize,
    /// The budget of the second run, as the config writes it.
    pub budget: String,
    pub without_budget: IncidentRun,
    pub with_budget: IncidentRun,
    /// Refunds the budget held back: those the provider made without it and not with it.
    pub held_back: u64,
}

/// What one run of the runaway agent did.
#[derive(Debug, Serialize)]
pub struct IncidentRun {
    /// Refund calls the agent made: one per order per turn.
    pub calls: usize,
    /// Refunds the provider made.
    pub refunds: u64,
    /// Customers with at least one refund.
    pub customers_refunded: usize,
    /// Customers refunded more than once.
    pub customers_refunded_twice: usize,
    /// The money the provider refunded beyond each order's first refund, summed exactly
    /// (`9092.66` at seed 1).
    pub amount_refunded_twice: String,
    /// What the agent was told, by status (or error).
    pub statuses: BTreeMap<String, usize>,
    /// Intents held for a person's decision, as the ledger lists them for the console's
    /// approvals page.
    pub awaiting_approval: usize,
}

/// The wall clock, moved back to the start of the budget's current window (UTC midnight):
/// the whole replay falls inside one window, whenever it runs, so it counts the same at
/// every run. The ledger is thrown away afterwards; its times matter to nobody.
struct WindowClock {
    offset_ms: i64,
}

impl WindowClock {
    fn new() -> WindowClock {
        WindowClock {
            offset_ms: SystemClock.now_ms().rem_euclid(BUDGET_WINDOW_MS),
        }
    }
}

impl Clock for WindowClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() - self.offset_ms
    }
}

/// Replays the incident without the budget, then with it, on the customers of `seed`.
pub async fn run(seed: u64, progress: &ProgressBar) -> anyhow::Result<Incident> {
    let customers = agent::customers(seed, INCIDENT_CUSTOMERS);
    let intent_ids = intent_ids(seed, customers.len());
    let without_budget = replay(seed, &customers, &intent_ids, false, progress).await?;
    let with_budget = replay(seed, &customers, &intent_ids, true, progress).await?;
    Ok(Incident {
        customers: customers.len(),
        budget: BUDGET.to_owned(),
        held_back: without_budget.refunds.saturating_sub(with_budget.refunds),
        without_budget,
        with_budget,
    })
}

/// The intent id of each customer's request in each turn, as an application makes them:
/// new for every turn, the same for every retry within one (`msg_3f09c1a27be4`).
fn intent_ids(seed: u64, customers: usize) -> Vec<[String; TURNS]> {
    let mut rng = Rng::new(seed ^ 0x0212_12F0);
    (0..customers)
        .map(|_| std::array::from_fn(|_| format!("msg_{:012x}", rng.next_u64() >> 16)))
        .collect()
}

/// The amount of `customer`'s order as an exact decimal with two places (`49.00`).
fn amount(customer: &Customer) -> String {
    format!("{}.{:02}", customer.cents / 100, customer.cents % 100)
}

/// One run: a fresh provider and ledger, the refund tool with or without its budget, and
/// the runaway agent's turns, one after the other.
async fn replay(
    seed: u64,
    customers: &[Customer],
    intent_ids: &[[String; TURNS]],
    budget: bool,
    progress: &ProgressBar,
) -> anyhow::Result<IncidentRun> {
    // The config names nothing from the environment; the ledger is thrown away afterwards,
    // so a random hash key will do.
    let hash_key = HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key()?);
    let mut loaded = intentgate_config::load_str_with(
        INCIDENT_CONFIG,
        "crates/intentgate-demo/src/incident.yaml",
        &|_| None,
        &hash_key,
    )
    .map_err(|errors| anyhow::anyhow!("{errors}"))?;
    if !budget {
        // The tool as it was in the incident: the same key, no budget.
        for tool in &mut loaded.tools {
            tool.policies = None;
        }
    }
    let folder = tempfile::tempdir().context("a temporary folder for the ledger")?;
    // Nothing here can fail mid-request, so the demo skips the fsyncs that guard against a
    // power loss; what the ledger decides and counts is the same.
    let ledger = Arc::new(SqliteLedger::open(
        folder.path().join("ledger.db"),
        SqliteOptions {
            durability: Durability::Relaxed,
            inline: false,
        },
    )?);
    let clock: Arc<dyn Clock> = Arc::new(WindowClock::new());
    // The provider in process, without faults or latency: the incident needs neither, and
    // the HTTP round trips would add seconds to the demo.
    let provider = Arc::new(FakeProvider::new(seed, FaultPlan::none(), clock.clone()));
    let gate = Arc::new(Gate::new(
        loaded.tools,
        ledger.clone(),
        provider.clone(),
        clock,
        GateOptions::default(),
    )?);

    let mut statuses = BTreeMap::new();
    for turn in 0..TURNS {
        for status in refund_all(&gate, customers, intent_ids, turn).await? {
            *statuses.entry(status).or_default() += 1;
        }
    }
    progress.inc(customers.len() as u64);

    let (refunds, refunded_twice) = refunds_by_order(&provider.effects());
    let awaiting_approval = count_awaiting(&*ledger).await?;
    Ok(IncidentRun {
        calls: customers.len() * TURNS,
        refunds: refunds.values().map(|amounts| amounts.len() as u64).sum(),
        customers_refunded: refunds.len(),
        customers_refunded_twice: refunds
            .values()
            .filter(|amounts| amounts.len() >= 2)
            .count(),
        amount_refunded_twice: format!("{}.{:02}", refunded_twice / 100, refunded_twice % 100),
        statuses,
        awaiting_approval,
    })
}

/// One turn of the agent: a refund of every customer's order, under the turn's intent ids,
/// [`AGENTS_AT_ONCE`] at a time; what each call was told.
async fn refund_all(
    gate: &Arc<Gate>,
    customers: &[Customer],
    intent_ids: &[[String; TURNS]],
    turn: usize,
) -> anyhow::Result<Vec<String>> {
    let slots = Arc::new(Semaphore::new(AGENTS_AT_ONCE));
    let mut running = tokio::task::JoinSet::new();
    for (customer, ids) in customers.iter().zip(intent_ids) {
        let slot = slots.clone().acquire_owned().await?;
        let gate = gate.clone();
        let arguments = json!({"order_id": customer.order_id, "amount": amount(customer)});
        let context = CallContext {
            intent_id: Some(ids[turn].clone()),
            ..CallContext::default()
        };
        running.spawn(async move {
            let told = match gate.call(TOOL, arguments, &context).await {
                Ok(outcome) => outcome.status.as_str().to_owned(),
                Err(error) => format!("error: {error}"),
            };
            drop(slot);
            told
        });
    }
    let mut told = Vec::with_capacity(customers.len());
    while let Some(done) = running.join_next().await {
        told.push(done.context("a refund task failed")?);
    }
    Ok(told)
}

/// The provider's refunds by order, each in cents, and the cents refunded beyond each
/// order's first refund.
fn refunds_by_order(effects: &[Effect]) -> (BTreeMap<String, Vec<u64>>, u64) {
    let mut by_order: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for effect in effects
        .iter()
        .filter(|effect| effect.kind == EffectKind::Refund)
    {
        let order = effect.arguments["order_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let cents = Decimal::from_json(&effect.arguments["amount"])
            .ok()
            .and_then(|amount| amount.units_rounded_up(2))
            .unwrap_or(0);
        by_order.entry(order).or_default().push(cents);
    }
    let twice = by_order
        .values()
        .flat_map(|amounts| amounts.iter().skip(1))
        .sum();
    (by_order, twice)
}

/// The refund intents held for a person's decision, nobody having decided yet: what the
/// console's approvals page lists.
async fn count_awaiting(ledger: &dyn Ledger) -> anyhow::Result<usize> {
    let filter = ApprovalFilter {
        tool: Some(TOOL.to_owned()),
        state: Some(ApprovalState::Open),
        ..ApprovalFilter::default()
    };
    let mut awaiting = 0;
    let mut before = None;
    loop {
        let page = ledger
            .approvals(&filter, before, intentgate_ledger::APPROVALS_PAGE_MAX)
            .await?;
        let Some(last) = page.last() else {
            return Ok(awaiting);
        };
        before = Some(last.intent.id);
        awaiting += page.len();
    }
}

impl Incident {
    /// The report's section: both runs side by side, what the budget held back, and what a
    /// person sees of it.
    pub fn section(&self) -> String {
        let (a, b) = (&self.without_budget, &self.with_budget);
        let mut rows = vec![
            ["", "without budget", "with budget"].map(str::to_owned),
            ["", "", "per-order"].map(str::to_owned),
        ];
        let figures: [(&str, Figure); 5] = [
            ("refunds made by the provider", |run| {
                run.refunds.to_string()
            }),
            ("customers refunded twice", |run| {
                run.customers_refunded_twice.to_string()
            }),
            ("amount refunded twice", |run| {
                run.amount_refunded_twice.clone()
            }),
            ("customers refunded at least once", |run| {
                run.customers_refunded.to_string()
            }),
            ("waiting for a person's approval", |run| {
                run.awaiting_approval.to_string()
            }),
        ];
        rows.extend(
            figures
                .iter()
                .map(|(name, figure)| [(*name).to_owned(), figure(a), figure(b)]),
        );
        let mut out = format!(
            "\nthe runaway-refund incident: a prompt line told the agent to \"retry refunds that \
             may have failed\". It refunds {} customers' orders, then refunds every one again; \
             each retry is a new conversation turn, so a new intent id and a new key \
             (refund:{{intent_id}}), which no key can tell from a new refund. Without a budget, \
             then with the budget {}:\n\n",
            self.customers, self.budget
        );
        out.push_str(&table::render(
            rows,
            &[Align::Left, Align::Right, Align::Right],
        ));
        let _ = writeln!(out, "\nwhat the agent was told:");
        let _ = writeln!(out, "  without budget: {}", summary(&a.statuses));
        let _ = writeln!(out, "  with budget:    {}", summary(&b.statuses));
        let _ = writeln!(
            out,
            "\nthe budget held back {} refunds: each order's second refund was recorded and held, \
             nothing sent. Without it, {} customers were refunded twice and a customer's ticket \
             was the first sign; with it, a person sees {} held refunds in the console's \
             approvals page (/console/approvals), each with its exact arguments, the budget that \
             held it and its deadline, to approve or deny",
            self.held_back, a.customers_refunded_twice, b.awaiting_approval
        );
        out
    }
}

#[cfg(test)]
impl Incident {
    /// The incident as the demo replays it at seed 1: for tests of the report.
    pub(super) fn example() -> Incident {
        let run =
            |refunds: u64, twice: usize, amount: &str, statuses: &[(&str, usize)]| IncidentRun {
                calls: 424,
                refunds,
                customers_refunded: 212,
                customers_refunded_twice: twice,
                amount_refunded_twice: amount.to_owned(),
                statuses: statuses
                    .iter()
                    .map(|(status, count)| ((*status).to_owned(), *count))
                    .collect(),
                awaiting_approval: 424 - refunds as usize,
            };
        Incident {
            customers: 212,
            budget: BUDGET.to_owned(),
            without_budget: run(424, 212, "8861.48", &[("done", 424)]),
            with_budget: run(212, 0, "0.00", &[("done", 212), ("awaiting_approval", 212)]),
            held_back: 212,
        }
    }
}

#[cfg(test)]
mod tests {
    use intentgate_core::{BeyondBudget, BudgetScope};

    use super::*;

    #[test]
    fn the_section_reads_both_runs_side_by_side_and_says_where_the_held_refunds_wait() {
        let section = Incident::example().section();
        let line = |name: &str| {
            section
                .lines()
                .find(|line| line.starts_with(name))
                .unwrap_or_else(|| panic!("no `{name}` in\n{section}"))
                .split_whitespace()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
        };
        assert_eq!(line("refunds made by the provider"), ["212", "424"]);
        assert_eq!(line("customers refunded twice"), ["0", "212"]);
        assert_eq!(line("amount refunded twice"), ["0.00", "8861.48"]);
        assert_eq!(line("waiting for a person's approval"), ["212", "0"]);
        assert!(
            section.contains("with budget:    awaiting_approval 212, done 212")
                && section.contains("the budget held back 212 refunds")
                && section.contains("/console/approvals"),
            "{section}"
        );
    }

    #[test]
    fn the_config_has_the_budget_the_report_names() {
        let hash_key = HashKeySource::EnvironmentOrEphemeral(
            intentgate_runtime::ephemeral_hash_key().unwrap(),
        );
        let loaded = intentgate_config::load_str_with(
            INCIDENT_CONFIG,
            "incident.yaml",
            &|_| None,
            &hash_key,
        )
        .unwrap();
        let [tool] = loaded.tools.as_slice() else {
            panic!("one tool: {:?}", loaded.tools);
        };
        assert_eq!(tool.name, TOOL);
        let policies = tool.policies.as_ref().expect("the tool has its budget");
        assert!(policies.approval.is_none());
        let [budget] = policies.budgets.as_slice() else {
            panic!("one budget: {policies:?}");
        };
        assert!(
            BUDGET.starts_with(&format!("{} (", budget.name)),
            "{budget:?}"
        );
        assert!(
            matches!(budget.scope, BudgetScope::Subject(_)),
            "{budget:?}"
        );
        assert_eq!(budget.window_ms as i64, BUDGET_WINDOW_MS);
        assert_eq!(budget.count_max, Some(1));
        assert!(
            matches!(budget.beyond, BeyondBudget::Approval { .. }),
            "{budget:?}"
        );
    }

    #[test]
    fn intent_ids_are_new_every_turn_and_the_same_for_a_seed() {
        let ids = intent_ids(1, 3);
        assert_eq!(ids, intent_ids(1, 3));
        assert_ne!(ids, intent_ids(2, 3));
        for [first, second] in &ids {
            assert_ne!(first, second);
            assert!(first.starts_with("msg_") && first.len() == 16, "{first}");
        }
    }

    #[test]
    fn amounts_are_exact_decimals_with_two_places() {
        let mut customer = agent::customers(1, 1).remove(0);
        customer.cents = 999;
        assert_eq!(amount(&customer), "9.99");
        customer.cents = 10_000;
        assert_eq!(amount(&customer), "100.00");
    }

    #[test]
    fn the_clock_starts_the_replay_at_the_start_of_a_budget_window() {
        let clock = WindowClock::new();
        assert!(clock.now_ms().rem_euclid(BUDGET_WINDOW_MS) < 60_000);
    }
}

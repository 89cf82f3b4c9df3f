//! The side-by-side table, and the incident's section after it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use intentgate_mock::MockProvider;
use serde::Serialize;

use crate::agent::Served;
use crate::incident::Incident;
use crate::summary::summary;
use intentgate_terminal::table::{self, Align};

/// What one run did to the provider and what the agents were told.
#[derive(Debug, Serialize)]
pub struct Run {
    pub label: String,
    /// Tool invocations by the agents (framework retries included).
    pub calls_made: usize,
    /// Side-effecting requests that reached the provider.
    pub provider_requests: u64,
    /// Lookups the provider answered.
    pub provider_lookups: u64,
    /// Refunds the provider made.
    pub refunds: u64,
    /// Customers with at least one refund.
    pub customers_refunded: usize,
    /// Customers refunded more than once.
    pub customers_refunded_twice: usize,
    /// Refunds beyond the first, over all customers: money paid out twice.
    pub extra_refunds: u64,
    /// What the agents were told, by status (or error).
    pub statuses: BTreeMap<String, usize>,
    /// Intents still unknown once the provider recovered and the sweeper had its turn
    /// (intentgate only; a naive wrapper has no notion).
    pub unknown_after_recovery: Option<usize>,
    /// Reconciliation of the ledger with the provider's refunds afterwards, mismatches by
    /// kind (intentgate only: a naive wrapper keeps no ledger to reconcile).
    pub reconciliation: Option<BTreeMap<String, u64>>,
    /// The refunds' amounts at the provider, in cents (`--provider stripe` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amounts: Option<Amounts>,
}

/// The provider's refunds against the amounts the customers asked for, in cents.
#[derive(Debug, Default, Serialize)]
pub struct Amounts {
    /// Refunds the provider made.
    pub refunds: u64,
    /// Of those, refunds whose amount in cents is the one their customer asked for.
    pub in_cents_asked: u64,
    /// One such refund, as the provider holds it: `pi_ord_08000: amount=4900 for 49.0`.
    pub example: Option<String>,
}

impl Run {
    pub fn collect(
        label: &str,
        served: &[Served],
        provider: &MockProvider,
        unknown_after_recovery: Option<usize>,
    ) -> Run {
        let stats = provider.stats();
        let counts = provider.effect_counts();
        let mut statuses = BTreeMap::new();
        for result in served.iter().flat_map(|served| &served.results) {
            *statuses.entry(result.clone()).or_default() += 1;
        }
        Run {
            label: label.to_owned(),
            calls_made: served.iter().map(|served| served.invocations).sum(),
            provider_requests: stats.requests,
            provider_lookups: stats.lookups,
            refunds: stats.effects.refunds,
            customers_refunded: counts
                .by_order
                .values()
                .filter(|count| **count >= 1)
                .count(),
            customers_refunded_twice: counts
                .by_order
                .values()
                .filter(|count| **count >= 2)
                .count(),
            extra_refunds: counts
                .by_order
                .values()
                .map(|count| count.saturating_sub(1))
                .sum(),
            statuses,
            unknown_after_recovery,
            reconciliation: None,
            amounts: None,
        }
    }
}

/// How the table reads one count of a run.
type Figure = fn(&Run) -> u64;

/// Both runs, on the same customers and faults, and the runaway-refund incident.
#[derive(Debug, Serialize)]
pub struct Report {
    pub customers: usize,
    pub seed: u64,
    pub faults: String,
    /// `stripe` with `--provider stripe` (the mock's own API otherwise, not named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub naive: Run,
    pub intentgate: Run,
    /// The runaway-refund incident, replayed without and with a per-order budget.
    pub incident: Incident,
    pub seconds: f64,
}

impl Report {
    pub fn table(&self) -> String {
        let (a, b) = (&self.naive, &self.intentgate);
        // Each figure of both runs, in the order a reader wants them: the harm first.
        let figures: [(&str, Figure); 6] = [
            ("customers refunded twice", |run| {
                run.customers_refunded_twice as u64
            }),
            ("refunds paid twice", |run| run.extra_refunds),
            ("customers refunded at least once", |run| {
                run.customers_refunded as u64
            }),
            ("calls made by the agents", |run| run.calls_made as u64),
            ("provider requests", |run| run.provider_requests),
            ("provider lookups", |run| run.provider_lookups),
        ];
        let mut rows = vec![
            ["", "naive wrapper", "intentgate"].map(str::to_owned),
            ["", "(key = tool call id)", ""].map(str::to_owned),
        ];
        rows.extend(figures.iter().map(|(name, figure)| {
            [
                (*name).to_owned(),
                figure(a).to_string(),
                figure(b).to_string(),
            ]
        }));
        rows.push([
            "unknown after recovery".to_owned(),
            "not tracked".to_owned(),
            b.unknown_after_recovery
                .map_or("-".to_owned(), |count| count.to_string()),
        ]);
        let against = match self.provider.as_deref() {
            Some("stripe") => {
                ", against the mock in Stripe's dialect with examples/stripe.yaml (refunds of payment intents, in cents)"
            }
            _ => "",
        };
        let mut out = format!(
            "intentgate demo: {} customers, seed {}, faults `{}`{against} ({:.1} s)\n\n",
            self.customers, self.seed, self.faults, self.seconds
        );
        out.push_str(&table::render(
            rows,
            &[Align::Left, Align::Right, Align::Right],
        ));
        if a.customers_refunded > b.customers_refunded {
            let _ = writeln!(
                out,
                "\nintentgate refunded {} fewer customers: the naive wrapper's blind retries turned \
                 some failed refunds into refunds, and {} customers into double refunds; with \
                 intentgate those customers were told the refund was not made, refused or still \
                 being confirmed, and nobody was paid twice",
                a.customers_refunded - b.customers_refunded,
                a.customers_refunded_twice
            );
        }
        let _ = writeln!(out, "\nwhat the agents were told:");
        let _ = writeln!(out, "  naive wrapper: {}", summary(&a.statuses));
        let _ = writeln!(out, "  intentgate:    {}", summary(&b.statuses));
        if let (Some(x), Some(y)) = (&a.amounts, &b.amounts) {
            let _ = writeln!(
                out,
                "\namounts at the provider, in cents (Stripe's minor units):\n  naive wrapper: {} of {} refunds hold the amount their customer asked for\n  intentgate:    {} of {} refunds hold the amount their customer asked for",
                x.in_cents_asked, x.refunds, y.in_cents_asked, y.refunds
            );
            if let Some(example) = y.example.as_ref().or(x.example.as_ref()) {
                let _ = writeln!(out, "  e.g. {example}");
            }
        }
        if let Some(found) = &b.reconciliation {
            let found: BTreeMap<String, usize> = found
                .iter()
                .map(|(kind, count)| (kind.clone(), *count as usize))
                .collect();
            let text = if found.is_empty() {
                "nothing: every refund matches its intent".to_owned()
            } else {
                summary(&found)
            };
            let _ = writeln!(
                out,
                "\nwhat reconciliation found afterwards (intentgate's ledger against the provider's refunds):\n  {text}"
            );
            let _ = writeln!(
                out,
                "  (unknown_found: resolved to done; unknown_missing: never happened, for the owner to resolve as not_executed)"
            );
        }
        out.push_str(&self.incident.section());
        let _ = writeln!(
            out,
            "\nnext: put your own API behind it, starting from examples/quickstart.yaml (README, \
             \"Five minutes to your own API\"); `intentgate smoke --config <your config>` checks \
             it before you deploy"
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(label: &str, refunded_twice: usize, unknown_after_recovery: Option<usize>) -> Run {
        Run {
            label: label.to_owned(),
            calls_made: 180,
            provider_requests: 170,
            provider_lookups: 4,
            refunds: 150 + refunded_twice as u64,
            customers_refunded: 150,
            customers_refunded_twice: refunded_twice,
            extra_refunds: refunded_twice as u64,
            statuses: BTreeMap::from([("done".to_owned(), 150)]),
            unknown_after_recovery,
            reconciliation: None,
            amounts: None,
        }
    }

    #[test]
    fn each_figure_reads_naive_then_intentgate_on_its_own_line() {
        let report = Report {
            customers: 150,
            seed: 7,
            faults: "cut".to_owned(),
            provider: None,
            naive: run("naive", 12, None),
            intentgate: run("intentgate", 0, Some(2)),
            incident: Incident::example(),
            seconds: 1.5,
        };
        let table = report.table();
        let line = |name: &str| {
            table
                .lines()
                .find(|line| line.starts_with(name))
                .unwrap_or_else(|| panic!("no `{name}` in\n{table}"))
                .split_whitespace()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
        };
        assert_eq!(line("customers refunded twice"), ["0", "12"]);
        assert_eq!(line("unknown after recovery"), ["2", "tracked"]);
        let header = table.lines().find(|line| line.contains("naive wrapper"));
        let first = table
            .lines()
            .find(|line| line.starts_with("refunds paid twice"));
        assert_eq!(
            header.map(str::len),
            first.map(str::len),
            "the intentgate column ends where its header does:\n{table}"
        );
    }

    /// Regression: "customers refunded 300 / 276" read as intentgate refunding fewer
    /// customers, with nothing saying why, and the report ended without a next step.
    #[test]
    fn fewer_customers_refunded_is_explained_and_the_report_ends_with_a_next_step() {
        let mut intentgate = run("intentgate", 0, Some(0));
        intentgate.customers_refunded = 140;
        let report = Report {
            customers: 150,
            seed: 7,
            faults: "stormy".to_owned(),
            provider: None,
            naive: run("naive", 12, None),
            intentgate,
            incident: Incident::example(),
            seconds: 1.5,
        };
        let table = report.table();
        assert!(
            table.contains("intentgate refunded 10 fewer customers")
                && table.contains("12 customers into double refunds")
                && table.contains("nobody was paid twice"),
            "{table}"
        );
        assert!(
            table
                .trim_end()
                .lines()
                .last()
                .unwrap()
                .starts_with("next: "),
            "{table}"
        );
    }

    #[test]
    fn the_incident_section_comes_after_the_storm_and_before_the_next_step() {
        let report = Report {
            customers: 150,
            seed: 7,
            faults: "stormy".to_owned(),
            provider: None,
            naive: run("naive", 12, None),
            intentgate: run("intentgate", 0, Some(0)),
            incident: Incident::example(),
            seconds: 1.5,
        };
        let table = report.table();
        let at = |text: &str| {
            table
                .find(text)
                .unwrap_or_else(|| panic!("no `{text}` in\n{table}"))
        };
        assert!(at("what the agents were told") < at("the runaway-refund incident"));
        assert!(at("the budget held back 212 refunds") < at("\nnext: "));
    }
}

//! The side-by-side table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use intentgate_mock::MockProvider;
use serde::Serialize;

use super::agent::Served;

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
    /// Intents still unknown once looked up (intentgate only; a naive wrapper has no notion).
    pub unknown_after_lookup: Option<usize>,
    /// Reconciliation of the ledger with the provider's refunds afterwards, mismatches by
    /// kind (intentgate only: a naive wrapper keeps no ledger to reconcile).
    pub reconciliation: Option<BTreeMap<String, u64>>,
}

impl Run {
    pub fn collect(
        label: &str,
        served: &[Served],
        provider: &MockProvider,
        unknown_after_lookup: Option<usize>,
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
            unknown_after_lookup,
            reconciliation: None,
        }
    }
}

/// Both runs, on the same customers and faults.
#[derive(Debug, Serialize)]
pub struct Report {
    pub customers: usize,
    pub seed: u64,
    pub faults: String,
    pub naive: Run,
    pub intentgate: Run,
    pub seconds: f64,
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = String::new();
        let (a, b) = (&self.naive, &self.intentgate);
        let rows: Vec<(&str, String, String)> = vec![
            (
                "customers refunded twice",
                a.customers_refunded_twice.to_string(),
                b.customers_refunded_twice.to_string(),
            ),
            (
                "refunds paid twice",
                a.extra_refunds.to_string(),
                b.extra_refunds.to_string(),
            ),
            (
                "customers refunded",
                a.customers_refunded.to_string(),
                b.customers_refunded.to_string(),
            ),
            (
                "calls made by the agents",
                a.calls_made.to_string(),
                b.calls_made.to_string(),
            ),
            (
                "provider requests",
                a.provider_requests.to_string(),
                b.provider_requests.to_string(),
            ),
            (
                "provider lookups",
                a.provider_lookups.to_string(),
                b.provider_lookups.to_string(),
            ),
            (
                "unknown after lookup",
                "not tracked".to_owned(),
                b.unknown_after_lookup
                    .map_or("-".to_owned(), |count| count.to_string()),
            ),
        ];
        let _ = writeln!(
            out,
            "intentgate demo: {} customers, seed {}, faults `{}` ({:.1} s)\n",
            self.customers, self.seed, self.faults, self.seconds
        );
        let _ = writeln!(out, "{:<28}{:>24}{:>16}", "", "naive wrapper", "intentgate");
        let _ = writeln!(out, "{:<28}{:>24}{:>16}", "", "(key = tool call id)", "");
        for (name, naive, gated) in rows {
            let _ = writeln!(out, "{name:<28}{naive:>24}{gated:>16}");
        }
        let _ = writeln!(out, "\nwhat the agents were told:");
        let _ = writeln!(out, "  naive wrapper: {}", summary(&a.statuses));
        let _ = writeln!(out, "  intentgate:    {}", summary(&b.statuses));
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
        out
    }
}

fn summary(statuses: &BTreeMap<String, usize>) -> String {
    let mut entries: Vec<(&String, &usize)> = statuses.iter().collect();
    entries.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
    entries
        .iter()
        .map(|(status, count)| format!("{status} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

//! Owner notices for lookups that found a record half an intent's (docs/configuration.md, "Lookups:
//! what counts as found"): the provider holds a record carrying the intent's provider key with
//! other business fields (money moved otherwise than asked), or the intent's business fields under
//! another gateway key (another tenant's effect, or two intents with one effect's fields). The gate
//! settles nothing and keeps the intent `unknown`; somebody must look at the provider's record, so
//! the tool's owner is told.
//!
//! An unknown intent is looked up again on every step of its resolution, and each of those
//! lookups finds the same record, so [`MismatchNotices`] tells an owner about one intent at
//! most once per [`NOTICE_EVERY`].
//!
//! Who was told when is kept in a bounded [`Told`].

use std::collections::HashMap;
use std::sync::Arc;

use intentgate_config::LoadedConfig;
use intentgate_gate::LookupMismatch;
use serde_json::json;
use tokio::sync::broadcast;

use crate::Severity;
use crate::notify::{Notice, Notifier};
use crate::told::Told;
pub use crate::told::{INTENTS_TRACKED_MAX, NOTICE_EVERY};

/// The kind of these notices, in their webhook and log line.
pub const LOOKUP_MISMATCH: &str = "lookup_mismatch";

/// Sends owner notices for the gate's lookup mismatches, once per intent per interval.
pub struct MismatchNotices {
    owners: HashMap<String, String>,
    told: Told,
}

impl MismatchNotices {
    /// The owners of `loaded`'s tools.
    pub fn new(loaded: &LoadedConfig) -> MismatchNotices {
        MismatchNotices {
            owners: Notifier::owners_of(loaded),
            told: Told::default(),
        }
    }

    /// The notice for `mismatch` and the owner it goes to, or `None` when this intent was
    /// told less than [`NOTICE_EVERY`] ago.
    pub fn observe(&mut self, mismatch: &LookupMismatch) -> Option<(Option<&str>, Notice)> {
        if !self.told.may_tell(mismatch.intent_id, mismatch.at_ms) {
            return None;
        }
        let summary = format!(
            "{tool}: the lookup of intent {key} (tenant {tenant}) found a record it can't prove \
             is this intent's: {reason}. Nothing was settled and the intent stays unknown; \
             check the provider's record, then resolve the intent by hand",
            tool = mismatch.tool,
            key = mismatch.intent_key,
            tenant = mismatch.tenant,
            reason = mismatch.reason,
        );
        let notice = Notice {
            kind: LOOKUP_MISMATCH,
            tool: mismatch.tool.clone(),
            // The provider holds something the ledger can't explain: a person must look now.
            severity: Severity::Critical,
            summary,
            details: json!({
                "tool": mismatch.tool,
                "tenant": mismatch.tenant,
                "intent_id": mismatch.intent_id,
                "intent_key": mismatch.intent_key,
                "reason": mismatch.reason,
                "at_ms": mismatch.at_ms,
            }),
        };
        Some((self.owners.get(&mismatch.tool).map(String::as_str), notice))
    }

    /// Reads the gate's lookup mismatches until the gate is gone, telling owners as
    /// [`MismatchNotices::observe`] says.
    pub async fn run(
        mut self,
        mismatches: broadcast::Receiver<LookupMismatch>,
        notifier: Arc<Notifier>,
    ) {
        notifier
            .relay(mismatches, "lookup mismatches", |mismatch| {
                self.observe(mismatch)
                    .map(|(owner, notice)| (owner.map(str::to_owned), notice))
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> MismatchNotices {
        MismatchNotices {
            owners: HashMap::from([("refund_order".to_owned(), "payments-team".to_owned())]),
            told: Told::default(),
        }
    }

    fn mismatch(intent_id: i64, at_ms: i64) -> LookupMismatch {
        LookupMismatch {
            tool: "refund_order".to_owned(),
            tenant: "north".to_owned(),
            intent_id,
            intent_key: format!("refund:{intent_id}:50.00"),
            reason: "a record carries this intent's provider key but its amount differs".to_owned(),
            at_ms,
        }
    }

    #[test]
    fn each_intent_is_told_once_per_interval_and_names_what_differs() {
        let mut engine = engine();
        let every = NOTICE_EVERY.as_millis() as i64;
        let (owner, notice) = engine.observe(&mismatch(7, 1_000)).unwrap();
        assert_eq!(owner, Some("payments-team"));
        assert_eq!(notice.kind, LOOKUP_MISMATCH);
        assert_eq!(notice.severity, Severity::Critical);
        assert!(
            notice.summary.contains("refund:7:50.00")
                && notice.summary.contains("amount differs")
                && notice.summary.contains("tenant north"),
            "{}",
            notice.summary
        );
        // The sweeper's next steps find the same record: not told again within the interval.
        for step in 1..10 {
            assert!(engine.observe(&mismatch(7, 1_000 + step * 5_000)).is_none());
        }
        // Another intent is told at once; the first again after the interval.
        assert!(engine.observe(&mismatch(8, 2_000)).is_some());
        assert!(engine.observe(&mismatch(7, 1_000 + every)).is_some());
    }

    #[test]
    fn the_table_of_intents_told_stays_bounded() {
        let mut engine = engine();
        for id in 0..(INTENTS_TRACKED_MAX as i64 * 3) {
            assert!(engine.observe(&mismatch(id, id)).is_some());
            assert!(engine.told.len() <= INTENTS_TRACKED_MAX);
        }
    }
}

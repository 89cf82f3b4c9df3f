//! The rows of the ledger, as the rest of the program sees them.

use intentgate_core::{IntentStatus, ResendStop};
use serde::Serialize;
use serde_json::Value;

/// The ledger's id for an intent (unique within one ledger).
pub type IntentId = i64;

/// One business intent and everything the gateway knows about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntentRecord {
    pub id: IntentId,
    pub tenant: String,
    pub tool: String,
    pub key: String,
    pub fingerprint: String,
    pub arguments: Value,
    pub status: IntentStatus,
    /// Attempts started (each `-> in_flight` adds one).
    pub attempt: u32,
    /// Provider-key generation: starts at 1, grows when a rejected intent starts again, so
    /// the provider never replays the old rejection for the new attempt.
    pub epoch: u32,
    pub lease_owner: Option<String>,
    pub lease_expires_ms: Option<i64>,
    /// The stored result (done) or rejection (rejected).
    pub result: Option<Value>,
    pub external_id: Option<String>,
    pub resolved_by: Option<String>,
    /// Every call for this intent, the first included.
    pub call_count: u64,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub updated_ms: i64,
    pub last_lookup_ms: Option<i64>,
    /// Why same-key re-sends of this intent stopped for good, if they did: the provider
    /// answers its key the same way every time, so only lookups can settle it. Kept until
    /// the provider key changes (a new epoch).
    pub resend_stopped: Option<ResendStop>,
}

impl IntentRecord {
    /// True while a caller holds a lease that has not expired at `now_ms`.
    pub fn lease_live(&self, now_ms: i64) -> bool {
        self.lease_owner.is_some() && self.lease_expires_ms.is_some_and(|expiry| expiry > now_ms)
    }
}

/// An intent's request for approval (docs/design.md section 13): the latest, when it was
/// held more than once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    pub intent: IntentId,
    pub tenant: String,
    pub tool: String,
    /// The subject of the credential whose call was held.
    pub requested_by: String,
    pub requested_ms: i64,
    /// When it lapses if nobody decides.
    pub deadline_ms: i64,
    /// What held it: the approval policy or a budget.
    pub held_by: String,
    /// The application's intent id the call carried, if any.
    pub intent_id: Option<String>,
    /// `None` while open.
    pub decision: Option<Decision>,
    pub decided_by: Option<String>,
    pub decided_ms: Option<i64>,
    /// The approver's reason (a denial always has one).
    pub reason: Option<String>,
}

impl Approval {
    /// Open, and still inside its deadline at `now_ms`.
    pub fn awaiting(&self, now_ms: i64) -> bool {
        self.decision.is_none() && now_ms < self.deadline_ms
    }
}

/// What became of a request for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approved,
    Denied,
    /// Nobody decided before the deadline.
    Expired,
}

impl Decision {
    pub const ALL: [Decision; 3] = [Decision::Approved, Decision::Denied, Decision::Expired];

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Denied => "denied",
            Decision::Expired => "expired",
        }
    }

    /// The decision stored as `text`, if any.
    pub fn parse(text: &str) -> Option<Decision> {
        Decision::ALL
            .into_iter()
            .find(|decision| decision.as_str() == text)
    }
}

/// What one budget has counted in one bucket and window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BudgetUsageRow {
    pub tool: String,
    pub budget: String,
    pub bucket: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub count: u64,
    pub units: u64,
}

/// One entry of the append-only event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub intent_id: Option<IntentId>,
    pub tenant: String,
    pub tool: String,
    pub at_ms: i64,
    /// `created`, `call`, `transition`, `conflict`, `lease_expired`, `lookup`, `resolve`,
    /// `disabled_call`.
    pub kind: String,
    pub from_status: Option<String>,
    pub to_status: Option<String>,
    pub attempt: Option<u32>,
    pub actor: Option<String>,
    pub detail: Option<String>,
}

/// A tool's kill-switch flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolFlag {
    pub tool: String,
    pub enabled: bool,
    pub reason: String,
    pub actor: String,
    pub updated_ms: i64,
}

/// How many intents of one tool are in one status, for the metrics gauges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    pub tool: String,
    pub status: IntentStatus,
    pub count: u64,
}

/// One reconciliation run, as stored: which window of which provider records and intents
/// it compared, and what it found, so that operators can see the history of runs and their
/// results without keeping the reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReconciliationRun {
    /// Assigned by the store (ignored on insert); never reused, also after a purge.
    pub id: i64,
    pub started_ms: i64,
    pub finished_ms: i64,
    /// The window compared: provider records and intents first seen in [since_ms, until_ms).
    pub since_ms: i64,
    pub until_ms: i64,
    /// Who ran it: "serve" (the hourly job), or an operator's name.
    pub actor: String,
    pub intents_checked: u64,
    pub records_checked: u64,
    /// Every mismatch the run found, also those the ledger did not keep.
    pub mismatches: u64,
    pub critical: u64,
    /// Mismatch counts by kind, e.g. {"duplicate": 1, "no_intent": 3}, and any other summary.
    /// A JSON object; the ledger adds `mismatches_not_stored`
    /// ([`crate::SUMMARY_MISMATCHES_NOT_STORED`]).
    pub summary: serde_json::Value,
}

/// One mismatch found by a run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredMismatch {
    /// The run that found it (ignored on insert).
    pub run_id: i64,
    pub tool: String,
    /// e.g. "unknown_found", "unknown_missing", "no_intent", "missing_record", "duplicate",
    /// "amount", "effect_despite_status".
    pub kind: String,
    /// "info", "warning" or "critical" ([`crate::MISMATCH_SEVERITIES`]).
    pub severity: String,
    pub intent_id: Option<IntentId>,
    pub tenant: Option<String>,
    pub intent_key: Option<String>,
    /// The provider's ids of the records involved (0, 1 or several).
    pub external_ids: Vec<String>,
    /// Who was affected (customer or order), from the provider record or the intent.
    pub subject: Option<String>,
    pub detail: String,
}

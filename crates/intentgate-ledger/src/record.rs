//! The rows of the ledger, as the rest of the program sees them.

use intentgate_core::IntentStatus;
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
}

impl IntentRecord {
    /// True while a caller holds a lease that has not expired at `now_ms`.
    pub fn lease_live(&self, now_ms: i64) -> bool {
        self.lease_owner.is_some() && self.lease_expires_ms.is_some_and(|expiry| expiry > now_ms)
    }
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

//! The notice of a call held for approval: what the tool's owner is told, with a link to
//! the intent ([`Gate::held_intents`](crate::Gate::held_intents)).

use intentgate_ledger::IntentId;
use serde::Serialize;
use tokio::sync::broadcast;

/// How many held-intent notices wait for a slow receiver before the oldest is dropped.
pub const HELD_NOTICE_BUFFER: usize = 256;

/// A call held for approval, announced once when it is held ([`Gate::held_intents`](crate::Gate::held_intents)): the
/// tool's owner is told, with a link to the intent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldNotice {
    /// The tool called.
    pub tool: String,
    /// The tool's owner, who is told.
    pub owner: Option<String>,
    /// The intent held.
    pub intent: IntentId,
    /// The tenant of the call.
    pub tenant: String,
    /// Who called: the credential's subject.
    pub requested_by: String,
    /// What held it: the approval policy or a budget.
    pub held_by: String,
    /// When the request lapses if nobody decides (clock milliseconds).
    pub deadline_ms: i64,
}

/// A held-notice channel with no receiver yet.
pub(crate) fn held_channel() -> broadcast::Sender<HeldNotice> {
    broadcast::channel(HELD_NOTICE_BUFFER).0
}

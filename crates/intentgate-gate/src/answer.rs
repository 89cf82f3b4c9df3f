//! The answers a call gets: a [`CallOutcome`] made from a status and the tool's messages
//! (docs/design.md section 6), from the ledger's record of an intent (what every repeat
//! receives), or from what an attempt learned. Shared by every phase of the call path, the
//! intent API, approvals and the resolution of `unknown` intents; it calls none of them.

use intentgate_core::{
    CallStatus, IntentStatus, OutcomeReason, ToolDefinition, UpstreamObservation, differing_fields,
};
use intentgate_ledger::{Finish, IntentRecord, LedgerError};
use serde_json::Value;

use crate::gate::Gate;
use crate::outcome::CallOutcome;

impl Gate {
    /// The answer a repeat gets from the ledger.
    pub(crate) fn answer_from(&self, tool: &ToolDefinition, intent: &IntentRecord) -> CallOutcome {
        let (status, details) = match intent.status {
            IntentStatus::Done => (CallStatus::AlreadyDone, String::new()),
            IntentStatus::Rejected => (
                CallStatus::Rejected,
                intent
                    .result
                    .as_ref()
                    .map(rejection_text)
                    .unwrap_or_default(),
            ),
            IntentStatus::NotExecuted => (CallStatus::NotExecuted, String::new()),
            // Held for approval, or approved and about to start.
            IntentStatus::Pending if !intent.lease_live(self.clock.now_ms()) => {
                (CallStatus::AwaitingApproval, String::new())
            }
            IntentStatus::Pending | IntentStatus::InFlight | IntentStatus::Unknown => {
                (CallStatus::PendingUnknown, String::new())
            }
        };
        let mut outcome = match denial_reason(intent) {
            Some(reason) => self.outcome(tool, status, "").with_reason_details(
                tool,
                OutcomeReason::Denied,
                &reason,
            ),
            None => self.outcome(tool, status, &details),
        };
        outcome.intent_key = Some(intent.key.clone());
        if matches!(intent.status, IntentStatus::Done | IntentStatus::Rejected) {
            outcome.result = intent.result.clone();
            outcome.external_id = intent.external_id.clone();
        }
        outcome
    }

    /// The answer for arguments the upstream can't build a request from: `invalid_arguments`,
    /// nothing sent and nothing recorded.
    pub(crate) fn request_not_buildable(
        &self,
        tool: &ToolDefinition,
        reason: String,
    ) -> CallOutcome {
        tracing::info!(tool = %tool.name, %reason, "call refused: no request can be built from its arguments");
        self.outcome(tool, CallStatus::InvalidArguments, &reason)
            .with_errors(vec![reason])
    }

    /// The answer of `status` for `tool`, its message rendered with `details`.
    pub(crate) fn outcome(
        &self,
        tool: &ToolDefinition,
        status: CallStatus,
        details: &str,
    ) -> CallOutcome {
        CallOutcome {
            status,
            reason: None,
            message: tool
                .messages
                .render(status, tool.effect, &tool.name, details),
            tool: tool.name.clone(),
            intent_key: None,
            result: None,
            external_id: None,
            differing_fields: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The answer to a call whose key names an intent made with other arguments: which
    /// fields differ, compared as the ledger keeps them, so a sensitive field is compared by
    /// its hash and only its name is ever shown.
    pub(crate) fn conflict(
        &self,
        tool: &ToolDefinition,
        key: String,
        intent: &IntentRecord,
        stored_arguments: &Value,
    ) -> CallOutcome {
        let fields = differing_fields(&intent.arguments, stored_arguments);
        tracing::warn!(tool = %tool.name, key = %key, fields = ?fields, "conflict: same key, other arguments");
        let mut outcome = self.outcome(tool, CallStatus::Conflict, &fields.join(", "));
        outcome.intent_key = Some(key);
        outcome.differing_fields = fields;
        outcome
    }

    /// The answer to a call that was not processed because the gateway is misconfigured:
    /// `not_executed`, and the instruction that a person will follow up.
    pub(crate) fn misconfigured_outcome(&self, tool: &ToolDefinition) -> CallOutcome {
        self.outcome(tool, CallStatus::NotExecuted, "")
            .with_reason(tool, OutcomeReason::Misconfigured)
    }

    /// The answer to the call whose attempt learned `learned` and left `intent` so: a repeat's
    /// answer, except that the call that did the work is told `done`, not `already_done`.
    pub(crate) fn recorded_answer(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        learned: IntentStatus,
    ) -> CallOutcome {
        let mut outcome = self.answer_from(tool, intent);
        if learned == IntentStatus::Done && outcome.status == CallStatus::AlreadyDone {
            outcome.status = CallStatus::Done;
            outcome.message = tool
                .messages
                .render(CallStatus::Done, tool.effect, &tool.name, "");
        }
        outcome
    }

    /// The answer when the outcome could not be recorded: the truth this call learned.
    pub(crate) fn unrecorded_answer(
        &self,
        tool: &ToolDefinition,
        id: i64,
        error: &LedgerError,
        finish: Finish,
    ) -> CallOutcome {
        tracing::error!(tool = %tool.name, intent = id, %error, "could not record the outcome; the intent stays in flight until looked up");
        let status = match finish.status {
            IntentStatus::Done => CallStatus::Done,
            IntentStatus::Rejected => CallStatus::Rejected,
            IntentStatus::NotExecuted => CallStatus::NotExecuted,
            _ => CallStatus::PendingUnknown,
        };
        self.outcome(tool, status, "")
            .with_result(finish.result.unwrap_or(Value::Null), finish.external_id)
    }
}

impl CallOutcome {
    /// The outcome with the result repeats are shown and the provider's id of the effect.
    pub(crate) fn with_result(mut self, result: Value, external_id: Option<String>) -> CallOutcome {
        self.result = Some(result);
        self.external_id = external_id;
        self
    }

    /// The outcome with what is wrong with the call's arguments.
    pub(crate) fn with_errors(mut self, errors: Vec<String>) -> CallOutcome {
        self.errors = errors;
        self
    }

    /// The outcome with `reason`, and the instruction for it.
    pub(crate) fn with_reason(self, tool: &ToolDefinition, reason: OutcomeReason) -> CallOutcome {
        self.with_reason_details(tool, reason, "")
    }

    /// [`CallOutcome::with_reason`], its message filled in with `details`.
    pub(crate) fn with_reason_details(
        mut self,
        tool: &ToolDefinition,
        reason: OutcomeReason,
        details: &str,
    ) -> CallOutcome {
        self.reason = Some(reason);
        self.message = tool.messages.render_with_reason(
            self.status,
            Some(reason),
            tool.effect,
            &tool.name,
            details,
        );
        self
    }
}

/// The body of an upstream's answer (`null` when there was no response).
pub(crate) fn body(observation: UpstreamObservation) -> Value {
    match observation {
        UpstreamObservation::Response { body, .. } => body,
        _ => Value::Null,
    }
}

/// The approver's reason, for an intent a person denied (the ledger's rejection
/// `{"denied": reason, "by": actor}`); `None` for any other intent.
fn denial_reason(intent: &IntentRecord) -> Option<String> {
    if intent.status != intentgate_core::IntentStatus::Rejected
        || intent.resolved_by.as_deref() != Some(intentgate_ledger::DENIED_BY)
    {
        return None;
    }
    let result = intent.result.as_ref()?;
    let reason = result.get("denied")?.as_str()?;
    Some(match result.get("by").and_then(serde_json::Value::as_str) {
        Some(by) => format!("{reason}, said {by}"),
        None => reason.to_owned(),
    })
}

/// Why the provider refused, for the event log and the model: its status and its words.
pub(crate) fn rejection_reason(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { status, body, .. } => {
            let text = rejection_text(body);
            if text.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {text}")
            }
        }
        _ => String::new(),
    }
}

/// What an observation was, for the event log: its status or its transport reason.
pub(crate) fn seen(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { status, .. } => format!("HTTP {status}"),
        UpstreamObservation::NotSent { reason } => format!("not sent: {reason}"),
        UpstreamObservation::Timeout => "timeout".to_owned(),
        UpstreamObservation::Dropped { reason } => format!("dropped: {reason}"),
    }
}

/// The provider's own words in an answer, if it has a body that holds them.
pub(crate) fn provider_text(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { body, .. } => rejection_text(body),
        _ => String::new(),
    }
}

/// The provider's own words for a refusal, from common error body shapes.
pub(crate) fn rejection_text(body: &Value) -> String {
    ["/error/message", "/message", "/error", "/detail"]
        .iter()
        .find_map(|pointer| body.pointer(pointer).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

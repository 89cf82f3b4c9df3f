//! What the model sees: one status per call, with an instruction it can act on.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The outcome of one call, as the model sees it (SPEC section 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Executed by this call.
    Done,
    /// Executed earlier; the stored result is returned.
    AlreadyDone,
    /// May have happened; being confirmed. Do not retry.
    PendingUnknown,
    /// The provider refused; nothing happened.
    Rejected,
    /// Certainly not done; safe to try again later.
    NotExecuted,
    /// This intent exists with other arguments; nothing executed.
    Conflict,
    /// The tool is switched off; nothing executed.
    Disabled,
    /// The arguments do not match the schema; nothing recorded.
    InvalidArguments,
}

impl CallStatus {
    pub const ALL: [CallStatus; 8] = [
        CallStatus::Done,
        CallStatus::AlreadyDone,
        CallStatus::PendingUnknown,
        CallStatus::Rejected,
        CallStatus::NotExecuted,
        CallStatus::Conflict,
        CallStatus::Disabled,
        CallStatus::InvalidArguments,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Done => "done",
            CallStatus::AlreadyDone => "already_done",
            CallStatus::PendingUnknown => "pending_unknown",
            CallStatus::Rejected => "rejected",
            CallStatus::NotExecuted => "not_executed",
            CallStatus::Conflict => "conflict",
            CallStatus::Disabled => "disabled",
            CallStatus::InvalidArguments => "invalid_arguments",
        }
    }

    /// True where the model must act differently from "it worked" (over MCP: `isError`).
    pub fn needs_model_action(self) -> bool {
        matches!(
            self,
            CallStatus::Rejected | CallStatus::Conflict | CallStatus::InvalidArguments
        )
    }

    /// The default instruction. `{tool}` is replaced by the tool's name; `{details}` by
    /// what the gateway knows (the fields that differ, the schema error, the reason).
    pub fn default_message(self) -> &'static str {
        match self {
            CallStatus::Done => "It went through. Tell the customer it is done.",
            CallStatus::AlreadyDone => {
                "Completed earlier; this is the original result. Tell the customer it went through. \
                 Do not call {tool} again for this request."
            }
            CallStatus::PendingUnknown => {
                "It may have gone through and is being confirmed. Do not retry {tool}. Tell the \
                 customer it is being confirmed."
            }
            CallStatus::Rejected => {
                "The provider refused it and nothing happened: {details}. Explain the reason to the \
                 customer; call {tool} again only with corrected arguments."
            }
            CallStatus::NotExecuted => {
                "It did not happen: the provider was unavailable or rate limited. It is safe to try \
                 again later."
            }
            CallStatus::Conflict => {
                "This request was already made with different arguments ({details}). Nothing new was \
                 done. Do not retry; confirm the details with the customer."
            }
            CallStatus::Disabled => {
                "{tool} is switched off right now and nothing was done. Tell the customer a person \
                 will follow up."
            }
            CallStatus::InvalidArguments => {
                "The arguments do not match the tool's schema: {details}. Fix the arguments and call again."
            }
        }
    }
}

/// Why a call ended with its status, where the status alone would tell the model the wrong
/// thing to do. Published beside the status (`"reason": "misconfigured"`); the status stays
/// what it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeReason {
    /// `not_executed` because the gateway is misconfigured (a wrong credential, a route that
    /// does not exist, an upstream it can't reach): nothing happened, trying again will not
    /// help until a person fixes it, and the operator has been told.
    Misconfigured,
}

impl OutcomeReason {
    pub const ALL: [OutcomeReason; 1] = [OutcomeReason::Misconfigured];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeReason::Misconfigured => "misconfigured",
        }
    }

    /// The instruction for a call that ended for this reason. A tool's own message for the
    /// status is not used: it is written for the usual case ("try again later"), which is
    /// the wrong advice here.
    pub fn default_message(self) -> &'static str {
        match self {
            OutcomeReason::Misconfigured => {
                "It did not happen, and nothing was done: the gateway could not use {tool}'s                  provider as configured, which the operators have been told about. Tell the                  customer a person will follow up. Do not retry {tool} for this request now."
            }
        }
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-tool message overrides; statuses without one use [`CallStatus::default_message`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Messages(pub BTreeMap<CallStatus, String>);

impl Messages {
    /// The instruction for `status`, with `{tool}` and `{details}` filled in.
    pub fn render(&self, status: CallStatus, tool: &str, details: &str) -> String {
        let template = self
            .0
            .get(&status)
            .map(String::as_str)
            .unwrap_or(status.default_message());
        let details = if details.is_empty() {
            "no details"
        } else {
            details
        };
        fill(template, tool, details)
    }

    /// The instruction for a call that ended with `status` for `reason`: the reason's own
    /// message ([`OutcomeReason::default_message`]) when there is one.
    pub fn render_with_reason(
        &self,
        status: CallStatus,
        reason: Option<OutcomeReason>,
        tool: &str,
        details: &str,
    ) -> String {
        match reason {
            Some(reason) => fill(reason.default_message(), tool, details),
            None => self.render(status, tool, details),
        }
    }
}

fn fill(template: &str, tool: &str, details: &str) -> String {
    template
        .replace("{tool}", tool)
        .replace("{details}", details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_in_the_tool_and_details() {
        let messages = Messages::default();
        let text = messages.render(CallStatus::Conflict, "refund_order", "amount");
        assert!(
            text.contains("(amount)") && text.contains("Do not retry"),
            "{text}"
        );
        let text = messages.render(CallStatus::PendingUnknown, "refund_order", "");
        assert!(text.contains("Do not retry refund_order"), "{text}");
    }

    #[test]
    fn a_tool_can_override_one_message() {
        let mut messages = Messages::default();
        messages
            .0
            .insert(CallStatus::Done, "Refund {tool} sent.".into());
        assert_eq!(
            messages.render(CallStatus::Done, "refund_order", ""),
            "Refund refund_order sent."
        );
        assert!(
            messages
                .render(CallStatus::AlreadyDone, "refund_order", "")
                .starts_with("Completed earlier")
        );
    }

    #[test]
    fn a_misconfigured_outcome_says_a_person_follows_up_whatever_the_tool_set() {
        let mut messages = Messages::default();
        messages
            .0
            .insert(CallStatus::NotExecuted, "Try {tool} again later.".into());
        let text = messages.render_with_reason(
            CallStatus::NotExecuted,
            Some(OutcomeReason::Misconfigured),
            "refund_order",
            "",
        );
        assert!(text.contains("a person will follow up"), "{text}");
        assert!(text.contains("Do not retry refund_order"), "{text}");
        assert!(
            !text.to_lowercase().contains("explain the reason"),
            "{text}"
        );
        assert_eq!(
            messages.render_with_reason(CallStatus::NotExecuted, None, "refund_order", ""),
            "Try refund_order again later."
        );
        assert_eq!(
            serde_json::to_value(OutcomeReason::Misconfigured).unwrap(),
            "misconfigured"
        );
    }

    #[test]
    fn statuses_serialise_in_snake_case() {
        for status in CallStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }
}

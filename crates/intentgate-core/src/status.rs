//! What the model sees: one status per call, with an instruction it can act on.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Effect;

/// The outcome of one call, as the model sees it (docs/design.md section 6).
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
    /// Held for a person's approval (docs/design.md section 13): recorded with its exact
    /// arguments, nothing executed yet. Every repeat gets this answer until an approver
    /// decides; approved, the gateway executes it and repeats get `already_done`.
    AwaitingApproval,
    /// Beyond one of the tool's budgets, which refuses such calls: nothing recorded or
    /// executed. The budget's name is in the details.
    OverBudget,
}

impl CallStatus {
    pub const ALL: [CallStatus; 10] = [
        CallStatus::Done,
        CallStatus::AlreadyDone,
        CallStatus::PendingUnknown,
        CallStatus::Rejected,
        CallStatus::NotExecuted,
        CallStatus::Conflict,
        CallStatus::Disabled,
        CallStatus::InvalidArguments,
        CallStatus::AwaitingApproval,
        CallStatus::OverBudget,
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
            CallStatus::AwaitingApproval => "awaiting_approval",
            CallStatus::OverBudget => "over_budget",
        }
    }

    /// True where the model must act differently from "it worked" (over MCP: `isError`).
    pub fn needs_model_action(self) -> bool {
        matches!(
            self,
            CallStatus::Rejected
                | CallStatus::Conflict
                | CallStatus::InvalidArguments
                | CallStatus::OverBudget
        )
    }

    /// The default instruction for a call of a tool with `effect`. `{tool}` is replaced by
    /// the tool's name; `{details}` by what the gateway knows (the fields that differ, the
    /// schema error, the reason).
    ///
    /// The defaults assume no particular business: they speak of "the user" (whoever the
    /// agent answers to), and a read or an idempotent update never answers as if something
    /// had been done for someone. A read can only end `done`, `rejected`, `not_executed`,
    /// `disabled` or `invalid_arguments`, as can an idempotent tool; the other statuses
    /// belong to side effects, whose wording they keep whatever the effect.
    pub fn default_message(self, effect: Effect) -> &'static str {
        match (self, effect) {
            (CallStatus::Done, Effect::Read) => "This is what {tool} found; nothing was changed.",
            (CallStatus::Done, Effect::Idempotent) => {
                "{tool} applied it. Calling it again with the same arguments changes nothing."
            }
            (CallStatus::Done, Effect::SideEffect) => "It went through. Tell the user it is done.",
            (CallStatus::AlreadyDone, _) => {
                "Completed earlier; this is the original result. Tell the user it went through. \
                 Do not call {tool} again for this request."
            }
            (CallStatus::PendingUnknown, _) => {
                "It may have gone through and is being confirmed. Do not retry {tool}. Tell the \
                 user it is being confirmed."
            }
            (CallStatus::Rejected, Effect::Read) => {
                "The request was refused: {details}. Nothing was changed. Call {tool} again only \
                 with corrected arguments."
            }
            (CallStatus::Rejected, Effect::Idempotent) => {
                "It was refused and nothing was changed: {details}. Call {tool} again only with \
                 corrected arguments."
            }
            (CallStatus::Rejected, Effect::SideEffect) => {
                "The provider refused it and nothing happened: {details}. Explain the reason to the \
                 user; call {tool} again only with corrected arguments."
            }
            (CallStatus::NotExecuted, Effect::Read) => {
                "{tool} got no answer: the service was unavailable or rate limited. It is safe to \
                 call it again later."
            }
            (CallStatus::NotExecuted, Effect::Idempotent) => {
                "It may not have been applied: the service was unavailable or rate limited. It is \
                 safe to call {tool} again later with the same arguments."
            }
            (CallStatus::NotExecuted, Effect::SideEffect) => {
                "It did not happen: the provider was unavailable or rate limited. It is safe to try \
                 again later."
            }
            (CallStatus::Conflict, _) => {
                "This request was already made with different arguments ({details}). Nothing new was \
                 done. Do not retry; confirm the details with the user."
            }
            (CallStatus::Disabled, Effect::Read) => {
                "{tool} is switched off right now. Tell the user this can't be looked up at the \
                 moment."
            }
            (CallStatus::Disabled, Effect::Idempotent) => {
                "{tool} is switched off right now and nothing was changed. Tell the user a person \
                 will follow up."
            }
            (CallStatus::Disabled, Effect::SideEffect) => {
                "{tool} is switched off right now and nothing was done. Tell the user a person \
                 will follow up."
            }
            (CallStatus::InvalidArguments, _) => {
                "The arguments do not match the tool's schema: {details}. Fix the arguments and call again."
            }
            (CallStatus::AwaitingApproval, _) => {
                "Nothing has been done yet: a person must approve this request first ({details}). \
                 Tell the user it is being reviewed. Do not call {tool} again for this request; \
                 once it is approved the gateway carries it out."
            }
            (CallStatus::OverBudget, _) => {
                "Nothing was done: this would go beyond a limit set for {tool} ({details}). Do \
                 not retry now; tell the user a person will follow up."
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
    /// `invalid_arguments` because the tool's key uses `{intent_id}` and the call carried
    /// no intent id (HTTP header `Intent-Id`, MCP `_meta` key `intentgate/intent_id`). Only
    /// the calling application can supply one, never the model: nothing was recorded, and
    /// the same call gets the same answer however often it is repeated.
    MissingIntentId,
    /// `rejected` because a person reviewing the held intent denied it (docs/design.md
    /// section 13), not because the provider refused: the approver's reason is the details,
    /// and the intent stays rejected however often it is asked for.
    Denied,
}

impl OutcomeReason {
    pub const ALL: [OutcomeReason; 3] = [
        OutcomeReason::Misconfigured,
        OutcomeReason::MissingIntentId,
        OutcomeReason::Denied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeReason::Misconfigured => "misconfigured",
            OutcomeReason::MissingIntentId => "missing_intent_id",
            OutcomeReason::Denied => "denied",
        }
    }

    /// The instruction for a call that ended for this reason. A tool's own message for the
    /// status is not used: it is written for the usual case ("try again later", "fix the
    /// arguments"), which is the wrong advice here.
    pub fn default_message(self) -> &'static str {
        match self {
            OutcomeReason::Misconfigured => {
                "It did not happen, and nothing was done: the gateway could not use {tool}'s \
                 provider as configured, which the operators have been told about. Tell the \
                 user a person will follow up. Do not retry {tool} for this request now."
            }
            OutcomeReason::MissingIntentId => {
                "Nothing was done: {tool} needs an intent id that the application sends with the \
                 call, and this call had none. It is not an argument you can add, and calling \
                 again gets the same answer. Do not retry {tool}; tell the user it can't be done \
                 from here and needs a person or the application to start it."
            }
            OutcomeReason::Denied => {
                "Nothing was done: the person who reviewed this request denied it ({details}). \
                 Explain the reason to the user. Do not call {tool} again for this request."
            }
        }
    }
}

impl fmt::Display for CallStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-tool message overrides; statuses without one use [`CallStatus::default_message`] for
/// the tool's effect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Messages(pub BTreeMap<CallStatus, String>);

impl Messages {
    /// The instruction for `status` of a tool with `effect`, with `{tool}` and `{details}`
    /// filled in: the tool's own message for the status, else the default for its effect.
    pub fn render(&self, status: CallStatus, effect: Effect, tool: &str, details: &str) -> String {
        let template = self
            .0
            .get(&status)
            .map(String::as_str)
            .unwrap_or(status.default_message(effect));
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
        effect: Effect,
        tool: &str,
        details: &str,
    ) -> String {
        match reason {
            Some(reason) => fill(reason.default_message(), tool, details),
            None => self.render(status, effect, tool, details),
        }
    }
}

/// Fills a template in. A provider's reason usually ends its own sentence ("Your card was
/// declined."); where the template closes the sentence after `{details}` too, the reason's
/// full stop is dropped so the model doesn't read "declined.. Explain".
fn fill(template: &str, tool: &str, details: &str) -> String {
    let text = template.replace("{tool}", tool);
    // Most messages name no details: they are answered without the two passes below.
    if !text.contains("{details}") {
        return text;
    }
    let closed = details.trim_end().trim_end_matches('.');
    text.replace("{details}.", &format!("{closed}."))
        .replace("{details}", details)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EFFECTS: [Effect; 3] = [Effect::Read, Effect::Idempotent, Effect::SideEffect];

    #[test]
    fn defaults_fill_in_the_tool_and_details() {
        let messages = Messages::default();
        let text = messages.render(
            CallStatus::Conflict,
            Effect::SideEffect,
            "refund_order",
            "amount",
        );
        assert!(
            text.contains("(amount)") && text.contains("Do not retry"),
            "{text}"
        );
        let text = messages.render(
            CallStatus::PendingUnknown,
            Effect::SideEffect,
            "refund_order",
            "",
        );
        assert!(text.contains("Do not retry refund_order"), "{text}");
    }

    // Found with the OpenAI Agents SDK: a provider's "Your card was declined." came out as
    // "declined.. Explain the reason".
    #[test]
    fn a_reason_that_ends_its_sentence_is_not_closed_twice() {
        let messages = Messages::default();
        let text = messages.render(
            CallStatus::Rejected,
            Effect::SideEffect,
            "refund_order",
            "Your card was declined.",
        );
        assert!(text.contains("Your card was declined. Explain"), "{text}");
        let text = messages.render(CallStatus::Conflict, Effect::SideEffect, "t", "amount.");
        assert!(text.contains("(amount.)"), "{text}");
    }

    // Found by a new user: the defaults were written for customer support, so a knowledge
    // graph's read answered "Tell the customer it is done".
    #[test]
    fn no_default_assumes_a_customer() {
        for status in CallStatus::ALL {
            for effect in EFFECTS {
                let text = status.default_message(effect);
                assert!(
                    !text.to_lowercase().contains("customer"),
                    "{status} {effect:?}: {text}"
                );
            }
        }
        for reason in OutcomeReason::ALL {
            let text = reason.default_message();
            assert!(
                !text.to_lowercase().contains("customer"),
                "{reason:?}: {text}"
            );
            assert!(!text.contains("  "), "{reason:?}: {text}");
        }
    }

    #[test]
    fn a_read_or_an_update_never_answers_as_if_something_was_done_for_someone() {
        for status in [
            CallStatus::Done,
            CallStatus::Rejected,
            CallStatus::NotExecuted,
            CallStatus::Disabled,
        ] {
            for effect in [Effect::Read, Effect::Idempotent] {
                let text = status.default_message(effect);
                assert!(
                    !text.contains("went through"),
                    "{status} {effect:?}: {text}"
                );
                assert!(!text.contains("it is done"), "{status} {effect:?}: {text}");
                assert_ne!(
                    text,
                    status.default_message(Effect::SideEffect),
                    "{status} {effect:?}"
                );
            }
        }
        assert!(
            CallStatus::Done
                .default_message(Effect::Read)
                .contains("nothing was changed")
        );
        assert!(
            CallStatus::NotExecuted
                .default_message(Effect::Idempotent)
                .contains("with the same arguments")
        );
        assert!(
            CallStatus::Done
                .default_message(Effect::SideEffect)
                .contains("Tell the user it is done")
        );
    }

    #[test]
    fn a_tool_can_override_one_message() {
        let mut messages = Messages::default();
        messages
            .0
            .insert(CallStatus::Done, "Refund {tool} sent.".into());
        assert_eq!(
            messages.render(CallStatus::Done, Effect::SideEffect, "refund_order", ""),
            "Refund refund_order sent."
        );
        assert!(
            messages
                .render(
                    CallStatus::AlreadyDone,
                    Effect::SideEffect,
                    "refund_order",
                    ""
                )
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
            Effect::SideEffect,
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
            messages.render_with_reason(
                CallStatus::NotExecuted,
                None,
                Effect::SideEffect,
                "refund_order",
                ""
            ),
            "Try refund_order again later."
        );
        assert_eq!(
            serde_json::to_value(OutcomeReason::Misconfigured).unwrap(),
            "misconfigured"
        );
    }

    #[test]
    fn a_missing_intent_id_says_not_to_retry_and_to_tell_the_user_whatever_the_tool_set() {
        let mut messages = Messages::default();
        messages.0.insert(
            CallStatus::InvalidArguments,
            "Fix {tool}'s arguments.".into(),
        );
        let text = messages.render_with_reason(
            CallStatus::InvalidArguments,
            Some(OutcomeReason::MissingIntentId),
            Effect::SideEffect,
            "charge_card",
            "",
        );
        assert!(text.contains("Do not retry charge_card"), "{text}");
        assert!(text.contains("tell the user"), "{text}");
        assert!(!text.to_lowercase().contains("fix the arguments"), "{text}");
        assert_eq!(
            serde_json::to_value(OutcomeReason::MissingIntentId).unwrap(),
            "missing_intent_id"
        );
        for reason in OutcomeReason::ALL {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }

    #[test]
    fn statuses_serialise_in_snake_case() {
        for status in CallStatus::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }
}

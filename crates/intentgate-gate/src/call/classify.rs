//! The classify phase (docs/design.md section 5, "How an upstream's answer is read"): what
//! an upstream's answer says happened, by `intentgate_core::classify_with`, told to the
//! upstream's health, and turned into what the intent becomes when the answer was not
//! processed.

use intentgate_core::{
    IntentStatus, OutcomeClass, OutcomeReason, RequestFacts, ToolDefinition, UpstreamObservation,
    classify_with,
};
use intentgate_ledger::IntentRecord;

use crate::answer::{provider_text, seen};
use crate::call::execute::{Attempt, Learned};
use crate::gate::Gate;
use crate::misconfigured::Failure;
use crate::trace;

impl Gate {
    /// Classifies one answer to an attempt of `intent`, in a `classify` span, and tells the
    /// upstream's health what it showed.
    pub(crate) fn classify(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        facts: &RequestFacts,
        observation: &UpstreamObservation,
    ) -> OutcomeClass {
        let class = {
            let classifying = crate::phase!("classify");
            let _entered = classifying.enter();
            let class = classify_with(observation, facts);
            trace::set_attribute(&classifying, "intentgate.class", class_name(&class));
            class
        };
        tracing::debug!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, ?class, "upstream answered");
        self.observe_upstream(tool, facts, &class, observation);
        class
    }

    /// What an attempt learned from an answer that was not processed (or was the
    /// operator's error), once no retry is left: `not_executed` for a caller's attempt, and
    /// for a re-send `unknown`, since this request did nothing but the attempt it repeats
    /// may have. A misconfigured gateway's answer carries its reason.
    pub(crate) fn not_processed(
        &self,
        tool: &ToolDefinition,
        class: &OutcomeClass,
        facts: &RequestFacts,
        observation: &UpstreamObservation,
        retry: u32,
        attempt: Attempt,
    ) -> Learned {
        let mut reason = None;
        let cause = match class {
            OutcomeClass::Misconfigured { kind } => {
                reason = Some(OutcomeReason::Misconfigured);
                Failure {
                    tool: &tool.name,
                    facts,
                    kind: *kind,
                    observation,
                    now_ms: self.clock.now_ms(),
                }
                .detail(retry, &provider_text(observation))
            }
            OutcomeClass::NotProcessed { retry: false, .. } => format!(
                "not processed by the upstream ({}), which said not to retry",
                seen(observation)
            ),
            _ => format!(
                "not processed by the upstream ({}); retries spent",
                seen(observation)
            ),
        };
        let (status, detail) = match attempt {
            Attempt::Call => (IntentStatus::NotExecuted, cause),
            // This request did nothing, but the attempt it repeats may have: that one's
            // outcome is as unknown as before.
            Attempt::Resend => (
                IntentStatus::Unknown,
                format!("re-send {cause}; the first attempt's outcome is still unknown"),
            ),
        };
        Learned {
            status,
            detail,
            reason,
        }
    }

    /// Tells the upstream's health what one request showed: an error that is the operator's
    /// is counted, logged and reported ([`UpstreamHealth::failed`](crate::misconfigured::UpstreamHealth::failed)); an answer as configured
    /// (done, or a refusal of the customer's request) clears the tool and upstream.
    pub(crate) fn observe_upstream(
        &self,
        tool: &ToolDefinition,
        facts: &RequestFacts,
        class: &OutcomeClass,
        observation: &UpstreamObservation,
    ) {
        match class {
            OutcomeClass::Misconfigured { kind } => self.upstream_health.failed(
                &self.metrics,
                &Failure {
                    tool: &tool.name,
                    facts,
                    kind: *kind,
                    observation,
                    now_ms: self.clock.now_ms(),
                },
            ),
            OutcomeClass::Done | OutcomeClass::Rejected => {
                self.upstream_health.answered(&tool.name, facts)
            }
            OutcomeClass::NotProcessed { .. } | OutcomeClass::Ambiguous { .. } => {}
        }
    }
}

/// The name of an outcome class, as exported.
fn class_name(class: &OutcomeClass) -> &'static str {
    match class {
        OutcomeClass::Done => "done",
        OutcomeClass::Rejected => "rejected",
        OutcomeClass::NotProcessed { .. } => "not_processed",
        OutcomeClass::Misconfigured { .. } => "misconfigured",
        OutcomeClass::Ambiguous { .. } => "ambiguous",
    }
}

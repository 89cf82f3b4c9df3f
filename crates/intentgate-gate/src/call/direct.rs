//! Reads and idempotent tools (docs/design.md section 3): no intent and no ledger, the
//! same request repeated a bounded number of times, with backoff, where that may help.

use intentgate_core::{CallStatus, OutcomeClass, ToolDefinition, classify_with};
use serde_json::Value;

use crate::answer::{body, rejection_reason};
use crate::gate::Gate;
use crate::outcome::CallOutcome;
use crate::upstream::UpstreamCall;

impl Gate {
    /// Reads and idempotent tools: no ledger, bounded retries with the same arguments.
    pub(crate) async fn call_direct(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
    ) -> CallOutcome {
        let call = UpstreamCall::without_intent(tool, arguments);
        if let Err(reason) = self.upstream.check(call) {
            return self.request_not_buildable(tool, reason);
        }
        let mut retry = 0;
        loop {
            let (observation, facts) = self.send_read(call).await;
            let class = classify_with(&observation, &facts);
            self.observe_upstream(tool, &facts, &class, &observation);
            let retry_after = match &class {
                OutcomeClass::Done => {
                    return self
                        .outcome(tool, CallStatus::Done, "")
                        .with_result(body(observation), None);
                }
                OutcomeClass::Rejected => {
                    let reason = rejection_reason(&observation);
                    return self
                        .outcome(tool, CallStatus::Rejected, &reason)
                        .with_result(body(observation), None);
                }
                // The answer to a wrong credential or route won't change within the call.
                OutcomeClass::Misconfigured { kind } if !kind.retried() => {
                    return self.misconfigured_outcome(tool);
                }
                OutcomeClass::Misconfigured { .. } => None,
                // The provider said a retry won't help.
                OutcomeClass::NotProcessed { retry: false, .. } => {
                    return self.outcome(tool, CallStatus::NotExecuted, "");
                }
                OutcomeClass::NotProcessed { retry_after_ms, .. } => *retry_after_ms,
                OutcomeClass::Ambiguous { .. } => None,
            };
            match self.backoff(retry, tool.retry_budget, retry_after) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    retry += 1;
                }
                None if matches!(class, OutcomeClass::Misconfigured { .. }) => {
                    return self.misconfigured_outcome(tool);
                }
                None => return self.outcome(tool, CallStatus::NotExecuted, ""),
            }
        }
    }
}

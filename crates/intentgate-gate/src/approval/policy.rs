//! What a tool's approval policy and budgets ask of one call (docs/design.md section 13):
//! turned into the ledger's [`CallPolicies`] before `begin`, and the answers to a call that
//! is held (`awaiting_approval`) or refused by a budget (`over_budget`).

use intentgate_core::{BeyondBudget, CallStatus, ToolDefinition, ToolPolicies};
use intentgate_ledger::{Approval, BudgetCharge, CallPolicies, Hold, IntentRecord};

use crate::approval::notice::HeldNotice;
use crate::context::CallContext;
use crate::gate::Gate;
use crate::outcome::CallOutcome;

impl Gate {
    /// What `tool`'s policies ask of the `begin` of this call: `Ok(None)` for a tool without
    /// any. An argument a budget needs and can't read (a subject that can't be rendered, an
    /// amount that is not an exact number) is the caller's mistake, the text of an
    /// `invalid_arguments` answer.
    pub(crate) fn call_policies(
        &self,
        tool: &ToolDefinition,
        arguments: &serde_json::Value,
        context: &CallContext,
        intent_id: Option<&str>,
        now_ms: i64,
    ) -> Result<Option<CallPolicies>, String> {
        let Some(policies) = &tool.policies else {
            return Ok(None);
        };
        let hold = policies.approval.as_ref().and_then(|approval| {
            approval.requires(&context.tenant, arguments).then(|| Hold {
                held_by: match &approval.when {
                    Some(condition) => format!("approval policy ({condition})"),
                    None => "approval policy".to_owned(),
                },
                deadline_ms: now_ms.saturating_add(approval.deadline_ms as i64),
            })
        });
        let budgets = charges(policies, &context.tenant, arguments, now_ms)?;
        // A call its approval policy lets through, of a tool without budgets, asks nothing
        // of the ledger's policies: its `begin` is a plain one (on PostgreSQL, one round
        // trip). An intent already held is still answered as held: `begin` reads the
        // approval of every `pending` intent.
        if hold.is_none() && budgets.is_empty() {
            return Ok(None);
        }
        Ok(Some(CallPolicies {
            hold,
            requested_by: context.caller.clone(),
            intent_id: intent_id.map(str::to_owned),
            budgets,
        }))
    }

    /// The answer to a call whose intent is held: `awaiting_approval`, naming what held it.
    /// The call that asked announces it ([`Gate::held_intents`](crate::Gate::held_intents)) and counts it.
    pub(crate) fn held(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        approval: &Approval,
        asked_now: bool,
    ) -> CallOutcome {
        if asked_now {
            self.metrics.approval(&tool.name, "held");
            tracing::info!(
                tool = %tool.name,
                intent = intent.id,
                held_by = %approval.held_by,
                "call held for approval; nothing executed"
            );
            // No receiver (no owners' notices configured) is not an error.
            let _ = self.held.send(HeldNotice {
                tool: tool.name.clone(),
                owner: tool.owner.clone(),
                intent: intent.id,
                tenant: intent.tenant.clone(),
                requested_by: approval.requested_by.clone(),
                held_by: approval.held_by.clone(),
                deadline_ms: approval.deadline_ms,
            });
        }
        let mut outcome = self.outcome(tool, CallStatus::AwaitingApproval, &approval.held_by);
        outcome.intent_key = Some(intent.key.clone());
        outcome
    }

    /// The answer to a new intent beyond a budget that refuses: `over_budget`, nothing
    /// recorded or executed.
    pub(crate) fn over_budget(&self, tool: &ToolDefinition, budget: &str) -> CallOutcome {
        self.metrics.over_budget(&tool.name, budget);
        tracing::warn!(tool = %tool.name, budget, "call refused: beyond its budget; nothing executed");
        self.outcome(tool, CallStatus::OverBudget, &format!("budget `{budget}`"))
    }
}

/// The budget charges of a call: each budget's bucket, window and amount.
pub(crate) fn charges(
    policies: &ToolPolicies,
    tenant: &str,
    arguments: &serde_json::Value,
    now_ms: i64,
) -> Result<Vec<BudgetCharge>, String> {
    policies
        .budgets
        .iter()
        .map(|budget| {
            let bucket = budget
                .bucket(tenant, arguments)
                .map_err(|error| error.to_string())?;
            let units = budget.units(arguments).map_err(|error| error.to_string())?;
            let window_start_ms = budget.window_start_ms(now_ms);
            Ok(BudgetCharge {
                budget: budget.name.clone(),
                bucket,
                window_start_ms,
                window_end_ms: window_start_ms.saturating_add(budget.window_ms as i64),
                units,
                count_max: budget.count_max,
                units_max: budget.units_max(),
                hold_deadline_ms: match budget.beyond {
                    BeyondBudget::Refuse => None,
                    BeyondBudget::Approval { deadline_ms } => {
                        Some(now_ms.saturating_add(deadline_ms as i64))
                    }
                },
            })
        })
        .collect()
}

//! Approval and budgets on the call path (docs/design.md section 13).
//!
//! A side-effecting tool's policies ([`ToolPolicies`]) are turned, per call, into what the
//! ledger's `begin` needs ([`CallPolicies`]): whether the approval policy holds the call, and
//! the bucket, window and amount each budget counts it in. The ledger decides and counts in
//! the transaction that creates the intent, so every replica sees the same totals and a
//! repeat never counts twice. A tool without policies builds nothing here and its `begin`
//! reads and writes nothing for them.
//!
//! An approver's decision ([`Gate::decide`]) is recorded by the ledger; an approved intent
//! is then executed by the gateway itself ([`Gate::execute_approved`]), through the same call
//! path as any call (its key, lease, lookup and classification), in a task of its own so that
//! an approver who goes away does not cut it short. What a crash or a switched-off tool
//! leaves approved but not started, the sweeper starts ([`Gate::sweep_approvals`]), as it
//! settles the requests nobody answered by their deadline.
//!
//! The gateway can execute an approved intent only from what the ledger keeps: a tool with
//! sensitive arguments (kept as keyed hashes) and a client-executed tool (run by the
//! caller's code) run an approved intent at its next call instead.

use std::sync::Arc;

use intentgate_core::{BeyondBudget, CallStatus, Executor, ToolDefinition, ToolPolicies};
use intentgate_ledger::{
    Approval, ApprovalFilter, ApprovalState, BudgetCharge, CallPolicies, Decide, Decided, Hold,
    IntentId, IntentRecord,
};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::gate::{CallContext, Gate, GateError};
use crate::outcome::CallOutcome;

/// How many held-intent notices wait for a slow receiver before the oldest is dropped.
pub const HELD_NOTICE_BUFFER: usize = 256;

/// Most approved intents, and most overdue requests, one sweep takes.
pub const APPROVALS_PER_SWEEP: u32 = 100;

/// A call held for approval, announced once when it is held ([`Gate::held_intents`]): the
/// tool's owner is told, with a link to the intent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldNotice {
    pub tool: String,
    pub owner: Option<String>,
    pub intent: IntentId,
    pub tenant: String,
    pub requested_by: String,
    pub held_by: String,
    pub deadline_ms: i64,
}

/// What [`Gate::decide`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionOutcome {
    /// What the ledger recorded.
    pub decided: Decided,
    /// For an approval the gateway executed at once: the call's outcome. `None` when the
    /// intent runs at its next call (sensitive arguments, a client-executed tool), when the
    /// tool is switched off (the sweeper starts it once it is on), or for any other decision.
    pub executed: Option<CallOutcome>,
}

/// What one sweep of approvals did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApprovalSweep {
    /// Requests nobody answered by their deadline, settled `not_executed`.
    pub expired: u32,
    /// Approved intents the sweep started.
    pub executed: u32,
}

/// A held-notice channel with no receiver yet.
pub(crate) fn held_channel() -> broadcast::Sender<HeldNotice> {
    broadcast::channel(HELD_NOTICE_BUFFER).0
}

impl Gate {
    /// Held-intent notices, one per intent held, for the owners' notices.
    pub fn held_intents(&self) -> broadcast::Receiver<HeldNotice> {
        self.held.subscribe()
    }

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
    /// The call that asked announces it ([`Gate::held_intents`]) and counts it.
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

    /// Records an approver's decision on the held intent `id` and, for an approval the
    /// gateway can carry out from what the ledger keeps, executes the intent now (see
    /// [`Gate::execute_approved`]). The approver's tenant and scope are the caller's to check;
    /// the ledger refuses an approver who is the caller that asked ([`Decided::OwnRequest`]).
    ///
    /// The decision runs in an `approval` span (the intent, the decision and who made it),
    /// and the approved intent's execution in a span under it.
    pub async fn decide(
        self: &Arc<Self>,
        id: IntentId,
        approve: bool,
        actor: &str,
        reason: &str,
    ) -> Result<DecisionOutcome, GateError> {
        let span = tracing::info_span!("approval", intent = id, approve, actor = %actor);
        crate::trace::set_attribute(&span, "intentgate.intent", id);
        crate::trace::set_attribute(&span, "intentgate.approval.actor", actor.to_owned());
        let decided = tracing::Instrument::instrument(
            self.decide_in_span(id, approve, actor, reason),
            span.clone(),
        )
        .await;
        if let Ok(outcome) = &decided {
            crate::trace::set_attribute(
                &span,
                "intentgate.approval.decision",
                decided_name(&outcome.decided),
            );
        }
        decided
    }

    async fn decide_in_span(
        self: &Arc<Self>,
        id: IntentId,
        approve: bool,
        actor: &str,
        reason: &str,
    ) -> Result<DecisionOutcome, GateError> {
        let now_ms = self.clock.now_ms();
        let intent = self.ledger.get_by_id(id).await?;
        // The budgets the approved intent counts against, from the arguments as kept (a
        // budget whose argument is kept only as a hash counts nothing it can't read).
        let budgets = match intent.as_ref().and_then(|intent| {
            let tool = self.tool(&intent.tool)?;
            let policies = tool.policies.as_ref()?;
            Some((policies, intent))
        }) {
            Some((policies, intent)) if approve => {
                readable_charges(policies, &intent.tenant, &intent.arguments, now_ms)
            }
            _ => Vec::new(),
        };
        let decided = self
            .ledger
            .decide(Decide {
                id,
                approve,
                actor: actor.to_owned(),
                reason: reason.to_owned(),
                now_ms,
                budgets,
            })
            .await?;
        let executed = match &decided {
            Decided::Approved(intent, approval) => {
                self.metrics.approval(&intent.tool, "approved");
                tracing::info!(tool = %intent.tool, intent = intent.id, actor, "intent approved");
                // Its own task: an approver who goes away does not cancel the execution.
                let gate = self.clone();
                let (intent, approval) = (intent.clone(), approval.clone());
                let execution = async move { gate.execute_approved(&intent, &approval).await };
                match tokio::spawn(tracing::Instrument::in_current_span(execution)).await {
                    Ok(executed) => executed?,
                    Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                    // The runtime is shutting down: the sweeper of a later run starts it.
                    Err(_) => None,
                }
            }
            Decided::Denied(intent, _) => {
                self.metrics.approval(&intent.tool, "denied");
                tracing::info!(tool = %intent.tool, intent = intent.id, actor, "intent denied");
                None
            }
            Decided::Expired(intent, _) => {
                self.metrics.approval(&intent.tool, "expired");
                None
            }
            Decided::OwnRequest(..) | Decided::NotAwaiting(..) => None,
        };
        Ok(DecisionOutcome { decided, executed })
    }

    /// Executes an approved intent that is still `pending`, as the call that asked for it
    /// would have (its arguments as kept, its application intent id), without counting a
    /// call. `Ok(None)` when the gateway can't or mustn't now: a tool it doesn't have, a
    /// client-executed tool, sensitive arguments (the ledger keeps only their hashes), a
    /// tool switched off.
    pub async fn execute_approved(
        &self,
        intent: &IntentRecord,
        approval: &Approval,
    ) -> Result<Option<CallOutcome>, GateError> {
        let Some(tool) = self.tool(&intent.tool) else {
            return Ok(None);
        };
        if tool.executor == Executor::Client || !tool.sensitive.is_empty() {
            return Ok(None);
        }
        if self.is_disabled(&tool.name).await? {
            tracing::info!(tool = %tool.name, intent = intent.id, "approved intent waits: the tool is switched off");
            return Ok(None);
        }
        let context = CallContext {
            tenant: intent.tenant.clone(),
            intent_id: approval.intent_id.clone(),
            explicit_key: None,
            caller: approval.requested_by.clone(),
        };
        let span = tracing::info_span!("approved_call", tool = %tool.name, intent = intent.id);
        let outcome = tracing::Instrument::instrument(
            self.call_approved(tool, intent.arguments.clone(), &context),
            span,
        )
        .await?;
        self.metrics.call(&tool.name, outcome.status);
        Ok(Some(outcome))
    }

    /// Settles the requests for approval whose deadline has passed, and starts the approved
    /// intents nothing has started yet (the approver's execution failed, or the gateway
    /// stopped, or the tool was switched off), at most [`APPROVALS_PER_SWEEP`] of each.
    pub async fn sweep_approvals(&self) -> Result<ApprovalSweep, GateError> {
        let now_ms = self.clock.now_ms();
        let mut sweep = ApprovalSweep::default();
        for held in self
            .ledger
            .expire_approvals(now_ms, APPROVALS_PER_SWEEP)
            .await?
        {
            self.metrics.approval(&held.intent.tool, "expired");
            tracing::info!(
                tool = %held.intent.tool,
                intent = held.intent.id,
                "request for approval expired; the intent is not_executed"
            );
            sweep.expired += 1;
        }
        let filter = ApprovalFilter {
            state: Some(ApprovalState::Approved),
            ..ApprovalFilter::default()
        };
        for held in self
            .ledger
            .approvals(&filter, None, APPROVALS_PER_SWEEP)
            .await?
        {
            if self
                .execute_approved(&held.intent, &held.approval)
                .await?
                .is_some()
            {
                sweep.executed += 1;
            }
        }
        Ok(sweep)
    }
}

/// What a decision came to, as traces and logs name it.
fn decided_name(decided: &Decided) -> &'static str {
    match decided {
        Decided::Approved(..) => "approved",
        Decided::Denied(..) => "denied",
        Decided::Expired(..) => "expired",
        Decided::OwnRequest(..) => "own_request",
        Decided::NotAwaiting(..) => "not_awaiting",
    }
}

/// The approver's reason, for an intent a person denied (the ledger's rejection
/// `{"denied": reason, "by": actor}`); `None` for any other intent.
pub(crate) fn denial_reason(intent: &IntentRecord) -> Option<String> {
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

/// The budget charges of a call: each budget's bucket, window and amount.
fn charges(
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

/// The charges of an approved intent: those its kept arguments can be read for.
fn readable_charges(
    policies: &ToolPolicies,
    tenant: &str,
    arguments: &serde_json::Value,
    now_ms: i64,
) -> Vec<BudgetCharge> {
    policies
        .budgets
        .iter()
        .filter_map(|budget| {
            let one = ToolPolicies {
                approval: None,
                budgets: vec![budget.clone()],
            };
            charges(&one, tenant, arguments, now_ms).ok()?.pop()
        })
        .collect()
}

//! Approval and budgets on the call path (docs/design.md section 13).
//!
//! A side-effecting tool's policies ([`ToolPolicies`]) are turned, per call, into what the
//! ledger's `begin` needs ([`CallPolicies`](intentgate_ledger::CallPolicies), the `policy`
//! submodule): whether the approval policy holds the call, and
//! the bucket, window and amount each budget counts it in. The ledger decides and counts in
//! the transaction that creates the intent, so every replica sees the same totals and a
//! repeat never counts twice. A tool without policies builds nothing here and its `begin`
//! reads and writes nothing for them.
//!
//! An approver's decision ([`Gate::decide`]) is recorded by the ledger; an approved intent
//! is then executed by the gateway itself ([`Gate::execute_approved`]), through the same call
//! path as any call (`Gate::call_approved`, in the `call` module: its key, lease, lookup and
//! classification), in a task of its own so that
//! an approver who goes away does not cut it short. What a crash or a switched-off tool
//! leaves approved but not started, the sweeper starts ([`Gate::sweep_approvals`]), as it
//! settles the requests nobody answered by their deadline.
//!
//! The gateway can execute an approved intent only from what the ledger keeps: a tool with
//! sensitive arguments (kept as keyed hashes) and a client-executed tool (run by the
//! caller's code) run an approved intent at its next call instead.

use std::sync::Arc;

use intentgate_core::{Executor, ToolPolicies};
use intentgate_ledger::{
    Approval, ApprovalFilter, ApprovalState, BudgetCharge, Decide, Decided, IntentId, IntentRecord,
};
use tokio::sync::broadcast;

use crate::context::CallContext;
use crate::error::GateError;
use crate::gate::Gate;
use crate::outcome::CallOutcome;

pub(crate) mod notice;
pub(crate) mod policy;

use self::notice::HeldNotice;
use self::policy::charges;

/// Most approved intents, and most overdue requests, one sweep takes.
pub const APPROVALS_PER_SWEEP: u32 = 100;

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

impl Gate {
    /// Held-intent notices, one per intent held, for the owners' notices.
    pub fn held_intents(&self) -> broadcast::Receiver<HeldNotice> {
        self.held.subscribe()
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

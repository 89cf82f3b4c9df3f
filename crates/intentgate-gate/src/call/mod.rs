//! The call path (docs/design.md section 5), one submodule per phase, each named for it:
//!
//! 1. `validate`: the arguments against the tool's schema, the kill switch, and whether the
//!    upstream can build a request from them;
//! 2. `key`: the intent key and fingerprint, and the binding of the caller's own key;
//! 3. `settled`: a settled repeat, answered from a read;
//! 4. `acquire`: the ledger's `begin` and its wait, which grants the [`Lease`] with
//!    `in_flight` durable (or a lookup lease), or answers;
//! 5. `execute`: under the lease, the request, with its bounded retries;
//! 6. `classify` and `look_up`: what the answer says happened, and a lookup when that is
//!    ambiguous;
//! 7. `record`: the outcome in the ledger, and the answer from what it holds.
//!
//! Reads and idempotent tools skip the ledger (`direct`). [`Gate::call`] reads top-down as
//! these phases; the intent API's grant runs them up to the lease ([`Gate::acquire_intent`]).

pub(crate) mod acquire;
pub(crate) mod classify;
pub(crate) mod direct;
pub(crate) mod execute;
pub(crate) mod key;
pub(crate) mod look_up;
pub(crate) mod record;
pub(crate) mod settled;
pub(crate) mod validate;

use std::sync::Arc;

use intentgate_core::{CallStatus, Effect, Executor, ToolDefinition};
use intentgate_ledger::{BeginRequest, IntentRecord};
use serde_json::Value;
use tracing::Instrument;

use crate::context::CallContext;
use crate::error::GateError;
use crate::gate::{Gate, Tool};
use crate::lease::{self, Lease};
use crate::metrics::STATUS_LEDGER_UNAVAILABLE;
use crate::outcome::CallOutcome;
use crate::resolution::Driver;
use crate::resolve::StepRequest;
use crate::trace;

use self::execute::Attempt;
use self::key::{Keyed, call_intent_id, one_spelling};
use self::settled::{Kept, Read};

/// What the phases before the lease decided ([`Gate::acquire_intent`]).
pub(crate) enum Acquired {
    /// Nothing to run: the answer (invalid key, settled repeat, conflict, still busy).
    Answered(CallOutcome),
    /// This owner holds the lease and the intent is durably `in_flight`.
    Execute {
        /// The lease `begin` granted.
        lease: Lease,
    },
    /// This owner holds the lookup lease of an `unknown` intent whose next step is due.
    Lookup {
        /// The lookup lease `begin` granted.
        lease: Lease,
        /// The last `begin` asked, which a re-send asks again (boxed: the other answers are
        /// smaller).
        request: Box<BeginRequest>,
    },
}

impl Gate {
    /// Runs one tool call. Returns `Err` only for an unknown tool or a ledger that failed
    /// before anything was sent; every outcome of the call itself is a [`CallOutcome`].
    ///
    /// The call runs in a `call` span with the tool, the tenant and (once rendered) the
    /// intent key, so every log line about it carries them.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let span = tracing::info_span!(
            "call",
            tool = %tool,
            key = tracing::field::Empty,
            tenant = %context.tenant
        );
        if trace::enabled() {
            // The GenAI conventions' tool call, and intentgate's own names.
            trace::set_attribute(&span, "gen_ai.operation.name", "execute_tool");
            trace::set_attribute(&span, "gen_ai.tool.name", tool.to_owned());
            trace::set_attribute(&span, "intentgate.tool", tool.to_owned());
            trace::set_attribute(&span, "intentgate.tenant", context.tenant.clone());
            if let Some(intent_id) = &context.intent_id {
                trace::set_attribute(&span, "intentgate.intent_id", intent_id.clone());
            }
        }
        let result = self
            .call_counted(tool, arguments, context)
            .instrument(span.clone())
            .await;
        if trace::enabled() {
            let status = match &result {
                Ok(outcome) => outcome.status.as_str(),
                Err(GateError::Ledger(_)) => STATUS_LEDGER_UNAVAILABLE,
                Err(_) => "error",
            };
            trace::set_attribute(&span, "intentgate.status", status);
        }
        result
    }

    /// [`Gate::call`], counted in `intentgate_calls_total` by its outcome.
    async fn call_counted(
        &self,
        name: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| GateError::UnknownTool(name.to_owned()))?;
        if tool.definition.executor == Executor::Client {
            return Err(GateError::ClientExecuted(name.to_owned()));
        }
        // Checked before the ledger sees it: a malformed tenant is the caller's mistake, not
        // a ledger outage (the schema's length check would fail the write).
        intentgate_core::Tenant::parse(&context.tenant)?;
        let failures_noted = self.ledger_failures_noted();
        let result = self.call_tool(tool, arguments, context).await;
        match &result {
            Ok(outcome) => {
                self.metrics.call(&tool.definition.name, outcome.status);
                // A side effect answered `done` had its `begin` written: the ledger writes
                // again, if that was after the failure. (A repeat answered from a read proves
                // nothing of its writes.)
                if tool.definition.effect == Effect::SideEffect
                    && outcome.status == intentgate_core::CallStatus::Done
                {
                    self.note_ledger(None, failures_noted);
                }
            }
            Err(GateError::Ledger(error)) => {
                self.metrics
                    .call_status(&tool.definition.name, STATUS_LEDGER_UNAVAILABLE);
                self.note_ledger(Some(error), failures_noted);
            }
            Err(_) => {}
        }
        result
    }

    /// The call of a known tool: validated and admitted, then sent directly (a read or an
    /// idempotent tool) or through the ledger (a side effect).
    async fn call_tool(
        &self,
        tool: &Tool,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let definition = &tool.definition;
        trace::set_attribute(
            &tracing::Span::current(),
            "intentgate.effect",
            definition.effect.as_str(),
        );
        let arguments = one_spelling(arguments);
        if let Some(refused) = self.admit(tool, &arguments, context).await? {
            return Ok(refused);
        }
        match definition.effect {
            Effect::Read | Effect::Idempotent => Ok(self.call_direct(definition, &arguments).await),
            Effect::SideEffect => self.call_side_effect(definition, arguments, context).await,
        }
    }

    /// The call path of a side-effecting tool, counted as a call.
    async fn call_side_effect(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        self.run_side_effect(tool, arguments, context, true).await
    }

    /// An approved intent's execution by the gateway (docs/design.md section 13): the call
    /// path of a side effect with the arguments the ledger kept, counting no call.
    pub(crate) async fn call_approved(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        self.run_side_effect(tool, arguments, context, false).await
    }

    /// The phases of a side effect after validation: everything before the lease
    /// ([`Gate::acquire_intent`]), then under it either the attempt (execute, classify, look
    /// up, record: [`Gate::execute`]) or the next step of an `unknown` intent
    /// ([`Gate::advance_unknown`]).
    async fn run_side_effect(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
        count_call: bool,
    ) -> Result<CallOutcome, GateError> {
        let owner = self.lease_owner("");
        // `acquire_intent` answers a call whose intent id can't be told.
        let intent_id = call_intent_id(tool, context).ok().flatten();
        match self
            .acquire_intent(tool, &arguments, context, &owner, count_call)
            .await?
        {
            Acquired::Answered(outcome) => Ok(outcome),
            Acquired::Execute { lease } => Ok(self
                .execute(tool, &arguments, intent_id, lease, Attempt::Call)
                .await),
            Acquired::Lookup { lease, request } => {
                let step = StepRequest {
                    arguments: &arguments,
                    intent_id,
                    driver: Driver::Caller,
                    begin: &request,
                };
                Ok(self.step_for_caller(tool, step, lease).await)
            }
        }
    }

    /// The next step of an unknown intent, due and run within this call.
    async fn step_for_caller(
        &self,
        tool: &ToolDefinition,
        step: StepRequest<'_>,
        lease: Lease,
    ) -> CallOutcome {
        match self.advance_unknown(tool, step, lease).await {
            Ok(step) => step.outcome,
            // The lookup is recorded; only the re-send's `begin` failed, and nothing
            // was re-sent: the intent is as unknown as the lookup left it.
            Err(error) => {
                tracing::warn!(tool = %tool.name, %error, "could not re-send an unknown intent; it stays unknown");
                self.outcome(tool, CallStatus::PendingUnknown, "")
            }
        }
    }

    /// The phases of a side-effecting call before anything is sent, shared by
    /// [`Gate::call`] and the intent API's [`Gate::grant`]: the key and fingerprint, the
    /// settled read (a settled repeat is answered from it), the check that the request can
    /// be built (for a tool the gateway sends), the caller key's binding, and acquire under
    /// `owner`: the lease with `in_flight` durable, or a lookup lease, or the answer of a
    /// settled, conflicting, held or busy intent.
    ///
    /// On a ledger where a read costs a round trip of its own (PostgreSQL), a call that the
    /// settled cache doesn't answer, without policies or a caller key, creates first
    /// instead ([`Gate::creates_first`]): a new intent then costs one round trip, not two.
    pub(crate) async fn acquire_intent(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
        owner: &str,
        count_call: bool,
    ) -> Result<Acquired, GateError> {
        let call_span = tracing::Span::current();
        let mut keyed = match self.key(tool, arguments, context) {
            Ok(keyed) => keyed,
            Err(refused) => return Ok(Acquired::Answered(*refused)),
        };
        let (epoch, unconfirmed) =
            match self.cached_settled(tool, &context.tenant, &mut keyed).await {
                Kept::Settled(intent, call_count) => {
                    return self
                        .settled_repeat(tool, context, &keyed, intent, call_count)
                        .await;
                }
                Kept::Miss(epoch) => (epoch, false),
                Kept::Unconfirmed(epoch) => (epoch, true),
            };
        // Creating first checks first that the request can be built. A repeat kept in
        // memory whose epoch the ledger can't confirm now reads first: most likely settled,
        // it is answered from a read that does not wait for the writer.
        let creates_first =
            !unconfirmed && self.creates_first(tool, arguments, context, &keyed).await;
        let read = if creates_first {
            let request = match self.begin_request(tool, arguments, context, &keyed, None, owner) {
                Ok(request) => BeginRequest {
                    count_call,
                    ..request
                },
                Err(refused) => return Ok(Acquired::Answered(*refused)),
            };
            match self.ledger_create(request.clone()).await? {
                lease::Create::Begun(begun) => {
                    let (begun, request) = self.acquire_from(tool, request, Some(begun)).await?;
                    return Ok(self
                        .acquired(tool, &call_span, begun, request, keyed, count_call)
                        .await);
                }
                lease::Create::Found(intent) => {
                    self.settled_read(tool, &mut keyed, epoch, Some(intent))
                }
            }
        } else {
            self.look_up_settled(tool, &context.tenant, &mut keyed, epoch)
                .await?
        };
        let read = match read {
            Read::Settled(intent, call_count) => {
                return self
                    .settled_repeat(tool, context, &keyed, intent, call_count)
                    .await;
            }
            Read::Open(read) => read.map(|intent| *intent),
        };
        if !creates_first
            && let Some(refused) = self.check_buildable(tool, arguments, context, &keyed)
        {
            return Ok(Acquired::Answered(refused));
        }
        // Bound once the call may become an intent: a call refused above (bad arguments, a
        // request that can't be built) never used its key, which stays free for the caller
        // to send again with arguments that work.
        self.bind_caller_key(tool, context, &keyed).await?;
        let request = match self.begin_request(tool, arguments, context, &keyed, read, owner) {
            Ok(request) => BeginRequest {
                count_call,
                ..request
            },
            Err(refused) => return Ok(Acquired::Answered(*refused)),
        };
        let (begun, request) = self.acquire(tool, request).await?;
        Ok(self
            .acquired(tool, &call_span, begun, request, keyed, count_call)
            .await)
    }

    /// Whether this call creates its intent before reading the key: only where that saves
    /// a round trip ([`Ledger::creates_in_one_round_trip`]), and only where the order can't
    /// change the answer: a tool without policies (whose arguments a settled repeat
    /// doesn't read), a call without a caller key (bound with the fingerprint a read may
    /// correct), and a request the gateway can build (a settled repeat is answered even
    /// when it no longer could be: such a call reads first, as before).
    ///
    /// [`Ledger::creates_in_one_round_trip`]: intentgate_ledger::Ledger::creates_in_one_round_trip
    async fn creates_first(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
        keyed: &Keyed<'_>,
    ) -> bool {
        tool.policies.is_none()
            && context.explicit_key.is_none()
            && self.ledger.creates_in_one_round_trip().await
            && self
                .check_buildable(tool, arguments, context, keyed)
                .is_none()
    }

    /// The answer to a settled repeat found in the cache or by a read: a caller key must
    /// name this intent too.
    async fn settled_repeat(
        &self,
        tool: &ToolDefinition,
        context: &CallContext,
        keyed: &Keyed<'_>,
        intent: Arc<IntentRecord>,
        call_count: u64,
    ) -> Result<Acquired, GateError> {
        self.bind_caller_key(tool, context, keyed).await?;
        Ok(Acquired::Answered(
            self.answer_settled(tool, intent, call_count).await,
        ))
    }
}

//! The acquire phase (docs/design.md section 5, steps 5 to 7): the ledger's `begin` takes
//! the intent's lease and records `in_flight` durably, granting a [`Lease`](crate::lease::Lease) (or a lookup
//! lease, or answering: settled, conflicting, held, over budget). While another caller holds
//! the lease, this one waits for it, bounded, and checks that the holder's process still
//! runs.

use std::time::{Duration, Instant};

use intentgate_core::{CallStatus, ToolDefinition};
use intentgate_ledger::{
    ApprovalRequest, BeginRequest, IntentRecord, LedgerError, ProcessEnd, instance_of,
};
use serde_json::Value;
use tracing::Instrument;

use crate::call::Acquired;
use crate::call::key::Keyed;
use crate::context::CallContext;
use crate::gate::Gate;
use crate::lease::{self, Begun};
use crate::metrics::{LedgerOperation, RepeatedCall};
use crate::options::WAIT_MARGIN;
use crate::outcome::CallOutcome;
use crate::resolution::{Driver, millis};
use crate::trace;

/// Where a waiter stands in its wait for another caller's lease.
struct Wait {
    /// When the wait ends (clock milliseconds): the tool's timeout and [`WAIT_MARGIN`] after
    /// the first `begin`.
    until_ms: i64,
    /// How often the holder's process is checked, and `begin` asked again at the least.
    check_every_ms: i64,
    /// When the holder's process was last checked; `None` before the first check.
    owner_checked_ms: Option<i64>,
    /// Time spent waiting so far, once this call has waited.
    waited: Option<Duration>,
}

impl Gate {
    /// The first `begin` of a call under `owner`, its new intent's policies included, or the
    /// `invalid_arguments` answer when a budget can't read an argument it needs. `read` is
    /// the intent as the settled read found it, if it exists. Not counted as a call: the
    /// caller says whether it is.
    pub(crate) fn begin_request(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
        keyed: &Keyed<'_>,
        read: Option<IntentRecord>,
        owner: &str,
    ) -> Result<BeginRequest, Box<CallOutcome>> {
        let now_ms = self.clock.now_ms();
        let policies = self
            .call_policies(tool, arguments, context, keyed.intent_id, now_ms)
            .map_err(|reason| {
                trace::set_decision("invalid_arguments");
                Box::new(
                    self.outcome(tool, CallStatus::InvalidArguments, &reason)
                        .with_errors(vec![reason]),
                )
            })?;
        Ok(BeginRequest {
            tenant: context.tenant.clone(),
            tool: tool.name.clone(),
            key: keyed.key.clone(),
            fingerprint: keyed.fingerprint.as_str().to_owned(),
            arguments: keyed.stored_arguments.clone().into_owned(),
            lease_owner: owner.to_owned(),
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call: false,
            retry_rejected: tool.retry_rejected,
            // When the intent exists and is unknown, its next step's due time.
            lookup_interval_ms: match &read {
                Some(intent) => self.step_interval_ms(tool, intent, now_ms, Driver::Caller),
                None => millis(self.options.lookup_interval),
            },
            resend_unknown: false,
            expect_new: read.is_none(),
            policies,
        })
    }

    /// Acquire: `begin` takes the intent's lease and records `in_flight` durably (or a lookup
    /// lease, or finds it settled or conflicting). While another caller holds the lease this
    /// caller waits, woken when the holder commits and bounded by the tool's timeout plus
    /// [`WAIT_MARGIN`], and then takes what `begin` answers last (`Busy` when still held).
    /// `request` is the first `begin`; a retry after a wait is not counted as another call.
    /// Returns the last `begin` asked with what it answered.
    ///
    /// A holder that died commits nothing, so the waiter also asks `begin` again at least
    /// every [`GateOptions::owner_check_every`](crate::GateOptions::owner_check_every), and as
    /// often checks the holder's process: found gone on this machine, it is marked dead and
    /// `begin` takes its lease at once (elsewhere its silent heartbeat makes `begin` take it).
    pub(crate) async fn acquire(
        &self,
        tool: &ToolDefinition,
        request: BeginRequest,
    ) -> Result<(Begun, BeginRequest), LedgerError> {
        self.acquire_from(tool, request, None).await
    }

    /// [`Gate::acquire`] after a first `begin` that answered `first`, if one did (a
    /// `create` that began: [`Gate::ledger_create`]).
    pub(crate) async fn acquire_from(
        &self,
        tool: &ToolDefinition,
        mut request: BeginRequest,
        mut first: Option<Begun>,
    ) -> Result<(Begun, BeginRequest), LedgerError> {
        let mut wait = Wait {
            until_ms: request.now_ms + (tool.timeout + WAIT_MARGIN).as_millis() as i64,
            check_every_ms: self.options.owner_check_every.as_millis() as i64,
            owner_checked_ms: None,
            waited: None,
        };
        let begun = loop {
            let begun = match first.take() {
                Some(begun) => begun,
                None => match self.ledger_begin(request.clone()).await {
                    Ok(begun) => begun,
                    Err(error) => break Err(error),
                },
            };
            if request.count_call
                && let Some(intent) = begun.intent()
                && intent.call_count > 1
            {
                self.repeated_call(tool, intent, intent.call_count);
            }
            request.count_call = false;
            // The first `begin` created the intent if it was new.
            request.expect_new = false;
            let Begun::Busy(intent) = &begun else {
                break Ok(begun);
            };
            if !self.wait_for_holder(tool, intent, &mut wait).await {
                break Ok(begun);
            }
            request.now_ms = self.clock.now_ms();
            request.lease_expires_ms = request.now_ms + millis(self.lease_duration(tool));
            // The holder's attempt may leave the intent unknown: its next step is due by
            // the schedule of the attempt count it had.
            request.lookup_interval_ms =
                self.step_interval_ms(tool, intent, request.now_ms, Driver::Caller);
        };
        if let Some(waited) = wait.waited {
            self.metrics.lease_waited(&tool.name, waited);
        }
        begun.map(|begun| (begun, request))
    }

    /// One wait for the holder of `intent`'s lease: until the intent changes, the next check
    /// of the holder's process, or the end of the wait, whichever comes first; a check that
    /// finds the holder gone ends it at once. False when the wait has run out and the call
    /// answers from the ledger as it stands.
    async fn wait_for_holder(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        wait: &mut Wait,
    ) -> bool {
        let remaining_ms = wait.until_ms - self.clock.now_ms();
        if remaining_ms <= 0 {
            return false;
        }
        if wait.waited.is_none() {
            self.metrics.lease_wait_started(&tool.name);
        }
        let started = Instant::now();
        let now_ms = self.clock.now_ms();
        let check_due = wait
            .owner_checked_ms
            .is_none_or(|at| now_ms - at >= wait.check_every_ms);
        if check_due {
            wait.owner_checked_ms = Some(now_ms);
        }
        let lease_wait = crate::phase!("lease_wait", intentgate.intent = intent.id);
        if !(check_due
            && self
                .lease_owner_found_dead(intent)
                .instrument(lease_wait.clone())
                .await)
        {
            let wait_ms = remaining_ms.min(wait.check_every_ms.max(1));
            self.ledger
                .wait_for_change(intent.id, Duration::from_millis(wait_ms as u64))
                .instrument(lease_wait)
                .await;
        }
        *wait.waited.get_or_insert(Duration::ZERO) += started.elapsed();
        true
    }

    /// What the last `begin` decided, for the call path: the lease to act under, or the
    /// answer. A repeat's trace is linked to the call that executed the intent, and the
    /// decision is recorded on the call's span. `counted` is true for a counted call (not the
    /// execution of an approved intent): the one that may have asked for the approval that
    /// holds its intent.
    pub(crate) async fn acquired(
        &self,
        tool: &ToolDefinition,
        call_span: &tracing::Span,
        begun: Begun,
        request: BeginRequest,
        keyed: Keyed<'_>,
        counted: bool,
    ) -> Acquired {
        if let Some(intent) = begun.intent().filter(|intent| intent.call_count > 1) {
            // A repeat: its trace points at the call that executed the intent.
            self.link_to_executing(call_span, intent.id).await;
        }
        trace::set_decision(begun.decision());
        match begun {
            Begun::Execute(lease) => Acquired::Execute { lease },
            Begun::Lookup(lease) => Acquired::Lookup {
                lease,
                request: Box::new(request),
            },
            Begun::Settled(intent) => Acquired::Answered(self.answer_from(tool, &intent)),
            Begun::Conflict(intent) => {
                Acquired::Answered(self.conflict(tool, keyed.key, &intent, &keyed.stored_arguments))
            }
            // Still held when the wait ran out: answer from the ledger as it stands.
            Begun::Busy(intent) => Acquired::Answered(self.answer_from(tool, &intent)),
            Begun::Held(intent, approval, asked) => {
                // The call that asked: its `begin` made the request the ledger stored.
                let asked_now = counted && asked == ApprovalRequest::Made;
                Acquired::Answered(self.held(tool, &intent, &approval, asked_now))
            }
            Begun::OverBudget { budget } => Acquired::Answered(self.over_budget(tool, &budget)),
        }
    }

    /// True when the process holding `intent`'s lease is registered on this machine and no
    /// longer runs ([`crate::process::runs_no_longer`]): it is then marked dead in the
    /// ledger, so that the next `begin` (of any caller, on any replica) takes its leases. A
    /// failure only means waiting on: the silent heartbeat and the lease's expiry still free
    /// the intent.
    async fn lease_owner_found_dead(&self, intent: &IntentRecord) -> bool {
        let Some(instance) = intent.lease_owner.as_deref().and_then(instance_of) else {
            return false;
        };
        if instance == self.options.instance {
            return false;
        }
        let owner = match self.ledger.process(instance).await {
            Ok(Some(owner)) if owner.ended.is_none() => owner,
            Ok(_) => return false,
            Err(error) => {
                tracing::debug!(%error, instance, "could not read the lease owner's process");
                return false;
            }
        };
        if !crate::process::runs_no_longer(&owner) {
            return false;
        }
        let now_ms = self.clock.now_ms();
        match self
            .ledger
            .end_process(instance, ProcessEnd::Dead, now_ms)
            .await
        {
            Ok(_) => {
                tracing::warn!(
                    instance,
                    pid = owner.pid,
                    host = %owner.host,
                    intent = intent.id,
                    "the process holding the lease is gone; marked dead, its leases are taken over"
                );
                true
            }
            Err(error) => {
                tracing::warn!(%error, instance, "could not mark a gone lease owner dead; waiting on");
                false
            }
        }
    }

    /// Counts a call for an intent that already existed and tells the receivers of
    /// [`Gate::repeated_calls`]; `call_count` is the intent's count with this call.
    pub(crate) fn repeated_call(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        call_count: u64,
    ) {
        self.metrics.repeated_call(&tool.name);
        self.repeated_calls.send(&self.metrics, || RepeatedCall {
            tenant: intent.tenant.clone(),
            tool: tool.name.clone(),
            key: intent.key.clone(),
            intent_id: intent.id,
            call_count,
            at_ms: self.clock.now_ms(),
        });
    }

    /// [`Ledger::create`](intentgate_ledger::Ledger::create), timed: the first step of a
    /// call whose key the gate did not read first ([`lease::create`]).
    pub(crate) async fn ledger_create(
        &self,
        request: BeginRequest,
    ) -> Result<lease::Create, LedgerError> {
        let started = Instant::now();
        let created = lease::create(self.ledger.as_ref(), request)
            .instrument(crate::phase!(
                "ledger.create",
                db.operation.name = "create",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Create, started.elapsed());
        created
    }

    /// [`Ledger::begin`](intentgate_ledger::Ledger::begin), timed: the one way the call
    /// path, the resolution of unknown intents, the sweeper and the intent API take a
    /// [`Lease`](crate::lease::Lease) ([`lease::begin`]).
    pub(crate) async fn ledger_begin(&self, request: BeginRequest) -> Result<Begun, LedgerError> {
        let started = Instant::now();
        let begun = lease::begin(self.ledger.as_ref(), request)
            .instrument(crate::phase!(
                "ledger.begin",
                db.operation.name = "begin",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Begin, started.elapsed());
        begun
    }
}

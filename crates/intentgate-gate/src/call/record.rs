//! The record phase (docs/design.md sections 5 and 7): what an attempt or a lookup learned
//! is stored, and the call is answered from what the ledger now holds, the answer every
//! repeat will get. Only `in_flight` must be durable before the request; an outcome written
//! under a lease with time left is answered as soon as its write is queued.

use std::time::Instant;

use intentgate_core::limits::RESULT_BYTES_MAX;
use intentgate_core::{CallStatus, IntentStatus, ToolDefinition, UpstreamObservation};
use intentgate_ledger::{Finish, Finished, IntentRecord, LedgerError};
use serde_json::Value;
use tracing::Instrument;

use crate::answer::body;
use crate::call::execute::Learned;
use crate::error::GateError;
use crate::gate::Gate;
use crate::lease::Lease;
use crate::metrics::LedgerOperation;
use crate::options::QUEUED_FINISH_MIN_LEASE;
use crate::outcome::CallOutcome;
use crate::resolution::millis;

impl Gate {
    /// Records what an attempt under `lease` learned from the upstream's answer
    /// (`observation`: the result of a done or rejected one is kept), and answers from it.
    /// An attempt that was not processed because the gateway is misconfigured says so.
    pub(crate) async fn record_attempt(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        learned: Learned,
        observation: UpstreamObservation,
    ) -> CallOutcome {
        let stored_arguments = &lease.intent().arguments;
        let (result, external_id) = match learned.status {
            IntentStatus::Done => {
                let result = body(observation);
                let external_id = external_id(tool, &result);
                (
                    Some(kept_result(tool, result, stored_arguments)),
                    external_id,
                )
            }
            IntentStatus::Rejected => (
                Some(kept_result(tool, body(observation), stored_arguments)),
                None,
            ),
            _ => (None, None),
        };
        let finish = Finish {
            result,
            external_id,
            ..lease.finish(
                self.clock.now_ms(),
                learned.status,
                "upstream",
                learned.detail,
            )
        };
        let outcome = self.record_queued(tool, lease, finish).await;
        // What this attempt learned is what the ledger holds: say why it was not executed.
        match learned.reason {
            Some(reason) if outcome.status == CallStatus::NotExecuted => {
                outcome.with_reason(tool, reason)
            }
            _ => outcome,
        }
    }

    /// [`Ledger::finish`](intentgate_ledger::Ledger::finish), timed: where an intent's status
    /// changes after `begin`.
    pub(crate) async fn ledger_finish(&self, finish: Finish) -> Result<Finished, LedgerError> {
        // Every status a holder writes was checked against the state machine where it was
        // made ([`crate::lease::check_transition`]); this is where it changes.
        assert!(
            !matches!(
                finish.status,
                IntentStatus::Pending | IntentStatus::InFlight
            ),
            "intent {} was about to be finished as {}",
            finish.id,
            finish.status
        );
        let started = Instant::now();
        let settle = settle_span(&finish);
        let finished = self.ledger.finish(finish).instrument(settle).await;
        self.metrics
            .ledger_operation(LedgerOperation::Finish, started.elapsed());
        finished
    }

    /// Stores an attempt's outcome and answers from what the ledger now holds. If the
    /// ledger write fails the answer still tells the truth this call learned; the intent
    /// stays `in_flight` and is resolved later through the lookup.
    pub(crate) async fn record(&self, tool: &ToolDefinition, finish: Finish) -> CallOutcome {
        let learned = finish.status;
        let key_for_log = finish.id;
        match self.ledger_finish(finish.clone()).await {
            Ok(Finished::Recorded(intent)) => {
                if intent.status == IntentStatus::Unknown {
                    self.metrics.intent_left_unknown(&tool.name);
                }
                self.recorded_answer(tool, &intent, learned)
            }
            Ok(Finished::Superseded(intent)) => {
                tracing::warn!(tool = %tool.name, key = %intent.key, status = %intent.status, "attempt superseded; answering from the ledger");
                self.answer_from(tool, &intent)
            }
            Err(error) => self.unrecorded_answer(tool, key_for_log, &error, finish),
        }
    }

    /// [`Gate::record`] for the outcome of this call's own attempt, under a lease it still
    /// holds for [`QUEUED_FINISH_MIN_LEASE`] or more: answers as soon as the write is
    /// queued, from what the ledger will hold, while the write commits (docs/design.md section 7: only
    /// `in_flight` must be durable before the upstream call; a crash before this commit
    /// leaves the intent `in_flight`, resolved by its lookup). Nobody else can take the
    /// intent while the lease runs, so what the ledger will hold is what this call learned.
    /// Reads through the ledger wait for the queued write ([`Ledger::finish_queued`](intentgate_ledger::Ledger::finish_queued)); a
    /// repeat elsewhere waits on the lease until it commits.
    async fn record_queued(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        finish: Finish,
    ) -> CallOutcome {
        let intent = lease.intent();
        let lease_left_ms = lease.expires_ms() - self.clock.now_ms();
        if lease_left_ms < millis(QUEUED_FINISH_MIN_LEASE) {
            return self.record(tool, finish).await;
        }
        let learned = finish.status;
        match self.queue_finish(&tool.name, intent, finish.clone()).await {
            Ok(settled) => self.recorded_answer(tool, &settled, learned),
            Err(error) => self.unrecorded_answer(tool, intent.id, &error, finish),
        }
    }

    /// Queues `finish` of `intent` ([`Ledger::finish_queued`](intentgate_ledger::Ledger::finish_queued))
    /// and answers the intent as the ledger will hold it once committed, without waiting for
    /// the commit; a task logs what the commit found. The caller holds the intent's lease
    /// for [`QUEUED_FINISH_MIN_LEASE`] or more, so nobody else can change it meanwhile.
    pub(crate) async fn queue_finish(
        &self,
        tool: &str,
        intent: &IntentRecord,
        finish: Finish,
    ) -> Result<IntentRecord, LedgerError> {
        let started = Instant::now();
        let settle = settle_span(&finish);
        let queued = self
            .ledger
            .finish_queued(finish.clone())
            .instrument(settle.clone())
            .await?;
        // As the ledger's finish will leave it (`plan::finish` of the ledger crate).
        let mut settled = intent.clone();
        settled.status = finish.status;
        settled.lease_owner = None;
        settled.lease_expires_ms = None;
        settled.updated_ms = finish.now_ms;
        if matches!(finish.status, IntentStatus::Done | IntentStatus::Rejected) {
            settled.result = finish.result;
            settled.external_id = finish.external_id;
            settled.resolved_by = Some(finish.resolved_by.to_owned());
        }
        // What the commit found is logged where it completes (the ledger's writer): no
        // task of its own, whose spawn would wake another worker on the call's path.
        let (metrics, tool_name, id) = (self.metrics.clone(), tool.to_owned(), intent.id);
        queued.then(move |finished| {
            let _settle = settle.enter();
            match finished {
                Ok(Finished::Recorded(intent)) if intent.status == IntentStatus::Unknown => {
                    metrics.intent_left_unknown(&tool_name)
                }
                Ok(Finished::Recorded(_)) => {}
                Ok(Finished::Superseded(intent)) => {
                    tracing::warn!(tool = %tool_name, key = %intent.key, status = %intent.status, "a queued outcome was superseded; the ledger keeps the later one")
                }
                Err(error) => {
                    tracing::error!(tool = %tool_name, intent = id, %error, "could not record the outcome; the intent stays in flight until looked up")
                }
            }
            metrics.ledger_operation(LedgerOperation::Finish, started.elapsed());
        });
        Ok(settled)
    }

    /// Gives back a lease `begin` granted without sending anything: the intent keeps
    /// `status`, the one it had, and the event log says why.
    pub(crate) async fn release_unused(
        &self,
        lease: Lease,
        status: IntentStatus,
        by: &'static str,
        detail: &str,
    ) -> Result<(), GateError> {
        let finish = lease.finish(self.clock.now_ms(), status, by, detail.to_owned());
        self.ledger_finish(finish).await?;
        Ok(())
    }
}

/// The `settle` phase's span: the write of an attempt's outcome.
fn settle_span(finish: &Finish) -> tracing::Span {
    crate::phase!(
        "settle",
        db.operation.name = "finish",
        db.collection.name = "intents",
        intentgate.status = finish.status.as_str()
    )
}

/// A result as the ledger keeps it: within the ledger's limit, and with the upstream's
/// echoes of sensitive arguments as their keyed hashes. `stored_arguments` are the intent's
/// arguments as the ledger keeps them (hashes in place of sensitive values).
pub(crate) fn kept_result(tool: &ToolDefinition, result: Value, stored_arguments: &Value) -> Value {
    // Bounded first, so that the hashing is bounded too.
    let result = storable(result);
    let redaction = tool
        .redaction()
        .expect("Gate::new checked that a tool with sensitive arguments has a hash key");
    match redaction {
        None => result,
        // Hashes may lengthen it again.
        Some(redaction) => storable(redaction.result(result, stored_arguments)),
    }
}

/// A result the ledger can store: one over the ledger's limit is replaced by a note saying
/// so, rather than failing the write that settles the intent.
fn storable(result: Value) -> Value {
    let bytes = result.to_string().len();
    if bytes <= RESULT_BYTES_MAX {
        return result;
    }
    tracing::warn!(
        bytes,
        limit = RESULT_BYTES_MAX,
        "upstream result too large to store; storing a note instead"
    );
    serde_json::json!({"truncated": true, "bytes": bytes, "note": "the upstream's answer was too large to store"})
}

/// The provider's id of the effect, where the tool's result holds it.
fn external_id(tool: &ToolDefinition, result: &Value) -> Option<String> {
    match result.pointer(&tool.external_id_pointer)? {
        Value::String(id) => Some(id.clone()),
        Value::Number(id) => Some(id.to_string()),
        _ => None,
    }
}

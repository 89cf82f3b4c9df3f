//! The settled read (docs/design.md section 5, step 4): a repeat of an intent that is done,
//! or rejected for good, is answered from one read of the ledger, without a durable write;
//! the call is counted in the background.

use std::time::Instant;

use intentgate_core::{Fingerprint, IntentStatus, ToolDefinition};
use intentgate_ledger::IntentRecord;
use tracing::Instrument;

use crate::call::key::Keyed;
use crate::error::GateError;
use crate::gate::Gate;
use crate::metrics::LedgerOperation;
use crate::outcome::CallOutcome;
use crate::trace;

/// What the call path's first read found.
pub(crate) enum Read {
    /// A settled repeat, to be answered from the read ([`Gate::answer_settled`]).
    Settled(IntentRecord),
    /// Anything else: the intent as read, if it exists, for `begin` to decide on.
    Open(Option<IntentRecord>),
}

impl Gate {
    /// Look up: a repeat of a settled intent (done, or rejected for good) is found by a read,
    /// to be answered from it ([`Gate::answer_settled`]) without a durable write. Any other
    /// call goes on with the intent as read, if it exists.
    ///
    /// An intent recorded before fingerprints gave each value its one spelling has the
    /// older form (of `"20.00"` as written, say). When its stored arguments fingerprint as
    /// this call's do now, it is the same intent: `keyed`'s fingerprint becomes the stored one, so
    /// this read, the caller key's binding and the ledger's `begin` all find them equal, and
    /// a repeat across the upgrade is answered rather than called a conflict.
    pub(crate) async fn look_up_settled(
        &self,
        tool: &ToolDefinition,
        tenant: &str,
        keyed: &mut Keyed<'_>,
    ) -> Result<Read, GateError> {
        let (key, fingerprint) = (keyed.key.as_str(), &mut keyed.fingerprint);
        let started = Instant::now();
        let read = self
            .ledger
            .get(tenant, &tool.name, key)
            .instrument(crate::phase!(
                "ledger.get",
                db.operation.name = "get",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Get, started.elapsed());
        let Some(intent) = read? else {
            return Ok(Read::Open(None));
        };
        if intent.fingerprint != fingerprint.as_str()
            && tool.fingerprint(&intent.arguments) == *fingerprint
        {
            *fingerprint = Fingerprint::from_hex(intent.fingerprint.clone());
        }
        let fingerprint = fingerprint.as_str();
        let settled = intent.status == IntentStatus::Done
            || (intent.status == IntentStatus::Rejected && !tool.retry_rejected);
        if intent.fingerprint != fingerprint || !settled {
            return Ok(Read::Open(Some(intent)));
        }
        Ok(Read::Settled(intent))
    }

    /// The answer to a settled repeat, from the intent as read; the call is still counted,
    /// in the background.
    pub(crate) async fn answer_settled(
        &self,
        tool: &ToolDefinition,
        intent: IntentRecord,
    ) -> CallOutcome {
        trace::set_decision("answer_from_ledger");
        self.link_to_executing(&tracing::Span::current(), intent.id)
            .await;
        // The count the write below will make, unless another repeat's write lands first.
        self.repeated_call(tool, &intent, intent.call_count + 1);
        // Counting the call is bookkeeping: the answer does not wait for its commit.
        let ledger = self.ledger.clone();
        let (id, now_ms, tool_name) = (intent.id, self.clock.now_ms(), tool.name.clone());
        tokio::spawn(
            async move {
                if let Err(error) = ledger.record_call(id, now_ms).await {
                    tracing::warn!(tool = %tool_name, intent = id, %error, "could not count a repeated call");
                }
            }
            .in_current_span(),
        );
        self.answer_from(tool, &intent)
    }
}

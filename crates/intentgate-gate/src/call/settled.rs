//! The settled read (docs/design.md section 5, step 4): a repeat of an intent that is done,
//! or rejected for good, is answered from one read of the ledger, without a durable write;
//! the call is counted in the background.
//!
//! The read itself is saved while nothing settled can have changed: the gate keeps the
//! settled intents it read last ([`SettledCache`], at most [`SETTLED_CACHED_MAX`]), each under
//! the ledger's [`settled_epoch`](intentgate_ledger::Ledger::settled_epoch) taken before it
//! was read, and answers a repeat from memory while the epoch is the same. An erasure,
//! purge or resolution, by this process or another on the same ledger, moves the epoch, so
//! the next repeat reads again and finds the intent as it now is.

use std::collections::HashMap;
use std::sync::Mutex;
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

/// Most settled intents a gate keeps in memory. Bounds the memory (an intent's arguments
/// and result are at most a few KiB each); a repeat of one left out is read, as before.
pub(crate) const SETTLED_CACHED_MAX: usize = 4_096;

/// Settled intents by (tenant, tool, key), each with the ledger epoch it was read under.
#[derive(Default)]
pub(crate) struct SettledCache {
    entries: Mutex<HashMap<(String, String, String), Cached>>,
}

struct Cached {
    epoch: u64,
    intent: IntentRecord,
}

impl SettledCache {
    /// The intent kept for the key under `epoch`, counted as called once more; `None` when
    /// none is kept, or it was kept under another epoch (then it is dropped).
    fn get(&self, tenant: &str, tool: &str, key: &str, epoch: u64) -> Option<IntentRecord> {
        let mut entries = self.entries.lock().ok()?;
        let scope = (tenant.to_owned(), tool.to_owned(), key.to_owned());
        let cached = entries.get_mut(&scope)?;
        if cached.epoch != epoch {
            entries.remove(&scope);
            return None;
        }
        let intent = cached.intent.clone();
        // The count the repeat's own write makes in the ledger, so that the next repeat
        // answered from here counts on from it.
        cached.intent.call_count += 1;
        Some(intent)
    }

    /// Keeps `intent`, read under `epoch` (taken before the read) for a repeat it answers.
    /// When full, first drops what another epoch made stale, then any one intent.
    fn put(&self, epoch: u64, intent: &IntentRecord) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() >= SETTLED_CACHED_MAX {
            entries.retain(|_, cached| cached.epoch == epoch);
        }
        if entries.len() >= SETTLED_CACHED_MAX
            && let Some(scope) = entries.keys().next().cloned()
        {
            entries.remove(&scope);
        }
        let scope = (
            intent.tenant.clone(),
            intent.tool.clone(),
            intent.key.clone(),
        );
        let mut kept = intent.clone();
        // The count once the repeat answered from this read has been counted.
        kept.call_count += 1;
        entries.insert(
            scope,
            Cached {
                epoch,
                intent: kept,
            },
        );
    }
}

/// What the call path's first read found.
pub(crate) enum Read {
    /// A settled repeat, to be answered from the read ([`Gate::answer_settled`]).
    Settled(IntentRecord),
    /// Anything else: the intent as read, if it exists, for `begin` to decide on.
    Open(Option<IntentRecord>),
}

/// `intent`, as read for a call whose fingerprint is `fingerprint`: settled when it is done,
/// or rejected for good, and has this call's fingerprint. A fingerprint of the older form
/// (see [`Gate::look_up_settled`]) becomes the call's when the stored arguments have it now.
fn settled_or_open(
    tool: &ToolDefinition,
    fingerprint: &mut Fingerprint,
    intent: IntentRecord,
) -> Read {
    if intent.fingerprint != fingerprint.as_str()
        && tool.fingerprint(&intent.arguments) == *fingerprint
    {
        *fingerprint = Fingerprint::from_hex(intent.fingerprint.clone());
    }
    let settled = intent.status == IntentStatus::Done
        || (intent.status == IntentStatus::Rejected && !tool.retry_rejected);
    if intent.fingerprint != fingerprint.as_str() || !settled {
        return Read::Open(Some(intent));
    }
    Read::Settled(intent)
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
        // Taken before the read: a change in between leaves the read under an older epoch.
        let epoch = self.ledger.settled_epoch().await;
        if let Some(epoch) = epoch
            && let Some(intent) = self.settled.get(tenant, &tool.name, key, epoch)
            && let Read::Settled(intent) = settled_or_open(tool, fingerprint, intent)
        {
            return Ok(Read::Settled(intent));
        }
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
        let read = settled_or_open(tool, fingerprint, intent);
        if let (Some(epoch), Read::Settled(intent)) = (epoch, &read) {
            self.settled.put(epoch, intent);
        }
        Ok(read)
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

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
//!
//! Each repeat still counts as a call in the ledger (its count, last-seen time and a `call`
//! event), written after the answer and not per repeat: counts wait up to
//! [`REPEATS_LINGER`] in a queue ([`RepeatCounts`]) and one task commits them together, so
//! that a stream of repeats wakes no other thread or task per repeat (which, on two cores,
//! cost the answers more than the write itself).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use intentgate_core::{Fingerprint, IntentStatus, ToolDefinition};
use intentgate_ledger::queue::{Queue, Writing};
use intentgate_ledger::{IntentId, IntentRecord, Ledger};
use tracing::Instrument;

use crate::call::key::Keyed;
use crate::error::GateError;
use crate::gate::Gate;
use crate::metrics::{LedgerOperation, Metrics};
use crate::outcome::CallOutcome;
use crate::trace;

/// Most settled intents a gate keeps in memory. Bounds the memory (an intent's arguments
/// and result are at most a few KiB each); a repeat of one left out is read, as before.
pub(crate) const SETTLED_CACHED_MAX: usize = 4_096;

/// How long a repeat's count waits for others to share its write. Long enough for a steady
/// stream of repeats to share one commit among dozens, short next to anything that reads
/// counts (the console, an audit).
pub(crate) const REPEATS_LINGER: Duration = Duration::from_millis(5);
/// Most counts written in one transaction.
pub(crate) const REPEATS_GROUP_MAX: usize = 1_024;
/// Most counts waiting for their write: past it (a ledger that stopped taking writes for a
/// while, under a storm of repeats), a repeat is still answered, but not counted.
pub(crate) const REPEATS_WAITING_MAX: usize = 65_536;

/// The counts of repeats answered without a write, waiting to be written together.
#[derive(Default)]
pub(crate) struct RepeatCounts {
    queue: Arc<Queue<(IntentId, i64)>>,
    /// Some count was left out since the last write, and that was logged.
    dropping: Arc<AtomicBool>,
}

impl RepeatCounts {
    /// Queues the count of a repeat of `id` at `now_ms`; the first one queued while no
    /// writer runs starts the task that writes them.
    fn push(&self, gate: &Gate, id: IntentId, now_ms: i64) {
        match self.queue.push_within((id, now_ms), REPEATS_WAITING_MAX) {
            Some(true) => {
                tokio::spawn(write_counts(
                    gate.ledger.clone(),
                    gate.metrics.clone(),
                    self.queue.clone(),
                    self.dropping.clone(),
                ));
            }
            Some(false) => {}
            None => {
                if !self.dropping.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        waiting = REPEATS_WAITING_MAX,
                        "repeated calls are answered but no longer counted: their counts wait for a ledger that does not take them"
                    );
                }
            }
        }
    }
}

impl Gate {
    /// Waits until every repeat counted so far has its count written (or its write failed):
    /// a gateway calls it on its clean shutdown, before its runtime stops the task that
    /// writes them.
    pub async fn drain_repeat_counts(&self) {
        while !self.repeat_counts.queue.idle() {
            tokio::time::sleep(REPEATS_LINGER).await;
        }
    }
}

/// Writes the queued counts, a group per [`REPEATS_LINGER`], until none waits.
async fn write_counts(
    ledger: Arc<dyn Ledger>,
    metrics: Arc<Metrics>,
    queue: Arc<Queue<(IntentId, i64)>>,
    dropping: Arc<AtomicBool>,
) {
    let mut writing = Writing::new(&queue);
    loop {
        tokio::time::sleep(REPEATS_LINGER).await;
        let Some(group) = writing.next_group(REPEATS_GROUP_MAX) else {
            return;
        };
        dropping.store(false, Ordering::Relaxed);
        let repeats = group.len();
        let started = Instant::now();
        // An intent erased or purged since its repeat was answered counts for nothing.
        let counted = ledger.record_calls(group).await;
        metrics.ledger_operation(LedgerOperation::RecordCalls, started.elapsed());
        if let Err(error) = counted {
            tracing::warn!(repeats, %error, "could not count repeated calls");
        }
    }
}

/// Settled intents by (tenant, tool, key), each with the ledger epoch it was read under.
/// Looked up by the hash of the three, without building a key, and shared with the answers
/// rather than copied (a result can be a few KiB).
/// The hasher is a parameter only so that a test can make every scope hash alike.
#[derive(Default)]
pub(crate) struct SettledCache<S = RandomState> {
    entries: Mutex<HashMap<u64, Cached>>,
    hasher: S,
}

struct Cached {
    /// The epoch it was read under; `None` when the ledger couldn't tell then: never
    /// answered from, only a sign that the key's next call is most likely a repeat.
    epoch: Option<u64>,
    /// The intent as read.
    intent: Arc<IntentRecord>,
    /// Its count once the repeats answered from here so far are counted.
    call_count: u64,
}

impl<S: BuildHasher> SettledCache<S> {
    fn scope(&self, tenant: &str, tool: &str, key: &str) -> u64 {
        self.hasher.hash_one((tenant, tool, key))
    }

    /// The entry kept for (tenant, tool, key), under whatever epoch: `None` when none is,
    /// or the slot of its hash holds another scope's (another tenant's refund, another
    /// order's), which is never this one's.
    fn entry<'a>(
        &self,
        entries: &'a mut HashMap<u64, Cached>,
        tenant: &str,
        tool: &str,
        key: &str,
    ) -> Option<&'a mut Cached> {
        let cached = entries.get_mut(&self.scope(tenant, tool, key))?;
        let intent = &cached.intent;
        ((
            intent.tenant.as_str(),
            intent.tool.as_str(),
            intent.key.as_str(),
        ) == (tenant, tool, key))
            .then_some(cached)
    }

    /// Whether a settled intent of (tenant, tool, key) is kept, under whatever epoch.
    fn holds(&self, tenant: &str, tool: &str, key: &str) -> bool {
        let Ok(mut entries) = self.entries.lock() else {
            return false;
        };
        self.entry(&mut entries, tenant, tool, key).is_some()
    }

    /// The intent kept for the key under `epoch` and its count before this repeat, which is
    /// counted; `None` when none is kept, or it was kept under another epoch (it stays, for
    /// [`SettledCache::holds`], until a read under the new epoch replaces it or a full cache
    /// drops it).
    fn get(
        &self,
        tenant: &str,
        tool: &str,
        key: &str,
        epoch: u64,
    ) -> Option<(Arc<IntentRecord>, u64)> {
        let mut entries = self.entries.lock().ok()?;
        let cached = self
            .entry(&mut entries, tenant, tool, key)
            .filter(|cached| cached.epoch == Some(epoch))?;
        let call_count = cached.call_count;
        // The count the repeat's own write makes in the ledger, so that the next repeat
        // answered from here counts on from it.
        cached.call_count += 1;
        Some((cached.intent.clone(), call_count))
    }

    /// Keeps `intent`, read under `epoch` (taken before the read; `None` when the ledger
    /// couldn't tell, which [`SettledCache::get`] never answers from). When full, first
    /// drops what an older epoch made stale, then any one intent.
    fn put(&self, epoch: Option<u64>, intent: &Arc<IntentRecord>) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if let Some(epoch) = epoch
            && entries.len() >= SETTLED_CACHED_MAX
        {
            entries.retain(|_, cached| cached.epoch == Some(epoch));
        }
        if entries.len() >= SETTLED_CACHED_MAX
            && let Some(scope) = entries.keys().next().copied()
        {
            entries.remove(&scope);
        }
        let scope = self.scope(&intent.tenant, &intent.tool, &intent.key);
        entries.insert(
            scope,
            Cached {
                epoch,
                intent: intent.clone(),
                // The count once the repeat answered from this read has been counted.
                call_count: intent.call_count + 1,
            },
        );
    }
}

/// What the call path's first read found.
pub(crate) enum Read {
    /// A settled repeat, to be answered from the intent as read ([`Gate::answer_settled`]),
    /// with its count before this call.
    Settled(Arc<IntentRecord>, u64),
    /// Anything else: the intent as read, if it exists, for `begin` to decide on (boxed:
    /// a new intent, the common case, has none).
    Open(Option<Box<IntentRecord>>),
}

/// Whether `intent`, as read for a call whose fingerprint is `fingerprint`, is settled for
/// it: done, or rejected for good, with this call's fingerprint. A fingerprint of the older
/// form (see [`Gate::look_up_settled`]) becomes the call's when the stored arguments have it
/// now.
fn settled_for(
    tool: &ToolDefinition,
    fingerprint: &mut Fingerprint,
    intent: &IntentRecord,
) -> bool {
    if intent.fingerprint != fingerprint.as_str()
        && tool.fingerprint(&intent.arguments) == *fingerprint
    {
        *fingerprint = Fingerprint::from_hex(intent.fingerprint.clone());
    }
    let settled = intent.status == IntentStatus::Done
        || (intent.status == IntentStatus::Rejected && !tool.retry_rejected);
    intent.fingerprint == fingerprint.as_str() && settled
}

/// What the settled cache holds for a call's key.
pub(crate) enum Kept {
    /// A settled repeat, answered from memory, with its count before this call.
    Settled(Arc<IntentRecord>, u64),
    /// Nothing for this key: what a read finds may be kept under this epoch (taken before
    /// the read), when the ledger gives one.
    Miss(Option<u64>),
    /// A settled intent of this key kept here, under an older epoch or one the ledger can't
    /// confirm right now (its writer is committing): most likely a repeat still, so the key
    /// is read (a read does not wait for the writer), not created first (a `create` does).
    /// What the read finds may be kept under this epoch.
    Unconfirmed(Option<u64>),
}

impl Gate {
    /// A repeat of a settled intent (done, or rejected for good) the gate read before and
    /// nothing can have changed since (the ledger's settled epoch is the same): answered
    /// from memory.
    pub(crate) async fn cached_settled(
        &self,
        tool: &ToolDefinition,
        tenant: &str,
        keyed: &mut Keyed<'_>,
    ) -> Kept {
        let (key, fingerprint) = (keyed.key.as_str(), &mut keyed.fingerprint);
        // Taken before the read: a change in between leaves the read under an older epoch.
        let epoch = self.ledger.settled_epoch().await;
        if let Some(now) = epoch
            && let Some((intent, call_count)) = self.settled.get(tenant, &tool.name, key, now)
        {
            if settled_for(tool, fingerprint, &intent) {
                return Kept::Settled(intent, call_count);
            }
            return Kept::Miss(epoch);
        }
        // Kept under an older epoch, or under one the ledger can't confirm now.
        if self.settled.holds(tenant, &tool.name, key) {
            return Kept::Unconfirmed(epoch);
        }
        Kept::Miss(epoch)
    }

    /// Look up: a repeat of a settled intent (done, or rejected for good) is found by a read,
    /// to be answered from it ([`Gate::answer_settled`]) without a durable write. Any other
    /// call goes on with the intent as read, if it exists. `epoch` is what
    /// [`Gate::cached_settled`] missed under.
    pub(crate) async fn look_up_settled(
        &self,
        tool: &ToolDefinition,
        tenant: &str,
        keyed: &mut Keyed<'_>,
        epoch: Option<u64>,
    ) -> Result<Read, GateError> {
        let started = Instant::now();
        let read = self
            .ledger
            .get(tenant, &tool.name, &keyed.key)
            .instrument(crate::phase!(
                "ledger.get",
                db.operation.name = "get",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Get, started.elapsed());
        Ok(self.settled_read(tool, keyed, epoch, read?))
    }

    /// What a read of the key found (by [`Gate::look_up_settled`], or a `create` that found
    /// the key taken): a settled repeat, kept for the next under `epoch`, or the intent for
    /// `begin` to decide on.
    ///
    /// An intent recorded before fingerprints gave each value its one spelling has the
    /// older form (of `"20.00"` as written, say). When its stored arguments fingerprint as
    /// this call's do now, it is the same intent: `keyed`'s fingerprint becomes the stored one, so
    /// this read, the caller key's binding and the ledger's `begin` all find them equal, and
    /// a repeat across the upgrade is answered rather than called a conflict.
    pub(crate) fn settled_read(
        &self,
        tool: &ToolDefinition,
        keyed: &mut Keyed<'_>,
        epoch: Option<u64>,
        read: Option<IntentRecord>,
    ) -> Read {
        let Some(intent) = read else {
            return Read::Open(None);
        };
        if !settled_for(tool, &mut keyed.fingerprint, &intent) {
            return Read::Open(Some(Box::new(intent)));
        }
        let call_count = intent.call_count;
        let intent = Arc::new(intent);
        // Kept under an epoch the ledger couldn't tell too: never answered from then, it
        // has the key's next call read rather than create first.
        self.settled.put(epoch, &intent);
        Read::Settled(intent, call_count)
    }

    /// The answer to a settled repeat, from the intent as read; the call is still counted,
    /// in the background.
    pub(crate) async fn answer_settled(
        &self,
        tool: &ToolDefinition,
        intent: Arc<IntentRecord>,
        call_count: u64,
    ) -> CallOutcome {
        trace::set_decision("answer_from_ledger");
        self.link_to_executing(&tracing::Span::current(), intent.id)
            .await;
        // The count the write below will make, unless another repeat's write lands first.
        self.repeated_call(tool, &intent, call_count + 1);
        // Counting the call is bookkeeping: the answer does not wait for its write.
        self.repeat_counts
            .push(self, intent.id, self.clock.now_ms());
        self.answer_from(tool, &intent)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasherDefault, Hasher};

    use intentgate_core::IntentStatus;
    use serde_json::json;

    use super::*;

    /// Hashes everything to 0: every scope collides with every other.
    #[derive(Default)]
    struct Colliding;

    impl Hasher for Colliding {
        fn finish(&self) -> u64 {
            0
        }

        fn write(&mut self, _bytes: &[u8]) {}
    }

    fn done(id: IntentId, tenant: &str, key: &str) -> Arc<IntentRecord> {
        Arc::new(IntentRecord {
            id,
            tenant: tenant.to_owned(),
            tool: "refund_order".to_owned(),
            key: key.to_owned(),
            fingerprint: "0".repeat(64),
            arguments: json!({}),
            status: IntentStatus::Done,
            attempt: 1,
            epoch: 1,
            lease_owner: None,
            lease_expires_ms: None,
            result: Some(json!({"id": format!("re_{id}")})),
            external_id: Some(format!("re_{id}")),
            resolved_by: None,
            call_count: 1,
            first_seen_ms: 0,
            last_seen_ms: 0,
            updated_ms: 0,
            last_lookup_ms: None,
            resend_stopped: None,
        })
    }

    /// Two scopes whose hashes collide share a slot: a repeat of one is never answered with
    /// the other's record (another tenant's refund, another order's), only read again.
    #[test]
    fn a_scope_whose_hash_collides_with_a_kept_one_is_a_miss() {
        let cache = SettledCache::<BuildHasherDefault<Colliding>>::default();
        cache.put(Some(7), &done(1, "acme", "refund:8812:49.00"));
        assert_eq!(
            cache.get("globex", "refund_order", "refund:8812:49.00", 7),
            None
        );
        assert_eq!(
            cache.get("acme", "refund_order", "refund:9001:49.00", 7),
            None
        );
        let (kept, _) = cache
            .get("acme", "refund_order", "refund:8812:49.00", 7)
            .expect("its own scope is kept");
        assert_eq!(kept.id, 1);

        cache.put(Some(7), &done(2, "globex", "refund:8812:49.00"));
        assert_eq!(
            cache.get("acme", "refund_order", "refund:8812:49.00", 7),
            None
        );
        let (kept, _) = cache
            .get("globex", "refund_order", "refund:8812:49.00", 7)
            .expect("the scope kept last");
        assert_eq!(kept.id, 2);
    }
}

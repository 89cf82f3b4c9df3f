//! Finishes queued but not yet committed, so that a read made after one was queued sees it.
//!
//! [`Ledger::finish_queued`](crate::Ledger::finish_queued) returns before its write commits:
//! the gateway answers the call meanwhile (docs/design.md section 7: only the `in_flight` write must be
//! durable before the upstream call; the ones after it may be batched, because recovery goes
//! through the lookup). Whoever reads the ledger next, through the same ledger object (the
//! admin API, the console, a test, the gateway's own next call), must not see the intent
//! still `in_flight` after its caller was answered. A store registers each queued finish here
//! and its reads wait for them:
//!
//! - a read of one intent waits only when it found the intent `in_flight` and a finish of
//!   it is queued, or was done while it read ([`Queued::closed`], [`Queued::stale`]),
//!   then reads again ([`Queued::settle`] waits);
//! - a read of many ([`Queued::drain`]) waits for every finish queued before it.
//!
//! Another process reading the same ledger (the CLI on the SQLite file, another replica) may
//! see the intent `in_flight` until the commit (a few milliseconds at most, a hold
//! included), under a lease that is still live: a repeat there waits on that lease, as it
//! would for a call still running.
//!
//! A store that holds its queued finishes a moment to commit them together (SQLite's writer
//! thread) is told when someone waits for them ([`Queued::on_hurry`], [`Queued::hurry`]):
//! a waiting read has them committed at once rather than at the end of the hold.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

use intentgate_core::IntentStatus;

use crate::{IntentId, IntentRecord};

/// The finishes a ledger has queued and not yet committed (or failed).
#[derive(Default)]
pub struct Queued {
    state: Mutex<State>,
    /// Woken each time a queued finish is done.
    done: Notify,
    /// Reads (and waits for a lease) under way that a held finish would hold up.
    hurried: AtomicUsize,
    /// Tells the store that holds queued finishes to commit them now.
    on_hurry: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// A wait that wants held finishes committed at once, for as long as it lasts.
pub struct Hurry<'a> {
    queued: &'a Queued,
}

impl Drop for Hurry<'_> {
    fn drop(&mut self) {
        self.queued.hurried.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct State {
    next: u64,
    /// Open finishes by their order of queueing, with the intent each one settles.
    open: BTreeMap<u64, IntentId>,
    /// Finishes done so far.
    closed: u64,
}

impl State {
    fn is_open(&self, id: IntentId) -> bool {
        self.open.values().any(|open| *open == id)
    }
}

/// One queued finish, open until dropped (after its commit succeeded or failed).
pub struct Ticket {
    queued: Arc<Queued>,
    number: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.queued.state.lock().expect("queued finishes lock");
        state.open.remove(&self.number);
        state.closed += 1;
        drop(state);
        self.queued.done.notify_waiters();
    }
}

impl Queued {
    /// Sets what [`Queued::hurry`] calls to have held finishes committed now.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub fn on_hurry(&self, hurry: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_hurry.set(Box::new(hurry));
    }

    /// Marks a wait under way until the guard is dropped, and asks the store to commit
    /// what it holds: counted first, so that a finish queued just after is not held either
    /// ([`Queued::hurried`]).
    pub fn hurry(&self) -> Hurry<'_> {
        self.hurried.fetch_add(1, Ordering::SeqCst);
        if let Some(hurry) = self.on_hurry.get() {
            hurry();
        }
        Hurry { queued: self }
    }

    /// Whether a wait is under way that held finishes would hold up.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub fn hurried(&self) -> bool {
        self.hurried.load(Ordering::SeqCst) > 0
    }

    /// Registers a finish of intent `id` about to be queued.
    pub fn open(self: &Arc<Self>, id: IntentId) -> Ticket {
        let mut state = self.state.lock().expect("queued finishes lock");
        let number = state.next;
        state.next += 1;
        state.open.insert(number, id);
        Ticket {
            queued: self.clone(),
            number,
        }
    }

    /// How many finishes are done so far: a read that found an intent `in_flight` and no
    /// finish of it open compares this with the count taken before it read, since the
    /// finish may have been done in between.
    pub fn closed(&self) -> u64 {
        self.state.lock().expect("queued finishes lock").closed
    }

    /// Whether a finish of intent `id` is queued and not yet committed.
    #[cfg_attr(not(any(test, feature = "sqlite")), allow(dead_code))]
    pub fn is_open(&self, id: IntentId) -> bool {
        self.state.lock().expect("queued finishes lock").is_open(id)
    }

    /// Whether `intent`, read after [`Queued::closed`] returned `closed_before`, may be older
    /// than a queued finish: it is `in_flight` (the only status a queued finish leaves) and a
    /// finish of it is open, or some finish was done while it was read. Read it again after
    /// [`Queued::settle`].
    pub fn stale(&self, intent: &IntentRecord, closed_before: u64) -> bool {
        if intent.status != IntentStatus::InFlight {
            return false;
        }
        let state = self.state.lock().expect("queued finishes lock");
        state.closed != closed_before || state.is_open(intent.id)
    }

    /// Waits until no finish of intent `id` queued before this call is still open.
    pub async fn settle(&self, id: IntentId) {
        self.wait_until(|state, before| state.open.range(..before).all(|(_, open)| *open != id))
            .await
    }

    /// Waits until every finish queued before this call is done.
    pub async fn drain(&self) {
        self.wait_until(|state, before| state.open.range(..before).next().is_none())
            .await
    }

    /// Waits until `done(state, before)` holds, where `before` is the number of the next
    /// finish to be queued when the wait began: finishes queued later never hold it up.
    async fn wait_until(&self, done: impl Fn(&State, u64) -> bool) {
        let before = self.state.lock().expect("queued finishes lock").next;
        let mut hurry = None;
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            // Registered before the check, so that a ticket dropped after it still wakes us.
            notified.as_mut().enable();
            if done(&self.state.lock().expect("queued finishes lock"), before) {
                return;
            }
            // Held finishes are committed at once, and none is held while this waits.
            hurry.get_or_insert_with(|| self.hurry());
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::*;

    /// A read waits for the finish of its own intent, queued before it, and no longer.
    #[tokio::test]
    async fn settle_waits_for_the_intents_own_finish_only() {
        let queued = Arc::new(Queued::default());
        let other = queued.open(2);
        let own = queued.open(1);
        assert!(queued.is_open(1));
        // Intent 3 has nothing queued: no wait, although others are open.
        tokio::time::timeout(Duration::from_secs(1), queued.settle(3))
            .await
            .expect("nothing of intent 3 is queued");
        let waiting = tokio::spawn({
            let queued = queued.clone();
            async move { queued.settle(1).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "the finish of intent 1 is still open"
        );
        drop(own);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken once intent 1's finish is done")
            .unwrap();
        assert!(!queued.is_open(1));
        drop(other);
    }

    /// A read of many waits for every finish queued before it, not for the ones after.
    #[tokio::test]
    async fn drain_waits_for_the_finishes_queued_before_it() {
        let queued = Arc::new(Queued::default());
        let first = queued.open(1);
        let mut waiting = Box::pin({
            let queued = queued.clone();
            async move { queued.drain().await }
        });
        // Its first poll begins the read: it takes the number of the next finish to be
        // queued, so the one opened below comes after it, whenever the task is scheduled.
        let mut context = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut context).is_pending());
        let waiting = tokio::spawn(waiting);
        let later = queued.open(2);
        assert!(!waiting.is_finished(), "the first finish is still open");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("a finish queued after the read does not hold it up")
            .unwrap();
        drop(later);
    }
}

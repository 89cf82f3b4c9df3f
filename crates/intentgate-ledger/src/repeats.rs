//! Repeats answered from memory, counted in groups.
//!
//! A repeat of a settled intent answered without a read still counts the call: the intent's
//! count and last-seen time, and a `call` event. Alone, each count on PostgreSQL is a
//! transaction of two round trips (lock the row, then write), which for repeats arriving
//! one after another costs the server and this process more than answering them did, and
//! competes with the next answers for the same cores. So counts wait here for up to
//! [`REPEATS_LINGER`] and are committed together, one transaction per group, each intent
//! locked once however often it was repeated ([`crate::plan::record_calls`]). Counting is
//! bookkeeping: the answer never waits for it, and the count is not durable on its own
//! either way. (SQLite's writer commits each count as it comes: grouping them there
//! measured no gain.)

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::{IntentId, LedgerError, Result};

/// How long a count waits for others to share its transaction. Long enough for a steady
/// stream of repeats to share one commit among dozens, short next to anything that reads
/// counts (the console, alerts' history, an audit).
pub const REPEATS_LINGER: Duration = Duration::from_millis(5);
/// Most repeats counted in one transaction: bounds one pipeline and its row locks.
pub const REPEATS_GROUP_MAX: usize = 1_024;

/// One repeat to count, and where to answer once its group committed.
pub struct Repeat {
    pub id: IntentId,
    pub now_ms: i64,
    pub answer: oneshot::Sender<Result<()>>,
}

/// Writes queued for a writer task and not yet taken by it: repeats' counts, and on
/// PostgreSQL queued finishes (`postgres/grouped.rs`).
pub struct Queue<E> {
    state: Mutex<State<E>>,
}

impl<E> Default for Queue<E> {
    fn default() -> Queue<E> {
        Queue {
            state: Mutex::new(State {
                waiting: Vec::new(),
                writing: false,
            }),
        }
    }
}

struct State<E> {
    waiting: Vec<E>,
    /// A writer task is running; it takes what waits before it stops.
    writing: bool,
}

impl<E> Queue<E> {
    /// Queues `entry`. True when no writer runs: the caller starts one.
    pub fn push(&self, entry: E) -> bool {
        let mut state = self.state.lock().expect("write queue lock");
        state.waiting.push(entry);
        !std::mem::replace(&mut state.writing, true)
    }

    /// The writer's next group of at most `max`, oldest first; `None` when nothing waits,
    /// and then the writer stops (in the same step, so that an entry queued after it starts
    /// another).
    pub fn next_group(&self, max: usize) -> Option<Vec<E>> {
        let mut state = self.state.lock().expect("write queue lock");
        if state.waiting.is_empty() {
            state.writing = false;
            return None;
        }
        let taken = state.waiting.len().min(max);
        Some(state.waiting.drain(..taken).collect())
    }
}

/// A writer task's hold on a [`Queue`], taking its groups: when the task is dropped before
/// the queue ran dry (its runtime shut down), what still waits is dropped (its callers are
/// told) and the queue is left without a writer, so the next entry starts another one
/// rather than waiting for good.
pub struct Writing<'a, E> {
    queue: &'a Queue<E>,
    dry: bool,
}

impl<'a, E> Writing<'a, E> {
    pub fn new(queue: &'a Queue<E>) -> Writing<'a, E> {
        Writing { queue, dry: false }
    }

    /// [`Queue::next_group`].
    pub fn next_group(&mut self, max: usize) -> Option<Vec<E>> {
        let group = self.queue.next_group(max);
        self.dry = group.is_none();
        group
    }
}

impl<E> Drop for Writing<'_, E> {
    fn drop(&mut self) {
        if self.dry {
            return;
        }
        if let Ok(mut state) = self.queue.state.lock() {
            state.waiting.clear();
            state.writing = false;
        }
    }
}

/// Answers each repeat of `group` from its group's commit: `gone` holds the intents that
/// were no longer there.
pub fn answer(group: Vec<Repeat>, counted: &Result<Vec<IntentId>>) {
    for repeat in group {
        let answer = match counted {
            Ok(gone) if gone.contains(&repeat.id) => Err(LedgerError::NotFound(repeat.id)),
            Ok(_) => Ok(()),
            Err(error) => Err(error.clone()),
        };
        let _ = repeat.answer.send(answer);
    }
}

/// `calls` (`(intent, now_ms)`) by intent, in id order (the order every writer locks them
/// in), each intent's in the order made.
pub fn by_intent(calls: &[(IntentId, i64)]) -> BTreeMap<IntentId, Vec<i64>> {
    let mut by_intent: BTreeMap<IntentId, Vec<i64>> = BTreeMap::new();
    for &(id, now_ms) in calls {
        by_intent.entry(id).or_default().push(now_ms);
    }
    by_intent
}

/// The repeats of `group` as `(intent, now_ms)`, in order.
pub fn calls(group: &[Repeat]) -> Vec<(IntentId, i64)> {
    group
        .iter()
        .map(|repeat| (repeat.id, repeat.now_ms))
        .collect()
}

/// What a caller whose count was dropped unwritten (the ledger closing) is answered.
pub fn dropped() -> LedgerError {
    LedgerError::Storage("the repeat's count was dropped before it was written".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How it hung before: a writer task dropped with its runtime left the queue marked as
    /// written, so no later entry started a writer and its caller waited for good.
    #[test]
    fn a_writer_dropped_before_the_queue_ran_dry_leaves_it_to_the_next() {
        let queue = Queue::default();
        assert!(queue.push(1), "the first entry starts a writer");
        let writing = Writing::new(&queue);
        assert!(!queue.push(2), "a writer runs");
        drop(writing);
        assert!(queue.push(3), "the next entry starts another writer");
        let mut writing = Writing::new(&queue);
        assert_eq!(
            writing.next_group(10),
            Some(vec![3]),
            "what waited was dropped"
        );
        assert_eq!(writing.next_group(10), None);
        drop(writing);
        assert!(queue.push(4), "a writer that ran dry stopped");
        assert!(!queue.push(5));
    }
}

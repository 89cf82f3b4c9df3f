//! A write queue and its one writer task, for writes committed in groups: a PostgreSQL
//! ledger's queued finishes (`postgres/grouped.rs`), and the gate's counts of repeats
//! answered from memory.
//!
//! Whoever queues the first entry while no writer runs starts one; the writer takes what
//! waits, a group at a time, and stops in the same step that finds the queue empty, so an
//! entry queued after that starts the next writer.

use std::sync::Mutex;

/// Writes queued for a writer task and not yet taken by it.
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
        self.push_within(entry, usize::MAX)
            .expect("no queue holds usize::MAX entries")
    }

    /// Queues `entry` unless `max` entries wait already (a writer that stopped taking
    /// them), in one hold of the lock: `None` when full, else as [`Queue::push`].
    pub fn push_within(&self, entry: E, max: usize) -> Option<bool> {
        let mut state = self.state.lock().expect("write queue lock");
        if state.waiting.len() >= max {
            return None;
        }
        state.waiting.push(entry);
        Some(!std::mem::replace(&mut state.writing, true))
    }

    /// Nothing waits and no writer runs: every entry queued so far was written (or failed).
    pub fn idle(&self) -> bool {
        let state = self.state.lock().expect("write queue lock");
        state.waiting.is_empty() && !state.writing
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

    #[test]
    fn a_bounded_push_refuses_an_entry_beyond_its_bound_and_keeps_what_waits() {
        let queue = Queue::default();
        assert_eq!(
            queue.push_within(1, 2),
            Some(true),
            "the first starts a writer"
        );
        assert_eq!(queue.push_within(2, 2), Some(false));
        assert_eq!(queue.push_within(3, 2), None, "two wait: full");
        let mut writing = Writing::new(&queue);
        assert_eq!(writing.next_group(10), Some(vec![1, 2]));
        assert_eq!(queue.push_within(4, 2), Some(false), "taken: room again");
        assert!(!queue.idle(), "one waits");
        assert_eq!(writing.next_group(10), Some(vec![4]));
        assert!(!queue.idle(), "its writer has not stopped yet");
        assert_eq!(writing.next_group(10), None);
        assert!(queue.idle());
    }
}

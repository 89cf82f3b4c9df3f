//! What a queued finish did, handed to whoever asks for it: a task awaiting it, or a
//! function run where the write completes ([`QueuedFinish::then`]).
//!
//! The gateway answers a call once its finish is queued and only wants to know, later, how
//! the write went (to log a superseded outcome or a failure, to time it). Awaiting that in a
//! task of its own cost a spawn per new call, which on two cores wakes the runtime's other
//! worker: about 10 us of CPU on the call path (`perf record` of `bench gateway`). A
//! function handed to the finish runs on the thread that completes the write instead, with
//! no task, spawn or wake.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::{Finished, LedgerError, Result};

/// A function run with what a queued finish did.
type Then = Box<dyn FnOnce(Result<Finished>) + Send>;

/// A finish queued by [`Ledger::finish_queued`](crate::Ledger::finish_queued): resolves to
/// what [`Ledger::finish`](crate::Ledger::finish) would have answered, once the write has
/// committed (or failed). Dropping it leaves the write queued.
pub struct QueuedFinish(Arc<Mutex<Slot>>);

/// Where the store answers a [`QueuedFinish`]; dropped unanswered, it answers
/// [`LedgerError::Closed`].
pub(crate) struct FinishAnswer(Option<Arc<Mutex<Slot>>>);

enum Slot {
    /// Nobody asked yet.
    Empty,
    /// A task awaits it.
    Awaited(Waker),
    /// Run this once it is answered.
    Then(Then),
    /// Answered before anybody took the answer (boxed: an intent is large next to a waker).
    Answered(Box<Result<Finished>>),
    /// The answer was taken.
    Taken,
}

/// A queued finish and where its store answers it.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn queued_finish() -> (FinishAnswer, QueuedFinish) {
    let slot = Arc::new(Mutex::new(Slot::Empty));
    (FinishAnswer(Some(slot.clone())), QueuedFinish(slot))
}

impl QueuedFinish {
    /// Runs `then` with what the finish did once it is done, on the thread that completes
    /// it (the ledger's writer, or here at once when it is done already). `then` may run
    /// while the ledger holds its write connection: it must be quick and must not call the
    /// ledger or wait.
    pub fn then(self, then: impl FnOnce(Result<Finished>) + Send + 'static) {
        let mut slot = self.0.lock().expect("queued finish lock");
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Answered(result) => {
                drop(slot);
                then(*result);
            }
            Slot::Taken => {}
            Slot::Empty | Slot::Awaited(_) | Slot::Then(_) => *slot = Slot::Then(Box::new(then)),
        }
    }
}

impl Future for QueuedFinish {
    type Output = Result<Finished>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Result<Finished>> {
        let mut slot = self.0.lock().expect("queued finish lock");
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Answered(result) => Poll::Ready(*result),
            Slot::Taken => Poll::Ready(Err(LedgerError::Closed)),
            Slot::Empty | Slot::Awaited(_) | Slot::Then(_) => {
                *slot = Slot::Awaited(context.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
impl FinishAnswer {
    /// Answers the finish: runs its function, wakes the task awaiting it, or keeps the
    /// answer for whoever asks.
    pub fn send(mut self, result: Result<Finished>) {
        if let Some(slot) = self.0.take() {
            answer(&slot, result);
        }
    }
}

impl Drop for FinishAnswer {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            answer(&slot, Err(LedgerError::Closed));
        }
    }
}

fn answer(slot: &Mutex<Slot>, result: Result<Finished>) {
    let mut slot = slot.lock().expect("queued finish lock");
    match std::mem::replace(&mut *slot, Slot::Taken) {
        Slot::Then(then) => {
            drop(slot);
            then(result);
        }
        Slot::Awaited(waker) => {
            *slot = Slot::Answered(Box::new(result));
            drop(slot);
            waker.wake();
        }
        Slot::Empty => *slot = Slot::Answered(Box::new(result)),
        // Answered once already: the first answer stands.
        Slot::Answered(first) => *slot = Slot::Answered(first),
        Slot::Taken => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn finished() -> Result<Finished> {
        Err(LedgerError::NotFound(7))
    }

    /// A function handed over before the answer runs where the answer is sent; one handed
    /// over after it runs at once.
    #[test]
    fn then_runs_where_the_answer_is_sent_or_at_once() {
        let (answer, queued) = queued_finish();
        let (ran, runs) = mpsc::channel();
        queued.then(move |result| ran.send(result.is_err()).unwrap());
        assert!(runs.try_recv().is_err(), "ran before the answer");
        std::thread::spawn(move || answer.send(finished()))
            .join()
            .unwrap();
        assert!(runs.try_recv().unwrap());

        let (answer, queued) = queued_finish();
        answer.send(finished());
        let (ran, runs) = mpsc::channel();
        queued.then(move |result| ran.send(result.is_err()).unwrap());
        assert!(runs.try_recv().unwrap());
    }

    /// An awaited finish resolves to its answer; one whose store dropped it unanswered (the
    /// ledger closed) resolves to `Closed`, and so does its function.
    #[tokio::test]
    async fn an_unanswered_finish_is_closed() {
        let (answer, queued) = queued_finish();
        let waiting = tokio::spawn(queued);
        tokio::task::yield_now().await;
        answer.send(finished());
        assert!(matches!(
            waiting.await.unwrap(),
            Err(LedgerError::NotFound(_))
        ));

        let (answer, queued) = queued_finish();
        drop(answer);
        assert!(matches!(queued.await, Err(LedgerError::Closed)));

        let (answer, queued) = queued_finish();
        let (ran, runs) = mpsc::channel();
        queued.then(move |result| {
            ran.send(matches!(result, Err(LedgerError::Closed)))
                .unwrap()
        });
        drop(answer);
        assert!(runs.try_recv().unwrap());
    }
}

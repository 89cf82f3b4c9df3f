//! Finishes queued by `finish_queued`, committed in groups.
//!
//! Each queued finish waits here; one writer task at a time takes all that wait (up to
//! [`GROUP_MAX`]) and commits them together: those of intents this ledger just began, as it
//! wrote them ([`super::known`]), in one transaction sent in one round trip, each write
//! guarded by the version of its row. Under concurrency the finishes that queue while one
//! group commits make the next group, so the commits, and the round trips, are shared, as
//! SQLite's single writer shares its transactions. A finish whose row had changed, or whose
//! intent this ledger does not know, is run alone afterwards, reading and locking its row.
//! The writer stops when nothing waits, and the next finish queued starts another.

use crate::queue::Queue;
use crate::queued::Ticket;
use crate::queued_finish::FinishAnswer;
use crate::{Finish, Finished, Result};

/// Most finishes committed in one transaction. Each is a small guarded update and its
/// events; this bounds one pipeline's size and the time its row locks are held.
pub const GROUP_MAX: usize = 128;

/// A queued finish: what to write, where to answer, and its registration with the reads
/// that wait for queued finishes (kept until answered).
pub struct Entry {
    pub finish: Finish,
    pub answer: FinishAnswer,
    pub ticket: Ticket,
}

impl Entry {
    /// Answers the caller, and closes the finish for the reads waiting on it.
    pub fn answer(self, result: Result<Finished>) {
        let Entry { answer, ticket, .. } = self;
        answer.send(result);
        drop(ticket);
    }
}

/// The queued finishes.
pub type Grouped = Queue<Entry>;

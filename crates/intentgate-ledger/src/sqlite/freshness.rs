//! Whether a settled intent read earlier may have changed since: the SQLite side of
//! [`Ledger::settled_epoch`](crate::Ledger::settled_epoch).
//!
//! Two kinds of writes can change or delete an intent that was settled: this ledger's own
//! (an erasure, a purge, a resolution by hand), which bump the epoch once they have
//! committed, and any other connection's, from another process on the same file (the CLI's
//! `erase` or `purge`, another gateway). SQLite tells the second kind apart cheaply:
//! `PRAGMA data_version` on a connection changes when another connection has committed
//! since, and never for the connection's own commits. Asked on the write connection, the
//! only one of this ledger that writes, it changes for the other processes' commits alone,
//! so the repeats answered meanwhile (and the counts they write) keep the epoch as it is.
//!
//! The pragma needs the write connection, which the writer holds while it commits a batch:
//! the check never waits for it, and answers "can't tell" instead, so the caller reads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Writer;

/// The epoch of one SQLite ledger: bumped by its own writes that may change a settled
/// intent, and by every commit of another connection seen on the write connection.
#[derive(Debug, Default)]
pub(super) struct Freshness {
    epoch: AtomicU64,
    /// The write connection's `data_version` when last asked; `None` before the first time.
    data_version: Mutex<Option<i64>>,
}

impl Freshness {
    /// After a write of this ledger that may have changed or deleted a settled intent has
    /// committed (or failed: a bump is never wrong, only a read more).
    pub(super) fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// The epoch now, once any commit of another connection since the last call has bumped
    /// it; `None` while the writer holds the write connection (or the pragma failed).
    ///
    /// A caller takes the epoch before it reads an intent and keeps what it read under that
    /// epoch: a change between the two leaves a newer read under an older epoch, which the
    /// next call finds stale, never the reverse.
    pub(super) fn epoch(&self, writer: &Mutex<Writer>) -> Option<u64> {
        let writer = writer.try_lock().ok()?;
        let version: i64 = writer
            .connection
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .ok()?;
        let mut seen = self.data_version.lock().ok()?;
        if *seen != Some(version) {
            // The first call bumps too: nothing was kept under the epoch before it anyway.
            self.epoch.fetch_add(1, Ordering::SeqCst);
            *seen = Some(version);
        }
        Some(self.epoch.load(Ordering::SeqCst))
    }
}

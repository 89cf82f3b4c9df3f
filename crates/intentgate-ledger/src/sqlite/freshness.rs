//! Whether a settled intent read earlier may have changed since: the SQLite side of
//! [`Ledger::settled_epoch`](crate::Ledger::settled_epoch).
//!
//! Two kinds of writes can change or delete an intent that was settled: this ledger's own
//! (an erasure, a purge, a resolution by hand), which bump the epoch once they have
//! committed, and any other connection's, from another process on the same file (the CLI's
//! `erase` or `purge`, another gateway), which bump it when the next check sees them.
//!
//! The check reads the commit counter of the WAL index (`iChange` in its header, which
//! every commit to the file increments by one, whichever process makes it:
//! <https://sqlite.org/walformat.html>), from the shared memory the write connection
//! already maps, through SQLite's own VFS (`xShmMap`): a load from memory, where `PRAGMA
//! data_version` opened a read transaction with its file locks, about 6 us of a repeat's
//! 65 us beyond a bare HTTP round trip. The ledger knows the counter as it last saw it:
//! after each check, and after each of its own commits, whose writer reads it once the
//! transaction holds the write lock (so that a commit of another process just before is
//! seen, and bumps) and adds the one its own commit makes, when it wrote anything (the WAL
//! hook tells: SQLite calls it only for a commit that wrote frames; a transaction whose
//! writes only read, such as a `create` that finds its key taken, moves nothing). A different
//! counter at the next check is another connection's commit. Anything it can't account for
//! (a commit of the ledger's own outside the writer) also reads as a change: a bump is never
//! wrong, only a read more.
//!
//! The counter needs the write connection, which the writer holds while it commits a batch.
//! The check never waits for it. While the writer runs a batch's writes inside a transaction
//! that holds the file's write lock, taken after its look at the counter, no other
//! connection can commit (SQLite lets one writer at a time into a WAL file): the epoch is
//! the one that look confirmed, and the check answers it. From its `COMMIT` on (under strict
//! durability, its fsync) until the writer lets go of the connection, and from the end of
//! a write of the batch that failed (SQLite may have rolled the whole transaction back on an
//! I/O error, which lets go of the lock), it answers "can't tell" instead, so the caller
//! reads. The writer answers a batch only once it has let go of the connection: a caller it
//! answers, repeating its call at once, finds the epoch told.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use rusqlite::{Connection, ffi};

use super::Writer;

/// The size of a WAL-index region, as SQLite maps them (`WALINDEX_PGSZ`).
const WAL_INDEX_REGION_BYTES: c_int = 32_768;
/// Where the commit counter sits in the first copy of the WAL-index header.
const COMMIT_COUNTER_OFFSET: usize = 8;

/// The epoch of one SQLite ledger: bumped by its own writes that may change a settled
/// intent, and by every commit of another connection seen in the WAL index.
#[derive(Debug, Default)]
pub(super) struct Freshness {
    epoch: AtomicU64,
    /// The WAL index's commit counter as this ledger last knew it; `None` before the first
    /// check.
    commits_seen: Mutex<Option<u32>>,
    /// The writer is running writes in a transaction that holds the write lock, taken
    /// after it saw the counter ([`Freshness::writing`]).
    writing: AtomicBool,
}

impl Freshness {
    /// After a write of this ledger that may have changed or deleted a settled intent has
    /// committed (or failed: a bump is never wrong, only a read more).
    pub(super) fn changed(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// The epoch now, once any commit of another connection since the last look has bumped
    /// it; `None` while the writer holds the write connection (or the counter can't be
    /// read).
    ///
    /// A caller takes the epoch before it reads an intent and keeps what it read under that
    /// epoch: a change between the two leaves a newer read under an older epoch, which the
    /// next call finds stale, never the reverse.
    ///
    /// While the writer holds the connection, the epoch is told only as long as it runs
    /// writes under the write lock ([`Freshness::writing`]): no other connection's commit
    /// can have come since its look at the counter. A caller that reads after this answer
    /// may find a commit made once the writer let go: the newer read stays under the older
    /// epoch, as above.
    pub(super) fn epoch(&self, writer: &Mutex<Writer>) -> Option<u64> {
        let Ok(writer) = writer.try_lock() else {
            return self
                .writing
                .load(Ordering::SeqCst)
                .then(|| self.epoch.load(Ordering::SeqCst));
        };
        let counter = commit_counter(&writer.connection)?;
        self.saw(counter);
        Some(self.epoch.load(Ordering::SeqCst))
    }

    /// Called by the writer once [`Freshness::before_own_commit`] has seen the counter
    /// inside a transaction that holds the write lock: until the answer is dropped, which
    /// the writer does before its `COMMIT` or `ROLLBACK` and once a write of the batch has
    /// failed, [`Freshness::epoch`] answers without the connection.
    pub(super) fn writing(&self) -> Writing<'_> {
        self.writing.store(true, Ordering::SeqCst);
        Writing(self)
    }

    /// Called by the writer once its transaction holds the write lock, before it writes:
    /// the counter then stands still until its commit. Answers it, for
    /// [`Freshness::committed`].
    pub(super) fn before_own_commit(&self, connection: &Connection) -> Option<u32> {
        let counter = commit_counter(connection)?;
        self.saw(counter);
        Some(counter)
    }

    /// After the writer's commit, begun when the counter was `before`: its own commit is the
    /// one the counter moved by, unless `wrote` says that it wrote nothing (then the counter
    /// did not move). Unknown (`None`), it is taken to have written: a commit that did not
    /// then reads as a change at the next check, a read more, never a change missed, unless
    /// another connection commits exactly once in between.
    pub(super) fn committed(&self, before: Option<u32>, wrote: Option<bool>) {
        if let (Some(before), Ok(mut seen)) = (before, self.commits_seen.lock()) {
            let own = u32::from(wrote != Some(false));
            *seen = Some(before.wrapping_add(own));
        }
    }

    /// Bumps the epoch when `counter` is not the one last known (the first look bumps too:
    /// nothing was kept under the epoch before it anyway).
    fn saw(&self, counter: u32) {
        let Ok(mut seen) = self.commits_seen.lock() else {
            self.changed();
            return;
        };
        if *seen != Some(counter) {
            self.epoch.fetch_add(1, Ordering::SeqCst);
            *seen = Some(counter);
        }
    }
}

/// The writer's writes under the write lock ([`Freshness::writing`]); they end when it is
/// dropped, whatever ends them (a panic too).
pub(super) struct Writing<'f>(&'f Freshness);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.writing.store(false, Ordering::SeqCst);
    }
}

/// The commit counter of the WAL index of `connection`'s main database, read from the
/// shared memory SQLite maps for it; `None` where there is none (not in WAL mode, a VFS
/// without shared memory, the index not mapped yet).
///
/// The caller holds `connection` (no other thread runs SQLite on it meanwhile). Another
/// process may be writing the header as it is read: the counter is one aligned 32-bit word,
/// read atomically, so the answer is the count before or after that commit.
fn commit_counter(connection: &Connection) -> Option<u32> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `handle` is the open connection's, used on this thread only while the caller
    // holds the connection; `SQLITE_FCNTL_FILE_POINTER` writes the main database's
    // `sqlite3_file` pointer, owned by the connection, into `file`.
    let found = unsafe {
        ffi::sqlite3_file_control(
            connection.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast::<c_void>(),
        )
    };
    if found != ffi::SQLITE_OK || file.is_null() {
        return None;
    }
    // SAFETY: `file` is the connection's open database file; its methods are the VFS's.
    // `xShmMap` (io methods version 2 and later) of region 0 without extending answers the
    // region SQLite already maps for the WAL index (or null when there is none); the mapping
    // lives as long as the connection's shared memory, which the caller's hold on the
    // connection keeps open while the word is read.
    unsafe {
        let methods = (*file).pMethods;
        if methods.is_null() || (*methods).iVersion < 2 {
            return None;
        }
        let map = (*methods).xShmMap?;
        let mut region: *mut c_void = std::ptr::null_mut();
        let mapped = map(file, 0, WAL_INDEX_REGION_BYTES, 0, &raw mut region);
        if mapped != ffi::SQLITE_OK || region.is_null() {
            return None;
        }
        let counter = region.cast::<u8>().add(COMMIT_COUNTER_OFFSET).cast::<u32>();
        Some(AtomicU32::from_ptr(counter).load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wal_connection(path: &std::path::Path) -> Connection {
        let connection = Connection::open(path).unwrap();
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .unwrap();
        connection
    }

    /// The counter is SQLite's, moved by one for each commit of any connection to the file,
    /// and by nothing else (a read, a checkpoint, a transaction rolled back).
    #[test]
    fn the_commit_counter_moves_by_one_for_each_commit_of_any_connection() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("counter.db");
        let one = wal_connection(&path);
        one.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let other = wal_connection(&path);
        let start = commit_counter(&one).expect("a WAL ledger has a commit counter");

        one.execute("INSERT INTO t VALUES (1)", []).unwrap();
        assert_eq!(commit_counter(&one), Some(start.wrapping_add(1)));
        other.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert_eq!(
            commit_counter(&one),
            Some(start.wrapping_add(2)),
            "another connection's commit is seen without a read"
        );
        let _: i64 = one
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        other
            .execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (3); ROLLBACK")
            .unwrap();
        other
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        assert_eq!(commit_counter(&one), Some(start.wrapping_add(2)));
        one.execute("INSERT INTO t VALUES (4)", []).unwrap();
        assert_eq!(
            commit_counter(&other),
            Some(start.wrapping_add(3)),
            "counted on after the WAL restarted"
        );
    }

    #[test]
    fn a_database_not_in_wal_mode_has_no_commit_counter() {
        let folder = tempfile::tempdir().unwrap();
        let connection = Connection::open(folder.path().join("rollback.db")).unwrap();
        connection.execute_batch("CREATE TABLE t (x)").unwrap();
        assert_eq!(commit_counter(&connection), None);
    }
}

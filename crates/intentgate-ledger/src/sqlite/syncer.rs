//! The fsync of a strict batch, beside the writer instead of inside its commit.
//!
//! Under strict durability a `begin` is answered only once its record is on disk. Committed
//! with `synchronous = FULL`, the writer thread would wait for the WAL's fsync inside every
//! such commit, and under load the next batch would wait behind it: measured on two cores,
//! strict durability made a quarter fewer new intents per second than relaxed. A batch the
//! writer thread commits is therefore committed with `NORMAL` (its frames written, no fsync)
//! and its durable writes wait for an fsync of the WAL file that begins after the commit (the
//! WAL is written in order, so that fsync covers everything committed before it). While more
//! writes are queued, the writer hands them, with their answers, to this thread and commits
//! the next batch at once; this thread fsyncs once for every batch handed to it meanwhile,
//! then answers their callers. When nothing is queued, the writer fsyncs itself, still
//! holding the connection, as a commit with `synchronous = FULL` would: what arrives
//! meanwhile queues up for the next batch. It answers them once it has let go.
//!
//! Handing every batch over, queue or not, was tried and measured: new intents per second in
//! `bench ledger` (64 callers, strict) rose by 15% over the writer before, but calls through
//! `serve` (`bench gateway`, 64 callers) fell by 14%, the writer committing many small
//! batches on cores the HTTP server needs. Handing over only behind a queue kept the second
//! level and gained 6% on the first (docs/benchmarks.md).
//!
//! The commit is visible to readers before it is on disk. Nobody is told it happened before
//! the fsync: a repeat of the same key asks `begin`, whose own answer waits for a later fsync.
//!
//! **A failed fsync.** The batch is committed and cannot be taken back, yet its callers must
//! not be told their intent is in flight, and a `begin` whose caller is told "nothing was
//! sent" must not leave behind an attempt the sweeper would later look up and send. So each
//! durable write hands over, with its answer, how to undo what it started: a `begin` that
//! granted an attempt records that attempt as never sent (`not_executed`, or `unknown` again
//! for the re-send of an unknown intent). The undos are committed as one write on the writer's
//! connection, and only then are the callers answered with the error. Like the overwrite of a
//! failed commit's frames (`forget_failed_commit`), this holds for a process that dies and the
//! one that opens the file next, not for a machine that loses its page cache.
//!
//! Writes of other kinds that must be durable (a kill switch, an approver's decision, a
//! console session) are rare and have no undo: a batch holding one commits with `FULL`, as
//! does any write committed on its caller's thread (a lone call on an idle ledger, where an
//! extra thread hop would only add to its latency).

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::{CommitCounts, Completion, Durable, Kind, Queued, Ran, Scope, Writer};
use crate::{LedgerError, Result};

/// How to undo a durable write whose fsync failed, on the writer's connection.
pub(super) type Undo = Box<dyn FnOnce(&Connection) -> Result<()> + Send>;

/// A durable write committed and waiting for the fsync: its answer, and its undo.
pub(super) struct Waiting {
    pub completion: Completion,
    pub undo: Option<Undo>,
}

/// The durable writes of one committed batch.
pub(super) type Group = Vec<Waiting>;

/// The syncer thread, stopped when dropped (once it has answered every batch handed to it).
pub(super) struct Syncer {
    groups: Option<Sender<Group>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the thread for the ledger file at `path`; `writer` commits the undos of a
    /// failed fsync.
    pub fn start(
        path: &Path,
        writer: Weak<Mutex<Writer>>,
        counts: Arc<CommitCounts>,
        #[cfg(test)] hooks: Arc<TestHooks>,
    ) -> Result<Syncer> {
        let (groups, receiver) = channel();
        let mut wal = Wal::new(
            path,
            #[cfg(test)]
            hooks,
        );
        let thread = std::thread::Builder::new()
            .name("intentgate-ledger-sync".into())
            .spawn(move || sync_loop(&mut wal, &receiver, &writer, &counts))
            .map_err(|error| {
                LedgerError::Storage(format!("can't start the ledger's fsync thread: {error}"))
            })?;
        Ok(Syncer {
            groups: Some(groups),
            thread: Some(thread),
        })
    }

    /// Hands a committed batch's durable writes over; gives them back if the thread is gone.
    pub fn hand(&self, group: Group) -> std::result::Result<(), Group> {
        match &self.groups {
            Some(groups) => groups.send(group).map_err(|refused| refused.0),
            None => Err(group),
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.groups.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The syncer thread: one fsync for every batch handed over since the last, then their
/// answers.
fn sync_loop(
    wal: &mut Wal,
    receiver: &Receiver<Group>,
    writer: &Weak<Mutex<Writer>>,
    counts: &CommitCounts,
) {
    while let Ok(first) = receiver.recv() {
        let mut groups = vec![first];
        groups.extend(receiver.try_iter());
        settle(wal, groups, counts, |queued| match writer.upgrade() {
            Some(writer) => super::commit_alone(&writer, queued),
            // The writer is gone: so is the connection the undos would need.
            None => queued.fail(LedgerError::Closed),
        });
    }
}

/// Fsyncs the WAL for `groups` (batches committed before the call), then answers them; should
/// the fsync fail, has `commit` commit their undos, which answers them with the error.
pub(super) fn settle(
    wal: &mut Wal,
    groups: Vec<Group>,
    counts: &CommitCounts,
    commit: impl FnOnce(Queued),
) {
    let synced = wal.sync();
    settled(synced, wal, groups, counts, commit);
}

/// Answers `groups` after the fsync of `wal` made for them (`synced`), as [`settle`] does.
pub(super) fn settled(
    synced: io::Result<()>,
    wal: &Wal,
    groups: Vec<Group>,
    counts: &CommitCounts,
    commit: impl FnOnce(Queued),
) {
    match synced {
        Ok(()) => {
            counts
                .durable_commits
                .fetch_add(groups.len() as u64, Ordering::Relaxed);
            for waiting in groups.into_iter().flatten() {
                (waiting.completion)(Ok(()));
            }
        }
        Err(error) => {
            let error = LedgerError::Storage(format!(
                "fsync failed on the ledger's WAL ({}): {error}; the writes it was to make \
                 durable were undone and nothing was sent for them (check the disk and the \
                 kernel log)",
                wal.path.display()
            ));
            tracing::error!(%error, "a strict commit could not be made durable");
            commit(undo_job(groups.into_iter().flatten().collect(), error));
        }
    }
}

/// One write that commits the undos of `waiting` and then answers each with `error`.
pub(super) fn undo_job(waiting: Vec<Waiting>, error: LedgerError) -> Queued {
    let (undos, completions): (Vec<_>, Vec<_>) = waiting
        .into_iter()
        .map(|waiting| (waiting.undo, waiting.completion))
        .unzip();
    let undos: Vec<Undo> = undos.into_iter().flatten().collect();
    let answer = move |completions: Vec<Completion>| {
        for completion in completions {
            completion(Err(error.clone()));
        }
    };
    let job = Box::new(move |connection: Result<&Connection>, _scope: Scope| {
        // Each in a savepoint of its own: one that fails is rolled back alone, and the
        // others commit.
        let succeeded = connection.is_ok();
        let failed: Vec<LedgerError> = match connection {
            Ok(connection) => undos
                .into_iter()
                .filter_map(|undo| super::in_savepoint(connection, undo).err())
                .collect(),
            Err(error) => vec![error],
        };
        Ran {
            succeeded,
            undo: None,
            completion: Box::new(move |committed: Result<()>| {
                for error in committed.err().into_iter().chain(failed) {
                    tracing::error!(
                        %error,
                        "an attempt of a strict commit whose fsync failed could not be \
                         recorded as never sent; it stays in flight, and the sweeper will look \
                         it up once its lease expires"
                    );
                }
                answer(completions);
            }),
        }
    });
    Queued {
        durable: Durable::No,
        kind: Kind::Write,
        job,
    }
}

/// What a test can do to the fsyncs beside the writer.
#[cfg(test)]
#[derive(Default)]
pub(super) struct TestHooks {
    /// Held by a test: every fsync waits for it.
    pub hold: Mutex<()>,
    /// While set, every fsync fails with EIO without syncing.
    pub fail: std::sync::atomic::AtomicBool,
    /// The thread of each fsync begun, in order.
    pub synced_on: Mutex<Vec<String>>,
}

/// The ledger's WAL file, opened for the fsyncs beside the writer.
pub(super) struct Wal {
    path: PathBuf,
    file: Option<File>,
    #[cfg(test)]
    hooks: Arc<TestHooks>,
}

impl Wal {
    pub fn new(database: &Path, #[cfg(test)] hooks: Arc<TestHooks>) -> Wal {
        let mut path = database.as_os_str().to_owned();
        path.push("-wal");
        Wal {
            path: PathBuf::from(path),
            file: None,
            #[cfg(test)]
            hooks,
        }
    }

    /// Fsyncs the WAL file: everything written to it before the call is on disk after it.
    pub(super) fn sync(&mut self) -> io::Result<()> {
        #[cfg(test)]
        {
            let thread = std::thread::current().name().unwrap_or_default().to_owned();
            self.hooks.synced_on.lock().unwrap().push(thread);
            let _held = self.hooks.hold.lock();
            if self.hooks.fail.load(Ordering::SeqCst) {
                return Err(io::Error::from_raw_os_error(5));
            }
        }
        let file = match self.file.take() {
            Some(file) => file,
            None => self.open()?,
        };
        file.sync_all()?;
        // SQLite deletes the WAL when the last connection closes and makes a new one at the
        // next write: had that happened, the fsync above went to a file nobody writes.
        let file = if file.metadata()?.nlink() == 0 {
            let file = self.open()?;
            file.sync_all()?;
            file
        } else {
            file
        };
        self.file = Some(file);
        Ok(())
    }

    /// Opens the WAL file, and fsyncs its folder, so that a WAL made since is found after a
    /// power loss (as SQLite does at a new file's first sync).
    fn open(&self) -> io::Result<File> {
        let file = File::open(&self.path)?;
        if let Some(folder) = self
            .path
            .parent()
            .filter(|folder| !folder.as_os_str().is_empty())
        {
            File::open(folder)?.sync_all()?;
        }
        Ok(file)
    }
}

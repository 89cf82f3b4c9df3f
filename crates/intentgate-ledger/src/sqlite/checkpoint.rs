//! WAL checkpoints beside the writes instead of inside one of them.
//!
//! SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages:
//! the caller of that commit (and every write queued behind it) waits while thousands of
//! pages are copied into the database file and both files are fsynced. That is the slow tail
//! of a call. Here the writer connection's WAL hook, which replaces the automatic checkpoint,
//! only wakes a thread of its own once the WAL holds [`CHECKPOINT_PAGES`]; that thread runs a
//! `PASSIVE` checkpoint on its own connection, which WAL lets proceed while the writer keeps
//! appending. It is woken again only once the WAL has grown by another [`CHECKPOINT_PAGES`]:
//! a checkpoint leaves the WAL as long as it was (SQLite starts it over at the next write
//! after a checkpoint that copied every frame), so waking on its length alone would run a
//! checkpoint, with its two fsyncs, after nearly every commit.
//!
//! The thread then checkpoints again while each pass leaves fewer frames behind than the
//! one before (the writes made during the pass), so that it usually copies the last frame
//! and the WAL starts over without the writer's help.
//!
//! A checkpoint that runs beside the writes may never catch up with them: SQLite starts the
//! WAL over only once every frame in it has been copied, so under a steady stream of writes
//! it could grow without end. When it reaches [`CHECKPOINT_PAGES_INLINE`] the writer
//! checkpoints itself, once it has answered the batch that took it there, with no write
//! between: the frames left to copy are the few the thread had not reached, and the next
//! write starts the WAL over. One batch in thousands waits for that, rather than one in a
//! hundred for a whole checkpoint.
//!
//! **A full disk.** SQLite starts the WAL over only when the write after a checkpoint that
//! copied every frame finds no reader inside the WAL; a reader of the pool there at that
//! moment (under load, often) lets the WAL grow on, to the next wake-up 1,000 pages later.
//! On a disk with less room than that, the WAL fills it, every write fails, and with no
//! commit nothing would wake the thread again: the ledger would stay unable to write for
//! good, even once space was freed. So a batch that fails while the WAL is past
//! [`CHECKPOINT_PAGES`] wakes the thread ([`Checkpointer::after_failure`]): its checkpoint
//! copies the frames (into pages the file mostly has already), and a later write starts the
//! WAL over, writing into the file's own space again. A checkpoint that fails (copying frames
//! may grow the database file, which a full disk refuses) is tried again every
//! [`CHECKPOINT_RETRY`] until one runs.

use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

use crate::{LedgerError, Result};

/// WAL pages at which the checkpoint thread is woken: SQLite's own automatic threshold.
pub const CHECKPOINT_PAGES: c_int = 1_000;
/// WAL pages at which the writer checkpoints itself, the checkpoint thread having fallen
/// behind (16 MiB of 2 KiB pages).
pub const CHECKPOINT_PAGES_INLINE: i32 = 8 * CHECKPOINT_PAGES;
/// Most checkpoints the thread runs per wake-up while each leaves fewer frames behind.
pub const CHECKPOINT_PASSES_MAX: u32 = 4;
/// Pause before the thread tries a failed checkpoint again on its own.
pub const CHECKPOINT_RETRY: Duration = Duration::from_millis(50);
/// Pause after a checkpoint that copied every frame before the thread checks that the WAL
/// started over.
pub const RESTART_CHECK: Duration = Duration::from_millis(100);

/// The checkpoint thread, until [`Checkpointer::stop`].
pub struct Checkpointer {
    wake: SyncSender<()>,
    stopping: Arc<AtomicBool>,
    /// Checkpoints the thread has run (read by tests).
    #[cfg_attr(not(test), allow(dead_code))]
    checkpoints: Arc<AtomicU64>,
    /// What the writer's WAL hook keeps between commits (the WAL's pages among it).
    growth: Arc<WalGrowth>,
    /// Set after a failed write: the next checkpoint truncates the WAL.
    truncate: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What the WAL hook keeps between commits.
#[derive(Default)]
struct WalGrowth {
    /// Pages in the WAL after the writer's last commit.
    pages: Arc<AtomicI32>,
    /// Pages in the WAL when the thread was last woken; 0 once the WAL has started over.
    woken_at: AtomicI32,
    /// The writer's commits that wrote to the WAL (SQLite calls the hook only for those).
    commits: AtomicU64,
}

impl Checkpointer {
    /// Opens the checkpoint connection to `path`, starts its thread and sets the WAL hook of
    /// `writer` that wakes it.
    pub fn start(path: &Path, writer: &mut Connection) -> Result<Checkpointer> {
        let connection = super::open_connection(path, false)?;
        // A checkpoint fsyncs the WAL before it copies and the database file after, whatever
        // the durability: the file never holds pages the WAL may still lose.
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        let (wake, woken) = sync_channel(1);
        let stopping = Arc::new(AtomicBool::new(false));
        let checkpoints = Arc::new(AtomicU64::new(0));
        let growth = Arc::new(WalGrowth::default());
        let wal_pages = growth.pages.clone();
        let truncate = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("intentgate-ledger-checkpoint".into())
            .spawn({
                let (stopping, checkpoints) = (stopping.clone(), checkpoints.clone());
                let (wal_pages, truncate) = (wal_pages.clone(), truncate.clone());
                move || {
                    let signals = Signals {
                        woken,
                        stopping: &stopping,
                        checkpoints: &checkpoints,
                        wal_pages: &wal_pages,
                        truncate: &truncate,
                    };
                    run(
                        |mode| connection.wal_checkpoint_v2(None::<&str>, mode),
                        signals,
                    )
                }
            })
            .map_err(|error| {
                LedgerError::Storage(format!("can't start the checkpoint thread: {error}"))
            })?;
        let checkpointer = Checkpointer {
            wake,
            stopping,
            checkpoints,
            growth,
            truncate,
            thread: Some(thread),
        };
        checkpointer.hook(writer)?;
        Ok(checkpointer)
    }

    /// Sets the WAL hook of `writer` that wakes the thread (again, on a write connection
    /// opened anew).
    pub fn hook(&self, writer: &mut Connection) -> Result<()> {
        let (growth, wake) = (self.growth.clone(), self.wake.clone());
        writer.wal_hook(Some(move |_: &mut Wal, pages: c_int| {
            on_commit(pages, &growth, &wake);
            // Never an error: the commit has happened, and an error here would report it
            // as failed.
            Ok(())
        }))?;
        Ok(())
    }

    /// The writer's commits so far that wrote to the WAL: one that wrote nothing (every write
    /// of its transaction read, or found nothing to change) leaves it as it was.
    pub fn commits_written(&self) -> u64 {
        self.growth.commits.load(Ordering::Relaxed)
    }

    /// Checkpoints the thread has run so far.
    #[cfg(test)]
    pub fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::Relaxed)
    }

    /// Pages in the WAL after the writer's last commit.
    #[cfg(test)]
    pub fn wal_pages(&self) -> i32 {
        self.growth.pages.load(Ordering::Relaxed)
    }

    /// After a batch of the writer failed: wakes the thread when the WAL is past
    /// [`CHECKPOINT_PAGES`], since a WAL that filled the disk fails every write and no commit
    /// would wake it (see the module's note on a full disk).
    pub fn after_failure(&self) {
        if self.growth.pages.load(Ordering::Relaxed) >= CHECKPOINT_PAGES {
            self.truncate.store(true, Ordering::Release);
            // Full: a wake-up is already pending.
            let _ = self.wake.try_send(());
        }
    }

    /// Checkpoints on `writer` (the connection whose hook was set) when the WAL has outgrown
    /// the thread. Call between batches, outside any transaction.
    pub fn catch_up(&self, writer: &Connection) {
        if self.growth.pages.load(Ordering::Relaxed) < CHECKPOINT_PAGES_INLINE {
            return;
        }
        match writer.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE) {
            Ok((pages, copied)) => {
                tracing::debug!(
                    pages,
                    copied,
                    "the writer checkpointed the WAL the checkpoint thread had not caught up with"
                );
                self.growth.pages.store(0, Ordering::Relaxed);
            }
            Err(error) => tracing::debug!(%error, "the writer's WAL checkpoint did not run"),
        }
    }

    /// Stops the thread (after the checkpoint it may be running) and waits for it.
    pub fn stop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stopping.store(true, Ordering::Release);
            // Blocks at most until the thread takes the wake-up already pending.
            let _ = self.wake.send(());
            let _ = thread.join();
        }
    }
}

/// The WAL hook: runs after every commit of the writer that wrote to the WAL, with the pages
/// the WAL now holds.
/// Wakes the thread each time the WAL has grown by [`CHECKPOINT_PAGES`].
fn on_commit(pages: c_int, growth: &WalGrowth, wake: &SyncSender<()>) {
    growth.commits.fetch_add(1, Ordering::Relaxed);
    growth.pages.store(pages, Ordering::Relaxed);
    let mut woken_at = growth.woken_at.load(Ordering::Relaxed);
    if pages < woken_at {
        // Started over since.
        woken_at = 0;
        growth.woken_at.store(0, Ordering::Relaxed);
    }
    if pages - woken_at >= CHECKPOINT_PAGES {
        growth.woken_at.store(pages, Ordering::Relaxed);
        // Full: a wake-up is already pending, which will see these pages too.
        let _ = wake.try_send(());
    }
}

/// What the checkpoint thread waits on and reports to.
struct Signals<'a> {
    woken: Receiver<()>,
    stopping: &'a AtomicBool,
    checkpoints: &'a AtomicU64,
    /// Pages in the WAL after the writer's last commit.
    wal_pages: &'a AtomicI32,
    /// Set after a failed write: truncate the WAL.
    truncate: &'a AtomicBool,
}

/// The checkpoint thread's loop, until stopped: per wake-up, `PASSIVE` checkpoints
/// (`checkpoint(mode)` answers the WAL's frames and those copied) while each leaves fewer
/// frames behind. After one that copied every frame, when the WAL has not started over
/// [`RESTART_CHECK`] later (a reader was inside it at the next write), a `RESTART`
/// checkpoint, which waits for the readers to leave, so that the next write starts it over.
/// After a failed write, a `TRUNCATE` checkpoint, which gives the WAL's space back to the
/// disk; after a checkpoint that failed, the same again every [`CHECKPOINT_RETRY`] until one
/// runs.
fn run(
    mut checkpoint: impl FnMut(CheckpointMode) -> rusqlite::Result<(c_int, c_int)>,
    signals: Signals<'_>,
) {
    let mut counted = |mode| {
        let checkpointed = checkpoint(mode);
        signals.checkpoints.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = &checkpointed {
            // Failing (a full disk) or busy (an erasure truncating the WAL): tried again
            // shortly, and the writer checkpoints itself if the WAL keeps growing meanwhile.
            tracing::debug!(%error, "a WAL checkpoint did not run; trying again shortly");
        }
        checkpointed
    };
    let mut failed = false;
    loop {
        let wake = if failed {
            signals.woken.recv_timeout(CHECKPOINT_RETRY)
        } else {
            signals
                .woken
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected)
        };
        if wake == Err(RecvTimeoutError::Disconnected) || signals.stopping.load(Ordering::Acquire) {
            return;
        }
        if signals.truncate.swap(false, Ordering::AcqRel) || failed {
            failed = counted(CheckpointMode::TRUNCATE).is_err();
            continue;
        }
        let mut left_before = c_int::MAX;
        let mut complete_at = None;
        for _ in 0..CHECKPOINT_PASSES_MAX {
            match counted(CheckpointMode::PASSIVE) {
                // Every frame copied: the next write starts the WAL over.
                Ok((pages, copied)) if copied >= pages => {
                    complete_at = Some(pages);
                    break;
                }
                // Frames written during the pass are left: copy them while they shrink.
                Ok((pages, copied)) if pages - copied < left_before => {
                    left_before = pages - copied;
                }
                Ok(_) => break,
                Err(_) => {
                    failed = true;
                    break;
                }
            }
            if signals.stopping.load(Ordering::Acquire) {
                return;
            }
        }
        if let Some(pages) = complete_at {
            std::thread::sleep(RESTART_CHECK);
            if signals.wal_pages.load(Ordering::Relaxed) >= pages
                && !signals.stopping.load(Ordering::Acquire)
            {
                failed = counted(CheckpointMode::RESTART).is_err();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Instant;

    use super::*;

    /// A checkpoint that failed is tried again by the thread itself, with no commit waking
    /// it: a disk that has room again gets its WAL started over before the WAL refills it.
    #[test]
    fn a_failed_checkpoint_is_tried_again_without_a_wake_up() {
        let attempts = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let (wake, woken) = sync_channel(1);
        let stopping = Arc::new(AtomicBool::new(false));
        let checkpoints = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (attempts, stopping, checkpoints) =
                (attempts.clone(), stopping.clone(), checkpoints.clone());
            move || {
                let checkpoint = |_mode| {
                    let mut attempts = attempts.lock().unwrap();
                    attempts.push(Instant::now());
                    // The first two fail as on a full disk; the third copies every frame.
                    match attempts.len() {
                        1 | 2 => Err(rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                            None,
                        )),
                        _ => Ok((1_200, 1_200)),
                    }
                };
                let (wal_pages, truncate) = (AtomicI32::new(0), AtomicBool::new(false));
                let signals = Signals {
                    woken,
                    stopping: &stopping,
                    checkpoints: &checkpoints,
                    wal_pages: &wal_pages,
                    truncate: &truncate,
                };
                run(checkpoint, signals)
            }
        });
        wake.send(()).unwrap();
        let deadline = Instant::now() + 20 * CHECKPOINT_RETRY;
        while attempts.lock().unwrap().len() < 3 && Instant::now() < deadline {
            std::thread::sleep(CHECKPOINT_RETRY / 10);
        }
        // Settled: nothing failed last, so the thread waits for a wake-up again.
        std::thread::sleep(3 * CHECKPOINT_RETRY);
        stopping.store(true, Ordering::Release);
        wake.send(()).unwrap();
        thread.join().unwrap();
        let attempts = attempts.lock().unwrap();
        assert_eq!(
            attempts.len(),
            3,
            "one wake-up, two failed checkpoints: the thread should have tried twice more on \
             its own and then stopped trying"
        );
        assert!(
            attempts[2] - attempts[1] >= CHECKPOINT_RETRY,
            "tried again before the pause"
        );
        assert_eq!(checkpoints.load(Ordering::Relaxed), 3);
    }
}

//! The SQLite store: one file, WAL, grouped commits.
//!
//! Every write goes to one writer thread that owns the write connection. It takes every
//! write waiting in its queue (up to [`BATCH_MAX`]), runs each in its own savepoint inside
//! one transaction, commits once and only then answers each caller. Under concurrency one
//! fsync covers a whole batch, so throughput is not bound to one fsync per call. A batch
//! is fsynced only when it holds a write that must be durable before the upstream call (the
//! `in_flight` write, under [`Durability::Strict`]); other batches commit without their own
//! fsync (`NORMAL`), and the next durable commit covers them, as the WAL is written in order.
//! The writer thread leaves a strict batch's fsync to a thread of its own and takes the next
//! batch meanwhile (`syncer.rs`); a write committed on its caller's thread is fsynced inside
//! its commit (`synchronous = FULL`).
//!
//! Reads run on a small pool of read connections, which WAL lets proceed beside the writer,
//! and WAL checkpoints on a thread of their own (`checkpoint.rs`), so that no commit carries
//! one.
//!
//! [`SqliteOptions::inline`] runs every write on the calling thread instead, one
//! transaction each. The deterministic simulation uses it, so that a seed fixes the order
//! of every ledger operation.
//!
//! A new intent's `begin` writes a narrow row of its own (`intents_begun`), moved to the
//! wide `intents` row and the event log by the intent's next write (its finish, usually,
//! grouped with the others queued), by a read of many intents, or when the ledger is next
//! opened, after a crash (`ops.rs`). Queued finishes, whose callers were answered, are held
//! by the writer thread for up to [`FINISH_HOLD`] to be committed together ([`Hold`]).
//!
//! A new ledger file, its WAL and its shared memory are readable by their owner only
//! (`file.rs`); opening one that others may read logs a warning with the fix.

mod checkpoint;
mod file;
mod freshness;
mod ops;
mod schema;
mod sessions;
mod syncer;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use intentgate_core::IntentStatus;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};

use crate::Result;
use crate::plan;
use crate::queued::{Queued as QueuedFinishes, Ticket};
use crate::queued_finish::queued_finish;
use crate::waiters::Waiters;
use crate::{
    Approval, ApprovalFilter, Begin, BeginRequest, Bound, BudgetUsageRow, CallerKey, Created,
    Decide, Decided, Durability, Erase, Erased, Erasure, Event, Finish, Finished, HeldIntent,
    IntentFilter, IntentId, IntentRecord, Ledger, LedgerError, Order, ProcessEnd, ProcessRecord,
    ProcessRegistration, QueuedFinish, ReconciliationRun, Renew, Renewed, Resolve, StatusCount,
    StoredMismatch, ToolFlag,
};
use checkpoint::Checkpointer;
use freshness::Freshness;
use syncer::{Group, Syncer, Undo, Waiting, Wal};

/// The page size of a new ledger file, in bytes. A commit writes one page of each b-tree it
/// touches (a new intent's wide row, its indexes and its events: about ten, once moved from
/// the two of its narrow row), so smaller pages
/// make each commit's WAL frames fewer bytes to write and, under strict durability, to
/// fsync: 2 KiB pages made a new intent about 10% faster and 64 callers about a quarter
/// faster than SQLite's default 4 KiB (`bench ledger`, strict). Not smaller: an index entry
/// longer than about a quarter of a page (a long key in seven indexes) spills into overflow
/// pages, and a 2 KiB page keeps keys of up to about 480 bytes in place.
pub const PAGE_SIZE: u32 = 2048;
/// Most writes committed together. Bounds one transaction's size and the time the first
/// caller of a batch waits for the last.
pub const BATCH_MAX: usize = 256;
/// Longest the writer thread holds a batch of queued finishes (their callers answered) for
/// more to commit with. Short beside a call's own time through the gateway: calls made one
/// after another every few hundred microseconds commit their finishes a handful at a time.
pub const FINISH_HOLD: Duration = Duration::from_millis(2);
/// Most writes queued for the writer thread; callers beyond it wait (back-pressure).
pub const WRITE_QUEUE_MAX: usize = 4096;
/// Read connections kept open for reuse.
pub const READERS_MAX: usize = 8;
/// How long SQLite waits for a lock held by another connection before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a change before a waiting caller reads again. Bounds the cost of a
/// missed wake-up.
pub const WAIT_POLL: Duration = crate::waiters::WAIT_POLL;
/// Longest wait, after an erasure, for the readers and the writer to let the WAL be
/// truncated. Short: it is a courtesy (the WAL is overwritten anyway as it is reused), and
/// the caller's thread waits meanwhile.
pub const WAL_TRUNCATE_WAIT: Duration = Duration::from_millis(500);

/// How to open a SQLite ledger.
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteOptions {
    pub durability: Durability,
    /// Run writes on the calling thread, one transaction each, instead of grouping them
    /// on a writer thread. Deterministic; for simulation and tools, not for serving.
    pub inline: bool,
}

impl SqliteOptions {
    pub fn inline(durability: Durability) -> SqliteOptions {
        SqliteOptions {
            durability,
            inline: true,
        }
    }
}

/// A write: runs inside the batch's transaction (or learns that the transaction could not
/// begin) and returns what to do once the batch's commit has succeeded or failed.
type Job = Box<dyn FnOnce(Result<&Connection>, Scope) -> Ran + Send>;
type Completion = Box<dyn FnOnce(Result<()>) + Send>;

/// How a write is kept apart from the others of its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// In a savepoint of its own, rolled back alone when it fails.
    Savepoint,
    /// Alone in the transaction, which is rolled back when it fails: no savepoint, so none
    /// of the copies of its pages a savepoint keeps for a rollback.
    Transaction,
}

/// Who waits for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waiter {
    /// A call waits for it (begin, finish, resolve): it may commit on the caller's thread
    /// when the writer is idle.
    Call,
    /// Bookkeeping nobody waits on (a repeat counted, a heartbeat, a purge): always the
    /// writer thread's, so that it never holds up the task that started it, nor the others
    /// of its runtime thread.
    Background,
}

/// What a write did: whether its work succeeded, what to answer once the commit is known,
/// and, for a durable write fsynced beside the writer, how to undo it should that fsync fail.
struct Ran {
    succeeded: bool,
    completion: Completion,
    undo: Option<Undo>,
}

/// What a write needs of the disk before it is answered, under strict durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durable {
    /// Nothing: the next fsync covers it.
    No,
    /// An fsync, which may follow the commit on the syncer's thread: should it fail, the
    /// write's undo is committed before its caller learns so (a `begin`).
    Undoable,
    /// An fsync inside its commit (`synchronous = FULL`).
    Yes,
}

impl Durable {
    fn of(durable: bool) -> Durable {
        if durable { Durable::Yes } else { Durable::No }
    }
}

struct Queued {
    durable: Durable,
    kind: Kind,
    job: Job,
}

/// What a queued write is to the writer thread, which holds a batch of finishes a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A write committed with the next batch.
    Write,
    /// A queued finish, whose caller was answered: a batch of nothing else waits up to
    /// [`FINISH_HOLD`] for more.
    Finish,
}

impl Queued {
    /// Answers this write with `error`, unmade: its transaction could not begin.
    fn fail(self, error: LedgerError) {
        ((self.job)(Err(error.clone()), Scope::Savepoint).completion)(Err(error));
    }
}

/// The write connection, with the `synchronous` setting it was last given.
struct Writer {
    connection: Connection,
    /// The ledger's file, to open the connection again.
    path: PathBuf,
    synchronous_full: Option<bool>,
    counts: Arc<CommitCounts>,
    /// The checkpoint thread, when checkpoints are off the writes (not inline).
    checkpointer: Option<Checkpointer>,
    /// Told of each commit, when the ledger answers `settled_epoch` (not inline).
    freshness: Option<Arc<Freshness>>,
    /// While set, the writer thread waits once it has committed a batch, holding the
    /// connection.
    #[cfg(test)]
    paused: Arc<std::sync::atomic::AtomicBool>,
}

/// What the writer has committed since the ledger was opened.
#[derive(Debug, Default)]
pub struct CommitCounts {
    /// Transactions committed (or rolled back after a failed write), each answering a batch.
    pub commits: AtomicU64,
    /// Those of them fsynced before their durable writes were answered (committed with
    /// `synchronous = FULL`, or fsynced by the syncer thread after the commit).
    pub durable_commits: AtomicU64,
    /// Writes answered, over all batches.
    pub writes: AtomicU64,
}

enum Engine {
    /// A writer thread commits the writes queued for it together. A write that finds
    /// nothing queued and the connection free commits on its caller's thread instead, which
    /// saves the two thread hops a lone write would otherwise make.
    Grouped {
        writer: Arc<Mutex<Writer>>,
        queue: Option<mpsc::Sender<Queued>>,
        thread: Option<JoinHandle<()>>,
        /// The finishes in the queue, and whether the writer thread holds some.
        finishes: Arc<Finishes>,
    },
    Inline {
        writer: Mutex<Writer>,
    },
}

/// The SQLite [`Ledger`].
pub struct SqliteLedger {
    path: PathBuf,
    durability: Durability,
    engine: Engine,
    readers: Mutex<Vec<Connection>>,
    waiters: Arc<Waiters>,
    /// Finishes queued by `finish_queued` and not yet committed, which reads wait for.
    queued: Arc<QueuedFinishes>,
    /// How long the writer thread holds queued finishes for more, in microseconds.
    finish_hold: Arc<AtomicU64>,
    counts: Arc<CommitCounts>,
    /// What [`Ledger::settled_epoch`] answers from (`freshness.rs`).
    freshness: Arc<Freshness>,
    /// What a test does to the fsyncs beside the writer.
    #[cfg(test)]
    sync_hooks: Arc<syncer::TestHooks>,
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger file at `path` and applies any missing
    /// migrations.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteLedger> {
        let path = path.as_ref().to_path_buf();
        let open_error = |reason: String| LedgerError::Open {
            path: path.display().to_string(),
            reason,
        };
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            && !parent.is_dir()
        {
            return Err(open_error(format!(
                "the folder {} does not exist; create it first",
                parent.display()
            )));
        }
        file::create_private(&path)
            .map_err(|error| open_error(format!("can't create the ledger file: {error}")))?;
        if let Some(warning) = file::loose_permissions(&path) {
            tracing::warn!("{warning}");
        }
        let mut connection =
            open_connection(&path, false).map_err(|error| open_error(error.to_string()))?;
        // Takes effect only in a new, empty file: an existing ledger keeps its page size.
        connection
            .pragma_update(None, "page_size", PAGE_SIZE)
            .map_err(|error| open_error(format!("{error} (is this an SQLite file?)")))?;
        let mode: String = connection
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(|error| open_error(format!("{error} (is this an SQLite file?)")))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open_error(format!(
                "the file system refused WAL mode (got {mode})"
            )));
        }
        schema::migrate(&mut connection).map_err(|error| open_error(error.to_string()))?;
        let moved =
            move_all_begun(&mut connection).map_err(|error| open_error(error.to_string()))?;
        if moved > 0 {
            tracing::info!(
                moved,
                "moved the intents begun before the ledger was opened to the intents table"
            );
        }
        // Deleted rows (retention, erasure) and the old versions of updated ones are
        // overwritten with zeros rather than left in free pages of the file.
        connection
            .pragma_update(None, "secure_delete", "ON")
            .map_err(|error| open_error(error.to_string()))?;
        let counts = Arc::new(CommitCounts::default());
        let freshness = Arc::new(Freshness::default());
        let queued = Arc::<QueuedFinishes>::default();
        let finish_hold = Arc::new(AtomicU64::new(FINISH_HOLD.as_micros() as u64));
        #[cfg(test)]
        let sync_hooks = Arc::<syncer::TestHooks>::default();
        let engine = if options.inline {
            Engine::Inline {
                writer: Mutex::new(Writer::new(connection, path.clone(), counts.clone())),
            }
        } else {
            let checkpointer = Checkpointer::start(&path, &mut connection)
                .map_err(|error| open_error(error.to_string()))?;
            let mut writer = Writer::new(connection, path.clone(), counts.clone());
            writer.checkpointer = Some(checkpointer);
            writer.freshness = Some(freshness.clone());
            let writer = Arc::new(Mutex::new(writer));
            let strict = options.durability == Durability::Strict;
            let beside = if strict {
                let syncer = Syncer::start(
                    &path,
                    Arc::downgrade(&writer),
                    counts.clone(),
                    #[cfg(test)]
                    sync_hooks.clone(),
                )
                .map_err(|error| open_error(error.to_string()))?;
                let wal = Wal::new(
                    &path,
                    #[cfg(test)]
                    sync_hooks.clone(),
                );
                Some(Beside { syncer, wal })
            } else {
                None
            };
            let (queue, receiver) = mpsc::channel(WRITE_QUEUE_MAX);
            let finishes = Arc::<Finishes>::default();
            let hold = Hold {
                time_us: finish_hold.clone(),
                queued: queued.clone(),
                finishes: finishes.clone(),
            };
            let thread = std::thread::Builder::new()
                .name("intentgate-ledger-writer".into())
                .spawn({
                    let (writer, counts) = (writer.clone(), counts.clone());
                    let finishes = finishes.clone();
                    move || {
                        let inbox = Inbox { receiver, finishes };
                        write_loop(&writer, inbox, strict, beside, &counts, hold)
                    }
                })
                .map_err(|error| open_error(format!("can't start the writer thread: {error}")))?;
            // Someone waits for a finish: the writer thread, if it holds one, commits now.
            let writer_thread = thread.thread().clone();
            queued.on_hurry(move || writer_thread.unpark());
            Engine::Grouped {
                writer,
                queue: Some(queue),
                thread: Some(thread),
                finishes,
            }
        };
        Ok(SqliteLedger {
            path,
            durability: options.durability,
            engine,
            readers: Mutex::new(Vec::new()),
            waiters: Arc::default(),
            queued,
            finish_hold,
            counts,
            freshness,
            #[cfg(test)]
            sync_hooks,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Sets how long the writer thread holds a batch of queued finishes for more to commit
    /// with ([`FINISH_HOLD`] unless set; zero commits each batch as soon as the writer takes
    /// it). Nothing that waits for a finish waits for the hold. For tests and benchmarks.
    pub fn set_finish_hold(&self, hold: Duration) {
        self.finish_hold
            .store(hold.as_micros() as u64, Ordering::Relaxed);
    }

    /// What the writer has committed so far: how writes were grouped, and which commits
    /// were fsynced.
    pub fn commit_counts(&self) -> &CommitCounts {
        &self.counts
    }

    /// Inserts intents exactly as given (ids are assigned by the store; `id` is ignored), in
    /// one transaction, without event-log entries. For benchmarks and test fixtures that need
    /// a large ledger quickly; the gateway never calls it.
    ///
    /// Each intent is checked as the normal writes check theirs (lengths, a fingerprint of 64
    /// hex digits, a status that agrees with its lease); the first one refused, or a key
    /// that exists already, refuses them all and nothing is written. Runs as one write of the
    /// writer thread (a million intents into an empty ledger: about 12 s on a slow two-core
    /// machine, release build): other writes wait meanwhile. Returns how many were inserted.
    pub async fn bulk_insert(&self, intents: Vec<IntentRecord>) -> Result<u64> {
        self.write(Waiter::Background, true, None, move |connection| {
            ops::bulk_insert(connection, intents)
        })
        .await
    }

    /// Runs `work` in its own savepoint of the next commit and answers after the commit.
    /// `waiter` says whether a caller waits for it; `durable` asks for the commit to be
    /// fsynced (under strict durability); `notify` wakes callers waiting on that intent once
    /// committed.
    async fn write<T: Send + 'static>(
        &self,
        waiter: Waiter,
        durable: bool,
        notify: Option<IntentId>,
        work: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (queued, answered) = self.job(Durable::of(durable), notify, None, work, |_| None);
        self.dispatch(waiter, queued).await?;
        answered.await.map_err(|_| LedgerError::Closed)?
    }

    /// A write of `work` for the writer, and where its answer will arrive once committed.
    /// `ticket`, the registration of a queued finish, is dropped only after the answer.
    /// `undo_of` tells from the write's result how to undo it (`Durable::Undoable`).
    fn job<T: Send + 'static>(
        &self,
        durable: Durable,
        notify: Option<IntentId>,
        ticket: Option<Ticket>,
        work: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
        undo_of: impl FnOnce(&T) -> Option<Undo> + Send + 'static,
    ) -> (Queued, oneshot::Receiver<Result<T>>) {
        let (answer, answered) = oneshot::channel();
        let queued = self.job_answered(durable, notify, ticket, work, undo_of, move |outcome| {
            let _ = answer.send(outcome);
        });
        (queued, answered)
    }

    /// [`SqliteLedger::job`], answered by `answer` (run where the write completes).
    fn job_answered<T: Send + 'static>(
        &self,
        durable: Durable,
        notify: Option<IntentId>,
        ticket: Option<Ticket>,
        work: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
        undo_of: impl FnOnce(&T) -> Option<Undo> + Send + 'static,
        answer: impl FnOnce(Result<T>) + Send + 'static,
    ) -> Queued {
        let waiters = self.waiters.clone();
        let job: Job = Box::new(move |connection, scope| {
            let result = connection.and_then(|connection| match scope {
                Scope::Savepoint => in_savepoint(connection, work),
                Scope::Transaction => caught(connection, work),
            });
            Ran {
                succeeded: result.is_ok(),
                undo: result.as_ref().ok().and_then(undo_of),
                completion: Box::new(move |committed| {
                    let outcome = committed.and(result);
                    if let (Ok(_), Some(id)) = (&outcome, notify) {
                        waiters.notify(id);
                    }
                    answer(outcome);
                    drop(ticket);
                }),
            }
        });
        Queued {
            durable,
            kind: Kind::Write,
            job,
        }
    }

    /// Commits `queued` now when the engine is inline, or hands it to the writer: on the
    /// caller's thread when a call waits for it and the writer is idle, else queued.
    async fn dispatch(&self, waiter: Waiter, queued: Queued) -> Result<()> {
        let strict = self.durability == Durability::Strict;
        match &self.engine {
            Engine::Inline { writer } => {
                let mut writer = writer.lock().map_err(|_| LedgerError::Closed)?;
                writer.commit(vec![queued], strict, false);
            }
            Engine::Grouped {
                writer,
                queue,
                thread,
                finishes,
            } => {
                let queue = queue.as_ref().ok_or(LedgerError::Closed)?;
                let queued = match waiter {
                    Waiter::Call => commit_if_idle(writer, queue, finishes, queued, strict),
                    Waiter::Background => Some(queued),
                };
                if let Some(queued) = queued {
                    queue.send(queued).await.map_err(|_| LedgerError::Closed)?;
                    // A write ends the hold of finishes the writer thread may be in.
                    if let Some(thread) = thread {
                        thread.thread().unpark();
                    }
                }
            }
        }
        Ok(())
    }

    /// Moves every begun intent to `intents`, when there is one, before a read of many intents
    /// (which reads `intents` only). A write of the writer's, grouped with the others.
    async fn move_begun(&self) -> Result<()> {
        if self.read(ops::any_begun)? {
            self.write(Waiter::Background, false, None, |connection| {
                ops::move_all_begun(connection).map(drop)
            })
            .await?;
        }
        Ok(())
    }

    /// Reads one intent with `read`, after its queued finish when the intent read is one.
    async fn read_settled(
        &self,
        read: impl Fn(&Connection) -> Result<Option<IntentRecord>>,
    ) -> Result<Option<IntentRecord>> {
        let closed = self.queued.closed();
        let found = self.read(&read)?;
        match &found {
            Some(intent) if self.queued.stale(intent, closed) => {
                self.queued.settle(intent.id).await;
                self.read(&read)
            }
            _ => Ok(found),
        }
    }

    /// Checkpoints the WAL into the file and truncates it, so that the old page images it
    /// holds (rows an erasure just zeroed in the file) are gone too. Best effort: with
    /// readers or the writer busy for longer than [`WAL_TRUNCATE_WAIT`], the WAL stays as it
    /// is until SQLite reuses it.
    fn truncate_wal(&self) {
        let truncate = || -> Result<bool> {
            let connection = open_connection(&self.path, false)?;
            connection.busy_timeout(WAL_TRUNCATE_WAIT)?;
            let busy: i64 =
                connection.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))?;
            Ok(busy == 0)
        };
        match truncate() {
            Ok(true) => {}
            Ok(false) => tracing::info!(
                "after the erasure the WAL could not be truncated now (the ledger is busy); \
                 SQLite overwrites it as it reuses it"
            ),
            Err(error) => {
                tracing::warn!(%error, "after the erasure the WAL could not be truncated")
            }
        }
    }

    /// Runs a read on a pooled read connection (the write connection when inline).
    fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        if let Engine::Inline { writer } = &self.engine {
            return work(&writer.lock().map_err(|_| LedgerError::Closed)?.connection);
        }
        let pooled = self.readers.lock().map_err(|_| LedgerError::Closed)?.pop();
        let connection = match pooled {
            Some(connection) => connection,
            None => open_connection(&self.path, true)?,
        };
        let result = work(&connection);
        let mut readers = self.readers.lock().map_err(|_| LedgerError::Closed)?;
        if readers.len() < READERS_MAX {
            readers.push(connection);
        }
        result
    }
}

impl Drop for SqliteLedger {
    fn drop(&mut self) {
        if let Engine::Grouped {
            writer,
            queue,
            thread,
            ..
        } = &mut self.engine
        {
            // Closing the queue lets the writer finish what is queued, then stop.
            queue.take();
            if let Some(thread) = thread.take() {
                // Out of a hold of finishes, if it is in one.
                thread.thread().unpark();
                let _ = thread.join();
            }
            if let Ok(mut writer) = writer.lock()
                && let Some(checkpointer) = writer.checkpointer.as_mut()
            {
                checkpointer.stop();
            }
        }
    }
}

fn open_connection(path: &Path, read_only: bool) -> Result<Connection> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.set_prepared_statement_cache_capacity(64);
    Ok(connection)
}

/// Moves what the last process using the file left begun (it crashed, or is still running:
/// either way the rows move as its own writes would move them) to `intents`, in one
/// transaction.
fn move_all_begun(connection: &mut Connection) -> Result<u64> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let moved = ops::move_all_begun(&transaction)?;
    transaction.commit()?;
    Ok(moved)
}

/// Runs `work` in a savepoint of the open transaction, rolled back alone when it fails.
fn in_savepoint<T>(
    connection: &Connection,
    work: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    connection
        .prepare_cached("SAVEPOINT operation")?
        .execute([])?;
    let result = caught(connection, work);
    match &result {
        Ok(_) => {
            connection
                .prepare_cached("RELEASE operation")?
                .execute([])?;
        }
        Err(_) => connection.execute_batch("ROLLBACK TO operation; RELEASE operation")?,
    }
    result
}

/// Runs `work`, turning a panic into an error (after logging it as the bug it is), so that
/// the write is rolled back and the writer goes on.
fn caught<T>(connection: &Connection, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(|| work(connection))).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
            .unwrap_or_default();
        tracing::error!(%message, "bug: a ledger operation panicked; it was rolled back");
        Err(LedgerError::Storage(format!(
            "internal error, rolled back: {message}"
        )))
    })
}

/// Commits `queued` on the caller's thread when the writer is idle: nothing is queued for it
/// (or only finishes, while it holds others: they wait for the hold anyway) and the
/// connection is free. Otherwise gives it back, to be queued: it then joins the writes it
/// would only have delayed.
fn commit_if_idle(
    writer: &Mutex<Writer>,
    queue: &mpsc::Sender<Queued>,
    finishes: &Finishes,
    queued: Queued,
    strict: bool,
) -> Option<Queued> {
    let in_queue = queue.max_capacity() - queue.capacity();
    let held_only =
        finishes.held.load(Ordering::SeqCst) && in_queue == finishes.queued.load(Ordering::SeqCst);
    if in_queue > 0 && !held_only {
        return Some(queued);
    }
    match writer.try_lock() {
        Ok(mut writer) => {
            writer.commit(vec![queued], strict, false);
            None
        }
        Err(_) => Some(queued),
    }
}

impl Writer {
    fn new(connection: Connection, path: PathBuf, counts: Arc<CommitCounts>) -> Writer {
        Writer {
            connection,
            path,
            synchronous_full: None,
            counts,
            checkpointer: None,
            freshness: None,
            #[cfg(test)]
            paused: Arc::default(),
        }
    }

    /// After a batch failed: wakes the checkpoint thread (a WAL that filled the disk fails
    /// every write, and no commit would wake it), and opens the write connection again if
    /// it fails a read. A full disk or an I/O error can leave a connection failing every
    /// statement with that error after the disk has room or works again (SQLite keeps it in
    /// an error state while anything on it still holds a page); a new connection starts
    /// clean.
    fn recover(&mut self) {
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.after_failure();
        }
        let read = self
            .connection
            .prepare_cached("SELECT count(*) FROM sqlite_schema")
            .and_then(|mut statement| statement.query_row([], |row| row.get::<_, i64>(0)));
        let Err(error) = read else {
            return;
        };
        match self.reopen() {
            Ok(()) => tracing::warn!(
                error = %LedgerError::from(error),
                "the ledger's write connection failed a read after a failed write; it was \
                 opened again"
            ),
            Err(reopen) => tracing::error!(
                error = %LedgerError::from(error),
                %reopen,
                "the ledger's write connection failed a read after a failed write, and could \
                 not be opened again; the next failed write tries again"
            ),
        }
    }

    /// Replaces the write connection with a new one, set up as at open.
    fn reopen(&mut self) -> Result<()> {
        let mut connection = open_connection(&self.path, false)?;
        connection.pragma_update(None, "secure_delete", "ON")?;
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.hook(&mut connection)?;
        }
        self.connection = connection;
        self.synchronous_full = None;
        Ok(())
    }

    /// Runs a batch in one transaction and answers every job once the commit is known (see
    /// [`Writer::commit_unanswered`]).
    fn commit(&mut self, batch: Vec<Queued>, strict: bool, beside: bool) -> Group {
        self.commit_unanswered(batch, strict, beside).answer()
    }

    /// Runs a batch in one transaction, to be answered once the commit is known: by
    /// [`Committed::answer`], which the writer thread calls once it has let go of the
    /// connection. A strict batch committed `beside` (by the writer thread) whose durable
    /// writes can all be undone commits without an fsync: those writes are left unanswered,
    /// for the fsync beside the writer (`syncer.rs`). Any other strict batch is fsynced
    /// inside its commit. A batch that could not begin is answered at once.
    fn commit_unanswered(&mut self, batch: Vec<Queued>, strict: bool, beside: bool) -> Committed {
        let fail_all = |writer: &mut Writer, batch: Vec<Queued>, error: LedgerError| {
            writer.recover();
            for queued in batch {
                queued.fail(error.clone());
            }
        };
        let durable = strict && batch.iter().any(|queued| queued.durable != Durable::No);
        let beside = durable && beside && batch.iter().all(|queued| queued.durable != Durable::Yes);
        let full = durable && !beside;
        if self.synchronous_full != Some(full) {
            // Cached: under strict durability a new call's `begin` and `finish` switch it
            // back and forth, so it runs twice per call.
            let pragma = if full {
                "PRAGMA synchronous = FULL"
            } else {
                "PRAGMA synchronous = NORMAL"
            };
            match run_cached(&self.connection, pragma) {
                Ok(()) => self.synchronous_full = Some(full),
                Err(error) => {
                    fail_all(self, batch, error);
                    return Committed::answered();
                }
            }
        }
        let connection = &self.connection;
        if let Err(error) = run_cached(connection, "BEGIN IMMEDIATE") {
            fail_all(self, batch, error);
            return Committed::answered();
        }
        // The commit counter holds still from here to the commit: what it moved by since the
        // last look was another connection's.
        let counter = self
            .freshness
            .as_ref()
            .and_then(|freshness| freshness.before_own_commit(connection));
        // No other connection can commit until this transaction ends: the epoch that look
        // confirmed holds meanwhile.
        let mut writing = self
            .freshness
            .as_ref()
            .filter(|_| counter.is_some())
            .map(|freshness| freshness.writing());
        let scope = if batch.len() == 1 {
            Scope::Transaction
        } else {
            Scope::Savepoint
        };
        let ran: Vec<(Durable, Ran)> = batch
            .into_iter()
            .map(|queued| {
                // SQLite rolls back the whole transaction on some errors (a full disk, an I/O
                // error) of one write: the writes after it would each commit on their own,
                // outside the batch, and then be answered as failed with the batch.
                let ran = if connection.is_autocommit() {
                    (queued.job)(Err(rolled_back()), scope)
                } else {
                    (queued.job)(Ok(connection), scope)
                };
                if !ran.succeeded {
                    // It may have been rolled back, and its write lock let go.
                    writing = None;
                }
                (queued.durable, ran)
            })
            .collect();
        drop(writing);
        // The WAL hook counts the commits that wrote something: one that did not leaves the
        // file's commit counter where it was.
        let written_before = self
            .checkpointer
            .as_ref()
            .map(Checkpointer::commits_written);
        let committed = if scope == Scope::Transaction && !ran[0].1.succeeded {
            // The one write failed and answers its own error; nothing is left to commit.
            let _ = run_cached(connection, "ROLLBACK");
            Ok(())
        } else {
            let committed = connection
                .prepare_cached("COMMIT")
                .and_then(|mut commit| commit.execute([]).map(drop));
            if let Err(error) = &committed {
                let _ = run_cached(connection, "ROLLBACK");
                if failed_on_io(error) {
                    forget_failed_commit(connection);
                    // It left `synchronous` off.
                    self.synchronous_full = None;
                }
            }
            if committed.is_ok()
                && let Some(freshness) = &self.freshness
            {
                let wrote = written_before
                    .zip(self.checkpointer.as_ref())
                    .map(|(before, checkpointer)| checkpointer.commits_written() != before);
                freshness.committed(counter, wrote);
            }
            committed.map_err(LedgerError::from)
        };
        self.counts.commits.fetch_add(1, Ordering::Relaxed);
        if full {
            self.counts.durable_commits.fetch_add(1, Ordering::Relaxed);
        }
        self.counts
            .writes
            .fetch_add(ran.len() as u64, Ordering::Relaxed);
        let failed = committed.is_err() || ran.iter().any(|(_, ran)| !ran.succeeded);
        let mut answers = Committed::new(committed.clone());
        for (durable, ran) in ran {
            if beside && committed.is_ok() && ran.succeeded && durable != Durable::No {
                answers.unsynced.push(Waiting {
                    completion: ran.completion,
                    undo: ran.undo,
                });
            } else {
                answers.completions.push(ran.completion);
            }
        }
        if failed {
            self.recover();
        }
        if let Some(checkpointer) = &self.checkpointer {
            checkpointer.catch_up(&self.connection);
        }
        answers
    }
}

/// A batch committed (or not: `outcome`), its writes not yet answered.
///
/// The writer thread answers them once it has let go of the connection, so that a caller it
/// answers never finds the connection still held by the batch that answered it: a repeat
/// made right after would otherwise find the settled epoch unconfirmed and read
/// (`freshness.rs`).
#[must_use = "the batch's callers wait for their answers"]
struct Committed {
    outcome: Result<()>,
    /// The writes answered with `outcome`.
    completions: Vec<Completion>,
    /// The strict batch's durable writes, committed without an fsync: answered after the
    /// fsync beside the writer.
    unsynced: Group,
}

impl Committed {
    fn new(outcome: Result<()>) -> Committed {
        Committed {
            outcome,
            completions: Vec::new(),
            unsynced: Group::new(),
        }
    }

    /// A batch whose writes were all answered already (it could not begin).
    fn answered() -> Committed {
        Committed::new(Ok(()))
    }

    /// Answers every write but the unsynced ones, which it gives back.
    fn answer(self) -> Group {
        for completion in self.completions {
            completion(self.outcome.clone());
        }
        self.unsynced
    }
}

/// How to undo the attempt a `begin` of `request` granted, should the fsync beside the writer
/// that was to make it durable fail: recorded as never sent (`unknown` again, for a re-send of
/// an unknown intent). Only strict durability fsyncs beside the writer: nothing to undo
/// otherwise, nor for a `begin` that granted no attempt.
fn undo_of_begin(
    strict: bool,
    request: &BeginRequest,
) -> impl FnOnce(&Begin) -> Option<Undo> + Send + use<> {
    let undone = if request.resend_unknown {
        IntentStatus::Unknown
    } else {
        IntentStatus::NotExecuted
    };
    move |begun| match begun {
        Begin::Execute(intent) if strict => Some(undo_attempt(intent, undone)),
        _ => None,
    }
}

/// Who undid an attempt whose fsync failed, as the actor of that change's event.
pub const UNDONE_BY: &str = "ledger";

/// How to undo the attempt a `begin` granted (`intent`, as begun) after the fsync meant to
/// make it durable failed: its caller is told nothing was sent, so the attempt is recorded as
/// such (`status`), unless another write has changed the intent since.
fn undo_attempt(intent: &IntentRecord, status: IntentStatus) -> Undo {
    let (id, attempt, begun_ms) = (intent.id, intent.attempt, intent.updated_ms);
    let lease_owner = intent.lease_owner.clone().unwrap_or_default();
    Box::new(move |connection| {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(begun_ms, |since| since.as_millis() as i64);
        let finish = Finish {
            id,
            lease_owner,
            attempt,
            now_ms: now_ms.max(begun_ms),
            status,
            result: None,
            external_id: None,
            resolved_by: UNDONE_BY,
            looked_up: false,
            detail: "the fsync of its begin failed; nothing was sent".to_owned(),
            lease_required: false,
            resend_stopped: None,
        };
        ops::finish(connection, &finish).map(drop)
    })
}

/// Whether a statement failed on an I/O error of the ledger's files (`SQLITE_IOERR_*`: a
/// failed write, read or fsync).
fn failed_on_io(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.code == rusqlite::ErrorCode::SystemIoFailure
    )
}

/// Makes a commit that failed on an I/O error impossible to find again when the ledger is
/// next opened, by committing a write of one page at once, without a sync, in its place.
///
/// A commit whose fsync failed has written its pages to the WAL file, ending with the frame
/// that marks it committed: only the sync failed. SQLite answers the error and forgets that
/// transaction (its WAL index never pointed at those frames), and the next commit writes its
/// own frames over them. But a process killed before its next commit leaves them in the
/// file, and the next process to open the ledger rebuilds the WAL index from the file and
/// finds the transaction committed. A `begin` answered "nothing was executed" would then be
/// `in_flight` after the restart, and the sweeper would send it, although its caller was
/// told it did not happen. The overwriting commit needs no sync: its first frame takes the
/// place of the failed transaction's first frame, and the failed frames after it no longer
/// match the WAL's running checksum, so a rebuild stops there. It rewrites the header field
/// `user_version` (unused by the ledger) with the value it has. Should the kernel lose the
/// pages of the WAL as well (a machine crash), nothing the ledger did after the failed sync
/// can be counted on; this is about the process that dies and the one that reopens the file.
fn forget_failed_commit(connection: &Connection) {
    let overwrite = || -> rusqlite::Result<()> {
        let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        connection.execute_batch(&format!(
            "PRAGMA synchronous = OFF; BEGIN IMMEDIATE; PRAGMA user_version = {version}; COMMIT"
        ))
    };
    if let Err(error) = overwrite() {
        let _ = connection.execute_batch("ROLLBACK");
        tracing::warn!(
            error = %LedgerError::from(error),
            "a commit failed on an I/O error and its pages in the WAL could not be overwritten; \
             should the gateway stop before its next commit, the failed commit's writes may be \
             found when the ledger is next opened (intents answered 503 may then be in flight \
             and be sent by the sweeper)"
        );
    }
}

/// The error of the writes of a batch whose transaction an earlier write's failure rolled
/// back: nothing of them was written.
fn rolled_back() -> LedgerError {
    LedgerError::Storage(
        "the write was not made: an earlier write of its batch failed and SQLite rolled back \
         the whole transaction (the log says why)"
            .to_owned(),
    )
}

/// Runs one statement that returns no rows, prepared once per connection.
fn run_cached(connection: &Connection, sql: &str) -> Result<()> {
    connection.prepare_cached(sql)?.execute([])?;
    Ok(())
}

/// The queued finishes as a call's write sees them ([`commit_if_idle`]).
#[derive(Default)]
struct Finishes {
    /// How many of the queue's writes are finishes ([`queue_finish`]).
    queued: AtomicUsize,
    /// Whether the writer thread holds finishes ([`Hold::gather`]), its connection free.
    held: AtomicBool,
}

/// Queues `queued`, a finish, counted in `finishes`; gives it back when the queue is full
/// or closed. Wakes nothing: the writer thread takes it when it next looks.
fn queue_finish(
    queue: &mpsc::Sender<Queued>,
    finishes: &Finishes,
    queued: Queued,
) -> Option<Queued> {
    // Counted before it can be taken, so that the writer's count down never passes zero.
    finishes.queued.fetch_add(1, Ordering::SeqCst);
    match queue.try_send(queued) {
        Ok(()) => None,
        Err(TrySendError::Full(queued) | TrySendError::Closed(queued)) => {
            finishes.queued.fetch_sub(1, Ordering::SeqCst);
            Some(queued)
        }
    }
}

/// The writer thread's queue, with the count of the finishes in it ([`queue_finish`]).
struct Inbox {
    receiver: mpsc::Receiver<Queued>,
    finishes: Arc<Finishes>,
}

impl Inbox {
    /// Notes that `queued` left the queue.
    fn taken(&self, queued: Queued) -> Queued {
        if queued.kind == Kind::Finish {
            self.finishes.queued.fetch_sub(1, Ordering::SeqCst);
        }
        queued
    }

    /// The next write, waiting for it; `None` once the queue is closed and empty.
    fn recv(&mut self) -> Option<Queued> {
        let queued = self.receiver.blocking_recv()?;
        Some(self.taken(queued))
    }

    /// Adds what is queued to `batch`, up to [`BATCH_MAX`]; true when that took a write
    /// that is not a finish.
    fn drain(&mut self, batch: &mut Vec<Queued>) -> bool {
        let mut write = false;
        while batch.len() < BATCH_MAX {
            match self.receiver.try_recv() {
                Ok(queued) => {
                    write |= queued.kind == Kind::Write;
                    batch.push(self.taken(queued));
                }
                Err(_) => break,
            }
        }
        write
    }

    fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }

    fn is_closed(&self) -> bool {
        self.receiver.is_closed()
    }
}

/// What the writer thread has for the fsyncs of its strict batches (strict only): the syncer
/// thread, and the WAL file for the fsyncs it makes itself.
struct Beside {
    syncer: Syncer,
    wal: Wal,
}

/// How the writer thread holds a batch of finishes (`Kind::Finish`) for others.
struct Hold {
    /// Longest hold, in microseconds ([`FINISH_HOLD`], [`SqliteLedger::set_finish_hold`]).
    time_us: Arc<AtomicU64>,
    /// Whether someone waits for a finish, who must not wait for the hold.
    queued: Arc<QueuedFinishes>,
    /// Told while the hold lasts.
    finishes: Arc<Finishes>,
}

impl Hold {
    /// Adds to `batch`, which begins with a finish, what is queued within the hold, parked
    /// meanwhile: until the hold ends, a write other than a finish is queued (its caller
    /// unparks this thread), someone waits for a finish (`QueuedFinishes::hurry` unparks
    /// it), the batch is full or the ledger is dropped. A queued finish wakes nothing.
    fn gather(&self, inbox: &mut Inbox, batch: &mut Vec<Queued>) {
        let until = Instant::now() + Duration::from_micros(self.time_us.load(Ordering::Relaxed));
        self.finishes.held.store(true, Ordering::SeqCst);
        self.hold_until(until, inbox, batch);
        self.finishes.held.store(false, Ordering::SeqCst);
    }

    /// [`Hold::gather`]'s wait.
    fn hold_until(&self, until: Instant, inbox: &mut Inbox, batch: &mut Vec<Queued>) {
        loop {
            if inbox.drain(batch)
                || batch.len() >= BATCH_MAX
                || self.queued.hurried()
                || inbox.is_closed()
            {
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// The writer thread: takes the first queued write, then, holding the connection, every
/// write queued meanwhile (up to [`BATCH_MAX`]), and commits them together. A batch that
/// begins with a queued finish (its caller answered) is held first for up to
/// [`FINISH_HOLD`] (`hold`), so that the finishes of calls made one after another commit
/// together; the connection stays free meanwhile, for calls to commit on their own threads.
/// A strict batch's durable writes, committed without an fsync, are handed to the syncer
/// thread when more writes are queued, which answers them after its fsync while this thread
/// commits the next batch; else this thread fsyncs, still holding the connection
/// (`syncer.rs`). It answers a batch once it has let go of the connection ([`Committed`]).
fn write_loop(
    writer: &Mutex<Writer>,
    mut inbox: Inbox,
    strict: bool,
    mut beside: Option<Beside>,
    counts: &CommitCounts,
    hold: Hold,
) {
    while let Some(first) = inbox.recv() {
        let finish = first.kind == Kind::Finish;
        let mut batch = vec![first];
        if finish {
            hold.gather(&mut inbox, &mut batch);
        }
        // Poisoned only by a panic outside the writes (which are caught): stop, and the
        // callers learn that the ledger is closed.
        let Ok(mut connection) = writer.lock() else {
            return;
        };
        inbox.drain(&mut batch);
        let committed = connection.commit_unanswered(batch, strict, beside.is_some());
        // The fsync of a strict batch's durable writes, when nothing else is queued: made
        // here, holding the connection as a commit with `FULL` would, so that what arrives
        // meanwhile queues up for the next batch.
        let synced = match beside.as_mut() {
            Some(Beside { wal, .. }) if !committed.unsynced.is_empty() && inbox.is_empty() => {
                Some(wal.sync())
            }
            _ => None,
        };
        #[cfg(test)]
        while connection.paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(connection);
        let unsynced = committed.answer();
        let Some(Beside { syncer, wal }) = beside.as_mut() else {
            continue;
        };
        if unsynced.is_empty() {
            continue;
        }
        let (synced, unsynced) = match synced {
            Some(synced) => (synced, unsynced),
            // More writes are queued: the syncer thread fsyncs and answers these while this
            // thread commits them.
            None => match syncer.hand(unsynced) {
                Ok(()) => continue,
                // The syncer thread is gone (it panicked): this thread fsyncs instead.
                Err(unsynced) => (wal.sync(), unsynced),
            },
        };
        syncer::settled(synced, wal, vec![unsynced], counts, |queued| {
            commit_alone(writer, queued);
        });
    }
}

/// Commits `queued` alone on `writer`'s connection, once it is free; fails it when the
/// writer is gone.
fn commit_alone(writer: &Mutex<Writer>, queued: Queued) {
    match writer.lock() {
        Ok(mut writer) => drop(writer.commit(vec![queued], false, false)),
        Err(_) => queued.fail(LedgerError::Closed),
    }
}

#[async_trait]
impl Ledger for SqliteLedger {
    async fn begin(&self, request: BeginRequest) -> Result<Begin> {
        let undo = undo_of_begin(self.durability == Durability::Strict, &request);
        let (queued, answered) = self.job(
            Durable::Undoable,
            None,
            None,
            move |connection| ops::begin(connection, &request),
            undo,
        );
        self.dispatch(Waiter::Call, queued).await?;
        answered.await.map_err(|_| LedgerError::Closed)?
    }

    async fn create(&self, request: BeginRequest) -> Result<Created> {
        // One trip to the writer, where a read and then a `begin` would make two: the read
        // on a connection of its own, then the writer's transaction, which reads the key
        // again. A new intent's attempt is undone as `begin`'s is should the fsync beside the
        // writer fail; an intent found was not written and has nothing to undo.
        if request.policies.is_some() {
            return crate::read_then_begin(self, request).await;
        }
        let undo = undo_of_begin(self.durability == Durability::Strict, &request);
        let closed = self.queued.closed();
        let (queued, answered) = self.job(
            Durable::Undoable,
            None,
            None,
            // The request comes back, for a read after a queued finish.
            move |connection| ops::create(connection, &request).map(|created| (created, request)),
            move |(created, _)| match created {
                Created::Begun(begun) => undo(begun),
                Created::Found(_) => None,
            },
        );
        self.dispatch(Waiter::Call, queued).await?;
        match answered.await.map_err(|_| LedgerError::Closed)?? {
            // Found in flight while a finish of it queued here has not committed: read
            // again once it has, as `get` does.
            (Created::Found(intent), request) if self.queued.stale(&intent, closed) => {
                self.queued.settle(intent.id).await;
                crate::read_then_begin(self, request).await
            }
            (created, _) => Ok(created),
        }
    }

    async fn creates_in_one_round_trip(&self) -> bool {
        true
    }

    async fn finish(&self, finish: Finish) -> Result<Finished> {
        let id = finish.id;
        self.write(Waiter::Call, false, Some(id), move |connection| {
            ops::finish(connection, &finish)
        })
        .await
    }

    async fn finish_queued(&self, finish: Finish) -> Result<QueuedFinish> {
        let id = finish.id;
        let ticket = self.queued.open(id);
        let (answer, answered) = queued_finish();
        let queued = self.job_answered(
            Durable::No,
            Some(id),
            Some(ticket),
            move |connection| ops::finish(connection, &finish),
            |_| None,
            move |outcome| answer.send(outcome),
        );
        match &self.engine {
            Engine::Inline { .. } => self.dispatch(Waiter::Call, queued).await?,
            Engine::Grouped {
                writer,
                queue,
                finishes,
                ..
            } => {
                let queue = queue.as_ref().ok_or(LedgerError::Closed)?;
                // For the writer thread, which holds it a moment for others; committed by a
                // task of its own, after the batch the writer may be committing, when the
                // queue is full or gone (the ledger was dropped meanwhile; its connection
                // lives on in `writer`).
                let queued = Queued {
                    kind: Kind::Finish,
                    ..queued
                };
                if let Some(queued) = queue_finish(queue, finishes, queued) {
                    let (writer, strict) = (writer.clone(), self.durability == Durability::Strict);
                    tokio::spawn(async move {
                        if let Ok(mut writer) = writer.lock() {
                            writer.commit(vec![queued], strict, false);
                        }
                    });
                }
            }
        }
        Ok(answered)
    }

    async fn drain_queued(&self) {
        self.queued.drain().await;
    }

    async fn renew(&self, renew: Renew) -> Result<Renewed> {
        self.write(Waiter::Background, false, None, move |connection| {
            ops::renew(connection, &renew)
        })
        .await
    }

    async fn record_calls(&self, calls: Vec<(IntentId, i64)>) -> Result<Vec<IntentId>> {
        self.write(Waiter::Background, false, None, move |connection| {
            ops::record_calls(connection, &calls)
        })
        .await
    }

    async fn record_trace(&self, id: IntentId, traceparent: String) -> Result<()> {
        crate::check_traceparent(&traceparent)?;
        self.write(Waiter::Background, false, None, move |connection| {
            ops::record_trace(connection, id, &traceparent)
        })
        .await
    }

    async fn trace_of(&self, id: IntentId) -> Result<Option<String>> {
        self.read(|connection| ops::trace_of(connection, id))
    }

    async fn bind_caller_key(&self, binding: &CallerKey) -> Result<Bound> {
        plan::check_caller_key(binding)?;
        // A binding never changes: one found by a read is what the writer would find, and a
        // repeat of the operation (the common case for a bound key) writes nothing.
        if let Some(stored) = self.read(|connection| ops::caller_key(connection, binding))? {
            return Ok(plan::bound(stored, binding));
        }
        let binding = binding.clone();
        // Not durable: the `begin` that follows it is, and commits it to disk too.
        self.write(Waiter::Call, false, None, move |connection| {
            ops::bind_caller_key(connection, &binding)
        })
        .await
    }

    async fn get(&self, tenant: &str, tool: &str, key: &str) -> Result<Option<IntentRecord>> {
        self.read_settled(|connection| ops::get(connection, tenant, tool, key))
            .await
    }

    async fn settled_epoch(&self) -> Option<u64> {
        match &self.engine {
            Engine::Grouped { writer, .. } => self.freshness.epoch(writer),
            // Inline is for the simulation and tools: every read goes to the file, so that
            // a seed fixes the ledger operations as before.
            Engine::Inline { .. } => None,
        }
    }

    async fn get_by_id(&self, id: IntentId) -> Result<Option<IntentRecord>> {
        self.read_settled(|connection| ops::get_by_id(connection, id))
            .await
    }

    async fn stale(
        &self,
        status: IntentStatus,
        now_ms: i64,
        limit: u32,
        skip_tools: &[String],
    ) -> Result<Vec<IntentRecord>> {
        self.move_begun().await?;
        self.read(|connection| ops::stale(connection, status, now_ms, limit, skip_tools))
    }

    async fn list(&self, after_id: IntentId, limit: u32) -> Result<Vec<IntentRecord>> {
        self.queued.drain().await;
        self.move_begun().await?;
        self.read(|connection| ops::list(connection, after_id, limit))
    }

    async fn events(&self, id: IntentId) -> Result<Vec<Event>> {
        self.queued.settle(id).await;
        self.move_begun().await?;
        self.read(|connection| ops::events(connection, id))
    }

    async fn resolve(&self, resolve: Resolve) -> Result<IntentRecord> {
        let id = resolve.id;
        // After a finish of the intent still queued (the writer may hold it, taken off the
        // queue, while this would commit on the caller's thread).
        self.queued.settle(id).await;
        let resolved = self
            .write(Waiter::Call, true, Some(id), move |connection| {
                ops::resolve(connection, &resolve)
            })
            .await;
        self.freshness.changed();
        resolved
    }

    async fn record_disabled_call(&self, tenant: &str, tool: &str, now_ms: i64) -> Result<()> {
        let (tenant, tool) = (tenant.to_owned(), tool.to_owned());
        self.write(Waiter::Background, false, None, move |connection| {
            ops::record_disabled_call(connection, &tenant, &tool, now_ms)
        })
        .await
    }

    async fn set_tool_flag(&self, flag: ToolFlag) -> Result<()> {
        self.write(Waiter::Background, true, None, move |connection| {
            ops::set_tool_flag(connection, &flag)
        })
        .await
    }

    async fn tool_flags(&self) -> Result<Vec<ToolFlag>> {
        self.read(ops::tool_flags)
    }

    async fn decide(&self, decide: Decide) -> Result<Decided> {
        let id = decide.id;
        // A person's decision is durable before it is answered, and wakes the callers
        // waiting on the intent.
        self.write(Waiter::Call, true, Some(id), move |connection| {
            ops::decide(connection, &decide)
        })
        .await
    }

    async fn approval(&self, id: IntentId) -> Result<Option<Approval>> {
        self.read(|connection| ops::approval(connection, id))
    }

    async fn approvals(
        &self,
        filter: &ApprovalFilter,
        before: Option<IntentId>,
        limit: u32,
    ) -> Result<Vec<HeldIntent>> {
        self.queued.drain().await;
        self.move_begun().await?;
        self.read(|connection| ops::approvals(connection, filter, before, limit))
    }

    async fn expire_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<HeldIntent>> {
        let expired = self
            .write(Waiter::Background, false, None, move |connection| {
                ops::expire_approvals(connection, now_ms, limit)
            })
            .await?;
        for held in &expired {
            self.waiters.notify(held.intent.id);
        }
        Ok(expired)
    }

    async fn budget_usage(&self, tool: &str, now_ms: i64) -> Result<Vec<BudgetUsageRow>> {
        self.read(|connection| ops::budget_usage(connection, tool, now_ms))
    }

    async fn purge(&self, before_ms: i64) -> Result<u64> {
        let purged = self
            .write(Waiter::Background, false, None, move |connection| {
                let purged = ops::purge(connection, before_ms)?;
                sessions::purge(connection, before_ms)?;
                Ok(purged)
            })
            .await;
        self.freshness.changed();
        purged
    }

    async fn erase(&self, erase: &Erase) -> Result<Erasure> {
        let request = erase.clone();
        let erasure = self
            .write(Waiter::Background, true, None, move |connection| {
                let erasure = ops::erase(connection, &request)?;
                if let Erasure::Erased(_) = &erasure {
                    sessions::erase(connection, &request)?;
                }
                Ok(erasure)
            })
            .await;
        self.freshness.changed();
        let erasure = erasure?;
        if let Erasure::Erased(Erased { more: false, .. }) = &erasure {
            self.truncate_wal();
        }
        Ok(erasure)
    }

    async fn intents(
        &self,
        filter: &IntentFilter,
        order: Order,
        cursor: Option<IntentId>,
        limit: u32,
    ) -> Result<Vec<IntentRecord>> {
        self.queued.drain().await;
        self.move_begun().await?;
        self.read(|connection| ops::intents(connection, filter, order, cursor, limit))
    }

    async fn status_counts(&self) -> Result<Vec<StatusCount>> {
        self.queued.drain().await;
        self.move_begun().await?;
        self.read(ops::status_counts)
    }

    async fn record_reconciliation(
        &self,
        run: &ReconciliationRun,
        mismatches: &[StoredMismatch],
    ) -> Result<i64> {
        // Checked here, so the writer thread only writes.
        let (run, mismatches) = plan::reconciliation(run, mismatches)?;
        self.write(Waiter::Background, false, None, move |connection| {
            ops::record_reconciliation(connection, &run, &mismatches)
        })
        .await
    }

    async fn reconciliations(&self, limit: u32) -> Result<Vec<ReconciliationRun>> {
        self.read(|connection| ops::reconciliations(connection, limit))
    }

    async fn reconciliation(&self, run_id: i64) -> Result<Option<ReconciliationRun>> {
        self.read(|connection| ops::reconciliation(connection, run_id))
    }

    async fn reconciliation_mismatches(
        &self,
        run_id: i64,
        limit: u32,
    ) -> Result<Vec<StoredMismatch>> {
        self.read(|connection| ops::reconciliation_mismatches(connection, run_id, limit))
    }

    async fn register_process(&self, registration: ProcessRegistration) -> Result<ProcessRecord> {
        self.write(Waiter::Background, false, None, move |connection| {
            ops::register_process(connection, &registration)
        })
        .await
    }

    async fn heartbeat_process(&self, instance: &str, now_ms: i64) -> Result<bool> {
        let instance = instance.to_owned();
        self.write(Waiter::Background, false, None, move |connection| {
            ops::heartbeat_process(connection, &instance, now_ms)
        })
        .await
    }

    async fn end_process(&self, instance: &str, end: ProcessEnd, now_ms: i64) -> Result<bool> {
        let instance = instance.to_owned();
        self.write(Waiter::Background, false, None, move |connection| {
            ops::end_process(connection, &instance, end, now_ms)
        })
        .await
    }

    async fn process(&self, instance: &str) -> Result<Option<ProcessRecord>> {
        self.read(|connection| ops::process(connection, instance))
    }

    async fn create_console_session(&self, session: &crate::ConsoleSession) -> Result<()> {
        crate::console::check_session(session)?;
        let session = session.clone();
        self.write(Waiter::Call, true, None, move |connection| {
            sessions::create_session(connection, &session)
        })
        .await
    }

    async fn console_session(
        &self,
        token_digest: &str,
        now_ms: i64,
    ) -> Result<Option<crate::ConsoleSession>> {
        crate::console::check_token_digest(token_digest)?;
        let token_digest = token_digest.to_owned();
        self.write(Waiter::Call, false, None, move |connection| {
            sessions::use_session(connection, &token_digest, now_ms)
        })
        .await
    }

    async fn end_console_session(&self, token_digest: &str) -> Result<bool> {
        crate::console::check_token_digest(token_digest)?;
        let token_digest = token_digest.to_owned();
        self.write(Waiter::Call, true, None, move |connection| {
            sessions::end_session(connection, &token_digest)
        })
        .await
    }

    async fn record_alert(&self, alert: &crate::StoredAlert) -> Result<i64> {
        crate::console::check_alert(alert)?;
        let alert = alert.clone();
        self.write(Waiter::Background, false, None, move |connection| {
            sessions::record_alert(connection, &alert)
        })
        .await
    }

    async fn alerts(&self, limit: u32) -> Result<Vec<crate::StoredAlert>> {
        self.read(|connection| sessions::alerts(connection, limit))
    }

    async fn wait_for_change(&self, id: IntentId, timeout: Duration) {
        // The lease may be held only by a finish the writer holds for others.
        let _hurry = self.queued.is_open(id).then(|| self.queued.hurry());
        self.waiters.wait(id, timeout.min(WAIT_POLL)).await
    }
}

#[cfg(test)]
mod tests;

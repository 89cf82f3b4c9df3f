//! The writer's promises, seen from inside: which commits are fsynced, that queued writes
//! are grouped, that a lone write commits on its caller's thread, and that checkpoints
//! leave the writer alone.

use std::sync::atomic::Ordering;
use std::time::Duration;

use intentgate_core::fingerprint;
use serde_json::json;

use super::*;

const TENANT: &str = "acme";
const TOOL: &str = "refund_order";
const OWNER: &str = "test-owner";
const NOW_MS: i64 = 1_000_000;

fn request(key: &str) -> BeginRequest {
    let arguments = json!({ "order": key, "amount": "49.00" });
    BeginRequest {
        tenant: TENANT.into(),
        tool: TOOL.into(),
        key: key.into(),
        fingerprint: fingerprint(&arguments).as_str().to_owned(),
        arguments,
        lease_owner: OWNER.into(),
        lease_expires_ms: NOW_MS + 60_000,
        now_ms: NOW_MS,
        count_call: true,
        retry_rejected: false,
        lookup_interval_ms: 1_000,
        resend_unknown: false,
        expect_new: false,
        policies: None,
    }
}

fn done(intent: &IntentRecord) -> Finish {
    Finish {
        id: intent.id,
        lease_owner: OWNER.into(),
        attempt: intent.attempt,
        now_ms: NOW_MS + 1,
        status: IntentStatus::Done,
        result: Some(json!({ "id": "re_1" })),
        external_id: None,
        resolved_by: "upstream",
        looked_up: false,
        detail: "done".into(),
        lease_required: false,
        resend_stopped: None,
    }
}

fn open(folder: &tempfile::TempDir, durability: Durability) -> SqliteLedger {
    let options = SqliteOptions {
        durability,
        inline: false,
    };
    SqliteLedger::open(folder.path().join("ledger.sqlite3"), options).expect("open")
}

/// (commits, durable commits, writes) so far.
fn counted(ledger: &SqliteLedger) -> (u64, u64, u64) {
    let counts = ledger.commit_counts();
    (
        counts.commits.load(Ordering::Relaxed),
        counts.durable_commits.load(Ordering::Relaxed),
        counts.writes.load(Ordering::Relaxed),
    )
}

async fn execute(ledger: &SqliteLedger, key: &str) -> IntentRecord {
    match ledger.begin(request(key)).await.expect("begin") {
        Begin::Execute(intent) => intent,
        other => panic!("expected to execute, got {other:?}"),
    }
}

/// Strict durability: `begin` (the `in_flight` write) is answered only after a commit made
/// with `synchronous = FULL`, which fsyncs the WAL; `finish` commits without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_durability_begin_is_fsynced_before_it_answers_and_finish_is_not() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Strict);
    let before = counted(&ledger);
    let intent = execute(&ledger, "order-1").await;
    let begun = counted(&ledger);
    assert_eq!(begun.0 - before.0, 1, "one commit for begin");
    assert_eq!(begun.1 - before.1, 1, "and it was durable");
    ledger.finish(done(&intent)).await.expect("finish");
    let finished = counted(&ledger);
    assert_eq!(finished.0 - begun.0, 1, "one commit for finish");
    assert_eq!(finished.1, begun.1, "finish is not fsynced on its own");
}

/// The `synchronous` level a write's transaction really runs under, read inside it.
async fn synchronous_inside(ledger: &SqliteLedger, durable: bool) -> i64 {
    ledger
        .write(Waiter::Call, durable, None, |connection| {
            Ok(connection.query_row("PRAGMA synchronous", [], |row| row.get(0))?)
        })
        .await
        .expect("write")
}

/// The counts above say which commits the writer meant to fsync; this reads, inside each
/// write's transaction, the level SQLite really commits it with (2 = FULL: the WAL is
/// fsynced before the commit returns; 1 = NORMAL), alternating as a begin and a finish do,
/// so a switch that did not take effect fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_durability_each_durable_write_really_commits_with_synchronous_full() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Strict);
    for _ in 0..3 {
        assert_eq!(
            synchronous_inside(&ledger, true).await,
            2,
            "a durable write"
        );
        assert_eq!(
            synchronous_inside(&ledger, false).await,
            1,
            "any other write"
        );
    }
    let relaxed_folder = tempfile::tempdir().unwrap();
    let relaxed = open(&relaxed_folder, Durability::Relaxed);
    assert_eq!(
        synchronous_inside(&relaxed, true).await,
        1,
        "relaxed: never FULL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_relaxed_durability_no_commit_is_fsynced() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let intent = execute(&ledger, "order-1").await;
    ledger.finish(done(&intent)).await.expect("finish");
    let (commits, durable, _) = counted(&ledger);
    assert!(commits >= 2);
    assert_eq!(durable, 0);
}

/// Writes queued while the connection is busy are committed together, in one transaction:
/// one fsync covers them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_while_the_writer_is_busy_share_one_commit() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Strict));
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    let before = counted(&ledger);
    // Hold the connection as a commit in progress would, while 32 callers write.
    let busy = writer.lock().unwrap();
    let callers: Vec<_> = (0..32)
        .map(|index| {
            let ledger = ledger.clone();
            tokio::spawn(async move { execute(&ledger, &format!("order-{index}")).await })
        })
        .collect();
    // Every one of them is queued (none can commit on its own thread while the connection
    // is held); the writer thread has taken at most the first.
    let Engine::Grouped { queue, .. } = &ledger.engine else {
        unreachable!()
    };
    let queue = queue.as_ref().unwrap();
    for _ in 0..2_000 {
        if queue.max_capacity() - queue.capacity() >= 31 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        queue.max_capacity() - queue.capacity() >= 31,
        "the callers queued"
    );
    drop(busy);
    for caller in callers {
        caller.await.unwrap();
    }
    let after = counted(&ledger);
    assert_eq!(after.2 - before.2, 32, "32 writes answered");
    assert!(
        after.0 - before.0 <= 2,
        "32 queued writes took {} commits; they should share one (two if the writer thread \
         had taken the first before the connection was held)",
        after.0 - before.0
    );
    assert_eq!(
        after.1 - before.1,
        after.0 - before.0,
        "each of them durable"
    );
}

/// Polls `done` every few milliseconds for up to ten seconds; whether it came true.
fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..2_000 {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done()
}

/// The callers of writes queued for the writer, each answered with a `begin`.
type Callers = Vec<tokio::task::JoinHandle<Result<Begin>>>;

/// Queues a `begin` of each of `keys` for the writer thread (the connection held meanwhile,
/// so that none commits on its caller's thread), then lets the writer go; the callers.
fn begins_queued_for_the_writer(ledger: &Arc<SqliteLedger>, keys: &[String]) -> Callers {
    queued_for_the_writer(ledger, keys, |ledger, key| async move {
        ledger.begin(request(&key)).await
    })
}

/// [`begins_queued_for_the_writer`], each new key created as the gateway creates it
/// (`Ledger::create`), answered with the `begin` the create made.
fn creates_queued_for_the_writer(ledger: &Arc<SqliteLedger>, keys: &[String]) -> Callers {
    queued_for_the_writer(ledger, keys, |ledger, key| async move {
        match ledger.create(request(&key)).await? {
            Created::Begun(begun) => Ok(begun),
            Created::Found(intent) => panic!("a new key was found taken: {intent:?}"),
        }
    })
}

/// Queues `write` of each of `keys` for the writer thread, the connection held meanwhile;
/// the callers.
fn queued_for_the_writer<F>(
    ledger: &Arc<SqliteLedger>,
    keys: &[String],
    write: impl Fn(Arc<SqliteLedger>, String) -> F,
) -> Callers
where
    F: std::future::Future<Output = Result<Begin>> + Send + 'static,
{
    let Engine::Grouped { writer, queue, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    let queue = queue.as_ref().unwrap();
    let queued_before = queue.max_capacity() - queue.capacity();
    let busy = writer.lock().unwrap();
    let callers: Vec<_> = keys
        .iter()
        .map(|key| tokio::spawn(write(ledger.clone(), key.clone())))
        .collect();
    // The writer thread may have taken the first and wait for the connection with it.
    assert!(
        eventually(|| queue.max_capacity() - queue.capacity() + 1 >= queued_before + keys.len()),
        "the callers queued"
    );
    drop(busy);
    callers
}

fn syncer_hooks(ledger: &SqliteLedger) -> Arc<syncer::TestHooks> {
    ledger.sync_hooks.clone()
}

/// Strict durability under load: the writer thread commits batches of begins without an
/// fsync, and they are answered only after an fsync beside it. With more writes queued, the
/// syncer thread makes it and the writer commits the next batch meanwhile; the last batch's
/// the writer thread makes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_batches_are_answered_after_the_fsync_beside_the_writer_not_before() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Strict));
    let hooks = syncer_hooks(&ledger);
    let before = counted(&ledger);
    let held = hooks.hold.lock().unwrap();
    // More than one batch: the first leaves writes queued behind it.
    let keys: Vec<String> = (0..BATCH_MAX + 44)
        .map(|index| format!("order-{index}"))
        .collect();
    let callers = begins_queued_for_the_writer(&ledger, &keys);
    assert!(
        eventually(|| counted(&ledger).0 >= before.0 + 2),
        "the writer did not commit the second batch while the first one's fsync waited"
    );
    assert!(
        !hooks.synced_on.lock().unwrap().is_empty(),
        "no fsync began"
    );
    let committed = counted(&ledger);
    assert_eq!(committed.1, before.1, "nothing counted durable yet");
    assert!(
        callers.iter().all(|caller| !caller.is_finished()),
        "a begin was answered before its fsync"
    );
    drop(held);
    for caller in callers {
        let begun = caller.await.unwrap().expect("begin");
        assert!(matches!(begun, Begin::Execute(_)), "{begun:?}");
    }
    let after = counted(&ledger);
    assert!(after.1 >= committed.1 + 2, "the batches counted durable");
    let threads = hooks.synced_on.lock().unwrap().clone();
    for thread in ["intentgate-ledger-sync", WRITER_THREAD] {
        assert!(
            threads.iter().any(|name| name == thread),
            "no fsync on {thread}: {threads:?}"
        );
    }
}

/// A failed fsync beside the writer: every begin of the batch is answered with the error,
/// and the attempt each granted is recorded as never sent, so that nothing finds it in
/// flight (the sweeper would look it up and send it). The same key then executes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_beside_the_writer_undoes_the_attempts_it_was_to_make_durable() {
    for queue in [begins_queued_for_the_writer, creates_queued_for_the_writer] {
        attempts_undone_after_a_failed_fsync(queue).await;
    }
}

/// The writes `queue` makes (a `begin` of each key, or a `create`), whose fsync beside the
/// writer fails.
async fn attempts_undone_after_a_failed_fsync(queue: fn(&Arc<SqliteLedger>, &[String]) -> Callers) {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Strict));
    let hooks = syncer_hooks(&ledger);
    hooks.fail.store(true, Ordering::SeqCst);
    let keys: Vec<String> = (0..4).map(|index| format!("order-{index}")).collect();
    let callers = queue(&ledger, &keys);
    for caller in callers {
        let error = caller
            .await
            .unwrap()
            .expect_err("a begin whose fsync failed");
        assert!(error.to_string().contains("fsync failed"), "{error}");
    }
    hooks.fail.store(false, Ordering::SeqCst);
    for key in &keys {
        let intent = ledger
            .get(TENANT, TOOL, key)
            .await
            .unwrap()
            .expect("the intent");
        assert_eq!(intent.status, IntentStatus::NotExecuted, "{key}");
        assert_eq!(intent.resolved_by, None, "{key}");
        assert_eq!(intent.lease_owner, None, "{key}");
        let events = ledger.events(intent.id).await.unwrap();
        assert!(
            events
                .iter()
                .any(|event| event.actor.as_deref() == Some(UNDONE_BY)),
            "{key}: {events:?}"
        );
    }
    let again = execute(&ledger, "order-0").await;
    assert_eq!(again.attempt, 2, "the key executes again");
}

/// The thread of each commit, in order, as the commit hook sees it.
fn commit_threads(ledger: &SqliteLedger) -> Arc<Mutex<Vec<Option<String>>>> {
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    let committed_on = Arc::new(Mutex::new(Vec::new()));
    let hook = committed_on.clone();
    writer
        .lock()
        .unwrap()
        .connection
        .commit_hook(Some(move || {
            let name = std::thread::current().name().map(str::to_owned);
            hook.lock().unwrap().push(name);
            false
        }))
        .unwrap();
    committed_on
}

const WRITER_THREAD: &str = "intentgate-ledger-writer";

/// A write a call waits for, finding the writer idle, commits on its caller's thread; a
/// bookkeeping write (a repeat counted) goes to the writer thread, never holding up the
/// runtime thread that made it.
#[tokio::test(flavor = "current_thread")]
async fn a_lone_call_write_commits_on_its_callers_thread_and_bookkeeping_on_the_writers() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let threads = commit_threads(&ledger);
    let intent = execute(&ledger, "order-1").await;
    ledger
        .record_calls(vec![(intent.id, NOW_MS + 2)])
        .await
        .unwrap();
    let threads = threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 2);
    assert_ne!(
        threads[0].as_deref(),
        Some(WRITER_THREAD),
        "the lone begin went through the writer thread"
    );
    assert_eq!(threads[1].as_deref(), Some(WRITER_THREAD));
}

/// The WAL hook hands checkpoints to their own thread: once the WAL passes the threshold,
/// it is checkpointed (and, with nobody reading, started over) without a write waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_wal_is_checkpointed_by_the_checkpoint_thread() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    let checkpoints = || {
        let writer = writer.lock().unwrap();
        writer.checkpointer.as_ref().unwrap().checkpoints()
    };
    let mut index = 0;
    while checkpoints() == 0 {
        // A new intent writes about ten pages: a few hundred pass the threshold.
        for _ in 0..50 {
            let intent = execute(&ledger, &format!("order-{index}")).await;
            ledger.finish(done(&intent)).await.expect("finish");
            index += 1;
        }
        assert!(
            index < 20_000,
            "no checkpoint after {index} intents: the checkpoint thread never ran"
        );
    }
}

/// A checkpoint leaves the WAL as long as it was, so a thread woken whenever the WAL is past
/// the threshold would checkpoint (two fsyncs) after nearly every commit of a steady stream:
/// it is woken once per `CHECKPOINT_PAGES` of growth instead, for a few passes at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_of_writes_is_checkpointed_per_thousand_pages_not_per_commit() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    // About ten pages a new intent and a few its finish: some 15,000 pages in all.
    for index in 0..1_000 {
        let intent = execute(&ledger, &format!("order-{index}")).await;
        ledger.finish(done(&intent)).await.expect("finish");
    }
    let commits = ledger.commit_counts().commits.load(Ordering::Relaxed);
    let checkpoints = writer
        .lock()
        .unwrap()
        .checkpointer
        .as_ref()
        .unwrap()
        .checkpoints();
    assert!(checkpoints > 0, "the checkpoint thread never ran");
    let bound = 30 * checkpoint::CHECKPOINT_PASSES_MAX as u64;
    assert!(
        checkpoints <= bound,
        "{checkpoints} checkpoints for {commits} commits: more than {bound}"
    );
}

/// With the checkpoint thread gone, the writer checkpoints itself once the WAL passes
/// `CHECKPOINT_PAGES_INLINE`, between batches: every write still succeeds, and the WAL
/// starts over instead of growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wal_the_thread_did_not_checkpoint_is_checkpointed_by_the_writer() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    writer.lock().unwrap().checkpointer.as_mut().unwrap().stop();
    let wal_pages = || {
        let writer = writer.lock().unwrap();
        writer.checkpointer.as_ref().unwrap().wal_pages()
    };
    let mut most = 0;
    for index in 0..3_000 {
        let intent = execute(&ledger, &format!("order-{index}")).await;
        ledger.finish(done(&intent)).await.expect("finish");
        let pages = wal_pages();
        if pages < most {
            // Started over after the writer's checkpoint, which the thread's threshold did
            // not bring about (last seen after a `finish`, a `begin` or so before it).
            assert!(
                most > checkpoint::CHECKPOINT_PAGES_INLINE - 100,
                "{most} pages"
            );
            return;
        }
        most = pages;
    }
    panic!("the WAL grew to {most} pages and was never started over");
}

fn page_size(path: &std::path::Path) -> u32 {
    let connection = Connection::open(path).unwrap();
    connection
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap()
}

/// A new ledger file gets the smaller pages its commits are measured with; a file made
/// before, with SQLite's default, keeps its pages and serves as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ledger_has_small_pages_and_an_existing_file_keeps_its_own() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Strict);
    execute(&ledger, "order-1").await;
    drop(ledger);
    assert_eq!(page_size(&folder.path().join("ledger.sqlite3")), PAGE_SIZE);

    let older = tempfile::tempdir().unwrap();
    let path = older.path().join("ledger.sqlite3");
    let connection = Connection::open(&path).unwrap();
    connection
        .execute_batch("PRAGMA page_size = 4096; CREATE TABLE made_before (x INTEGER);")
        .unwrap();
    drop(connection);
    let ledger = open(&older, Durability::Strict);
    execute(&ledger, "order-1").await;
    drop(ledger);
    assert_eq!(page_size(&path), 4096);
}

/// The WAL frames each commit of an inline ledger appends, in commit order, read by a WAL
/// hook on the write connection (which also stops SQLite's own checkpoints, so the WAL only
/// grows and the difference between two commits is what the later one wrote).
fn frames_per_commit(ledger: &SqliteLedger) -> Arc<Mutex<Vec<i32>>> {
    let Engine::Inline { writer } = &ledger.engine else {
        panic!("an inline ledger");
    };
    let frames = Arc::new(Mutex::new(Vec::new()));
    let hook = frames.clone();
    let last = std::sync::atomic::AtomicI32::new(0);
    writer
        .lock()
        .unwrap()
        .connection
        .wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            let before = last.swap(pages, Ordering::Relaxed);
            hook.lock().unwrap().push(pages - before);
            Ok(())
        }))
        .unwrap();
    frames
}

/// Frames a new intent's `begin` and its `finish` append to the WAL over a run of new
/// intents (the median of each, and the mean), on a ledger that already holds a thousand
/// intents, so that its b-trees have more than one level.
async fn frames_of_new_intents(durability: Durability) -> Frames {
    let folder = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(
        folder.path().join("ledger.sqlite3"),
        SqliteOptions::inline(durability),
    )
    .expect("open");
    for index in 0..1_000 {
        let intent = execute(&ledger, &format!("warm-{index:05}")).await;
        ledger.finish(done(&intent)).await.expect("finish");
    }
    let frames = frames_per_commit(&ledger);
    // The first commit after the hook is set counts the frames before it: one to skip.
    let intent = execute(&ledger, "order-first").await;
    ledger.finish(done(&intent)).await.expect("finish");
    frames.lock().unwrap().clear();
    let (mut begins, mut finishes) = (Vec::new(), Vec::new());
    for index in 0..100 {
        let intent = execute(&ledger, &format!("order-{index:05}")).await;
        let begun = frames.lock().unwrap().drain(..).collect::<Vec<_>>();
        ledger.finish(done(&intent)).await.expect("finish");
        let finished = frames.lock().unwrap().drain(..).collect::<Vec<_>>();
        assert_eq!((begun.len(), finished.len()), (1, 1), "one commit each");
        begins.push(begun[0]);
        finishes.push(finished[0]);
    }
    Frames::of(begins, finishes)
}

/// WAL frames per commit over a run: medians and means.
#[derive(Debug)]
struct Frames {
    begin_median: i32,
    begin_mean: f64,
    finish_median: i32,
    finish_mean: f64,
}

impl Frames {
    fn of(mut begins: Vec<i32>, mut finishes: Vec<i32>) -> Frames {
        let mean = |frames: &[i32]| {
            frames.iter().map(|&n| f64::from(n)).sum::<f64>() / frames.len() as f64
        };
        let (begin_mean, finish_mean) = (mean(&begins), mean(&finishes));
        begins.sort_unstable();
        finishes.sort_unstable();
        Frames {
            begin_median: begins[begins.len() / 2],
            begin_mean,
            finish_median: finishes[finishes.len() / 2],
            finish_mean,
        }
    }
}

/// The durable write a new intent needs before its request leaves is small: its `begin`
/// appends few WAL frames, and the rest of its record comes with its `finish`.
#[tokio::test(flavor = "current_thread")]
async fn a_new_intent_writes_few_wal_frames_before_its_request_leaves() {
    for durability in [Durability::Strict, Durability::Relaxed] {
        let frames = frames_of_new_intents(durability).await;
        // Printed for the record (`cargo test ... -- --nocapture`).
        eprintln!("{durability:?}: {frames:?}");
        // Its narrow row and that row's key (the wide row, its seven indexes and two event
        // b-trees took 13 frames at the median).
        assert_eq!(frames.begin_median, 2, "{durability:?}: {frames:?}");
        assert!(frames.begin_mean < 3.0, "{durability:?}: {frames:?}");
        // The wide row, its indexes and its events come with the finish, in one commit
        // that is not fsynced on its own.
        assert!(
            frames.finish_median >= 10 && frames.finish_mean >= 10.0,
            "{durability:?}: {frames:?}"
        );
    }
}

/// A WAL that a reader kept from starting over outgrows the threshold and, on a small disk,
/// fills it: then every write fails and no commit wakes the checkpoint thread. A failed
/// write wakes it instead, and once its checkpoint has copied the frames the next write
/// starts the WAL over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_wakes_the_checkpoint_thread_when_the_wal_is_long() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    // Checkpoints run so far, and the WAL's pages after the last commit.
    let checkpoints = || {
        let writer = writer.lock().unwrap();
        let checkpointer = writer.checkpointer.as_ref().unwrap();
        (checkpointer.checkpoints(), checkpointer.wal_pages())
    };
    // A reader inside a read transaction from the start: checkpoints can't copy past its
    // snapshot, and the WAL can't start over.
    let reader = open_connection(&ledger.path, true).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM intents", [], |row| row.get(0))
        .unwrap();
    let mut index = 0;
    while checkpoints().0 == 0 || checkpoints().1 < checkpoint::CHECKPOINT_PAGES {
        let intent = execute(&ledger, &format!("order-{index}")).await;
        ledger.finish(done(&intent)).await.expect("finish");
        index += 1;
        assert!(index < 20_000, "the WAL never passed the threshold");
    }
    // The thread's wake-up at the threshold is spent (with nothing copied) once its count
    // stops moving. The reader goes.
    let mut last = checkpoints().0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if checkpoints().0 == last {
            break;
        }
        last = checkpoints().0;
    }
    reader.execute_batch("COMMIT").unwrap();
    drop(reader);
    let (spent, pages) = checkpoints();

    // A write that fails: a finish of an intent that does not exist.
    let missing = IntentRecord {
        id: 999_999,
        ..execute(&ledger, "order-last").await
    };
    assert!(ledger.finish(done(&missing)).await.is_err());
    let mut waited = Duration::ZERO;
    while checkpoints().0 == spent && waited < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    assert!(
        checkpoints().0 > spent,
        "the failed write did not wake the checkpoint thread (WAL of {pages} pages, \
         {spent} checkpoints before)"
    );
    // The frames copied, a next write starts the WAL over.
    for attempt in 0..100 {
        let intent = execute(&ledger, &format!("order-after-{attempt}")).await;
        ledger.finish(done(&intent)).await.expect("finish");
        if checkpoints().1 < pages {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        checkpoints().1 < pages,
        "the WAL did not start over after the checkpoint: {} pages, {pages} before",
        checkpoints().1
    );
}

/// A write whose failure makes SQLite roll back the batch's whole transaction (a full disk,
/// an I/O error) must not leave the writes after it to commit one by one outside the batch,
/// answered as failed while they are in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writes_after_one_that_rolled_back_the_batch_are_not_made() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Strict);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    // The first write ends the transaction as SQLite does after such an error.
    let (first, first_answer) = ledger.job(
        Durable::No,
        None,
        None,
        |connection| {
            connection.execute_batch("ROLLBACK")?;
            Err::<(), _>(LedgerError::Storage("database or disk is full".to_owned()))
        },
        |_| None,
    );
    let (second, second_answer) = ledger.job(
        Durable::No,
        None,
        None,
        |connection| {
            connection.execute_batch("CREATE TABLE written_after (a)")?;
            Ok(())
        },
        |_| None,
    );
    writer
        .lock()
        .unwrap()
        .commit(vec![first, second], true, false);
    assert!(first_answer.await.unwrap().is_err());
    let second = second_answer.await.unwrap();
    assert!(second.is_err(), "the second write was answered as made");
    let made: bool = ledger
        .read(|connection| {
            Ok(connection.query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = 'written_after')",
                [],
                |row| row.get(0),
            )?)
        })
        .unwrap();
    assert!(
        !made,
        "the write after the one that rolled back the batch committed on its own: {second:?}"
    );
}

/// A write connection left failing every statement (as SQLite can leave one after a full
/// disk or an I/O error) is opened again after the next failed write, so that the ledger
/// writes again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_connection_that_fails_its_reads_is_opened_again_after_a_failed_write() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Strict);
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    // Stands in for a connection stuck in an error state: every statement fails.
    let broken = folder.path().join("not-a-ledger.db");
    std::fs::write(&broken, vec![0x5Au8; 8192]).unwrap();
    writer.lock().unwrap().connection = open_connection(&broken, false).unwrap();

    let failed = ledger.begin(request("order-1")).await;
    assert!(
        failed.is_err(),
        "a write on the broken connection succeeded"
    );
    // The failed write replaced the connection: the next one is made, in the ledger's file.
    let intent = execute(&ledger, "order-2").await;
    ledger.finish(done(&intent)).await.expect("finish");
    let read = ledger.get_by_id(intent.id).await.unwrap().unwrap();
    assert_eq!(read.status, IntentStatus::Done);
}

/// What a ledger holds of one intent after `writes`: its row, and its events without their
/// ids (which count every event of the file).
async fn after_writes(moved_first: bool, writes: &[&str]) -> (IntentRecord, Vec<Event>) {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    let intent = execute(&ledger, "order-1").await;
    for write in writes {
        if moved_first {
            // A read of many intents moves every begun one to `intents` first.
            ledger.list(IntentId::MIN, 10).await.expect("list");
        }
        match *write {
            "repeat" => {
                let repeat = BeginRequest {
                    now_ms: NOW_MS + 5,
                    ..request("order-1")
                };
                ledger.begin(repeat).await.expect("repeat");
            }
            "renew" => {
                let renew = Renew {
                    id: intent.id,
                    lease_owner: OWNER.into(),
                    attempt: intent.attempt,
                    lease_expires_ms: NOW_MS + 120_000,
                    now_ms: NOW_MS + 10,
                };
                ledger.renew(renew).await.expect("renew");
            }
            "finish" => {
                ledger.finish(done(&intent)).await.expect("finish");
            }
            other => panic!("no write {other}"),
        }
    }
    let record = ledger
        .get_by_id(intent.id)
        .await
        .unwrap()
        .expect("the intent");
    let events = ledger
        .events(intent.id)
        .await
        .unwrap()
        .into_iter()
        .map(|event| Event { id: 0, ..event })
        .collect();
    (record, events)
}

/// A write of an intent still in its narrow begun row inserts its wide row as that write
/// leaves it, instead of moving the row and then changing it: the row and the event log
/// must come out as they do when the intent was moved before the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_a_begun_intent_leaves_what_a_write_after_its_move_leaves() {
    for writes in [
        &["finish"][..],
        &["repeat", "finish"],
        &["renew", "finish"],
        &["renew", "repeat", "finish"],
    ] {
        let direct = after_writes(false, writes).await;
        let moved = after_writes(true, writes).await;
        assert_eq!(direct, moved, "after {writes:?}");
        assert!(
            direct.1.len() >= 2 + writes.len(),
            "the creation's events and one per write at least, after {writes:?}: {:?}",
            direct.1
        );
    }
}

/// A write for the writer thread that tells `inside` once it runs, inside the writer's
/// transaction, then waits for `go`, and fails if `fails`; its caller.
fn waiting_write(
    ledger: &Arc<SqliteLedger>,
    fails: bool,
) -> (
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
    tokio::task::JoinHandle<Result<()>>,
) {
    let (inside, running) = std::sync::mpsc::channel();
    let (go, waiting) = std::sync::mpsc::channel();
    let ledger = ledger.clone();
    let caller = tokio::spawn(async move {
        ledger
            .write(Waiter::Background, false, None, move |_| {
                let _ = inside.send(());
                let _ = waiting.recv();
                if fails {
                    return Err(LedgerError::Storage("a write that fails".into()));
                }
                Ok(())
            })
            .await
    });
    (running, go, caller)
}

/// Waits, off the runtime's threads, until `running` is told.
async fn told(running: std::sync::mpsc::Receiver<()>) {
    tokio::task::spawn_blocking(move || running.recv().unwrap())
        .await
        .unwrap();
}

/// The settled epoch once the writer has let go of its connection.
async fn idle_epoch(ledger: &SqliteLedger) -> u64 {
    loop {
        if let Some(epoch) = ledger.settled_epoch().await {
            return epoch;
        }
        tokio::task::yield_now().await;
    }
}

/// While the writer runs a batch inside a transaction that holds the file's write lock, no
/// other connection can commit, so the settled epoch it confirmed when it took the lock is
/// still told: a repeat arriving then is answered from memory, not read.
///
/// How it went wrong: the epoch was told only when the writer's connection was free, so
/// under a stream of repeats (whose counts the writer commits every few milliseconds) and
/// new calls, a tenth of the repeats read the ledger again.
#[tokio::test]
async fn the_settled_epoch_is_told_while_the_writer_writes_under_the_write_lock() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Relaxed));
    let before = idle_epoch(&ledger).await;
    let (running, go, caller) = waiting_write(&ledger, false);
    told(running).await;

    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    assert!(
        writer.try_lock().is_err(),
        "the writer holds its connection"
    );
    let other = rusqlite::Connection::open(folder.path().join("ledger.sqlite3")).unwrap();
    other.busy_timeout(Duration::ZERO).unwrap();
    assert!(
        other.execute_batch("BEGIN IMMEDIATE").is_err(),
        "no other connection can begin a write meanwhile"
    );
    assert_eq!(ledger.settled_epoch().await, Some(before));

    go.send(()).unwrap();
    caller.await.unwrap().unwrap();
    assert_eq!(
        idle_epoch(&ledger).await,
        before,
        "its own commit moves nothing"
    );
}

/// Once a write of the batch has failed, SQLite may have rolled the whole transaction back
/// and let go of the write lock: another connection could commit, so the epoch is not told
/// until the writer can look at the counter again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failed_write_in_the_batch_the_settled_epoch_is_not_told() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Relaxed));
    let before = idle_epoch(&ledger).await;
    let Engine::Grouped { queue, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    let queue = queue.as_ref().unwrap();
    // The writer busy with a first write while a failing one and a waiting one queue, to
    // be committed together next.
    let (running, first_go, first) = waiting_write(&ledger, false);
    told(running).await;
    let (_, failing_go, failing) = waiting_write(&ledger, true);
    failing_go.send(()).unwrap();
    // Queued in this order: each caller is a task of its own, which may run late.
    assert!(
        eventually(|| queue.max_capacity() - queue.capacity() >= 1),
        "the failing write queued"
    );
    let (running, last_go, last) = waiting_write(&ledger, false);
    assert!(
        eventually(|| queue.max_capacity() - queue.capacity() >= 2),
        "the two writes queued"
    );
    first_go.send(()).unwrap();
    told(running).await;

    assert_eq!(ledger.settled_epoch().await, None);

    last_go.send(()).unwrap();
    first.await.unwrap().unwrap();
    assert!(failing.await.unwrap().is_err());
    last.await.unwrap().unwrap();
    assert_eq!(idle_epoch(&ledger).await, before);
}

/// The writer thread answers a batch once it has let go of the write connection: a caller it
/// answers that asks for the settled epoch at once (a repeat made right after a write) finds
/// it told, not left unconfirmed by the batch that answered it.
///
/// How it went wrong: the writer answered each write while it still held the connection, so
/// the first repeats after a create the writer thread had committed (with a queued finish)
/// each read the ledger until the writer let go of it, on a busy machine a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_the_writer_thread_answers_finds_the_settled_epoch_told() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = Arc::new(open(&folder, Durability::Relaxed));
    let intent = execute(&ledger, "order-1").await;
    let before = idle_epoch(&ledger).await;
    let Engine::Grouped { writer, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    // The writer thread waits once it has committed its next batch, holding the connection,
    // for 200 ms.
    let paused = writer.lock().unwrap().paused.clone();
    paused.store(true, Ordering::SeqCst);
    let resume = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        paused.store(false, Ordering::SeqCst);
    });
    // Counted calls always go to the writer thread.
    ledger
        .record_calls(vec![(intent.id, NOW_MS + 1)])
        .await
        .unwrap();
    assert_eq!(ledger.settled_epoch().await, Some(before));
    resume.join().unwrap();
}

/// A hold no test may wait for: one that did would time out instead.
const LONG_HOLD: Duration = Duration::from_secs(120);
/// What "at once" means to the tests of the hold, on a slow machine.
const PROMPTLY: Duration = Duration::from_secs(10);

/// An intent begun and its finish queued, then held by the writer thread (on a ledger with
/// no other finish queued): the intent, and the finish's answer.
async fn finish_held(ledger: &SqliteLedger, key: &str) -> (IntentRecord, QueuedFinish) {
    let intent = execute(ledger, key).await;
    let queued = ledger.finish_queued(done(&intent)).await.expect("queued");
    let Engine::Grouped { finishes, .. } = &ledger.engine else {
        panic!("a served ledger groups its writes");
    };
    assert!(
        eventually(|| finishes.queued.load(Ordering::SeqCst) == 0),
        "the writer thread took the finish"
    );
    // And parked in its hold.
    tokio::time::sleep(Duration::from_millis(50)).await;
    (intent, queued)
}

/// The answer of a queued finish, which must come without waiting for the hold.
async fn committed(queued: QueuedFinish) -> Finished {
    tokio::time::timeout(PROMPTLY, queued)
        .await
        .expect("the finish was committed without waiting for the hold")
        .expect("finish")
}

/// Finishes queued one after another, their callers answered, are held by the writer
/// thread and committed together: one transaction for the five, queued 30 ms apart (each
/// would have had its own, the writer idle in between), not one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishes_queued_one_after_another_are_committed_together() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    ledger.set_finish_hold(Duration::from_secs(2));
    let mut intents = Vec::new();
    for index in 0..5 {
        intents.push(execute(&ledger, &format!("order-{index}")).await);
    }
    let before = counted(&ledger);
    let mut queued = Vec::new();
    for intent in &intents {
        queued.push(ledger.finish_queued(done(intent)).await.expect("queued"));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for queued in queued {
        let finished = committed(queued).await;
        assert_eq!(
            expect_recorded(finished).status,
            IntentStatus::Done,
            "each finish recorded"
        );
    }
    let after = counted(&ledger);
    assert_eq!(after.2 - before.2, 5, "five writes answered");
    assert_eq!(after.0 - before.0, 1, "in one commit");
}

fn expect_recorded(finished: Finished) -> IntentRecord {
    match finished {
        Finished::Recorded(intent) => intent,
        other => panic!("expected the finish recorded, got {other:?}"),
    }
}

/// Nothing that waits for a held finish waits for the hold: a read of its intent, a read of
/// many intents, and a caller waiting for the intent's lease each have it committed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_or_a_wait_for_a_held_finish_has_it_committed_at_once() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    ledger.set_finish_hold(LONG_HOLD);

    let (intent, queued) = finish_held(&ledger, "order-read").await;
    let read = tokio::time::timeout(PROMPTLY, ledger.get(TENANT, TOOL, "order-read"))
        .await
        .expect("the read did not wait for the hold")
        .unwrap()
        .unwrap();
    assert_eq!(read.status, IntentStatus::Done);
    assert_eq!(read.id, intent.id);
    committed(queued).await;

    let (intent, queued) = finish_held(&ledger, "order-list").await;
    let page = tokio::time::timeout(PROMPTLY, ledger.list(0, 100))
        .await
        .expect("the read of many did not wait for the hold")
        .unwrap();
    let listed = page.iter().find(|found| found.id == intent.id).unwrap();
    assert_eq!(listed.status, IntentStatus::Done);
    committed(queued).await;

    // A waiter for the lease, woken by the finish's commit (or by its poll, after which
    // the finish must have been committed all the same).
    let (intent, queued) = finish_held(&ledger, "order-lease").await;
    tokio::time::timeout(PROMPTLY, ledger.wait_for_change(intent.id, PROMPTLY))
        .await
        .expect("the wait ends");
    committed(queued).await;
}

/// A write queued for the writer thread while it holds finishes ends the hold: a repeat's
/// count (bookkeeping, always the writer thread's) is committed at once, the held finish
/// with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_queued_during_a_hold_ends_it() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    ledger.set_finish_hold(LONG_HOLD);
    let (intent, queued) = finish_held(&ledger, "order-1").await;
    tokio::time::timeout(PROMPTLY, ledger.record_calls(vec![(intent.id, NOW_MS + 2)]))
        .await
        .expect("the count did not wait for the hold")
        .unwrap();
    committed(queued).await;
}

/// Finishes waiting in the writer's queue don't send a call's write there: with the writer
/// holding one finish and two more queued behind it, a new intent's `begin` still commits
/// on its caller's thread, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_write_commits_on_its_own_thread_past_queued_finishes() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    ledger.set_finish_hold(LONG_HOLD);
    let mut queued = vec![finish_held(&ledger, "held-0").await.1];
    for index in 1..3 {
        let intent = execute(&ledger, &format!("held-{index}")).await;
        queued.push(ledger.finish_queued(done(&intent)).await.expect("queued"));
    }
    let threads = commit_threads(&ledger);
    tokio::time::timeout(PROMPTLY, execute(&ledger, "order-new"))
        .await
        .expect("the begin did not wait for the hold");
    let threads = threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 1, "the begin's commit alone: {threads:?}");
    assert_ne!(threads[0].as_deref(), Some(WRITER_THREAD), "{threads:?}");
    tokio::time::timeout(PROMPTLY, ledger.drain_queued())
        .await
        .expect("drained without waiting for the hold");
    for queued in queued {
        committed(queued).await;
    }
}

/// Dropping the ledger while its writer holds a finish neither waits for the hold nor loses
/// the finish: it is committed before the writer stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_finish_is_committed_when_the_ledger_is_dropped() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = open(&folder, Durability::Relaxed);
    ledger.set_finish_hold(LONG_HOLD);
    let (intent, queued) = finish_held(&ledger, "order-1").await;
    let dropped = tokio::task::spawn_blocking(move || drop(ledger));
    tokio::time::timeout(PROMPTLY, dropped)
        .await
        .expect("the drop did not wait for the hold")
        .unwrap();
    assert_eq!(
        expect_recorded(committed(queued).await).status,
        IntentStatus::Done
    );
    let reopened = open(&folder, Durability::Relaxed);
    let stored = reopened.get_by_id(intent.id).await.unwrap().unwrap();
    assert_eq!(stored.status, IntentStatus::Done);
}

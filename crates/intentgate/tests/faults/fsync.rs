//! A failing fsync under the SQLite ledger: the replica's syncs of the ledger's files answer
//! EIO for a while in the middle of a storm, then succeed again; afterwards the replica is
//! killed and restarted on the same file.
//!
//! The failure is injected where the program meets the kernel: `fail_fsync.c`, compiled here
//! with `cc` and loaded with `LD_PRELOAD` into `intentgate serve`, answers `fsync`,
//! `fdatasync`, `syncfs` and `sync_file_range` on a file of the ledger's folder with EIO
//! while a flag file exists. It counts the calls it sees, and the test requires both
//! failed and successful ones, so that it can't pass with a shim the ledger never calls.
//!
//! A second test kills the replica right after a `begin` whose fsync failed, before any
//! later commit, and checks that the restarted replica neither sends that intent nor finds
//! it in flight.
//!
//! Without `cc` both print why they are skipped; with `CI=true` they fail instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    Answer, CALLS_PER_INTENT, Fleet, Recovery, check_promises, count, effects_per_intent, orders,
    probe_readiness, recover, together,
};

/// Tool timeout: the provider answers at once (or after [`HELD_MS`]); the fault under test
/// is the disk's.
const FSYNC_TIMEOUT_MS: u64 = 2_000;
/// Intents of each storm.
const FSYNC_GROUP: usize = 10;
/// How long the provider holds its answers during the storm the fault begins in, so that
/// calls are on their way when the syncs start failing.
const HELD_MS: u64 = 300;
/// Fresh intents called once each while every sync fails.
const FAILING_PROBES: usize = 10;

/// The shim's source, checked in beside this file.
const SHIM_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/faults/fail_fsync.c");

/// `fail_fsync.c` compiled into `folder`, or why it could not be (no C compiler).
fn compile_shim(folder: &Path) -> Result<PathBuf, String> {
    let library = folder.join("libfail_fsync.so");
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
        .arg(&library)
        .arg(SHIM_SOURCE)
        .arg("-ldl")
        .output()
        .map_err(|error| format!("can't run cc ({error})"))?;
    // A compiler that runs and refuses the shim is a bug here, not a missing tool.
    assert!(
        output.status.success(),
        "cc could not compile {SHIM_SOURCE}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(library)
}

/// The shim compiled for one scenario: the ledger's folder it fails syncs under, the flag
/// file that turns the failure on, and the file it counts syncs in.
struct Shim {
    ledger: PathBuf,
    flag: PathBuf,
    count_file: PathBuf,
    /// What a replica's environment needs for the shim to be loaded and configured.
    env: Vec<(&'static str, String)>,
}

impl Shim {
    /// Compiles the shim into the fleet's folder, or answers None when `name` must be
    /// skipped (no `cc`; with CI=true that fails the test instead).
    fn build(name: &str, fleet: &Fleet) -> Option<Shim> {
        let library = match compile_shim(fleet.folder.path()) {
            Ok(library) => library,
            Err(why) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "{name}: {why}, and with CI=true the fault suite must run, not be skipped"
                );
                println!("{name}: skipped: {why}; install a C compiler (cc) to build the shim");
                return None;
            }
        };
        // The shim compares the paths the kernel gives for the ledger's descriptors, which
        // are canonical.
        let folder = fleet.folder.path().join("ledger");
        std::fs::create_dir(&folder).unwrap();
        let folder = folder.canonicalize().unwrap();
        let flag = fleet.folder.path().join("fsync-fails");
        let count_file = fleet.folder.path().join("fsync-calls");
        let env = vec![
            ("LD_PRELOAD", library.to_str().unwrap().to_owned()),
            (
                "INTENTGATE_FSYNC_FAIL_UNDER",
                folder.to_str().unwrap().to_owned(),
            ),
            (
                "INTENTGATE_FSYNC_FAIL_FLAG",
                flag.to_str().unwrap().to_owned(),
            ),
            (
                "INTENTGATE_FSYNC_FAIL_COUNT",
                count_file.to_str().unwrap().to_owned(),
            ),
        ];
        Some(Shim {
            ledger: folder.join("ledger.db"),
            flag,
            count_file,
            env,
        })
    }

    /// Starts a replica on the shim's ledger with the shim loaded.
    fn add_replica(&self, fleet: &mut Fleet) -> usize {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        let mock_url = fleet.mock.url.clone();
        fleet.add_replica_with_env(self.ledger.to_str().unwrap(), &mock_url, None, &env)
    }

    /// From now on, every sync of the ledger's files fails with EIO.
    fn fail(&self) {
        std::fs::write(&self.flag, b"").unwrap();
    }

    /// From now on, the ledger's syncs go through again.
    fn heal(&self) {
        std::fs::remove_file(&self.flag).unwrap();
    }

    /// Syncs of the ledger's files so far: those that went through and those that failed.
    fn syncs(&self) -> (usize, usize) {
        let marks = std::fs::read(&self.count_file).unwrap_or_default();
        let through = marks.iter().filter(|mark| **mark == b's').count();
        let failed = marks.iter().filter(|mark| **mark == b'f').count();
        (through, failed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_fsync_under_the_sqlite_ledger_sends_nothing_unrecorded_and_loses_nothing() {
    let name = "failing fsync under the SQLite ledger";
    let mut fleet = Fleet::new(name, FSYNC_TIMEOUT_MS, 1).await;
    let Some(shim) = Shim::build(name, &fleet) else {
        return;
    };
    shim.add_replica(&mut fleet);
    let fleet = Arc::new(fleet);
    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe = probe_readiness(&fleet, stop_probe.clone());

    // Group a: a storm while the disk syncs.
    let group_a = orders("a", FSYNC_GROUP);
    let mut answers = fleet.storm(&group_a, together).await;
    let (synced_before, _) = shim.syncs();

    // Group m: a storm with the provider's answers held, and the syncs failing from the
    // moment its calls are on their way.
    fleet
        .faults(json!({"latency_p50_ms": HELD_MS, "latency_p95_ms": HELD_MS}))
        .await;
    let group_m = orders("m", FSYNC_GROUP);
    let mut in_flight = tokio::task::JoinSet::new();
    for order in &group_m {
        for _ in 0..CALLS_PER_INTENT {
            let (fleet, order) = (fleet.clone(), order.clone());
            in_flight.spawn(async move { (order.clone(), fleet.try_call(0, &order).await) });
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    shim.fail();
    let failing_from = Instant::now();
    let answers_m: Vec<(String, Answer)> = in_flight.join_all().await;
    fleet.faults(json!({})).await;

    // Group f: fresh intents called once each while every sync fails.
    let mut answers_f: Vec<(String, Answer)> = Vec::new();
    for order in orders("f", FAILING_PROBES) {
        let answer = fleet.try_call(0, &order).await;
        answers_f.push((order, answer));
    }
    // What the operator sees while the syncs fail.
    let ready_while_failing = fleet
        .client
        .get(format!("{}/readyz", fleet.url(0)))
        .send()
        .await
        .unwrap();
    let ready_status_while_failing = ready_while_failing.status().as_u16();
    let ready_body_while_failing = ready_while_failing.text().await.unwrap_or_default();
    let metric_while_failing = fleet.calls_metric().await;
    let (effects_failing, _) = fleet.effects().await;
    let failing_for = failing_from.elapsed();
    // A call answered "nothing was executed" sent nothing.
    let sent_unrecorded: Vec<&String> = answers_f
        .iter()
        .filter(|(order, answer)| answer == "http_503" && effects_failing.contains_key(order))
        .map(|(order, _)| order)
        .collect();

    // The disk syncs again: how long until a fresh call is served.
    shim.heal();
    let fixed_at = Instant::now();
    let group_f: Vec<String> = answers_f.iter().map(|(order, _)| order.clone()).collect();
    let Recovery {
        served_again_in,
        all,
        answers_r,
        answers_after,
        statuses,
        effects,
        settled_in,
        recovered_in,
        readiness,
        ready_after,
    } = recover(
        &fleet,
        name,
        "the syncs succeed again",
        fixed_at,
        vec![group_a, group_m, group_f],
        FSYNC_GROUP,
        (stop_probe, probe),
    )
    .await;
    answers.extend(answers_r);
    let (_, duplicates) = fleet.effects().await;
    answers.extend(answers_m.clone());
    answers.extend(answers_f.clone());
    answers.extend(answers_after.clone());
    let metric = fleet.calls_metric().await;
    check_promises(
        name,
        &all,
        &answers,
        &statuses,
        &effects,
        &duplicates,
        false,
    );
    let (synced, failed) = shim.syncs();
    let log = std::fs::read_to_string(&fleet.log).unwrap_or_default();
    let fsync_lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("fsync failed"))
        .collect();
    let first_fsync_line = fsync_lines.first().map(|line| line.to_string());
    let fsync_line_count = fsync_lines.len();

    // The replica is killed and started again on the same file: every intent whose
    // caller was told it happened is still there, done, with its one effect.
    let mut fleet =
        Arc::try_unwrap(fleet).unwrap_or_else(|_| panic!("{name}: a task still holds the fleet"));
    fleet.replicas.get_mut().unwrap()[0].kill();
    fleet.replicas.get_mut().unwrap().clear();
    shim.add_replica(&mut fleet);
    let acknowledged: Vec<String> = all
        .iter()
        .filter(|order| {
            answers.iter().any(|(asked, answer)| {
                asked == *order && matches!(answer.as_str(), "done" | "already_done")
            })
        })
        .cloned()
        .collect();
    let mut after_restart = std::collections::BTreeMap::new();
    for order in &all {
        after_restart.insert(order.clone(), fleet.status(0, order).await);
    }
    let (effects_restart, duplicates_restart) = fleet.effects().await;
    let not_kept: Vec<String> = acknowledged
        .iter()
        .filter(|order| {
            after_restart[*order] != "done" || effects_restart.get(*order).copied() != Some(1)
        })
        .map(|order| {
            format!(
                "{order}: {} with {} effects",
                after_restart[order],
                effects_restart.get(order).copied().unwrap_or(0)
            )
        })
        .collect();
    check_promises(
        name,
        &all,
        &answers,
        &after_restart,
        &effects_restart,
        &duplicates_restart,
        false,
    );

    let notices = fleet.notices();
    println!(
        "{name}: intents {}, calls {}, effects per intent {:?}, syncs of the ledger's files \
         {synced} through and {failed} failed ({synced_before} before the fault), storm in \
         flight when the syncs began failing {:?}, fresh calls while they failed {:?}, \
         failing for {failing_for:?}, /readyz while failing {ready_status_while_failing} \
         {ready_body_while_failing}, calls metric while failing {metric_while_failing:?}, \
         served again {served_again_in:?} after the syncs succeeded again, settled \
         {settled_in:?} after the last storm, recovered {recovered_in:?} after the fault, \
         /readyz at the end {ready_after}, answers after {:?}, /readyz not ready {:?} times \
         (ready {:?}) saying {:?}, log lines naming the failed fsync {fsync_line_count} \
         (first {first_fsync_line:?}), calls metric {metric:?}, after the restart \
         {} acknowledged intents of which not kept {not_kept:?}, statuses after the restart \
         {:?}, owner's notices {notices:?}",
        all.len(),
        answers.len(),
        effects_per_intent(&all, &effects_restart),
        count(answers_m.iter().map(|(_, answer)| answer)),
        count(answers_f.iter().map(|(_, answer)| answer)),
        count(answers_after.iter().map(|(_, answer)| answer)),
        readiness.not_ready,
        readiness.ready,
        readiness.detail,
        acknowledged.len(),
        count(after_restart.values()),
    );
    assert!(
        synced_before > 0 && failed > 0,
        "{name}: the shim saw {synced_before} syncs of the ledger before the fault and \
         failed {failed}: the ledger's syncs did not go through it"
    );
    assert!(
        answers_f.iter().all(|(_, answer)| answer == "http_503"),
        "{name}: fresh calls were served while every sync failed: {answers_f:?}"
    );
    assert!(
        sent_unrecorded.is_empty(),
        "{name}: calls answered \"nothing was executed\" were sent: {sent_unrecorded:?}"
    );
    assert!(
        fleet.problems.lock().unwrap().is_empty(),
        "{name}: answers other than 200 and 503 (nothing executed): {:?}",
        fleet.problems.lock().unwrap()
    );
    assert!(
        metric_while_failing
            .get("ledger_unavailable")
            .copied()
            .unwrap_or(0)
            >= FAILING_PROBES as u64,
        "{name}: the calls metric did not count the refusals: {metric_while_failing:?}"
    );
    assert!(
        readiness.not_ready.get(&0).copied().unwrap_or(0) > 0,
        "{name}: the operator's probe never saw /readyz not ready while syncs failed"
    );
    assert_eq!(
        ready_status_while_failing, 503,
        "{name}: /readyz said ready while every sync failed: {ready_body_while_failing}"
    );
    assert_eq!(
        ready_after, 200,
        "{name}: /readyz not ready once the syncs succeeded again"
    );
    assert!(
        fsync_line_count > 0,
        "{name}: no log line says the fsync failed"
    );
    assert!(
        not_kept.is_empty(),
        "{name}: acknowledged intents not kept across the restart: {not_kept:?}"
    );
}

/// How long the restarted replica is watched for sending an intent it should not have:
/// longer than a sweep (every 10 s), which takes over a dead process's intents at once.
const WATCHED_AFTER_RESTART: Duration = Duration::from_secs(12);

/// Regression: a `begin` whose commit failed on the fsync was answered 503 "nothing was
/// executed", but its pages stayed in the WAL file with their commit mark. A replica killed
/// before its next commit left them there; the restarted replica rebuilt the WAL index from
/// the file, found the intent `in_flight` with a dead owner, and its sweeper sent the refund
/// within seconds, although nobody had asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_begin_whose_fsync_failed_is_not_found_nor_sent_after_a_restart() {
    let name = "begin whose fsync failed, then a restart";
    let mut fleet = Fleet::new(name, FSYNC_TIMEOUT_MS, 1).await;
    let Some(shim) = Shim::build(name, &fleet) else {
        return;
    };
    shim.add_replica(&mut fleet);
    let before = fleet.try_call(0, "before").await;
    shim.fail();
    let refused = fleet.try_call(0, "refused").await;
    // Killed at once, before any later commit of its own can take the failed one's place.
    fleet.replicas.get_mut().unwrap()[0].kill();
    shim.heal();
    fleet.replicas.get_mut().unwrap().clear();
    shim.add_replica(&mut fleet);
    let found_at_restart = fleet.status(0, "refused").await;
    tokio::time::sleep(WATCHED_AFTER_RESTART).await;
    let found_later = fleet.status(0, "refused").await;
    let (effects, _) = fleet.effects().await;
    let (_, failed) = shim.syncs();
    println!(
        "{name}: answered {before} before the fault, {refused} while the fsync failed; after \
         the restart the intent is {found_at_restart}, {found_later} {WATCHED_AFTER_RESTART:?} \
         later, effects {effects:?}, syncs failed {failed}"
    );
    assert_eq!(before, "done", "{name}: the call before the fault");
    assert_eq!(
        refused, "http_503",
        "{name}: a call whose begin could not be synced was not refused"
    );
    assert!(failed > 0, "{name}: the shim failed no sync");
    // Missing when SQLite's own commit failed on the fsync (a lone call commits on its
    // caller's thread), recorded as never sent when the fsync that failed followed the commit
    // (a call the writer thread committed, the ledger being busy): never in flight.
    let never_sent = |status: &str| matches!(status, "missing" | "not_executed");
    assert!(
        never_sent(&found_at_restart) && never_sent(&found_later),
        "{name}: the intent answered \"nothing was executed\" came back after the restart \
         ({found_at_restart}, then {found_later})"
    );
    assert_eq!(
        effects.get("refused"),
        None,
        "{name}: the intent answered \"nothing was executed\" was sent after the restart"
    );
}

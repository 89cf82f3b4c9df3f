//! A rolling upgrade under a retry storm: three replicas of the previous release (the commit
//! named in `previous-release`, built by `.ci/previous-release` and given as
//! `INTENTGATE_PREVIOUS_BIN`) serve one ledger, a PostgreSQL schema or a SQLite file shared
//! by processes on this host; mid-storm each is stopped gracefully and replaced by the
//! binary under test, one at a time. The first new one
//! migrates the schema while the two old ones still serve; the storm goes on across every
//! replacement. Then the promises are checked as in every scenario, and what an old binary
//! does once the schema is past it: one still running keeps serving, one started anew is
//! refused.
//!
//! Needs `INTENTGATE_PREVIOUS_BIN`, and `DATABASE_URL` on PostgreSQL; without them a scenario
//! prints why it is skipped, and with `CI=true` it fails instead.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{self, Running, Schema, connect, database_url};
use super::{
    Answer, FAILOVER_FAULTS, Fleet, check_promises, count, effects_per_intent, orders,
    probe_readiness,
};

/// The file naming the previous release, read by `.ci/previous-release` too: comment lines
/// (`#`), then the commit.
const PREVIOUS_RELEASE: &str = include_str!("previous-release");
/// Replicas in the fleet, each replaced once.
const REPLICAS: usize = 3;
/// Intents of the storm; they start [`INTENT_EVERY`] apart, so the storm outlasts the
/// three replacements.
const UPGRADE_INTENTS: usize = 48;
const INTENT_EVERY: Duration = Duration::from_millis(150);
/// Tool timeout: the provider answers at once here; the fault under test is the upgrade.
const UPGRADE_TIMEOUT_MS: u64 = 2_000;
/// How long the storm runs on the previous release alone before the first replacement.
const UPGRADE_AFTER: Duration = Duration::from_millis(1_500);
/// The pause between one replacement ready and the next stop, as an operator's rollout
/// waits for the new replica's readiness.
const BETWEEN_REPLACEMENTS: Duration = Duration::from_millis(1_000);
/// Longest a graceful stop may take: the server's shutdown grace and a margin.
const STOP_MAX: Duration = Duration::from_secs(40);

/// The commit of the previous release, from [`PREVIOUS_RELEASE`].
fn previous_release() -> &'static str {
    PREVIOUS_RELEASE
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#'))
        .expect("previous-release names a commit")
}

/// The previous release's binary (`INTENTGATE_PREVIOUS_BIN`), or None (with a message) when
/// it is not given. With CI=true that fails the test instead.
fn previous_binary(test: &str) -> Option<PathBuf> {
    let commit = previous_release();
    let Some(binary) =
        std::env::var_os("INTENTGATE_PREVIOUS_BIN").filter(|value| !value.is_empty())
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: INTENTGATE_PREVIOUS_BIN is not set, and with CI=true the fault suite must \
             run, not be skipped; .ci/run sets it (.ci/previous-release builds commit {commit})"
        );
        println!(
            "{test}: skipped: INTENTGATE_PREVIOUS_BIN is not set; build the previous release \
             (commit {commit}) with .ci/previous-release and set it to the path it prints"
        );
        return None;
    };
    let binary = PathBuf::from(binary);
    assert!(
        binary.is_file(),
        "{test}: INTENTGATE_PREVIOUS_BIN names {}, which is not a file; build it with \
         .ci/previous-release",
        binary.display()
    );
    // The build script's stamp, beside the binary, says which commit it is.
    if let Ok(stamp) = std::fs::read_to_string(binary.with_file_name("built.stamp")) {
        assert_eq!(
            stamp.trim(),
            commit,
            "{test}: {} was built from another commit than previous-release names; run \
             .ci/previous-release again",
            binary.display()
        );
    }
    Some(binary)
}

/// Calls of intent `intent` are spread over three seconds, and intents start
/// [`INTENT_EVERY`] apart.
fn rolling(intent: usize, call: usize) -> Duration {
    INTENT_EVERY * intent as u32 + Duration::from_millis(call as u64 * 250)
}

impl Fleet {
    /// Stops replica `index` gracefully (SIGTERM) and waits until it has exited; answers how
    /// long that took. Its URL stays in the fleet, refusing connections, until it is replaced.
    async fn stop_replica(&self, index: usize) -> Duration {
        let pid = self.replicas.read().unwrap()[index].child.id();
        let started = Instant::now();
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(
            signalled.success(),
            "replica {index} could not be signalled"
        );
        loop {
            let exited = self.replicas.write().unwrap()[index]
                .child
                .try_wait()
                .unwrap();
            if exited.is_some() {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < STOP_MAX,
                "replica {index} did not stop within {STOP_MAX:?} of a SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Puts `replica` in the place of replica `index` (stopped), which is reaped.
    fn replace_replica(&self, index: usize, replica: Running) {
        let _stopped = std::mem::replace(&mut self.replicas.write().unwrap()[index], replica);
    }
}

/// The ledger the replicas share.
enum Shared {
    /// A schema of the test's own in the database at the URL.
    Postgres { url: String, schema: Schema },
    /// One SQLite file, the replicas processes on this host.
    Sqlite { path: PathBuf },
}

impl Shared {
    /// What `--ledger` names.
    fn ledger(&self) -> String {
        match self {
            Shared::Postgres { url, .. } => url.clone(),
            Shared::Sqlite { path } => path.to_str().unwrap().to_owned(),
        }
    }

    fn schema(&self) -> Option<&str> {
        match self {
            Shared::Postgres { schema, .. } => Some(&schema.name),
            Shared::Sqlite { .. } => None,
        }
    }

    /// The highest migration recorded and when it was applied (ms since the epoch).
    async fn version(&self) -> (i64, i64) {
        const LATEST: &str =
            "SELECT version, applied_ms FROM schema_migrations ORDER BY version DESC LIMIT 1";
        match self {
            Shared::Postgres { url, schema } => {
                let database = connect(url).await;
                database
                    .batch_execute(&format!("SET search_path TO \"{}\"", schema.name))
                    .await
                    .unwrap();
                let row = database.query_one(LATEST, &[]).await.unwrap();
                (row.get(0), row.get(1))
            }
            Shared::Sqlite { path } => {
                let database = rusqlite::Connection::open_with_flags(
                    path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
                )
                .unwrap();
                database
                    .query_row(LATEST, [], |row| Ok((row.get(0)?, row.get(1)?)))
                    .unwrap()
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What happened to one replacement.
struct Replacement {
    /// From the SIGTERM to the old process's exit.
    stopped_in: Duration,
    /// From the new process's start to its listening address printed (the ledger opened,
    /// the migration run when it is the first).
    ready_in: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_on_postgresql_under_a_retry_storm_keeps_every_promise() {
    let name = "rolling upgrade on PostgreSQL";
    let Some(url) = database_url(name) else {
        return;
    };
    let Some(previous) = previous_binary(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "faults_upgrade");
    let fleet = Fleet::new(name, UPGRADE_TIMEOUT_MS, 1).await;
    rolling_upgrade(name, fleet, &previous, Shared::Postgres { url, schema }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_on_one_sqlite_file_under_a_retry_storm_keeps_every_promise() {
    let name = "rolling upgrade on SQLite";
    let Some(previous) = previous_binary(name) else {
        return;
    };
    let fleet = Fleet::new(name, UPGRADE_TIMEOUT_MS, 1).await;
    let path = fleet.folder.path().join("ledger.db");
    rolling_upgrade(name, fleet, &previous, Shared::Sqlite { path }).await;
}

/// The scenario on `shared`: three replicas of `previous` replaced one by one by this build
/// while the storm goes on (see the module's comment).
async fn rolling_upgrade(name: &str, mut fleet: Fleet, previous: &Path, shared: Shared) {
    let commit = previous_release();
    let ledger = shared.ledger();
    let mock_url = fleet.mock.url.clone();
    for _ in 0..REPLICAS {
        let replica = fleet.start_replica(Some(previous), &ledger, &mock_url, shared.schema(), &[]);
        fleet.replicas.get_mut().unwrap().push(replica);
    }
    let (version_before, _) = shared.version().await;
    let fleet = Arc::new(fleet);
    let mut faults: Value = serde_json::from_str(FAILOVER_FAULTS).unwrap();
    faults["seed"] = json!(17);
    fleet.faults(faults).await;
    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe = probe_readiness(&fleet, stop_probe.clone());

    let all = orders("g", UPGRADE_INTENTS);
    let storm = {
        let (fleet, all) = (fleet.clone(), all.clone());
        tokio::spawn(async move { fleet.storm(&all, rolling).await })
    };
    tokio::time::sleep(UPGRADE_AFTER).await;
    let upgrade_started = Instant::now();
    let mut replacements = Vec::new();
    let mut migration = None;
    let mut old_after_migration = Vec::new();
    let mut old_restarted = None;
    for index in 0..REPLICAS {
        let stopped_in = fleet.stop_replica(index).await;
        let started = Instant::now();
        let started_ms = now_ms();
        let replica = {
            let (fleet, ledger, mock_url, schema) = (
                fleet.clone(),
                ledger.clone(),
                mock_url.clone(),
                shared.schema().map(str::to_owned),
            );
            tokio::task::spawn_blocking(move || {
                fleet.start_replica(None, &ledger, &mock_url, schema.as_deref(), &[])
            })
            .await
            .unwrap()
        };
        let ready_in = started.elapsed();
        fleet.replace_replica(index, replica);
        replacements.push(Replacement {
            stopped_in,
            ready_in,
        });
        if index == 0 {
            let (version, applied_ms) = shared.version().await;
            migration = Some((version, applied_ms - started_ms));
            // The old replicas still running serve new intents on the migrated schema: an
            // outcome, not a 503 (the provider's faults still apply).
            for old in 1..REPLICAS {
                let order = format!("old{old}");
                old_after_migration.push((order.clone(), fleet.try_call(old, &order).await));
            }
            // An old replica started now is refused: its schema is behind the ledger's.
            let log = fleet.folder.path().join("old-restarted.log");
            let stderr = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .unwrap();
            let mut env = vec![("INTENTGATE_MOCK_URL", mock_url.as_str())];
            if let Some(schema) = shared.schema() {
                env.push(("INTENTGATE_LEDGER_SCHEMA", schema));
            }
            let refused = support::try_serve_binary_with_stderr(
                Some(previous),
                fleet.config.to_str().unwrap(),
                &ledger,
                &env,
                stderr,
            );
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            old_restarted = Some((refused.is_err(), said.trim().to_owned()));
        }
        tokio::time::sleep(BETWEEN_REPLACEMENTS).await;
    }
    let upgraded_in = upgrade_started.elapsed();
    let mut answers: Vec<(String, Answer)> = storm.await.unwrap();
    stop_probe.store(true, Ordering::SeqCst);
    let readiness = probe.await.unwrap();
    let storm_ended_after = upgrade_started.elapsed();

    fleet.faults(json!({})).await;
    let old_orders: Vec<String> = old_after_migration
        .iter()
        .map(|(order, _)| order.clone())
        .collect();
    let everything: Vec<String> = [all.clone(), old_orders].concat();
    answers.extend(old_after_migration.iter().cloned());
    let (statuses, effects, settled_in) = fleet.settle(0, &everything, false).await;
    let (_, duplicates) = fleet.effects().await;
    let metric = fleet.calls_metric().await;
    let (lost, misreported) = check_promises(
        name,
        &everything,
        &answers,
        &statuses,
        &effects,
        &duplicates,
        false,
    );
    let (version_after, migrated_after_ms) = migration.unwrap();
    let (old_refused, old_said) = old_restarted.unwrap();
    let old_said = old_said
        .lines()
        .find(|line| line.contains("knows up to"))
        .unwrap_or(&old_said)
        .to_owned();
    let unsettled: Vec<(&String, &String)> = statuses
        .iter()
        .filter(|(_, status)| !matches!(status.as_str(), "done" | "rejected" | "not_executed"))
        .collect();
    let http = fleet.http.lock().unwrap().clone();
    let replaced: Vec<String> = replacements
        .iter()
        .map(|replacement| {
            format!(
                "stopped in {:?}, new one ready in {:?}",
                replacement.stopped_in, replacement.ready_in
            )
        })
        .collect();
    println!(
        "{name}: from {commit} (schema {version_before}) to this build (schema \
         {version_after}): intents {}, calls {}, effects per intent {:?}, answers {:?}, http \
         {http:?} (503s {}), lost {}, misreported {}, replacements {replaced:?} over \
         {upgraded_in:?}, migration applied {migrated_after_ms} ms after the first new replica \
         started, old replicas after the migration answered {old_after_migration:?}, an old \
         replica started after it {} saying {old_said:?}, storm ended {storm_ended_after:?} \
         after the first stop, settled {settled_in:?} after the storm, /readyz not ready {:?} \
         times (ready {:?}) saying {:?}, calls metric of the new replicas {metric:?}, owner's notices {:?}",
        everything.len(),
        answers.len(),
        effects_per_intent(&everything, &effects),
        count(answers.iter().map(|(_, answer)| answer)),
        http.get("503").copied().unwrap_or(0),
        lost.len(),
        misreported.len(),
        if old_refused { "was refused" } else { "served" },
        readiness.not_ready,
        readiness.ready,
        readiness.detail,
        fleet.notices(),
    );
    assert!(
        version_after > version_before,
        "{name}: the schema was not migrated ({version_before} before, {version_after} after); \
         previous-release should name a commit with an older schema"
    );
    assert!(
        fleet.problems.lock().unwrap().is_empty(),
        "{name}: answers other than 200 and 503 (nothing executed): {:?}",
        fleet.problems.lock().unwrap()
    );
    assert!(
        !answers.iter().any(|(_, answer)| answer == "gave_up"),
        "{name}: calls found no replica to serve them for {:?}",
        super::CALL_MAX
    );
    assert!(
        unsettled.is_empty(),
        "{name}: intents not settled: {unsettled:?}"
    );
    assert!(
        old_after_migration
            .iter()
            .all(|(_, answer)| matches!(answer.as_str(), "done" | "rejected" | "not_executed")),
        "{name}: an old replica stopped serving once the schema was migrated past it: \
         {old_after_migration:?}"
    );
    assert!(
        old_refused && old_said.contains(&format!("version {version_after}")),
        "{name}: an old replica started on the migrated schema was not refused naming its \
         version: {old_said:?}"
    );
    drop(fleet);
    if let Shared::Postgres { schema, .. } = shared {
        schema.remove();
    }
}

#[test]
fn the_previous_release_is_named_by_a_full_commit_hash() {
    let commit = previous_release();
    assert!(
        commit.len() == 40 && commit.bytes().all(|byte| byte.is_ascii_hexdigit()),
        "previous-release names {commit:?}, not a full commit hash"
    );
}

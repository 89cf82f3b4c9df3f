//! What a downgrade does: a gateway started on a ledger whose schema a newer version has
//! migrated past what it knows. The binary under test plays the older version; the newer
//! migration is its schema version plus one, recorded as a newer binary would record it.
//!
//! Needs `DATABASE_URL`; without it the scenario prints why it is skipped, and with
//! `CI=true` it fails instead.

use std::fs::OpenOptions;
use std::time::Instant;

use super::support::{self, Schema, connect, database_url};
use super::{Fleet, PARTITION_TIMEOUT_MS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_migrated_past_this_version_is_refused_naming_both_versions() {
    let name = "downgrade";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "faults_downgrade");
    let mut fleet = Fleet::new(name, PARTITION_TIMEOUT_MS, 1).await;
    let mock_url = fleet.mock.url.clone();
    let replica = fleet.add_replica(&url, &mock_url, Some(&schema.name));
    let first = fleet.try_call(replica, "d1").await;
    assert_eq!(first, "done", "{name}: the first call was not served");
    fleet.replicas.get_mut().unwrap().clear();

    // A newer version migrates the ledger one step past this one.
    let database = connect(&url).await;
    let known: i64 = database
        .query_one(
            &format!(
                "SELECT max(version) FROM \"{}\".schema_migrations",
                schema.name
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let newer = known + 1;
    database
        .execute(
            &format!(
                "INSERT INTO \"{}\".schema_migrations (version, applied_ms) VALUES ($1, 0)",
                schema.name
            ),
            &[&newer],
        )
        .await
        .unwrap();

    // This version, started on it, refuses to serve and says why.
    let log = fleet.folder.path().join("downgrade.log");
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    let started = Instant::now();
    let refused = support::try_serve_with_stderr(
        fleet.config.to_str().unwrap(),
        &url,
        &[
            ("INTENTGATE_MOCK_URL", mock_url.as_str()),
            ("INTENTGATE_LEDGER_SCHEMA", schema.name.as_str()),
        ],
        stderr,
    );
    let refused_in = started.elapsed();
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let expected =
        format!("version {newer}, this intentgate knows up to {known}: upgrade intentgate");
    let line = said.lines().find(|line| line.contains(&expected));
    assert!(
        refused.is_err(),
        "{name}: a ledger at schema version {newer} was served by a version that knows up to \
         {known}"
    );
    assert!(
        line.is_some(),
        "{name}: the refusal does not name both versions ({expected:?}): {said}"
    );
    // A newer schema is not a corrupt one: the operator is told to upgrade, not to repair.
    assert!(
        line.is_some_and(|line| !line.contains("corrupt")),
        "{name}: a newer schema is reported as corruption: {said}"
    );

    // Back on the schema it knows (the newer migration rolled back), it serves again, and the
    // intent recorded before is still there.
    database
        .execute(
            &format!(
                "DELETE FROM \"{}\".schema_migrations WHERE version = $1",
                schema.name
            ),
            &[&newer],
        )
        .await
        .unwrap();
    let replica = fleet.add_replica(&url, &mock_url, Some(&schema.name));
    let again = fleet.try_call(replica, "d1").await;
    let (effects, _) = fleet.effects().await;
    println!(
        "{name}: schema version {newer} on a version that knows up to {known}: refused in \
         {refused_in:?}, saying {:?}; after the newer migration was rolled back the intent \
         called again answered {again} with {} effect(s)",
        line.unwrap_or_default(),
        effects.get("d1").copied().unwrap_or(0),
    );
    assert_eq!(
        again, "already_done",
        "{name}: the intent recorded before was lost"
    );
    assert_eq!(effects.get("d1").copied(), Some(1), "{name}: {effects:?}");
    drop(fleet);
    schema.remove();
}

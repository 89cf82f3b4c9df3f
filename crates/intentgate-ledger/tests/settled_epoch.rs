//! `Ledger::settled_epoch` of the SQLite store: what lets the gateway answer a settled
//! repeat without reading it again. It must move whenever a settled intent may have changed
//! (this ledger's erasure or purge, any commit of another connection to the file, as another
//! process's would be), and stay put for this ledger's own new intents and counted repeats,
//! or a gateway under load would never answer from memory.
#![cfg(feature = "sqlite")]

use intentgate_core::{IntentStatus, fingerprint};
use intentgate_ledger::{
    Begin, BeginRequest, Created, Durability, Erase, Finish, Finished, IntentRecord, Ledger,
    SqliteLedger, SqliteOptions,
};
use serde_json::json;

const TENANT: &str = "acme";
const TOOL: &str = "refund";
const T0: i64 = 1_760_000_000_000;

/// A new call of `key`, as the gateway asks for it.
fn request(key: &str) -> BeginRequest {
    let arguments = json!({ "order": key, "amount": "49.00" });
    BeginRequest {
        tenant: TENANT.into(),
        tool: TOOL.into(),
        key: key.into(),
        fingerprint: fingerprint(&arguments).as_str().to_owned(),
        arguments,
        lease_owner: "owner".into(),
        lease_expires_ms: T0 + 30_000,
        now_ms: T0,
        count_call: true,
        retry_rejected: false,
        lookup_interval_ms: 60_000,
        resend_unknown: false,
        expect_new: false,
        policies: None,
    }
}

/// A new intent for `key`, begun and settled `done` at once.
async fn settled(ledger: &dyn Ledger, key: &str) -> IntentRecord {
    let Begin::Execute(intent) = ledger.begin(request(key)).await.unwrap() else {
        panic!("a new key did not start");
    };
    let finish = Finish {
        id: intent.id,
        lease_owner: "owner".into(),
        attempt: intent.attempt,
        now_ms: T0,
        status: IntentStatus::Done,
        result: Some(json!({"id": "re_1"})),
        external_id: None,
        resolved_by: "upstream",
        looked_up: false,
        detail: String::new(),
        lease_required: false,
        resend_stopped: None,
    };
    let Finished::Recorded(intent) = ledger.finish(finish).await.unwrap() else {
        panic!("the finish was not recorded");
    };
    intent
}

/// The ledger at `path` as `intentgate serve` opens it: its writes grouped by the writer
/// thread, which is what answers the epoch.
fn served(path: &std::path::Path) -> SqliteLedger {
    let grouped = SqliteOptions {
        durability: Durability::Relaxed,
        inline: false,
    };
    SqliteLedger::open(path, grouped).unwrap()
}

/// An operator's erasure of the intent `key` at `now_ms`.
fn erasure(key: &str, now_ms: i64) -> Erase {
    Erase {
        tenant: TENANT.into(),
        tool: Some(TOOL.into()),
        key: Some(key.into()),
        force: false,
        actor: "dpo@example.com".into(),
        reason: "erasure request 77".into(),
        now_ms,
    }
}

/// The epoch once the writer is idle: it answers `None` while the writer holds its
/// connection, which it still does for a moment after answering a write.
async fn epoch(ledger: &SqliteLedger) -> u64 {
    loop {
        if let Some(epoch) = ledger.settled_epoch().await {
            return epoch;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn the_epoch_moves_for_changes_to_settled_intents_and_other_connections_commits() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("ledger.db");
    let ledger = served(&path);
    let first = epoch(&ledger).await;

    // Its own new intents and the counts of repeats change no settled answer.
    let done = settled(&ledger, "refund:1").await;
    ledger.record_calls(vec![(done.id, T0 + 1)]).await.unwrap();
    settled(&ledger, "refund:2").await;
    assert_eq!(epoch(&ledger).await, first);

    // Another connection's commit, as another process's: the epoch moves, then holds.
    let other = SqliteLedger::open(&path, SqliteOptions::inline(Durability::Relaxed)).unwrap();
    other.record_calls(vec![(done.id, T0 + 2)]).await.unwrap();
    let after_other = epoch(&ledger).await;
    assert_ne!(after_other, first);
    assert_eq!(epoch(&ledger).await, after_other);

    // Its own erasure and purge move it.
    let erase = erasure("refund:1", T0 + 3);
    ledger.erase(&erase).await.unwrap();
    let after_erasure = epoch(&ledger).await;
    assert_ne!(after_erasure, after_other);
    ledger.purge(T0 + 10).await.unwrap();
    assert_ne!(epoch(&ledger).await, after_erasure);
    assert!(
        ledger
            .get(TENANT, TOOL, "refund:2")
            .await
            .unwrap()
            .is_none()
    );

    // An inline ledger, the simulation's, never tells: its callers read every time.
    assert_eq!(other.settled_epoch().await, None);
}

/// Another connection's commit made just before one of the ledger's own, with no look at
/// the epoch in between, still moves it: the ledger's writer accounts only for the commit
/// it makes itself.
///
/// How it would go wrong: a ledger that noted where the file's commits stood after its own
/// commit would take the other connection's along with it as its own, and keep answering
/// the intent that connection erased.
#[tokio::test]
async fn another_connections_commit_just_before_the_ledgers_own_moves_the_epoch() {
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("ledger.db");
    let ledger = served(&path);
    let done = settled(&ledger, "refund:1").await;
    let before = epoch(&ledger).await;

    let other = SqliteLedger::open(&path, SqliteOptions::inline(Durability::Relaxed)).unwrap();
    let erase = erasure("refund:1", T0 + 1);
    other.erase(&erase).await.unwrap();
    // The ledger's own writes, before anyone asks it for the epoch.
    settled(&ledger, "refund:2").await;
    ledger.record_calls(vec![(done.id, T0 + 2)]).await.unwrap();

    assert_ne!(epoch(&ledger).await, before, "the erasure went unseen");
}

/// A `create` that finds its key taken writes nothing and leaves the epoch where it was: the
/// gateway creates first for a key it does not keep in memory, and keeps a settled intent
/// found that way for the next repeat, under this epoch.
///
/// How it went wrong: the writer took each commit of its own for one the file's commit
/// counter moved by, but a commit that wrote nothing leaves the counter where it was; the
/// next check then saw another counter than it expected and moved the epoch, and every
/// repeat missed what the one before had kept.
#[tokio::test]
async fn a_create_that_finds_its_key_taken_leaves_the_epoch_where_it_was() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = served(&folder.path().join("ledger.db"));
    let done = settled(&ledger, "refund:1").await;
    let before = epoch(&ledger).await;
    for round in 0..3 {
        let Created::Found(found) = ledger.create(request("refund:1")).await.unwrap() else {
            panic!("a taken key was created again");
        };
        assert_eq!(found.id, done.id);
        assert_eq!(epoch(&ledger).await, before, "round {round}");
    }
    // A create that writes still holds it: a new intent changes no settled answer.
    let Created::Begun(Begin::Execute(_)) = ledger.create(request("refund:2")).await.unwrap()
    else {
        panic!("a new key was not begun");
    };
    assert_eq!(epoch(&ledger).await, before);
}

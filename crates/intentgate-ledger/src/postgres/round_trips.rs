//! Round trips between the ledger and PostgreSQL, counted at a TCP proxy between them.
//!
//! The proxy relays every byte both ways and counts the client's turns: a turn starts each
//! time the client sends after the server last spoke on that connection (or first). A
//! pipeline of statements sent at once is one turn however many messages it holds; a
//! statement sent after waiting for the answer to the one before is another. That is what a
//! round trip costs in time, whatever the client library does inside.
//!
//! Needs `DATABASE_URL` with a TCP host; without it the tests say they are skipped (and
//! fail under `CI=true`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use intentgate_core::IntentStatus;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_postgres::config::Host;

use super::{PostgresLedger, PostgresOptions};
use crate::{Begin, BeginRequest, Created, Finish, Finished, IntentId, IntentRecord, Ledger};

/// The database's URL, or `None` when the tests are skipped.
fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("DATABASE_URL is not set and CI=true: CI must run the PostgreSQL tests")
        }
        _ => {
            eprintln!("skipped: DATABASE_URL is not set; set it to a PostgreSQL URL");
            None
        }
    }
}

/// A relay from a loopback port to the database, counting the client's turns.
struct Proxy {
    address: SocketAddr,
    turns: Arc<AtomicU64>,
}

/// Who sent last on one relayed connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spoke {
    Nobody,
    Client,
    Server,
}

impl Proxy {
    async fn start(server: (String, u16)) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let turns = Arc::new(AtomicU64::new(0));
        let counted = turns.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect((server.0.as_str(), server.1))
                    .await
                    .expect("the proxy reaches the database");
                tokio::spawn(relay(client, server, counted.clone()));
            }
        });
        Proxy { address, turns }
    }

    fn turns(&self) -> u64 {
        self.turns.load(Ordering::SeqCst)
    }
}

async fn relay(client: TcpStream, server: TcpStream, turns: Arc<AtomicU64>) {
    client.set_nodelay(true).unwrap();
    server.set_nodelay(true).unwrap();
    let spoke = Arc::new(Mutex::new(Spoke::Nobody));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upstream = tokio::spawn(pump(client_read, server_write, spoke.clone(), Some(turns)));
    pump(server_read, client_write, spoke, None).await;
    upstream.abort();
}

/// Copies `from` to `to`. `turns` is given for the client's side, which counts a turn each
/// time it speaks after the server (or first).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    spoke: Arc<Mutex<Spoke>>,
    turns: Option<Arc<AtomicU64>>,
) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        {
            let mut spoke = spoke.lock().unwrap();
            match &turns {
                Some(turns) => {
                    if *spoke != Spoke::Client {
                        turns.fetch_add(1, Ordering::SeqCst);
                    }
                    *spoke = Spoke::Client;
                }
                None => *spoke = Spoke::Server,
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// A ledger in a fresh schema, reached through a counting proxy, with one pooled connection
/// (so that every operation runs on the connection whose statements are prepared). Drops the
/// schema when dropped.
struct Counted {
    ledger: PostgresLedger,
    proxy: Proxy,
}

impl Counted {
    async fn open(url: &str) -> Counted {
        let config: tokio_postgres::Config = url.parse().expect("DATABASE_URL is a URL");
        let host = match config.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            _ => panic!("DATABASE_URL must name a TCP host for the round-trip tests"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let proxy = Proxy::start((host, port)).await;
        let user = config.get_user().unwrap_or("postgres");
        let password = config
            .get_password()
            .map(|password| format!(":{}", encoded(&String::from_utf8_lossy(password))))
            .unwrap_or_default();
        let database = config.get_dbname().unwrap_or(user);
        let proxied = format!(
            "postgres://{}{password}@{}/{}",
            encoded(user),
            proxy.address,
            encoded(database)
        );
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let options = PostgresOptions {
            schema: format!("trips_{}_{nanos}", std::process::id()),
            pool_size: 1,
            ..PostgresOptions::default()
        };
        let ledger = PostgresLedger::connect(&proxied, options).await.unwrap();
        Counted { ledger, proxy }
    }

    /// Runs `operation` and answers what it returned and the round trips it made.
    async fn count<T>(&self, operation: impl Future<Output = T>) -> (T, u64) {
        let before = self.proxy.turns();
        let value = operation.await;
        (value, self.proxy.turns() - before)
    }

    async fn close(self) {
        self.ledger.destroy().await.unwrap();
    }
}

/// Percent-encodes what a URL's user, password or path may not hold as is.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The first call of `key` by `owner`, the gateway's way: it read no intent first.
fn new_call(key: &str, owner: &str, now_ms: i64) -> BeginRequest {
    BeginRequest {
        tenant: "acme".into(),
        tool: "refund".into(),
        key: key.into(),
        fingerprint: "a".repeat(64),
        arguments: json!({ "order": key }),
        lease_owner: owner.into(),
        lease_expires_ms: now_ms + 60_000,
        now_ms,
        count_call: true,
        retry_rejected: false,
        lookup_interval_ms: 1_000,
        resend_unknown: false,
        expect_new: true,
        policies: None,
    }
}

fn done(intent: &IntentRecord, owner: &str, now_ms: i64) -> Finish {
    Finish {
        id: intent.id,
        lease_owner: owner.into(),
        attempt: intent.attempt,
        now_ms,
        status: IntentStatus::Done,
        result: Some(json!({ "refund": "re_1" })),
        external_id: Some("re_1".into()),
        resolved_by: "upstream",
        looked_up: false,
        detail: "200".into(),
        lease_required: false,
        resend_stopped: None,
    }
}

fn executing(begun: Begin) -> IntentRecord {
    match begun {
        Begin::Execute(intent) => intent,
        other => panic!("expected Execute, got {other:?}"),
    }
}

/// Begins and finishes one intent, so that the statements of both are prepared.
async fn warm_up(counted: &Counted) {
    let intent = executing(
        counted
            .ledger
            .begin(new_call("warm", "me", 1))
            .await
            .unwrap(),
    );
    counted.ledger.finish(done(&intent, "me", 2)).await.unwrap();
}

#[tokio::test]
async fn a_new_intents_begin_and_its_finish_take_one_round_trip_each() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;

    let (begun, begin_trips) = counted
        .count(counted.ledger.begin(new_call("order-1", "me", 10)))
        .await;
    let intent = executing(begun.unwrap());
    let (finished, finish_trips) = counted
        .count(counted.ledger.finish(done(&intent, "me", 20)))
        .await;
    let finished = finished.unwrap();

    let stored = counted
        .ledger
        .get("acme", "refund", "order-1")
        .await
        .unwrap()
        .unwrap();
    let events = counted.ledger.events(intent.id).await.unwrap();
    counted.close().await;
    assert_eq!((begin_trips, finish_trips), (1, 1));
    assert_eq!(finished, Finished::Recorded(stored.clone()));
    assert_eq!(stored.status, IntentStatus::Done);
    assert_eq!(stored.result, Some(json!({ "refund": "re_1" })));
    assert_eq!(stored.lease_owner, None);
    let kinds: Vec<(&str, Option<&str>)> = events
        .iter()
        .map(|event| (event.kind.as_str(), event.to_status.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("created", Some("pending")),
            ("transition", Some("in_flight")),
            ("transition", Some("done")),
        ]
    );
}

/// `create`, what the gateway's call path runs on PostgreSQL instead of a read and then a
/// `begin`, takes one round trip for a new key (the insert and its commit) and one for a key
/// taken (the insert that found it, and the read of the intent that holds it), and a new
/// intent it created finishes in one more, as one `begin` made.
#[tokio::test]
async fn create_takes_one_round_trip_for_a_new_key_and_for_a_taken_one() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;
    // The statement that reads a taken key, prepared.
    counted
        .ledger
        .create(new_call("warm", "me", 3))
        .await
        .unwrap();

    let (created, create_trips) = counted
        .count(counted.ledger.create(new_call("order-3", "me", 10)))
        .await;
    let intent = match created.unwrap() {
        Created::Begun(begun) => executing(begun),
        found => panic!("a new key is begun, got {found:?}"),
    };
    let (found, found_trips) = counted
        .count(counted.ledger.create(new_call("order-3", "you", 15)))
        .await;
    let (finished, finish_trips) = counted
        .count(counted.ledger.finish(done(&intent, "me", 20)))
        .await;
    let (settled, settled_trips) = counted
        .count(counted.ledger.create(new_call("order-3", "they", 25)))
        .await;
    let stored = counted
        .ledger
        .get("acme", "refund", "order-3")
        .await
        .unwrap()
        .unwrap();
    counted.close().await;
    assert_eq!(
        (create_trips, found_trips, finish_trips, settled_trips),
        (1, 1, 1, 1)
    );
    assert_eq!(found.unwrap(), Created::Found(intent.clone()));
    assert_eq!(finished.unwrap(), Finished::Recorded(stored.clone()));
    assert_eq!(settled.unwrap(), Created::Found(stored.clone()));
    assert_eq!((stored.status, stored.call_count), (IntentStatus::Done, 1));
}

/// The finish skips its read only while the row is as `begin` left it: a repeat counted
/// meanwhile (another caller's `begin`) changed it, so the finish reads it again and keeps
/// that count instead of writing the one it knew.
#[tokio::test]
async fn a_finish_after_the_row_changed_decides_from_the_row_as_it_stands() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;

    let intent = executing(
        counted
            .ledger
            .begin(new_call("order-2", "me", 10))
            .await
            .unwrap(),
    );
    let repeat = BeginRequest {
        expect_new: false,
        ..new_call("order-2", "you", 15)
    };
    let busy = counted.ledger.begin(repeat).await.unwrap();
    assert!(matches!(busy, Begin::Busy(_)), "{busy:?}");
    let finished = counted
        .ledger
        .finish(done(&intent, "me", 20))
        .await
        .unwrap();
    let stored = counted
        .ledger
        .get("acme", "refund", "order-2")
        .await
        .unwrap()
        .unwrap();
    counted.close().await;
    assert_eq!(finished, Finished::Recorded(stored.clone()));
    assert_eq!((stored.status, stored.call_count), (IntentStatus::Done, 2));
}

/// A row erased between begin and finish is not brought back by the guarded write: the
/// finish finds nothing, as it would have without knowing the intent.
#[tokio::test]
async fn a_finish_of_an_intent_deleted_meanwhile_writes_nothing() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;
    let intent = executing(
        counted
            .ledger
            .begin(new_call("order-3", "me", 10))
            .await
            .unwrap(),
    );
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let schema = counted.ledger.schema().to_owned();
    client
        .batch_execute(&format!(
            "DELETE FROM \"{schema}\".events WHERE intent_id = {id}; \
             DELETE FROM \"{schema}\".intents WHERE id = {id}",
            id = intent.id
        ))
        .await
        .unwrap();
    let finished = counted.ledger.finish(done(&intent, "me", 20)).await;
    let events = counted.ledger.events(intent.id).await.unwrap();
    counted.close().await;
    assert!(
        matches!(finished, Err(crate::LedgerError::NotFound(id)) if id == intent.id),
        "{finished:?}"
    );
    assert!(events.is_empty(), "{events:?}");
}

/// Begins `count` new intents, keys `prefix-0` on, under `owner`.
async fn begin_many(counted: &Counted, prefix: &str, count: usize) -> Vec<IntentRecord> {
    let mut intents = Vec::with_capacity(count);
    for index in 0..count {
        let key = format!("{prefix}-{index}");
        let begun = counted.ledger.begin(new_call(&key, "me", 10)).await;
        intents.push(executing(begun.unwrap()));
    }
    intents
}

/// Finishes queued together are committed together: one transaction, one round trip.
#[tokio::test]
async fn queued_finishes_commit_together_in_one_round_trip() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;
    let intents = begin_many(&counted, "group", 8).await;

    let (finished, trips) = counted
        .count(async {
            let mut queued = Vec::new();
            for intent in &intents {
                let finish = done(intent, "me", 20);
                queued.push(counted.ledger.finish_queued(finish).await.unwrap());
            }
            futures_util::future::join_all(queued).await
        })
        .await;

    let mut stored = Vec::new();
    let mut logged = Vec::new();
    for intent in &intents {
        let read = counted.ledger.get_by_id(intent.id).await.unwrap().unwrap();
        stored.push(read);
        logged.push(counted.ledger.events(intent.id).await.unwrap().len());
    }
    counted.close().await;
    assert_eq!(trips, 1);
    for (finished, stored) in finished.into_iter().zip(&stored) {
        assert_eq!(finished.unwrap(), Finished::Recorded(stored.clone()));
        assert_eq!(stored.status, IntentStatus::Done);
    }
    assert_eq!(logged, [3; 8]);
}

/// Repeats counted together share one transaction: each intent locked once, one commit,
/// every repeat's count and event written; a repeat of an intent that is gone counts for
/// nothing and is answered as gone, without failing the others.
///
/// How it cost when each repeat was counted alone: two round trips per repeat (lock, then
/// write and commit), 62 here.
#[tokio::test]
async fn repeats_counted_together_share_one_transaction() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;
    let mut intents = Vec::new();
    for intent in begin_many(&counted, "repeated", 4).await {
        let finished = counted.ledger.finish(done(&intent, "me", 20)).await;
        let Ok(Finished::Recorded(intent)) = finished else {
            panic!("not finished: {finished:?}");
        };
        intents.push(intent);
    }
    // One repeat counted first, so that the statements are prepared.
    let warm = intents.pop().unwrap();
    counted
        .ledger
        .record_calls(vec![(warm.id, 25)])
        .await
        .unwrap();
    let gone = intents.iter().map(|intent| intent.id).max().unwrap() + 1_000;
    let mut repeats: Vec<IntentId> = (0..10)
        .flat_map(|_| intents.iter().map(|intent| intent.id))
        .collect();
    repeats.push(gone);

    let calls = repeats.iter().map(|&id| (id, 30)).collect();
    let (gone_answered, trips) = counted.count(counted.ledger.record_calls(calls)).await;

    let mut stored = Vec::new();
    let mut calls_logged = Vec::new();
    for intent in &intents {
        stored.push(counted.ledger.get_by_id(intent.id).await.unwrap().unwrap());
        let events = counted.ledger.events(intent.id).await.unwrap();
        let calls: Vec<String> = events
            .into_iter()
            .filter(|event| event.kind == "call")
            .filter_map(|event| event.detail)
            .collect();
        calls_logged.push(calls);
    }
    counted.close().await;
    // Four rows locked (the first with `BEGIN`), then the writes and `COMMIT`.
    assert_eq!(trips, 5);
    assert_eq!(gone_answered, Ok(vec![gone]));
    for (intent, calls) in stored.iter().zip(&calls_logged) {
        assert_eq!(intent.call_count, 11);
        assert_eq!(intent.last_seen_ms, 30);
        let expected: Vec<String> = (2..=11)
            .map(|count| format!("repeat call {count}, answered from the ledger"))
            .collect();
        assert_eq!(calls, &expected);
    }
}

/// One finish of a group whose row changed meanwhile does not hold up the others, and is
/// decided from its row as it stands.
#[tokio::test]
async fn a_group_commits_around_a_row_that_changed() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    warm_up(&counted).await;
    let intents = begin_many(&counted, "mixed", 4).await;
    let repeat = BeginRequest {
        expect_new: false,
        ..new_call("mixed-2", "you", 15)
    };
    let busy = counted.ledger.begin(repeat).await.unwrap();
    assert!(matches!(busy, Begin::Busy(_)), "{busy:?}");

    let mut queued = Vec::new();
    for intent in &intents {
        queued.push(
            counted
                .ledger
                .finish_queued(done(intent, "me", 20))
                .await
                .unwrap(),
        );
    }
    let finished = futures_util::future::join_all(queued).await;
    let mut stored = Vec::new();
    for intent in &intents {
        stored.push(counted.ledger.get_by_id(intent.id).await.unwrap().unwrap());
    }
    counted.close().await;
    for (finished, stored) in finished.into_iter().zip(&stored) {
        assert_eq!(finished.unwrap(), Finished::Recorded(stored.clone()));
    }
    let settled: Vec<(IntentStatus, u64)> = stored
        .iter()
        .map(|intent| (intent.status, intent.call_count))
        .collect();
    assert_eq!(
        settled,
        [
            (IntentStatus::Done, 1),
            (IntentStatus::Done, 1),
            (IntentStatus::Done, 2),
            (IntentStatus::Done, 1),
        ]
    );
}

/// A new call counted by two budgets: its key and both windows are read (and the windows
/// locked) in one round trip, then the insert, then the commit of its events and counts.
#[tokio::test]
async fn a_new_call_with_budgets_reads_its_key_and_windows_in_one_round_trip() {
    let Some(url) = database_url() else { return };
    let counted = Counted::open(&url).await;
    let charge = |budget: &str| crate::BudgetCharge {
        budget: budget.into(),
        bucket: "acme".into(),
        window_start_ms: 0,
        window_end_ms: 3_600_000,
        units: 4_900,
        count_max: Some(100),
        units_max: None,
        hold_deadline_ms: None,
    };
    let budgeted = |key: &str| BeginRequest {
        policies: Some(crate::CallPolicies {
            hold: None,
            requested_by: "agent".into(),
            intent_id: None,
            budgets: vec![charge("per-hour"), charge("per-tenant")],
        }),
        ..new_call(key, "me", 10)
    };
    // Prepares the statements.
    executing(counted.ledger.begin(budgeted("warm")).await.unwrap());

    let (begun, trips) = counted
        .count(counted.ledger.begin(budgeted("order-4")))
        .await;
    let intent = executing(begun.unwrap());
    let usage = counted.ledger.budget_usage("refund", 10).await.unwrap();
    counted.close().await;
    assert_eq!(trips, 3);
    assert_eq!(intent.status, IntentStatus::InFlight);
    let counts: Vec<(String, u64)> = usage
        .iter()
        .map(|row| (row.budget.clone(), row.count))
        .collect();
    assert_eq!(
        counts,
        [("per-hour".to_owned(), 2), ("per-tenant".to_owned(), 2)]
    );
}

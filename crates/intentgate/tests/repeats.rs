//! Repeats of a settled intent through the real processes: `intentgate serve` answers them
//! from memory while nothing settled has changed, and an erasure made by another process
//! (`intentgate intents erase` on the same ledger) takes effect at the next repeat, which no
//! longer finds the erased intent: on a SQLite file (the other process's commit is seen on
//! the file) and on PostgreSQL (the schema's triggers notify it).

mod support;

use serde_json::{Value, json};
use support::{
    Running, Schema, call, client, database_url, example_config, intentgate, mock_provider, serve,
    stack, success,
};

const KEY: &str = "refund:8812:49.00";
/// Repeats made until one is answered without reading the ledger.
const REPEATS_MAX: usize = 20;

fn refund() -> Value {
    json!({"order_id": "8812", "amount": 49, "reason": "requested_by_customer"})
}

/// A gateway and what another process needs to reach its ledger.
struct Served<'a> {
    gateway: &'a Running,
    client: &'a reqwest::Client,
    /// `--ledger` of the gateway: a file or a URL.
    ledger: &'a str,
    /// The environment the ledger's location needs (its PostgreSQL schema).
    env: &'a [(&'a str, &'a str)],
}

/// How many times the gateway has run the ledger operation `operation` so far (its
/// histogram's count).
async fn ledger_operations(served: &Served<'_>, operation: &str) -> f64 {
    let text = served
        .client
        .get(format!("{}/metrics", served.gateway.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    intentgate_test_support::metrics::sample(
        &text,
        &format!(
            r#"intentgate_ledger_operation_duration_seconds_count{{operation="{operation}"}}"#
        ),
    )
    .unwrap_or(0.0)
}

/// The ledger reads by key the gateway has made so far: its `get`s, and its `create`s (a call
/// the settled cache doesn't answer creates first, which reads a key found taken).
async fn ledger_gets(served: &Served<'_>) -> f64 {
    ledger_operations(served, "get").await + ledger_operations(served, "create").await
}

async fn refund_status(served: &Served<'_>) -> Value {
    let outcome = call(served.client, &served.gateway.url, "refund_order", refund()).await;
    outcome["status"].clone()
}

/// Settles the refund, shows a repeat answered without a read, erases the intent with the
/// CLI and shows the next call finds it gone.
async fn an_erasure_by_another_process_takes_effect(served: &Served<'_>) {
    assert_eq!(refund_status(served).await, "done");
    let on_postgresql = !served.env.is_empty();
    // A new call creates its intent, in one round trip (on SQLite, one trip to the writer)
    // where a read and a `begin` would take two.
    let first_call = [
        ledger_operations(served, "get").await,
        ledger_operations(served, "begin").await,
        ledger_operations(served, "create").await,
    ];
    assert_eq!(first_call, [0.0, 0.0, 1.0]);
    // The first repeat reads the settled intent; the next ones are answered without a read,
    // unless the ledger can't tell just then whether anything changed (a SQLite writer
    // committing the count of the repeat before, say), when the gateway reads rather than
    // wait: one of a few must be.
    assert_eq!(refund_status(served).await, "already_done");
    let mut answered_from_memory = false;
    for _ in 0..REPEATS_MAX {
        let gets = ledger_gets(served).await;
        assert_eq!(refund_status(served).await, "already_done");
        if ledger_gets(served).await == gets {
            answered_from_memory = true;
            break;
        }
    }
    assert!(
        answered_from_memory,
        "{REPEATS_MAX} repeats of a settled intent nobody changed each read the ledger"
    );
    let gets = ledger_gets(served).await;

    let erased = intentgate()
        .args(["intents", "erase", "--tenant", "default", "--tool"])
        .args([
            "refund_order",
            "--key",
            KEY,
            "--reason",
            "erasure request 12",
        ])
        .args(["--actor", "dpo", "--ledger", served.ledger])
        .envs(served.env.iter().copied())
        .output()
        .expect("intentgate runs");
    let printed = success(&erased);
    assert!(printed.contains("1 intents"), "{printed}");

    // The intent is gone: the call is a new one, made again (the provider's idempotency key
    // makes it no second refund), not a repeat of what was erased. On PostgreSQL the
    // erasure reaches the gateway as a notification, a moment after the CLI's commit: a
    // repeat answered in that moment is one a read just before the erasure would have
    // answered, so wait for the new call, with a deadline.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match refund_status(served).await.as_str() {
            Some("done") => break,
            Some("already_done") if on_postgresql => assert!(
                std::time::Instant::now() < deadline,
                "the erasure did not reach the gateway in 30 s"
            ),
            other => panic!("after the erasure the call answered {other:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(ledger_gets(served).await > gets);
    assert_eq!(refund_status(served).await, "already_done");
}

/// How it broke before the check existed: a gateway that kept settled answers in memory with
/// nothing to tell it of another process's writes went on answering `already_done` for an
/// intent the CLI had erased from the file.
#[tokio::test]
async fn an_erasure_by_another_process_takes_effect_at_the_next_repeat() {
    let stack = stack(|text| text);
    let ledger = stack.folder.path().join("ledger.db");
    let served = Served {
        gateway: &stack.gateway,
        client: &stack.client,
        ledger: ledger.to_str().unwrap(),
        env: &[],
    };
    an_erasure_by_another_process_takes_effect(&served).await;
}

/// The same on PostgreSQL, where the gateway used to read every repeat: it now answers them
/// from memory, and the CLI's erasure reaches it through the schema's notification.
#[tokio::test]
async fn on_postgresql_an_erasure_by_another_process_reaches_the_gateway() {
    let test = "repeats_erasure";
    let Some(url) = database_url(test) else {
        return;
    };
    let schema = Schema::fresh(&url, test);
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| text);
    let mock = mock_provider();
    let env = [("INTENTGATE_LEDGER_SCHEMA", schema.name.as_str())];
    let gateway = serve(
        config.to_str().unwrap(),
        &url,
        &[env[0], ("INTENTGATE_MOCK_URL", &mock.url)],
    );
    let served = Served {
        gateway: &gateway,
        client: &client(),
        ledger: &url,
        env: &env,
    };
    an_erasure_by_another_process_takes_effect(&served).await;
    drop(gateway);
    schema.remove();
}

//! Repeats of a settled intent through the real processes: `intentgate serve` over a SQLite
//! ledger answers them from memory while nothing settled has changed, and an erasure made
//! by another process (`intentgate intents erase` on the same file) takes effect at the
//! next repeat, which no longer finds the erased intent.

mod support;

use serde_json::{Value, json};
use support::{Stack, call, intentgate, stack, success};

const KEY: &str = "refund:8812:49.00";
/// Repeats made until one is answered without reading the ledger.
const REPEATS_MAX: usize = 20;

fn refund() -> Value {
    json!({"order_id": "8812", "amount": 49, "reason": "requested_by_customer"})
}

/// The ledger reads by key the gateway has made so far (its `get` histogram's count).
async fn ledger_gets(stack: &Stack) -> f64 {
    let text = stack
        .client
        .get(format!("{}/metrics", stack.gateway.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    intentgate_test_support::metrics::sample(
        &text,
        r#"intentgate_ledger_operation_duration_seconds_count{operation="get"}"#,
    )
    .unwrap_or(0.0)
}

async fn refund_status(stack: &Stack) -> Value {
    let outcome = call(&stack.client, &stack.gateway.url, "refund_order", refund()).await;
    outcome["status"].clone()
}

/// How it broke before the check existed: a gateway that kept settled answers in memory with
/// nothing to tell it of another process's writes went on answering `already_done` for an
/// intent the CLI had erased from the file.
#[tokio::test]
async fn an_erasure_by_another_process_takes_effect_at_the_next_repeat() {
    let stack = stack(|text| text);
    let ledger = stack.folder.path().join("ledger.db");
    assert_eq!(refund_status(&stack).await, "done");
    // The first repeat reads the settled intent; the next ones are answered without a read,
    // unless the ledger's writer is busy just then (committing the count of the repeat
    // before, say), when the gateway reads rather than wait: one of a few must be.
    assert_eq!(refund_status(&stack).await, "already_done");
    let mut answered_from_memory = false;
    for _ in 0..REPEATS_MAX {
        let gets = ledger_gets(&stack).await;
        assert_eq!(refund_status(&stack).await, "already_done");
        if ledger_gets(&stack).await == gets {
            answered_from_memory = true;
            break;
        }
    }
    assert!(
        answered_from_memory,
        "{REPEATS_MAX} repeats of a settled intent nobody changed each read the ledger"
    );
    let gets = ledger_gets(&stack).await;

    let erased = intentgate()
        .args(["intents", "erase", "--tenant", "default", "--tool"])
        .args([
            "refund_order",
            "--key",
            KEY,
            "--reason",
            "erasure request 12",
        ])
        .args(["--actor", "dpo", "--ledger"])
        .arg(&ledger)
        .output()
        .expect("intentgate runs");
    let printed = success(&erased);
    assert!(printed.contains("1 intents"), "{printed}");

    // The intent is gone: the call is a new one, made again (the provider's idempotency key
    // makes it no second refund), not a repeat of what was erased.
    assert_eq!(refund_status(&stack).await, "done");
    assert!(ledger_gets(&stack).await > gets);
    assert_eq!(refund_status(&stack).await, "already_done");
}

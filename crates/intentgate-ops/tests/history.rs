//! The history of owners' notices in the ledger: what one process sends, another process on
//! the same ledger file lists, and it outlives the process that sent it.

use std::collections::BTreeMap;
use std::sync::Arc;

use intentgate_ledger::{ALERT_DETAILS_BYTES_MAX, Durability, SqliteLedger, SqliteOptions};
use intentgate_ops::{Notice, Notifier, Severity};
use intentgate_test_support::ledger::TempLedger;
use serde_json::json;

fn notice(details: serde_json::Value) -> Notice {
    Notice {
        kind: "duplicate_calls",
        tool: "refund_order".to_owned(),
        severity: Severity::Warning,
        summary: "intent refund:1 was called 5 more times within 60 s".to_owned(),
        details,
    }
}

#[tokio::test]
async fn a_notice_sent_by_one_process_is_listed_by_another_after_the_first_stopped() {
    let first = TempLedger::new();
    let sender = Notifier::new(BTreeMap::new()).with_history(first.ledger.clone());
    sender.post(
        Some("payments"),
        &notice(json!({"tenant": "acme", "intent_key": "refund:1", "intent_id": 7})),
    );
    let long = "x".repeat(ALERT_DETAILS_BYTES_MAX + 1);
    sender.post(Some("payments"), &notice(json!({"list": long})));
    // Stopping writes what was queued.
    sender.close().await;
    drop(first.ledger);
    // Another process opens the same file.
    let other = Arc::new(
        SqliteLedger::open(&first.path, SqliteOptions::inline(Durability::Relaxed)).unwrap(),
    );
    let reader = Notifier::new(BTreeMap::new()).with_history(other);
    let listed = reader.history(10).await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed[0]["details"]["cut"]
            .as_str()
            .unwrap()
            .contains("over the history's"),
        "details too long for the ledger are replaced by a note: {}",
        listed[0]["details"]
    );
    assert_eq!(listed[1]["owner"], "payments");
    assert_eq!(listed[1]["severity"], "warning");
    assert_eq!(listed[1]["details"]["intent_id"], 7);
    assert!(listed[1]["id"].as_i64().unwrap() < listed[0]["id"].as_i64().unwrap());
    // Nothing of it was kept in the sender's memory instead.
    assert!(reader.recent().is_empty());
}

//! What the gate does with what a lookup concluded, on every path that looks up: a record
//! half the intent's settles nothing and is told; every lookup carries the intent's
//! provider key. Through a real SQLite ledger and an upstream scripted here.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{CallStatus, IntentStatus, UpstreamObservation};
use intentgate_gate::{
    Clock, Gate, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
use intentgate_test_support::{TempLedger, call, refund, refund_tool};
use serde_json::json;

const KEY: &str = "refund:8812:49.00";

/// A provider whose refunds answer 500 (without acting) and whose lookups find a record
/// that carries the intent's provider key with another amount; it remembers the provider key
/// every lookup was made with.
#[derive(Default)]
struct HalfOurs {
    lookups: Mutex<Vec<Option<String>>>,
    executed: Mutex<u32>,
}

#[async_trait]
impl Upstream for HalfOurs {
    async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
        *self.executed.lock().unwrap() += 1;
        UpstreamObservation::response(500, json!({"error": {"type": "api_error"}}))
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        self.lookups
            .lock()
            .unwrap()
            .push(call.idempotency_key.map(str::to_owned));
        LookupOutcome::Mismatch(
            "a record carries this intent's provider key but its amount differs from the \
             intent's arguments"
                .to_owned(),
        )
    }
}

/// Regression: a lookup could only say found or not found, so a record carrying the
/// intent's key with another amount (or the intent's fields under another tenant's key) was
/// taken as the effect. Now it is a mismatch: the intent stays unknown on the first attempt,
/// a repeat and the sweeper, nothing is re-sent, the owner's notice gets an event per lookup,
/// and every lookup carried the intent's provider key.
#[tokio::test]
async fn a_record_half_the_intents_settles_nothing_on_any_path_and_is_told() {
    let temp = TempLedger::new();
    let ledger: Arc<dyn intentgate_ledger::Ledger> = temp.ledger.clone();
    let provider = Arc::new(HalfOurs::default());
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut tool = refund_tool();
    tool.owner = Some("payments-team".to_owned());
    let gate = Gate::new(
        vec![tool],
        ledger.clone(),
        provider.clone(),
        clock,
        GateOptions {
            // Every repeat may look up again at once.
            lookup_interval: Duration::ZERO,
            ..GateOptions::default()
        },
    )
    .unwrap();
    let mut mismatches = gate.lookup_mismatches();

    let first = call(&gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
    let repeat = call(&gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(repeat.status, CallStatus::PendingUnknown, "{repeat:?}");
    gate.sweep(32).await.unwrap();

    let intent = ledger
        .get("default", "refund_order", KEY)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(intent.status, IntentStatus::Unknown);
    assert_eq!(*provider.executed.lock().unwrap(), 1, "nothing re-sent");
    let lookups = provider.lookups.lock().unwrap().clone();
    assert!(lookups.len() >= 2, "{lookups:?}");
    let provider_key = format!("refund_order:{KEY}");
    assert!(
        lookups
            .iter()
            .all(|key| key.as_deref() == Some(provider_key.as_str())),
        "every lookup carries the provider key: {lookups:?}"
    );
    let told = mismatches
        .try_recv()
        .expect("a mismatch event for the owner");
    assert_eq!(told.intent_key, KEY);
    assert_eq!(told.tool, "refund_order");
    assert!(told.reason.contains("amount differs"), "{}", told.reason);
    let events = ledger.events(intent.id).await.unwrap();
    assert!(
        events.iter().any(|event| event
            .detail
            .as_deref()
            .is_some_and(|detail| detail.contains("can't prove is this intent's"))),
        "{events:?}"
    );
}

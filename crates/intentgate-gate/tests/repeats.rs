//! Repeated-call events (`Gate::repeated_calls`), the input of the duplicate-call alerts:
//! one event per call for an intent that already existed, from the fast path and from
//! `begin`, none for a first call.

use std::time::Duration;

use intentgate_core::{CallStatus, IntentStatus};
use intentgate_gate::RepeatedCall;
use intentgate_ledger::Ledger;
use intentgate_mock::FaultPlan;
use intentgate_test_support::{Harness, metrics, refund};
use serde_json::json;
use tokio::sync::broadcast::error::TryRecvError;

const KEY: &str = "refund:8812:49.00";

/// The value of the sample line that starts with `series` (name and labels), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    metrics::sample(text, series).unwrap_or(0.0)
}

async fn next_event(receiver: &mut tokio::sync::broadcast::Receiver<RepeatedCall>) -> RepeatedCall {
    tokio::time::timeout(Duration::from_secs(5), receiver.recv())
        .await
        .expect("an event within 5 s")
        .expect("no event lost")
}

#[tokio::test]
async fn a_first_call_sends_no_event_and_each_settled_repeat_sends_one_with_its_count() {
    let h = Harness::new(FaultPlan::none());
    let mut events = h.gate.repeated_calls();
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Done);
    assert_eq!(events.try_recv(), Err(TryRecvError::Empty));

    let intent = h.intent(KEY).await;
    for call_count in [2, 3] {
        let again = h.call("refund_order", refund("8812", json!(49))).await;
        assert_eq!(again.status, CallStatus::AlreadyDone);
        let event = events
            .try_recv()
            .expect("the event is sent before the answer");
        let at_ms = event.at_ms;
        assert!(at_ms >= intent.first_seen_ms, "{event:?}");
        assert_eq!(
            event,
            RepeatedCall {
                tenant: "default".to_owned(),
                tool: "refund_order".to_owned(),
                key: KEY.to_owned(),
                intent_id: intent.id,
                call_count,
                at_ms,
            }
        );
        // The fast path counts the call in the background; the next repeat reads the count.
        h.intent_after_calls(KEY, call_count).await;
    }
    assert_eq!(events.try_recv(), Err(TryRecvError::Empty));

    // Reads have no intent: never a repeat.
    h.call("get_order", json!({"order_id": "8812"})).await;
    h.call("get_order", json!({"order_id": "8812"})).await;
    assert_eq!(events.try_recv(), Err(TryRecvError::Empty));

    let text = h.gate.metrics().encode();
    assert_eq!(
        sample(
            &text,
            r#"intentgate_repeated_calls_total{tool="refund_order"}"#
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_calls_total{tool="refund_order",status="already_done"}"#
        ),
        2.0
    );
}

#[tokio::test]
async fn repeats_while_the_first_call_is_in_flight_are_announced_through_begin() {
    let h = Harness::new(FaultPlan::slow(Duration::from_millis(400)));
    let mut events = h.gate.repeated_calls();
    let first = h.spawn_call("refund_order", refund("8812", json!(49)));
    // Wait until the first call holds the lease and is talking to the provider.
    for _ in 0..200 {
        let read = h.ledger.get("default", "refund_order", KEY).await.unwrap();
        if read.is_some_and(|intent| intent.status == IntentStatus::InFlight) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(h.intent(KEY).await.status, IntentStatus::InFlight);
    let repeats: Vec<_> = (0..2)
        .map(|_| h.spawn_call("refund_order", refund("8812", json!(49))))
        .collect();

    let mut counts = vec![
        next_event(&mut events).await.call_count,
        next_event(&mut events).await.call_count,
    ];
    counts.sort_unstable();
    assert_eq!(counts, [2, 3], "begin counted each repeat once");

    assert_eq!(first.await.unwrap().status, CallStatus::Done);
    for repeat in repeats {
        let outcome = repeat.await.unwrap();
        assert_eq!(
            outcome.status,
            CallStatus::AlreadyDone,
            "answered after waiting for the holder"
        );
    }
    assert_eq!(
        events.try_recv(),
        Err(TryRecvError::Empty),
        "waiting and asking again is not another repeat"
    );
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(h.intent(KEY).await.call_count, 3);

    let text = h.gate.metrics().encode();
    assert_eq!(
        sample(
            &text,
            r#"intentgate_repeated_calls_total{tool="refund_order"}"#
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_lease_waits_total{tool="refund_order"}"#
        ),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_lease_wait_seconds_count{tool="refund_order"}"#
        ),
        2.0
    );
    assert!(
        sample(
            &text,
            r#"intentgate_lease_wait_seconds_sum{tool="refund_order"}"#
        ) > 0.1,
        "they waited for the holder's 400 ms answer:\n{text}"
    );
}

#[tokio::test]
async fn a_conflicting_call_for_an_existing_key_is_a_repeat_too() {
    // An amount the schema declares only a string: `"49.0"` and `"49.00"` render the same
    // key (`{amount:.2}`) but are two strings, so two fingerprints.
    let tool = intentgate_test_support::refund_tool_with(
        intentgate_test_support::refund_schema(json!({"type": "string"})),
        Duration::from_secs(2),
    );
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        std::sync::Arc::new(intentgate_gate::SystemClock),
    );
    let mut events = h.gate.repeated_calls();
    h.call("refund_order", refund("8812", json!("49.0"))).await;
    let conflict = h.call("refund_order", refund("8812", json!("49.00"))).await;
    assert_eq!(conflict.status, CallStatus::Conflict);
    let event = events.try_recv().unwrap();
    assert_eq!((event.key.as_str(), event.call_count), (KEY, 2));
}

/// Repeats of a settled intent in a stream are counted together, a few writes for many
/// repeats, and every one of them is counted, with its `call` event.
///
/// How it cost before: one write of its own per repeat, made by a task spawned per repeat,
/// whose wake-ups on a two-core machine cost the answers more than the write did.
#[tokio::test]
async fn a_stream_of_repeats_is_counted_in_a_few_writes_and_every_repeat_counts() {
    const REPEATS: u64 = 40;
    let h = Harness::new(FaultPlan::none());
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Done);
    let started = std::time::Instant::now();
    for _ in 0..REPEATS {
        let again = h.call("refund_order", refund("8812", json!(49))).await;
        assert_eq!(again.status, CallStatus::AlreadyDone);
    }

    let intent = h.intent_after_calls(KEY, REPEATS + 1).await;
    let elapsed = started.elapsed();
    // The counts are visible once committed; the writer times its write just after.
    h.gate.drain_repeat_counts().await;
    assert_eq!(intent.call_count, REPEATS + 1);
    let events = h.ledger.events(intent.id).await.unwrap();
    let counted: Vec<String> = events
        .into_iter()
        .filter(|event| event.kind == "call")
        .filter_map(|event| event.detail)
        .collect();
    let expected: Vec<String> = (2..=REPEATS + 1)
        .map(|count| format!("repeat call {count}, answered from the ledger"))
        .collect();
    assert_eq!(counted, expected);
    let writes = sample(
        &h.gate.metrics().encode(),
        r#"intentgate_ledger_operation_duration_seconds_count{operation="record_calls"}"#,
    );
    // A write per 5 ms of repeats at most (one or two here, more on a busy machine, whose
    // repeats take longer), never one per repeat.
    let linger_periods = (elapsed.as_secs_f64() / 0.005).ceil() + 1.0;
    assert!(
        writes >= 1.0 && writes <= linger_periods.min((REPEATS / 2) as f64),
        "{REPEATS} repeats counted in {writes} writes over {elapsed:?}"
    );
    // The ledger was asked for the key twice: by the first call, which created the intent,
    // and by the first repeat, which found it settled; the others were answered from memory.
    let metrics = h.gate.metrics().encode();
    let asked = ["get", "create", "begin"].map(|operation| {
        sample(
            &metrics,
            &format!(
                r#"intentgate_ledger_operation_duration_seconds_count{{operation="{operation}"}}"#
            ),
        )
    });
    assert_eq!(
        asked.iter().sum::<f64>(),
        2.0,
        "get, create, begin: {asked:?}"
    );
}

/// A gateway stopping cleanly waits for the counts of the repeats it answered, which its
/// runtime would otherwise drop with the task that writes them.
#[tokio::test]
async fn every_repeat_is_counted_once_the_gate_drains_its_counts() {
    let h = Harness::new(FaultPlan::none());
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Done);
    for _ in 0..20 {
        let again = h.call("refund_order", refund("8812", json!(49))).await;
        assert_eq!(again.status, CallStatus::AlreadyDone);
    }
    h.gate.drain_repeat_counts().await;
    assert_eq!(h.intent(KEY).await.call_count, 21);
}

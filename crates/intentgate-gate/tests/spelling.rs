//! One spelling per intent: amounts written differently, composed and decomposed accents and
//! invisible characters, through a real SQLite ledger and the fake provider; and intents a
//! ledger recorded before fingerprints gave each value its one spelling.

use intentgate_core::{CallStatus, IntentStatus};
use intentgate_gate::Clock;
use intentgate_ledger::{Begin, BeginRequest, Finish, Ledger};
use intentgate_mock::FaultPlan;
use intentgate_test_support::{Harness, refund};
use serde_json::json;

const KEY: &str = "refund:8812:20.00";

#[tokio::test]
async fn an_amount_written_differently_is_already_done_not_a_conflict() {
    // Under LangGraph a model wrote 20.0, then "20.00": the second call was a conflict
    // ("confirm the details with the customer") for the refund that was already done.
    let h = Harness::new(FaultPlan::none());
    let first = h.call("refund_order", refund("8812", json!(20.0))).await;
    assert_eq!(first.status, CallStatus::Done);
    for amount in [json!("20.00"), json!(20), json!("20")] {
        let again = h.call("refund_order", refund("8812", amount.clone())).await;
        assert_eq!(again.status, CallStatus::AlreadyDone, "{amount}: {again:?}");
        assert_eq!(again.external_id, first.external_id);
    }
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(h.provider.requests(), 1);
    // Another amount is still another intent's arguments under this key: never a refund.
    let other = h
        .call("refund_order", refund("8812", json!("20.001")))
        .await;
    assert_eq!(other.status, CallStatus::InvalidArguments, "{other:?}");
}

#[tokio::test]
async fn an_intent_with_an_older_fingerprint_is_already_done_on_a_repeat() {
    // A ledger written before the upgrade fingerprinted "20.00" as the string it is; the
    // same call after the upgrade fingerprints it as the number 20.
    let h = Harness::new(FaultPlan::none());
    let arguments = refund("8812", json!("20.00"));
    let older = intentgate_core::fingerprint(&arguments);
    let tool = intentgate_test_support::refund_tool();
    assert_ne!(tool.fingerprint(&arguments), older, "the forms must differ");
    let now_ms = intentgate_gate::SystemClock.now_ms();
    let begun = h
        .ledger
        .begin(BeginRequest {
            tenant: "default".into(),
            tool: "refund_order".into(),
            key: KEY.into(),
            fingerprint: older.as_str().into(),
            arguments: arguments.clone(),
            lease_owner: "old-gateway/1".into(),
            lease_expires_ms: now_ms + 30_000,
            now_ms,
            count_call: true,
            retry_rejected: false,
            lookup_interval_ms: 5_000,
            resend_unknown: false,
            expect_new: true,
            policies: None,
        })
        .await
        .unwrap();
    let Begin::Execute(intent) = begun else {
        panic!("{begun:?}");
    };
    h.ledger
        .finish(Finish {
            id: intent.id,
            lease_owner: "old-gateway/1".into(),
            attempt: intent.attempt,
            now_ms,
            status: IntentStatus::Done,
            result: Some(json!({"id": "re_old"})),
            external_id: Some("re_old".into()),
            resolved_by: "upstream",
            looked_up: false,
            detail: "done before the upgrade".into(),
            lease_required: false,
            resend_stopped: None,
        })
        .await
        .unwrap();
    for amount in [json!("20.00"), json!(20.0)] {
        let again = h.call("refund_order", refund("8812", amount.clone())).await;
        assert_eq!(again.status, CallStatus::AlreadyDone, "{amount}: {again:?}");
        assert_eq!(again.external_id.as_deref(), Some("re_old"));
    }
    assert_eq!(h.provider.requests(), 0);
    let stored = h.ledger.get("default", "refund_order", KEY).await.unwrap();
    assert_eq!(
        stored.unwrap().fingerprint,
        older.as_str(),
        "kept as recorded"
    );
}

#[tokio::test]
async fn composed_and_decomposed_order_ids_are_one_intent() {
    let h = Harness::new(FaultPlan::none());
    let first = h
        .call("refund_order", refund("caf\u{e9}-1", json!(20)))
        .await;
    assert_eq!(first.status, CallStatus::Done);
    let again = h
        .call("refund_order", refund("cafe\u{301}-1", json!(20)))
        .await;
    assert_eq!(again.status, CallStatus::AlreadyDone, "{again:?}");
    assert_eq!(again.intent_key, first.intent_key);
    assert_eq!(h.provider.requests(), 1);
}

#[tokio::test]
async fn a_zero_width_joiner_in_a_key_argument_is_refused_naming_it() {
    // U+200D stayed raw in the key: two keys that looked the same, two refunds.
    let h = Harness::new(FaultPlan::none());
    let refused = h
        .call("refund_order", refund("88\u{200d}12", json!(20)))
        .await;
    assert_eq!(refused.status, CallStatus::InvalidArguments, "{refused:?}");
    assert!(
        refused.message.contains("order_id") && refused.message.contains("U+200D"),
        "{}",
        refused.message
    );
    let fullwidth = h
        .call("refund_order", refund("ord_\u{ff11}", json!(20)))
        .await;
    assert_eq!(fullwidth.status, CallStatus::InvalidArguments);
    assert!(
        fullwidth.message.contains("write `1`"),
        "{}",
        fullwidth.message
    );
    assert_eq!(h.provider.requests(), 0);
    assert!(
        h.ledger
            .get("default", "refund_order", "refund:88\u{200d}12:20.00")
            .await
            .unwrap()
            .is_none()
    );
}

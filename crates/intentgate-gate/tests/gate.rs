//! The call path of a side-effecting tool, row by row of docs/design.md section 5, through a real
//! SQLite ledger and the fake provider.

use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{CallStatus, IntentStatus, ToolDefinition};
use intentgate_gate::{CallContext, Clock, GateError, SystemClock, TokioClock};
use intentgate_ledger::{BeginRequest, CountingLedger, Ledger, ToolFlag};
use intentgate_mock::{FakeProvider, FaultPlan, Scripted, Shape};
use intentgate_test_support::{
    Harness, call, default_gate, refund, refund_schema, refund_tool, refund_tool_with,
    send_email_tool, wait_until,
};
use serde_json::json;

const KEY: &str = "refund:8812:49.00";

fn scripted(shape: Shape, commit: bool) -> Scripted {
    Scripted { shape, commit }
}

#[tokio::test]
async fn a_success_is_done_once_and_every_repeat_gets_the_stored_result() {
    let h = Harness::new(FaultPlan::none());
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Done);
    assert_eq!(first.external_id.as_deref(), Some("re_000001"));
    assert_eq!(first.intent_key.as_deref(), Some(KEY));
    for amount in [json!(49.0), json!("49.00"), json!(49)] {
        let again = h.call("refund_order", refund("8812", amount)).await;
        // "49.00" is a string, but the schema declares the amount a number or a string:
        // the same amount, so the same intent.
        assert_eq!(again.status, CallStatus::AlreadyDone, "{again:?}");
        assert_eq!(again.external_id.as_deref(), Some("re_000001"));
        assert!(again.message.contains("Do not call refund_order again"));
    }
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(h.provider.requests(), 1);
    let intent = h.intent_after_calls(KEY, 4).await;
    assert_eq!((intent.status, intent.call_count), (IntentStatus::Done, 4));
}

#[tokio::test]
async fn a_rejection_is_stored_and_replayed_without_asking_the_provider_again() {
    let h = Harness::new(FaultPlan::none());
    h.provider.script([scripted(Shape::Reject, false)]);
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Rejected);
    assert!(
        first.message.contains("Your card was declined."),
        "{}",
        first.message
    );
    let again = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(again.status, CallStatus::Rejected);
    assert_eq!(again.result, first.result);
    assert_eq!(
        (h.provider.requests(), h.provider.effect_count(KEY)),
        (1, 0)
    );
}

#[tokio::test]
async fn a_rejected_intent_of_a_retry_rejected_tool_starts_a_new_attempt_with_a_new_provider_key() {
    let mut tool = refund_tool();
    tool.retry_rejected = true;
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        Arc::new(intentgate_gate::SystemClock),
    );
    h.provider.script([scripted(Shape::Reject, false)]);
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::Rejected
    );
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::Done
    );
    let effects = h.provider.effects();
    assert_eq!(effects.len(), 1);
    assert_eq!(
        effects[0].idempotency_key.as_deref(),
        Some("refund_order:refund:8812:49.00#2")
    );
    let intent = h.intent(KEY).await;
    assert_eq!((intent.attempt, intent.epoch), (2, 2));
}

#[tokio::test]
async fn not_processed_shapes_are_retried_with_the_same_key_within_the_budget() {
    let h = Harness::new(FaultPlan {
        retry_after: Duration::from_millis(10),
        ..FaultPlan::none()
    });
    h.provider.script([
        scripted(Shape::RateLimited, false),
        scripted(Shape::NotSent, false),
    ]);
    let outcome = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(h.provider.requests(), 3);
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(
        h.intent(KEY).await.attempt,
        1,
        "retries of one attempt are not new attempts"
    );
}

#[tokio::test]
async fn spent_retries_are_not_executed_and_a_later_call_may_try_again() {
    let h = Harness::new(FaultPlan {
        retry_after: Duration::from_millis(10),
        ..FaultPlan::none()
    });
    h.provider.script([
        scripted(Shape::Unavailable, false),
        scripted(Shape::RateLimited, false),
        scripted(Shape::NotSent, false),
    ]);
    let outcome = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::NotExecuted);
    assert!(outcome.message.contains("safe to try again"));
    assert_eq!(h.intent(KEY).await.status, IntentStatus::NotExecuted);
    let later = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(later.status, CallStatus::Done);
    assert_eq!(h.intent(KEY).await.attempt, 2);
    assert_eq!(h.provider.effect_count(KEY), 1);
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_ends_the_retries() {
    let h = Harness::new(FaultPlan {
        retry_after: Duration::from_secs(60),
        ..FaultPlan::none()
    });
    h.provider.script([scripted(Shape::RateLimited, false)]);
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::NotExecuted
    );
    assert_eq!(h.provider.requests(), 1);
}

#[tokio::test]
async fn every_ambiguous_shape_that_committed_is_found_by_the_lookup() {
    for shape in [
        Shape::Timeout,
        Shape::Dropped,
        Shape::ServerError(500),
        Shape::ServerError(502),
        Shape::ServerError(503),
        Shape::ServerError(504),
    ] {
        let h = Harness::new(FaultPlan::none());
        h.provider.script([scripted(shape, true)]);
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            h.call("refund_order", refund("8812", json!(49))),
        )
        .await
        .unwrap();
        assert_eq!(outcome.status, CallStatus::Done, "{shape:?}");
        assert_eq!(
            outcome.external_id.as_deref(),
            Some("re_000001"),
            "{shape:?}"
        );
        assert_eq!(
            (h.provider.requests(), h.provider.lookups()),
            (1, 1),
            "{shape:?}: looked up, not retried"
        );
        let intent = h.intent(KEY).await;
        assert_eq!(
            (intent.status, intent.resolved_by.as_deref()),
            (IntentStatus::Done, Some("lookup"))
        );
    }
}

#[tokio::test]
async fn an_ambiguous_shape_that_did_not_commit_stays_unknown_and_is_never_retried_blindly() {
    for shape in [Shape::Timeout, Shape::Dropped, Shape::ServerError(500)] {
        let h = Harness::new(FaultPlan::none());
        h.provider.script([scripted(shape, false)]);
        let outcome = h.call("refund_order", refund("8812", json!(49))).await;
        assert_eq!(outcome.status, CallStatus::PendingUnknown, "{shape:?}");
        assert!(outcome.message.contains("Do not retry"));
        assert_eq!(h.intent(KEY).await.status, IntentStatus::Unknown);
        // A repeat right away is answered at once: the lookup is rate-limited per intent.
        assert_eq!(
            h.call("refund_order", refund("8812", json!(49)))
                .await
                .status,
            CallStatus::PendingUnknown
        );
        assert_eq!(
            (
                h.provider.requests(),
                h.provider.lookups(),
                h.provider.effect_count(KEY)
            ),
            (1, 1, 0),
            "{shape:?}"
        );
    }
}

#[tokio::test]
async fn a_409_key_in_use_is_looked_up() {
    let h = Harness::new(FaultPlan::none());
    h.provider.script([scripted(Shape::Ok, true)]);
    // Another attempt holds the key at the provider: simulate it by sending first outside the gate.
    let tool = refund_tool();
    let arguments = refund("8812", json!(49));
    let slow = FaultPlan::slow(Duration::from_secs(3));
    h.provider.set_plan(slow);
    let provider = h.provider.clone();
    let outside = tokio::spawn(async move {
        use intentgate_gate::{Upstream, UpstreamCall};
        let call = UpstreamCall {
            tool: &tool,
            arguments: &arguments,
            idempotency_key: Some("refund_order:refund:8812:49.00"),
            intent_key: Some(KEY),
            intent_id: None,
            attempt: 1,
            timeout: Duration::from_secs(5),
        };
        provider.execute(call).await
    });
    // The outside attempt holds the key at the provider (its answer is 3 s away).
    assert!(
        wait_until(Duration::from_secs(2), || async {
            h.provider.requests() == 1
        })
        .await,
        "the outside attempt reached the provider"
    );
    h.provider.set_plan(FaultPlan::none());
    let outcome = h.call("refund_order", refund("8812", json!(49))).await;
    // The provider answered 409; the lookup found the effect of the other attempt.
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!((h.provider.lookups(), h.provider.effect_count(KEY)), (1, 1));
    outside.abort();
}

#[tokio::test(start_paused = true)]
async fn an_unknown_intent_is_looked_up_again_after_the_interval() {
    let clock = Arc::new(TokioClock::new(1_700_000_000_000));
    let h = Harness::with_tools(FaultPlan::none(), vec![refund_tool()], clock);
    h.provider.script([scripted(Shape::Dropped, true)]);
    h.provider.script_lookups([false]);
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::PendingUnknown
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let later = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(later.status, CallStatus::AlreadyDone);
    assert_eq!(later.external_id.as_deref(), Some("re_000001"));
    assert_eq!(
        (
            h.provider.requests(),
            h.provider.lookups(),
            h.provider.effect_count(KEY)
        ),
        (1, 2, 1)
    );
}

#[tokio::test]
async fn changed_arguments_under_one_key_are_a_conflict_that_names_the_fields() {
    let mut tool = refund_tool();
    tool.key = Some(intentgate_core::KeyTemplate::parse("refund:{order_id}").unwrap());
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        Arc::new(intentgate_gate::SystemClock),
    );
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::Done
    );
    let conflict = h.call("refund_order", refund("8812", json!(59))).await;
    assert_eq!(conflict.status, CallStatus::Conflict);
    assert_eq!(conflict.differing_fields, ["amount"]);
    assert!(
        conflict.message.contains("(amount)"),
        "{}",
        conflict.message
    );
    assert_eq!(h.provider.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_calls_for_one_intent_make_one_upstream_execution() {
    let slow = FaultPlan::slow(Duration::from_millis(200));
    let h = Harness::new(slow);
    let calls: Vec<_> = (0..100)
        .map(|_| h.spawn_call("refund_order", refund("8812", json!(49))))
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for call in calls {
        let outcome = call.await.unwrap();
        assert_eq!(
            outcome.external_id.as_deref(),
            Some("re_000001"),
            "{outcome:?}"
        );
        *statuses.entry(outcome.status).or_insert(0) += 1;
    }
    assert_eq!(h.provider.requests(), 1);
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(statuses.get(&CallStatus::Done), Some(&1), "{statuses:?}");
    assert_eq!(
        statuses.get(&CallStatus::AlreadyDone),
        Some(&99),
        "{statuses:?}"
    );
    assert_eq!(h.intent_after_calls(KEY, 100).await.call_count, 100);
}

/// docs/design.md section 7: only `in_flight` must be durable before the upstream call. The outcome
/// is answered once its write is queued, not committed: with the ledger file locked by
/// another writer, the call still answers `done` at once, and a read of the intent waits
/// for the commit instead of showing it `in_flight`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outcome_is_answered_before_its_write_commits_and_reads_wait_for_the_commit() {
    let slow = FaultPlan::slow(Duration::from_millis(300));
    let h = Harness::new(slow);
    let call = h.spawn_call("refund_order", refund("8812", json!(49)));
    // Once `in_flight` is committed and the request is at the provider, another connection
    // takes the file's write lock: the outcome's commit must wait for it.
    let intent = loop {
        if let Some(intent) = h.ledger.get("default", "refund_order", KEY).await.unwrap() {
            break intent;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(intent.status, IntentStatus::InFlight);
    let blocker = rusqlite::Connection::open(h.ledger_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let outcome = tokio::time::timeout(Duration::from_secs(3), call)
        .await
        .expect("answered while its write waits for the lock")
        .unwrap();
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(outcome.external_id.as_deref(), Some("re_000001"));

    let read = tokio::spawn({
        let ledger = h.ledger.clone();
        async move { ledger.get_by_id(intent.id).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !read.is_finished(),
        "a read made after the answer waits for the outcome's commit"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    let settled = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the read ends once the commit lands")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(settled.status, IntentStatus::Done);
    assert_eq!(settled.external_id.as_deref(), Some("re_000001"));
    // A repeat gets what the first call was told.
    let again = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(again.status, CallStatus::AlreadyDone);
    assert_eq!(again.result, outcome.result);
    assert_eq!(h.provider.requests(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_in_flight_intent_is_resolved_by_lookup_and_never_executed_again() {
    let clock = Arc::new(TokioClock::new(1_700_000_000_000));
    for committed in [true, false] {
        let h = Harness::with_tools(FaultPlan::none(), vec![refund_tool()], clock.clone());
        // An executor took the lease, wrote in_flight, and died (its call never returned).
        let now_ms = clock.now_ms();
        let request = BeginRequest {
            tenant: "default".into(),
            tool: "refund_order".into(),
            key: KEY.into(),
            fingerprint: intentgate_core::fingerprint(&refund("8812", json!(49)))
                .as_str()
                .into(),
            arguments: refund("8812", json!(49)),
            lease_owner: "dead/1".into(),
            lease_expires_ms: now_ms + 30_000,
            now_ms,
            count_call: true,
            retry_rejected: false,
            lookup_interval_ms: 5_000,
            resend_unknown: false,
            expect_new: false,
            policies: None,
        };
        assert!(matches!(
            h.ledger.begin(request).await.unwrap(),
            intentgate_ledger::Begin::Execute(_)
        ));
        if committed {
            // It reached the provider before dying.
            use intentgate_gate::{Upstream, UpstreamCall};
            let tool = refund_tool();
            let arguments = refund("8812", json!(49));
            // Under the intent's provider key, as the gateway sends it: what the lookup
            // proves the effect by.
            let provider_key =
                intentgate_core::key::provider_key("default", "refund_order", KEY, 1);
            let call = UpstreamCall {
                tool: &tool,
                arguments: &arguments,
                idempotency_key: Some(&provider_key),
                intent_key: Some(KEY),
                intent_id: None,
                attempt: 1,
                timeout: Duration::from_secs(1),
            };
            h.provider.execute(call).await;
        }
        let requests_before = h.provider.requests();
        // While the lease lives, a caller waits (bounded) and is told it is being confirmed.
        assert_eq!(
            h.call("refund_order", refund("8812", json!(49)))
                .await
                .status,
            CallStatus::PendingUnknown
        );
        tokio::time::sleep(Duration::from_secs(31)).await;
        let outcome = h.call("refund_order", refund("8812", json!(49))).await;
        let expected = if committed {
            CallStatus::AlreadyDone
        } else {
            CallStatus::PendingUnknown
        };
        assert_eq!(outcome.status, expected);
        assert_eq!(
            h.provider.requests(),
            requests_before,
            "never executed again"
        );
        assert_eq!(h.provider.effect_count(KEY), usize::from(committed));
        let intent = h.intent(KEY).await;
        assert_eq!(
            intent.status,
            if committed {
                IntentStatus::Done
            } else {
                IntentStatus::Unknown
            }
        );
        let kinds: Vec<String> = h
            .ledger
            .events(intent.id)
            .await
            .unwrap()
            .into_iter()
            .map(|event| event.kind)
            .collect();
        assert!(kinds.contains(&"transition".to_owned()), "{kinds:?}");
    }
}

#[tokio::test]
async fn a_retry_after_the_provider_forgot_the_key_is_answered_from_the_ledger() {
    let h = Harness::new(FaultPlan::none());
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::Done
    );
    h.provider.advance(Duration::from_secs(25 * 60 * 60));
    let late = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(late.status, CallStatus::AlreadyDone);
    assert_eq!(
        (h.provider.requests(), h.provider.effect_count(KEY)),
        (1, 1)
    );
}

#[tokio::test]
async fn invalid_arguments_record_nothing_and_say_what_is_wrong() {
    let h = Harness::new(FaultPlan::none());
    let outcome = h.call("refund_order", json!({"order_id": 8812})).await;
    assert_eq!(outcome.status, CallStatus::InvalidArguments);
    assert!(
        outcome.errors.iter().any(|error| error.contains("amount")),
        "{:?}",
        outcome.errors
    );
    let outcome = h.call("refund_order", refund("8812", json!(49.005))).await;
    assert_eq!(outcome.status, CallStatus::InvalidArguments);
    assert!(
        outcome.message.contains("more than 2 decimal places"),
        "{}",
        outcome.message
    );
    assert!(h.ledger.list(0, 10).await.unwrap().is_empty());
    assert_eq!(h.provider.requests(), 0);
}

/// The example config's refund: a number above zero, at most 100000, keyed to the cent; a
/// string amount is allowed too, as some agents send one.
fn bounded_refund_tool() -> ToolDefinition {
    let amount = json!({
        "type": ["number", "string"],
        "exclusiveMinimum": 0,
        "maximum": 100000,
    });
    refund_tool_with(refund_schema(amount), Duration::from_secs(2))
}

/// Arguments parsed from JSON text, the way the servers parse a request: numbers keep the
/// text the caller sent.
fn sent(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}

// Found by attack: JSON numbers went through an f64. `49.9999999999999999` under
// `{amount:.2}` was keyed and sent as a refund of 50.00, `100000.0000000000001` passed
// `maximum: 100000`, the refusal of `49.0049999999999999` quoted `49.005`, and the amount
// `"1.5e-9223372036854775807"` overflowed the decimal parser (a panic, so a 500). Each is now
// `invalid_arguments` that quotes what was sent, with nothing recorded and nothing executed.
#[tokio::test]
async fn amounts_are_checked_as_sent_and_refused_rather_than_rounded() {
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![bounded_refund_tool()],
        Arc::new(intentgate_gate::SystemClock),
    );
    for (arguments, expected) in [
        (
            r#"{"order_id": "8812", "amount": 49.9999999999999999}"#,
            "`49.9999999999999999` has more than 2 decimal places",
        ),
        (
            r#"{"order_id": "8812", "amount": 49.0049999999999999}"#,
            "`49.0049999999999999` has more than 2 decimal places",
        ),
        (
            r#"{"order_id": "8812", "amount": 100000.0000000000001}"#,
            "100000.0000000000001 is greater than the maximum of 100000",
        ),
        (
            r#"{"order_id": "8812", "amount": "1.5e-9223372036854775807"}"#,
            "`1.5e-9223372036854775807` is too close to zero",
        ),
        (
            r#"{"order_id": "8812", "amount": 1.5e-9223372036854775807}"#,
            "is too close to zero",
        ),
        (
            r#"{"order_id": "8812", "amount": 1e99999999999999999999}"#,
            "has an exponent beyond",
        ),
    ] {
        let outcome = h.call("refund_order", sent(arguments)).await;
        assert_eq!(outcome.status, CallStatus::InvalidArguments, "{arguments}");
        assert!(
            outcome.errors.iter().any(|error| error.contains(expected)),
            "{arguments}: {:?}",
            outcome.errors
        );
        assert!(outcome.message.contains(expected), "{}", outcome.message);
        assert!(!outcome.message.contains("49.005`"), "{}", outcome.message);
    }
    assert!(h.ledger.list(0, 10).await.unwrap().is_empty());
    assert_eq!(h.provider.requests(), 0);

    // Exact amounts within the bounds go through, keyed as written.
    for (arguments, key) in [
        (
            r#"{"order_id": "8812", "amount": 99999.99}"#,
            "refund:8812:99999.99",
        ),
        (
            r#"{"order_id": "8812", "amount": 100000.000}"#,
            "refund:8812:100000.00",
        ),
    ] {
        let outcome = h.call("refund_order", sent(arguments)).await;
        assert_eq!(outcome.status, CallStatus::Done, "{arguments}: {outcome:?}");
        assert_eq!(outcome.intent_key.as_deref(), Some(key));
    }
}

// Found by attack: `format: email` was only an annotation, so "not-an-email", "" and an
// address followed by CRLF and a Bcc header were accepted and could be executed.
#[tokio::test]
async fn a_schema_format_is_enforced_before_anything_is_recorded() {
    let schema = json!({
        "type": "object",
        "properties": {"to": {"type": "string", "format": "email"}, "reference": {"type": "string"}},
        "required": ["to", "reference"]
    });
    let tool = send_email_tool(schema, 2);
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        Arc::new(intentgate_gate::SystemClock),
    );
    for to in ["not-an-email", "", "a@example.com\r\nBcc: x@evil.com"] {
        let outcome = h
            .call("send_email", json!({"to": to, "reference": "8812"}))
            .await;
        assert_eq!(outcome.status, CallStatus::InvalidArguments, "{to:?}");
        assert!(
            outcome.errors.iter().any(|error| error.contains("/to")),
            "{to:?}: {:?}",
            outcome.errors
        );
    }
    assert!(h.ledger.list(0, 10).await.unwrap().is_empty());
    assert_eq!(h.provider.requests(), 0);
    let outcome = h
        .call(
            "send_email",
            json!({"to": "ana@example.com", "reference": "8812"}),
        )
        .await;
    assert_eq!(outcome.status, CallStatus::Done, "{outcome:?}");
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_not_an_outcome() {
    let h = Harness::new(FaultPlan::none());
    let error = h
        .gate
        .call("refund_everything", json!({}), &CallContext::default())
        .await
        .unwrap_err();
    assert!(matches!(error, GateError::UnknownTool(name) if name == "refund_everything"));
}

#[tokio::test]
async fn a_switched_off_tool_is_disabled_and_executes_nothing() {
    let h = Harness::new(FaultPlan::none());
    let flag = |enabled| ToolFlag {
        tool: "refund_order".into(),
        enabled,
        reason: "incident".into(),
        actor: "ops".into(),
        updated_ms: 1,
    };
    h.ledger.set_tool_flag(flag(false)).await.unwrap();
    let outcome = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::Disabled);
    assert!(outcome.message.contains("a person will follow up"));
    assert_eq!(h.provider.requests(), 0);
    h.ledger.set_tool_flag(flag(true)).await.unwrap();
    tokio::time::sleep(intentgate_gate::FLAG_REFRESH_FOR_TESTS).await;
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49)))
            .await
            .status,
        CallStatus::Done
    );
}

/// A gate over `temp`'s ledger behind a [`CountingLedger`], with the fake provider; and 64
/// refunds of distinct orders called through it at once, each answered as it came.
struct Counted {
    gate: Arc<intentgate_gate::Gate>,
    ledger: Arc<CountingLedger<Arc<intentgate_ledger::SqliteLedger>>>,
    provider: Arc<FakeProvider>,
}

impl Counted {
    fn over(temp: &intentgate_test_support::TempLedger) -> Counted {
        let ledger = Arc::new(CountingLedger::new(temp.ledger.clone()));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let provider = Arc::new(FakeProvider::new(1, FaultPlan::none(), clock.clone()));
        let gate = Arc::new(default_gate(
            vec![refund_tool()],
            ledger.clone(),
            provider.clone(),
            clock,
        ));
        Counted {
            gate,
            ledger,
            provider,
        }
    }

    async fn refunds_at_once(&self) -> Vec<Result<intentgate_gate::CallOutcome, GateError>> {
        let callers: Vec<_> = (0..64)
            .map(|order| {
                let gate = self.gate.clone();
                tokio::spawn(async move {
                    let arguments = refund(&order.to_string(), json!(49));
                    gate.call("refund_order", arguments, &CallContext::default())
                        .await
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for caller in callers {
            outcomes.push(caller.await.unwrap());
        }
        outcomes
    }
}

#[tokio::test]
async fn concurrent_callers_that_find_the_kill_switch_flags_stale_read_them_once() {
    let temp = intentgate_test_support::TempLedger::new();
    let counted = Counted::over(&temp);
    for outcome in counted.refunds_at_once().await {
        assert_eq!(outcome.unwrap().status, CallStatus::Done);
    }
    // Each call yielded at its ledger calls: all 64 found the flags unread at once.
    assert_eq!(counted.ledger.calls("tool_flags"), 1);
}

#[tokio::test]
async fn a_failed_read_of_the_kill_switch_flags_fails_the_callers_that_waited_for_it() {
    let temp = intentgate_test_support::TempLedger::new();
    // The flags' table gone: every read of them fails.
    rusqlite::Connection::open(&temp.path)
        .unwrap()
        .execute_batch("DROP TABLE tool_flags")
        .unwrap();
    let counted = Counted::over(&temp);
    for outcome in counted.refunds_at_once().await {
        let error = outcome.expect_err("a call went on without the flags");
        assert!(matches!(error, GateError::Ledger(_)), "{error:?}");
    }
    // One read failed; the 63 callers waiting for it were told so, not each made to try in
    // turn (behind a ledger that times out, the last would wait 64 timeouts).
    assert_eq!(counted.ledger.calls("tool_flags"), 1);
    assert_eq!(counted.provider.requests(), 0);
}

#[tokio::test]
async fn reads_are_retried_without_the_ledger() {
    let h = Harness::new(FaultPlan::none());
    h.provider.script([
        scripted(Shape::ServerError(502), false),
        scripted(Shape::Timeout, false),
    ]);
    let outcome = h.call("get_order", json!({"order_id": "8812"})).await;
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(h.provider.requests(), 3);
    assert!(h.ledger.list(0, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_intent_id_from_the_application_keeps_two_equal_refunds_apart() {
    let mut tool = refund_tool();
    tool.key = Some(intentgate_core::KeyTemplate::parse("refund:{intent_id}").unwrap());
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        Arc::new(intentgate_gate::SystemClock),
    );
    let context = |id: &str| CallContext {
        tenant: "default".into(),
        intent_id: Some(id.into()),
        explicit_key: None,
        ..CallContext::default()
    };
    for id in ["int_1", "int_2", "int_1"] {
        h.gate
            .call("refund_order", refund("8812", json!(49)), &context(id))
            .await
            .unwrap();
    }
    assert_eq!(h.provider.effects().len(), 2);
    // Without the id: nothing the model can fix, so it is told to tell the user and not to
    // retry, and a retry gets the same answer (nothing was recorded).
    let missing = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(missing.status, CallStatus::InvalidArguments);
    assert_eq!(
        missing.reason,
        Some(intentgate_core::OutcomeReason::MissingIntentId)
    );
    assert!(
        missing.message.contains("Do not retry refund_order"),
        "{}",
        missing.message
    );
    assert!(
        missing.errors[0].contains("Intent-Id"),
        "{:?}",
        missing.errors
    );
    assert_eq!(
        h.call("refund_order", refund("8812", json!(49))).await,
        missing
    );
    assert_eq!(h.provider.effects().len(), 2);
}

/// The `Idempotency-Key` of an HTTP call was taken as the intent key: a caller's key named
/// any intent it liked (another tenant's business key text reached the provider), and one
/// refund under two keys was two refunds. The key never replaces the template now.
#[tokio::test]
async fn an_explicit_key_never_replaces_the_template_and_stays_bound_to_its_first_intent() {
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![refund_tool()],
        Arc::new(intentgate_gate::SystemClock),
    );
    let context = |key: &str| CallContext {
        explicit_key: Some(key.to_owned()),
        ..CallContext::default()
    };
    let call = |arguments, key: &'static str| {
        let gate = h.gate.clone();
        async move { gate.call("refund_order", arguments, &context(key)).await }
    };
    let first = call(refund("8812", json!(49)), "op-1").await.unwrap();
    assert_eq!(
        (first.status, first.intent_key.as_deref()),
        (CallStatus::Done, Some(KEY))
    );
    // A repeat under the key, and the same refund under a second key, are one intent.
    for key in ["op-1", "op-2"] {
        let repeat = call(refund("8812", json!(49)), key).await.unwrap();
        assert_eq!(repeat.status, CallStatus::AlreadyDone, "{key}");
        assert_eq!(repeat.external_id, first.external_id);
    }
    assert_eq!(h.provider.effects().len(), 1);
    assert_eq!(h.provider.effect_count(KEY), 1);
    assert_eq!(h.provider.effect_count("op-1"), 0);
    assert_eq!(
        h.ledger
            .get("default", "refund_order", "op-1")
            .await
            .unwrap(),
        None
    );

    // The key with another payload (another business key): nothing is recorded.
    let other_key = call(refund("8812", json!(50)), "op-1").await.unwrap_err();
    let GateError::IdempotencyKeyReused {
        caller_key,
        first_intent_key,
        intent_key,
        differing_fields,
    } = &other_key
    else {
        panic!("expected the key to be refused, got {other_key:?}");
    };
    assert_eq!(
        (
            caller_key.as_str(),
            first_intent_key.as_str(),
            intent_key.as_str()
        ),
        ("op-1", KEY, "refund:8812:50.00")
    );
    assert_eq!(differing_fields, &["amount".to_owned()]);
    assert!(
        other_key
            .to_string()
            .contains("nothing was recorded or executed")
    );
    // The amount as a string is the same amount where the schema declares a decimal: one
    // intent, one fingerprint, so a new key for it is bound and answered, never refused.
    let same_amount = call(refund("8812", json!("49.00")), "op-2").await.unwrap();
    assert_eq!(
        same_amount.status,
        CallStatus::AlreadyDone,
        "{same_amount:?}"
    );
    assert_eq!(
        h.ledger
            .get("default", "refund_order", "refund:8812:50.00")
            .await
            .unwrap(),
        None
    );
    assert_eq!(h.provider.effects().len(), 1);
    // Without the key, another amount is another refund, as it always was.
    let plain = h.call("refund_order", refund("8812", json!(50))).await;
    assert_eq!(plain.status, CallStatus::Done);

    // A key the ledger can't keep is the caller's mistake, and nothing is recorded.
    let too_long = "k".repeat(intentgate_core::limits::CALLER_KEY_LENGTH_MAX + 1);
    for key in ["", too_long.as_str()] {
        let outcome = h
            .gate
            .call("refund_order", refund("8813", json!(49)), &context(key))
            .await
            .unwrap();
        assert_eq!(outcome.status, CallStatus::InvalidArguments, "{key:?}");
    }
    assert_eq!(h.provider.effects().len(), 2);
}

/// A key of the same value in two tenants is compared only within each: two tenants' calls
/// under one key are two intents of their own, neither refused.
#[tokio::test]
async fn an_explicit_key_is_compared_only_within_its_tenant() {
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![refund_tool()],
        Arc::new(intentgate_gate::SystemClock),
    );
    let context = |tenant: &str| CallContext {
        tenant: tenant.to_owned(),
        intent_id: None,
        explicit_key: Some("shared-key".to_owned()),
        ..CallContext::default()
    };
    let acme = h
        .gate
        .call("refund_order", refund("1", json!(5)), &context("acme"))
        .await
        .unwrap();
    let globex = h
        .gate
        .call("refund_order", refund("2", json!(6)), &context("globex"))
        .await
        .unwrap();
    assert_eq!(
        (acme.status, acme.intent_key.as_deref()),
        (CallStatus::Done, Some("refund:1:5.00"))
    );
    assert_eq!(
        (globex.status, globex.intent_key.as_deref()),
        (CallStatus::Done, Some("refund:2:6.00"))
    );
    assert_eq!(h.provider.effects().len(), 2);
}

/// For a key that uses `{intent_id}`, the caller's own key is the intent id: the key keeps
/// the template's shape, an `intent_id` that agrees is the same intent, one that disagrees
/// is refused, and the key still can't name another payload.
#[tokio::test]
async fn an_explicit_key_is_the_intent_id_of_a_key_that_uses_one() {
    let mut tool = refund_tool();
    tool.key = Some(intentgate_core::KeyTemplate::parse("refund:{order_id}:{intent_id}").unwrap());
    let h = Harness::with_tools(
        FaultPlan::none(),
        vec![tool],
        Arc::new(intentgate_gate::SystemClock),
    );
    let context = |intent_id: Option<&str>, key: Option<&str>| CallContext {
        tenant: "default".into(),
        intent_id: intent_id.map(str::to_owned),
        explicit_key: key.map(str::to_owned),
        ..CallContext::default()
    };
    let call = |arguments, context: CallContext| {
        let gate = h.gate.clone();
        async move { gate.call("refund_order", arguments, &context).await }
    };
    let first = call(refund("8812", json!(49)), context(None, Some("op-7")))
        .await
        .unwrap();
    assert_eq!(
        (first.status, first.intent_key.as_deref()),
        (CallStatus::Done, Some("refund:8812:op-7"))
    );
    for (intent_id, key) in [
        (None, Some("op-7")),
        (Some("op-7"), Some("op-7")),
        (Some("op-7"), None),
    ] {
        let repeat = call(refund("8812", json!(49)), context(intent_id, key))
            .await
            .unwrap();
        assert_eq!(
            repeat.status,
            CallStatus::AlreadyDone,
            "{intent_id:?} {key:?}"
        );
    }
    // Another key is another intent id: the application said it is another refund.
    let second = call(refund("8812", json!(49)), context(None, Some("op-8")))
        .await
        .unwrap();
    assert_eq!(
        (second.status, second.intent_key.as_deref()),
        (CallStatus::Done, Some("refund:8812:op-8"))
    );
    // Two ids that disagree: nothing is recorded or executed.
    let both = call(
        refund("8812", json!(49)),
        context(Some("op-9"), Some("op-10")),
    )
    .await
    .unwrap();
    assert_eq!(both.status, CallStatus::InvalidArguments);
    assert!(
        both.message
            .contains("Intent-Id `op-9` and Idempotency-Key `op-10`"),
        "{}",
        both.message
    );
    // The key of another order would be another intent key: refused as another payload.
    let other = call(refund("8813", json!(49)), context(None, Some("op-7")))
        .await
        .unwrap_err();
    assert!(
        matches!(&other, GateError::IdempotencyKeyReused { first_intent_key, intent_key, differing_fields, .. }
            if first_intent_key == "refund:8812:op-7" && intent_key == "refund:8813:op-7"
                && differing_fields == &["order_id".to_owned()]),
        "{other:?}"
    );
    assert_eq!(h.provider.effects().len(), 2);
    for key in ["refund:8812:op-9", "refund:8812:op-10", "refund:8813:op-7"] {
        assert_eq!(
            h.ledger.get("default", "refund_order", key).await.unwrap(),
            None,
            "{key}"
        );
    }
}

/// An upstream answer over the ledger's result limit made the write that settles the intent
/// fail, leaving a done refund in flight until a lookup.
#[tokio::test]
async fn a_result_too_large_to_store_still_settles_the_intent() {
    use async_trait::async_trait;
    use intentgate_core::UpstreamObservation;
    use intentgate_gate::{LookupOutcome, SystemClock, Upstream, UpstreamCall};
    struct Huge;
    #[async_trait]
    impl Upstream for Huge {
        async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
            let body = json!({"id": "re_big", "blob": "x".repeat(100 * 1024)});
            UpstreamObservation::response(200, body)
        }
        async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
            LookupOutcome::Unsupported
        }
    }
    let h = Harness::new(FaultPlan::none());
    let gate = default_gate(
        vec![refund_tool()],
        h.ledger.clone(),
        Arc::new(Huge),
        Arc::new(SystemClock),
    );
    let outcome = call(&gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(outcome.external_id.as_deref(), Some("re_big"));
    let intent = h.intent(KEY).await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.result.unwrap()["truncated"], true);
}

/// A call answered once its outcome is queued has the outcome's write timed when it commits
/// (`QueuedFinish::then`, run where the write completes): by the time every queued finish is
/// done, the `finish` phase holds its one sample.
#[tokio::test]
async fn a_queued_outcome_is_timed_and_counted_when_its_write_commits() {
    let h = Harness::new(FaultPlan::none());
    let first = h.call("refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Done);
    h.ledger.drain_queued().await;
    let text = h.gate.metrics().encode();
    let finishes = intentgate_test_support::metrics::sample(
        &text,
        r#"intentgate_ledger_operation_duration_seconds_count{operation="finish"}"#,
    );
    assert_eq!(finishes, Some(1.0), "{text}");
}

/// A repeat of a settled intent the gate keeps in memory is never created first, even when
/// it arrives while the writer commits other calls' intents and the ledger can't confirm its
/// epoch: it is read instead (a read doesn't wait for the writer, a `create` does). Only the
/// 64 new calls made meanwhile create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_kept_in_memory_are_read_not_created_while_the_writer_commits() {
    let temp = intentgate_test_support::TempLedger::new();
    let counted = Counted::over(&temp);
    let repeat = || {
        let gate = counted.gate.clone();
        async move {
            gate.call(
                "refund_order",
                refund("repeated", json!(49)),
                &CallContext::default(),
            )
            .await
            .unwrap()
            .status
        }
    };
    assert_eq!(repeat().await, CallStatus::Done);
    // Read once (the create finds it), and kept from then on.
    assert_eq!(repeat().await, CallStatus::AlreadyDone);
    let created_before = counted.ledger.calls("create");
    let repeats: Vec<_> = (0..64).map(|_| tokio::spawn(repeat())).collect();
    for outcome in counted.refunds_at_once().await {
        assert_eq!(outcome.unwrap().status, CallStatus::Done);
    }
    for repeated in repeats {
        assert_eq!(repeated.await.unwrap(), CallStatus::AlreadyDone);
    }
    assert_eq!(counted.ledger.calls("create") - created_before, 64);
}

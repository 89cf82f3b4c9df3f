//! The intent API's side of the gate (`Gate::grant`, `settle`, `renew`) for a tool whose
//! effect the caller's own code performs, through a real SQLite ledger. The clock is a
//! hand-moved one, so leases expire and lookups fall due exactly when a test says.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use intentgate_core::key::provider_key;
use intentgate_core::limits::RESULT_BYTES_MAX;
use intentgate_core::{CallStatus, IntentStatus, ResendStop, ToolDefinition};
use intentgate_gate::{
    CallContext, Clock, GateError, GateOptions, Grant, GrantedLease, LEASE_MARGIN, LOOKUP_INTERVAL,
    Resolution, SettleError, Settlement,
};
use intentgate_ledger::{IntentRecord, Ledger, ToolFlag};
use intentgate_test_support::{
    Harness, HarnessOptions, client_tool, refund, refund_tool, wait_until,
};
use serde_json::{Value, json};

const T0: i64 = 1_760_000_000_000;
const KEY: &str = "refund:8812:49.00";
/// The test tool's timeout (`refund_tool`) plus the lease margin.
const LEASE_MS: i64 = 2_000 + LEASE_MARGIN.as_millis() as i64;

/// A clock that moves only when the test moves it.
struct ManualClock(AtomicI64);

impl ManualClock {
    fn advance(&self, by_ms: i64) {
        self.0.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Client {
    h: Harness,
    clock: Arc<ManualClock>,
}

impl Client {
    fn new(resend_window: Option<Duration>) -> Client {
        Client::with_resends(resend_window, 50)
    }

    fn with_resends(resend_window: Option<Duration>, resends_per_second: u32) -> Client {
        let clock = Arc::new(ManualClock(AtomicI64::new(T0)));
        let h = Harness::build(HarnessOptions {
            clock: clock.clone(),
            gate: GateOptions {
                resolution: Resolution {
                    resends_per_second,
                    ..Resolution::default()
                },
                ..GateOptions::default()
            },
            ..HarnessOptions::new(vec![
                // `refund_order`, executed by the caller's code; with a resend window when given.
                ToolDefinition {
                    resend_window,
                    ..client_tool(refund_tool())
                },
                refund_tool_named_call(),
            ])
        });
        Client { h, clock }
    }

    async fn grant_as(&self, tenant: &str, arguments: Value) -> Grant {
        let context = CallContext {
            tenant: tenant.to_owned(),
            ..CallContext::default()
        };
        self.h
            .gate
            .grant("refund_order", arguments, &context)
            .await
            .unwrap()
    }

    async fn grant(&self) -> Grant {
        self.grant_as("default", refund("8812", json!(49))).await
    }

    async fn settle(
        &self,
        lease: &GrantedLease,
        settlement: Settlement,
    ) -> Result<Grant, SettleError> {
        self.h
            .gate
            .settle("default", lease.intent_id, lease.token.as_str(), settlement)
            .await
    }

    async fn intent(&self) -> IntentRecord {
        self.h.intent(KEY).await
    }
}

/// A gateway-executed side effect beside the client one.
fn refund_tool_named_call() -> ToolDefinition {
    let mut tool = refund_tool();
    tool.name = "refund_by_gateway".to_owned();
    tool
}

fn execute(grant: Grant) -> GrantedLease {
    match grant {
        Grant::Execute(lease) => lease,
        other => panic!("expected an execute grant, got {other:?}"),
    }
}

fn look_up(grant: Grant) -> GrantedLease {
    match grant {
        Grant::LookUp(lease) => lease,
        other => panic!("expected a look_up grant, got {other:?}"),
    }
}

fn answer(grant: Grant) -> intentgate_gate::CallOutcome {
    match grant {
        Grant::Answer(outcome) => outcome,
        other => panic!("expected an answer, got {other:?}"),
    }
}

fn done() -> Settlement {
    Settlement::Done {
        result: Some(json!({"id": "re_1", "amount": "49.00"})),
        external_id: Some("re_1".to_owned()),
    }
}

fn unknown() -> Settlement {
    Settlement::Unknown {
        reason: "timeout after 2 s".to_owned(),
        resend_stop: None,
    }
}

/// `unknown`, with the provider's answer that stops same-key re-sends.
fn unknown_stopped(stop: ResendStop) -> Settlement {
    Settlement::Unknown {
        reason: "HTTP 500 api_error, Idempotent-Replayed: true".to_owned(),
        resend_stop: Some(stop),
    }
}

#[tokio::test]
async fn the_first_grant_executes_under_a_hashed_lease_and_done_is_answered_to_every_repeat() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    assert_eq!(lease.tool, "refund_order");
    assert_eq!(lease.intent_key, KEY);
    assert_eq!(
        lease.provider_key,
        provider_key("default", "refund_order", KEY, 1)
    );
    assert_eq!((lease.attempt, lease.resend), (1, false));
    assert_eq!(lease.expires_at_ms, T0 + LEASE_MS);
    assert_eq!(lease.duration_ms, LEASE_MS);
    let token = lease.token.as_str();
    assert!(
        token.starts_with("igl_") && token.len() == 4 + 64,
        "{token}"
    );
    assert!(!format!("{:?}", lease.token).contains(&token[4..]));
    let intent = c.intent().await;
    assert_eq!(intent.status, IntentStatus::InFlight);
    let owner = intent.lease_owner.unwrap();
    assert!(
        owner.starts_with("client:") && owner.len() == 7 + 64,
        "{owner}"
    );
    assert!(!owner.contains(&token[4..]));

    let settled = answer(c.settle(&lease, done()).await.unwrap());
    assert_eq!(settled.status, CallStatus::Done);
    assert_eq!(settled.external_id.as_deref(), Some("re_1"));
    let intent = c.intent().await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.resolved_by.as_deref(), Some("client"));
    assert_eq!(
        intent.result,
        Some(json!({"id": "re_1", "amount": "49.00"}))
    );

    let repeat = answer(c.grant().await);
    assert_eq!(repeat.status, CallStatus::AlreadyDone);
    assert_eq!(
        repeat.result,
        Some(json!({"id": "re_1", "amount": "49.00"}))
    );
    // The gateway itself sent nothing.
    assert_eq!(c.h.provider.requests(), 0);
}

#[tokio::test]
async fn a_repeat_while_the_lease_is_held_waits_and_gets_the_answer_after_the_settle() {
    let c = Arc::new(Client::new(None));
    let lease = execute(c.grant().await);
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.grant().await })
    };
    // The repeat has been counted, so it has met the held lease.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            c.intent().await.call_count == 2
        })
        .await,
        "the repeat reached the ledger"
    );
    assert!(!waiter.is_finished(), "the repeat waits for the holder");
    answer(c.settle(&lease, done()).await.unwrap());
    let repeat = answer(waiter.await.unwrap());
    assert_eq!(repeat.status, CallStatus::AlreadyDone);
    assert_eq!(c.intent().await.call_count, 2);
}

/// A grant's `Idempotency-Key` follows the call path's rules: it never replaces the
/// business key, another payload under it is refused with nothing granted, and the same
/// business intent under a second key is one intent.
#[tokio::test]
async fn other_arguments_under_the_same_idempotency_key_are_refused_and_nothing_is_granted() {
    let c = Client::new(None);
    let context = |key: &str| CallContext {
        explicit_key: Some(key.to_owned()),
        ..CallContext::default()
    };
    let gate = &c.h.gate;
    let first = gate
        .grant("refund_order", refund("8812", json!(49)), &context("ik-1"))
        .await
        .unwrap();
    let lease = execute(first);
    assert_eq!(lease.intent_key, KEY);
    let other = gate
        .grant("refund_order", refund("8813", json!(49)), &context("ik-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&other, GateError::IdempotencyKeyReused { first_intent_key, intent_key, differing_fields, .. }
            if first_intent_key == KEY && intent_key == "refund:8813:49.00"
                && differing_fields == &["order_id".to_owned()]),
        "{other:?}"
    );
    assert_eq!(
        c.h.ledger
            .get("default", "refund_order", "refund:8813:49.00")
            .await
            .unwrap(),
        None
    );
    answer(c.settle(&lease, done()).await.unwrap());
    let second_key = gate
        .grant("refund_order", refund("8812", json!(49)), &context("ik-2"))
        .await
        .unwrap();
    assert_eq!(answer(second_key).status, CallStatus::AlreadyDone);
}

#[tokio::test]
async fn invalid_arguments_and_a_switched_off_tool_are_answered_and_record_nothing() {
    let c = Client::new(None);
    let invalid = answer(c.grant_as("default", json!({"order_id": "8812"})).await);
    assert_eq!(invalid.status, CallStatus::InvalidArguments);
    assert!(!invalid.errors.is_empty());
    c.h.ledger
        .set_tool_flag(ToolFlag {
            tool: "refund_order".into(),
            enabled: false,
            reason: "incident".into(),
            actor: "ops".into(),
            updated_ms: 1,
        })
        .await
        .unwrap();
    let disabled = answer(c.grant().await);
    assert_eq!(disabled.status, CallStatus::Disabled);
    let none =
        c.h.ledger
            .get("default", "refund_order", KEY)
            .await
            .unwrap();
    assert_eq!(none, None);
}

#[tokio::test]
async fn a_rejection_is_stored_and_answered_to_repeats() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    let settlement = Settlement::Rejected {
        reason: "card declined".to_owned(),
        result: None,
    };
    let rejected = answer(c.settle(&lease, settlement).await.unwrap());
    assert_eq!(rejected.status, CallStatus::Rejected);
    assert!(
        rejected.message.contains("card declined"),
        "{}",
        rejected.message
    );
    let repeat = answer(c.grant().await);
    assert_eq!(repeat.status, CallStatus::Rejected);
    assert!(
        repeat.message.contains("card declined"),
        "{}",
        repeat.message
    );
    assert_eq!(c.intent().await.status, IntentStatus::Rejected);
}

#[tokio::test]
async fn not_executed_is_answered_and_the_next_grant_executes_again_with_the_same_provider_key() {
    let c = Client::new(None);
    let first = execute(c.grant().await);
    let settlement = Settlement::NotExecuted {
        reason: "429 before sending".to_owned(),
    };
    let outcome = answer(c.settle(&first, settlement).await.unwrap());
    assert_eq!(outcome.status, CallStatus::NotExecuted);
    let second = execute(c.grant().await);
    assert_eq!(second.attempt, 2);
    assert_eq!(second.provider_key, first.provider_key);
    assert_ne!(second.token, first.token);
}

#[tokio::test]
async fn an_unknown_outcome_is_granted_as_one_look_up_per_interval() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    let pending = answer(c.settle(&lease, unknown()).await.unwrap());
    assert_eq!(pending.status, CallStatus::PendingUnknown);
    assert_eq!(c.intent().await.status, IntentStatus::Unknown);

    let lookup = look_up(c.grant().await);
    assert_eq!(lookup.attempt, 1);
    assert_eq!(lookup.provider_key, lease.provider_key);
    // Executing is not what a look-up grant is for.
    let refused = c
        .settle(
            &lookup,
            Settlement::NotExecuted {
                reason: "no".to_owned(),
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(refused, SettleError::NotAllowed { .. }),
        "{refused}"
    );
    let nothing = answer(c.settle(&lookup, Settlement::NotFound).await.unwrap());
    assert_eq!(nothing.status, CallStatus::PendingUnknown);
    // The next lookup is due one interval after this one: callers in between are answered.
    let early = answer(c.grant().await);
    assert_eq!(early.status, CallStatus::PendingUnknown);
    c.clock.advance(LOOKUP_INTERVAL.as_millis() as i64);
    let again = look_up(c.grant().await);
    let found = answer(c.settle(&again, done()).await.unwrap());
    assert_eq!(found.status, CallStatus::AlreadyDone);
    let intent = c.intent().await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.resolved_by.as_deref(), Some("lookup"));
}

#[tokio::test]
async fn not_found_inside_the_resend_window_grants_a_re_send_with_the_same_provider_key() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    let first = execute(c.grant().await);
    answer(c.settle(&first, unknown()).await.unwrap());
    // Inside the window the next step is due one re-send backoff later.
    c.clock
        .advance(Resolution::default().backoff(1).as_millis() as i64);
    let lookup = look_up(c.grant().await);
    let resend = execute(c.settle(&lookup, Settlement::NotFound).await.unwrap());
    assert!(resend.resend);
    assert_eq!(resend.attempt, 2);
    assert_eq!(resend.provider_key, first.provider_key);
    assert_eq!(c.intent().await.status, IntentStatus::InFlight);
    // A re-send that was not executed proves nothing about the first attempt.
    let settlement = Settlement::NotExecuted {
        reason: "429".to_owned(),
    };
    let outcome = answer(c.settle(&resend, settlement).await.unwrap());
    assert_eq!(outcome.status, CallStatus::PendingUnknown);
    assert_eq!(c.intent().await.status, IntentStatus::Unknown);
}

#[tokio::test]
async fn without_a_resend_window_or_budget_not_found_stays_pending_unknown() {
    // One re-send a second: the first intent takes it, the second finds the bucket empty.
    let c = Client::with_resends(Some(Duration::from_secs(24 * 3600)), 1);
    let mut lookups = Vec::new();
    for order in ["1", "2"] {
        let lease = execute(c.grant_as("default", refund(order, json!(5))).await);
        answer(c.settle(&lease, unknown()).await.unwrap());
    }
    c.clock.advance(1_000);
    for order in ["1", "2"] {
        lookups.push(look_up(
            c.grant_as("default", refund(order, json!(5))).await,
        ));
    }
    execute(c.settle(&lookups[0], Settlement::NotFound).await.unwrap());
    let deferred = answer(c.settle(&lookups[1], Settlement::NotFound).await.unwrap());
    assert_eq!(deferred.status, CallStatus::PendingUnknown);

    let c = Client::new(None);
    let lease = execute(c.grant().await);
    answer(c.settle(&lease, unknown()).await.unwrap());
    let lookup = look_up(c.grant().await);
    let outcome = answer(c.settle(&lookup, Settlement::NotFound).await.unwrap());
    assert_eq!(outcome.status, CallStatus::PendingUnknown);
}

#[tokio::test]
async fn a_settle_without_the_live_lease_is_refused_and_changes_nothing() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    let before = c.intent().await;
    let gate = &c.h.gate;

    let wrong = gate
        .settle("default", lease.intent_id, "igl_00", done())
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, SettleError::LeaseLost(intent) if intent.status == IntentStatus::InFlight),
        "{wrong}"
    );
    let other_tenant = gate
        .settle("globex", lease.intent_id, lease.token.as_str(), done())
        .await
        .unwrap_err();
    assert!(
        matches!(other_tenant, SettleError::NotFound(_)),
        "{other_tenant}"
    );
    let no_such = gate
        .settle(
            "default",
            lease.intent_id + 100,
            lease.token.as_str(),
            done(),
        )
        .await
        .unwrap_err();
    assert!(matches!(no_such, SettleError::NotFound(_)), "{no_such}");
    // `not_found` answers a lookup, not an execution.
    let refused = c.settle(&lease, Settlement::NotFound).await.unwrap_err();
    assert!(
        matches!(refused, SettleError::NotAllowed { .. }),
        "{refused}"
    );
    let too_large = Settlement::Done {
        result: Some(json!("x".repeat(RESULT_BYTES_MAX))),
        external_id: None,
    };
    let refused = c.settle(&lease, too_large).await.unwrap_err();
    assert!(
        matches!(
            refused,
            SettleError::TooLarge {
                field: "result",
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!(c.intent().await, before);

    // Once the lease has expired, the holder's settle records nothing.
    c.clock.advance(LEASE_MS);
    let late = c.settle(&lease, done()).await.unwrap_err();
    assert!(matches!(late, SettleError::LeaseLost(_)), "{late}");
    assert_eq!(c.intent().await, before);
    // The next caller looks it up.
    look_up(c.grant().await);
}

#[tokio::test]
async fn a_second_settle_of_one_lease_is_refused() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    answer(c.settle(&lease, done()).await.unwrap());
    let again = c.settle(&lease, unknown()).await.unwrap_err();
    assert!(
        matches!(&again, SettleError::LeaseLost(intent) if intent.status == IntentStatus::Done),
        "{again}"
    );
    assert_eq!(c.intent().await.status, IntentStatus::Done);
}

#[tokio::test]
async fn a_renewed_lease_outlives_its_first_expiry_and_still_settles() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    c.clock.advance(LEASE_MS - 1_000);
    let renewed =
        c.h.gate
            .renew("default", lease.intent_id, lease.token.as_str())
            .await
            .unwrap();
    assert_eq!(renewed.token, lease.token);
    assert_eq!(renewed.expires_at_ms, T0 + LEASE_MS - 1_000 + LEASE_MS);
    // Past the first expiry, the lease holds.
    c.clock.advance(2_000);
    assert_eq!(c.intent().await.status, IntentStatus::InFlight);
    let outcome = answer(c.settle(&lease, done()).await.unwrap());
    assert_eq!(outcome.status, CallStatus::Done);
    // A settled lease can't be renewed; nor can another token or tenant renew.
    let gate = &c.h.gate;
    let lost = gate
        .renew("default", lease.intent_id, lease.token.as_str())
        .await
        .unwrap_err();
    assert!(matches!(lost, SettleError::LeaseLost(_)), "{lost}");
    let wrong = gate
        .renew("default", lease.intent_id, "igl_1")
        .await
        .unwrap_err();
    assert!(matches!(wrong, SettleError::LeaseLost(_)), "{wrong}");
    let other = gate
        .renew("globex", lease.intent_id, lease.token.as_str())
        .await
        .unwrap_err();
    assert!(matches!(other, SettleError::NotFound(_)), "{other}");
}

#[tokio::test]
async fn an_expired_lease_is_granted_as_a_look_up_and_the_old_holder_is_refused() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    c.clock.advance(LEASE_MS + 1);
    let lookup = look_up(c.grant().await);
    assert_eq!(c.intent().await.status, IntentStatus::Unknown);
    let late = c.settle(&lease, done()).await.unwrap_err();
    assert!(matches!(late, SettleError::LeaseLost(_)), "{late}");
    // The old token can't renew the new holder's lease either.
    let gate = &c.h.gate;
    let stolen = gate
        .renew("default", lease.intent_id, lease.token.as_str())
        .await
        .unwrap_err();
    assert!(matches!(stolen, SettleError::LeaseLost(_)), "{stolen}");
    answer(c.settle(&lookup, done()).await.unwrap());
}

#[tokio::test]
async fn the_sweeper_sends_nothing_for_a_client_tool_and_does_not_come_back_for_it() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    execute(c.grant().await);
    c.clock.advance(LEASE_MS + 1);
    let report = c.h.gate.sweep(100).await.unwrap();
    assert_eq!(report.looked_up + report.resent, 0, "{report:?}");
    assert_eq!(report.next_due_ms, None, "{report:?}");
    assert_eq!(c.intent().await.status, IntentStatus::Unknown);
    assert_eq!(c.intent().await.lease_owner, None);
    c.clock.advance(LOOKUP_INTERVAL.as_millis() as i64);
    let again = c.h.gate.sweep(100).await.unwrap();
    // Its unknown intents are not even listed: they hold no other intent back.
    assert_eq!(again.examined, 0, "{again:?}");
    assert_eq!(again.next_due_ms, None, "{again:?}");
    assert!(again.nothing_left(), "{again:?}");
    assert_eq!(c.h.provider.requests(), 0);
    assert_eq!(c.intent().await.status, IntentStatus::Unknown);
    // The caller's code is the one to look it up.
    look_up(c.grant().await);
}

#[tokio::test]
async fn calling_a_client_tool_is_refused_naming_the_intents_route_and_granting_a_gateway_tool_too()
{
    let c = Client::new(None);
    let context = CallContext::default();
    let called =
        c.h.gate
            .call("refund_order", refund("8812", json!(49)), &context)
            .await
            .unwrap_err();
    assert!(matches!(called, GateError::ClientExecuted(_)));
    assert!(
        called
            .to_string()
            .contains("POST /v1/tools/refund_order/intents"),
        "{called}"
    );
    let granted =
        c.h.gate
            .grant("refund_by_gateway", refund("8812", json!(49)), &context)
            .await
            .unwrap_err();
    assert!(
        matches!(granted, GateError::NotClientExecuted(_)),
        "{granted}"
    );
    let unknown =
        c.h.gate
            .grant("nope", json!({}), &context)
            .await
            .unwrap_err();
    assert!(matches!(unknown, GateError::UnknownTool(_)), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_concurrent_granters_of_one_intent_exactly_one_executes() {
    const GRANTERS: usize = 16;
    let c = Arc::new(Client::new(None));
    let tasks: Vec<_> = (0..GRANTERS)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.grant().await })
        })
        .collect();
    // Every granter has been counted: one holds the lease, the others wait for it.
    for _ in 0..500 {
        let counted =
            c.h.ledger
                .get("default", "refund_order", KEY)
                .await
                .unwrap()
                .is_some_and(|intent| intent.call_count == GRANTERS as u64);
        if counted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The holder's grant has come back (the others are waiting for its lease).
    assert!(
        wait_until(Duration::from_secs(5), || async {
            tasks.iter().any(|task| task.is_finished())
        })
        .await,
        "no granter was answered"
    );
    let mut waiting = Vec::new();
    let mut leases = Vec::new();
    for task in tasks {
        if task.is_finished() {
            leases.push(execute(task.await.unwrap()));
        } else {
            waiting.push(task);
        }
    }
    assert_eq!(leases.len(), 1, "exactly one granter executes");
    answer(c.settle(&leases[0], done()).await.unwrap());
    for task in waiting {
        assert_eq!(answer(task.await.unwrap()).status, CallStatus::AlreadyDone);
    }
}

#[tokio::test]
async fn the_same_key_in_two_tenants_is_two_intents() {
    let c = Client::new(None);
    let a = execute(c.grant_as("acme", refund("8812", json!(49))).await);
    let b = execute(c.grant_as("globex", refund("8812", json!(49))).await);
    assert_ne!(a.intent_id, b.intent_id);
    assert_ne!(a.provider_key, b.provider_key);
    let wrong_tenant =
        c.h.gate
            .settle("globex", a.intent_id, a.token.as_str(), done())
            .await
            .unwrap_err();
    assert!(matches!(wrong_tenant, SettleError::NotFound(_)));
}

#[tokio::test]
async fn a_grant_and_its_settle_count_once_in_the_calls_by_outcome() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    answer(c.settle(&lease, done()).await.unwrap());
    answer(c.grant().await);
    let text = c.h.gate.metrics().encode();
    let count = |status: &str| {
        let series = format!(r#"intentgate_calls_total{{tool="refund_order",status="{status}"}}"#);
        intentgate_test_support::metrics::sample::<u64>(&text, &series)
    };
    assert_eq!(count("done"), Some(1), "{text}");
    assert_eq!(count("already_done"), Some(1), "{text}");
}

/// How many attempts of `refund_order` stopped their intent's re-sends, for `reason`.
fn resends_stopped(c: &Client, reason: ResendStop) -> Option<u64> {
    let text = c.h.gate.metrics().encode();
    let series = format!(
        r#"intentgate_resends_stopped_total{{tool="refund_order",reason="{}"}}"#,
        reason.as_str()
    );
    intentgate_test_support::metrics::sample::<u64>(&text, &series)
}

/// Steps `c`'s intent through `rounds` lookup intervals: each grant is a look-up (never an
/// execute), settled `not_found`, and answered `pending_unknown` (never a re-send grant).
async fn only_lookups(c: &Client, rounds: usize) {
    for round in 0..rounds {
        c.clock.advance(LOOKUP_INTERVAL.as_millis() as i64);
        let lookup = match c.grant().await {
            Grant::LookUp(lease) => lease,
            other => panic!("round {round}: expected a look_up grant, got {other:?}"),
        };
        match c.settle(&lookup, Settlement::NotFound).await.unwrap() {
            Grant::Answer(outcome) => {
                assert_eq!(outcome.status, CallStatus::PendingUnknown, "round {round}")
            }
            other => panic!("round {round}: a re-send was granted after the stop: {other:?}"),
        }
    }
}

/// The caller's code got a stored 5xx replayed for the provider key (Stripe's
/// `Idempotent-Replayed: true`): every same-key re-send would get it again, so inside the
/// resend window, where a lookup that found nothing would grant a re-send, only lookups are
/// granted. Recorded as the call path records it: the ledger's column, the event's detail,
/// the metric.
#[tokio::test]
async fn an_unknown_settle_saying_the_provider_replays_a_500_stops_re_sends_for_good() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    let first = execute(c.grant().await);
    let settled = c
        .settle(&first, unknown_stopped(ResendStop::ReplayedServerError))
        .await
        .unwrap();
    assert_eq!(answer(settled).status, CallStatus::PendingUnknown);
    let intent = c.intent().await;
    assert_eq!(intent.status, IntentStatus::Unknown);
    assert_eq!(intent.resend_stopped, Some(ResendStop::ReplayedServerError));
    assert_eq!(
        resends_stopped(&c, ResendStop::ReplayedServerError),
        Some(1)
    );

    let events = c.h.ledger.events(intent.id).await.unwrap();
    let stopped: Vec<&str> = events
        .iter()
        .filter_map(|event| event.detail.as_deref())
        .filter(|detail| detail.contains("re-sends stopped for good"))
        .collect();
    assert_eq!(stopped.len(), 1, "{events:#?}");
    assert!(
        stopped[0].contains("replays a stored server error")
            && stopped[0].contains("Idempotent-Replayed"),
        "{}",
        stopped[0]
    );

    // Without the stop, the first not_found here grants the re-send (see
    // not_found_inside_the_resend_window_grants_a_re_send_with_the_same_provider_key).
    only_lookups(&c, 5).await;
    let intent = c.intent().await;
    assert_eq!((intent.status, intent.attempt), (IntentStatus::Unknown, 1));
    assert_eq!(intent.resend_stopped, Some(ResendStop::ReplayedServerError));
    // A lookup may still find the effect.
    c.clock.advance(LOOKUP_INTERVAL.as_millis() as i64);
    let lookup = look_up(c.grant().await);
    let found = answer(c.settle(&lookup, done()).await.unwrap());
    assert_eq!(found.status, CallStatus::AlreadyDone);
    assert_eq!(
        resends_stopped(&c, ResendStop::ReplayedServerError),
        Some(1)
    );
}

/// A re-send grant that got the provider's "don't retry" 5xx stops the re-sends too, on the
/// attempt that got it.
#[tokio::test]
async fn a_re_send_settled_unknown_with_no_retry_is_the_last_re_send() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    let first = execute(c.grant().await);
    answer(c.settle(&first, unknown()).await.unwrap());
    c.clock
        .advance(Resolution::default().backoff(1).as_millis() as i64);
    let lookup = look_up(c.grant().await);
    let resend = execute(c.settle(&lookup, Settlement::NotFound).await.unwrap());
    assert!(resend.resend);
    let settled = c
        .settle(&resend, unknown_stopped(ResendStop::ProviderSaysNoRetry))
        .await
        .unwrap();
    assert_eq!(answer(settled).status, CallStatus::PendingUnknown);
    let intent = c.intent().await;
    assert_eq!((intent.status, intent.attempt), (IntentStatus::Unknown, 2));
    assert_eq!(intent.resend_stopped, Some(ResendStop::ProviderSaysNoRetry));
    assert_eq!(
        resends_stopped(&c, ResendStop::ProviderSaysNoRetry),
        Some(1)
    );
    only_lookups(&c, 3).await;
    assert_eq!(c.intent().await.attempt, 2);
}

/// A key the provider holds for other parameters is told to the owner, as on the call path,
/// with the caller's words as the provider's message.
#[tokio::test]
async fn an_unknown_settle_saying_the_key_was_reused_is_told_to_the_owner() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    let mut reuses = c.h.gate.key_reuses();
    let first = execute(c.grant().await);
    let settlement = Settlement::Unknown {
        reason: "idempotency_error: Keys for idempotent requests can only be used with the same parameters".to_owned(),
        resend_stop: Some(ResendStop::KeyReused),
    };
    answer(c.settle(&first, settlement).await.unwrap());
    let intent = c.intent().await;
    assert_eq!(intent.resend_stopped, Some(ResendStop::KeyReused));
    let told = reuses.try_recv().expect("the owner's notice is sent");
    assert_eq!(
        (told.tool.as_str(), told.intent_key.as_str(), told.intent_id),
        ("refund_order", KEY, intent.id)
    );
    assert!(
        told.provider_message.contains("same parameters"),
        "{told:?}"
    );
    only_lookups(&c, 2).await;
}

/// A lookup sends nothing under the key, so its settle can't stop re-sends; and a settle
/// that no longer holds the lease records and counts nothing.
#[tokio::test]
async fn a_stop_is_refused_on_a_look_up_grant_and_without_the_lease() {
    let c = Client::new(Some(Duration::from_secs(24 * 3600)));
    let first = execute(c.grant().await);
    answer(c.settle(&first, unknown()).await.unwrap());
    c.clock
        .advance(Resolution::default().backoff(1).as_millis() as i64);
    let lookup = look_up(c.grant().await);
    let before = c.intent().await;
    let refused = c
        .settle(&lookup, unknown_stopped(ResendStop::ReplayedServerError))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            SettleError::NotAllowed {
                outcome: "unknown",
                ..
            }
        ),
        "{refused}"
    );
    assert!(refused.to_string().contains("resend_stop"), "{refused}");
    assert_eq!(c.intent().await, before);

    // The re-send's lease runs out before its settle: nothing is stopped.
    let resend = execute(c.settle(&lookup, Settlement::NotFound).await.unwrap());
    c.clock.advance(LEASE_MS + 1);
    let late = c
        .settle(&resend, unknown_stopped(ResendStop::ReplayedServerError))
        .await
        .unwrap_err();
    assert!(matches!(late, SettleError::LeaseLost(_)), "{late}");
    assert_eq!(c.intent().await.resend_stopped, None);
    assert_eq!(resends_stopped(&c, ResendStop::ReplayedServerError), None);
}

/// A settle of an attempt's outcome is answered once its write is queued, as the call
/// path's own outcome is: with the ledger file locked by another writer the settle still
/// answers `done` at once, and a read of the intent waits for the commit instead of showing
/// it `in_flight`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_is_answered_before_its_write_commits_and_reads_wait_for_the_commit() {
    let c = Client::new(None);
    let lease = execute(c.grant().await);
    let blocker = rusqlite::Connection::open(c.h.ledger_path()).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let settled = tokio::time::timeout(Duration::from_secs(3), c.settle(&lease, done()))
        .await
        .expect("answered while its write waits for the lock")
        .unwrap();
    let outcome = answer(settled);
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(outcome.external_id.as_deref(), Some("re_1"));

    let read = tokio::spawn({
        let ledger = c.h.ledger.clone();
        async move { ledger.get_by_id(lease.intent_id).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !read.is_finished(),
        "a read made after the answer waits for the settle's commit"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    let intent = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the read ends once the commit lands")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.resolved_by.as_deref(), Some("client"));
    // Every repeat gets what the settle was told.
    let again = answer(c.grant().await);
    assert_eq!(again.status, CallStatus::AlreadyDone);
    assert_eq!(again.result, outcome.result);
}

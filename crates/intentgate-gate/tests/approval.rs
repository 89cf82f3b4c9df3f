//! Approval and budgets bound to the intent (docs/design.md section 13), through the gate,
//! a real SQLite ledger and the fake provider: a held call executes nothing until a person
//! approves that one intent, once; a denial and a lapsed request are settled; a budget stops
//! a runaway loop of new intents, and a repeat never counts twice.

use std::sync::Arc;
use std::time::Duration;

use intentgate_core::condition::Condition;
use intentgate_core::decimal::Decimal;
use intentgate_core::policy::{ApprovalPolicy, BeyondBudget, Budget, BudgetScope, ToolPolicies};
use intentgate_core::{CallStatus, IntentStatus, OutcomeReason, ToolDefinition};
use intentgate_gate::{CallContext, CallOutcome, Clock, Grant, SystemClock};
use intentgate_ledger::{Decided, Ledger, ToolFlag};
use intentgate_mock::FaultPlan;
use intentgate_test_support::{Harness, client_tool, refund, refund_tool};
use serde_json::{Value, json};

/// `refund_order` whose refunds over 100.00 need approval, within `deadline`.
fn refund_over_100_needs_approval(deadline: Duration) -> ToolDefinition {
    with_policies(ToolPolicies {
        approval: Some(ApprovalPolicy {
            when: Some(Condition::parse("amount > 100.00").unwrap()),
            tenants: None,
            deadline_ms: deadline.as_millis() as u64,
        }),
        budgets: Vec::new(),
    })
}

fn with_policies(policies: ToolPolicies) -> ToolDefinition {
    let mut tool = refund_tool();
    tool.policies = Some(policies);
    tool
}

/// A budget of `count_max` refunds per hour for the whole tool.
fn hourly_count(count_max: u64, beyond: BeyondBudget) -> Budget {
    Budget {
        name: "hourly".to_owned(),
        scope: BudgetScope::Tool,
        window_ms: 3_600_000,
        count_max: Some(count_max),
        amount_max: None,
        amount_argument: None,
        amount_places: 0,
        beyond,
    }
}

fn harness(tool: ToolDefinition) -> Harness {
    Harness::with_tools(FaultPlan::none(), vec![tool], Arc::new(SystemClock))
}

/// The intent id of the `refund_order` intent with `key`.
async fn intent_id(h: &Harness, key: &str) -> i64 {
    h.intent(key).await.id
}

async fn call_as(h: &Harness, caller: &str, arguments: Value) -> CallOutcome {
    let context = CallContext {
        caller: caller.to_owned(),
        ..CallContext::default()
    };
    h.gate
        .call("refund_order", arguments, &context)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_held_call_executes_nothing_until_approved_and_then_exactly_once() {
    let h = harness(refund_over_100_needs_approval(Duration::from_secs(3600)));
    let small = h.call("refund_order", refund("8811", json!(49))).await;
    assert_eq!(
        small.status,
        CallStatus::Done,
        "below the condition: {small:?}"
    );

    for _ in 0..3 {
        let held = call_as(&h, "agent-7", refund("8812", json!("150.00"))).await;
        assert_eq!(held.status, CallStatus::AwaitingApproval, "{held:?}");
        assert!(
            held.message.contains("approval policy (amount > 100.00)")
                && held.message.contains("Do not call refund_order again"),
            "{}",
            held.message
        );
    }
    assert_eq!(h.provider.effect_count("refund:8812:150.00"), 0);
    assert_eq!(h.provider.requests(), 1, "only the small refund was sent");
    let intent = h.intent("refund:8812:150.00").await;
    assert_eq!(
        (intent.status, intent.call_count),
        (IntentStatus::Pending, 3)
    );

    let decision = h
        .gate
        .decide(intent.id, true, "approver-1", "checked the order")
        .await
        .unwrap();
    assert!(
        matches!(decision.decided, Decided::Approved(..)),
        "{decision:?}"
    );
    let executed = decision
        .executed
        .expect("the gateway executes the approved intent");
    assert_eq!(executed.status, CallStatus::Done, "{executed:?}");
    assert_eq!(h.provider.effect_count("refund:8812:150.00"), 1);

    let repeat = call_as(&h, "agent-7", refund("8812", json!(150))).await;
    assert_eq!(repeat.status, CallStatus::AlreadyDone, "{repeat:?}");
    // Approving again changes nothing and sends nothing.
    let again = h
        .gate
        .decide(intent.id, true, "approver-1", "")
        .await
        .unwrap();
    assert!(
        matches!(again.decided, Decided::NotAwaiting(..)),
        "{again:?}"
    );
    assert_eq!(h.provider.effect_count("refund:8812:150.00"), 1);
    let intent = h.intent_after_calls("refund:8812:150.00", 4).await;
    assert_eq!((intent.status, intent.call_count), (IntentStatus::Done, 4));
}

#[tokio::test]
async fn an_approval_is_spent_on_its_intent_only_and_other_arguments_are_held_on_their_own() {
    let h = harness(refund_over_100_needs_approval(Duration::from_secs(3600)));
    call_as(&h, "agent-7", refund("8812", json!(150))).await;
    let id = intent_id(&h, "refund:8812:150.00").await;
    h.gate.decide(id, true, "approver-1", "").await.unwrap();
    let other = call_as(&h, "agent-7", refund("8812", json!(151))).await;
    assert_eq!(other.status, CallStatus::AwaitingApproval, "{other:?}");
    assert_eq!(h.provider.effect_count("refund:8812:151.00"), 0);
    assert_eq!(h.provider.effect_count("refund:8812:150.00"), 1);
}

#[tokio::test]
async fn the_caller_that_asked_can_never_approve_its_own_intent() {
    let h = harness(refund_over_100_needs_approval(Duration::from_secs(3600)));
    call_as(&h, "agent-7", refund("8812", json!(150))).await;
    let id = intent_id(&h, "refund:8812:150.00").await;
    let own = h.gate.decide(id, true, "agent-7", "me").await.unwrap();
    assert!(matches!(own.decided, Decided::OwnRequest(..)), "{own:?}");
    assert!(own.executed.is_none());
    assert_eq!(h.provider.requests(), 0);
    let still = call_as(&h, "agent-7", refund("8812", json!(150))).await;
    assert_eq!(still.status, CallStatus::AwaitingApproval);
}

#[tokio::test]
async fn a_denial_settles_the_intent_rejected_with_the_reason_even_for_a_tool_that_retries_rejections()
 {
    let mut tool = refund_over_100_needs_approval(Duration::from_secs(3600));
    tool.retry_rejected = true;
    let h = harness(tool);
    call_as(&h, "agent-7", refund("8812", json!(150))).await;
    let id = intent_id(&h, "refund:8812:150.00").await;
    let denied = h
        .gate
        .decide(
            id,
            false,
            "approver-1",
            "the order was already refunded by hand",
        )
        .await
        .unwrap();
    assert!(matches!(denied.decided, Decided::Denied(..)), "{denied:?}");
    for _ in 0..2 {
        let answer = call_as(&h, "agent-7", refund("8812", json!(150))).await;
        assert_eq!(answer.status, CallStatus::Rejected, "{answer:?}");
        assert_eq!(answer.reason, Some(OutcomeReason::Denied), "{answer:?}");
        assert!(
            answer
                .message
                .contains("the order was already refunded by hand"),
            "the model reads the approver's reason: {}",
            answer.message
        );
    }
    assert_eq!(h.provider.requests(), 0);
}

#[tokio::test]
async fn an_unanswered_request_lapses_not_executed_and_a_new_call_asks_again() {
    let h = harness(refund_over_100_needs_approval(Duration::from_millis(50)));
    call_as(&h, "agent-7", refund("8812", json!(150))).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let report = h.gate.sweep(100).await.unwrap();
    assert_eq!(report.approvals.expired, 1, "{report:?}");
    let intent = h.intent("refund:8812:150.00").await;
    assert_eq!(intent.status, IntentStatus::NotExecuted);
    let approval = h.ledger.approval(intent.id).await.unwrap().unwrap();
    assert_eq!(
        approval.decision,
        Some(intentgate_ledger::Decision::Expired)
    );

    let again = call_as(&h, "agent-7", refund("8812", json!(150))).await;
    assert_eq!(again.status, CallStatus::AwaitingApproval, "{again:?}");
    assert_eq!(
        h.intent("refund:8812:150.00").await.status,
        IntentStatus::Pending
    );
    assert_eq!(h.provider.requests(), 0);
}

#[tokio::test]
async fn an_intent_approved_while_its_tool_is_off_is_started_by_the_sweeper_once_it_is_on() {
    let h = harness(refund_over_100_needs_approval(Duration::from_secs(3600)));
    call_as(&h, "agent-7", refund("8812", json!(150))).await;
    let id = intent_id(&h, "refund:8812:150.00").await;
    let flag = |enabled| ToolFlag {
        tool: "refund_order".to_owned(),
        enabled,
        reason: "incident".to_owned(),
        actor: "ops".to_owned(),
        updated_ms: SystemClock.now_ms(),
    };
    h.ledger.set_tool_flag(flag(false)).await.unwrap();
    // The gate reads flags again at most every FLAG_REFRESH.
    tokio::time::sleep(intentgate_gate::FLAG_REFRESH + Duration::from_millis(50)).await;
    let approved = h.gate.decide(id, true, "approver-1", "").await.unwrap();
    assert!(approved.executed.is_none(), "{approved:?}");
    assert_eq!(h.provider.requests(), 0);

    h.ledger.set_tool_flag(flag(true)).await.unwrap();
    // The gate reads flags again at most every FLAG_REFRESH.
    tokio::time::sleep(intentgate_gate::FLAG_REFRESH + Duration::from_millis(50)).await;
    let report = h.gate.sweep(100).await.unwrap();
    assert_eq!(report.approvals.executed, 1, "{report:?}");
    assert_eq!(h.provider.effect_count("refund:8812:150.00"), 1);
    let again = h.gate.sweep(100).await.unwrap();
    assert_eq!(again.approvals.executed, 0, "started once: {again:?}");
}

#[tokio::test]
async fn a_count_budget_refuses_new_intents_beyond_it_and_a_repeat_never_counts_twice() {
    let h = harness(with_policies(ToolPolicies {
        approval: None,
        budgets: vec![hourly_count(2, BeyondBudget::Refuse)],
    }));
    for order in ["1", "2"] {
        let done = h.call("refund_order", refund(order, json!(10))).await;
        assert_eq!(done.status, CallStatus::Done, "{done:?}");
        // Repeats of a counted intent are answered, and count nothing.
        let repeat = h.call("refund_order", refund(order, json!(10))).await;
        assert_eq!(repeat.status, CallStatus::AlreadyDone, "{repeat:?}");
    }
    let beyond = h.call("refund_order", refund("3", json!(10))).await;
    assert_eq!(beyond.status, CallStatus::OverBudget, "{beyond:?}");
    assert!(
        beyond.message.contains("budget `hourly`"),
        "{}",
        beyond.message
    );
    assert!(
        h.ledger
            .get("default", "refund_order", "refund:3:10.00")
            .await
            .unwrap()
            .is_none(),
        "nothing is recorded for a call beyond a budget that refuses"
    );
    assert_eq!(h.provider.effects().len(), 2);
    let usage = h
        .ledger
        .budget_usage("refund_order", SystemClock.now_ms())
        .await
        .unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0].count, 2);
    let metrics = h.gate.metrics().encode();
    assert!(
        metrics.contains("intentgate_over_budget_total{tool=\"refund_order\",budget=\"hourly\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_amount_budget_counts_exact_cents_and_holds_what_goes_beyond_it_for_approval() {
    let h = harness(with_policies(ToolPolicies {
        approval: None,
        budgets: vec![Budget {
            name: "per-tenant".to_owned(),
            scope: BudgetScope::Tenant,
            window_ms: 3_600_000,
            count_max: None,
            amount_max: Some(Decimal::parse("100.00").unwrap()),
            amount_argument: Some("amount".to_owned()),
            amount_places: 2,
            beyond: BeyondBudget::Approval {
                deadline_ms: 3_600_000,
            },
        }],
    }));
    let first = h.call("refund_order", refund("1", json!("60.00"))).await;
    assert_eq!(first.status, CallStatus::Done);
    let fits = h.call("refund_order", refund("2", json!("40.00"))).await;
    assert_eq!(fits.status, CallStatus::Done, "exactly 100.00: {fits:?}");
    let beyond = h.call("refund_order", refund("3", json!("0.01"))).await;
    assert_eq!(beyond.status, CallStatus::AwaitingApproval, "{beyond:?}");
    assert!(
        beyond.message.contains("budget per-tenant"),
        "{}",
        beyond.message
    );
    assert_eq!(h.provider.effects().len(), 2);

    let id = intent_id(&h, "refund:3:0.01").await;
    let approved = h.gate.decide(id, true, "approver-1", "").await.unwrap();
    assert_eq!(
        approved.executed.map(|outcome| outcome.status),
        Some(CallStatus::Done)
    );
    let usage = h
        .ledger
        .budget_usage("refund_order", SystemClock.now_ms())
        .await
        .unwrap();
    assert_eq!(
        (usage[0].count, usage[0].units),
        (3, 10_001),
        "an approved intent counts against the budget: {usage:?}"
    );
}

#[tokio::test]
async fn held_approved_denied_and_over_budget_intents_are_counted_in_the_metrics() {
    let h = harness(with_policies(ToolPolicies {
        approval: Some(ApprovalPolicy {
            when: Some(Condition::parse("amount > 100").unwrap()),
            tenants: None,
            deadline_ms: 3_600_000,
        }),
        budgets: vec![hourly_count(2, BeyondBudget::Refuse)],
    }));
    call_as(&h, "agent-7", refund("1", json!(150))).await;
    call_as(&h, "agent-7", refund("1", json!(150))).await;
    call_as(&h, "agent-7", refund("2", json!(250))).await;
    let first = intent_id(&h, "refund:1:150.00").await;
    let second = intent_id(&h, "refund:2:250.00").await;
    h.gate.decide(first, true, "approver-1", "").await.unwrap();
    h.gate
        .decide(second, false, "approver-1", "no")
        .await
        .unwrap();
    let metrics = h.gate.metrics().encode();
    for (event, count) in [("held", 2), ("approved", 1), ("denied", 1)] {
        let line = format!(
            "intentgate_approvals_total{{tool=\"refund_order\",event=\"{event}\"}} {count}"
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

#[tokio::test]
async fn a_client_executed_tool_is_granted_nothing_while_held_and_its_approved_intent_runs_at_the_next_grant()
 {
    let h = harness(client_tool(refund_over_100_needs_approval(
        Duration::from_secs(3600),
    )));
    let context = CallContext {
        caller: "agent-7".to_owned(),
        ..CallContext::default()
    };
    let grant = || async {
        h.gate
            .grant("refund_order", refund("8812", json!(150)), &context)
            .await
            .unwrap()
    };
    for _ in 0..2 {
        match grant().await {
            Grant::Answer(outcome) => {
                assert_eq!(outcome.status, CallStatus::AwaitingApproval, "{outcome:?}")
            }
            other => panic!("a held intent is granted nothing to run: {other:?}"),
        }
    }
    let id = intent_id(&h, "refund:8812:150.00").await;
    let decision = h.gate.decide(id, true, "approver-1", "").await.unwrap();
    assert!(
        decision.executed.is_none(),
        "the caller's code runs a client-executed tool: {decision:?}"
    );
    match grant().await {
        Grant::Execute(lease) => assert_eq!(lease.intent_id, id),
        other => panic!("the approved intent runs at its next grant: {other:?}"),
    }
}

//! `intentgate approvals` as an operator runs it: the real binary as a process, on a SQLite
//! ledger whose held intents a gate made (its `refund_order` needs approval for every call),
//! deciding with the ledger's own checks.

mod support;

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{CallStatus, IntentStatus};
use intentgate_gate::{CallContext, SystemClock};
use intentgate_ledger::{Decision, Ledger};
use intentgate_mock::FaultPlan;
use intentgate_test_support::{Harness, refund, refund_needing_approval};
use serde_json::Value;
use support::{intentgate, success};

/// A gate whose `refund_order` holds every call for approval within `deadline`.
fn harness(deadline: Duration) -> Harness {
    Harness::with_tools(
        FaultPlan::none(),
        vec![refund_needing_approval(deadline)],
        Arc::new(SystemClock),
    )
}

/// A refund `agent-7` asked for, held: its intent id.
async fn held(h: &Harness, order: &str) -> i64 {
    let context = CallContext {
        caller: "agent-7".to_owned(),
        ..CallContext::default()
    };
    let outcome = h
        .gate
        .call("refund_order", refund(order, "150.00".into()), &context)
        .await
        .unwrap();
    assert_eq!(outcome.status, CallStatus::AwaitingApproval, "{outcome:?}");
    h.intent(outcome.intent_key.as_deref().unwrap()).await.id
}

/// `intentgate approvals ARGS --ledger <the harness's ledger>`, in a blocking task.
async fn approvals(h: &Harness, args: &[&str]) -> Output {
    let ledger = h.ledger_path();
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        intentgate()
            .arg("approvals")
            .args(&args)
            .arg("--ledger")
            .arg(&ledger)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn refused(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn list_shows_the_held_intents_exact_arguments_and_who_asked() {
    let h = harness(Duration::from_secs(3600));
    let id = held(&h, "8812").await;
    let json = success(&approvals(&h, &["list", "--format", "json"]).await);
    let entry: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(entry["intent_id"], id);
    assert_eq!(entry["requested_by"], "agent-7");
    assert_eq!(entry["held_by"], "approval policy");
    assert_eq!(entry["arguments"]["amount"], "150.00");
    assert_eq!(entry["decision"], Value::Null);
    let text = success(&approvals(&h, &["list"]).await);
    assert!(
        text.starts_with("ID") && text.contains("agent-7") && text.contains("open"),
        "{text}"
    );
    let closed = approvals(&h, &["list", "--state", "closed"]).await;
    assert_eq!(success(&closed), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_records_the_decision_and_refuses_the_requester_and_a_second_decision() {
    let h = harness(Duration::from_secs(3600));
    let id = held(&h, "8812").await;
    let own = approvals(&h, &["approve", &id.to_string(), "--actor", "agent-7"]).await;
    assert!(
        refused(&own).contains("`agent-7` asked for intent"),
        "{own:?}"
    );

    let approved = approvals(
        &h,
        &[
            "approve",
            &id.to_string(),
            "--actor",
            "approver-1",
            "--reason",
            "checked",
        ],
    )
    .await;
    let said = success(&approved);
    assert!(
        said.contains("approved by approver-1") && said.contains("sweeper"),
        "{said}"
    );
    let approval = h.ledger.approval(id).await.unwrap().unwrap();
    assert_eq!(approval.decision, Some(Decision::Approved));
    assert_eq!(approval.decided_by.as_deref(), Some("approver-1"));
    // Not executed by the command: the gateway's sweeper or the next call starts it.
    let intent = h.ledger.get_by_id(id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::Pending);
    assert_eq!(h.provider.requests(), 0);

    let again = approvals(
        &h,
        &[
            "deny",
            &id.to_string(),
            "--actor",
            "approver-2",
            "--reason",
            "no",
        ],
    )
    .await;
    assert!(
        refused(&again).contains("not awaiting a decision"),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deny_needs_a_reason_and_the_next_call_is_answered_with_it() {
    let h = harness(Duration::from_secs(3600));
    let id = held(&h, "8812").await;
    let without = approvals(&h, &["deny", &id.to_string(), "--actor", "approver-1"]).await;
    assert!(!without.status.success());
    assert!(
        String::from_utf8_lossy(&without.stderr).contains("--reason"),
        "{without:?}"
    );
    let reason = "already refunded by hand";
    let denied = approvals(
        &h,
        &[
            "deny",
            &id.to_string(),
            "--actor",
            "approver-1",
            "--reason",
            reason,
        ],
    )
    .await;
    assert!(success(&denied).contains("denied by approver-1"));
    let context = CallContext {
        caller: "agent-7".to_owned(),
        ..CallContext::default()
    };
    let next = h
        .gate
        .call("refund_order", refund("8812", "150.00".into()), &context)
        .await
        .unwrap();
    assert_eq!(next.status, CallStatus::Rejected, "{next:?}");
    assert!(next.to_json().to_string().contains(reason), "{next:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_after_the_deadline_is_refused_and_the_request_expires() {
    let h = harness(Duration::from_millis(200));
    let id = held(&h, "8812").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late = approvals(&h, &["approve", &id.to_string(), "--actor", "approver-1"]).await;
    assert!(refused(&late).contains("by its deadline"), "{late:?}");
    let intent = h.ledger.get_by_id(id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::NotExecuted);
}

#[test]
fn the_help_says_an_approval_here_is_neither_executed_nor_counted_against_budgets() {
    let help = success(
        &intentgate()
            .args(["approvals", "approve", "--help"])
            .output()
            .unwrap(),
    );
    assert!(
        help.contains("does not execute the intent")
            && help.contains("not count it against the tool's budgets")
            && help.contains("sweeper"),
        "{help}"
    );
}

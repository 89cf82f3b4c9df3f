//! Errors that are the operator's (docs/design.md section 5): a wrong credential, a route that does not
//! exist, an upstream the gateway can't reach. Through a real SQLite ledger and an upstream
//! scripted here, which names itself (`RequestFacts`) as the HTTP upstream does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{
    CallStatus, IntentStatus, Misconfiguration, OutcomeReason, RequestFacts, Unreachable,
    UpstreamObservation,
};
use intentgate_gate::{
    Clock, Gate, GateOptions, LookupOutcome, SystemClock, Upstream, UpstreamCall,
};
use intentgate_test_support::{TempLedger, call, refund, refund_tool};
use serde_json::{Value, json};

const KEY: &str = "refund:8812:49.00";

/// An upstream named `payments` that answers what it is scripted to, then 200, and counts
/// what it was sent.
struct Scripted {
    answers: Mutex<VecDeque<(UpstreamObservation, Option<Unreachable>)>>,
    sent: Mutex<Vec<String>>,
    fixed_route: bool,
}

impl Scripted {
    fn new(answers: Vec<(UpstreamObservation, Option<Unreachable>)>) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers: Mutex::new(answers.into()),
            sent: Mutex::new(Vec::new()),
            fixed_route: true,
        })
    }

    fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait]
impl Upstream for Scripted {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        self.execute_with_facts(call).await.0
    }

    async fn execute_with_facts(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        self.sent
            .lock()
            .unwrap()
            .push(call.idempotency_key.unwrap_or_default().to_owned());
        let (observation, unreachable) =
            self.answers.lock().unwrap().pop_front().unwrap_or_else(|| {
                (
                    UpstreamObservation::response(200, json!({"id": "re_1"})),
                    None,
                )
            });
        let facts = RequestFacts {
            upstream: Some("payments".to_owned()),
            fixed_route: self.fixed_route,
            unreachable,
        };
        (observation, facts)
    }

    async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
        LookupOutcome::Unsupported
    }
}

fn response(status: u16, body: Value) -> (UpstreamObservation, Option<Unreachable>) {
    (UpstreamObservation::response(status, body), None)
}

fn refused() -> (UpstreamObservation, Option<Unreachable>) {
    (
        UpstreamObservation::NotSent {
            reason: "could not connect: tcp connect error: Connection refused (os error 111)"
                .to_owned(),
        },
        Some(Unreachable::Connect),
    )
}

struct Setup {
    _ledger: TempLedger,
    ledger: Arc<dyn intentgate_ledger::Ledger>,
    gate: Gate,
}

fn gate(upstream: Arc<Scripted>, retry_budget: u32) -> Setup {
    let temp = TempLedger::new();
    let ledger: Arc<dyn intentgate_ledger::Ledger> = temp.ledger.clone();
    let mut tool = refund_tool();
    tool.retry_budget = retry_budget;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let gate = Gate::new(
        vec![tool],
        ledger.clone(),
        upstream,
        clock,
        GateOptions {
            backoff_base: Duration::from_millis(5),
            ..GateOptions::default()
        },
    )
    .unwrap();
    Setup {
        _ledger: temp,
        ledger,
        gate,
    }
}

impl Setup {
    async fn intent(&self) -> intentgate_ledger::IntentRecord {
        self.ledger
            .get("default", "refund_order", KEY)
            .await
            .unwrap()
            .unwrap()
    }

    async fn last_detail(&self) -> String {
        let intent = self.intent().await;
        let events = self.ledger.events(intent.id).await.unwrap();
        events
            .iter()
            .rev()
            .find(|event| event.kind == "transition")
            .and_then(|event| event.detail.clone())
            .unwrap_or_default()
    }
}

/// Before, a 401 was `rejected`: the model was told to explain the reason to the customer,
/// and the refusal was replayed to every repeat after the key was fixed.
#[tokio::test]
async fn a_401_is_not_executed_at_once_never_stored_as_a_refusal_and_a_later_call_executes() {
    let upstream = Scripted::new(vec![response(
        401,
        json!({"error": {"message": "Invalid API key provided: sk_live_****1234"}}),
    )]);
    let setup = gate(upstream.clone(), 3);
    let mut events = setup.gate.upstream_errors();

    let first = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::NotExecuted);
    assert_eq!(first.reason, Some(OutcomeReason::Misconfigured));
    assert!(
        first.message.contains("a person will follow up"),
        "{}",
        first.message
    );
    assert!(!first.message.to_lowercase().contains("explain the reason"));
    assert_eq!(first.to_json()["reason"], "misconfigured");
    // Not worth retrying: one request, however large the budget.
    assert_eq!(upstream.sent().len(), 1);
    let intent = setup.intent().await;
    assert_eq!(
        (intent.status, intent.result),
        (IntentStatus::NotExecuted, None)
    );
    let detail = setup.last_detail().await;
    assert!(
        detail.contains("misconfigured (unauthorized)")
            && detail.contains("upstream `payments` answered HTTP 401")
            && detail.contains("Invalid API key provided"),
        "{detail}"
    );

    // The operator hears about it: the event, the metric, the degraded upstream.
    let event = events.try_recv().unwrap();
    assert_eq!(
        (
            event.tool.as_str(),
            event.upstream.as_str(),
            event.kind,
            event.status
        ),
        (
            "refund_order",
            "payments",
            Misconfiguration::Unauthorized,
            Some(401)
        )
    );
    let metrics = setup.gate.metrics().encode();
    assert!(
        metrics.contains(
            "intentgate_upstream_errors_total{tool=\"refund_order\",upstream=\"payments\",kind=\"unauthorized\"} 1"
        ),
        "{metrics}"
    );
    let degraded = setup.gate.degraded_upstreams();
    assert_eq!(degraded.len(), 1);
    assert_eq!(degraded[0].kind, Misconfiguration::Unauthorized);

    // Fixed: the next call executes it, with the same provider key, and clears the upstream.
    let later = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(later.status, CallStatus::Done);
    assert_eq!(later.reason, None);
    let sent = upstream.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0], sent[1],
        "a not-executed intent keeps its provider key"
    );
    assert!(setup.gate.degraded_upstreams().is_empty());
}

#[tokio::test]
async fn a_refused_connection_keeps_its_bounded_retries_then_is_not_executed_with_the_cause() {
    let upstream = Scripted::new(vec![refused(), refused(), refused()]);
    let setup = gate(upstream.clone(), 2);
    let outcome = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::NotExecuted);
    assert_eq!(outcome.reason, Some(OutcomeReason::Misconfigured));
    assert_eq!(
        upstream.sent().len(),
        3,
        "the first request and two retries"
    );
    let detail = setup.last_detail().await;
    assert!(
        detail.contains("misconfigured (connect)")
            && detail.contains("upstream `payments` could not be reached")
            && detail.contains("Connection refused")
            && detail.contains("after 2 retries"),
        "{detail}"
    );
    let degraded = setup.gate.degraded_upstreams();
    assert_eq!(
        (degraded[0].kind, degraded[0].failures),
        (Misconfiguration::Connect, 3)
    );
}

#[tokio::test]
async fn a_refused_connection_that_recovers_within_the_retries_is_done_and_clears_the_upstream() {
    let upstream = Scripted::new(vec![refused()]);
    let setup = gate(upstream.clone(), 2);
    let outcome = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::Done);
    assert_eq!(upstream.sent().len(), 2);
    assert!(setup.gate.degraded_upstreams().is_empty());
}

#[tokio::test]
async fn a_404_is_a_wrong_route_on_a_fixed_path_and_a_refusal_on_a_path_with_an_argument() {
    let not_found = || response(404, json!({"error": {"message": "No such order"}}));
    let fixed = Scripted::new(vec![not_found()]);
    let setup = gate(fixed.clone(), 3);
    let outcome = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (CallStatus::NotExecuted, Some(OutcomeReason::Misconfigured))
    );
    assert_eq!(fixed.sent().len(), 1);
    assert_eq!(
        setup.gate.degraded_upstreams()[0].kind,
        Misconfiguration::RouteNotFound
    );

    let templated = Arc::new(Scripted {
        fixed_route: false,
        ..Arc::into_inner(Scripted::new(vec![not_found()])).unwrap()
    });
    let setup = gate(templated, 3);
    let outcome = call(&setup.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(outcome.status, CallStatus::Rejected);
    assert!(
        outcome.message.contains("No such order"),
        "{}",
        outcome.message
    );
    assert_eq!(setup.intent().await.status, IntentStatus::Rejected);
    assert!(setup.gate.degraded_upstreams().is_empty());
}

#[tokio::test]
async fn a_read_answered_403_is_not_executed_for_the_operator_too() {
    let upstream = Scripted::new(vec![response(403, json!({"error": "forbidden"}))]);
    let temp = TempLedger::new();
    let gate = Gate::new(
        vec![intentgate_test_support::get_order_tool(
            Duration::from_secs(1),
        )],
        temp.ledger.clone(),
        upstream.clone(),
        Arc::new(SystemClock),
        GateOptions::default(),
    )
    .unwrap();
    let outcome = call(&gate, "get_order", json!({"order_id": "8812"})).await;
    assert_eq!(
        (outcome.status, outcome.reason),
        (CallStatus::NotExecuted, Some(OutcomeReason::Misconfigured))
    );
    assert_eq!(upstream.sent().len(), 1, "not retried");
    assert_eq!(
        gate.degraded_upstreams()[0].kind,
        Misconfiguration::Forbidden
    );
}

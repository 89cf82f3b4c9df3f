//! Reconciliation against the mock provider over HTTP, with a real SQLite ledger, the
//! example config, and the owner's webhook on a loopback server.
//!
//! Every mismatch kind is produced the way it happens in production: the ledger's side
//! through the ledger's own operations (a call that ended done, unknown or not executed),
//! the provider's side through the provider's API, one of them a refund made around the
//! gateway with no intent key at all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use intentgate_core::{IntentStatus, fingerprint};
use intentgate_gate::{CallContext, Clock, Gate, SystemClock};
use intentgate_http::HttpUpstream;
use intentgate_ledger::{Begin, BeginRequest, Finish, IntentRecord, Ledger, SqliteOptions};
use intentgate_mock::{HttpFaultPlan, KEY_WINDOW, MockOptions, MockProvider, MockServer};
use intentgate_ops::{MismatchKind, Notifier, Reconciler, Severity};
use intentgate_test_support::provider::refund_at_provider;
use intentgate_test_support::{TempLedger, default_gate, http};
use serde_json::{Value, json};

const EXAMPLE: &str = include_str!("../../../examples/support-agent.yaml");

/// A loopback server that keeps every JSON body posted to it.
async fn webhook_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/hook",
            post(
                |State(received): State<Arc<Mutex<Vec<Value>>>>, Json(body): Json<Value>| async move {
                    received.lock().unwrap().push(body);
                    "ok"
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

fn config(mock_url: &str, webhook: &str) -> intentgate_config::LoadedConfig {
    let text = EXAMPLE
        .replace(
            "payments-team: {log: true}",
            &format!("payments-team: {{log: true, webhook: \"{webhook}\"}}"),
        )
        .replace(
            "\nowners:",
            "\nreconcile: {settle_seconds: 0, unknown_grace_seconds: 0}\n\nowners:",
        );
    let mock_url = mock_url.to_owned();
    intentgate_config::load_str(&text, "example", &move |name| match name {
        "INTENTGATE_MOCK_URL" => Some(mock_url.clone()),
        "INTENTGATE_HASH_KEY" => Some("0123456789abcdef0123456789abcdef-tests".to_owned()),
        _ => None,
    })
    .unwrap()
}

fn gate(loaded: &intentgate_config::LoadedConfig, ledger: Arc<dyn Ledger>) -> Arc<Gate> {
    let upstream =
        HttpUpstream::new(loaded.config.upstreams.clone(), loaded.config.http_tools()).unwrap();
    Arc::new(default_gate(
        loaded.tools.clone(),
        ledger,
        Arc::new(upstream),
        Arc::new(SystemClock),
    ))
}

/// A new intent of `tool` with `key` and the `arguments` the ledger keeps, leased to
/// `test/1` for a minute from `now_ms`.
async fn begin_new(
    ledger: &dyn Ledger,
    tool: &str,
    key: String,
    arguments: Value,
    now_ms: i64,
) -> IntentRecord {
    let begin = ledger
        .begin(BeginRequest {
            tenant: "default".to_owned(),
            tool: tool.to_owned(),
            key,
            fingerprint: fingerprint(&arguments).as_str().to_owned(),
            arguments,
            lease_owner: "test/1".to_owned(),
            lease_expires_ms: now_ms + 60_000,
            now_ms,
            count_call: true,
            retry_rejected: false,
            lookup_interval_ms: 5_000,
            resend_unknown: false,
            expect_new: false,
            policies: None,
        })
        .await
        .unwrap();
    let Begin::Execute(intent) = begin else {
        panic!("a new intent executes: {begin:?}")
    };
    intent
}

/// Drives a refund intent in the ledger to `status`, as a call that ended that way would.
async fn settle(ledger: &dyn Ledger, order: &str, amount: f64, status: IntentStatus) -> i64 {
    let arguments = json!({"order_id": order, "amount": amount, "reason": "damaged"});
    let now_ms = SystemClock.now_ms();
    let key = format!("refund:{order}:{amount:.2}");
    let intent = begin_new(ledger, "refund_order", key, arguments, now_ms).await;
    let done = status == IntentStatus::Done;
    let external_id = done.then(|| format!("re_ledger_{order}"));
    let result = external_id.as_ref().map(|id| json!({"id": id}));
    finish(
        ledger,
        &intent,
        now_ms,
        status,
        result,
        external_id,
        "upstream",
    )
    .await;
    intent.id
}

/// Ends the attempt that [`begin_new`] started, as `resolved_by` would.
async fn finish(
    ledger: &dyn Ledger,
    intent: &IntentRecord,
    now_ms: i64,
    status: IntentStatus,
    result: Option<Value>,
    external_id: Option<String>,
    resolved_by: &'static str,
) {
    ledger
        .finish(Finish {
            id: intent.id,
            lease_owner: "test/1".to_owned(),
            attempt: intent.attempt,
            now_ms,
            status,
            result,
            external_id,
            resolved_by,
            looked_up: false,
            detail: "test".to_owned(),
            lease_required: false,
            resend_stopped: None,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn every_mismatch_kind_is_found_named_and_sent_to_the_owner() {
    let client = http::client(None);
    let mock =
        MockServer::start(MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap())
            .await
            .unwrap();
    let (webhook, received) = webhook_receiver().await;
    let loaded = config(&mock.url(), &webhook);
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let ledger: Arc<dyn Ledger> = ledger;
    let gate = gate(&loaded, ledger.clone());
    let context = CallContext::default();
    let call = |order: &str, amount: f64| {
        let gate = gate.clone();
        let context = context.clone();
        let arguments = json!({"order_id": order, "amount": amount, "reason": "damaged"});
        async move {
            gate.call("refund_order", arguments, &context)
                .await
                .unwrap()
        }
    };

    // Matched: a refund through the gateway. No mismatch.
    assert_eq!(call("1001", 10.0).await.status.as_str(), "done");
    // no_intent: a refund made around the gateway, with no intent key.
    let direct = refund_at_provider(&client, &mock.url(), "2002", "5.00", None).await;
    // duplicate: a refund through the gateway, then the same request again under the same
    // provider key once the provider has forgotten the key (below, last).
    let first = call("3003", 20.0).await;
    assert_eq!(first.status.as_str(), "done");
    // amount: the provider's record of an intent says another amount.
    let amount_id = settle(ledger.as_ref(), "4004", 30.0, IntentStatus::Done).await;
    refund_at_provider(
        &client,
        &mock.url(),
        "4004",
        "31.00",
        Some("refund:4004:30.00"),
    )
    .await;
    // missing_record: done in the ledger, nothing at the provider.
    let missing_id = settle(ledger.as_ref(), "5005", 40.0, IntentStatus::Done).await;
    // unknown_missing: unknown, nothing at the provider.
    let unknown_missing_id = settle(ledger.as_ref(), "6006", 50.0, IntentStatus::Unknown).await;
    // unknown_found: unknown, and the provider has it.
    let unknown_found_id = settle(ledger.as_ref(), "7007", 60.0, IntentStatus::Unknown).await;
    let found = refund_at_provider(
        &client,
        &mock.url(),
        "7007",
        "60.00",
        Some("refund:7007:60.00"),
    )
    .await;
    // effect_despite_status: the model was told not_executed, the provider has it.
    let despite_id = settle(ledger.as_ref(), "8008", 70.0, IntentStatus::NotExecuted).await;
    let despite = refund_at_provider(
        &client,
        &mock.url(),
        "8008",
        "70.00",
        Some("refund:8008:70.00"),
    )
    .await;
    // The duplicate: past the provider's key window the same key makes a second refund (a
    // re-send that came too late). The provider's clock moved on; reconciliation runs then.
    mock.provider()
        .advance_clock(KEY_WINDOW + Duration::from_secs(60));
    let again = refund_at_provider(
        &client,
        &mock.url(),
        "3003",
        "20.00",
        Some("refund:3003:20.00"),
    )
    .await;
    let later_ms = SystemClock.now_ms() + (KEY_WINDOW.as_millis() as i64) + 120_000;

    let notifier = Arc::new(Notifier::new(loaded.config.owners.clone()));
    let reconciler = Reconciler::new(
        &loaded,
        ledger.clone(),
        notifier.clone(),
        None,
        Default::default(),
    )
    .unwrap();
    let report = reconciler
        // The window reaches back over the provider's day and the hour before it.
        .run(KEY_WINDOW + Duration::from_secs(3600), later_ms, "test")
        .await;
    drop(reconciler);

    let refunds = report
        .tools
        .iter()
        .find(|tool| tool.tool == "refund_order")
        .unwrap();
    assert_eq!(refunds.error, None);
    assert_eq!(refunds.intents_checked, 7);
    assert_eq!(refunds.records_checked, 7, "{report:#?}");
    let by_kind = |kind: MismatchKind| {
        let found: Vec<_> = report
            .mismatches
            .iter()
            .filter(|mismatch| mismatch.kind == kind)
            .collect();
        assert_eq!(found.len(), 1, "{kind:?}: {:#?}", report.mismatches);
        found[0].clone()
    };
    let bypass = by_kind(MismatchKind::NoIntent);
    assert_eq!(bypass.external_ids, vec![direct]);
    assert_eq!(bypass.subject.as_deref(), Some("2002"));

    let duplicate = by_kind(MismatchKind::Duplicate);
    assert_eq!(duplicate.severity, Severity::Critical);
    assert_eq!(duplicate.intent_key.as_deref(), Some("refund:3003:20.00"));
    assert_eq!(
        duplicate.external_ids,
        vec![first.external_id.clone().unwrap(), again]
    );
    assert_eq!(duplicate.subject.as_deref(), Some("3003"));

    let amount = by_kind(MismatchKind::Amount);
    assert_eq!(amount.intent_id, Some(amount_id));
    assert_eq!(amount.intent_amount.as_deref(), Some("30"));
    assert_eq!(amount.provider_amount.as_deref(), Some("31.00"));

    assert_eq!(
        by_kind(MismatchKind::MissingRecord).intent_id,
        Some(missing_id)
    );
    let unknown_missing = by_kind(MismatchKind::UnknownMissing);
    assert_eq!(unknown_missing.intent_id, Some(unknown_missing_id));
    assert_eq!(
        unknown_missing.arguments.as_ref().unwrap()["order_id"],
        "6006"
    );

    let resolved = by_kind(MismatchKind::UnknownFound);
    assert_eq!(resolved.intent_id, Some(unknown_found_id));
    assert!(resolved.resolved);
    let intent = ledger.get_by_id(unknown_found_id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.external_id.as_deref(), Some(found.as_str()));
    assert_eq!(intent.resolved_by.as_deref(), Some("test"));
    let events = ledger.events(unknown_found_id).await.unwrap();
    let resolution = events.last().unwrap();
    assert_eq!(resolution.kind, "resolve");
    assert_eq!(resolution.actor.as_deref(), Some("test"));

    let despite_mismatch = by_kind(MismatchKind::EffectDespiteStatus);
    assert_eq!(despite_mismatch.intent_id, Some(despite_id));
    assert_eq!(despite_mismatch.external_ids, vec![despite]);
    assert_eq!(despite_mismatch.severity, Severity::Critical);
    // A not_executed intent the provider has is reported, not rewritten.
    let intent = ledger.get_by_id(despite_id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::NotExecuted);

    assert_eq!(report.mismatches_total, 7);
    assert_eq!(report.critical, 2);

    // The run is in the ledger, with its mismatches.
    let runs = ledger.reconciliations(5).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(Some(runs[0].id), report.run_id);
    assert_eq!(runs[0].mismatches, 7);
    assert_eq!(runs[0].critical, 2);
    let stored = ledger
        .reconciliation_mismatches(runs[0].id, 100)
        .await
        .unwrap();
    assert_eq!(stored.len(), 7);

    // The owner's webhook got one notice for the tool, naming every mismatch.
    let stats = Arc::into_inner(notifier).unwrap().close().await;
    assert_eq!(stats.delivered, 1, "{stats:?}");
    let notices = received.lock().unwrap().clone();
    assert_eq!(notices.len(), 1, "{notices:#?}");
    let notice = &notices[0];
    assert_eq!(notice["kind"], "reconciliation");
    assert_eq!(notice["tool"], "refund_order");
    assert_eq!(notice["owner"], "payments-team");
    assert_eq!(notice["severity"], "critical");
    assert_eq!(notice["details"]["mismatches"].as_array().unwrap().len(), 7);
    assert_eq!(notice["details"]["counts"]["duplicate"], 1);
}

#[tokio::test]
async fn a_provider_that_fails_every_page_stops_the_tool_without_reporting_anything_missing() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let ledger: Arc<dyn Ledger> = ledger;
    // A done intent whose record can't be listed: the provider is down.
    settle(ledger.as_ref(), "5005", 40.0, IntentStatus::Done).await;
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let loaded = config(&dead_url, "http://127.0.0.1:9/hook");
    let notifier = Arc::new(Notifier::new(Default::default()));
    let reconciler =
        Reconciler::new(&loaded, ledger.clone(), notifier, None, Default::default()).unwrap();
    let report = reconciler
        .run(Duration::from_secs(3600), SystemClock.now_ms(), "test")
        .await;
    let refunds = report
        .tools
        .iter()
        .find(|tool| tool.tool == "refund_order")
        .unwrap();
    let error = refunds.error.as_deref().unwrap();
    assert!(error.contains("provider"), "{error}");
    assert!(report.has_errors());
    assert!(report.mismatches.is_empty(), "{:#?}", report.mismatches);
}

#[tokio::test]
async fn an_email_resolved_by_reconciliation_keeps_the_address_as_a_hash_and_names_the_order() {
    // Before, the provider's record (with the recipient and subject) was stored as the
    // intent's result as it was, and the report named the address as who was affected.
    let client = http::client(None);
    let mock =
        MockServer::start(MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap())
            .await
            .unwrap();
    let loaded = config(&mock.url(), "http://127.0.0.1:9/hook");
    let email = loaded
        .tools
        .iter()
        .find(|tool| tool.name == "send_email")
        .unwrap();
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let ledger: Arc<dyn Ledger> = ledger;
    let address = "alice.liddell@example.com";
    let arguments = json!({"to": address, "template_id": "refund_confirmation",
        "reference": "8812", "subject": "Your refund, Alice", "body": "It is on its way."});
    let key = email.render_key(&arguments, None).unwrap().unwrap();
    let now_ms = SystemClock.now_ms();
    // An email left unknown, as a call whose answer was lost leaves it.
    let stored = email.stored_arguments(&arguments).unwrap().into_owned();
    let intent = begin_new(ledger.as_ref(), "send_email", key.clone(), stored, now_ms).await;
    ledger
        .finish(Finish {
            id: intent.id,
            lease_owner: "test/1".to_owned(),
            attempt: intent.attempt,
            now_ms,
            status: IntentStatus::Unknown,
            result: None,
            external_id: None,
            resolved_by: "upstream",
            looked_up: false,
            detail: "test".to_owned(),
            lease_required: false,
            resend_stopped: None,
        })
        .await
        .unwrap();
    // The provider has it, made under the intent's provider key.
    let response = client
        .post(format!("{}/v1/emails", mock.url()))
        .header(
            "Idempotency-Key",
            intentgate_core::key::provider_key("default", "send_email", &key, 1),
        )
        .json(
            &json!({"to": address, "subject": "Your refund, Alice", "body": "It is on its way.",
            "metadata": {"intent_key": key, "reference": "8812"}}),
        )
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");

    let notifier = Arc::new(Notifier::new(Default::default()));
    let reconciler =
        Reconciler::new(&loaded, ledger.clone(), notifier, None, Default::default()).unwrap();
    let report = reconciler
        .run(Duration::from_secs(3600), SystemClock.now_ms(), "test")
        .await;
    let found: Vec<_> = report
        .mismatches
        .iter()
        .filter(|mismatch| mismatch.tool == "send_email")
        .collect();
    assert_eq!(found.len(), 1, "{:#?}", report.mismatches);
    assert_eq!(found[0].kind, MismatchKind::UnknownFound);
    assert_eq!(found[0].subject.as_deref(), Some("8812"));
    let shown = serde_json::to_string(&report.mismatches).unwrap();
    assert!(!shown.contains("alice"), "{shown}");

    let intent = ledger.get_by_id(intent.id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::Done);
    let result = intent.result.unwrap();
    assert_eq!(result["to"], intent.arguments["to"], "{result}");
    assert_eq!(result["subject"], intent.arguments["subject"], "{result}");
    assert!(!result.to_string().contains("alice"), "{result}");
}

#[tokio::test]
async fn a_client_executed_tool_is_skipped_with_its_reason_and_is_not_an_error() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mock =
        MockServer::start(MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap())
            .await
            .unwrap();
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let ledger: Arc<dyn Ledger> = ledger;
    let loaded = config(&mock.url(), "http://127.0.0.1:9/hook");
    let notifier = Arc::new(Notifier::new(Default::default()));
    let reconciler = Reconciler::new(&loaded, ledger, notifier, None, Default::default()).unwrap();
    let report = reconciler
        .run(Duration::from_secs(3600), SystemClock.now_ms(), "test")
        .await;
    let sdk = report
        .tools
        .iter()
        .find(|tool| tool.tool == "refund_order_sdk")
        .expect("the example's client tool is in the report");
    let reason = sdk.skipped.as_deref().expect("skipped");
    assert!(reason.contains("executor: client"), "{reason}");
    assert!(reason.contains("the caller's"), "{reason}");
    assert_eq!(sdk.error, None, "no list is not an error for a client tool");
    assert!(!report.has_errors(), "{:#?}", report.tools);
    // The gateway tools are reconciled as before.
    let refunds = report
        .tools
        .iter()
        .find(|tool| tool.tool == "refund_order")
        .unwrap();
    assert_eq!(
        (refunds.error.as_deref(), refunds.skipped.as_deref()),
        (None, None)
    );
}

/// A refund made directly at the mock provider with `provider_key` as its Idempotency-Key
/// (the key a grant of the intent API hands the caller's code, or a forged one); its id.
async fn refund_with_provider_key(
    client: &reqwest::Client,
    mock: &str,
    order: &str,
    amount: &str,
    provider_key: &str,
) -> String {
    let response = client
        .post(format!("{mock}/v1/refunds"))
        .header("Idempotency-Key", provider_key)
        .json(&json!({"order_id": order, "amount": amount, "reason": "damaged"}))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");
    let refund: Value = response.json().await.unwrap();
    refund["id"].as_str().unwrap().to_owned()
}

/// Drives an intent of the client-executed `refund_order_sdk` to `status`, as a settle that
/// ended that way would; its id and intent key.
async fn settle_sdk(
    ledger: &dyn Ledger,
    order: &str,
    amount: &str,
    status: IntentStatus,
) -> (i64, String) {
    let arguments = json!({"order_id": order, "amount": amount});
    let now_ms = SystemClock.now_ms();
    let key = format!("refund:{order}:{amount}");
    let intent = begin_new(ledger, "refund_order_sdk", key.clone(), arguments, now_ms).await;
    let external_id = (status == IntentStatus::Done).then(|| format!("re_sdk_{order}"));
    finish(ledger, &intent, now_ms, status, None, external_id, "client").await;
    (intent.id, key)
}

// Regression: refund_order and refund_order_sdk refund through one provider account, so
// refund_order's listing holds the refunds made by the caller's code under
// refund_order_sdk's provider keys. Each was reported as `no_intent`, a bypass of the
// gateway, although its intent was in the ledger under the other tool.
#[tokio::test]
async fn a_record_of_another_tool_of_the_config_pairs_with_that_tools_intent_not_with_nothing() {
    let client = http::client(None);
    let mock =
        MockServer::start(MockProvider::new(MockOptions::new(HttpFaultPlan::quiet())).unwrap())
            .await
            .unwrap();
    let loaded = config(&mock.url(), "http://127.0.0.1:9/hook");
    let TempLedger {
        dir: _dir, ledger, ..
    } = TempLedger::with_options(SqliteOptions::default());
    let ledger: Arc<dyn Ledger> = ledger;
    let sdk_key =
        |key: &str| intentgate_core::key::provider_key("default", "refund_order_sdk", key, 1);

    // Done through the caller's code: the provider's record is that intent's. Not reported.
    let (_, done_key) = settle_sdk(ledger.as_ref(), "1101", "12.00", IntentStatus::Done).await;
    let done =
        refund_with_provider_key(&client, &mock.url(), "1101", "12.00", &sdk_key(&done_key)).await;
    // Unknown (the caller's answer was lost), and the provider has it: resolved to done.
    let (unknown_id, unknown_key) =
        settle_sdk(ledger.as_ref(), "1102", "13.00", IntentStatus::Unknown).await;
    let found = refund_with_provider_key(
        &client,
        &mock.url(),
        "1102",
        "13.00",
        &sdk_key(&unknown_key),
    )
    .await;
    // The caller's code refunded another amount than its intent asked for.
    let (other_amount_id, other_amount_key) =
        settle_sdk(ledger.as_ref(), "1103", "14.00", IntentStatus::Done).await;
    refund_with_provider_key(
        &client,
        &mock.url(),
        "1103",
        "15.00",
        &sdk_key(&other_amount_key),
    )
    .await;
    // The other tool's provider key, but no intent of it: a refund made around the gateway
    // under a forged key is still a bypass.
    let forged = refund_with_provider_key(
        &client,
        &mock.url(),
        "1104",
        "16.00",
        &sdk_key("refund:1104:16.00"),
    )
    .await;
    // The provider key of a tool the config does not have.
    let unknown_tool = refund_with_provider_key(
        &client,
        &mock.url(),
        "1105",
        "17.00",
        "refund_order_cli:refund:1105:17.00",
    )
    .await;
    // Past the provider's key window, the caller's code refunds the done intent again with
    // the same key: a second refund of one intent.
    mock.provider()
        .advance_clock(KEY_WINDOW + Duration::from_secs(60));
    let again =
        refund_with_provider_key(&client, &mock.url(), "1101", "12.00", &sdk_key(&done_key)).await;
    let later_ms = SystemClock.now_ms() + (KEY_WINDOW.as_millis() as i64) + 120_000;

    let notifier = Arc::new(Notifier::new(Default::default()));
    let reconciler =
        Reconciler::new(&loaded, ledger.clone(), notifier, None, Default::default()).unwrap();
    let report = reconciler
        .run(KEY_WINDOW + Duration::from_secs(3600), later_ms, "test")
        .await;
    let refunds = report
        .tools
        .iter()
        .find(|tool| tool.tool == "refund_order")
        .unwrap();
    assert_eq!(refunds.error, None);
    assert_eq!(refunds.records_checked, 6, "{report:#?}");
    assert_eq!(
        refunds.records_of_other_tools,
        [("refund_order_sdk".to_owned(), 4)].into_iter().collect(),
        "{report:#?}"
    );
    let of_kind = |kind: MismatchKind| -> Vec<_> {
        report
            .mismatches
            .iter()
            .filter(|mismatch| mismatch.kind == kind)
            .cloned()
            .collect()
    };

    let bypasses = of_kind(MismatchKind::NoIntent);
    let mut bypassed: Vec<_> = bypasses
        .iter()
        .flat_map(|mismatch| mismatch.external_ids.clone())
        .collect();
    bypassed.sort();
    let mut expected = vec![forged, unknown_tool];
    expected.sort();
    assert_eq!(bypassed, expected, "{:#?}", report.mismatches);

    let resolved = of_kind(MismatchKind::UnknownFound);
    assert_eq!(resolved.len(), 1, "{:#?}", report.mismatches);
    assert_eq!(resolved[0].intent_id, Some(unknown_id));
    assert!(resolved[0].resolved);
    assert!(
        resolved[0].detail.contains("refund_order_sdk"),
        "{}",
        resolved[0].detail
    );
    let intent = ledger.get_by_id(unknown_id).await.unwrap().unwrap();
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.external_id.as_deref(), Some(found.as_str()));

    let amounts = of_kind(MismatchKind::Amount);
    assert_eq!(amounts.len(), 1, "{:#?}", report.mismatches);
    assert_eq!(amounts[0].intent_id, Some(other_amount_id));
    assert_eq!(amounts[0].intent_amount.as_deref(), Some("14"));
    assert_eq!(amounts[0].provider_amount.as_deref(), Some("15.00"));

    let duplicates = of_kind(MismatchKind::Duplicate);
    assert_eq!(duplicates.len(), 1, "{:#?}", report.mismatches);
    assert_eq!(duplicates[0].severity, Severity::Critical);
    assert_eq!(duplicates[0].intent_key.as_deref(), Some(done_key.as_str()));
    assert_eq!(duplicates[0].external_ids, vec![done, again]);

    assert_eq!(report.mismatches_total, 5, "{:#?}", report.mismatches);
}

//! Liveness through the real parts: a gateway over a SQLite file calls the mock payments
//! provider over HTTP, and the provider times out (without committing) the first three
//! requests of every idempotency key, then is healthy. Each of 200 refunds is first told
//! `pending_unknown`; within 60 s every one must be `done` with exactly one refund at the
//! provider, once through the sweeper of a serving gateway alone (nobody asks again) and
//! once through repeat calls alone (a gate with no sweeper, asked "did it go through?").

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use intentgate_config::HashKeySource;
use intentgate_core::IntentStatus;
use intentgate_gate::{CallContext, Gate, SystemClock};
use intentgate_ledger::{IntentRecord, Ledger};
use intentgate_mock::{HttpFaultPlan, MockOptions, MockProvider, MockServer};
use intentgate_runtime::{Gateway, Options};
use serde_json::{Value, json};

const INTENTS: usize = 200;
/// Requests per key the provider times out before it answers.
const FIRST_TIMEOUTS: u32 = 3;
/// Every intent must be done this long after its first call was answered.
const DEADLINE: Duration = Duration::from_secs(60);
/// Calls in flight at once from the test's clients.
const CLIENTS: usize = 50;

/// A gateway with one tool: a refund at a provider that keeps idempotency keys for 24 hours.
/// The timeout is short so that the provider's timeouts cost the test little time.
fn config(folder: &Path, mock_url: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
gateway:
  listen: 127.0.0.1:0
  ledger: {ledger}
upstreams:
  payments:
    base_url: {mock_url}
    idempotency_header: Idempotency-Key
    honours_idempotency_keys: true
    key_window_hours: 24
tools:
  - name: refund_order
    description: Refund part or all of an order.
    effect: side_effect
    input_schema:
      type: object
      properties:
        order_id: {{type: string, minLength: 1, maxLength: 64}}
        amount: {{type: number, exclusiveMinimum: 0, maximum: 100000}}
      required: [order_id, amount]
      additionalProperties: false
    key: "refund:{{order_id}}:{{amount:.2}}"
    timeout_ms: 400
    retry_budget: 0
    call:
      upstream: payments
      method: POST
      path: /v1/refunds
      body:
        order_id: "{{order_id}}"
        amount: "{{amount:.2}}"
        reason: requested_by_customer
        metadata: {{intent_key: "{{intent_key}}"}}
      result: {{external_id: /id}}
    lookup:
      method: GET
      path: /v1/refunds
      query: {{idempotency_key: "{{idempotency_key}}"}}
      found: /data
      key: /idempotency_key
      external_id: /id
"#,
        ledger = folder.join("ledger.db").display(),
    );
    let path = folder.join("gateway.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The mock provider, timing out the first [`FIRST_TIMEOUTS`] requests of every key.
async fn provider() -> (Arc<MockProvider>, MockServer) {
    let plan = HttpFaultPlan {
        first_timeouts_per_key: FIRST_TIMEOUTS,
        // Held past the gateway's timeout, then cut.
        timeout_hold_ms: 1_000,
        ..HttpFaultPlan::quiet()
    };
    let provider = MockProvider::new(MockOptions::new(plan)).unwrap();
    let server = MockServer::start(provider.clone()).await.unwrap();
    (provider, server)
}

fn loaded(path: &Path) -> intentgate_config::LoadedConfig {
    let hash_key =
        HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key().unwrap());
    intentgate_runtime::load_with(path, &hash_key).unwrap()
}

fn refund(n: usize) -> Value {
    json!({"order_id": format!("ord_{n}"), "amount": 12.5})
}

fn intent_key(n: usize) -> String {
    format!("refund:ord_{n}:12.50")
}

/// Every intent in the ledger.
async fn intents(ledger: &dyn Ledger) -> Vec<IntentRecord> {
    let mut all: Vec<IntentRecord> = Vec::new();
    loop {
        let after = all.last().map_or(0, |record| record.id);
        let page = ledger.list(after, 1000).await.unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

async fn count_done(ledger: &dyn Ledger) -> usize {
    intents(ledger)
        .await
        .iter()
        .filter(|record| record.status == IntentStatus::Done)
        .count()
}

/// What the provider and the ledger hold at the end: every intent done, one refund each.
/// Returns provider requests (side effects and lookups) per intent.
async fn assert_every_intent_done_once(provider: &MockProvider, ledger: &dyn Ledger) -> f64 {
    let records = intents(ledger).await;
    assert_eq!(records.len(), INTENTS);
    let unresolved: Vec<_> = records
        .iter()
        .filter(|record| record.status != IntentStatus::Done)
        .map(|record| (&record.key, record.status))
        .collect();
    assert!(unresolved.is_empty(), "left unresolved: {unresolved:?}");
    for n in 0..INTENTS {
        assert_eq!(
            provider.effect_count(&intent_key(n)),
            1,
            "{}",
            intent_key(n)
        );
    }
    assert_eq!(provider.effects().len(), INTENTS, "one refund per intent");
    let stats = provider.stats();
    (stats.requests + stats.lookups) as f64 / INTENTS as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_alone_brings_every_timed_out_refund_to_done_once() {
    let (provider, mock) = provider().await;
    let folder = tempfile::tempdir().unwrap();
    let path = config(folder.path(), &mock.url());
    let options = Options {
        config_path: Some(path.clone()),
        ..Options::default()
    };
    let gateway = Gateway::open(loaded(&path), options).await.unwrap();
    let ledger = gateway.gate().ledger().clone();
    let server = gateway.bind().await.unwrap();
    let address = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));

    // Each refund is asked for once, over HTTP; its first request times out uncommitted.
    let client = reqwest::Client::new();
    let answers: Vec<Value> = futures_util::stream::iter(0..INTENTS)
        .map(|n| {
            let client = client.clone();
            async move {
                let response = client
                    .post(format!("http://{address}/v1/tools/refund_order/call"))
                    .json(&json!({ "arguments": refund(n) }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                response.json::<Value>().await.unwrap()
            }
        })
        .buffer_unordered(CLIENTS)
        .collect()
        .await;
    let pending = answers
        .iter()
        .filter(|answer| answer["status"] == "pending_unknown")
        .count();
    assert_eq!(
        pending, INTENTS,
        "every first call timed out: {:?}",
        answers[0]
    );

    // Nobody asks again: only the sweeper can settle them.
    let started = Instant::now();
    while count_done(&*ledger).await < INTENTS && started.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = started.elapsed();
    let unresolved = INTENTS - count_done(&*ledger).await;
    println!(
        "sweeper alone: {unresolved} of {INTENTS} intents left unresolved after {:.1} s",
        took.as_secs_f64()
    );
    let per_intent = assert_every_intent_done_once(&provider, &*ledger).await;
    println!(
        "sweeper alone: every intent done in {:.1} s, {per_intent:.1} provider requests per intent",
        took.as_secs_f64()
    );

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeat_calls_alone_bring_every_timed_out_refund_to_done_once() {
    let (provider, mock) = provider().await;
    let folder = tempfile::tempdir().unwrap();
    let path = config(folder.path(), &mock.url());
    let loaded = loaded(&path);
    let ledger: Arc<dyn Ledger> = Arc::new(
        intentgate_ledger::SqliteLedger::open(
            folder.path().join("ledger.db"),
            intentgate_ledger::SqliteOptions::default(),
        )
        .unwrap(),
    );
    // A gate and no background tasks: no sweeper runs.
    let gate = Arc::new(
        intentgate_runtime::build_gate(&loaded, ledger.clone(), Arc::new(SystemClock)).unwrap(),
    );

    let statuses = call_all(&gate, 0..INTENTS).await;
    assert!(
        statuses
            .iter()
            .all(|(_, status)| status == "pending_unknown"),
        "every first call timed out: {statuses:?}"
    );

    // The users ask again, every half second, until their refund is confirmed.
    let started = Instant::now();
    let mut waiting: Vec<usize> = (0..INTENTS).collect();
    let mut repeats = 0;
    while !waiting.is_empty() && started.elapsed() < DEADLINE {
        tokio::time::sleep(Duration::from_millis(500)).await;
        repeats += waiting.len();
        waiting = call_all(&gate, waiting)
            .await
            .into_iter()
            .filter(|(_, status)| !matches!(status.as_str(), "done" | "already_done"))
            .map(|(n, _)| n)
            .collect();
    }
    let took = started.elapsed();
    println!(
        "repeats alone: {} of {INTENTS} intents left unresolved after {:.1} s ({repeats} repeat calls)",
        waiting.len(),
        took.as_secs_f64()
    );
    let per_intent = assert_every_intent_done_once(&provider, &*ledger).await;
    println!(
        "repeats alone: every intent done in {:.1} s, {per_intent:.1} provider requests per intent",
        took.as_secs_f64()
    );
}

/// Calls the refund of each of `intents` once, [`CLIENTS`] at a time; their statuses.
async fn call_all(
    gate: &Arc<Gate>,
    intents: impl IntoIterator<Item = usize>,
) -> Vec<(usize, String)> {
    futures_util::stream::iter(intents)
        .map(|n| {
            let gate = gate.clone();
            async move {
                let outcome = gate
                    .call("refund_order", refund(n), &CallContext::default())
                    .await
                    .unwrap();
                (n, outcome.status.to_string())
            }
        })
        .buffer_unordered(CLIENTS)
        .collect()
        .await
}

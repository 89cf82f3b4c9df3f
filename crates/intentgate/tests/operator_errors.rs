//! Errors that are the operator's, as an operator meets them (docs/design.md section 5): the real
//! `intentgate serve` in front of a small payments provider in this test, which answers 401
//! until it is sent the right API key, 404 to a route it does not have, 404 to an order it
//! does not know, and an upstream nothing listens at. And `intentgate intents reopen` on a
//! refusal stored wrongly.
//!
//! Before: a wrong key was stored `rejected` (the model told to explain the reason to the
//! customer) and replayed after the key was fixed, with nothing in the log at `warn`, nothing in
//! `/readyz`, and no way to undo it.

mod support;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use intentgate_test_support::http::scrape;
use intentgate_test_support::metrics::sample;
use serde_json::{Value, json};
use support::{Running, Webhook, call, client, get_json, intentgate, serve_with_stderr, success};

/// The key the provider accepts; the gateway is first started with another.
const GOOD_KEY: &str = "sk_live_good_0123456789";
const WRONG_KEY: &str = "sk_live_wrong_9876543210";
const ADMIN_TOKEN: &str = "an-admin-token-for-the-operator-errors-test";
const KEY: &str = "refund:8812:49.00";
/// How long the owner's webhook may take to arrive: it is queued and posted in the background.
const NOTICE_WITHIN: Duration = Duration::from_secs(10);

/// What the provider holds: the refunds it made, by idempotency key.
#[derive(Default)]
struct Provider {
    refunds: Mutex<HashMap<String, Value>>,
    requests: AtomicU32,
    /// Refuse the next refund with a 422 (a refusal the test reopens later).
    refuse_next: AtomicBool,
}

impl Provider {
    fn refunds(&self) -> usize {
        self.refunds.lock().unwrap().len()
    }
}

type Shared = Arc<Provider>;

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": {"message": message}}))).into_response()
}

/// `POST /v1/refunds` (and `/v1/orders/8812/refund`): 401 without the right key, else a
/// refund, the same one again for the same idempotency key.
async fn refund(provider: &Provider, headers: &HeaderMap, body: Value) -> Response {
    provider.requests.fetch_add(1, Ordering::SeqCst);
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok());
    if authorization != Some(&format!("Bearer {GOOD_KEY}")) {
        // Stripe's shape: the key masked.
        return error(
            StatusCode::UNAUTHORIZED,
            "Invalid API key provided: sk_live_****3210",
        );
    }
    if provider.refuse_next.swap(false, Ordering::SeqCst) {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "The refund exceeds the order's remaining amount",
        );
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut refunds = provider.refunds.lock().unwrap();
    let count = refunds.len();
    let refund = refunds
        .entry(key)
        .or_insert_with(|| json!({"id": format!("re_{}", count + 1), "request": body}));
    Json(refund.clone()).into_response()
}

async fn start_provider() -> (Shared, String) {
    let provider: Shared = Arc::default();
    let app =
        axum::Router::new()
            .route(
                "/v1/refunds",
                post(
                    |State(provider): State<Shared>,
                     headers: HeaderMap,
                     Json(body): Json<Value>| async move {
                        refund(&provider, &headers, body).await
                    },
                ),
            )
            .route(
                "/v1/orders/{order_id}/refund",
                post(
                    |State(provider): State<Shared>,
                     UrlPath(order_id): UrlPath<String>,
                     headers: HeaderMap,
                     Json(body): Json<Value>| async move {
                        if order_id != "8812" {
                            return error(
                                StatusCode::NOT_FOUND,
                                &format!("No such order: {order_id}"),
                            );
                        }
                        refund(&provider, &headers, body).await
                    },
                ),
            )
            .with_state(provider.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (provider, url)
}

/// A loopback address nothing listens at.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// A side-effecting refund tool named `name` that posts to `path` at `upstream`.
fn tool(name: &str, upstream: &str, path: &str) -> String {
    format!(
        r#"
  - name: {name}
    description: Refund part or all of an order.
    effect: side_effect
    owner: payments-team
    input_schema:
      type: object
      properties:
        order_id: {{type: string, minLength: 1, maxLength: 64}}
        amount: {{type: number, exclusiveMinimum: 0, maximum: 100000}}
      required: [order_id, amount]
      additionalProperties: false
    key: "refund:{{order_id}}:{{amount:.2}}"
    timeout_ms: 2000
    retry_budget: 2
    call:
      upstream: {upstream}
      method: POST
      path: "{path}"
      body: {{order_id: "{{order_id}}", amount: "{{amount:.2}}"}}
      result: {{external_id: /id}}
"#
    )
}

fn config(folder: &Path, webhook: &str, dead: &str) -> PathBuf {
    let text = format!(
        r#"
gateway:
  listen: 127.0.0.1:0
  ledger: {ledger}
upstreams:
  payments:
    base_url: ${{PROVIDER_URL}}
    headers:
      Authorization: "Bearer ${{PAYMENTS_API_KEY}}"
    idempotency_header: Idempotency-Key
  dead:
    base_url: {dead}
    idempotency_header: Idempotency-Key
owners:
  payments-team: {{log: true, webhook: "{webhook}"}}
tools:{refund}{by_order}{typo}{elsewhere}"#,
        ledger = folder.join("ledger.db").display(),
        refund = tool("refund_order", "payments", "/v1/refunds"),
        by_order = tool(
            "refund_by_order",
            "payments",
            "/v1/orders/{order_id}/refund"
        ),
        typo = tool("refund_typo", "payments", "/v1/refundz"),
        elsewhere = tool("refund_elsewhere", "dead", "/v1/refunds"),
    );
    let path = folder.join("gateway.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Stack {
    folder: tempfile::TempDir,
    config: PathBuf,
    ledger: PathBuf,
    provider: Shared,
    provider_url: String,
    webhook: Webhook,
    client: reqwest::Client,
}

impl Stack {
    async fn new() -> Stack {
        let folder = tempfile::tempdir().unwrap();
        let (provider, provider_url) = start_provider().await;
        let webhook = Webhook::start().await;
        let config = config(folder.path(), &webhook.url, &dead_url());
        let ledger = folder.path().join("ledger.db");
        Stack {
            folder,
            config,
            ledger,
            provider,
            provider_url,
            webhook,
            client: client(),
        }
    }

    /// `intentgate serve` with `api_key` as the payments key; its stderr goes to `log`.
    fn serve(&self, api_key: &str, log: &str) -> Running {
        let stderr = File::create(self.folder.path().join(log)).unwrap();
        serve_with_stderr(
            self.config.to_str().unwrap(),
            self.ledger.to_str().unwrap(),
            &[
                ("PROVIDER_URL", &self.provider_url),
                ("PAYMENTS_API_KEY", api_key),
                ("INTENTGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            ],
            stderr,
        )
    }

    fn log(&self, log: &str) -> String {
        std::fs::read_to_string(self.folder.path().join(log)).unwrap()
    }

    async fn refund(&self, gateway: &Running, tool: &str, order: &str) -> Value {
        call(
            &self.client,
            &gateway.url,
            tool,
            json!({"order_id": order, "amount": 49}),
        )
        .await
    }

    async fn admin(&self, gateway: &Running, path: &str) -> Value {
        support::json_answer(
            self.client
                .get(format!("{}{path}", gateway.url))
                .bearer_auth(ADMIN_TOKEN),
        )
        .await
    }

    /// The intent of `tool` with `key` and its event log, through the admin API.
    async fn intent(&self, gateway: &Running, tool: &str, key: &str) -> Value {
        let listed = self
            .admin(gateway, &format!("/v1/admin/intents?tool={tool}"))
            .await;
        let id = listed["intents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|intent| intent["key"] == key)
            .unwrap_or_else(|| panic!("no intent {key} of {tool}: {listed}"))["id"]
            .clone();
        self.admin(gateway, &format!("/v1/admin/intents/{id}"))
            .await
    }
}

fn last_transition(shown: &Value) -> Value {
    shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|event| event["kind"] == "transition")
        .cloned()
        .unwrap_or(Value::Null)
}

// Multi-threaded: the provider and the webhook answer while the test waits on processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_api_key_is_the_operators_and_after_the_fix_the_same_call_executes_once() {
    let stack = Stack::new().await;
    let mut gateway = stack.serve(WRONG_KEY, "wrong-key.stderr");

    let first = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(first["status"], "not_executed", "{first}");
    assert_eq!(first["reason"], "misconfigured", "{first}");
    let message = first["message"].as_str().unwrap();
    assert!(message.contains("a person will follow up"), "{message}");
    assert!(!message.to_lowercase().contains("explain"), "{message}");
    // Not stored as a refusal: the intent is not_executed, with the cause in its event log.
    let shown = stack.intent(&gateway, "refund_order", KEY).await;
    assert_eq!(shown["intent"]["status"], "not_executed", "{shown}");
    let detail = last_transition(&shown)["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.contains("(unauthorized)")
            && detail.contains("upstream `payments` answered HTTP 401"),
        "{detail}"
    );
    // A wrong key is not retried: its answer won't change within the call.
    assert_eq!(stack.provider.requests.load(Ordering::SeqCst), 1);

    // The operator is told at once: a warn line, the metric, /readyz, the owner.
    let log = stack.log("wrong-key.stderr");
    let line = log
        .lines()
        .find(|line| line.contains("the gateway is misconfigured"))
        .unwrap_or_else(|| panic!("no warn line in:\n{log}"));
    for field in [
        "WARN",
        "tool=refund_order",
        "upstream=payments",
        "kind=unauthorized",
        "status=401",
        "HTTP 401",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert!(
        !log.contains(WRONG_KEY) && !log.contains(&stack.provider_url),
        "no secret and no URL in the log:\n{log}"
    );
    let metrics = scrape(&stack.client, &gateway.url).await;
    let series = r#"intentgate_upstream_errors_total{tool="refund_order",upstream="payments",kind="unauthorized"}"#;
    assert_eq!(sample::<f64>(&metrics, series), Some(1.0), "{metrics}");
    let ready = stack
        .client
        .get(format!("{}/readyz", gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "ready: the gateway's other tools work");
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["ready"], true);
    let degraded = &ready["degraded"][0];
    assert_eq!(
        (
            &degraded["upstream"],
            &degraded["tool"],
            &degraded["kind"],
            &degraded["status"]
        ),
        (
            &json!("payments"),
            &json!("refund_order"),
            &json!("unauthorized"),
            &json!(401)
        ),
        "{ready}"
    );
    assert!(degraded["since_ms"].as_i64().unwrap() > 0, "{ready}");
    let (_, notice) = stack
        .webhook
        .wait_for(NOTICE_WITHIN, |notice| {
            notice["kind"] == "upstream_misconfigured"
        })
        .await
        .expect("the owner's webhook is told");
    assert_eq!(notice["tool"], "refund_order");
    assert_eq!(notice["owner"], "payments-team");
    assert_eq!(notice["details"]["upstream"], "payments");
    assert_eq!(notice["details"]["kind"], "unauthorized");

    // A repeat is not answered from a stored refusal: it tries again (and fails again), and
    // the owner is not told twice.
    let again = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(again["status"], "not_executed", "{again}");
    assert_eq!(stack.provider.requests.load(Ordering::SeqCst), 2);
    let metrics = scrape(&stack.client, &gateway.url).await;
    assert_eq!(sample::<f64>(&metrics, series), Some(2.0), "{metrics}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let notices = stack.webhook.notices();
    assert_eq!(
        notices
            .iter()
            .filter(|(_, notice)| notice["kind"] == "upstream_misconfigured")
            .count(),
        1,
        "{notices:?}"
    );

    // The key is fixed and the gateway restarted over the same ledger: the same call executes,
    // once.
    gateway.terminate(Duration::from_secs(20));
    let gateway = stack.serve(GOOD_KEY, "good-key.stderr");
    let fixed = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(fixed["status"], "done", "{fixed}");
    let repeat = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(repeat["status"], "already_done", "{repeat}");
    assert_eq!(
        stack.provider.refunds(),
        1,
        "exactly one refund at the provider"
    );
    let ready = get_json(&stack.client, format!("{}/readyz", gateway.url)).await;
    assert_eq!(ready, json!({"ready": true}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_upstream_and_a_wrong_route_are_not_executed_and_a_missing_order_is_rejected() {
    let stack = Stack::new().await;
    let gateway = stack.serve(GOOD_KEY, "gateway.stderr");

    // Connection refused: the bounded retries, then not_executed with the cause.
    let dead = stack.refund(&gateway, "refund_elsewhere", "8812").await;
    assert_eq!(
        (&dead["status"], &dead["reason"]),
        (&json!("not_executed"), &json!("misconfigured")),
        "{dead}"
    );
    let shown = stack.intent(&gateway, "refund_elsewhere", KEY).await;
    let detail = last_transition(&shown)["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        detail.contains("(connect)")
            && detail.contains("upstream `dead` could not be reached")
            && detail.contains("after 2 retries"),
        "{detail}"
    );
    assert!(
        !detail.contains("retries spent"),
        "the cause, not only: {detail}"
    );

    // A 404 from a fixed route: the route is wrong.
    let typo = stack.refund(&gateway, "refund_typo", "8812").await;
    assert_eq!(
        (&typo["status"], &typo["reason"]),
        (&json!("not_executed"), &json!("misconfigured")),
        "{typo}"
    );
    // A 404 from a route with the order in its path: that order does not exist.
    let missing = stack.refund(&gateway, "refund_by_order", "9999").await;
    assert_eq!(missing["status"], "rejected", "{missing}");
    assert!(
        missing["message"]
            .as_str()
            .unwrap()
            .contains("No such order: 9999"),
        "{missing}"
    );
    assert_eq!(missing.get("reason"), None);

    let ready = get_json(&stack.client, format!("{}/readyz", gateway.url)).await;
    let degraded: Vec<(String, String, String)> = ready["degraded"]
        .as_array()
        .unwrap_or_else(|| panic!("{ready}"))
        .iter()
        .map(|entry| {
            (
                entry["upstream"].as_str().unwrap().to_owned(),
                entry["tool"].as_str().unwrap().to_owned(),
                entry["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        degraded,
        [
            ("dead".into(), "refund_elsewhere".into(), "connect".into()),
            (
                "payments".into(),
                "refund_typo".into(),
                "route_not_found".into()
            ),
        ]
    );
    let metrics = scrape(&stack.client, &gateway.url).await;
    assert_eq!(
        sample::<f64>(
            &metrics,
            r#"intentgate_upstream_errors_total{tool="refund_elsewhere",upstream="dead",kind="connect"}"#
        ),
        Some(3.0),
        "each of the three requests: {metrics}"
    );
}

/// A refusal stored as `rejected` (here a 422) is replayed to every repeat, until an operator
/// reopens it with the CLI; the next call then executes it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_intent_reopened_with_the_cli_executes_on_the_next_call() {
    let stack = Stack::new().await;
    let gateway = stack.serve(GOOD_KEY, "gateway.stderr");
    stack.provider.refuse_next.store(true, Ordering::SeqCst);
    let refused = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(refused["status"], "rejected", "{refused}");
    let replayed = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(replayed["status"], "rejected", "{replayed}");
    assert_eq!(stack.provider.requests.load(Ordering::SeqCst), 1);

    let ledger = stack.ledger.to_str().unwrap();
    // Without a reason it is refused, and nothing changes.
    let no_reason = intentgate()
        .args(["intents", "reopen", "refund_order", KEY, "--reason", " "])
        .args(["--ledger", ledger])
        .output()
        .unwrap();
    assert!(!no_reason.status.success());
    assert!(String::from_utf8_lossy(&no_reason.stderr).contains("reason is required"));
    let reopened = intentgate()
        .args(["intents", "reopen", "refund_order", KEY])
        .args([
            "--reason",
            "the refusal was our gateway's wrong amount field; fixed",
        ])
        .args(["--actor", "alice", "--ledger", ledger])
        .output()
        .unwrap();
    let stdout = success(&reopened);
    assert!(
        stdout.contains("before: rejected") && stdout.contains("after:  not_executed"),
        "{stdout}"
    );
    // Reopening twice says there is nothing to reopen.
    let twice = intentgate()
        .args([
            "intents",
            "reopen",
            "refund_order",
            KEY,
            "--reason",
            "again",
        ])
        .args(["--ledger", ledger])
        .output()
        .unwrap();
    assert!(!twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stderr).contains("nothing to reopen"));

    let next = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(next["status"], "done", "{next}");
    let repeat = stack.refund(&gateway, "refund_order", "8812").await;
    assert_eq!(repeat["status"], "already_done", "{repeat}");
    assert_eq!(stack.provider.refunds(), 1);

    let shown = stack.intent(&gateway, "refund_order", KEY).await;
    let reopen = shown["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "reopen")
        .cloned()
        .unwrap_or_else(|| panic!("no reopen event: {shown}"));
    assert_eq!(reopen["actor"], "alice");
    assert_eq!(
        reopen["detail"],
        "the refusal was our gateway's wrong amount field; fixed"
    );
    assert_eq!(
        (&reopen["from_status"], &reopen["to_status"]),
        (&json!("rejected"), &json!("not_executed"))
    );
}

//! A gateway whose tools are an MCP server's: `refund_server.py` of
//! `intentgate-mcp-upstream`'s tests (the official MCP Python SDK, over stdio, from the venv
//! `.ci/run` makes under `target/mcp-python-venv`), started by `Gateway::open`, imported,
//! and called over the gateway's HTTP API. Without the venv the tests say they are skipped,
//! except under `CI=true`, where they fail.

use std::path::{Path, PathBuf};

use intentgate_config::HashKeySource;
use intentgate_runtime::{Error, Gateway, Options};
use intentgate_test_support::mcp_python;
use serde_json::{Value, json};

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../intentgate-mcp-upstream/tests/python/refund_server.py")
}

/// A config with the refund server as upstream `refunds`, `import` as its import section,
/// and `refund_order` calling its `refund` tool with `find_refund` as the lookup and
/// `list_refunds` as the list (two records a page, so that listings take several pages).
fn config(folder: &Path, python: &Path, import: &str) -> PathBuf {
    let text = format!(
        r#"upstreams:
  refunds:
    kind: mcp
    command: "{python}"
    args: ["{script}"]
    env: {{REFUND_STATE: "{state}", REFUND_PAGE_MAX: "2"}}
    timeout_ms: 2000
reconcile: {{settle_seconds: 0, unknown_grace_seconds: 0}}
imports:
{import}
tools:
  - name: refund_order
    description: Refund an order.
    effect: side_effect
    key: "refund:{{order_id}}"
    input_schema:
      type: object
      properties: {{order_id: {{type: string}}, amount: {{type: string}}}}
      required: [order_id, amount]
    call:
      upstream: refunds
      tool: refund
      arguments: {{order_id: "{{order_id}}", amount: "{{amount}}", intent_key: "{{intent_key}}"}}
      idempotency_key_argument: idempotency_key
      not_processed: [rate limit]
    lookup:
      tool: find_refund
      arguments: {{order_id: "{{order_id}}"}}
      found: /refund
      key: /idempotency_key
    list:
      tool: list_refunds
      arguments: {{since_ms: "{{since_ms}}", until_ms: "{{until_ms}}", limit: "{{limit}}", cursor: "{{cursor}}"}}
      items: /refunds
      next_cursor: /next_cursor
      fields: {{idempotency_key: /idempotency_key, intent_key: /intent_key, external_id: /id, amount: /amount, subject: /order_id}}
"#,
        python = python.display(),
        script = server_script().display(),
        state = folder.join("effects.json").display(),
    );
    let path = folder.join("gateway.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The admin API's bearer token in these tests.
const ADMIN_TOKEN: &str = "an-admin-token-of-at-least-32-bytes";

async fn open(path: &Path, folder: &Path) -> Result<Gateway, Error> {
    let hash_key =
        HashKeySource::EnvironmentOrEphemeral(intentgate_runtime::ephemeral_hash_key().unwrap());
    let loaded = intentgate_runtime::load_with(path, &hash_key).unwrap();
    let options = Options {
        listen: Some("127.0.0.1:0".to_owned()),
        ledger: Some(folder.join("ledger.db").display().to_string()),
        admin_token: Some(ADMIN_TOKEN.to_owned()),
        ..Options::default()
    };
    Gateway::open(loaded, options).await
}

/// A gateway serving its HTTP API on a loopback port until [`Serving::stop`].
struct Serving {
    address: std::net::SocketAddr,
    client: reqwest::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), Error>>,
}

impl Serving {
    async fn start(gateway: Gateway) -> Serving {
        let server = gateway.bind().await.unwrap();
        let address = server.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Serving {
            address,
            client: reqwest::Client::new(),
            stop,
            running,
        }
    }

    /// `POST /v1/tools/{tool}/call`, which must answer 200.
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        let response = self
            .client
            .post(format!("http://{}/v1/tools/{tool}/call", self.address))
            .json(&json!({ "arguments": arguments }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.running.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclassified_tool_of_an_import_stops_the_start_naming_each_with_a_fix() {
    let Some(python) = mcp_python() else { return };
    let folder = tempfile::tempdir().unwrap();
    let path = config(folder.path(), &python, "  - upstream: refunds\n");
    let error = match open(&path, folder.path()).await {
        Ok(_) => panic!("a config with unclassified tools must not start"),
        Err(error) => error.to_string(),
    };
    // `refund` is called by `refund_order`; `find_refund` and `request_header` are marked
    // readOnlyHint by the server; `refund_meta` is none of these, and is named with the
    // lines that would fix it.
    let tool = "refund_meta";
    assert!(
        error.contains(&format!("does not mark tool `{tool}` read-only")),
        "{error}"
    );
    assert!(error.contains(&format!("`{tool}: idempotent`")), "{error}");
    assert!(
        error.contains(&format!("call: {{upstream: refunds, tool: {tool}}}")),
        "{error}"
    );
    for classified in [
        "`refund`",
        "`find_refund`",
        "`list_refunds`",
        "`request_header`",
    ] {
        assert!(!error.contains(classified), "{error}");
    }

    // A classification of a tool the server does not list is refused too (a typo would
    // otherwise leave the real tool unclassified).
    let path = config(
        folder.path(),
        &python,
        "  - upstream: refunds\n    effects: {find_refunds: read}\n    exclude: [refund_meta]\n",
    );
    let error = open(&path, folder.path()).await.err().unwrap().to_string();
    assert!(
        error.contains("names `find_refunds`, which the server does not list"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_tools_and_an_mcp_side_effect_are_served_over_http() {
    let Some(python) = mcp_python() else { return };
    let folder = tempfile::tempdir().unwrap();
    let path = config(
        folder.path(),
        &python,
        "  - upstream: refunds\n    prefix: refunds_\n    exclude: [refund_meta]\n",
    );
    let gateway = open(&path, folder.path()).await.unwrap();
    let mut names: Vec<String> = gateway
        .gate()
        .tools()
        .iter()
        .map(|tool| tool.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "refund_order",
            "refunds_find_refund",
            "refunds_list_refunds",
            "refunds_request_header"
        ]
    );
    // The imported tool, a read because the server marks it readOnlyHint, keeps the
    // server's description and input schema.
    let find = gateway.gate().tool("refunds_find_refund").unwrap();
    assert_eq!(find.description, "The refund of an order, or null.");
    assert_eq!(find.input_schema["required"], json!(["order_id"]));
    assert_eq!(find.effect, intentgate_core::Effect::Read);

    let serving = Serving::start(gateway).await;
    let call = |tool: &'static str, arguments: Value| serving.call(tool, arguments);
    let refund = json!({"order_id": "ord_1", "amount": "49.50"});
    let first = call("refund_order", refund.clone()).await;
    assert_eq!(first["status"], "done", "{first}");
    assert_eq!(first["external_id"], "re_1", "{first}");
    let repeat = call("refund_order", refund.clone()).await;
    assert_eq!(repeat["status"], "already_done", "{repeat}");
    // The server died after performing the refund: the gateway looks it up, once the server
    // is back (within the call, or, on a loaded machine, by a later repeat), and finds it.
    let died = json!({"order_id": "die-1", "amount": "5"});
    let mut answer = call("refund_order", died.clone()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while answer["status"] == "pending_unknown" && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        answer = call("refund_order", died.clone()).await;
    }
    assert!(
        matches!(answer["status"].as_str(), Some("done" | "already_done")),
        "{answer}"
    );
    assert_eq!(answer["external_id"], "re_2", "{answer}");
    // The server's refusal is a rejection.
    let refused = call(
        "refund_order",
        json!({"order_id": "refuse-1", "amount": "5"}),
    )
    .await;
    assert_eq!(refused["status"], "rejected", "{refused}");
    // The imported read passes through to the server.
    let found = call("refunds_find_refund", json!({"order_id": "ord_1"})).await;
    assert_eq!(found["status"], "done", "{found}");
    assert_eq!(found["result"]["refund"]["id"], "re_1", "{found}");

    // One effect per intent, counted by the server itself.
    let effects: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.path().join("effects.json")).unwrap())
            .unwrap();
    let records = effects.as_object().unwrap();
    assert_eq!(records.len(), 2, "{effects}");
    assert!(
        records.values().all(|record| record["effects"] == 1),
        "{effects}"
    );
    serving.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciliation_pages_through_the_mcp_servers_records_and_finds_what_went_around() {
    let Some(python) = mcp_python() else { return };
    let folder = tempfile::tempdir().unwrap();
    let path = config(
        folder.path(),
        &python,
        "  - upstream: refunds\n    exclude: [refund_meta]\n",
    );
    let gateway = open(&path, folder.path()).await.unwrap();
    let serving = Serving::start(gateway).await;
    for order in ["ord_1", "ord_2", "ord_3"] {
        let answer = serving
            .call(
                "refund_order",
                json!({"order_id": order, "amount": "49.50"}),
            )
            .await;
        assert_eq!(answer["status"], "done", "{answer}");
    }
    // Around the gateway: ord_2 refunded a second time under a key of its own with ord_2's
    // intent key in its metadata (a client that replayed the provider call itself), and ord_9
    // refunded with no intent at all. Records pair with intents by the provider key the
    // gateway sent, so neither is an intent's effect: both are reported as made around it,
    // the first with the intent key its metadata names, for the owner.
    let state = folder.path().join("effects.json");
    let mut effects: Value =
        serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    let intent_key = effects
        .as_object()
        .unwrap()
        .values()
        .find(|record| record["order_id"] == "ord_2")
        .unwrap()["intent_key"]
        .clone();
    assert!(
        intent_key.is_string(),
        "the call sends its intent key: {effects}"
    );
    // A second ago: the run's window ends (exclusive) where it starts, which on a fast machine
    // can be the very millisecond these records are written in.
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 1_000;
    for (key, order, intent) in [
        ("around-1", "ord_2", intent_key.clone()),
        ("around-2", "ord_9", Value::Null),
    ] {
        effects[key] = json!({
            "id": format!("re_{key}"), "order_id": order, "amount": "49.50",
            "idempotency_key": key, "intent_key": intent, "created_ms": created_ms, "effects": 1,
        });
    }
    std::fs::write(&state, effects.to_string()).unwrap();

    let report: Value = serving
        .client
        .post(format!("http://{}/v1/admin/reconcile", serving.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"since": "1h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tool = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["tool"] == "refund_order")
        .unwrap();
    assert!(tool["error"].is_null(), "{report}");
    assert!(tool["skipped"].is_null(), "{report}");
    // Five records over three pages of two, and the three intents.
    assert_eq!(tool["records_checked"], 5, "{report}");
    assert_eq!(tool["intents_checked"], 3, "{report}");
    let mut found: Vec<(String, String)> = report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|mismatch| {
            (
                mismatch["kind"].as_str().unwrap().to_owned(),
                mismatch["subject"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("no_intent".to_owned(), "ord_2".to_owned()),
            ("no_intent".to_owned(), "ord_9".to_owned())
        ],
        "{report}"
    );
    let replayed = report["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mismatch| mismatch["subject"] == "ord_2")
        .unwrap();
    assert_eq!(replayed["intent_key"], intent_key, "{report}");
    assert!(
        replayed["detail"]
            .as_str()
            .unwrap()
            .contains("provider key around-1"),
        "{report}"
    );
    assert_eq!(report["critical"], 0, "{report}");
    serving.stop().await;
}

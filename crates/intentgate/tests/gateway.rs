//! The gateway as an operator runs it: the real `intentgate` binary serving
//! `examples/support-agent.yaml`, in front of the real `intentgate mock-provider`, both on
//! loopback ports, talked to over HTTP.

mod support;

use std::sync::Arc;
use std::time::Duration;

use intentgate_test_support::wait_until;
use serde_json::{Value, json};
use support::{
    EXAMPLE_CONFIG, Running, example_config, get_json, intentgate, mock_provider, serve,
    set_faults, with_setting,
};

/// Tool timeouts in the test config: short, so the timeout rows take a second, not ten.
const TOOL_TIMEOUT_MS: u64 = 700;
/// Retries of a call refused because the gateway is at its concurrency limit.
const OVERLOAD_RETRIES_MAX: usize = 200;
/// How long the mock holds a "timeout" answer: well past the tool timeout.
const TIMEOUT_HOLD_MS: u64 = 2_000;

struct Stack {
    mock: Running,
    gateway: Running,
    client: reqwest::Client,
    _folder: tempfile::TempDir,
}

/// The mock provider (quiet) and a gateway in front of it, or in front of `upstream_url`, on
/// the example config with short timeouts.
fn stack_with(upstream_url: Option<&str>) -> Stack {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = example_config(folder.path(), |text| {
        with_setting(&text, "timeout_ms", TOOL_TIMEOUT_MS)
    });
    let ledger = folder.path().join("ledger.db");
    let upstream = upstream_url.unwrap_or(&mock.url).to_owned();
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &upstream)],
    );
    Stack {
        mock,
        gateway,
        client: support::client(),
        _folder: folder,
    }
}

fn stack() -> Stack {
    stack_with(None)
}

impl Stack {
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        support::call(&self.client, &self.gateway.url, tool, arguments).await
    }

    /// A call the way an HTTP client layer makes it: a 503 with Retry-After (the gateway at
    /// its concurrency limit, nothing executed) is retried.
    async fn call_retrying_overload(&self, tool: &str, arguments: Value) -> Value {
        for _ in 0..OVERLOAD_RETRIES_MAX {
            let response = self
                .client
                .post(format!("{}/v1/tools/{tool}/call", self.gateway.url))
                .json(&json!({ "arguments": arguments }))
                .send()
                .await
                .unwrap();
            if response.status().as_u16() == 503 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(response.status().as_u16(), 200);
            return response.json().await.unwrap();
        }
        panic!("the gateway stayed overloaded");
    }

    async fn faults(&self, plan: Value) {
        set_faults(&self.client, &self.mock, Some(TIMEOUT_HOLD_MS), plan).await;
    }

    async fn effects(&self) -> Value {
        get_json(&self.client, format!("{}/admin/effects", self.mock.url)).await
    }
}

fn refund(order: &str, amount: f64) -> Value {
    json!({"order_id": order, "amount": amount, "reason": "requested_by_customer"})
}

#[tokio::test]
async fn every_row_of_the_outcome_table_gives_the_right_status() {
    let stack = stack();
    let rows: Vec<(&str, Value, &str, u64)> = vec![
        ("ok", json!({}), "done", 1),
        ("reject", json!({"reject": 1000}), "rejected", 0),
        (
            "rate_limited",
            json!({"rate_limited": 1000}),
            "not_executed",
            0,
        ),
        (
            "unavailable",
            json!({"unavailable": 1000}),
            "not_executed",
            0,
        ),
        (
            "timeout, committed",
            json!({"timeout": 1000, "commit_when_ambiguous": 1000}),
            "done",
            1,
        ),
        (
            "timeout, not committed",
            json!({"timeout": 1000, "commit_when_ambiguous": 0}),
            "pending_unknown",
            0,
        ),
        (
            "dropped, committed",
            json!({"dropped": 1000, "commit_when_ambiguous": 1000}),
            "done",
            1,
        ),
        (
            "dropped, not committed",
            json!({"dropped": 1000, "commit_when_ambiguous": 0}),
            "pending_unknown",
            0,
        ),
        (
            "5xx, committed",
            json!({"server_error": 1000, "commit_when_ambiguous": 1000}),
            "done",
            1,
        ),
        (
            "5xx, not committed",
            json!({"server_error": 1000, "commit_when_ambiguous": 0}),
            "pending_unknown",
            0,
        ),
    ];
    for (index, (row, plan, expected, effects)) in rows.into_iter().enumerate() {
        stack.faults(plan).await;
        let order = format!("row{index}");
        let outcome = stack.call("refund_order", refund(&order, 10.0)).await;
        assert_eq!(outcome["status"], expected, "{row}: {outcome}");
        let counts = stack.effects().await;
        let made = counts["by_order"][&order].as_u64().unwrap_or(0);
        assert_eq!(made, effects, "{row}: effects at the provider");
        // Every repeat lands on the same answer, and never makes a second effect.
        stack.faults(json!({})).await;
        let again = stack.call("refund_order", refund(&order, 10.0)).await;
        let same = match expected {
            "done" => "already_done",
            "not_executed" => "done",
            other => other,
        };
        assert_eq!(again["status"], same, "{row}, repeated: {again}");
        let after = stack.effects().await["by_order"][&order]
            .as_u64()
            .unwrap_or(0);
        assert!(after <= 1, "{row}: a repeat made a second effect");
    }
}

#[tokio::test]
async fn a_connection_refused_before_sending_is_not_executed() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let stack = stack_with(Some(&dead));
    let outcome = stack.call("refund_order", refund("refused", 10.0)).await;
    assert_eq!(outcome["status"], "not_executed", "{outcome}");
    let read = stack.call("get_order", json!({"order_id": "o1"})).await;
    assert_eq!(read["status"], "not_executed", "{read}");
}

#[tokio::test]
async fn a_409_from_another_attempt_holding_the_key_is_looked_up() {
    let stack = stack();
    // Another attempt is at the provider with the gateway's key, and slow.
    stack
        .faults(json!({"latency_p50_ms": 3000, "latency_p95_ms": 3000, "latency_scale": 1.0}))
        .await;
    let body = json!({"order_id": "o409", "amount": "10.00", "reason": "requested_by_customer", "metadata": {"intent_key": "refund:o409:10.00"}});
    let holder = {
        let client = stack.client.clone();
        let url = format!("{}/v1/refunds", stack.mock.url);
        tokio::spawn(async move {
            client
                .post(url)
                .header("Idempotency-Key", "refund_order:refund:o409:10.00")
                .json(&body)
                .send()
                .await
        })
    };
    // The other attempt's refund is committed at the provider, its answer 3 s away.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            stack.effects().await["by_order"]["o409"] == 1
        })
        .await,
        "the other attempt reached the provider"
    );
    stack.faults(json!({})).await;
    let outcome = stack.call("refund_order", refund("o409", 10.0)).await;
    assert_eq!(
        outcome["status"], "done",
        "the lookup found the other attempt's effect: {outcome}"
    );
    assert_eq!(stack.effects().await["by_order"]["o409"], 1);
    holder.abort();
}

#[tokio::test]
async fn a_storm_of_eighteen_calls_per_intent_with_faults_makes_one_effect_per_intent() {
    let stack = Arc::new(stack());
    stack
        .faults(json!({"reject": 30, "rate_limited": 50, "unavailable": 30, "timeout": 60, "dropped": 40,
                       "server_error": 60, "lookup_failure": 150, "latency_p50_ms": 5, "latency_p95_ms": 80, "seed": 7}))
        .await;
    let mut calls = tokio::task::JoinSet::new();
    for intent in 0..40 {
        for call in 0..18 {
            let stack = stack.clone();
            calls.spawn(async move {
                // Some layers fire together, some a little later.
                tokio::time::sleep(Duration::from_millis((call % 6) as u64 * 40)).await;
                stack
                    .call_retrying_overload("refund_order", refund(&format!("storm{intent}"), 25.0))
                    .await
            });
        }
    }
    let mut statuses = std::collections::BTreeMap::new();
    while let Some(outcome) = calls.join_next().await {
        *statuses
            .entry(outcome.unwrap()["status"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    let counts = stack.effects().await;
    assert_eq!(counts["duplicates"], json!([]), "{counts}");
    for intent in 0..40 {
        let made = counts["by_order"][&format!("storm{intent}")]
            .as_u64()
            .unwrap_or(0);
        assert!(made <= 1, "storm{intent} has {made} effects");
    }
    let total: u64 = statuses.values().sum();
    assert_eq!(total, 40 * 18, "{statuses:?}");
    println!(
        "storm: 40 intents x 18 calls, statuses {statuses:?}, effects {}",
        counts["total"]
    );
}

#[tokio::test]
async fn changed_arguments_under_one_key_are_a_conflict() {
    let stack = stack();
    assert_eq!(
        stack.call("refund_order", refund("c1", 49.0)).await["status"],
        "done"
    );
    let mut changed = refund("c1", 49.0);
    changed["reason"] = json!("damaged");
    let conflict = stack.call("refund_order", changed).await;
    assert_eq!(conflict["status"], "conflict");
    assert_eq!(conflict["differing_fields"], json!(["reason"]));
}

/// Regression: the example's `charge_card` was keyed `charge:{customer_id}:{amount:.2}:{intent_id}`,
/// so a model that retried one charge request with another amount made a new intent and a
/// second charge. Keyed by customer and intent id alone, the changed amount is a conflict.
#[tokio::test]
async fn a_charge_request_retried_with_another_amount_is_a_conflict_not_a_second_charge() {
    let stack = stack();
    let charge = |amount: &str| {
        let body = format!(
            r#"{{"arguments": {{"customer_id": "cus_41", "amount": {amount}, "currency": "usd"}}}}"#
        );
        stack
            .client
            .post(format!("{}/v1/tools/charge_card/call", stack.gateway.url))
            .header("content-type", "application/json")
            .header("Intent-Id", "checkout-41")
            .body(body)
            .send()
    };
    let first: Value = charge("25.00").await.unwrap().json().await.unwrap();
    assert_eq!(first["status"], "done", "{first}");
    let changed: Value = charge("26.00").await.unwrap().json().await.unwrap();
    assert_eq!(changed["status"], "conflict", "{changed}");
    assert_eq!(changed["differing_fields"], json!(["amount"]), "{changed}");
    let charges = get_json(
        &stack.client,
        format!("{}/v1/charges?customer_id=cus_41", stack.mock.url),
    )
    .await;
    assert_eq!(charges["data"].as_array().unwrap().len(), 1, "{charges}");
}

#[tokio::test]
async fn arguments_can_never_change_the_upstream_url() {
    let stack = stack();
    for id in [
        "../admin/stats",
        "a?b=c",
        "x#y",
        "a%2Fb",
        "a/b",
        "%2e%2e",
        "a b",
    ] {
        let outcome = stack.call("get_order", json!({"order_id": id})).await;
        assert_eq!(outcome["status"], "done", "{id:?}: {outcome}");
        assert_eq!(
            outcome["result"]["id"], id,
            "{id:?} reached another URL: {outcome}"
        );
    }
    // A newline reaches the order route intact, where the provider refuses such an id.
    let newline = stack
        .call("get_order", json!({"order_id": "line\nbreak"}))
        .await;
    assert_eq!(newline["status"], "rejected", "{newline}");
    assert_eq!(newline["result"]["error"]["param"], "id", "{newline}");
    // A `..` segment is never sent: no request can be built from it, so the arguments are
    // refused as they are.
    let dots = stack.call("get_order", json!({"order_id": ".."})).await;
    assert_eq!(dots["status"], "invalid_arguments", "{dots}");
    assert!(
        dots["message"]
            .as_str()
            .unwrap()
            .contains("URL parsers remove"),
        "{dots}"
    );
}

#[tokio::test]
async fn malformed_requests_get_problem_json() {
    let stack = stack();
    let response = stack
        .client
        .post(format!(
            "{}/v1/tools/refund_everything/call",
            stack.gateway.url
        ))
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let huge = json!({"arguments": {"order_id": "x".repeat(2 * 1024 * 1024)}});
    let response = stack
        .client
        .post(format!("{}/v1/tools/get_order/call", stack.gateway.url))
        .json(&huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let tools = get_json(&stack.client, format!("{}/v1/tools", stack.gateway.url)).await;
    // Every tool, the client-executed one too.
    let tools = tools["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 15);
    let sdk = tools
        .iter()
        .find(|tool| tool["name"] == "refund_order_sdk")
        .unwrap();
    assert_eq!(sdk["executor"], "client");
    let refund = tools
        .iter()
        .find(|tool| tool["name"] == "refund_order")
        .unwrap();
    assert_eq!(refund["executor"], "gateway");
}

#[test]
fn the_demo_refunds_customers_twice_without_intentgate_and_never_with_it() {
    // As on a fresh machine: no hash key in the environment (the demo makes one up for its
    // throwaway ledger).
    let output = intentgate()
        .env_remove("INTENTGATE_HASH_KEY")
        .args(["demo", "--customers", "150", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&support::success(&output)).unwrap();
    assert!(
        report["naive"]["customers_refunded_twice"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
    assert_eq!(
        report["intentgate"]["customers_refunded_twice"], 0,
        "{report}"
    );
    assert_eq!(report["intentgate"]["extra_refunds"], 0, "{report}");
    // Reconciliation afterwards finds only the intents left unknown, each either at the
    // provider (resolved to done) or not: no duplicate, no bypass, no wrong amount.
    let found = report["intentgate"]["reconciliation"]
        .as_object()
        .unwrap_or_else(|| panic!("no reconciliation in {report}"));
    for kind in found.keys() {
        assert!(
            kind == "unknown_found" || kind == "unknown_missing",
            "{kind}: {report}"
        );
    }
    let unknown: u64 = found.values().map(|count| count.as_u64().unwrap()).sum();
    assert_eq!(
        report["intentgate"]["unknown_after_recovery"], unknown,
        "{report}"
    );
    // The default demo is the mock's own API: nothing of the Stripe mode in its report.
    assert!(report.get("provider").is_none(), "{report}");
    assert!(report["intentgate"].get("amounts").is_none(), "{report}");
}

#[test]
fn the_demo_on_the_stripe_example_refunds_in_cents_and_never_twice_with_intentgate() {
    let output = intentgate()
        .env_remove("INTENTGATE_HASH_KEY")
        .env_remove("STRIPE_SECRET_KEY")
        .env_remove("STRIPE_API_BASE")
        .args([
            "demo",
            "--provider",
            "stripe",
            "--customers",
            "150",
            "--json",
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&support::success(&output)).unwrap();
    assert_eq!(report["provider"], "stripe", "{report}");
    assert!(
        report["naive"]["customers_refunded_twice"]
            .as_u64()
            .unwrap()
            > 0,
        "{report}"
    );
    let gated = &report["intentgate"];
    assert_eq!(gated["customers_refunded_twice"], 0, "{report}");
    assert_eq!(gated["extra_refunds"], 0, "{report}");
    assert!(gated["provider_lookups"].as_u64().unwrap() > 0, "{report}");
    // Every refund at the provider is in cents, the customer's amount: 4900 for 49.00.
    for run in ["naive", "intentgate"] {
        let amounts = &report[run]["amounts"];
        let refunds = amounts["refunds"].as_u64().unwrap();
        assert!(refunds > 0, "{report}");
        assert_eq!(amounts["in_cents_asked"], refunds, "{run}: {report}");
        assert_eq!(report[run]["refunds"], refunds, "{run}: {report}");
    }
    // Reconciliation over Stripe's list (created[gte]/[lt] in seconds, starting_after and
    // has_more, amounts in cents) finds only what the storm left unknown.
    let found = gated["reconciliation"]
        .as_object()
        .unwrap_or_else(|| panic!("no reconciliation in {report}"));
    for kind in found.keys() {
        assert!(
            kind == "unknown_found" || kind == "unknown_missing",
            "{kind}: {report}"
        );
    }
    let unknown: u64 = found.values().map(|count| count.as_u64().unwrap()).sum();
    assert_eq!(gated["unknown_after_recovery"], unknown, "{report}");

    // The table says what it ran against and shows a refund in cents.
    let output = intentgate()
        .env_remove("INTENTGATE_HASH_KEY")
        .args([
            "demo",
            "--provider",
            "stripe",
            "--customers",
            "20",
            "--faults",
            "none",
        ])
        .output()
        .unwrap();
    let table = support::success(&output);
    assert!(
        table.contains("against the mock in Stripe's dialect"),
        "{table}"
    );
    assert!(
        table.contains("intentgate:    20 of 20 refunds hold the amount their customer asked for"),
        "{table}"
    );
    assert!(table.contains("e.g. pi_ord_080"), "{table}");
}

#[test]
fn the_demo_replays_the_runaway_refunds_and_the_budget_holds_every_second_refund() {
    // The incident's section does not depend on the storm before it: the smallest storm.
    let output = intentgate()
        .env_remove("INTENTGATE_HASH_KEY")
        .args(["demo", "--customers", "1", "--faults", "none", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&support::success(&output)).unwrap();
    let incident = &report["incident"];
    assert_eq!(incident["customers"], 212, "{incident}");
    // Without a budget every order is refunded twice, each time under a new intent id.
    let without = &incident["without_budget"];
    assert_eq!(without["refunds"], 424, "{incident}");
    assert_eq!(without["customers_refunded_twice"], 212, "{incident}");
    assert_eq!(without["statuses"], json!({"done": 424}), "{incident}");
    assert_ne!(without["amount_refunded_twice"], "0.00", "{incident}");
    // With the per-order budget each order is refunded once, and each second refund waits
    // for a person, in the ledger as the console lists it.
    let with = &incident["with_budget"];
    assert_eq!(with["refunds"], 212, "{incident}");
    assert_eq!(with["customers_refunded"], 212, "{incident}");
    assert_eq!(with["customers_refunded_twice"], 0, "{incident}");
    assert_eq!(with["amount_refunded_twice"], "0.00", "{incident}");
    assert_eq!(
        with["statuses"],
        json!({"done": 212, "awaiting_approval": 212}),
        "{incident}"
    );
    assert_eq!(incident["held_back"], 212, "{incident}");
    assert_eq!(
        with["awaiting_approval"], incident["held_back"],
        "{incident}"
    );
}

#[test]
fn config_check_says_which_line_and_what_to_change() {
    let folder = tempfile::tempdir().unwrap();
    let example = support::example();
    let broken = example.replace(
        "key: \"refund:{order_id}:{amount:.2}\"",
        "key: \"refund:{tool_call_id}\"",
    );
    assert_ne!(broken, example);
    let path = folder.path().join("broken.yaml");
    std::fs::write(&path, &broken).unwrap();
    let line = broken
        .lines()
        .position(|line| line.contains("refund:{tool_call_id}"))
        .unwrap()
        + 1;
    let output = intentgate()
        .args(["config", "check", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("broken.yaml:{line}:")), "{stderr}");
    assert!(
        stderr.contains("tool_call_id") && stderr.contains("fix:"),
        "{stderr}"
    );

    let good = intentgate()
        .args(["config", "check", EXAMPLE_CONFIG])
        .output()
        .unwrap();
    assert!(good.status.success());
    assert!(
        String::from_utf8_lossy(&good.stdout)
            .contains("15 tools (9 read, 2 idempotent, 4 side_effect, 1 executed by the caller's code through the intent API)")
    );
    let schema = intentgate().args(["config", "schema"]).output().unwrap();
    let schema: Value = serde_json::from_slice(&schema.stdout).unwrap();
    assert!(schema["properties"]["tools"].is_object());
}

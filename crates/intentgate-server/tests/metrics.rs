//! `GET /metrics` and `GET /readyz` through a real server on a loopback port, with a real
//! SQLite ledger and the in-process fake provider as the upstream.

mod common;

use std::time::Duration;

use common::{Server, refund_tool};
use intentgate_mock::{FaultPlan, Scripted, Shape};
use intentgate_server::ServerOptions;
use intentgate_test_support::get_order_tool;
use intentgate_test_support::http::call_tool;
use intentgate_test_support::metrics::{sample, samples};
use serde_json::{Value, json};

const KEY: &str = "refund:8812:49.00";

async fn start() -> Server {
    common::start(
        vec![refund_tool(), get_order_tool(Duration::from_secs(5))],
        FaultPlan::none(),
        ServerOptions::default(),
    )
    .await
}

impl Server {
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        call_tool(&self.client, &self.base, tool, arguments).await
    }

    /// The scraped text, after checking the status and content type.
    async fn scrape(&self) -> String {
        let response = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(
            response.headers()["content-type"],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        response.text().await.unwrap()
    }

    async fn get(&self, path: &str) -> (u16, String, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        (status, content_type, response.json().await.unwrap())
    }
}

#[tokio::test]
async fn metrics_count_a_refund_its_repeat_and_a_read_exactly() {
    let server = start().await;
    let first = server
        .call("refund_order", json!({"order_id": "8812", "amount": 49}))
        .await;
    assert_eq!(first["status"], "done");
    let again = server
        .call("refund_order", json!({"order_id": "8812", "amount": 49}))
        .await;
    assert_eq!(again["status"], "already_done");
    let read = server.call("get_order", json!({"order_id": "8812"})).await;
    assert_eq!(read["status"], "done");

    let text = server.scrape().await;
    assert!(
        text.contains("# TYPE intentgate_calls_total counter\n"),
        "{text}"
    );
    let mut calls = samples(&text, "intentgate_calls_total");
    calls.sort_unstable();
    assert_eq!(
        calls,
        [
            r#"intentgate_calls_total{tool="get_order",status="done"} 1"#,
            r#"intentgate_calls_total{tool="refund_order",status="already_done"} 1"#,
            r#"intentgate_calls_total{tool="refund_order",status="done"} 1"#,
        ],
        "{text}"
    );
    assert_eq!(
        samples(&text, "intentgate_repeated_calls_total"),
        [r#"intentgate_repeated_calls_total{tool="refund_order"} 1"#],
        "{text}"
    );
    // One request each to the provider; the repeat was answered from the ledger.
    for tool in ["refund_order", "get_order"] {
        let series = format!(
            r#"intentgate_upstream_request_duration_seconds_count{{tool="{tool}",request="execute"}}"#
        );
        assert_eq!(sample(&text, &series), Some(1.0), "{series}\n{text}");
    }
    assert!(
        !text.contains(r#"request="lookup""#),
        "nothing was ambiguous: {text}"
    );
    // The first call created its intent (the key read and the intent inserted in one trip to
    // the writer); its repeat, not yet kept in memory, found it the same way and wrote
    // nothing. Only the first finished an attempt; nothing read or began apart.
    for operation in ["get", "begin"] {
        let series = format!(
            r#"intentgate_ledger_operation_duration_seconds_count{{operation="{operation}"}}"#
        );
        assert_eq!(sample::<f64>(&text, &series), None, "{series}\n{text}");
    }
    for (operation, count) in [("create", 2.0), ("finish", 1.0)] {
        let series = format!(
            r#"intentgate_ledger_operation_duration_seconds_count{{operation="{operation}"}}"#
        );
        assert_eq!(sample(&text, &series), Some(count), "{series}\n{text}");
        let infinite = format!(
            r#"intentgate_ledger_operation_duration_seconds_bucket{{operation="{operation}",le="+Inf"}}"#
        );
        assert_eq!(sample(&text, &infinite), Some(count), "{infinite}\n{text}");
    }
    assert!(samples(&text, "intentgate_lease_waits_total").is_empty());
    assert!(samples(&text, "intentgate_intents_unknown_total").is_empty());
    assert_eq!(
        sample(&text, "intentgate_repeated_call_events_dropped_total"),
        Some(0.0)
    );
    // Refreshed from the ledger by the scrape; reads have no intents.
    assert_eq!(
        samples(&text, "intentgate_intents"),
        [r#"intentgate_intents{tool="refund_order",status="done"} 1"#],
        "{text}"
    );
    assert_eq!(server.provider.effect_count(KEY), 1);
    server.stop().await;
}

#[tokio::test]
async fn an_ambiguous_answer_the_lookup_cannot_find_counts_an_unknown_intent_and_a_lookup() {
    let server = start().await;
    server.provider.script([Scripted {
        shape: Shape::Dropped,
        commit: false,
    }]);
    let outcome = server
        .call("refund_order", json!({"order_id": "8812", "amount": 49}))
        .await;
    assert_eq!(outcome["status"], "pending_unknown");
    let text = server.scrape().await;
    assert_eq!(
        sample(
            &text,
            r#"intentgate_calls_total{tool="refund_order",status="pending_unknown"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_intents_unknown_total{tool="refund_order"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_upstream_request_duration_seconds_count{tool="refund_order",request="lookup"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"intentgate_intents{tool="refund_order",status="unknown"}"#
        ),
        Some(1.0)
    );
    server.stop().await;
}

#[tokio::test]
async fn readyz_is_ready_while_the_ledger_answers() {
    let server = start().await;
    let (status, content_type, body) = server.get("/readyz").await;
    assert_eq!(
        (status, content_type.as_str(), body),
        (200, "application/json", json!({"ready": true}))
    );
    server.stop().await;
}

#[tokio::test]
async fn readyz_is_503_when_the_ledger_fails_its_read() {
    let server = start().await;
    // Break the ledger behind the server's back: its read of the tool flags now fails.
    let connection = rusqlite::Connection::open(&server.ledger_path).unwrap();
    connection.execute_batch("DROP TABLE tool_flags").unwrap();
    let (status, content_type, body) = server.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(body["type"], "urn:intentgate:problem:ledger-unreachable");
    assert_eq!(body["title"], "The intent ledger is unreachable");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("ledger") && !detail.contains("tool_flags"),
        "says what is wrong without the internals: {detail}"
    );
    server.stop().await;
}

#[tokio::test]
async fn readyz_is_503_while_the_ledger_reads_but_fails_to_record_calls() {
    let server = start().await;
    // Writes of new intents fail while every read still works, as on a full disk: both the
    // narrow row a new intent's begin writes and the wide row it is moved to.
    let connection = rusqlite::Connection::open(&server.ledger_path).unwrap();
    connection
        .execute_batch(
            "CREATE TRIGGER no_room BEFORE INSERT ON intents_begun \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;
             CREATE TRIGGER no_room_wide BEFORE INSERT ON intents \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
        )
        .unwrap();
    let refused = server
        .client
        .post(format!("{}/v1/tools/refund_order/call", server.base))
        .json(&json!({"arguments": {"order_id": "8812", "amount": 49}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    let (status, content_type, body) = server.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(content_type, "application/problem+json");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("failed to record a call") && detail.contains("nothing executed"),
        "says why the gateway can't serve: {detail}"
    );
    let text = server.scrape().await;
    assert_eq!(
        sample(
            &text,
            r#"intentgate_calls_total{tool="refund_order",status="ledger_unavailable"}"#
        ),
        Some(1.0)
    );

    // Room again: the next call is recorded, and the gateway is ready at once.
    connection
        .execute_batch("DROP TRIGGER no_room; DROP TRIGGER no_room_wide;")
        .unwrap();
    let served = server
        .call("refund_order", json!({"order_id": "8812", "amount": 49}))
        .await;
    assert_eq!(served["status"], "done");
    let (status, _, body) = server.get("/readyz").await;
    assert_eq!((status, body), (200, json!({"ready": true})));
    server.stop().await;
}

/// Regression: a call begun before the ledger failed, answered `done` after it, made
/// `/readyz` ready again while every new call was still refused. A failing fsync fails the
/// commits that sync (each `begin`) while an outcome, committed without one, is written: the
/// probe saw ready through a fault suite's three seconds of failed fsyncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_stays_503_when_only_a_call_begun_before_the_ledger_failed_is_served() {
    let provider_latency = Duration::from_millis(600);
    let server = common::start(
        vec![refund_tool(), get_order_tool(Duration::from_secs(5))],
        FaultPlan {
            latency_min: provider_latency,
            latency_max: provider_latency,
            ..FaultPlan::none()
        },
        ServerOptions::default(),
    )
    .await;
    let (client, base) = (server.client.clone(), server.base.clone());
    let begun_before = tokio::spawn(async move {
        call_tool(
            &client,
            &base,
            "refund_order",
            json!({"order_id": "8812", "amount": 49}),
        )
        .await
    });
    // Its `begin` is written and its request is at the provider; then new intents can't be
    // written.
    tokio::time::sleep(provider_latency / 3).await;
    let connection = rusqlite::Connection::open(&server.ledger_path).unwrap();
    connection
        .execute_batch(
            "CREATE TRIGGER no_room BEFORE INSERT ON intents_begun \
             BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END;",
        )
        .unwrap();
    let refused = server
        .client
        .post(format!("{}/v1/tools/refund_order/call", server.base))
        .json(&json!({"arguments": {"order_id": "9913", "amount": 12}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    let served = begun_before.await.unwrap();
    assert_eq!(served["status"], "done", "{served}");
    let (status, _, body) = server.get("/readyz").await;
    assert_eq!(
        status, 503,
        "a call begun before the failure made /readyz ready: {body}"
    );

    // A call begun after the failure is served: ready again.
    connection.execute_batch("DROP TRIGGER no_room;").unwrap();
    let again = server
        .call("refund_order", json!({"order_id": "9913", "amount": 12}))
        .await;
    assert_eq!(again["status"], "done");
    let (status, _, body) = server.get("/readyz").await;
    assert_eq!((status, body), (200, json!({"ready": true})));
    server.stop().await;
}

//! The `Idempotency-Key` header of `POST /v1/tools/{name}/call`, through a real server on a
//! loopback port with a real SQLite ledger and the in-process fake provider: the header's
//! value is the intent key, another payload under it is a 422, and a tool may require it.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Server, refund_tool};
use intentgate_core::{Scopes, Tenant};
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_server::auth::{ActFor, ApiKey, AuthOptions, Authenticator};
use intentgate_test_support::get_order_tool;
use serde_json::{Value, json};

/// A status, a content type and a JSON body.
type Answer = (u16, String, Value);

impl Server {
    /// A call of `tool` with `arguments`, the header `Idempotency-Key: key` when given, and
    /// `Authorization: Bearer <api_key>` when given.
    async fn call_keyed(
        &self,
        tool: &str,
        arguments: Value,
        key: Option<&str>,
        api_key: Option<&str>,
    ) -> Answer {
        let mut request = self
            .client
            .post(format!("{}/v1/tools/{tool}/call", self.base))
            .header("content-type", "application/json")
            .body(json!({ "arguments": arguments }).to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        if let Some(api_key) = api_key {
            request = request.header("authorization", format!("Bearer {api_key}"));
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (
            status,
            content_type,
            response.json().await.unwrap_or(Value::Null),
        )
    }

    async fn refund(&self, order: &str, amount: u32, key: Option<&str>) -> Answer {
        let arguments = json!({"order_id": order, "amount": amount});
        self.call_keyed("refund_order", arguments, key, None).await
    }

    /// The intent of `refund_order` under `key`, as `GET /v1/intents` shows it (404: none).
    async fn refund_intent(&self, key: &str) -> (u16, Value) {
        let url = format!("{}/v1/intents/refund_order/{key}", self.base);
        let response = self.client.get(url).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

impl Server {
    /// The status of a refund call that sends one `Idempotency-Key` header per value, each
    /// as raw bytes (what a header builder from text would refuse to send).
    async fn refund_with_raw_keys(&self, values: &[&[u8]]) -> u16 {
        let mut request = self
            .client
            .post(format!("{}/v1/tools/refund_order/call", self.base))
            .header("content-type", "application/json")
            .body(json!({"arguments": {"order_id": "3", "amount": 1}}).to_string());
        for value in values {
            let value = reqwest::header::HeaderValue::from_bytes(value).unwrap();
            request = request.header("idempotency-key", value);
        }
        request.send().await.unwrap().status().as_u16()
    }
}

async fn start(plan: FaultPlan, options: ServerOptions) -> Server {
    common::start(
        vec![refund_tool(), get_order_tool(Duration::from_secs(5))],
        plan,
        options,
    )
    .await
}

fn assert_problem(answer: &Answer, status: u16, kind: &str, says: &[&str]) {
    let (got_status, content_type, body) = answer;
    assert_eq!(*got_status, status, "{body}");
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(body["type"], format!("urn:intentgate:problem:{kind}"));
    assert_eq!(body["status"], status);
    let detail = body["detail"].as_str().unwrap();
    for part in says {
        assert!(detail.contains(part), "detail lacks `{part}`: {detail}");
    }
}

#[tokio::test]
async fn the_header_is_the_intent_key_so_repeats_under_it_are_one_intent() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, first) = server.refund("8812", 49, Some("\"order-8812-a\"")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "done");
    assert_eq!(first["intent_key"], "order-8812-a");
    // The bare form names the same key as the draft's quoted string.
    let (_, _, repeat) = server.refund("8812", 49, Some("order-8812-a")).await;
    assert_eq!(repeat["status"], "already_done");
    assert_eq!(repeat["external_id"], first["external_id"]);
    assert_eq!(server.provider.effect_count("order-8812-a"), 1);

    // The intent is stored under the header's key, not the template's.
    let (status, intent) = server.refund_intent("order-8812-a").await;
    assert_eq!((status, intent["status"].as_str()), (200, Some("done")));
    assert_eq!(server.refund_intent("refund:8812:49.00").await.0, 404);

    // The header wins over the template: the same arguments under another key are another
    // intent (the caller said it is another operation), and without the header the
    // template's key is used.
    let (_, _, other) = server.refund("8812", 49, Some("order-8812-b")).await;
    assert_eq!(
        (other["status"].as_str(), other["intent_key"].as_str()),
        (Some("done"), Some("order-8812-b"))
    );
    let (_, _, templated) = server.refund("8812", 49, None).await;
    assert_eq!(
        (
            templated["status"].as_str(),
            templated["intent_key"].as_str()
        ),
        (Some("done"), Some("refund:8812:49.00"))
    );
    assert_eq!(server.provider.effects().len(), 3);
    server.stop().await;
}

/// Two refunds with one key and amounts 5 and 6 both executed while the header was ignored.
#[tokio::test]
async fn another_payload_under_one_key_is_422_and_nothing_executes() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, first) = server.refund("8812", 5, Some("refund-once")).await;
    assert_eq!((status, first["status"].as_str()), (200, Some("done")));

    let answer = server.refund("8812", 6, Some("refund-once")).await;
    assert_problem(
        &answer,
        422,
        "idempotency-key-reused",
        &["refund-once", "`amount`", "nothing was executed"],
    );
    assert_eq!(
        answer.2["title"],
        "Idempotency-Key reused with another payload"
    );
    assert_eq!(server.provider.effects().len(), 1);
    let (_, intent) = server.refund_intent("refund-once").await;
    assert_eq!(intent["arguments"]["amount"], 5);

    server.stop().await;
}

#[tokio::test]
async fn one_key_value_in_two_tenants_is_two_intents() {
    let api_key = |name: &str, secret: &str, tenant: &str| ApiKey {
        name: name.to_owned(),
        digest: ApiKey::parse_digest(&ApiKey::digest_hex(secret)).unwrap(),
        tenant: Tenant::parse(tenant).unwrap(),
        scopes: Scopes::all(),
        act_for: ActFor::Own,
    };
    let authenticator = Authenticator::new(AuthOptions::Methods {
        api_keys: vec![
            api_key("acme-agent", "key-of-acme", "acme"),
            api_key("globex-agent", "key-of-globex", "globex"),
        ],
        jwt: None,
        trusted_proxy: None,
    })
    .unwrap();
    let options = ServerOptions {
        authenticator: Arc::new(authenticator),
        ..ServerOptions::default()
    };
    let server = start(FaultPlan::none(), options).await;
    let call = |amount: u32, api_key: &'static str| {
        let arguments = json!({"order_id": "1", "amount": amount});
        server.call_keyed("refund_order", arguments, Some("shared-key"), Some(api_key))
    };
    let (status, _, acme) = call(5, "key-of-acme").await;
    assert_eq!((status, acme["status"].as_str()), (200, Some("done")));
    // Another tenant's key of the same value is not a repeat, nor a conflict.
    let (status, _, globex) = call(6, "key-of-globex").await;
    assert_eq!((status, globex["status"].as_str()), (200, Some("done")));
    assert_ne!(acme["external_id"], globex["external_id"]);
    // Each tenant's repeat is answered from its own intent.
    let (_, _, acme_repeat) = call(5, "key-of-acme").await;
    assert_eq!(acme_repeat["status"], "already_done");
    assert_eq!(acme_repeat["external_id"], acme["external_id"]);
    assert_problem(
        &call(5, "key-of-globex").await,
        422,
        "idempotency-key-reused",
        &["`amount`"],
    );
    assert_eq!(server.provider.effect_count("shared-key"), 2);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_calls_with_one_key_wait_for_the_first_and_share_its_answer() {
    // Every answer takes 300 ms, so the calls overlap: all but one find the intent
    // `in_flight` under another's lease and wait for it.
    let plan = FaultPlan::slow(Duration::from_millis(300));
    let server = Arc::new(start(plan, ServerOptions::default()).await);
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.refund("77", 12, Some("\"concurrent-1\"")).await })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap());
    }
    let external_id = &answers[0].2["external_id"];
    assert!(external_id.is_string(), "{}", answers[0].2);
    for (status, _, answer) in &answers {
        assert_eq!(*status, 200, "{answer}");
        assert!(
            matches!(answer["status"].as_str(), Some("done" | "already_done")),
            "a waiting call got {answer}"
        );
        assert_eq!(answer["intent_key"], "concurrent-1");
        assert_eq!(&answer["external_id"], external_id);
    }
    assert_eq!(server.provider.effect_count("concurrent-1"), 1);
    assert_eq!(server.provider.effects().len(), 1);
}

#[tokio::test]
async fn a_tool_that_requires_the_header_refuses_a_call_without_it() {
    let options = ServerOptions {
        idempotency_key_required: BTreeSet::from(["refund_order".to_owned()]),
        ..ServerOptions::default()
    };
    let server = start(FaultPlan::none(), options).await;
    let answer = server.refund("5", 10, None).await;
    assert_problem(
        &answer,
        400,
        "idempotency-key-required",
        &["refund_order", "Idempotency-Key", "nothing was recorded"],
    );
    assert_eq!(server.provider.requests(), 0);
    assert_eq!(server.refund_intent("refund:5:10.00").await.0, 404);

    let (status, _, done) = server.refund("5", 10, Some("k-5")).await;
    assert_eq!((status, done["status"].as_str()), (200, Some("done")));
    server.stop().await;
}

#[tokio::test]
async fn a_malformed_key_is_400_saying_what_is_wrong_and_nothing_runs() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let too_long = "k".repeat(intentgate_core::limits::INTENT_KEY_LENGTH_MAX + 1);
    let cases = [
        ("\"\"", "empty"),
        ("\"unclosed", "never closes"),
        ("\"k\";a=1", "after its closing quote"),
        ("two words", "whitespace"),
        (too_long.as_str(), "the limit is"),
    ];
    for (value, says) in cases {
        let answer = server.refund("3", 1, Some(value)).await;
        assert_problem(&answer, 400, "bad-idempotency-key", &[says, "nothing was"]);
    }
    // Bytes beyond ASCII are no RFC 8941 string either.
    assert_eq!(
        server.refund_with_raw_keys(&["\"clé\"".as_bytes()]).await,
        400
    );
    // Two headers are two keys: which one would be meant is not known.
    assert_eq!(server.refund_with_raw_keys(&[b"a", b"b"]).await, 400);
    // A read refuses a malformed header too: the client's mistake is worth telling.
    let answer = server
        .call_keyed("get_order", json!({"order_id": "3"}), Some("\"x"), None)
        .await;
    assert_problem(&answer, 400, "bad-idempotency-key", &["never closes"]);
    assert_eq!(server.provider.requests(), 0);
    server.stop().await;
}

#[tokio::test]
async fn a_read_ignores_a_well_formed_key_and_runs_every_time() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    for _ in 0..2 {
        let (status, _, answer) = server
            .call_keyed("get_order", json!({"order_id": "3"}), Some("read-1"), None)
            .await;
        assert_eq!(status, 200, "{answer}");
        assert!(
            answer.get("intent_key").is_none_or(Value::is_null),
            "{answer}"
        );
    }
    assert_eq!(server.provider.requests(), 2);
    server.stop().await;
}

//! The `Idempotency-Key` header of `POST /v1/tools/{name}/call`, through a real server on a
//! loopback port with a real SQLite ledger and the in-process fake provider: the header
//! never replaces the tool's business key (one refund under two keys is one refund, and a
//! key can't reach another tenant's intent), another payload under one key is a 422, a key
//! that uses `{intent_id}` takes the header as its intent id, and a tool may require it.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Server, refund_tool};
use intentgate_core::{KeyTemplate, Scopes, Tenant, ToolDefinition};
use intentgate_mock::{FaultPlan, Scripted, Shape};
use intentgate_server::ServerOptions;
use intentgate_server::auth::{ActFor, ApiKey, AuthOptions, Authenticator};
use intentgate_test_support::get_order_tool;
use intentgate_test_support::http::content_type;
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
        let content_type = content_type(&response);
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
        self.refund_intent_as(key, None).await
    }

    /// [`Server::refund_intent`] as the holder of `api_key`, when given.
    async fn refund_intent_as(&self, key: &str, api_key: Option<&str>) -> (u16, Value) {
        let url = format!("{}/v1/intents/refund_order/{key}", self.base);
        let mut request = self.client.get(url);
        if let Some(api_key) = api_key {
            request = request.header("authorization", format!("Bearer {api_key}"));
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

/// Server options whose API keys are `key-of-<tenant>`, one per tenant, with every scope.
fn tenants(names: &[&str]) -> ServerOptions {
    let api_keys = names
        .iter()
        .map(|tenant| ApiKey {
            name: format!("{tenant}-agent"),
            digest: ApiKey::parse_digest(&ApiKey::digest_hex(&format!("key-of-{tenant}"))).unwrap(),
            tenant: Tenant::parse(tenant).unwrap(),
            scopes: Scopes::all(),
            act_for: ActFor::Own,
        })
        .collect();
    let authenticator = Authenticator::new(AuthOptions::Methods {
        api_keys,
        jwt: None,
        trusted_proxy: None,
    })
    .unwrap();
    ServerOptions {
        authenticator: Arc::new(authenticator),
        ..ServerOptions::default()
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
    start_with(refund_tool(), plan, options).await
}

/// A server of `refund` (named `refund_order`) and `get_order`.
async fn start_with(refund: ToolDefinition, plan: FaultPlan, options: ServerOptions) -> Server {
    common::start(
        vec![refund, get_order_tool(Duration::from_secs(5))],
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

/// The reported attack: tenant B sent `Idempotency-Key: <tenant A's business key text>` on a
/// 0.01 refund of its own order. The header became B's intent key, so the provider recorded
/// B's refund under A's key text, and A's later lookup by that key found B's refund: A's
/// intent was settled by another tenant's record. The header names nothing of A's now.
#[tokio::test]
async fn a_header_naming_another_tenants_business_key_reaches_nothing_of_that_tenant() {
    const VICTIM: &str = "key-of-tenant-a";
    const ATTACKER: &str = "key-of-tenant-b";
    const VICTIMS_KEY: &str = "refund:victim-546055:50.00";
    let server = start(FaultPlan::none(), tenants(&["tenant-a", "tenant-b"])).await;
    let attack = json!({"order_id": "b-order-1", "amount": 0.01});
    let (status, _, attacked) = server
        .call_keyed(
            "refund_order",
            attack.clone(),
            Some(VICTIMS_KEY),
            Some(ATTACKER),
        )
        .await;
    assert_eq!(status, 200, "{attacked}");
    assert_eq!(
        (attacked["status"].as_str(), attacked["intent_key"].as_str()),
        (Some("done"), Some("refund:b-order-1:0.01")),
        "B's refund is keyed by its own business key"
    );
    // Nothing carries A's key text: not the provider's records, not either tenant's ledger.
    assert_eq!(server.provider.effect_count(VICTIMS_KEY), 0);
    for api_key in [VICTIM, ATTACKER] {
        let (status, intent) = server.refund_intent_as(VICTIMS_KEY, Some(api_key)).await;
        assert_eq!(status, 404, "{api_key}: {intent}");
    }

    // A's own refund, whose answer is lost after the provider committed it: the lookup by
    // A's intent finds A's refund, and it executed once.
    server.provider.script([Scripted {
        shape: Shape::Dropped,
        commit: true,
    }]);
    server.provider.script_lookups([true]);
    let own = json!({"order_id": "victim-546055", "amount": 50});
    let (status, _, refunded) = server
        .call_keyed("refund_order", own.clone(), None, Some(VICTIM))
        .await;
    assert_eq!(status, 200, "{refunded}");
    assert_eq!(refunded["status"], "done", "{refunded}");
    assert_eq!(refunded["intent_key"], VICTIMS_KEY);
    let effects = server.provider.effects();
    let victims: Vec<_> = effects
        .iter()
        .filter(|effect| effect.arguments["order_id"] == "victim-546055")
        .collect();
    assert_eq!(victims.len(), 1, "{effects:?}");
    assert_eq!(
        refunded["external_id"].as_str(),
        Some(victims[0].id.as_str())
    );
    assert_eq!(server.provider.effect_count(VICTIMS_KEY), 1);
    assert_eq!(effects.len(), 2);
    let (status, intent) = server.refund_intent_as(VICTIMS_KEY, Some(VICTIM)).await;
    assert_eq!((status, intent["status"].as_str()), (200, Some("done")));

    // Each tenant's repeat is answered from its own intent.
    let (_, _, again) = server
        .call_keyed("refund_order", attack, Some(VICTIMS_KEY), Some(ATTACKER))
        .await;
    assert_eq!(again["status"], "already_done");
    assert_eq!(again["external_id"], attacked["external_id"]);
    let (_, _, again) = server
        .call_keyed("refund_order", own, None, Some(VICTIM))
        .await;
    assert_eq!(again["status"], "already_done");
    assert_eq!(again["external_id"], refunded["external_id"]);
    assert_eq!(server.provider.effects().len(), 2);
    server.stop().await;
}

/// One refund sent under two header values was two intents, and two refunds.
#[tokio::test]
async fn one_refund_under_two_header_values_is_one_intent_and_one_effect() {
    let server = start(FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, first) = server.refund("8812", 49, Some("\"order-8812-a\"")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "done");
    assert_eq!(first["intent_key"], "refund:8812:49.00");
    // The bare form names the same key as the draft's quoted string; a second key, or none,
    // is the same business intent.
    for key in [Some("order-8812-a"), Some("order-8812-b"), None] {
        let (status, _, repeat) = server.refund("8812", 49, key).await;
        assert_eq!(status, 200, "{key:?}: {repeat}");
        assert_eq!(repeat["status"], "already_done", "{key:?}");
        assert_eq!(repeat["external_id"], first["external_id"]);
        assert_eq!(repeat["intent_key"], "refund:8812:49.00");
    }
    assert_eq!(server.provider.effects().len(), 1);
    assert_eq!(server.provider.effect_count("refund:8812:49.00"), 1);

    // The intent is stored under the business key only.
    let (status, intent) = server.refund_intent("refund:8812:49.00").await;
    assert_eq!((status, intent["status"].as_str()), (200, Some("done")));
    for key in ["order-8812-a", "order-8812-b"] {
        assert_eq!(server.refund_intent(key).await.0, 404, "{key}");
    }
    // Both header values are bound to it: another amount under either is refused.
    for key in ["order-8812-a", "order-8812-b"] {
        let answer = server.refund("8812", 50, Some(key)).await;
        assert_problem(&answer, 422, "idempotency-key-reused", &[key, "`amount`"]);
    }
    assert_eq!(server.provider.effects().len(), 1);
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
        &[
            "refund-once",
            "intent `refund:8812:5.00`",
            "these arguments name intent `refund:8812:6.00`",
            "`amount`",
            "nothing was executed",
        ],
    );
    assert_eq!(
        answer.2["title"],
        "Idempotency-Key reused with another payload"
    );
    assert_eq!(server.provider.effects().len(), 1);
    let (_, intent) = server.refund_intent("refund:8812:5.00").await;
    assert_eq!(intent["arguments"]["amount"], 5);
    assert_eq!(server.refund_intent("refund:8812:6.00").await.0, 404);
    // Without the header the other amount is another refund, as it always was.
    let (_, _, other) = server.refund("8812", 6, None).await;
    assert_eq!(other["status"], "done");
    server.stop().await;
}

#[tokio::test]
async fn one_key_value_in_two_tenants_is_compared_only_within_each() {
    let server = start(FaultPlan::none(), tenants(&["acme", "globex"])).await;
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
    assert_eq!(server.provider.effect_count("refund:1:5.00"), 1);
    assert_eq!(server.provider.effect_count("refund:1:6.00"), 1);
    assert_eq!(server.provider.effects().len(), 2);
    server.stop().await;
}

#[tokio::test]
async fn concurrent_calls_under_one_or_two_keys_wait_for_the_first_and_share_its_answer() {
    // Every answer takes 300 ms, so the calls overlap: all but one find the intent
    // `in_flight` under another's lease and wait for it.
    let plan = FaultPlan::slow(Duration::from_millis(300));
    let server = Arc::new(start(plan, ServerOptions::default()).await);
    let calls: Vec<_> = ["\"concurrent-1\"", "\"concurrent-2\""]
        .into_iter()
        .cycle()
        .take(4)
        .map(|key| {
            let server = server.clone();
            tokio::spawn(async move { server.refund("77", 12, Some(key)).await })
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
        assert_eq!(answer["intent_key"], "refund:77:12.00");
        assert_eq!(&answer["external_id"], external_id);
    }
    assert_eq!(server.provider.effect_count("refund:77:12.00"), 1);
    assert_eq!(server.provider.effects().len(), 1);
}

/// A key that uses `{intent_id}`: the header is the caller-chosen intent id, so the key keeps
/// the template's shape; an `Intent-Id` that agrees is the same intent, one that disagrees or
/// a header longer than an intent id is a 400, and nothing runs.
#[tokio::test]
async fn a_key_that_uses_an_intent_id_takes_the_header_as_its_intent_id() {
    let mut charge: ToolDefinition = refund_tool();
    charge.key = Some(KeyTemplate::parse("refund:{order_id}:{amount:.2}:{intent_id}").unwrap());
    let server = start_with(charge, FaultPlan::none(), ServerOptions::default()).await;
    let (status, _, first) = server.refund("9", 10, Some("op-1")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (first["status"].as_str(), first["intent_key"].as_str()),
        (Some("done"), Some("refund:9:10.00:op-1"))
    );
    let with_intent_id = |intent_id: &str, key: Option<&str>| {
        let mut request = server
            .client
            .post(format!("{}/v1/tools/refund_order/call", server.base))
            .header("content-type", "application/json")
            .header("intent-id", intent_id)
            .body(json!({"arguments": {"order_id": "9", "amount": 10}}).to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let content_type = content_type(&response);
            (
                status,
                content_type,
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    // The same id as an Intent-Id, alone or beside the header, is the same intent.
    for key in [None, Some("op-1")] {
        let (status, _, repeat) = with_intent_id("op-1", key).await;
        assert_eq!(
            (status, repeat["status"].as_str()),
            (200, Some("already_done")),
            "{repeat}"
        );
    }
    // Another header value is another intent id: the application said it is another refund.
    let (_, _, second) = server.refund("9", 10, Some("op-2")).await;
    assert_eq!(
        (second["status"].as_str(), second["intent_key"].as_str()),
        (Some("done"), Some("refund:9:10.00:op-2"))
    );
    // Another amount under the header would be another key of the template: still a 422.
    let answer = server.refund("9", 11, Some("op-1")).await;
    assert_problem(
        &answer,
        422,
        "idempotency-key-reused",
        &["op-1", "`amount`"],
    );
    // Disagreeing ids, and a header longer than an intent id may be.
    let disagreeing = with_intent_id("op-3", Some("op-4")).await;
    assert_problem(
        &disagreeing,
        400,
        "intent-id-mismatch",
        &[
            "Intent-Id `op-3`",
            "Idempotency-Key `op-4`",
            "nothing was recorded",
        ],
    );
    let too_long = "k".repeat(intentgate_core::limits::INTENT_ID_LENGTH_MAX + 1);
    let answer = server.refund("9", 10, Some(&too_long)).await;
    assert_problem(
        &answer,
        400,
        "bad-idempotency-key",
        &["{intent_id}", "at most 256"],
    );
    assert_eq!(server.provider.effects().len(), 2);
    for key in [
        "refund:9:11.00:op-1",
        "refund:9:10.00:op-3",
        "refund:9:10.00:op-4",
    ] {
        assert_eq!(server.refund_intent(key).await.0, 404, "{key}");
    }
    server.stop().await;
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
    let too_long = "k".repeat(intentgate_core::limits::CALLER_KEY_LENGTH_MAX + 1);
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

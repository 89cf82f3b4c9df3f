//! The check behind "an error means unknown" against a provider this project did not shape:
//! the real `intentgate serve` of the example config, with two tenants' API keys, in front of
//! a careless payments API written here. Its lists ignore every filter (they answer every
//! record of every customer), it holds other tenants' records and a support agent's refund
//! made around the gateway, and it drops the answer of a chosen request without acting on
//! it. Each test names what broke: a lookup that settled an intent with somebody else's
//! effect, so the customer was told "done" while the provider held nothing for them.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use reqwest::Client;
use serde_json::{Value, json};
use support::{Running, client, example_config, serve, until, with_api_keys, with_setting};

/// Tenant `north`'s key: the victim.
const KEY_NORTH: &str = "igk_north_0123456789abcdef0123456789abcdef";
/// Tenant `south`'s key: the attacker, or just another customer of the same gateway.
const KEY_SOUTH: &str = "igk_south_0123456789abcdef0123456789abcdef";

/// What the careless provider holds and saw.
#[derive(Default)]
struct Books {
    /// Every record, of every kind (`refunds`, `charges`), oldest first.
    records: Vec<(String, Value)>,
    /// Orders or customers whose next create is answered 500 without acting.
    drop_next: HashSet<String>,
    /// The query string of every list request, by kind.
    lists: Vec<(String, String)>,
}

#[derive(Clone, Default)]
struct Careless(Arc<Mutex<Books>>);

impl Careless {
    fn plant(&self, kind: &str, record: Value) {
        self.0
            .lock()
            .unwrap()
            .records
            .push((kind.to_owned(), record));
    }

    fn drop_next(&self, subject: &str) {
        self.0.lock().unwrap().drop_next.insert(subject.to_owned());
    }

    /// The records of `kind` made under `key`.
    fn made_under(&self, kind: &str, key: &str) -> Vec<Value> {
        let books = self.0.lock().unwrap();
        books
            .records
            .iter()
            .filter(|(of, record)| of == kind && record["idempotency_key"] == key)
            .map(|(_, record)| record.clone())
            .collect()
    }

    fn lists(&self, kind: &str) -> Vec<String> {
        let books = self.0.lock().unwrap();
        books
            .lists
            .iter()
            .filter(|(of, _)| of == kind)
            .map(|(_, query)| query.clone())
            .collect()
    }

    /// A payments API whose creates keep the Idempotency-Key they came with and whose lists
    /// answer everything they hold, whatever the query asks for.
    async fn serve(&self) -> String {
        let router = Router::new()
            .route("/v1/{kind}", get(list).post(create))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        format!("http://{address}")
    }
}

async fn create(
    State(provider): State<Careless>,
    Path(kind): Path<String>,
    headers: HeaderMap,
    axum::Json(mut body): axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    let mut books = provider.0.lock().unwrap();
    let subject = body["order_id"]
        .as_str()
        .or(body["customer_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    if books.drop_next.remove(&subject) {
        // The answer is lost and nothing was done: ambiguous to the gateway.
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"type": "api_error"}})),
        );
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    if let Some(key) = &key
        && let Some((_, done)) = books
            .records
            .iter()
            .find(|(of, record)| *of == kind && record["idempotency_key"] == key.as_str())
    {
        return (StatusCode::OK, axum::Json(done.clone()));
    }
    body["id"] = json!(format!("{}_{}", &kind[..2], books.records.len() + 1));
    body["idempotency_key"] = json!(key);
    books.records.push((kind, body.clone()));
    (StatusCode::OK, axum::Json(body))
}

async fn list(
    State(provider): State<Careless>,
    Path(kind): Path<String>,
    RawQuery(query): RawQuery,
) -> axum::Json<Value> {
    let mut books = provider.0.lock().unwrap();
    books.lists.push((kind.clone(), query.unwrap_or_default()));
    let data: Vec<Value> = books
        .records
        .iter()
        .filter(|(of, _)| *of == kind)
        .map(|(_, record)| record.clone())
        .collect();
    axum::Json(json!({"object": "list", "data": data, "has_more": false, "next_cursor": null}))
}

/// The example config with two tenants' keys, in front of `provider_url`, served over a
/// ledger in `folder`; `edit` changes the config's text further.
fn gateway(
    folder: &std::path::Path,
    provider_url: &str,
    edit: impl Fn(String) -> String,
) -> Running {
    let config = example_config(folder, |text| {
        let text = with_setting(&text, "timeout_ms", 2000);
        let text = with_api_keys(
            &text,
            &[
                ("agent-north", KEY_NORTH, "north", "call, \"intents:read\""),
                ("agent-south", KEY_SOUTH, "south", "call, \"intents:read\""),
            ],
        );
        edit(text)
    });
    let ledger = folder.join("ledger.db");
    serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", provider_url)],
    )
}

async fn call(
    client: &Client,
    gateway: &Running,
    key: &str,
    tool: &str,
    arguments: Value,
    headers: &[(&str, &str)],
) -> Value {
    let mut request = client
        .post(format!("{}/v1/tools/{tool}/call", gateway.url))
        .bearer_auth(key)
        .json(&json!({ "arguments": arguments }));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn refund(order: &str, amount: Value) -> Value {
    json!({"order_id": order, "amount": amount, "reason": "requested_by_customer"})
}

/// What the model was told, and the provider's id it was told of.
fn told(outcome: &Value) -> (String, Option<String>) {
    (
        outcome["status"].as_str().unwrap_or_default().to_owned(),
        outcome["result"]["id"].as_str().map(str::to_owned),
    )
}

/// Regression (high): tenant south refunded 0.01 of order victim-546055 under the header
/// `Idempotency-Key: refund:victim-546055:50.00`, north's business key; north's refund of
/// 50.00 of that order then lost its answer, and north's lookup (`intent_key={intent_key}`,
/// `found: /data/0`) found south's record: north was told `done`, then `already_done`, with
/// south's refund id, order and amount, while the provider held no refund for north. Now a
/// record is north's only when it carries north's provider key and north's order and
/// amount; the provider's unfiltered list, south's record and a support agent's refund of
/// the same order and amount settle nothing, and north's refund happens once, by the
/// gateway's same-key re-send.
#[tokio::test]
async fn another_tenants_record_never_settles_an_intent() {
    let provider = Careless::default();
    let url = provider.serve().await;
    // A support agent's refund of the same order and amount, made around the gateway.
    provider.plant(
        "refunds",
        json!({"id": "re_agent", "order_id": "victim-546055", "amount": "50.00", "idempotency_key": null}),
    );
    let folder = tempfile::tempdir().unwrap();
    let gateway = gateway(folder.path(), &url, |text| text);
    let client = client();

    let planted = call(
        &client,
        &gateway,
        KEY_SOUTH,
        "refund_order",
        refund("victim-546055", json!(0.01)),
        &[("Idempotency-Key", "refund:victim-546055:50.00")],
    )
    .await;
    assert_eq!(planted["status"], "done", "{planted}");

    provider.drop_next("victim-546055");
    let north_key = "north/refund_order:refund:victim-546055:50.00";
    let first = call(
        &client,
        &gateway,
        KEY_NORTH,
        "refund_order",
        refund("victim-546055", json!(50.00)),
        &[],
    )
    .await;
    assert_eq!(
        first["status"], "pending_unknown",
        "the provider holds nothing of north's, so north is not told done: {first}"
    );
    assert!(provider.made_under("refunds", north_key).is_empty());

    // North asks again until it is settled: the only `done` it may hear is its own refund.
    let (settled, _) = until(
        Duration::from_secs(30),
        Duration::from_millis(300),
        async || {
            let again = call(
                &client,
                &gateway,
                KEY_NORTH,
                "refund_order",
                refund("victim-546055", json!(50)),
                &[],
            )
            .await;
            match told(&again) {
                (status, _) if status == "pending_unknown" => Err(format!("not yet: {again}")),
                _ => Ok(again),
            }
        },
    )
    .await;
    let own = provider.made_under("refunds", north_key);
    assert_eq!(own.len(), 1, "north's refund happened once: {own:?}");
    let (status, id) = told(&settled);
    assert!(status == "already_done" || status == "done", "{settled}");
    assert_eq!(id.as_deref(), own[0]["id"].as_str(), "{settled}");
    assert_ne!(id.as_deref(), Some("re_agent"));
    assert_eq!(settled["result"]["amount"], "50.00", "{settled}");
}

/// Regression: the lookup of a repeat and of the sweeper was rendered without the provider
/// key, so `GET /v1/charges?idempotency_key={idempotency_key}` went out as a bare
/// `GET /v1/charges`, and a provider that lists everything when its filter is missing handed
/// over another customer's charge. Now every path renders the same request, the key
/// included (the first attempt, a repeat, the sweeper; reconciliation pairs by the same
/// key), and the unfiltered answer, another tenant's charge of the same customer, amount and
/// currency among it, settles nothing: the intent stays unknown, for its owner.
#[tokio::test]
async fn every_path_renders_the_lookup_with_its_filter_and_an_unfiltered_list_settles_nothing() {
    let provider = Careless::default();
    let url = provider.serve().await;
    provider.plant(
        "charges",
        json!({"id": "ch_other", "customer_id": "cus_7", "amount": "25.00", "currency": "usd", "idempotency_key": "south/charge_card:charge:cus_7:visit-1"}),
    );
    let folder = tempfile::tempdir().unwrap();
    // No re-sends: only lookups may settle the intent.
    let gateway = gateway(folder.path(), &url, |text| {
        with_setting(&text, "honours_idempotency_keys", false)
    });
    let client = client();
    let charge = json!({"customer_id": "cus_7", "amount": 25, "currency": "usd"});
    let intent_id = [("Intent-Id", "visit-1")];
    let provider_key = "north/charge_card:charge:cus_7:visit-1";
    let filter = format!(
        "idempotency_key={}",
        provider_key.replace('/', "%2F").replace(':', "%3A")
    );

    provider.drop_next("cus_7");
    let first = call(
        &client,
        &gateway,
        KEY_NORTH,
        "charge_card",
        charge.clone(),
        &intent_id,
    )
    .await;
    assert_eq!(first["status"], "pending_unknown", "{first}");
    let after_first = provider.lists("charges").len();
    assert!(after_first >= 1, "the first attempt looked it up");

    // A repeat once the next lookup is due (the gate's lookup interval is 5 s), and the
    // sweeper meanwhile: each looks up again.
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let repeat = call(
        &client,
        &gateway,
        KEY_NORTH,
        "charge_card",
        charge.clone(),
        &intent_id,
    )
    .await;
    assert_eq!(repeat["status"], "pending_unknown", "{repeat}");
    let lookups = provider.lists("charges");
    assert!(
        lookups.len() > after_first,
        "the repeat and the sweeper looked it up: {lookups:?}"
    );
    for query in &lookups {
        assert_eq!(query, &filter, "every lookup carries the provider key");
    }

    // Reconciliation pairs records by the same provider key: the other tenant's charge is
    // explained by no intent, and the unknown intent is not "found".
    let mut reconcile = support::intentgate();
    reconcile
        .args([
            "reconcile",
            "--config",
            folder.path().join("support-agent.yaml").to_str().unwrap(),
            "--ledger",
            folder.path().join("ledger.db").to_str().unwrap(),
            "--format",
            "json",
        ])
        .env("INTENTGATE_MOCK_URL", &url);
    // The provider is served by this test's runtime: wait for the command off it.
    let reconciled = tokio::task::spawn_blocking(move || reconcile.output().unwrap())
        .await
        .unwrap();
    let report = String::from_utf8_lossy(&reconciled.stdout);
    assert!(!report.contains("unknown_found"), "{report}");
    assert!(report.contains("no_intent"), "{report}");

    let intent = client
        .get(format!(
            "{}/v1/intents/charge_card/charge:cus_7:visit-1",
            gateway.url
        ))
        .bearer_auth(KEY_NORTH)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(intent["status"], "unknown", "{intent}");
    assert!(provider.made_under("charges", provider_key).is_empty());
}

/// Smoke, the fifth path: `intentgate smoke --live` against the careless provider, whose
/// lists answer every record of every kind and customer (another tenant's charge of the same
/// customer and amount among them). The refund is counted through its lookup (its list
/// removed), rendered with its provider key like every other path; every tool's lookup
/// finds its own effect and nothing for an intent never executed, so smoke passes, and a
/// lookup request never went out without its filter.
#[tokio::test]
async fn smoke_live_renders_every_lookup_with_its_filter_against_an_unfiltered_provider() {
    let provider = Careless::default();
    let url = provider.serve().await;
    provider.plant(
        "charges",
        json!({"id": "ch_other", "customer_id": "cus_smoke", "amount": "1.00", "currency": "usd", "idempotency_key": "south/charge_card:charge:x"}),
    );
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        let text = with_setting(&text, "timeout_ms", 2000);
        // Refunds by provider key, counted through the lookup: no list.
        let text = text.replacen(
            "      query: {order_id: \"{order_id}\"}\n",
            "      query: {idempotency_key: \"{idempotency_key}\"}\n",
            1,
        );
        let start = text.find("    list:\n      path: /v1/refunds").unwrap();
        let end = start + text[start..].find("\n  - name: charge_card").unwrap();
        format!("{}{}", &text[..start], &text[end..])
    });
    let mut smoke = support::intentgate();
    smoke
        .env_remove("INTENTGATE_HASH_KEY")
        .args([
            "smoke",
            "--config",
            config.to_str().unwrap(),
            "--live",
            "--format",
            "json",
        ])
        .env("INTENTGATE_MOCK_URL", &url);
    // The provider is served by this test's runtime: wait for the command off it.
    let output = tokio::task::spawn_blocking(move || smoke.output().unwrap())
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    assert_eq!(report["passed"], true, "{output:?}");
    let lookups = provider.lists("refunds");
    assert!(!lookups.is_empty());
    for query in lookups {
        // The default tenant's provider key: `refund_order:<intent key>`.
        assert!(
            query.starts_with("idempotency_key=refund_order%3Arefund%3A"),
            "every refund lookup carries its provider key: {query}"
        );
    }
}

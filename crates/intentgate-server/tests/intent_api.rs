//! The intent API (`POST /v1/tools/{name}/intents`, `POST /v1/intents/{id}/settle` and
//! `/renew`, `GET /v1/intents/{id}`) through a real server on a loopback port, with API keys
//! of two tenants, over a real SQLite ledger.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Server, start};
use intentgate_core::{Scope, Scopes, Tenant, ToolDefinition};
use intentgate_ledger::Ledger;
use intentgate_mock::FaultPlan;
use intentgate_server::ServerOptions;
use intentgate_server::auth::{ActFor, ApiKey, AuthOptions, Authenticator};
use intentgate_test_support::client_tool;
use intentgate_test_support::http::answer;
use intentgate_test_support::wait_until;
use serde_json::{Value, json};

/// An API key of acme with every scope.
const ACME: &str = "key-of-acme";
/// An API key of globex with every scope.
const GLOBEX: &str = "key-of-globex";
/// An acme key that may only read intents.
const ACME_READER: &str = "key-of-acme-reader";
/// An acme key that may only call.
const ACME_CALLER: &str = "key-of-acme-caller";

/// Status, content type and JSON body of an answer.
type Answer = (u16, String, Value);

/// A gateway-executed side effect beside it.
fn gateway_tool() -> ToolDefinition {
    let mut tool = common::refund_tool();
    tool.name = "refund_by_gateway".to_owned();
    tool
}

async fn start_server() -> Server {
    let api_key = |name: &str, secret: &str, tenant: &str, scopes: Scopes| ApiKey {
        name: name.to_owned(),
        digest: ApiKey::parse_digest(&ApiKey::digest_hex(secret)).unwrap(),
        tenant: Tenant::parse(tenant).unwrap(),
        scopes,
        act_for: ActFor::Own,
    };
    let authenticator = Authenticator::new(AuthOptions::Methods {
        api_keys: vec![
            api_key("acme-agent", ACME, "acme", Scopes::all()),
            api_key("globex-agent", GLOBEX, "globex", Scopes::all()),
            api_key(
                "acme-reader",
                ACME_READER,
                "acme",
                Scopes::from_iter([Scope::IntentsRead]),
            ),
            api_key(
                "acme-caller",
                ACME_CALLER,
                "acme",
                Scopes::from_iter([Scope::Call]),
            ),
        ],
        jwt: None,
        trusted_proxy: None,
    })
    .unwrap();
    let options = ServerOptions {
        authenticator: Arc::new(authenticator),
        ..ServerOptions::default()
    };
    start(
        vec![client_tool(common::refund_tool()), gateway_tool()],
        FaultPlan::none(),
        options,
    )
    .await
}

/// `POST {path}` with `body` as JSON text, as the holder of `key`.
async fn post_text(server: &Server, path: &str, key: &str, body: &str) -> Answer {
    let response = server
        .client
        .post(format!("{}{path}", server.base))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    answer(response).await
}

async fn post(server: &Server, path: &str, key: &str, body: Value) -> Answer {
    post_text(server, path, key, &body.to_string()).await
}

async fn get(server: &Server, path: &str, key: &str) -> Answer {
    let response = server
        .client
        .get(format!("{}{path}", server.base))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    answer(response).await
}

async fn grant(server: &Server, key: &str, order: &str) -> Answer {
    let body = json!({"arguments": {"order_id": order, "amount": 49}});
    post(server, "/v1/tools/refund_order/intents", key, body).await
}

/// The body of a 200 answer.
fn ok(answer: Answer) -> Value {
    assert_eq!(answer.0, 200, "{}", answer.2);
    assert_eq!(answer.1, "application/json");
    answer.2
}

fn assert_problem(answer: &Answer, status: u16, kind: &str, says: &[&str]) {
    let (got_status, content_type, body) = answer;
    assert_eq!(*got_status, status, "{body}");
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(
        body["type"],
        format!("urn:intentgate:problem:{kind}"),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap();
    for part in says {
        assert!(detail.contains(part), "detail lacks `{part}`: {detail}");
    }
}

fn settle_path(grant: &Value) -> String {
    format!("/v1/intents/{}/settle", grant["intent_id"])
}

fn token(grant: &Value) -> &str {
    grant["lease"]["token"].as_str().unwrap()
}

#[tokio::test]
async fn a_grant_executes_the_settle_answers_done_and_a_repeat_is_already_done() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "8812").await);
    assert_eq!(granted["action"], "execute", "{granted}");
    assert_eq!(granted["tool"], "refund_order");
    assert_eq!(granted["intent_key"], "refund:8812:49.00");
    assert_eq!(
        granted["idempotency_key"],
        "acme/refund_order:refund:8812:49.00"
    );
    assert_eq!(
        (granted["attempt"].clone(), granted["resend"].clone()),
        (json!(1), json!(false))
    );
    assert!(token(&granted).starts_with("igl_"));
    assert_eq!(granted["lease"]["duration_ms"], 10_000);
    assert!(granted["lease"]["expires_at_ms"].as_i64().unwrap() > 0);

    let settle = json!({"lease": token(&granted), "outcome": "done",
                        "result": {"id": "re_9", "amount": "49.00"}, "external_id": "re_9"});
    let settled = ok(post(&server, &settle_path(&granted), ACME, settle).await);
    assert_eq!(settled["action"], "answer", "{settled}");
    assert_eq!(settled["outcome"]["status"], "done");
    assert_eq!(settled["outcome"]["external_id"], "re_9");

    let repeat = ok(grant(&server, ACME, "8812").await);
    assert_eq!(repeat["action"], "answer");
    assert_eq!(repeat["outcome"]["status"], "already_done");
    assert_eq!(
        repeat["outcome"]["result"],
        json!({"id": "re_9", "amount": "49.00"})
    );

    let path = format!("/v1/intents/{}", granted["intent_id"]);
    let intent = ok(get(&server, &path, ACME_READER).await);
    assert_eq!(intent["status"], "done");
    assert_eq!(intent["key"], "refund:8812:49.00");
    assert_eq!(intent["resolved_by"], "client");
    assert!(!intent.to_string().contains(token(&granted)));
    assert_eq!(server.provider.requests(), 0);
    server.stop().await;
}

#[tokio::test]
async fn renew_answers_the_same_token_for_another_duration_and_a_settled_lease_is_lost() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "1").await);
    let renew_path = format!("/v1/intents/{}/renew", granted["intent_id"]);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let renewed = ok(post(
        &server,
        &renew_path,
        ACME,
        json!({"lease": token(&granted)}),
    )
    .await);
    assert_eq!(renewed["lease"]["token"], granted["lease"]["token"]);
    assert_eq!(renewed["lease"]["duration_ms"], 10_000);
    assert!(
        renewed["lease"]["expires_at_ms"].as_i64() > granted["lease"]["expires_at_ms"].as_i64(),
        "{renewed} {granted}"
    );
    let unknown = json!({"lease": token(&granted), "outcome": "unknown", "reason": "timeout"});
    let settled = ok(post(&server, &settle_path(&granted), ACME, unknown).await);
    assert_eq!(settled["outcome"]["status"], "pending_unknown");
    let lost = post(
        &server,
        &renew_path,
        ACME,
        json!({"lease": token(&granted)}),
    )
    .await;
    assert_problem(&lost, 409, "lease-lost", &["unknown"]);
    // The next caller is granted the lookup.
    let lookup = ok(grant(&server, ACME, "1").await);
    assert_eq!(lookup["action"], "look_up", "{lookup}");
    assert_eq!(lookup["idempotency_key"], granted["idempotency_key"]);
    server.stop().await;
}

#[tokio::test]
async fn every_problem_of_a_grant_says_what_to_do() {
    let server = start_server().await;
    let unknown_tool = post(
        &server,
        "/v1/tools/nope/intents",
        ACME,
        json!({"arguments": {}}),
    );
    assert_problem(&unknown_tool.await, 404, "unknown-tool", &["nope"]);
    let body = json!({"arguments": {"order_id": "1", "amount": 5}});
    let gateway = post(
        &server,
        "/v1/tools/refund_by_gateway/intents",
        ACME,
        body.clone(),
    );
    assert_problem(
        &gateway.await,
        409,
        "not-client-executed",
        &["POST /v1/tools/refund_by_gateway/call"],
    );
    let called = post(&server, "/v1/tools/refund_order/call", ACME, body).await;
    assert_problem(
        &called,
        409,
        "client-executed",
        &["POST /v1/tools/refund_order/intents"],
    );
    let path = "/v1/tools/refund_order/intents";
    assert_problem(
        &post_text(&server, path, ACME, "{\"arguments\":").await,
        400,
        "malformed-json",
        &[],
    );
    assert_problem(
        &post(&server, path, ACME, json!({})).await,
        422,
        "invalid-body",
        &["arguments"],
    );
    let extra = json!({"arguments": {"order_id": "1", "amount": 5}, "tenant": "globex"});
    assert_problem(
        &post(&server, path, ACME, extra).await,
        422,
        "invalid-body",
        &["tenant"],
    );
    // Arguments that fail the schema are an outcome, as for a call.
    let invalid = ok(post(&server, path, ACME, json!({"arguments": {"order_id": "1"}})).await);
    assert_eq!(
        invalid["outcome"]["status"], "invalid_arguments",
        "{invalid}"
    );
    assert_eq!(server.provider.requests(), 0);
    server.stop().await;
}

#[tokio::test]
async fn every_problem_of_a_settle_changes_nothing() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "2").await);
    let path = settle_path(&granted);
    let lease = token(&granted);

    let wrong = json!({"lease": "igl_0000", "outcome": "done"});
    assert_problem(
        &post(&server, &path, ACME, wrong).await,
        409,
        "lease-lost",
        &["in_flight"],
    );
    let not_found = json!({"lease": lease, "outcome": "not_found"});
    assert_problem(
        &post(&server, &path, ACME, not_found).await,
        422,
        "outcome-not-allowed",
        &["not_found"],
    );
    let huge = json!({"lease": lease, "outcome": "done", "result": "x".repeat(70_000)});
    assert_problem(
        &post(&server, &path, ACME, huge).await,
        422,
        "too-large",
        &["result"],
    );
    let mixed = json!({"lease": lease, "outcome": "not_executed", "result": {}});
    assert_problem(
        &post(&server, &path, ACME, mixed).await,
        422,
        "bad-settlement",
        &["result"],
    );
    let odd = json!({"lease": lease, "outcome": "maybe"});
    assert_problem(
        &post(&server, &path, ACME, odd).await,
        422,
        "invalid-body",
        &["maybe"],
    );
    let no_lease = json!({"outcome": "done"});
    assert_problem(
        &post(&server, &path, ACME, no_lease).await,
        422,
        "invalid-body",
        &["lease"],
    );
    let bad_id = post(
        &server,
        "/v1/intents/abc/settle",
        ACME,
        json!({"lease": lease, "outcome": "done"}),
    );
    assert_problem(&bad_id.await, 404, "unknown-intent", &["abc"]);
    let no_such = post(
        &server,
        "/v1/intents/999999/settle",
        ACME,
        json!({"lease": lease, "outcome": "done"}),
    );
    assert_problem(&no_such.await, 404, "unknown-intent", &[]);
    // `/v1/intents/1/cancel` is a path of `GET /v1/intents/{tool}/{key}`, which takes no POST.
    let other_route = post(&server, "/v1/intents/1/cancel", ACME, json!({}));
    assert_problem(
        &other_route.await,
        405,
        "method-not-allowed",
        &["GET", "settle"],
    );

    let intent = ok(get(
        &server,
        &format!("/v1/intents/{}", granted["intent_id"]),
        ACME,
    )
    .await);
    assert_eq!(intent["status"], "in_flight");
    // The lease still holds, and settles once; the second settle is lost.
    let done = json!({"lease": lease, "outcome": "done"});
    ok(post(&server, &path, ACME, done.clone()).await);
    assert_problem(
        &post(&server, &path, ACME, done).await,
        409,
        "lease-lost",
        &["done"],
    );
    server.stop().await;
}

#[tokio::test]
async fn another_tenant_can_neither_settle_renew_nor_read_an_intent_and_keys_are_per_tenant() {
    let server = start_server().await;
    let acme = ok(grant(&server, ACME, "3").await);
    let id = &acme["intent_id"];
    let settle = json!({"lease": token(&acme), "outcome": "done"});
    let settled = post(&server, &settle_path(&acme), GLOBEX, settle.clone()).await;
    assert_problem(&settled, 404, "unknown-intent", &[]);
    let renew = json!({"lease": token(&acme)});
    let renewed = post(&server, &format!("/v1/intents/{id}/renew"), GLOBEX, renew).await;
    assert_problem(&renewed, 404, "unknown-intent", &[]);
    let read = get(&server, &format!("/v1/intents/{id}"), GLOBEX).await;
    assert_problem(&read, 404, "unknown-intent", &[]);
    // The same key in globex is globex's own intent.
    let globex = ok(grant(&server, GLOBEX, "3").await);
    assert_eq!(globex["action"], "execute");
    assert_ne!(&globex["intent_id"], id);
    // Acme's lease is untouched by all that.
    ok(post(&server, &settle_path(&acme), ACME, settle).await);
    server.stop().await;
}

#[tokio::test]
async fn each_route_needs_its_scope() {
    let server = start_server().await;
    let granted = grant(&server, ACME_READER, "4").await;
    assert_problem(&granted, 403, "missing-scope", &["call"]);
    let granted = ok(grant(&server, ACME_CALLER, "4").await);
    let read = get(
        &server,
        &format!("/v1/intents/{}", granted["intent_id"]),
        ACME_CALLER,
    )
    .await;
    assert_problem(&read, 403, "missing-scope", &["intents:read"]);
    let settle = json!({"lease": token(&granted), "outcome": "done"});
    let settled = post(&server, &settle_path(&granted), ACME_READER, settle.clone()).await;
    assert_problem(&settled, 403, "missing-scope", &["call"]);
    ok(post(&server, &settle_path(&granted), ACME_CALLER, settle).await);
    let unauthenticated = server
        .client
        .post(format!("{}/v1/tools/refund_order/intents", server.base))
        .json(&json!({"arguments": {"order_id": "4", "amount": 49}}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_concurrent_granters_over_http_one_executes_and_the_others_get_its_answer() {
    const GRANTERS: usize = 8;
    let server = Arc::new(start_server().await);
    let (sender, mut answers) = tokio::sync::mpsc::channel(GRANTERS);
    let tasks: Vec<_> = (0..GRANTERS)
        .map(|_| {
            let (server, sender) = (server.clone(), sender.clone());
            tokio::spawn(async move {
                let granted = ok(grant(&server, ACME, "5").await);
                sender.send(granted).await.unwrap();
            })
        })
        .collect();
    let first = answers.recv().await.unwrap();
    assert_eq!(first["action"], "execute", "{first}");
    // The others wait for the holder: every granter has been counted.
    assert!(
        wait_until(Duration::from_secs(5), || async {
            server
                .ledger()
                .get("acme", "refund_order", "refund:5:49.00")
                .await
                .unwrap()
                .is_some_and(|intent| intent.call_count == GRANTERS as u64)
        })
        .await,
        "every granter reached the ledger"
    );
    assert!(
        answers.try_recv().is_err(),
        "nobody else was granted or answered"
    );
    let settle = json!({"lease": token(&first), "outcome": "done", "external_id": "re_5"});
    ok(post(&server, &settle_path(&first), ACME, settle).await);
    for _ in 1..GRANTERS {
        let other = answers.recv().await.unwrap();
        assert_eq!(other["action"], "answer", "{other}");
        assert_eq!(other["outcome"]["status"], "already_done");
        assert_eq!(other["outcome"]["external_id"], "re_5");
    }
    for task in tasks {
        task.await.unwrap();
    }
    let server = Arc::into_inner(server).unwrap();
    server.stop().await;
}

#[tokio::test]
async fn a_broken_ledger_is_503_for_grants_and_settles() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "6").await);
    let executed = ok(grant(&server, ACME, "8").await);
    let connection = rusqlite::Connection::open(&server.ledger_path).unwrap();
    connection.execute_batch("DROP TABLE events").unwrap();
    let settle = json!({"lease": token(&granted), "outcome": "unknown", "reason": "timeout"});
    let settled = post(&server, &settle_path(&granted), ACME, settle).await;
    assert_problem(&settled, 503, "ledger-unavailable", &[]);
    // A final outcome under a live lease is answered once queued, with what the caller's
    // code learned, as the gateway's own calls are; its failed write leaves the intent
    // `in_flight`, for the lookup after the lease.
    let settle = json!({"lease": token(&executed), "outcome": "done"});
    let answered = ok(post(&server, &settle_path(&executed), ACME, settle).await);
    assert_eq!(answered["outcome"]["status"], "done", "{answered}");
    connection.execute_batch("DROP TABLE tool_flags").unwrap();
    // The gate's cached flags are trusted for a while; past it, the grant reads them.
    tokio::time::sleep(intentgate_gate::FLAG_REFRESH_FOR_TESTS).await;
    let refused = grant(&server, ACME, "7").await;
    assert_problem(
        &refused,
        503,
        "ledger-unavailable",
        &["nothing was granted"],
    );
    server.stop().await;
}

/// A grant's `Idempotency-Key` follows a call's rules: it never replaces the business key, a
/// second key for the same refund is the same intent, and another payload under a key is the
/// draft's 422 with nothing granted.
#[tokio::test]
async fn the_idempotency_key_header_is_read_as_for_calls() {
    let server = start_server().await;
    let path = "/v1/tools/refund_order/intents";
    let grant_keyed = |order: &str, key: &str| {
        server
            .client
            .post(format!("{}{path}", server.base))
            .bearer_auth(ACME)
            .header("idempotency-key", key)
            .json(&json!({"arguments": {"order_id": order, "amount": 49}}))
            .send()
    };
    let first = ok(answer(grant_keyed("8", "\"order-8\"").await.unwrap()).await);
    assert_eq!(first["action"], "execute", "{first}");
    assert_eq!(first["intent_key"], "refund:8:49.00");
    let settle = json!({"lease": token(&first), "outcome": "done"});
    ok(post(&server, &settle_path(&first), ACME, settle).await);
    for key in ["\"order-8\"", "order-8-again"] {
        let repeat = ok(answer(grant_keyed("8", key).await.unwrap()).await);
        assert_eq!(
            repeat["outcome"]["status"], "already_done",
            "{key}: {repeat}"
        );
        assert_eq!(repeat["outcome"]["intent_key"], "refund:8:49.00");
    }
    // Another payload under the key is the draft's 422, as for a call, and nothing is
    // granted: the other order's intent does not exist.
    let reused = answer(grant_keyed("9", "\"order-8\"").await.unwrap()).await;
    assert_problem(
        &reused,
        422,
        "idempotency-key-reused",
        &[
            "order-8",
            "refund:8:49.00",
            "`order_id`",
            "nothing was executed",
        ],
    );
    let intent = get(&server, "/v1/intents/refund_order/refund:9:49.00", ACME).await;
    assert_eq!(intent.0, 404, "{}", intent.2);
    let malformed = answer(grant_keyed("9", "\"order-8").await.unwrap()).await;
    assert_eq!(malformed.0, 400, "{}", malformed.2);
    // The same key in another tenant is that tenant's own.
    let globex = server
        .client
        .post(format!("{}{path}", server.base))
        .bearer_auth(GLOBEX)
        .header("idempotency-key", "order-8")
        .json(&json!({"arguments": {"order_id": "9", "amount": 49}}))
        .send()
        .await
        .unwrap();
    let globex = ok(answer(globex).await);
    assert_eq!(globex["action"], "execute", "{globex}");
    assert_eq!(globex["intent_key"], "refund:9:49.00");
    server.stop().await;
}

/// The intent API sits behind the same edge as calls, and hostile values in its bodies and
/// paths are 4xx answers that change nothing: a browser's form post or foreign page, no
/// credential, ids that overflow or are negative, and lease tokens that are huge, empty or
/// not ASCII.
#[tokio::test]
async fn hostile_requests_to_the_intent_api_are_refused_and_change_nothing() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "hostile").await);
    let intent_path = format!("/v1/intents/{}", granted["intent_id"]);
    let body = json!({"arguments": {"order_id": "other", "amount": 1}}).to_string();
    let send = |request: reqwest::RequestBuilder| async move {
        answer(request.send().await.unwrap()).await
    };
    let grant_url = format!("{}/v1/tools/refund_order/intents", server.base);

    // A form post (what a page can send without a preflight): 415, before any grant.
    let form = send(
        server
            .client
            .post(&grant_url)
            .bearer_auth(ACME)
            .header("content-type", "text/plain")
            .body(body.clone()),
    )
    .await;
    assert_eq!(form.0, 415, "{}", form.2);
    // A foreign page's request, even with JSON and a credential: 403.
    let foreign = send(
        server
            .client
            .post(&grant_url)
            .bearer_auth(ACME)
            .header("content-type", "application/json")
            .header("origin", "https://evil.example")
            .body(body.clone()),
    )
    .await;
    assert_eq!(foreign.0, 403, "{}", foreign.2);
    // No credential.
    let anonymous = send(
        server
            .client
            .post(&grant_url)
            .header("content-type", "application/json")
            .body(body),
    )
    .await;
    assert_eq!(anonymous.0, 401, "{}", anonymous.2);

    for id in ["-1", "0", "99999999999999999999999", "1e3", "%00"] {
        let path = format!("/v1/intents/{id}/settle");
        let settle = json!({"lease": token(&granted), "outcome": "done"});
        let refused = post(&server, &path, ACME, settle).await;
        assert_eq!(refused.0, 404, "{id}: {}", refused.2);
    }
    let long = format!("igl_{}", "f".repeat(100_000));
    for lease in ["", "igl_", "igl_ünïcode\u{0}", long.as_str()] {
        let settle = json!({"lease": lease, "outcome": "done", "result": {"id": "re_1"}});
        let refused = post(&server, &settle_path(&granted), ACME, settle).await;
        assert_problem(&refused, 409, "lease-lost", &[]);
        let renew = post(
            &server,
            &format!("{intent_path}/renew"),
            ACME,
            json!({"lease": lease}),
        )
        .await;
        assert_problem(&renew, 409, "lease-lost", &[]);
    }
    // Still in flight under the real lease, which still settles it.
    let intent = ok(get(&server, &intent_path, ACME_READER).await);
    assert_eq!(intent["status"], "in_flight", "{intent}");
    let settle = json!({"lease": token(&granted), "outcome": "done"});
    let settled = ok(post(&server, &settle_path(&granted), ACME, settle).await);
    assert_eq!(settled["outcome"]["status"], "done", "{settled}");
}

/// An `unknown` settle may say why the provider will answer every same-key re-send the same
/// way: recorded (the intent shows it, the metric counts it), then only lookups are granted.
/// An unknown word is a 422 naming the words; a field where the outcome or grant does not
/// take one is a 422 too, and none of those change anything.
#[tokio::test]
async fn an_unknown_settle_can_stop_re_sends_and_the_intent_shows_why() {
    let server = start_server().await;
    let granted = ok(grant(&server, ACME, "31").await);
    let path = settle_path(&granted);
    let lease = token(&granted);
    let intent_path = format!("/v1/intents/{}", granted["intent_id"]);
    let fresh = ok(get(&server, &intent_path, ACME).await);
    assert_eq!(fresh.get("resend_stopped"), None, "{fresh}");

    let unknown_word = json!({"lease": lease, "outcome": "unknown", "resend_stop": "replayed"});
    assert_problem(
        &post(&server, &path, ACME, unknown_word).await,
        422,
        "unknown-resend-stop",
        &[
            "`replayed`",
            "`replayed_server_error`",
            "`provider_says_no_retry`",
            "`key_reused`",
        ],
    );
    let not_a_word = json!({"lease": lease, "outcome": "unknown", "resend_stop": 5});
    assert_problem(
        &post(&server, &path, ACME, not_a_word).await,
        422,
        "invalid-body",
        &["expected a string"],
    );
    for outcome in ["done", "rejected", "not_executed"] {
        let other = json!({"lease": lease, "outcome": outcome, "resend_stop": "key_reused"});
        assert_problem(
            &post(&server, &path, ACME, other).await,
            422,
            "bad-settlement",
            &["resend_stop", outcome],
        );
    }
    assert_eq!(
        ok(get(&server, &intent_path, ACME).await)["status"],
        "in_flight"
    );

    let stopped = json!({"lease": lease, "outcome": "unknown",
                         "reason": "HTTP 500 replayed (Idempotent-Replayed: true)",
                         "resend_stop": "replayed_server_error"});
    let settled = ok(post(&server, &path, ACME, stopped).await);
    assert_eq!(settled["outcome"]["status"], "pending_unknown", "{settled}");
    let intent = ok(get(&server, &intent_path, ACME).await);
    assert_eq!(
        (&intent["status"], &intent["resend_stopped"]),
        (&json!("unknown"), &json!("replayed_server_error")),
        "{intent}"
    );
    let by_key = ok(get(&server, "/v1/intents/refund_order/refund:31:49.00", ACME).await);
    assert_eq!(
        by_key["resend_stopped"], "replayed_server_error",
        "{by_key}"
    );

    // The next caller is granted the lookup, and its settle can't carry a stop.
    let lookup = ok(grant(&server, ACME, "31").await);
    assert_eq!(lookup["action"], "look_up", "{lookup}");
    let on_lookup = json!({"lease": token(&lookup), "outcome": "unknown",
                           "resend_stop": "replayed_server_error"});
    assert_problem(
        &post(&server, &settle_path(&lookup), ACME, on_lookup).await,
        422,
        "outcome-not-allowed",
        &["resend_stop"],
    );
    let nothing = json!({"lease": token(&lookup), "outcome": "not_found"});
    let answered = ok(post(&server, &settle_path(&lookup), ACME, nothing).await);
    assert_eq!(answered["action"], "answer", "{answered}");
    assert_eq!(answered["outcome"]["status"], "pending_unknown");
    let intent = ok(get(&server, &intent_path, ACME).await);
    assert_eq!(
        (&intent["attempts"], &intent["status"]),
        (&json!(1), &json!("unknown"))
    );

    let metrics = server
        .client
        .get(format!("{}/metrics", server.base))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series =
        r#"intentgate_resends_stopped_total{tool="refund_order",reason="replayed_server_error"}"#;
    assert_eq!(
        intentgate_test_support::metrics::sample::<u64>(&metrics, series),
        Some(1),
        "{metrics}"
    );
    assert_eq!(server.provider.requests(), 0);
    server.stop().await;
}

//! The approvals routes of the admin API (docs/design.md section 13) through a real server
//! on a loopback port, behind the HTTP API's edge with API keys (as `intentgate serve` runs
//! them), over a gate with a real SQLite ledger and the fake provider: an approver's
//! approval executes the held intent once, a denial settles it with the reason, and every
//! decision nobody may make is refused without changing anything.

use std::sync::Arc;
use std::time::Duration;

use intentgate_admin::{Admin, AdminOptions, FailureLimit};
use intentgate_core::{CallStatus, IntentStatus, Scope, Scopes, Tenant};
use intentgate_gate::{CallContext, CallOutcome, SystemClock};
use intentgate_ledger::Ledger;
use intentgate_mock::FaultPlan;
use intentgate_server::auth::{ActFor, ApiKey};
use intentgate_server::{AuthOptions, Authenticator, ServerOptions};
use intentgate_test_support::http::{client, content_type};
use intentgate_test_support::{Harness, refund, refund_needing_approval};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

const TOKEN: &str = "approvals-test-admin-token-0123456789abcdef";
/// `approver-1` of tenant `default`: the `approve` scope only.
const APPROVER_KEY: &str = "igk_approver_key_of_tenant_default_0123";
/// `approver-b` of tenant `b`: the `approve` scope only.
const APPROVER_B_KEY: &str = "igk_approver_key_of_tenant_b_012345678";
/// `ops-admin` of tenant `default`: the `admin` scope only.
const ADMIN_KEY: &str = "igk_admin_key_without_approve_01234567";
/// `agent-7` of tenant `default`: calls and approves, so it may try to approve its own call.
const AGENT_APPROVER_KEY: &str = "igk_agent_that_also_approves_0123456789";
/// `support-agent` of tenant `default`: calls only.
const CALL_KEY: &str = "igk_call_key_of_the_approvals_tests_0123";

struct Server {
    base: String,
    client: reqwest::Client,
    harness: Harness,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn api_key(name: &str, key: &str, tenant: &str, scopes: &[Scope]) -> ApiKey {
    ApiKey {
        name: name.to_owned(),
        digest: Sha256::digest(key.as_bytes()).into(),
        tenant: Tenant::parse(tenant).unwrap(),
        scopes: Scopes::from_iter(scopes.iter().copied()),
        act_for: ActFor::Own,
    }
}

/// A gateway whose `refund_order` needs approval within `deadline`, with the admin token and
/// the test's API keys, its admin API served beside its gate.
async fn start(deadline: Duration) -> Server {
    let harness = Harness::with_tools(
        FaultPlan::none(),
        vec![refund_needing_approval(deadline)],
        Arc::new(SystemClock),
    );
    let auth = AuthOptions::Methods {
        api_keys: vec![
            api_key("approver-1", APPROVER_KEY, "default", &[Scope::Approve]),
            api_key("approver-b", APPROVER_B_KEY, "b", &[Scope::Approve]),
            api_key("ops-admin", ADMIN_KEY, "default", &[Scope::Admin]),
            api_key(
                "agent-7",
                AGENT_APPROVER_KEY,
                "default",
                &[Scope::Call, Scope::Approve],
            ),
            api_key("support-agent", CALL_KEY, "default", &[Scope::Call]),
        ],
        jwt: None,
        trusted_proxy: None,
    };
    let admin = Admin::new(
        harness.ledger.clone(),
        AdminOptions {
            token: Some(TOKEN.to_owned()),
            tools: vec!["refund_order".to_owned()],
            actor_default: "admin-api".to_owned(),
            failure_limit: FailureLimit::default(),
            admin_scope: true,
            trusted_proxies: Vec::new(),
        },
        None,
        None,
    )
    .with_gate(harness.gate.clone());
    let options = ServerOptions {
        authenticator: Arc::new(Authenticator::new(auth).unwrap()),
        ..ServerOptions::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let gate = harness.gate.clone();
    let routes = admin.router();
    tokio::spawn(async move {
        intentgate_server::run_with(listener, gate, options, Some(routes), async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Server {
        base,
        client: client(Some(Duration::from_secs(30))),
        harness,
        stop: Some(stop),
    }
}

/// An answer: status, content type and the body as JSON.
struct Answer {
    status: u16,
    content_type: String,
    body: Value,
}

impl Answer {
    /// Asserts a problem of this status and kind, and returns its detail.
    fn problem(&self, status: u16, kind: &str) -> String {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.body
        );
        assert_eq!(
            self.body["type"],
            format!("urn:intentgate:problem:{kind}"),
            "{}",
            self.body
        );
        self.body["detail"].as_str().unwrap().to_owned()
    }

    fn ok(&self) -> &Value {
        assert_eq!(self.status, 200, "{}", self.body);
        &self.body
    }
}

impl Server {
    async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = content_type(&response);
        let body = response.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            body,
        }
    }

    async fn decide(&self, id: i64, verb: &str, key: &str, body: Value) -> Answer {
        self.send(
            "POST",
            &format!("/v1/admin/approvals/{id}/{verb}"),
            Some(key),
            Some(body),
        )
        .await
    }

    /// A refund of `amount` on `order` called by `caller` of the default tenant.
    async fn call_as(&self, caller: &str, order: &str, amount: Value) -> CallOutcome {
        let context = CallContext {
            caller: caller.to_owned(),
            ..CallContext::default()
        };
        self.harness
            .gate
            .call("refund_order", refund(order, amount), &context)
            .await
            .unwrap()
    }

    /// A refund `agent-7` asked for and the approval policy held: its intent id.
    async fn held(&self, order: &str, amount: Value) -> i64 {
        let held = self.call_as("agent-7", order, amount).await;
        assert_eq!(held.status, CallStatus::AwaitingApproval, "{held:?}");
        self.harness
            .intent(held.intent_key.as_deref().unwrap())
            .await
            .id
    }

    async fn status(&self, id: i64) -> IntentStatus {
        self.harness
            .ledger
            .get_by_id(id)
            .await
            .unwrap()
            .unwrap()
            .status
    }
}

#[tokio::test]
async fn an_approvers_approval_executes_the_held_intent_once_and_a_second_one_is_409() {
    let server = start(Duration::from_secs(3600)).await;
    let id = server.held("8812", json!("150.00")).await;
    assert_eq!(
        server.harness.provider.effect_count("refund:8812:150.00"),
        0
    );

    let listed = server
        .send("GET", "/v1/admin/approvals", Some(APPROVER_KEY), None)
        .await;
    let entry = &listed.ok()["approvals"][0];
    assert_eq!(entry["intent_id"], id);
    assert_eq!(entry["tool"], "refund_order");
    assert_eq!(entry["tenant"], "default");
    // The arguments as the ledger keeps them: the amount as it was written.
    assert_eq!(
        entry["arguments"],
        json!({"order_id": "8812", "amount": "150.00"})
    );
    assert_eq!(entry["requested_by"], "agent-7");
    assert_eq!(entry["held_by"], "approval policy");
    assert_eq!(entry["decision"], Value::Null);
    assert_eq!(entry["console_url"], format!("/console/intents/{id}"));
    assert_eq!(entry["decidable"], json!({"now": true, "reason": null}));
    assert!(entry["deadline_ms"].as_i64().unwrap() > entry["requested_ms"].as_i64().unwrap());
    assert!(!entry["events"].as_array().unwrap().is_empty(), "{entry}");

    let approved = server
        .decide(
            id,
            "approve",
            APPROVER_KEY,
            json!({"reason": "checked the order"}),
        )
        .await;
    let body = approved.ok();
    assert_eq!(body["decision"], "approved");
    assert_eq!(body["runs"], "executed");
    assert_eq!(body["outcome"]["status"], "done", "{body}");
    assert_eq!(body["intent"]["status"], "done", "{body}");
    assert_eq!(body["approval"]["decided_by"], "approver-1");
    assert_eq!(body["approval"]["reason"], "checked the order");
    assert_eq!(
        server.harness.provider.effect_count("refund:8812:150.00"),
        1
    );

    let again = server.decide(id, "approve", APPROVER_KEY, json!({})).await;
    let detail = again.problem(409, "not-awaiting");
    assert!(detail.contains("approved by `approver-1`"), "{detail}");
    let repeat = server.call_as("agent-7", "8812", json!(150)).await;
    assert_eq!(repeat.status, CallStatus::AlreadyDone, "{repeat:?}");
    assert_eq!(
        server.harness.provider.effect_count("refund:8812:150.00"),
        1
    );

    let closed = server
        .send(
            "GET",
            "/v1/admin/approvals?state=closed",
            Some(APPROVER_KEY),
            None,
        )
        .await;
    assert_eq!(closed.ok()["approvals"][0]["decision"], "approved");
    let open = server
        .send("GET", "/v1/admin/approvals", Some(APPROVER_KEY), None)
        .await;
    assert_eq!(open.ok()["approvals"], json!([]));
}

#[tokio::test]
async fn a_denial_needs_a_reason_and_settles_the_intent_rejected_quoting_it() {
    let server = start(Duration::from_secs(3600)).await;
    let id = server.held("8812", json!(150)).await;
    for body in [json!({}), json!({"reason": "  "})] {
        let refused = server.decide(id, "deny", APPROVER_KEY, body).await;
        let detail = refused.problem(422, "reason-required");
        assert!(
            detail.contains("the model that asked reads the reason"),
            "{detail}"
        );
    }
    let long = server
        .decide(
            id,
            "deny",
            APPROVER_KEY,
            json!({"reason": "x".repeat(2000)}),
        )
        .await;
    long.problem(422, "too-long");
    let unknown_field = server
        .decide(
            id,
            "deny",
            APPROVER_KEY,
            json!({"reason": "r", "actor": "someone"}),
        )
        .await;
    unknown_field.problem(422, "invalid-body");
    assert_eq!(server.status(id).await, IntentStatus::Pending);

    let reason = "the order was already refunded by hand";
    let denied = server
        .decide(id, "deny", APPROVER_KEY, json!({ "reason": reason }))
        .await;
    let body = denied.ok();
    assert_eq!(body["decision"], "denied");
    assert_eq!(body["runs"], "never");
    assert_eq!(body["outcome"], Value::Null);
    assert_eq!(body["intent"]["status"], "rejected");
    assert_eq!(server.status(id).await, IntentStatus::Rejected);

    let next = server.call_as("agent-7", "8812", json!(150)).await;
    assert_eq!(next.status, CallStatus::Rejected, "{next:?}");
    let answer = serde_json::to_string(&next.to_json()).unwrap();
    assert!(answer.contains(reason), "{answer}");
    assert_eq!(
        server.harness.provider.effect_count("refund:8812:150.00"),
        0
    );
}

#[tokio::test]
async fn nobody_approves_their_own_request() {
    let server = start(Duration::from_secs(3600)).await;
    let id = server.held("8812", json!(150)).await;
    // `agent-7` asked, and its key also has the `approve` scope.
    let listed = server
        .send("GET", "/v1/admin/approvals", Some(AGENT_APPROVER_KEY), None)
        .await;
    let decidable = &listed.ok()["approvals"][0]["decidable"];
    assert_eq!(decidable["now"], false);
    for verb in ["approve", "deny"] {
        let refused = server
            .decide(
                id,
                verb,
                AGENT_APPROVER_KEY,
                json!({"reason": "looks fine"}),
            )
            .await;
        let detail = refused.problem(403, "own-request");
        assert!(detail.contains("`agent-7` asked for intent"), "{detail}");
    }
    assert_eq!(server.status(id).await, IntentStatus::Pending);
    assert_eq!(server.harness.provider.requests(), 0);
}

#[tokio::test]
async fn the_admin_token_and_admin_credentials_without_the_approve_scope_can_not_decide() {
    let server = start(Duration::from_secs(3600)).await;
    let id = server.held("8812", json!(150)).await;
    for key in [TOKEN, ADMIN_KEY] {
        // Both may read every tenant's held intents, as the other admin routes.
        let listed = server
            .send("GET", "/v1/admin/approvals", Some(key), None)
            .await;
        let entry = &listed.ok()["approvals"][0];
        assert_eq!(entry["intent_id"], id);
        assert_eq!(entry["decidable"]["now"], false);
        for verb in ["approve", "deny"] {
            let refused = server
                .decide(id, verb, key, json!({"reason": "fine"}))
                .await;
            let detail = refused.problem(403, "approve-scope-required");
            assert!(
                detail.contains("`approve` scope") && detail.contains("separate from `admin`"),
                "{detail}"
            );
        }
    }
    // A call key has neither scope: it may not even read them.
    let listed = server
        .send("GET", "/v1/admin/approvals", Some(CALL_KEY), None)
        .await;
    let detail = listed.problem(403, "missing-scope");
    assert!(detail.contains("`approve` scope"), "{detail}");
    let refused = server.decide(id, "approve", CALL_KEY, json!({})).await;
    refused.problem(403, "missing-scope");
    // No credential at all: 401, whatever the body.
    let anonymous = server
        .send(
            "POST",
            &format!("/v1/admin/approvals/{id}/approve"),
            None,
            Some(json!({})),
        )
        .await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    assert_eq!(server.status(id).await, IntentStatus::Pending);
    assert_eq!(server.harness.provider.requests(), 0);
}

#[tokio::test]
async fn an_approver_decides_and_reads_only_its_own_tenants_held_intents() {
    let server = start(Duration::from_secs(3600)).await;
    let id = server.held("8812", json!(150)).await;
    for verb in ["approve", "deny"] {
        let refused = server
            .decide(id, verb, APPROVER_B_KEY, json!({"reason": "fine"}))
            .await;
        let detail = refused.problem(403, "other-tenant");
        assert!(
            detail.contains("tenant `b` only") && detail.contains("tenant `default`"),
            "{detail}"
        );
    }
    let own = server
        .send("GET", "/v1/admin/approvals", Some(APPROVER_B_KEY), None)
        .await;
    assert_eq!(own.ok()["approvals"], json!([]));
    let other = server
        .send(
            "GET",
            "/v1/admin/approvals?tenant=default",
            Some(APPROVER_B_KEY),
            None,
        )
        .await;
    other.problem(403, "other-tenant");
    assert_eq!(server.status(id).await, IntentStatus::Pending);
    // An unknown intent is a 404 to anyone who may decide.
    let unknown = server
        .decide(id + 1000, "approve", APPROVER_KEY, json!({}))
        .await;
    unknown.problem(404, "unknown-intent");
}

#[tokio::test]
async fn a_decision_after_the_deadline_is_refused_and_the_request_expires() {
    let server = start(Duration::from_millis(300)).await;
    let id = server.held("8812", json!(150)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let refused = server.decide(id, "approve", APPROVER_KEY, json!({})).await;
    let detail = refused.problem(409, "expired");
    assert!(detail.contains("by its deadline"), "{detail}");
    assert_eq!(server.status(id).await, IntentStatus::NotExecuted);
    let again = server
        .decide(id, "deny", APPROVER_KEY, json!({"reason": "too late"}))
        .await;
    let detail = again.problem(409, "not-awaiting");
    assert!(detail.contains("expired"), "{detail}");
    assert_eq!(server.harness.provider.requests(), 0);
}

#[tokio::test]
async fn the_approvals_routes_are_in_the_admin_apis_openapi_document() {
    let document = serde_json::to_value(intentgate_admin::openapi()).unwrap();
    let paths = &document["paths"];
    assert!(paths["/v1/admin/approvals"]["get"].is_object());
    for verb in ["approve", "deny"] {
        let operation = &paths[format!("/v1/admin/approvals/{{id}}/{verb}")]["post"];
        assert!(operation["responses"]["403"].is_object(), "{operation}");
        assert!(operation["responses"]["409"].is_object(), "{operation}");
    }
}

//! The admin API through a real server on a loopback port, over a real SQLite ledger in a
//! temporary folder, with reqwest. Intents are made with the ledger's own `begin` and
//! `finish`, at the wall clock's time (the admin API reads it to judge leases).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_admin::{AdminOptions, AlertLog, FailureLimit, Reconciler};
use intentgate_core::{IntentStatus, ResendStop};
use intentgate_gate::{Clock, Gate, SystemClock};
use intentgate_ledger::{
    Begin, BeginRequest, Finish, Finished, IntentRecord, Ledger, ReconciliationRun, StoredMismatch,
    ToolFlag,
};
use intentgate_mock::{FakeProvider, FaultPlan};
use intentgate_test_support::TempLedger;
use intentgate_test_support::gate::default_gate;
use intentgate_test_support::http::client;
use intentgate_test_support::tools::refund_tool;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

const TOKEN: &str = "test-admin-token-0123456789abcdef";
const TOOLS: [&str; 2] = ["refund_order", "send_email"];
/// The route of the `refund_order` flag.
const REFUND_FLAG: &str = "/v1/admin/flags/refund_order";
const ACTOR_DEFAULT: &str = "admin-test";
/// How long a lease taken by these tests lasts: far longer than any test.
const LEASE_MS: i64 = 10 * 60 * 1000;

struct Admin {
    base: String,
    client: reqwest::Client,
    ledger: Arc<dyn Ledger>,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Admin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn start(token: Option<&str>, reconciler: Option<Arc<dyn Reconciler>>) -> Admin {
    start_with(token, reconciler, FailureLimit::default(), None).await
}

/// [`start_with`] behind reverse proxies at `trusted_proxies`.
async fn start_behind(
    token: Option<&str>,
    failure_limit: FailureLimit,
    trusted_proxies: Vec<ipnet::IpNet>,
) -> Admin {
    start_serving(token, None, failure_limit, None, trusted_proxies).await
}

/// [`start`] with a chosen limit on wrong tokens. The router is served with the peer's
/// address, as `intentgate serve` serves it.
async fn start_with(
    token: Option<&str>,
    reconciler: Option<Arc<dyn Reconciler>>,
    failure_limit: FailureLimit,
    alerts: Option<Arc<dyn AlertLog>>,
) -> Admin {
    start_serving(token, reconciler, failure_limit, alerts, Vec::new()).await
}

async fn start_serving(
    token: Option<&str>,
    reconciler: Option<Arc<dyn Reconciler>>,
    failure_limit: FailureLimit,
    alerts: Option<Arc<dyn AlertLog>>,
    trusted_proxies: Vec<ipnet::IpNet>,
) -> Admin {
    serve(
        token,
        reconciler,
        failure_limit,
        alerts,
        trusted_proxies,
        None,
    )
    .await
}

/// The key window of the `refund_order` of [`start_beside_a_gate`]: the sweeper re-sends an
/// unknown refund with its provider key for this long after it was first seen.
const RESEND_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// [`start`] beside a gate over the same ledger, whose `refund_order` (key
/// `refund:{order_id}:{amount:.2}`) its sweeper re-sends within [`RESEND_WINDOW`], as
/// `intentgate serve` serves the admin API.
async fn start_beside_a_gate() -> (Admin, Arc<Gate>) {
    let mut refund = refund_tool();
    refund.resend_window = Some(RESEND_WINDOW);
    let gate_of = |ledger: Arc<dyn Ledger>| {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let provider = Arc::new(FakeProvider::new(7, FaultPlan::none(), clock.clone()));
        Arc::new(default_gate(vec![refund], ledger, provider, clock))
    };
    let gate = Arc::new(Mutex::new(None));
    let kept = gate.clone();
    let admin = serve(
        Some(TOKEN),
        None,
        FailureLimit::default(),
        None,
        Vec::new(),
        Some(Box::new(move |ledger| {
            let gate = gate_of(ledger);
            *kept.lock().unwrap() = Some(gate.clone());
            gate
        })),
    )
    .await;
    let gate = gate.lock().unwrap().take().unwrap();
    (admin, gate)
}

/// Builds the gate the admin API is served beside, over its ledger.
type GateOver = Box<dyn FnOnce(Arc<dyn Ledger>) -> Arc<Gate>>;

async fn serve(
    token: Option<&str>,
    reconciler: Option<Arc<dyn Reconciler>>,
    failure_limit: FailureLimit,
    alerts: Option<Arc<dyn AlertLog>>,
    trusted_proxies: Vec<ipnet::IpNet>,
    gate: Option<GateOver>,
) -> Admin {
    let TempLedger { dir, ledger, .. } = TempLedger::new();
    let ledger: Arc<dyn Ledger> = ledger;
    let admin = intentgate_admin::Admin::new(
        ledger.clone(),
        AdminOptions {
            token: token.map(str::to_owned),
            tools: TOOLS.map(str::to_owned).to_vec(),
            actor_default: ACTOR_DEFAULT.to_owned(),
            failure_limit,
            admin_scope: false,
            trusted_proxies,
        },
        reconciler,
        alerts,
    );
    let admin = match gate {
        Some(gate_over) => admin.with_gate(gate_over(ledger.clone())),
        None => admin,
    };
    let router = admin.router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = stopped.await;
        })
        .await
    });
    let client = client(Some(Duration::from_secs(30)));
    Admin {
        base,
        client,
        ledger,
        stop: Some(stop),
        _dir: dir,
    }
}

/// An answer: status, content type, `WWW-Authenticate`, `Retry-After`, and the body as JSON.
struct Answer {
    status: u16,
    content_type: String,
    challenge: Option<String>,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or_default()
    }

    /// Asserts a problem answer with this status, and returns its detail.
    fn problem(&self, status: u16) -> &str {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.content_type, "application/problem+json",
            "{}",
            self.body
        );
        assert_eq!(self.body["status"], status);
        assert!(
            self.body["type"]
                .as_str()
                .unwrap()
                .starts_with("urn:intentgate:problem:")
        );
        self.detail()
    }
}

impl Admin {
    async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        let content_type = header("content-type").unwrap_or_default();
        let challenge = header("www-authenticate");
        let retry_after = header("retry-after");
        let body = response.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            content_type,
            challenge,
            retry_after,
            body,
        }
    }

    /// The status `GET /v1/admin/flags` answers with `authorization` as its
    /// `Authorization` header.
    async fn flags_status(&self, authorization: &str) -> u16 {
        let response = self
            .client
            .get(format!("{}/v1/admin/flags", self.base))
            .header("authorization", authorization)
            .send()
            .await
            .unwrap();
        response.status().as_u16()
    }

    async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, Some(TOKEN), None).await
    }

    async fn put(&self, path: &str, body: Value) -> Answer {
        self.send("PUT", path, Some(TOKEN), Some(body.to_string()))
            .await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send("POST", path, Some(TOKEN), Some(body.to_string()))
            .await
    }

    /// A new intent, in flight under a lease of [`LEASE_MS`].
    async fn in_flight(&self, tenant: &str, tool: &str, key: &str) -> IntentRecord {
        let lease_owner = format!("test/{key}");
        self.begin_new(tenant, tool, key, json!({ "key": key }), &lease_owner)
            .await
    }

    /// A new intent of `arguments`, in flight under `lease_owner`'s lease of [`LEASE_MS`].
    async fn begin_new(
        &self,
        tenant: &str,
        tool: &str,
        key: &str,
        arguments: Value,
        lease_owner: &str,
    ) -> IntentRecord {
        let now_ms = now_ms();
        let begun = self
            .ledger
            .begin(BeginRequest {
                tenant: tenant.into(),
                tool: tool.into(),
                key: key.into(),
                fingerprint: intentgate_core::fingerprint(&arguments).as_str().to_owned(),
                arguments,
                lease_owner: lease_owner.into(),
                lease_expires_ms: now_ms + LEASE_MS,
                now_ms,
                count_call: true,
                retry_rejected: false,
                lookup_interval_ms: 1_000,
                resend_unknown: false,
                expect_new: false,
                policies: None,
            })
            .await
            .unwrap();
        match begun {
            Begin::Execute(intent) => intent,
            other => panic!("expected a new intent to execute, got {other:?}"),
        }
    }

    /// A new intent settled at once as `status` (the lease released).
    async fn settled(
        &self,
        tenant: &str,
        tool: &str,
        key: &str,
        status: IntentStatus,
        external_id: Option<&str>,
    ) -> IntentRecord {
        let intent = self.in_flight(tenant, tool, key).await;
        let finished = self
            .ledger
            .finish(Finish {
                id: intent.id,
                lease_owner: format!("test/{key}"),
                attempt: intent.attempt,
                now_ms: now_ms(),
                status,
                result: None,
                external_id: external_id.map(str::to_owned),
                resolved_by: "upstream",
                looked_up: false,
                detail: format!("the test settled it {status}"),
                lease_required: false,
                resend_stopped: None,
            })
            .await
            .unwrap();
        match finished {
            Finished::Recorded(intent) => intent,
            other => panic!("expected the finish to be recorded, got {other:?}"),
        }
    }

    /// A new intent settled at once as done, with `external_id`.
    async fn done(&self, tenant: &str, tool: &str, key: &str, external_id: &str) -> IntentRecord {
        self.settled(tenant, tool, key, IntentStatus::Done, Some(external_id))
            .await
    }

    /// A new `refund_order` intent settled at once as unknown.
    async fn unknown_refund(&self, tenant: &str, key: &str) -> IntentRecord {
        self.settled(tenant, "refund_order", key, IntentStatus::Unknown, None)
            .await
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test]
async fn every_admin_route_is_404_when_no_token_is_configured() {
    let admin = start(None, None).await;
    let unknown = admin.unknown_refund("t", "k1").await;
    for (method, path) in [
        ("GET", "/v1/admin/flags".to_owned()),
        ("PUT", REFUND_FLAG.to_owned()),
        ("GET", "/v1/admin/intents".to_owned()),
        ("GET", format!("/v1/admin/intents/{}", unknown.id)),
        ("POST", format!("/v1/admin/intents/{}/resolve", unknown.id)),
        ("POST", format!("/v1/admin/intents/{}/reopen", unknown.id)),
        ("POST", "/v1/admin/reconcile".to_owned()),
        ("GET", "/v1/admin/reconciliations".to_owned()),
        ("GET", "/v1/admin".to_owned()),
    ] {
        // With or without a token, whatever the body: the admin API is not there.
        let body = json!({"status": "not_executed", "reason": "r", "enabled": false});
        let answer = admin
            .send(method, &path, Some(TOKEN), Some(body.to_string()))
            .await;
        let detail = answer.problem(404);
        assert!(
            detail.contains("INTENTGATE_ADMIN_TOKEN"),
            "{method} {path}: {detail}"
        );
        assert_eq!(answer.body["title"], "The admin API is off");
    }
    let still = admin.ledger.get_by_id(unknown.id).await.unwrap().unwrap();
    assert_eq!(still.status, IntentStatus::Unknown);
    assert!(admin.ledger.tool_flags().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_401_with_a_bearer_challenge() {
    let admin = start(Some(TOKEN), None).await;
    let missing = admin.send("GET", "/v1/admin/flags", None, None).await;
    let detail = missing.problem(401);
    assert!(detail.contains("Authorization: Bearer"), "{detail}");
    assert!(!detail.contains(TOKEN));
    let challenge = missing.challenge.clone().expect("WWW-Authenticate");
    assert!(challenge.starts_with("Bearer"), "{challenge}");

    let wrong = admin
        .send(
            "GET",
            "/v1/admin/flags",
            Some("test-admin-token-0123456780"),
            None,
        )
        .await;
    wrong.problem(401);
    assert!(
        wrong
            .challenge
            .as_deref()
            .unwrap()
            .contains("invalid_token"),
        "{:?}",
        wrong.challenge
    );
    // A prefix of the token, the token with something after it, another scheme.
    for presented in [&TOKEN[..10], &format!("{TOKEN}x")[..]] {
        let answer = admin
            .send("GET", "/v1/admin/intents", Some(presented), None)
            .await;
        answer.problem(401);
    }
    // The unknown intents, with their provider keys and amounts, are the admin's alone.
    for presented in [None, Some(&TOKEN[..10])] {
        let answer = admin
            .send("GET", "/v1/admin/unknown", presented, None)
            .await;
        answer.problem(401);
    }
    let basic = admin.flags_status(&format!("Basic {TOKEN}")).await;
    assert_eq!(basic, 401);

    // Nothing is looked at before the token: an unknown admin path, a write and a malformed
    // body are all 401, and the write changed nothing.
    admin
        .send("GET", "/v1/admin/no-such-route", None, None)
        .await
        .problem(401);
    admin
        .send(
            "PUT",
            REFUND_FLAG,
            Some("wrong-token-wrong-token"),
            Some(json!({"enabled": false, "reason": "x"}).to_string()),
        )
        .await
        .problem(401);
    admin
        .send("PUT", REFUND_FLAG, None, Some("{".to_owned()))
        .await
        .problem(401);
    assert!(admin.ledger.tool_flags().await.unwrap().is_empty());

    // The right token, in any case of the scheme.
    let right = admin.flags_status(&format!("bearer {TOKEN}")).await;
    assert_eq!(right, 200);
}

#[tokio::test]
async fn a_flag_is_stored_listed_and_switched_back() {
    let admin = start(Some(TOKEN), None).await;
    let initial = admin.get("/v1/admin/flags").await;
    assert_eq!(initial.status, 200);
    assert_eq!(
        initial.body,
        json!({"flags": [
            {"tool": "refund_order", "configured": true, "enabled": true, "reason": null, "actor": null, "updated_ms": null},
            {"tool": "send_email", "configured": true, "enabled": true, "reason": null, "actor": null, "updated_ms": null},
        ]})
    );

    let before_ms = now_ms();
    let disabled = admin
        .put(
            REFUND_FLAG,
            json!({"enabled": false, "reason": "INC-42: double refunds", "actor": "alice"}),
        )
        .await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);
    assert_eq!(disabled.body["tool"], "refund_order");
    assert_eq!(disabled.body["enabled"], false);
    assert_eq!(disabled.body["reason"], "INC-42: double refunds");
    assert_eq!(disabled.body["actor"], "alice");
    assert!(disabled.body["updated_ms"].as_i64().unwrap() >= before_ms);

    // Stored in the ledger, where every gate sharing it reads it.
    let stored = admin.ledger.tool_flags().await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].enabled);
    assert_eq!(stored[0].actor, "alice");

    // A flag stored for a tool no longer in the config is listed too.
    admin
        .ledger
        .set_tool_flag(ToolFlag {
            tool: "retired_tool".into(),
            enabled: false,
            reason: "removed".into(),
            actor: "bob".into(),
            updated_ms: now_ms(),
        })
        .await
        .unwrap();
    let listed = admin.get("/v1/admin/flags").await.body;
    let flags = listed["flags"].as_array().unwrap();
    assert_eq!(flags.len(), 3, "{listed}");
    assert_eq!(flags[0]["tool"], "refund_order");
    assert_eq!(flags[0]["enabled"], false);
    assert_eq!(flags[0]["reason"], "INC-42: double refunds");
    assert_eq!(flags[1]["tool"], "send_email");
    assert_eq!(flags[1]["enabled"], true);
    assert_eq!(flags[2]["tool"], "retired_tool");
    assert_eq!(flags[2]["configured"], false);

    // Switched back on: no reason needed, the actor defaults to the server's.
    let enabled = admin.put(REFUND_FLAG, json!({"enabled": true})).await;
    assert_eq!(enabled.status, 200, "{}", enabled.body);
    assert_eq!(enabled.body["enabled"], true);
    assert_eq!(enabled.body["actor"], ACTOR_DEFAULT);
    let listed = admin.get("/v1/admin/flags").await.body;
    assert_eq!(listed["flags"][0]["enabled"], true);
}

#[tokio::test]
async fn a_flag_for_an_unknown_tool_or_without_a_reason_is_refused() {
    let admin = start(Some(TOKEN), None).await;
    let unknown = admin
        .put(
            "/v1/admin/flags/refund_everything",
            json!({"enabled": false, "reason": "x"}),
        )
        .await;
    let detail = unknown.problem(404);
    assert!(
        detail.contains("refund_order") && detail.contains("send_email"),
        "{detail}"
    );

    let no_reason = admin.put(REFUND_FLAG, json!({"enabled": false})).await;
    assert!(no_reason.problem(422).contains("reason"));
    let blank_reason = admin
        .put(REFUND_FLAG, json!({"enabled": false, "reason": "  "}))
        .await;
    blank_reason.problem(422);
    let no_enabled = admin.put(REFUND_FLAG, json!({"reason": "x"})).await;
    assert!(no_enabled.problem(422).contains("enabled"));
    let typo = admin
        .put(
            REFUND_FLAG,
            json!({"enabled": false, "reason": "x", "enabld": false}),
        )
        .await;
    assert!(typo.problem(422).contains("enabld"));
    let long_reason = admin
        .put(
            REFUND_FLAG,
            json!({"enabled": false, "reason": "x".repeat(5000)}),
        )
        .await;
    assert!(long_reason.problem(422).contains("limit is 4096"));
    let long_actor = admin
        .put(
            REFUND_FLAG,
            json!({"enabled": false, "reason": "x", "actor": "a".repeat(300)}),
        )
        .await;
    assert!(long_actor.problem(422).contains("limit is 256"));
    let malformed = admin
        .send(
            "PUT",
            REFUND_FLAG,
            Some(TOKEN),
            Some("{\"enabled\": fal".to_owned()),
        )
        .await;
    malformed.problem(400);
    let huge = admin
        .send(
            "PUT",
            REFUND_FLAG,
            Some(TOKEN),
            Some(json!({"enabled": false, "reason": "x".repeat(64 * 1024)}).to_string()),
        )
        .await;
    huge.problem(413);
    assert!(admin.ledger.tool_flags().await.unwrap().is_empty());
}

#[tokio::test]
async fn intents_are_listed_newest_first_filtered_and_paged() {
    let admin = start(Some(TOKEN), None).await;
    let a = admin.done("acme", "refund_order", "refund:a", "re_1").await;
    let b = admin.unknown_refund("acme", "refund:b").await;
    let c = admin.done("globex", "send_email", "email:c", "em_1").await;
    let d = admin.unknown_refund("globex", "refund:d").await;
    let e = admin.in_flight("acme", "send_email", "email:e").await;
    let ids = |answer: &Answer| -> Vec<i64> {
        assert_eq!(answer.status, 200, "{}", answer.body);
        answer.body["intents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|intent| intent["id"].as_i64().unwrap())
            .collect()
    };

    let all = admin.get("/v1/admin/intents").await;
    assert_eq!(ids(&all), [e.id, d.id, c.id, b.id, a.id]);
    assert_eq!(all.body["next_cursor"], Value::Null);
    let first = &all.body["intents"][4];
    assert_eq!(first["tenant"], "acme");
    assert_eq!(first["tool"], "refund_order");
    assert_eq!(first["key"], "refund:a");
    assert_eq!(first["status"], "done");
    assert_eq!(first["external_id"], "re_1");
    assert_eq!(first["call_count"], 1);

    let oldest = admin.get("/v1/admin/intents?order=oldest").await;
    assert_eq!(ids(&oldest), [a.id, b.id, c.id, d.id, e.id]);
    let refunds = admin.get("/v1/admin/intents?tool=refund_order").await;
    assert_eq!(ids(&refunds), [d.id, b.id, a.id]);
    let unknown = admin.get("/v1/admin/intents?status=unknown").await;
    assert_eq!(ids(&unknown), [d.id, b.id]);
    let in_flight = admin.get("/v1/admin/intents?status=in_flight").await;
    assert_eq!(ids(&in_flight), [e.id]);
    let acme_unknown = admin
        .get("/v1/admin/intents?tenant=acme&status=unknown")
        .await;
    assert_eq!(ids(&acme_unknown), [b.id]);
    let by_key = admin
        .get("/v1/admin/intents?key=email:c&tool=send_email&tenant=globex")
        .await;
    assert_eq!(ids(&by_key), [c.id]);
    let nothing = admin.get("/v1/admin/intents?tenant=initech").await;
    assert_eq!(ids(&nothing), Vec::<i64>::new());

    // Pages of two, following next_cursor, in both orders: every intent once.
    for (order, expected) in [
        ("newest", vec![e.id, d.id, c.id, b.id, a.id]),
        ("oldest", vec![a.id, b.id, c.id, d.id, e.id]),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<i64> = None;
        let mut pages = 0;
        loop {
            let path = match cursor {
                Some(cursor) => format!("/v1/admin/intents?order={order}&limit=2&cursor={cursor}"),
                None => format!("/v1/admin/intents?order={order}&limit=2"),
            };
            let page = admin.get(&path).await;
            seen.extend(ids(&page));
            pages += 1;
            match page.body["next_cursor"].as_i64() {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, expected, "{order}");
        assert_eq!(pages, 3, "{order}");
    }
    // A page that ends exactly at the last intent has no next page.
    let exact = admin.get("/v1/admin/intents?limit=5").await;
    assert_eq!(ids(&exact).len(), 5);
    assert_eq!(exact.body["next_cursor"], Value::Null);
}

#[tokio::test]
async fn a_wrong_query_is_400_naming_what_is_accepted() {
    let admin = start(Some(TOKEN), None).await;
    let status = admin.get("/v1/admin/intents?status=lost").await;
    let detail = status.problem(400);
    assert!(
        detail.contains("lost") && detail.contains("not_executed") && detail.contains("in_flight"),
        "{detail}"
    );
    let order = admin.get("/v1/admin/intents?order=sideways").await;
    assert!(order.problem(400).contains("newest"));
    for limit in ["0", "1001", "many", "-1"] {
        let answer = admin.get(&format!("/v1/admin/intents?limit={limit}")).await;
        assert!(answer.problem(400).contains("1 to 1000"), "{limit}");
    }
    let cursor = admin.get("/v1/admin/intents?cursor=abc").await;
    assert!(cursor.problem(400).contains("next_cursor"));
    // A misspelt filter must not list everything.
    let typo = admin.get("/v1/admin/intents?staus=unknown").await;
    assert!(typo.problem(400).contains("staus"));
    let runs = admin.get("/v1/admin/reconciliations?limit=0").await;
    runs.problem(400);
}

#[tokio::test]
async fn an_intent_is_shown_with_its_event_log() {
    let admin = start(Some(TOKEN), None).await;
    let unknown = admin.unknown_refund("acme", "refund:o1").await;
    let shown = admin
        .get(&format!("/v1/admin/intents/{}", unknown.id))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.body["intent"]["id"], unknown.id);
    assert_eq!(shown.body["intent"]["status"], "unknown");
    let kinds: Vec<(&str, Option<&str>)> = shown.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| (event["kind"].as_str().unwrap(), event["to_status"].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("created", Some("pending")),
            ("transition", Some("in_flight")),
            ("transition", Some("unknown")),
        ]
    );
    assert_eq!(shown.body["events_omitted"], 0);

    admin.get("/v1/admin/intents/987654").await.problem(404);
    admin.get("/v1/admin/intents/abc").await.problem(400);
}

#[tokio::test]
async fn an_unknown_intent_is_resolved_by_hand_and_the_event_names_actor_and_reason() {
    let admin = start(Some(TOKEN), None).await;
    let unknown = admin.unknown_refund("acme", "refund:o1").await;
    let path = format!("/v1/admin/intents/{}/resolve", unknown.id);
    let resolved = admin
        .post(
            &path,
            json!({"status": "done", "external_id": "re_000042", "reason": "in the provider's dashboard", "actor": "alice"}),
        )
        .await;
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    assert_eq!(resolved.body["id"], unknown.id);
    assert_eq!(resolved.body["status"], "done");
    assert_eq!(resolved.body["external_id"], "re_000042");
    assert_eq!(resolved.body["resolved_by"], "alice");

    let stored = admin.ledger.get_by_id(unknown.id).await.unwrap().unwrap();
    assert_eq!(stored.status, IntentStatus::Done);
    assert_eq!(stored.external_id.as_deref(), Some("re_000042"));
    let events = admin.ledger.events(unknown.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "resolve");
    assert_eq!(last.from_status.as_deref(), Some("unknown"));
    assert_eq!(last.to_status.as_deref(), Some("done"));
    assert_eq!(last.actor.as_deref(), Some("alice"));
    assert_eq!(last.detail.as_deref(), Some("in the provider's dashboard"));

    // A done intent is final: 409, saying what it is.
    let again = admin
        .post(
            &path,
            json!({"status": "not_executed", "reason": "undo", "actor": "mallory"}),
        )
        .await;
    let detail = again.problem(409);
    assert!(detail.contains("current status: done"), "{detail}");
    assert!(detail.contains("re_000042"), "{detail}");
    assert_eq!(admin.ledger.events(unknown.id).await.unwrap(), events);

    // not_executed, with the server's default actor.
    let other = admin.unknown_refund("acme", "refund:o2").await;
    let not_executed = admin
        .post(
            &format!("/v1/admin/intents/{}/resolve", other.id),
            json!({"status": "not_executed", "reason": "the provider has no such refund"}),
        )
        .await;
    assert_eq!(not_executed.status, 200, "{}", not_executed.body);
    assert_eq!(not_executed.body["status"], "not_executed");
    assert_eq!(not_executed.body["resolved_by"], ACTOR_DEFAULT);
    let shown = admin.get(&format!("/v1/admin/intents/{}", other.id)).await;
    let last = shown.body["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "resolve");
    assert_eq!(last["actor"], ACTOR_DEFAULT);
    assert_eq!(last["detail"], "the provider has no such refund");
}

/// Before, a refusal stored wrongly (a 401 from a wrong API key was `rejected`) was replayed
/// forever: `resolve` takes only unknown intents. Reopened, the next call executes it once,
/// and the event log names who and why.
#[tokio::test]
async fn a_rejected_intent_reopened_by_hand_executes_on_the_next_call() {
    use intentgate_core::CallStatus;
    use intentgate_mock::{FakeProvider, FaultPlan, Scripted, Shape};
    use intentgate_test_support::{call, default_gate, refund, refund_tool};

    let admin = start(Some(TOKEN), None).await;
    let clock: Arc<dyn intentgate_gate::Clock> = Arc::new(intentgate_gate::SystemClock);
    let provider = Arc::new(FakeProvider::new(7, FaultPlan::none(), clock.clone()));
    let gate = default_gate(
        vec![refund_tool()],
        admin.ledger.clone(),
        provider.clone(),
        clock,
    );
    provider.script([Scripted {
        shape: Shape::Reject,
        commit: false,
    }]);
    let arguments = refund("8812", json!(49));
    let first = call(&gate, "refund_order", arguments.clone()).await;
    assert_eq!(first.status, CallStatus::Rejected);
    let again = call(&gate, "refund_order", arguments.clone()).await;
    assert_eq!(
        again.status,
        CallStatus::Rejected,
        "replayed from the ledger"
    );
    let intent = admin
        .ledger
        .get("default", "refund_order", "refund:8812:49.00")
        .await
        .unwrap()
        .unwrap();
    let path = format!("/v1/admin/intents/{}/reopen", intent.id);

    // resolve refuses a rejected intent and says to reopen it.
    let resolve = admin
        .post(
            &format!("/v1/admin/intents/{}/resolve", intent.id),
            json!({"status": "not_executed", "reason": "r"}),
        )
        .await;
    assert!(
        resolve.problem(409).contains("intents reopen"),
        "{}",
        resolve.body
    );
    // A reason is required.
    let no_reason = admin.post(&path, json!({"actor": "alice"})).await;
    assert!(no_reason.problem(422).contains("reason is required"));

    let reopened = admin
        .post(
            &path,
            json!({"reason": "the refusal was our expired API key; rotated", "actor": "alice"}),
        )
        .await;
    assert_eq!(reopened.status, 200, "{}", reopened.body);
    assert_eq!(reopened.body["status"], "not_executed");
    assert_eq!(reopened.body["resolved_by"], "alice");
    assert_eq!(reopened.body["result"], Value::Null);

    let next = call(&gate, "refund_order", arguments.clone()).await;
    assert_eq!(next.status, CallStatus::Done, "{next:?}");
    let repeat = call(&gate, "refund_order", arguments).await;
    assert_eq!(repeat.status, CallStatus::AlreadyDone);
    assert_eq!(provider.effect_count("refund:8812:49.00"), 1);
    let effects = provider.effects();
    // The reopened intent's provider key is a new epoch's: the refused one is never reused.
    assert_eq!(
        effects[0].idempotency_key.as_deref(),
        Some("refund_order:refund:8812:49.00#2")
    );

    let shown = admin.get(&format!("/v1/admin/intents/{}", intent.id)).await;
    let events = shown.body["events"].as_array().unwrap();
    let reopen = events
        .iter()
        .find(|event| event["kind"] == "reopen")
        .expect("a reopen event");
    assert_eq!(reopen["actor"], "alice");
    assert_eq!(
        reopen["detail"],
        "the refusal was our expired API key; rotated"
    );
    assert_eq!(
        (&reopen["from_status"], &reopen["to_status"]),
        (&json!("rejected"), &json!("not_executed"))
    );

    // A done intent is not reopened.
    let done = admin.post(&path, json!({"reason": "undo"})).await;
    assert!(
        done.problem(409).contains("effect happened"),
        "{}",
        done.body
    );
}

#[tokio::test]
async fn a_resolution_is_validated_before_anything_is_written() {
    let admin = start(Some(TOKEN), None).await;
    let unknown = admin.unknown_refund("acme", "refund:o1").await;
    let path = format!("/v1/admin/intents/{}/resolve", unknown.id);
    let cases = [
        (
            json!({"status": "done", "reason": "seen"}),
            422,
            "external id",
        ),
        (
            json!({"status": "done", "external_id": "", "reason": "seen"}),
            422,
            "external id",
        ),
        (
            json!({"status": "rejected", "reason": "seen"}),
            422,
            "done or not_executed",
        ),
        (
            json!({"status": "unknown", "reason": "seen"}),
            422,
            "done or not_executed",
        ),
        (json!({"status": "not_executed"}), 422, "reason"),
        (
            json!({"status": "not_executed", "reason": " "}),
            422,
            "reason",
        ),
        (json!({"reason": "seen"}), 422, "status"),
        (
            json!({"status": "not_executed", "external_id": "re_1", "reason": "seen"}),
            422,
            "no external id",
        ),
        (
            json!({"status": "not_executed", "reason": "x".repeat(4097)}),
            422,
            "limit is 4096",
        ),
        (
            json!({"status": "not_executed", "reason": "r", "actor": "a".repeat(257)}),
            422,
            "limit is 256",
        ),
        (
            json!({"status": "done", "external_id": "e".repeat(257), "reason": "r"}),
            422,
            "limit is 256",
        ),
        (
            json!({"status": "not_executed", "reason": "r", "by": "x"}),
            422,
            "unknown field",
        ),
    ];
    for (body, status, needle) in cases {
        let answer = admin.post(&path, body.clone()).await;
        let detail = answer.problem(status);
        assert!(detail.contains(needle), "{body}: {detail}");
    }
    admin
        .send("POST", &path, Some(TOKEN), Some("not json".to_owned()))
        .await
        .problem(400);
    admin
        .send(
            "POST",
            &path,
            Some(TOKEN),
            Some(json!({"status": "not_executed", "reason": "x".repeat(20_000)}).to_string()),
        )
        .await
        .problem(413);
    let stored = admin.ledger.get_by_id(unknown.id).await.unwrap().unwrap();
    assert_eq!(stored, unknown, "nothing was written");

    let missing = admin
        .post(
            "/v1/admin/intents/987654/resolve",
            json!({"status": "not_executed", "reason": "r"}),
        )
        .await;
    assert!(missing.problem(404).contains("987654"));

    // A call holding the lease is executing it right now: not resolvable until it ends.
    let running = admin.in_flight("acme", "refund_order", "refund:o3").await;
    let held = admin
        .post(
            &format!("/v1/admin/intents/{}/resolve", running.id),
            json!({"status": "not_executed", "reason": "r"}),
        )
        .await;
    let detail = held.problem(409);
    assert!(
        detail.contains("current status: in_flight") && detail.contains("lease"),
        "{detail}"
    );
}

/// A `refund_order` intent of `arguments` (JSON text, so that `49.00` keeps its text) whose
/// first attempt ended unknown, as a timeout followed by a lookup that found nothing leaves
/// it; with `resend_stopped`, as a replayed 5xx leaves it.
async fn unknown_refund_of(
    admin: &Admin,
    arguments: &str,
    key: &str,
    resend_stopped: Option<ResendStop>,
) -> IntentRecord {
    let arguments: Value = serde_json::from_str(arguments).unwrap();
    let intent = admin
        .begin_new("acme", "refund_order", key, arguments, "test/call")
        .await;
    let now_ms = now_ms();
    let finished = admin
        .ledger
        .finish(Finish {
            id: intent.id,
            lease_owner: "test/call".into(),
            attempt: intent.attempt,
            now_ms,
            status: IntentStatus::Unknown,
            result: None,
            external_id: None,
            resolved_by: "lookup",
            looked_up: true,
            detail: "timed out after 10000 ms; the lookup found nothing".into(),
            lease_required: false,
            resend_stopped,
        })
        .await
        .unwrap();
    match finished {
        Finished::Recorded(intent) => intent,
        other => panic!("expected the finish to be recorded, got {other:?}"),
    }
}

/// An operator on call could not tell from an unknown intent what it was for (no amount), what
/// to search for in the provider's dashboard (no provider key), how long it had been unknown,
/// what went wrong, or that the sweeper was still re-sending it. The admin API now says all of
/// that, from the ledger and from the gate beside it.
#[tokio::test]
async fn an_unknown_intent_is_listed_with_its_amount_provider_key_age_last_error_and_sweeper() {
    let (admin, gate) = start_beside_a_gate().await;
    let before_ms = now_ms();
    let unknown = unknown_refund_of(
        &admin,
        r#"{"order_id": "8812", "amount": 49.00}"#,
        "refund:8812:49.00",
        None,
    )
    .await;
    let stopped = unknown_refund_of(
        &admin,
        r#"{"order_id": "8813", "amount": 12.5}"#,
        "refund:8813:12.50",
        Some(ResendStop::ReplayedServerError),
    )
    .await;
    // A first attempt still running is an ordinary call: not listed.
    admin
        .in_flight("acme", "refund_order", "refund:8814:1.00")
        .await;

    let listed = admin.get("/v1/admin/unknown").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["more"], false);
    let entries = listed.body["intents"].as_array().unwrap();
    let ids: Vec<&Value> = entries.iter().map(|entry| &entry["intent"]["id"]).collect();
    assert_eq!(ids, [&json!(unknown.id), &json!(stopped.id)]);

    let card = &entries[0];
    assert_eq!(
        card["provider_key"],
        intentgate_core::key::provider_key("acme", "refund_order", "refund:8812:49.00", 1)
    );
    // The amount as the caller wrote it (its exact text), found through the key's
    // `{amount:.2}`.
    assert_eq!(card["amount"], json!({"amount": "49.00"}));
    let since_ms = card["unknown_since_ms"].as_i64().unwrap();
    assert!(
        (before_ms..=now_ms()).contains(&since_ms),
        "{since_ms} not in {before_ms}.."
    );
    assert_eq!(
        card["last_error"],
        "timed out after 10000 ms; the lookup found nothing"
    );
    assert_eq!(card["lease"], Value::Null);
    assert_eq!(card["resolvable"]["now"], true);
    let sweeper = &card["sweeper"];
    assert_eq!(sweeper["resends"], "active", "{sweeper}");
    let until_ms = sweeper["resend_until_ms"].as_i64().unwrap();
    let window_ms = RESEND_WINDOW.as_millis() as i64;
    assert!(
        until_ms < unknown.first_seen_ms + window_ms
            && until_ms > unknown.first_seen_ms + window_ms - 5 * 60 * 1000,
        "{until_ms}"
    );
    // The next step: one backoff after the attempt's lookup.
    let next_ms = sweeper["next_step_ms"].as_i64().unwrap();
    assert_eq!(
        next_ms,
        unknown.last_lookup_ms.unwrap() + gate.options().resolution.backoff(1).as_millis() as i64
    );

    let stopped_card = &entries[1];
    assert_eq!(stopped_card["sweeper"]["resends"], "stopped");
    assert!(
        stopped_card["sweeper"]["why"]
            .as_str()
            .unwrap()
            .contains("replays a stored server error"),
        "{}",
        stopped_card["sweeper"]
    );
    assert_eq!(stopped_card["amount"], json!({"amount": "12.5"}));

    // One intent's page says the same, beside its event log.
    let shown = admin
        .get(&format!("/v1/admin/intents/{}", unknown.id))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    for field in [
        "provider_key",
        "amount",
        "unknown_since_ms",
        "last_error",
        "sweeper",
        "resolvable",
    ] {
        assert_eq!(shown.body[field], card[field], "{field}");
    }
}

/// The console invited a person to resolve an intent the sweeper was re-sending (intent 52,
/// on automatic attempt 7): a not_executed resolution could land while a re-send committed at
/// the provider. While the sweeper (or any caller) holds the lease, a resolution is a 409
/// that names the holder and the lease's end, with `Retry-After`; nothing is written; once
/// the lease is over, the same resolution goes through.
#[tokio::test]
async fn a_resolution_is_refused_while_the_sweeper_holds_the_lease_and_says_until_when() {
    let (admin, _gate) = start_beside_a_gate().await;
    let unknown = unknown_refund_of(
        &admin,
        r#"{"order_id": "8852", "amount": 49.00}"#,
        "refund:8852:49.00",
        None,
    )
    .await;
    // The sweeper of a gateway process takes its lookup lease, as `Gate::sweep` does.
    let lease_ms: i64 = 2_500;
    let taken_ms = now_ms();
    let mut request = BeginRequest {
        tenant: unknown.tenant.clone(),
        tool: unknown.tool.clone(),
        key: unknown.key.clone(),
        fingerprint: unknown.fingerprint.clone(),
        arguments: unknown.arguments.clone(),
        lease_owner: "4242-ab12/sweeper/7".into(),
        lease_expires_ms: taken_ms + lease_ms,
        now_ms: taken_ms,
        count_call: false,
        retry_rejected: false,
        lookup_interval_ms: 0,
        resend_unknown: false,
        expect_new: false,
        policies: None,
    };
    let begun = admin.ledger.begin(request.clone()).await.unwrap();
    let Begin::Lookup(leased) = begun else {
        panic!("expected the sweeper's lookup lease, got {begun:?}");
    };

    let shown = admin
        .get(&format!("/v1/admin/intents/{}", unknown.id))
        .await;
    assert_eq!(shown.body["lease"]["holder"], "sweeper", "{}", shown.body);
    assert_eq!(shown.body["lease"]["expires_ms"], taken_ms + lease_ms);
    assert_eq!(shown.body["resolvable"]["now"], false);
    assert!(
        shown.body["resolvable"]["reason"]
            .as_str()
            .unwrap()
            .contains("the sweeper holds its lease")
    );
    let listed = admin.get("/v1/admin/unknown").await;
    assert_eq!(listed.body["intents"][0]["lease"]["holder"], "sweeper");

    let path = format!("/v1/admin/intents/{}/resolve", unknown.id);
    let refused = admin
        .post(
            &path,
            json!({"status": "not_executed", "reason": "not in the provider's dashboard"}),
        )
        .await;
    let detail = refused.problem(409).to_owned();
    assert_eq!(refused.body["type"], "urn:intentgate:problem:lease-held");
    let until = jiff::Timestamp::from_millisecond(taken_ms + lease_ms)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    assert!(
        detail.contains(&format!("the sweeper holds its lease until {until}"))
            && detail.contains("looking it up at the provider")
            && detail.contains(&format!("Try again after {until}")),
        "{detail}"
    );
    let retry_after: u64 = refused.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=3).contains(&retry_after), "{retry_after}");
    let stored = admin.ledger.get_by_id(unknown.id).await.unwrap().unwrap();
    assert_eq!(stored, leased, "nothing was written");

    // A re-send under the sweeper's lease (the intent in flight again) is refused alike.
    tokio::time::sleep(Duration::from_millis(
        (taken_ms + lease_ms - now_ms()).max(0) as u64 + 10,
    ))
    .await;
    request.resend_unknown = true;
    request.lease_owner = "4242-ab12/sweeper/8".into();
    request.now_ms = now_ms();
    request.lease_expires_ms = request.now_ms + lease_ms;
    let resend_until_ms = request.lease_expires_ms;
    let begun = admin.ledger.begin(request).await.unwrap();
    let Begin::Execute(resending) = begun else {
        panic!("expected the sweeper's re-send, got {begun:?}");
    };
    assert_eq!(resending.attempt, 2);
    let listed = admin.get("/v1/admin/unknown").await;
    assert_eq!(
        listed.body["intents"][0]["intent"]["status"], "in_flight",
        "a re-send in flight is still listed: {}",
        listed.body
    );
    let refused = admin
        .post(
            &path,
            json!({"status": "done", "external_id": "re_1", "reason": "seen"}),
        )
        .await;
    let detail = refused.problem(409);
    assert!(
        detail.contains("re-sending it with its provider key"),
        "{detail}"
    );

    // Once the lease is over, the same resolution goes through.
    tokio::time::sleep(Duration::from_millis(
        (resend_until_ms - now_ms()).max(0) as u64 + 10,
    ))
    .await;
    let resolved = admin
        .post(
            &path,
            json!({"status": "not_executed", "reason": "not in the provider's dashboard"}),
        )
        .await;
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    assert_eq!(resolved.body["status"], "not_executed");
}

/// A reconciler that records what it was asked and answers a fixed report; when `hold` is
/// set, it waits for it before answering.
#[derive(Default)]
struct FakeReconciler {
    asked: Mutex<Vec<(Duration, String)>>,
    started: Notify,
    hold: Option<Arc<Notify>>,
}

#[async_trait]
impl Reconciler for FakeReconciler {
    async fn reconcile(&self, since: Duration, actor: &str) -> Result<Value, String> {
        self.asked.lock().unwrap().push((since, actor.to_owned()));
        self.started.notify_one();
        if let Some(hold) = &self.hold {
            hold.notified().await;
        }
        if since == Duration::from_secs(13) {
            return Err("the provider's list endpoint answered 500".to_owned());
        }
        Ok(json!({"intents_checked": 3, "mismatches": []}))
    }
}

#[tokio::test]
async fn reconcile_runs_the_reconciler_and_answers_its_report() {
    let fake = Arc::new(FakeReconciler::default());
    let admin = start(Some(TOKEN), Some(fake.clone())).await;
    let report = admin
        .post(
            "/v1/admin/reconcile",
            json!({"since": "1h", "actor": "alice"}),
        )
        .await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.body, json!({"intents_checked": 3, "mismatches": []}));
    let defaulted = admin
        .post("/v1/admin/reconcile", json!({"since": "2d"}))
        .await;
    assert_eq!(defaulted.status, 200);
    assert_eq!(
        *fake.asked.lock().unwrap(),
        [
            (Duration::from_secs(3600), "alice".to_owned()),
            (Duration::from_secs(2 * 86_400), ACTOR_DEFAULT.to_owned()),
        ]
    );

    let failed = admin
        .post("/v1/admin/reconcile", json!({"since": "13s"}))
        .await;
    assert!(failed.problem(500).contains("list endpoint answered 500"));
    for (body, needle) in [
        (json!({"since": "1 hour"}), "30s, 15m, 1h, 2d"),
        (json!({"since": "0s"}), "positive"),
        (json!({"since": "400d"}), "366 days"),
        (json!({}), "since"),
        (json!({"since": "1h", "window": "x"}), "unknown field"),
    ] {
        let answer = admin.post("/v1/admin/reconcile", body.clone()).await;
        assert!(
            answer.problem(422).contains(needle),
            "{body}: {}",
            answer.body
        );
    }
    assert_eq!(fake.asked.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn one_reconciliation_runs_at_a_time() {
    let hold = Arc::new(Notify::new());
    let fake = Arc::new(FakeReconciler {
        hold: Some(hold.clone()),
        ..FakeReconciler::default()
    });
    let admin = Arc::new(start(Some(TOKEN), Some(fake.clone())).await);
    let first = {
        let admin = admin.clone();
        tokio::spawn(async move {
            admin
                .post("/v1/admin/reconcile", json!({"since": "15m"}))
                .await
                .status
        })
    };
    fake.started.notified().await;
    let second = admin
        .post("/v1/admin/reconcile", json!({"since": "15m"}))
        .await;
    assert!(
        second
            .problem(409)
            .contains("one reconciliation runs at a time")
    );
    hold.notify_one();
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(fake.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn without_a_reconciler_reconcile_is_501_and_stored_runs_are_still_listed() {
    let admin = start(Some(TOKEN), None).await;
    let answer = admin
        .post("/v1/admin/reconcile", json!({"since": "1h"}))
        .await;
    assert!(answer.problem(501).contains("reconcil"));
    let runs = admin.get("/v1/admin/reconciliations").await;
    assert_eq!(runs.status, 200, "{}", runs.body);
    assert_eq!(runs.body, json!({"reconciliations": []}));
    admin.get("/v1/admin/reconciliations/12").await.problem(404);

    // Runs stored in the ledger (by `intentgate reconcile`, another replica, the hourly
    // job), newest first, each with its mismatches.
    let mut ids = Vec::new();
    for (hour, found) in [(1, 0u64), (2, 2)] {
        let started_ms = now_ms() + hour;
        let run = ReconciliationRun {
            id: 0,
            started_ms,
            finished_ms: started_ms + 5,
            since_ms: started_ms - 3_600_000,
            until_ms: started_ms,
            actor: "serve".into(),
            intents_checked: 10,
            records_checked: 11,
            mismatches: found,
            critical: found.min(1),
            summary: json!({}),
        };
        let mismatches: Vec<StoredMismatch> = (0..found)
            .map(|index| StoredMismatch {
                run_id: 0,
                tool: "refund_order".into(),
                kind: if index == 0 { "duplicate" } else { "no_intent" }.into(),
                severity: if index == 0 { "critical" } else { "warning" }.into(),
                intent_id: None,
                tenant: None,
                intent_key: Some(format!("refund:o{index}:10.00")),
                external_ids: vec![format!("re_{index}")],
                subject: Some(format!("o{index}")),
                detail: "found by the test".into(),
            })
            .collect();
        ids.push(
            admin
                .ledger
                .record_reconciliation(&run, &mismatches)
                .await
                .unwrap(),
        );
    }
    let runs = admin.get("/v1/admin/reconciliations").await;
    let listed: Vec<i64> = runs.body["reconciliations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_i64().unwrap())
        .collect();
    assert_eq!(listed, [ids[1], ids[0]], "{}", runs.body);
    let latest = admin.get("/v1/admin/reconciliations?limit=1").await;
    assert_eq!(latest.body["reconciliations"].as_array().unwrap().len(), 1);
    let shown = admin
        .get(&format!("/v1/admin/reconciliations/{}", ids[1]))
        .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(shown.body["reconciliation"]["id"], ids[1]);
    assert_eq!(shown.body["reconciliation"]["critical"], 1);
    let kinds: Vec<&str> = shown.body["mismatches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|mismatch| mismatch["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["duplicate", "no_intent"]);
    assert_eq!(shown.body["mismatches"][0]["external_ids"], json!(["re_0"]));
    assert_eq!(shown.body["mismatches_not_shown"], 0);
    let first = admin
        .get(&format!("/v1/admin/reconciliations/{}?limit=1", ids[1]))
        .await;
    assert_eq!(first.body["mismatches"].as_array().unwrap().len(), 1);
    assert_eq!(first.body["mismatches_not_shown"], 1);
    admin
        .get("/v1/admin/reconciliations/twelve")
        .await
        .problem(400);
}

#[tokio::test]
async fn unknown_admin_routes_and_methods_get_problems() {
    let admin = start(Some(TOKEN), None).await;
    assert!(
        admin
            .get("/v1/admin/nothing-here")
            .await
            .problem(404)
            .contains("/v1/admin/flags")
    );
    admin.get("/v1/admin/reconcile").await.problem(405);
    admin
        .send("DELETE", REFUND_FLAG, Some(TOKEN), None)
        .await
        .problem(405);
}

#[test]
fn a_token_shorter_than_32_bytes_is_refused_saying_how_to_make_one() {
    // 16 bytes of `a` used to start an admin API.
    for short in ["a".repeat(16), "b".repeat(31)] {
        let error = intentgate_admin::check_token(&short)
            .unwrap_err()
            .to_string();
        assert!(error.contains("shorter than 32"), "{error}");
        assert!(error.contains("openssl rand -hex 32"), "{error}");
        assert!(
            !error.contains(&short),
            "the token is in the message: {error}"
        );
    }
    assert_eq!(intentgate_admin::check_token(&"c".repeat(32)), Ok(()));
    let spaced = format!("{} {}", "d".repeat(20), "d".repeat(20));
    assert!(intentgate_admin::check_token(&spaced).is_err());
}

/// Wrong tokens from one address get 429 past the limit. Before, the right token got 429
/// too, so anyone sharing the operator's address (behind a proxy, everyone) could keep the
/// admin API and the kill switch locked; now the right token always works.
#[tokio::test]
async fn wrong_tokens_from_one_address_get_429_but_the_right_token_still_works() {
    let limit = FailureLimit::default();
    let admin = start_with(Some(TOKEN), None, limit, None).await;
    let wrong = "wrong-admin-token-wrong-admin-token";
    for _ in 0..limit.failures {
        admin
            .send("GET", "/v1/admin/flags", Some(wrong), None)
            .await
            .problem(401);
    }
    let refused = admin
        .send("GET", "/v1/admin/flags", Some(wrong), None)
        .await;
    let detail = refused.problem(429).to_owned();
    assert!(
        detail.contains("5 wrong admin tokens within 60 s"),
        "{detail}"
    );
    let retry_after: u64 = refused.retry_after.as_deref().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    // No token at all is not a guess: still the 401 that says what to send.
    admin
        .send("GET", "/v1/admin/flags", None, None)
        .await
        .problem(401);
    // The right token from the same address works, the kill switch included.
    assert_eq!(admin.get("/v1/admin/flags").await.status, 200);
    let write = admin
        .send(
            "PUT",
            REFUND_FLAG,
            Some(TOKEN),
            Some(json!({"enabled": false, "reason": "INC-9"}).to_string()),
        )
        .await;
    assert_eq!(write.status, 200, "{}", write.body);
    let flags = admin.ledger.tool_flags().await.unwrap();
    assert!(
        flags
            .iter()
            .any(|flag| flag.tool == "refund_order" && !flag.enabled)
    );
}

/// The right token clears the count of wrong ones, so an operator's typos don't add up.
#[tokio::test]
async fn a_right_token_clears_the_count_of_wrong_ones() {
    let limit = FailureLimit {
        failures: 2,
        window: Duration::from_secs(600),
    };
    let admin = start_with(Some(TOKEN), None, limit, None).await;
    for _ in 0..2 {
        admin
            .send("GET", "/v1/admin/flags", Some("not-the-token"), None)
            .await
            .problem(401);
    }
    let refused = admin
        .send("GET", "/v1/admin/flags", Some("not-the-token"), None)
        .await;
    refused.problem(429);
    assert_eq!(admin.get("/v1/admin/flags").await.status, 200);
    admin
        .send("GET", "/v1/admin/flags", Some("not-the-token"), None)
        .await
        .problem(401);
}

/// Behind a reverse proxy every request's peer is the proxy. With the proxy trusted, each
/// client its `X-Forwarded-For` names is counted apart, and a client can't pick its own
/// count by writing the header itself: the rightmost hop the proxy did not write counts.
#[tokio::test]
async fn behind_a_trusted_proxy_two_clients_are_counted_apart() {
    let limit = FailureLimit {
        failures: 2,
        window: Duration::from_secs(600),
    };
    let admin = start_behind(Some(TOKEN), limit, vec!["127.0.0.0/8".parse().unwrap()]).await;
    let from = |client: &str, token: &str| {
        let request = admin
            .client
            .get(format!("{}/v1/admin/flags", admin.base))
            .header("x-forwarded-for", client)
            .bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let wrong = "not-the-token";
    assert_eq!(from("198.51.100.1", wrong).await, 401);
    assert_eq!(from("198.51.100.1", wrong).await, 401);
    assert_eq!(from("198.51.100.1", wrong).await, 429);
    // Another client behind the same proxy has its own count.
    assert_eq!(from("198.51.100.2", wrong).await, 401);
    // Client .2 writing a fresh address in front of what the proxy appends is still .2.
    assert_eq!(from("203.0.113.50, 198.51.100.2", wrong).await, 401);
    assert_eq!(from("198.51.100.2", wrong).await, 429);
    assert_eq!(from("198.51.100.1", TOKEN).await, 200);
}

/// Without trusted proxies, `X-Forwarded-For` changes nothing: the peer is counted.
#[tokio::test]
async fn without_trusted_proxies_the_forwarded_header_is_ignored() {
    let limit = FailureLimit {
        failures: 2,
        window: Duration::from_secs(600),
    };
    let admin = start_with(Some(TOKEN), None, limit, None).await;
    for (client, expected) in [
        ("198.51.100.1", 401),
        ("198.51.100.2", 401),
        ("198.51.100.3", 429),
    ] {
        let status = admin
            .client
            .get(format!("{}/v1/admin/flags", admin.base))
            .header("x-forwarded-for", client)
            .bearer_auth("not-the-token")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, expected, "{client}");
    }
}

/// A customer's data could not be deleted at all; now a tenant's intents go on request, by
/// tenant, tool or key, except those a call holds or (without force) whose outcome is not
/// known yet.
#[tokio::test]
async fn a_tenants_intents_are_erased_on_request_but_never_under_a_running_call() {
    let admin = start(Some(TOKEN), None).await;
    let refund = admin.done("acme", "refund_order", "k1", "re_1").await;
    let email = admin.done("acme", "send_email", "k2", "em_1").await;
    let running = admin.in_flight("acme", "refund_order", "k3").await;
    let other = admin.done("globex", "refund_order", "k1", "re_2").await;
    let erase = |body: Value| admin.post("/v1/admin/erasures", body);

    let refused = erase(json!({"tenant": "acme", "reason": "request 77", "force": true})).await;
    let detail = refused.problem(409);
    assert!(
        detail.contains(&running.id.to_string()) && detail.contains("running"),
        "{detail}"
    );
    for kept in [&refund, &email, &running] {
        assert!(admin.ledger.get_by_id(kept.id).await.unwrap().is_some());
    }

    let one = erase(json!({"tenant": "acme", "tool": "send_email", "key": "k2",
        "reason": "request 77", "actor": "dpo"}))
    .await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.body["erased"]["intents"], 1);
    assert_eq!(one.body["erased"]["more"], false);
    assert!(one.body["erased"]["events"].as_u64().unwrap() >= 2);
    assert!(admin.ledger.get_by_id(email.id).await.unwrap().is_none());

    // Unknown: the refund may have happened. Refused without force, erased with it.
    let unknown = admin.unknown_refund("initech", "k4").await;
    admin.done("initech", "refund_order", "k5", "re_5").await;
    let refused = erase(json!({"tenant": "initech", "reason": "request 78"})).await;
    let detail = refused.problem(409);
    assert!(
        detail.contains(&unknown.id.to_string()) && detail.contains("not settled"),
        "{detail}"
    );
    let forced = erase(json!({"tenant": "initech", "reason": "request 78", "force": true})).await;
    assert_eq!(forced.status, 200, "{}", forced.body);
    assert_eq!(forced.body["erased"]["intents"], 2);

    assert_eq!(admin.ledger.get_by_id(other.id).await.unwrap(), Some(other));
}

#[tokio::test]
async fn an_erasure_is_validated_before_anything_is_erased() {
    let admin = start(Some(TOKEN), None).await;
    let kept = admin.done("acme", "refund_order", "k1", "re_1").await;
    for (body, says) in [
        (json!({"tenant": "acme"}), "a reason is required"),
        (
            json!({"tenant": "acme", "reason": " "}),
            "a reason is required",
        ),
        (json!({"tenant": "", "reason": "r"}), "a tenant is required"),
        (
            json!({"tenant": "acme", "key": "k1", "reason": "r"}),
            "give the tool too",
        ),
    ] {
        let answer = admin.post("/v1/admin/erasures", body.clone()).await;
        let detail = answer.problem(422);
        assert!(detail.contains(says), "{body}: {detail}");
    }
    let answer = admin
        .post(
            "/v1/admin/erasures",
            json!({"tenant": "acme", "reason": "r", "everything": true}),
        )
        .await;
    answer.problem(422);
    let answer = admin.get("/v1/admin/erasures").await;
    answer.problem(405);
    assert_eq!(admin.ledger.get_by_id(kept.id).await.unwrap(), Some(kept));
}

#[tokio::test]
async fn activity_counts_calls_repeats_and_statuses_per_tool_over_the_window() {
    let admin = start(Some(TOKEN), None).await;
    let stormed = admin
        .done("acme", "refund_order", "refund:1:10.00", "re_1")
        .await;
    let repeats = (0..4).map(|_| (stormed.id, now_ms())).collect();
    admin.ledger.record_calls(repeats).await.unwrap();
    admin
        .done("acme", "refund_order", "refund:2:10.00", "re_2")
        .await;
    admin.unknown_refund("acme", "refund:3:10.00").await;
    admin.done("acme", "send_email", "email:1", "em_1").await;
    let answer = admin.get("/v1/admin/activity").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let tools = answer.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2, "{}", answer.body);
    let refunds = &tools[0];
    assert_eq!(refunds["tool"], "refund_order");
    assert_eq!(refunds["intents"], 3);
    assert_eq!(refunds["calls"], 7);
    assert_eq!(refunds["repeats"], 4);
    assert_eq!(refunds["statuses"], json!({"done": 2, "unknown": 1}));
    let buckets = refunds["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 12);
    // Everything happened just now: in the last bucket of the hour.
    assert_eq!(buckets[11], json!({"calls": 7, "repeats": 4}));
    assert_eq!(tools[1]["tool"], "send_email");
    assert_eq!(answer.body["intents_read"], 4);
    assert_eq!(answer.body["stopped_early"], false);
    assert_eq!(answer.body["bucket_ms"], 300_000);
    for wrong in ["0s", "8d", "soon"] {
        admin
            .get(&format!("/v1/admin/activity?since={wrong}"))
            .await
            .problem(400);
    }
}

#[tokio::test]
async fn intents_are_found_by_text_in_keys_arguments_and_provider_ids_and_by_time() {
    let admin = start(Some(TOKEN), None).await;
    let first = admin
        .done("acme", "refund_order", "refund:8812:49.00", "re_AB12")
        .await;
    admin
        .done("acme", "refund_order", "refund:9000:10.00", "re_CD34")
        .await;
    let keys = |answer: &Answer| -> Vec<String> {
        answer.body["intents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|intent| intent["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let by_key = admin.get("/v1/admin/intents?q=8812").await;
    assert_eq!(keys(&by_key), ["refund:8812:49.00"], "{}", by_key.body);
    assert_eq!(by_key.body["scan_stopped"], false);
    // Any case, in the provider's id.
    let by_id = admin.get("/v1/admin/intents?q=re_ab").await;
    assert_eq!(keys(&by_id), ["refund:8812:49.00"]);
    // In an argument's value (the test's intents carry their key as an argument).
    let by_argument = admin.get("/v1/admin/intents?q=9000:10").await;
    assert_eq!(keys(&by_argument), ["refund:9000:10.00"]);
    let none = admin.get("/v1/admin/intents?q=nobody").await;
    assert!(keys(&none).is_empty());
    let recent = admin.get("/v1/admin/intents?since=1h").await;
    assert_eq!(keys(&recent).len(), 2);
    let later = admin
        .get(&format!(
            "/v1/admin/intents?from_ms={}",
            first.first_seen_ms + 3_600_000
        ))
        .await;
    assert!(keys(&later).is_empty(), "{}", later.body);
    let before = admin
        .get(&format!(
            "/v1/admin/intents?until_ms={}",
            first.first_seen_ms
        ))
        .await;
    assert!(keys(&before).is_empty(), "{}", before.body);
    let shown = admin.get(&format!("/v1/admin/intents/{}", first.id)).await;
    assert_eq!(
        shown.body["provider_key"],
        "acme/refund_order:refund:8812:49.00"
    );
    for wrong in [
        "since=1h&from_ms=5".to_owned(),
        "from_ms=yesterday".to_owned(),
        "since=forever".to_owned(),
        format!("q={}", "x".repeat(300)),
    ] {
        admin
            .get(&format!("/v1/admin/intents?{wrong}"))
            .await
            .problem(400);
    }
}

#[tokio::test]
async fn a_runs_mismatches_are_exported_as_csv_with_formulas_shown_as_text() {
    let admin = start(Some(TOKEN), None).await;
    let started_ms = now_ms();
    let run = ReconciliationRun {
        id: 0,
        started_ms,
        finished_ms: started_ms + 5,
        since_ms: started_ms - 3_600_000,
        until_ms: started_ms,
        actor: "serve".into(),
        intents_checked: 2,
        records_checked: 3,
        mismatches: 2,
        critical: 1,
        summary: json!({}),
    };
    let mismatch = |kind: &str, severity: &str, subject: &str, ids: &[&str]| StoredMismatch {
        run_id: 0,
        tool: "refund_order".into(),
        kind: kind.into(),
        severity: severity.into(),
        intent_id: None,
        tenant: Some("acme".into()),
        intent_key: Some("refund:8812:49.00".into()),
        external_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
        subject: Some(subject.into()),
        detail: "two refunds, \"one\" intent".into(),
    };
    let id = admin
        .ledger
        .record_reconciliation(
            &run,
            &[
                mismatch("duplicate", "critical", "8812", &["re_1", "re_2"]),
                mismatch("no_intent", "warning", "=HYPERLINK(\"x\")", &["re_3"]),
            ],
        )
        .await
        .unwrap();
    let csv = |query: &str| {
        let url = format!(
            "{}/v1/admin/reconciliations/{id}/mismatches.csv{query}",
            admin.base
        );
        let client = admin.client.clone();
        async move {
            let response = client.get(url).bearer_auth(TOKEN).send().await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            (status, headers, response.text().await.unwrap())
        }
    };
    let (status, headers, text) = csv("").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(headers["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        headers["content-disposition"],
        format!("attachment; filename=\"reconciliation-{id}-mismatches.csv\"")
    );
    let lines: Vec<&str> = text.split("\r\n").collect();
    assert_eq!(
        lines[0],
        r#""run_id","tool","kind","severity","subject","tenant","intent_id","intent_key","external_ids","detail""#
    );
    assert_eq!(
        lines[1],
        format!(
            r#""{id}","refund_order","duplicate","critical","8812","acme","","refund:8812:49.00","re_1 re_2","two refunds, ""one"" intent""#
        )
    );
    assert!(
        lines[2].contains(r#","'=HYPERLINK(""x"")","#),
        "{}",
        lines[2]
    );
    assert_eq!(lines.len(), 4, "{text}");
    let (_, _, critical) = csv("?severity=critical").await;
    assert_eq!(critical.split("\r\n").count(), 3, "{critical}");
    let (_, _, bypass) = csv("?kind=no_intent").await;
    assert!(bypass.contains("no_intent") && !bypass.contains("duplicate"));
    assert_eq!(csv("?severity=urgent").await.0, 400);
    assert_eq!(csv("?kind=DROP%20TABLE").await.0, 400);
    let missing = admin
        .get(&format!(
            "/v1/admin/reconciliations/{}/mismatches.csv",
            id + 1
        ))
        .await;
    missing.problem(404);
}

/// An alert log with one notice.
struct OneAlert;

#[async_trait::async_trait]
impl AlertLog for OneAlert {
    async fn recent(&self, _limit: u32) -> Result<Vec<Value>, intentgate_ledger::LedgerError> {
        Ok(vec![
            json!({"at_ms": 1, "kind": "duplicate_calls", "tool": "refund_order", "severity": "warning", "summary": "called 5 more times", "details": {"intent_id": 7}}),
        ])
    }
}

#[tokio::test]
async fn alerts_are_listed_from_the_servers_log_and_501_without_one() {
    let admin = start(Some(TOKEN), None).await;
    assert!(
        admin
            .get("/v1/admin/alerts")
            .await
            .problem(501)
            .contains("log")
    );
    let admin = start_with(
        Some(TOKEN),
        None,
        FailureLimit::default(),
        Some(Arc::new(OneAlert)),
    )
    .await;
    let answer = admin.get("/v1/admin/alerts").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.body["alerts"][0]["details"]["intent_id"], 7);
    // Behind the token like every admin route.
    let anonymous = admin.send("GET", "/v1/admin/alerts", None, None).await;
    anonymous.problem(401);
}

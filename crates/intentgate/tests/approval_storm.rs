//! Approval and budgets through the real binary (docs/design.md section 13): a seeded
//! four-layer retry storm against a tool whose refunds need approval, over HTTP and MCP,
//! decided by an approver through the admin API; and a runaway loop of 500 distinct refunds
//! against a budget, spread over two replicas sharing a PostgreSQL ledger.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use support::{
    Running, Schema, client, database_url, example_config, mock_provider, serve, with_api_keys,
};

const AGENT_KEY: &str = "agent-key-0123456789abcdef0123456789abcdef";
const APPROVER_KEY: &str = "approver-key-0123456789abcdef0123456789abcd";
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef0123456789abcdef";
/// How long a held refund waits for a decision in the storm.
const DEADLINE_SECONDS: u64 = 8;
/// Intents in the storm: a third approved, a third denied, a third left to lapse.
const INTENTS: usize = 12;
/// The seed that picks which intents get which decision, and the amounts.
const SEED: u64 = 34;

/// The example config with `refund_order` given `policy` (YAML at the tool's indent) and,
/// when `keys`, API keys for the agent (`call`) and the approver (`approve`) of tenant acme.
fn config_with(policy: &str, keys: bool) -> impl Fn(String) -> String {
    let policy = policy.to_owned();
    move |text: String| {
        let start = text
            .find("  - name: refund_order\n")
            .expect("the example has refund_order");
        let key_line = start
            + text[start..]
                .find("    key: ")
                .expect("refund_order has a key");
        let end = key_line + text[key_line..].find('\n').unwrap() + 1;
        let edited = format!("{}{policy}{}", &text[..end], &text[end..]);
        if keys {
            with_api_keys(
                &edited,
                &[
                    ("agent", AGENT_KEY, "acme", "call"),
                    ("approver", APPROVER_KEY, "acme", "approve"),
                ],
            )
        } else {
            edited
        }
    }
}

/// A small deterministic generator (SplitMix64), so the storm is the same every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Approve,
    Deny,
    Lapse,
}

struct Refund {
    order: String,
    /// Written as the model might: `150`, `150.0`, `150.00`.
    cents: u64,
    fate: Fate,
}

impl Refund {
    fn arguments(&self, spelling: usize) -> Value {
        let whole = self.cents / 100;
        let amount: Value = match spelling % 3 {
            0 => serde_json::from_str(&format!("{whole}")).unwrap(),
            1 => serde_json::from_str(&format!("{whole}.0")).unwrap(),
            _ => serde_json::from_str(&format!("{whole}.00")).unwrap(),
        };
        json!({"order_id": self.order, "amount": amount, "reason": "requested_by_customer"})
    }

    fn key(&self) -> String {
        format!("refund:{}:{}.00", self.order, self.cents / 100)
    }
}

/// An MCP session with the gateway's `/mcp`, as the agent's credential.
async fn mcp_session(gateway: &str) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {AGENT_KEY}").parse().unwrap(),
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(format!("{gateway}/mcp")),
    );
    ().serve(transport).await.expect("an MCP session with /mcp")
}

/// The outcome of one call of refund_order: over HTTP, or over MCP when `mcp` is given.
async fn call_refund(
    http: &reqwest::Client,
    mcp: Option<&rmcp::service::RunningService<rmcp::RoleClient, ()>>,
    gateway: &str,
    arguments: Value,
) -> Value {
    match mcp {
        Some(session) => {
            let params: CallToolRequestParams =
                serde_json::from_value(json!({"name": "refund_order", "arguments": arguments}))
                    .unwrap();
            let result = session.peer().call_tool(params).await.unwrap();
            result
                .structured_content
                .expect("the gateway answers structured content")
        }
        None => {
            let answer = http
                .post(format!("{gateway}/v1/tools/refund_order/call"))
                .bearer_auth(AGENT_KEY)
                .json(&json!({"arguments": arguments}))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200, "a call is answered 200");
            answer.json().await.unwrap()
        }
    }
}

/// The refunds the mock provider made, by intent key.
async fn effects(http: &reqwest::Client, mock: &Running) -> BTreeMap<String, u64> {
    let effects: Value = http
        .get(format!("{}/admin/effects", mock.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    serde_json::from_value(effects["by_intent_key"].clone()).unwrap()
}

/// The intent of refund_order with `key` in tenant acme, as the admin API shows it.
async fn ledger_intent(http: &reqwest::Client, gateway: &str, key: &str) -> Value {
    let page: Value = http
        .get(format!("{gateway}/v1/admin/intents"))
        .query(&[("tool", "refund_order"), ("tenant", "acme"), ("key", key)])
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["intents"][0].clone()
}

// Multi-threaded: the storm's calls overlap, as four retrying layers' would.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_four_layer_storm_against_held_refunds_executes_only_what_an_approver_approved() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let policy =
        format!("    approval:\n      when: amount > 100\n      deadline: {DEADLINE_SECONDS}s\n");
    let config = example_config(folder.path(), config_with(&policy, true));
    let ledger = folder.path().join("ledger.db");
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", mock.url.as_str()),
            ("INTENTGATE_ADMIN_TOKEN", ADMIN_TOKEN),
        ],
    );
    let http = client();
    let mut seeded = Seeded(SEED);
    let fates = [Fate::Approve, Fate::Deny, Fate::Lapse];
    let refunds: Vec<Arc<Refund>> = (0..INTENTS)
        .map(|index| {
            Arc::new(Refund {
                order: format!("88{index:02}"),
                cents: (101 + seeded.next() % 900) * 100,
                fate: fates[index % 3],
            })
        })
        .collect();
    let mcp = Arc::new(mcp_session(&gateway.url).await);

    // The storm: 2 user attempts x 2 model calls x 2 framework re-runs x 2 HTTP-client
    // retries per intent; the model's second call goes over MCP, its first over HTTP.
    let held_at = Instant::now();
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    let mut calls = 0;
    for user in 0..2 {
        let mut round = Vec::new();
        for refund in &refunds {
            for model in 0..2 {
                for layer in 0..4 {
                    let (http, mcp, gateway, refund) = (
                        http.clone(),
                        mcp.clone(),
                        gateway.url.clone(),
                        refund.clone(),
                    );
                    round.push(tokio::spawn(async move {
                        let session = (model == 1).then_some(mcp.as_ref());
                        call_refund(&http, session, &gateway, refund.arguments(user + layer)).await
                    }));
                }
            }
        }
        for answer in round {
            let answer = answer.await.unwrap();
            calls += 1;
            *statuses
                .entry(answer["status"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(calls, INTENTS * 16);
    assert_eq!(
        statuses,
        BTreeMap::from([("awaiting_approval".to_owned(), (INTENTS * 16) as u64)]),
        "every call of a held intent is told it awaits approval"
    );
    assert!(
        effects(&http, &mock).await.is_empty(),
        "nothing is executed while held"
    );

    // The approver decides through the admin API.
    let open: Value = http
        .get(format!("{}/v1/admin/approvals?state=open", gateway.url))
        .bearer_auth(APPROVER_KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: BTreeMap<String, i64> = open["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|held| {
            (
                held["key"].as_str().unwrap().to_owned(),
                held["intent_id"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ids.len(), INTENTS, "one request per intent: {open}");
    for refund in &refunds {
        let id = ids[&refund.key()];
        let (route, reason) = match refund.fate {
            Fate::Approve => ("approve", "checked the order"),
            Fate::Deny => ("deny", "already refunded by hand"),
            Fate::Lapse => continue,
        };
        let decided = http
            .post(format!("{}/v1/admin/approvals/{id}/{route}", gateway.url))
            .bearer_auth(APPROVER_KEY)
            .json(&json!({"reason": reason}))
            .send()
            .await
            .unwrap();
        assert_eq!(decided.status(), 200, "{route} {id}");
        let decided: Value = decided.json().await.unwrap();
        if refund.fate == Fate::Approve {
            assert_eq!(decided["outcome"]["status"], "done", "{decided}");
        }
    }
    assert!(
        held_at.elapsed() < Duration::from_secs(DEADLINE_SECONDS),
        "the storm and the decisions took longer than the deadline; the test can't tell a \
         lapse from a decision"
    );

    // Past the deadline, each intent is asked for once more over HTTP and over MCP.
    tokio::time::sleep(Duration::from_secs(DEADLINE_SECONDS + 1).saturating_sub(held_at.elapsed()))
        .await;
    let made = effects(&http, &mock).await;
    for refund in &refunds {
        let expected = u64::from(refund.fate == Fate::Approve);
        assert_eq!(
            made.get(&refund.key()).copied().unwrap_or(0),
            expected,
            "{:?} {}: {made:?}",
            refund.fate,
            refund.key()
        );
        for session in [None, Some(mcp.as_ref())] {
            let answer = call_refund(&http, session, &gateway.url, refund.arguments(2)).await;
            let intent = ledger_intent(&http, &gateway.url, &refund.key()).await;
            let told = answer["status"].as_str().unwrap();
            let stored = intent["status"].as_str().unwrap();
            let expected = match refund.fate {
                Fate::Approve => ("already_done", "done"),
                Fate::Deny => ("rejected", "rejected"),
                // The lapsed request was settled not_executed, and this call asked again.
                Fate::Lapse => ("awaiting_approval", "pending"),
            };
            assert_eq!((told, stored), expected, "{:?}: {answer}", refund.fate);
            if refund.fate == Fate::Deny {
                assert_eq!(answer["reason"], "denied", "{answer}");
                assert!(
                    answer["message"]
                        .as_str()
                        .unwrap()
                        .contains("already refunded by hand"),
                    "{answer}"
                );
            }
        }
    }
    assert_eq!(
        effects(&http, &mock).await,
        made,
        "the final calls made no refund"
    );
    let lapsed = refunds
        .iter()
        .find(|refund| refund.fate == Fate::Lapse)
        .unwrap();
    let id = ids[&lapsed.key()];
    let shown: Value = http
        .get(format!("{}/v1/admin/intents/{id}", gateway.url))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let events = shown["events"].as_array().unwrap();
    assert!(
        events.iter().any(|event| event["kind"] == "approval"
            && event["detail"]
                .as_str()
                .is_some_and(|detail| detail.starts_with("expired"))),
        "the lapse is in the event log: {shown}"
    );
    println!(
        "storm: {calls} calls of {INTENTS} held intents, all awaiting_approval; {} refunds \
         after the decisions ({} approved, {} denied, {} lapsed)",
        made.values().sum::<u64>(),
        INTENTS / 3,
        INTENTS / 3,
        INTENTS / 3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runaway_loop_of_500_refunds_stops_at_the_budget_across_two_replicas_on_postgres() {
    let name = "a_runaway_loop_of_500_refunds_stops_at_the_budget_across_two_replicas_on_postgres";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "budget_runaway");
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    // A week's window: the loop won't cross its boundary (Monday 00:00 UTC) but rarely.
    let policy = "    budgets:\n      - name: weekly\n        per: tool\n        window: 7d\n        count: 100\n";
    let config = example_config(folder.path(), config_with(policy, false));
    let env = [
        ("INTENTGATE_MOCK_URL", mock.url.as_str()),
        ("INTENTGATE_LEDGER_SCHEMA", schema.name.as_str()),
    ];
    let replicas = [
        serve(config.to_str().unwrap(), &url, &env),
        serve(config.to_str().unwrap(), &url, &env),
    ];
    let urls: Vec<String> = replicas.iter().map(|replica| replica.url.clone()).collect();
    let http = client();
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let calls: Vec<_> = (0..500)
        .map(|index| {
            let (http, gateway, limit) = (http.clone(), urls[index % 2].clone(), limit.clone());
            tokio::spawn(async move {
                let _permit = limit.acquire().await.unwrap();
                let arguments = json!({
                    "order_id": format!("runaway-{index}"),
                    "amount": 25,
                    "reason": "requested_by_customer"
                });
                call_refund(&http, None, &gateway, arguments).await
            })
        })
        .collect();
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for call in calls {
        let answer = call.await.unwrap();
        *statuses
            .entry(answer["status"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let made = effects(&http, &mock).await;
    assert_eq!(
        statuses,
        BTreeMap::from([("done".to_owned(), 100), ("over_budget".to_owned(), 400)]),
        "the loop stops executing at the budget"
    );
    assert_eq!(made.values().sum::<u64>(), 100, "{made:?}");
    // A repeat of a counted refund is answered from the ledger on either replica and
    // counts nothing; a new one is still beyond the budget.
    let done_order = made
        .keys()
        .next()
        .unwrap()
        .trim_start_matches("refund:")
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    for gateway in &urls {
        let repeat = call_refund(
            &http,
            None,
            gateway,
            json!({"order_id": done_order, "amount": 25, "reason": "requested_by_customer"}),
        )
        .await;
        assert_eq!(repeat["status"], "already_done", "{repeat}");
        let new = call_refund(
            &http,
            None,
            gateway,
            json!({"order_id": "one-more", "amount": 25, "reason": "requested_by_customer"}),
        )
        .await;
        assert_eq!(new["status"], "over_budget", "{new}");
    }
    println!("runaway loop: 500 refunds asked over 2 replicas; statuses {statuses:?}");
    drop(replicas);
    schema.remove();
}

#[tokio::test]
async fn a_held_refund_is_told_to_its_owner_once_with_the_link_to_decide() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let webhook = support::Webhook::start().await;
    let owner = format!(
        "  payments-team: {{log: true, webhook: \"{}\"}}",
        webhook.url
    );
    let held = config_with("    approval: {}\n", false);
    let config = example_config(folder.path(), |text| {
        held(text).replace("  payments-team: {log: true}", &owner)
    });
    let ledger = folder.path().join("ledger.db");
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", mock.url.as_str()),
            ("INTENTGATE_PUBLIC_URL", "https://gate.example.com/"),
        ],
    );
    let http = client();
    let arguments = json!({"order_id": "8812", "amount": 49, "reason": "requested_by_customer"});
    for _ in 0..3 {
        let answer = http
            .post(format!("{}/v1/tools/refund_order/call", gateway.url))
            .json(&json!({"arguments": arguments}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(answer["status"], "awaiting_approval", "{answer}");
    }
    let (_, notice) = webhook
        .wait_for(Duration::from_secs(10), |body| {
            body["kind"] == "held_for_approval"
        })
        .await
        .expect("the owner is told about the held refund");
    let link = notice["details"]["console_url"].as_str().unwrap();
    assert!(
        link.starts_with("https://gate.example.com/console/intents/"),
        "{notice}"
    );
    // A chat tool's incoming webhook shows `text`: the summary with the link.
    let text = notice["text"].as_str().unwrap();
    assert!(
        text.contains("held for approval") && text.ends_with(link),
        "{notice}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let told = webhook
        .notices()
        .iter()
        .filter(|(_, body)| body["kind"] == "held_for_approval")
        .count();
    assert_eq!(told, 1, "one notice per held intent, not per call");
}

//! Intents reach a definite answer without an operator: what one gateway process leaves
//! unknown, the other processes on the same ledger settle on their own, whichever command
//! they run, and between them ask the provider once.

mod support;

use std::io::Write;
use std::process::{Child, Stdio};
use std::time::Duration;

use intentgate_runtime::SWEEP_EVERY;
use serde_json::{Value, json};
use support::{get_json, intentgate, serve, until};

/// How long the mock holds a "timeout" answer: past the tool timeout below.
const TIMEOUT_HOLD_MS: u64 = 1_500;
/// The tools' timeout in these tests.
const TOOL_TIMEOUT_MS: u64 = 500;

/// `intentgate mcp` with its stdin held open (closing it ends the server), killed when
/// dropped.
struct StdioGateway {
    child: Child,
}

impl Drop for StdioGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_mcp(config: &str, ledger: &str, mock_url: &str) -> StdioGateway {
    let mut child = intentgate()
        .args(["mcp", "--config", config, "--ledger", ledger])
        .env("INTENTGATE_MOCK_URL", mock_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("intentgate mcp starts");
    // Nothing is sent: the process only has to stay up, and its stdin open.
    child.stdin.as_mut().unwrap().flush().unwrap();
    StdioGateway { child }
}

/// The intents `intentgate intents list` finds on `ledger`.
fn intents(config: &str, ledger: &str) -> Vec<Value> {
    let output = intentgate()
        .args([
            "intents", "list", "--config", config, "--ledger", ledger, "--format", "json",
        ])
        .output()
        .unwrap();
    support::success(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Stdio gateways on the ledger: agents that each start their own tool server.
const STDIO_PROCESSES: usize = 5;

#[tokio::test]
async fn an_intent_a_stopped_gateway_left_unknown_is_settled_by_stdio_gateways_alone_once() {
    let setup = support::LedgerFolder::new(TOOL_TIMEOUT_MS);
    let (config, ledger, mock, client) =
        (&*setup.config, &*setup.ledger, &setup.mock, &setup.client);

    // The refund commits at the provider, but the caller sees a timeout and the lookup fails:
    // the intent is left unknown.
    setup
        .set_faults(
            Some(TIMEOUT_HOLD_MS),
            json!({"timeout": 1000, "commit_when_ambiguous": 1000, "lookup_failure": 1000}),
        )
        .await;
    let mut gateway = serve(config, ledger, &[("INTENTGATE_MOCK_URL", &mock.url)]);
    let outcome = support::call(
        client,
        &gateway.url,
        "refund_order",
        json!({"order_id": "ord_live", "amount": 12.5, "reason": "requested_by_customer"}),
    )
    .await;
    assert_eq!(outcome["status"], "pending_unknown", "{outcome}");
    // No HTTP gateway is left to sweep.
    gateway.kill();
    let listed = intents(config, ledger);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "unknown", "{listed:?}");

    // The provider recovers; stdio gateways on the ledger, which no client talks to, find the
    // refund by its lookup: one of them, since their sweepers share the work through the
    // ledger's leases and the intent's lookup interval.
    setup.set_faults(None, json!({})).await;
    let lookups = async || {
        let stats = get_json(client, format!("{}/admin/stats", mock.url)).await;
        stats["lookups"].as_u64().unwrap()
    };
    let lookups_before = lookups().await;
    let _stdio: Vec<StdioGateway> = (0..STDIO_PROCESSES)
        .map(|_| start_mcp(config, ledger, &mock.url))
        .collect();
    let (settled, _) = until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            let listed = intents(config, ledger);
            match listed[0]["status"].as_str() {
                Some("done") => Ok(listed[0].clone()),
                other => Err(format!("still {other:?} after 30 s: {listed:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        settled["external_id"].as_str().map(|id| !id.is_empty()),
        Some(true)
    );
    let effects = get_json(client, format!("{}/admin/effects", mock.url)).await;
    assert_eq!(effects["by_order"]["ord_live"], 1, "{effects}");
    // Past the next sweep of every process: the settled intent is not asked about again.
    tokio::time::sleep(SWEEP_EVERY + Duration::from_secs(1)).await;
    let made = lookups().await - lookups_before;
    assert_eq!(
        made, 1,
        "{STDIO_PROCESSES} sweepers looked the intent up {made} times"
    );
}

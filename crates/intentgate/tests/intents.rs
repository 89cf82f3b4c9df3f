//! `intentgate intents` as an operator runs it: the real binary as a process, on a SQLite
//! ledger whose intents were made by a real `intentgate serve` in front of the real
//! `intentgate mock-provider` (an unknown one with the mock's fault injection: a 500 for a
//! refund that was not committed, which the lookup then can't find). And the admin API of a
//! real `intentgate serve`, switched on with INTENTGATE_ADMIN_TOKEN.

mod support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use intentgate_test_support::http::{call_tool_with, tool_url};
use serde_json::{Value, json};
use support::{
    Running, example_config, get_json, json_answer, mock_provider, set_faults, start_with_stderr,
    success, until, with_api_keys, with_setting,
};

/// Tool timeouts in the test config: short, so that nothing waits long.
const TOOL_TIMEOUT_MS: u64 = 700;
const ADMIN_TOKEN: &str = "an-admin-token-for-the-test-0123";
/// How soon every gateway must honour a switched flag: "within a second", with margin for a
/// loaded test machine.
const FLAG_HONOURED_WITHIN: Duration = Duration::from_secs(3);
/// Pause between two calls while waiting for a switch to be honoured.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The example config with short timeouts and its ledger at `ledger`, written to `folder`.
/// The API keys of the two tenants the tests call as.
const KEY_DEFAULT: &str = "igk_tenant_default_key_for_tests_000000";
const KEY_ACME: &str = "igk_tenant_acme_key_for_tests_0000000000";

fn test_config(folder: &Path, ledger: &Path) -> PathBuf {
    example_config(folder, |text| {
        let text = with_setting(&text, "timeout_ms", TOOL_TIMEOUT_MS);
        let text = with_setting(&text, "ledger", ledger.display());
        with_api_keys(
            &text,
            &[
                ("agent-default", KEY_DEFAULT, "default", "call"),
                ("agent-acme", KEY_ACME, "acme", "call"),
            ],
        )
    })
}

/// The mock provider (quiet) and a gateway in front of it, over a ledger in a temporary
/// folder.
struct Stack {
    mock: Running,
    gateway: Running,
    client: reqwest::Client,
    ledger: PathBuf,
    config: PathBuf,
    gateway_stderr: PathBuf,
    folder: tempfile::TempDir,
}

fn stack(admin_token: Option<&str>) -> Stack {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let ledger = folder.path().join("ledger.db");
    let config = test_config(folder.path(), &ledger);
    let gateway_stderr = folder.path().join("gateway.stderr");
    let mut env = vec![("INTENTGATE_MOCK_URL", mock.url.as_str())];
    if let Some(token) = admin_token {
        env.push(("INTENTGATE_ADMIN_TOKEN", token));
    }
    // No --ledger: the gateway uses the config's, where `intentgate intents` reads it.
    let gateway = start_with_stderr(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &env,
        File::create(&gateway_stderr).unwrap(),
    );
    Stack {
        mock,
        gateway,
        client: support::client(),
        ledger,
        config,
        gateway_stderr,
        folder,
    }
}

impl Stack {
    /// Calls as tenant `acme` or, by default, `default`: the tenant is the key's.
    async fn call(&self, tool: &str, arguments: Value, tenant: Option<&str>) -> Value {
        let key = match tenant {
            None | Some("default") => KEY_DEFAULT,
            Some("acme") => KEY_ACME,
            Some(other) => panic!("no key for tenant {other}"),
        };
        let request = self.client.post(tool_url(&self.gateway.url, tool));
        call_tool_with(request.bearer_auth(key), arguments).await
    }

    async fn faults(&self, plan: Value) {
        set_faults(&self.client, &self.mock, None, plan).await;
    }

    /// The gateway's stderr so far, once it contains `expected` (or after 10 s).
    fn stderr_with(&self, expected: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.gateway_stderr).unwrap_or_default();
            if text.contains(expected) || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn refund(order: &str, amount: f64) -> Value {
    json!({"order_id": order, "amount": amount, "reason": "requested_by_customer"})
}

/// What the intents commands work on: a ledger holding, by id,
/// 1. refund r1 (tenant default), done;
/// 2. an email (tenant acme), done;
/// 3. refund r2 (tenant default), unknown (a 500 the provider did not commit);
/// 4. refund r3 (tenant default), unknown, likewise;
///
/// with the gateway and the mock stopped.
struct Ledger {
    path: PathBuf,
    config: PathBuf,
    _folder: tempfile::TempDir,
}

async fn ledger_with_intents() -> Ledger {
    let stack = stack(None);
    assert_eq!(
        stack.call("refund_order", refund("r1", 10.0), None).await["status"],
        "done"
    );
    let email = json!({"to": "ana@example.com", "template_id": "refund_confirmation", "reference": "r1",
                       "subject": "Your refund", "body": "We refunded 10.00."});
    assert_eq!(
        stack.call("send_email", email, Some("acme")).await["status"],
        "done"
    );
    stack
        .faults(json!({"server_error": 1000, "commit_when_ambiguous": 0}))
        .await;
    for order in ["r2", "r3"] {
        let outcome = stack.call("refund_order", refund(order, 20.0), None).await;
        assert_eq!(outcome["status"], "pending_unknown", "{outcome}");
    }
    // Callers authenticate with keys, so the admin API is on for a key with the `admin` scope,
    // and the gateway said so; these keys have only `call`.
    let stderr = stack.stderr_with("admin API");
    assert!(stderr.contains("admin API on"), "{stderr}");
    let refused = stack
        .client
        .get(format!("{}/v1/admin/flags", stack.gateway.url))
        .bearer_auth(KEY_DEFAULT)
        .send()
        .await
        .unwrap();
    // A valid key without the `admin` scope: refused as such, never taken for a guess.
    assert_eq!(refused.status().as_u16(), 403);
    let Stack {
        mock,
        gateway,
        ledger,
        config,
        folder,
        ..
    } = stack;
    // Stopped, so that nothing (the sweeper) changes the intents under the commands.
    drop(gateway);
    drop(mock);
    Ledger {
        path: ledger,
        config,
        _folder: folder,
    }
}

/// Runs `intentgate ARGS` to its end, with only `env` of the intentgate variables set.
fn intentgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = support::intentgate();
    command.args(args).env("USER", "tester");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn failure(output: &Output) -> String {
    assert!(
        !output.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr.clone()).unwrap()
}

impl Ledger {
    fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--ledger", self.path.to_str().unwrap()]);
        intentgate(&all, &[])
    }

    /// The ids `intents list ARGS --format json` prints, in order.
    fn ids(&self, args: &[&str]) -> Vec<i64> {
        let mut all = vec!["intents", "list", "--format", "json"];
        all.extend(args);
        success(&self.run(&all))
            .lines()
            .map(|line| {
                let intent: Value = serde_json::from_str(line).unwrap();
                intent["id"].as_i64().unwrap()
            })
            .collect()
    }

    /// `intents resolve ID --status STATUS --reason REASON MORE`.
    fn resolve(&self, id: &str, status: &str, reason: &str, more: &[&str]) -> Output {
        let mut all = vec![
            "intents", "resolve", id, "--status", status, "--reason", reason,
        ];
        all.extend(more);
        self.run(&all)
    }

    fn shown(&self, id: &str) -> Value {
        let output = self.run(&["intents", "show", id, "--format", "json"]);
        serde_json::from_str(&success(&output)).unwrap()
    }
}

#[tokio::test]
async fn intents_list_prints_a_table_newest_first_or_json_lines_filtered() {
    let ledger = ledger_with_intents().await;
    let table = success(&ledger.run(&["intents", "list"]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "{table}");
    for column in [
        "ID",
        "TENANT",
        "TOOL",
        "KEY",
        "STATUS",
        "CALLS",
        "ATTEMPTS",
        "FIRST SEEN (UTC)",
        "EXTERNAL ID",
    ] {
        assert!(lines[0].contains(column), "{column}: {table}");
    }
    let first: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &first[..7],
        [
            "4",
            "default",
            "refund_order",
            "refund:r3:20.00",
            "unknown",
            "1",
            "1"
        ],
        "{table}"
    );
    // First seen as a UTC date and time, then no external id.
    assert!(
        first[7].len() == 10 && first[7].starts_with("20"),
        "{table}"
    );
    assert_eq!(first[9], "-", "{table}");
    let oldest: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(oldest[0], "1");
    assert!(oldest[9].starts_with("re_"), "{table}");

    assert_eq!(ledger.ids(&[]), [4, 3, 2, 1]);
    assert_eq!(ledger.ids(&["--oldest"]), [1, 2, 3, 4]);
    assert_eq!(ledger.ids(&["--status", "unknown"]), [4, 3]);
    assert_eq!(ledger.ids(&["--status", "done", "--oldest"]), [1, 2]);
    assert_eq!(ledger.ids(&["--tool", "send_email"]), [2]);
    assert_eq!(ledger.ids(&["--tenant", "acme"]), [2]);
    assert_eq!(ledger.ids(&["--key", "refund:r1:10.00"]), [1]);
    assert_eq!(ledger.ids(&["--limit", "1"]), [4]);
    assert_eq!(ledger.ids(&["--limit", "3", "--oldest"]), [1, 2, 3]);
    assert_eq!(ledger.ids(&["--tenant", "initech"]), Vec::<i64>::new());
    let line = success(&ledger.run(&["intents", "list", "--format", "json", "--limit", "1"]));
    let intent: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(intent["key"], "refund:r3:20.00");
    assert_eq!(intent["arguments"]["order_id"], "r3");

    // The ledger found through the config, named by the environment.
    let through_config = intentgate(
        &["intents", "list", "--format", "json"],
        &[("INTENTGATE_CONFIG", ledger.config.to_str().unwrap())],
    );
    assert_eq!(success(&through_config).lines().count(), 4);

    let bad_status = failure(&ledger.run(&["intents", "list", "--status", "lost"]));
    assert!(
        bad_status.contains("not_executed") && bad_status.contains("in_flight"),
        "{bad_status}"
    );
}

#[tokio::test]
async fn intents_show_prints_the_intent_and_its_event_log() {
    let ledger = ledger_with_intents().await;
    let text = success(&ledger.run(&["intents", "show", "3"]));
    for expected in [
        "intent 3: refund_order refund:r2:20.00 (tenant default)",
        "status:       unknown",
        "events, oldest first:",
        "TIME (UTC)",
        "created",
        "pending → in_flight",
        "in_flight → unknown",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    let shown = ledger.shown("3");
    assert_eq!(shown["intent"]["id"], 3);
    assert_eq!(shown["intent"]["status"], "unknown");
    let events = shown["events"].as_array().unwrap();
    assert_eq!(events[0]["kind"], "created");
    assert!(
        events.iter().any(|event| event["to_status"] == "unknown"),
        "{shown}"
    );

    let missing = failure(&ledger.run(&["intents", "show", "99"]));
    assert!(
        missing.contains("no intent with id 99") && missing.contains("intents list"),
        "{missing}"
    );
}

#[tokio::test]
async fn an_unknown_intent_is_resolved_from_the_cli_and_every_wrong_resolution_is_explained() {
    let ledger = ledger_with_intents().await;
    let resolved = success(&ledger.resolve(
        "3",
        "not_executed",
        "the provider has no refund for r2",
        &[],
    ));
    assert!(resolved.contains("before: unknown"), "{resolved}");
    assert!(
        resolved.contains(
            "after:  not_executed, resolved by tester: the provider has no refund for r2"
        ),
        "{resolved}"
    );
    let shown = ledger.shown("3");
    assert_eq!(shown["intent"]["status"], "not_executed");
    assert_eq!(shown["intent"]["resolved_by"], "tester");
    let last = shown["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["kind"], "resolve");
    assert_eq!(last["from_status"], "unknown");
    assert_eq!(last["to_status"], "not_executed");
    assert_eq!(last["actor"], "tester");
    assert_eq!(last["detail"], "the provider has no refund for r2");

    let done = success(&ledger.resolve(
        "4",
        "done",
        "found in the dashboard",
        &["--external-id", "re_000777", "--actor", "alice"],
    ));
    assert!(
        done.contains("after:  done (external id re_000777), resolved by alice"),
        "{done}"
    );
    assert_eq!(ledger.shown("4")["intent"]["external_id"], "re_000777");

    // Settled intents can't be changed, and the error says what they are.
    let again = failure(&ledger.resolve("3", "not_executed", "again", &[]));
    assert!(again.contains("already not_executed"), "{again}");
    let final_done = failure(&ledger.resolve("1", "not_executed", "undo", &[]));
    assert!(
        final_done.contains("already done") && final_done.contains("can't be changed"),
        "{final_done}"
    );
    let missing = failure(&ledger.resolve("99", "not_executed", "r", &[]));
    assert!(missing.contains("no intent with id 99"), "{missing}");

    // What is asked is checked before anything is read.
    let no_external_id = failure(&ledger.resolve("2", "done", "r", &[]));
    assert!(no_external_id.contains("external id"), "{no_external_id}");
    let no_reason = failure(&ledger.run(&["intents", "resolve", "2", "--status", "not_executed"]));
    assert!(no_reason.contains("--reason"), "{no_reason}");
    let blank_reason = failure(&ledger.resolve("2", "not_executed", " ", &[]));
    assert!(
        blank_reason.contains("reason is required"),
        "{blank_reason}"
    );
    let rejected = failure(&ledger.resolve("2", "rejected", "r", &[]));
    assert!(
        rejected.contains("done") && rejected.contains("not_executed"),
        "{rejected}"
    );
    assert_eq!(ledger.shown("2")["intent"]["status"], "done");

    // A ledger that does not exist is not created empty.
    let folder = tempfile::tempdir().unwrap();
    let nowhere = folder.path().join("typo.db");
    let absent = failure(&intentgate(
        &["intents", "list", "--ledger", nowhere.to_str().unwrap()],
        &[],
    ));
    assert!(absent.contains("there is no ledger at"), "{absent}");
    assert!(!nowhere.exists());
    let unnamed = failure(&intentgate(&["intents", "list"], &[]));
    assert!(unnamed.contains("say which ledger"), "{unnamed}");
}

#[tokio::test]
async fn the_admin_api_of_a_running_gateway_switches_a_tool_off_and_on() {
    let stack = stack(Some(ADMIN_TOKEN));
    let stderr = stack.stderr_with("admin API");
    assert!(stderr.contains("admin API on"), "{stderr}");
    assert!(
        !stderr.contains(ADMIN_TOKEN),
        "the token was printed: {stderr}"
    );
    let admin = |method: reqwest::Method, path: &str| {
        stack
            .client
            .request(method, format!("{}{path}", stack.gateway.url))
            .bearer_auth(ADMIN_TOKEN)
    };

    let anonymous = stack
        .client
        .get(format!("{}/v1/admin/flags", stack.gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let flags = json_answer(admin(reqwest::Method::GET, "/v1/admin/flags")).await;
    assert_eq!(flags["flags"].as_array().unwrap().len(), 15, "{flags}");

    assert_eq!(
        stack
            .call("refund_order", refund("before", 5.0), None)
            .await["status"],
        "done"
    );
    let switched = admin(reqwest::Method::PUT, "/v1/admin/flags/refund_order")
        .json(&json!({"enabled": false, "reason": "INC-7: refunds paused", "actor": "oncall"}))
        .send()
        .await
        .unwrap();
    assert_eq!(switched.status().as_u16(), 200);
    until(FLAG_HONOURED_WITHIN, POLL_EVERY, async || {
        let outcome = stack
            .call("refund_order", refund("during", 5.0), None)
            .await;
        if outcome["status"] == "disabled" {
            return Ok(());
        }
        Err(format!("still not disabled: {outcome}"))
    })
    .await;
    let effects = get_json(&stack.client, format!("{}/admin/effects", stack.mock.url)).await;
    // Only a call made before the switch was honoured may have reached the provider.
    assert!(effects["by_order"]["during"].as_u64().unwrap_or(0) <= 1);

    // The intents of the running gateway, over the same API.
    let intents = json_answer(admin(
        reqwest::Method::GET,
        "/v1/admin/intents?tool=refund_order&status=done&order=oldest",
    ))
    .await;
    assert_eq!(
        intents["intents"][0]["key"], "refund:before:5.00",
        "{intents}"
    );

    let back = admin(reqwest::Method::PUT, "/v1/admin/flags/refund_order")
        .json(&json!({"enabled": true, "reason": "INC-7 fixed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(back.status().as_u16(), 200);
    until(FLAG_HONOURED_WITHIN, POLL_EVERY, async || {
        let outcome = stack.call("refund_order", refund("after", 5.0), None).await;
        if outcome["status"] == "done" {
            return Ok(());
        }
        assert_eq!(outcome["status"], "disabled", "{outcome}");
        Err(format!("still disabled: {outcome}"))
    })
    .await;
    // Also written where `intentgate intents` reads it: the ledger file of the config.
    assert!(stack.ledger.exists() && stack.config.exists());
}

/// 16 bytes used to be enough: a token that short was accepted and guards the kill switch.
#[test]
fn serve_refuses_a_short_admin_token() {
    let folder = tempfile::tempdir().unwrap();
    let config = test_config(folder.path(), &folder.path().join("ledger.db"));
    let output = support::intentgate()
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("INTENTGATE_ADMIN_TOKEN", "sixteen-byte-tok")
        .output()
        .unwrap();
    let stderr = failure(&output);
    assert!(stderr.contains("shorter than 32"), "{stderr}");
    assert!(stderr.contains("openssl rand -hex 32"), "{stderr}");
    assert!(
        !stderr.contains("sixteen-byte-tok"),
        "the token was printed: {stderr}"
    );
    let help = support::intentgate()
        .args(["serve", "--help"])
        .env("INTENTGATE_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .unwrap();
    let help = success(&help);
    assert!(help.contains("--admin-token"), "{help}");
    assert!(
        !help.contains(ADMIN_TOKEN),
        "--help shows the token: {help}"
    );
}

//! Sensitive arguments through the real processes: `intentgate serve` (with its admin API)
//! in front of `intentgate mock-provider`, the example config's `send_email` (recipient,
//! subject and body marked `sensitive: true`), and `intentgate intents` on the ledger it
//! wrote. The address, subject and body reach the provider and nowhere the gateway keeps or
//! shows anything: not the ledger's files, its key, the admin API, the HTTP API, the CLI or
//! the log. And a customer's intents are erased on request.

mod support;

use std::fs::File;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::{
    Running, example_config, get_json, intentgate, mock_provider, start_with_stderr, with_setting,
};

const ADDRESS: &str = "alice.liddell@example.com";
const SUBJECT: &str = "Your refund for order 8812, Alice";
const BODY: &str = "Dear Alice, your refund of 49.00 is on its way.";
const ADMIN_TOKEN: &str = "an-admin-token-for-the-test-0123";

fn email(body: &str) -> Value {
    json!({"to": ADDRESS, "template_id": "refund_confirmation", "reference": "8812",
        "subject": SUBJECT, "body": body})
}

/// None of the clear values, nor the address's local part, is in `text`.
fn assert_clean(text: &str, place: &str) {
    for clear in [ADDRESS, "alice.liddell", SUBJECT, BODY, "Dear Alice"] {
        assert!(!text.contains(clear), "`{clear}` is in {place}:\n{text}");
    }
}

/// Every byte of the ledger's files: the database, its WAL and shared memory.
fn ledger_bytes(ledger: &Path) -> String {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", ledger.display());
        if let Ok(read) = std::fs::read(&path) {
            bytes.extend(read);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn run(args: &[&str]) -> Output {
    intentgate()
        .args(args)
        // One JSON object per log line: fields without colours.
        .env("INTENTGATE_LOG_FORMAT", "json")
        .output()
        .expect("intentgate runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

struct Stack {
    _mock: Running,
    gateway: Running,
    client: reqwest::Client,
    ledger: std::path::PathBuf,
    log: std::path::PathBuf,
    _folder: tempfile::TempDir,
}

fn stack() -> Stack {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let ledger = folder.path().join("ledger.db");
    let config = example_config(folder.path(), |text| {
        with_setting(&text, "ledger", ledger.display())
    });
    let log = folder.path().join("gateway.log");
    let gateway = start_with_stderr(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("INTENTGATE_MOCK_URL", mock.url.as_str()),
            ("INTENTGATE_ADMIN_TOKEN", ADMIN_TOKEN),
            // Every line the gateway's own code writes.
            (
                "RUST_LOG",
                "info,intentgate=debug,intentgate_gate=debug,intentgate_http=debug",
            ),
        ],
        File::create(&log).unwrap(),
    );
    Stack {
        _mock: mock,
        gateway,
        client: support::client(),
        ledger,
        log,
        _folder: folder,
    }
}

impl Stack {
    async fn call(&self, arguments: Value) -> (Value, String) {
        let response = self
            .client
            .post(format!("{}/v1/tools/send_email/call", self.gateway.url))
            .json(&json!({ "arguments": arguments }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let text = response.text().await.unwrap();
        (serde_json::from_str(&text).unwrap(), text)
    }

    async fn admin(&self, path: &str) -> (Value, String) {
        let response = self
            .client
            .get(format!("{}{path}", self.gateway.url))
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let text = response.text().await.unwrap();
        (serde_json::from_str(&text).unwrap(), text)
    }
}

#[tokio::test]
async fn an_emails_address_subject_and_body_reach_the_provider_and_nothing_the_gateway_keeps() {
    // Before sensitive arguments, every one of these places held the address, the subject
    // and the body in clear for 30 days.
    let stack = stack();
    let (first, _) = stack.call(email(BODY)).await;
    assert_eq!(first["status"], "done", "{first}");
    let key = first["intent_key"].as_str().unwrap().to_owned();
    let (hash, rest) = key
        .strip_prefix("email:")
        .and_then(|rest| rest.split_once(':'))
        .expect("email:<hash>:...");
    assert_eq!(rest, "refund_confirmation:8812");
    assert!(
        hash.len() == 32 && hash.bytes().all(|byte| byte.is_ascii_hexdigit()),
        "{key}"
    );

    // The provider got the values: it holds one email to the address.
    let mock = &stack._mock.url;
    let sent = get_json(&stack.client, format!("{mock}/v1/emails?to={ADDRESS}")).await;
    assert_eq!(sent["data"].as_array().unwrap().len(), 1, "{sent}");

    // A repeat is answered from the ledger; a reworded body is a conflict naming the field.
    let (repeat, text) = stack.call(email(BODY)).await;
    assert_eq!(repeat["status"], "already_done", "{repeat}");
    assert_clean(&text, "a repeat's answer");
    let reworded = "Your refund is on its way.";
    let (conflict, text) = stack.call(email(reworded)).await;
    assert_eq!(conflict["status"], "conflict", "{conflict}");
    assert_eq!(conflict["differing_fields"], json!(["body"]));
    assert_clean(&text, "a conflict's answer");
    assert!(!text.contains(reworded), "{text}");

    // The admin API: the list and the intent with its events.
    let (list, text) = stack.admin("/v1/admin/intents?tool=send_email").await;
    assert_clean(&text, "the admin API's list");
    let intent = &list["intents"][0];
    for field in ["to", "subject", "body"] {
        assert!(
            intent["arguments"][field]
                .as_str()
                .unwrap()
                .starts_with("hmac-sha256:"),
            "{intent}"
        );
    }
    assert_eq!(intent["arguments"]["reference"], "8812");
    assert_eq!(intent["result"]["to"], intent["arguments"]["to"]);
    let id = intent["id"].as_i64().unwrap();
    let (_, text) = stack.admin(&format!("/v1/admin/intents/{id}")).await;
    assert_clean(&text, "the admin API's intent");

    // The HTTP API's view of the intent.
    let response = stack
        .client
        .get(format!("{}/v1/intents/send_email/{key}", stack.gateway.url))
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    assert!(text.contains("hmac-sha256:"), "{text}");
    assert_clean(&text, "the HTTP API's intent");

    // The command line, on the ledger the gateway writes.
    let ledger = stack.ledger.to_str().unwrap();
    let shown = run(&["intents", "show", &id.to_string(), "--ledger", ledger]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(
        stdout(&shown).contains("hmac-sha256:"),
        "{}",
        stdout(&shown)
    );
    assert_clean(&stdout(&shown), "`intents show`");
    let listed = run(&["intents", "list", "--format", "json", "--ledger", ledger]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert_clean(&stdout(&listed), "`intents list`");

    // The ledger's files and the gateway's log.
    assert_clean(&ledger_bytes(&stack.ledger), "the ledger's files");
    let log = std::fs::read_to_string(&stack.log).unwrap();
    assert!(log.contains("send_email"), "the log has the calls:\n{log}");
    assert_clean(&log, "the gateway's log");

    // The customer asks to be forgotten.
    let erased = run(&[
        "intents",
        "erase",
        "--tenant",
        "default",
        "--tool",
        "send_email",
        "--key",
        &key,
        "--reason",
        "erasure request 77",
        "--actor",
        "dpo",
        "--ledger",
        ledger,
    ]);
    assert!(erased.status.success(), "{}", stderr(&erased));
    assert!(stdout(&erased).contains("1 intents"), "{}", stdout(&erased));
    let logged = stderr(&erased);
    let line: Value = logged
        .lines()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("a JSON log line:\n{logged}"));
    let said = |field: &str| line[field].clone();
    assert_eq!(
        [
            said("intents"),
            said("actor"),
            said("reason"),
            said("tenant")
        ],
        [
            json!(1),
            json!("dpo"),
            json!("erasure request 77"),
            json!("default")
        ],
        "the erasure is logged with who, why and how many:\n{logged}"
    );
    assert!(!logged.contains(&key), "{logged}");
    let gone = run(&["intents", "show", &id.to_string(), "--ledger", ledger]);
    assert!(!gone.status.success());
    assert!(
        stderr(&gone).contains("no intent with id"),
        "{}",
        stderr(&gone)
    );
    // Without a reason nothing is erased.
    let refused = run(&[
        "intents", "erase", "--tenant", "default", "--reason", " ", "--ledger", ledger,
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("a reason is required"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn serve_refuses_to_start_without_the_hash_key_and_says_how_to_make_one() {
    // A gateway that made up a key would change every stored hash at its next start.
    let output = intentgate()
        .env_remove("INTENTGATE_HASH_KEY")
        .args([
            "serve",
            "--config",
            support::EXAMPLE_CONFIG,
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(
        error.contains("INTENTGATE_HASH_KEY") && error.contains("openssl rand -hex 32"),
        "{error}"
    );
}

/// A request that can't be built from the arguments is refused with a reason that quoted
/// the value it could not place (`49.005 has more than 2 decimal places`), in the answer
/// and in the log: for a sensitive argument, the reason names it only, and nothing is
/// recorded.
#[tokio::test]
async fn a_request_not_built_from_a_sensitive_value_stores_and_logs_no_value() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    // The refund's amount is sensitive, its key takes it as written and its body with two
    // places, so that the key renders and the body can't.
    let config = example_config(folder.path(), |text| {
        let edits = [
            (
                "exclusiveMinimum: 0, maximum: 100000}",
                "exclusiveMinimum: 0, maximum: 100000, sensitive: true}",
            ),
            (
                "key: \"refund:{order_id}:{amount:.2}\"",
                "key: \"refund:{order_id}:{amount}\"",
            ),
            (
                "external_id: /id, amount: /amount, subject: /order_id}",
                "external_id: /id, subject: /order_id}",
            ),
            // The lookup can't compare a sensitive amount (the sweeper has only its hash).
            (
                "match: {order_id: {record: /order_id}, amount: {record: /amount}}",
                "match: {order_id: {record: /order_id}}",
            ),
        ];
        edits.iter().fold(text, |text, (old, new)| {
            assert!(text.contains(old), "{old}");
            text.replacen(old, new, 1)
        })
    });
    let log = folder.path().join("gateway.log");
    let ledger = folder.path().join("ledger.db");
    let gateway = start_with_stderr(
        &[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--ledger",
            ledger.to_str().unwrap(),
        ],
        &[
            ("INTENTGATE_MOCK_URL", mock.url.as_str()),
            ("RUST_LOG", "info"),
        ],
        File::create(&log).unwrap(),
    );
    let arguments = json!({"order_id": "8812", "amount": 49.005, "reason": "damaged"});
    let outcome = support::call(&support::client(), &gateway.url, "refund_order", arguments).await;
    assert_eq!(outcome["status"], "invalid_arguments", "{outcome}");
    let message = outcome["message"].as_str().unwrap();
    assert!(message.contains("argument `amount`"), "{message}");
    assert!(!outcome.to_string().contains("49.005"), "{outcome}");
    assert!(
        !ledger_bytes(&ledger).contains("49.005"),
        "the ledger holds it"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("no request can be built"), "{text}");
    assert!(!text.contains("49.005"), "{text}");
}

/// Regression: an `invalid_arguments` answer quoted a sensitive value back to the caller
/// (`"alice.liddell@@example.com" is not a "email"`), over HTTP and MCP alike. Now the value
/// is shown as `<sensitive>`, and the answer still names the field and what is wrong.
#[tokio::test]
async fn an_invalid_sensitive_value_is_not_quoted_in_the_answer() {
    let stack = stack();
    let bad = "alice.liddell@@example.com";
    let arguments = json!({"to": bad, "template_id": "refund_confirmation", "reference": "8812",
        "subject": SUBJECT, "body": BODY});
    let http = stack
        .client
        .post(format!("{}/v1/tools/send_email/call", stack.gateway.url))
        .json(&json!({ "arguments": arguments }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mcp = stack
        .client
        .post(format!("{}/mcp", stack.gateway.url))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "send_email", "arguments": arguments}}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (place, text) in [("the HTTP answer", &http), ("the MCP answer", &mcp)] {
        assert!(text.contains("invalid_arguments"), "{place}: {text}");
        assert!(text.contains("/to"), "{place}: {text}");
        assert!(text.contains("<sensitive>"), "{place}: {text}");
        assert!(text.contains("email"), "{place}: {text}");
        assert!(!text.contains("alice.liddell"), "{place}: {text}");
    }
}

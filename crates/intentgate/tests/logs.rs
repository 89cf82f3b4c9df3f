//! The log format an operator picks with `INTENTGATE_LOG_FORMAT`, through the real binary:
//! `json` makes every stderr line one JSON object, and each line about a call carries the
//! call's tool and intent key; `text` quotes what callers chose, so they can't forge fields.

mod support;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{EXAMPLE_CONFIG, Running, intentgate, mock_provider, serve_with_stderr};

/// How long the gateway gets to stop after SIGTERM before the test kills it.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Stops the gateway with SIGTERM (a graceful shutdown, logged too) and returns all it
/// wrote to stderr.
fn stop(mut gateway: Running) -> String {
    let mut stderr = gateway.child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    gateway.terminate(STOP_TIMEOUT);
    reader.join().unwrap()
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_and_a_calls_lines_carry_its_tool_and_key() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let ledger = folder.path().join("ledger.db");
    // Its stderr piped: the test reads every line.
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("INTENTGATE_LOG_FORMAT", "json"),
            // The gate's per-call lines are debug: a call that goes well is quiet at info.
            ("RUST_LOG", "info,intentgate_gate=debug"),
        ],
        Stdio::piped(),
    );
    let arguments = json!({"order_id": "8812", "amount": 49.0, "reason": "requested_by_customer"});
    let outcome = support::call(&support::client(), &gateway.url, "refund_order", arguments).await;
    assert_eq!(outcome["status"], "done", "{outcome}");
    let key = "refund:8812:49.00";
    assert_eq!(outcome["intent_key"], key);

    let stderr = stop(gateway);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(object @ Value::Object(_)) => object,
            _ => panic!("not a JSON object: {line:?}\nstderr:\n{stderr}"),
        })
        .collect();
    let about_the_call: Vec<&Value> = lines
        .iter()
        .filter(|line| line["span"]["name"] == "call")
        .collect();
    for line in &about_the_call {
        assert_eq!(line["span"]["tool"], "refund_order", "{line}");
        assert_eq!(line["span"]["key"], key, "{line}");
        assert_eq!(line["span"]["tenant"], "default", "{line}");
    }
    let answered = about_the_call
        .iter()
        .find(|line| line["message"] == "upstream answered")
        .unwrap_or_else(|| panic!("no \"upstream answered\" line in:\n{stderr}"));
    assert_eq!(answered["level"], "DEBUG");
    assert_eq!(answered["tool"], "refund_order");
    assert_eq!(answered["key"], key);
}

/// `text` without ANSI colour codes, which the text format may add around levels and names.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// A caller's value (once a tenant header, now that tenants come from credentials an order
/// id in the intent key) such as `evil status=admin_override` was written unquoted into the
/// text log, where it read as a second field, `status=admin_override`. A value can't carry a
/// line break through JSON into a key unescaped here either; the unit tests of the text
/// format cover line breaks and terminal escapes in any field.
#[tokio::test]
async fn text_logs_quote_a_callers_values_so_they_forge_no_field() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("RUST_LOG", "info,intentgate_gate=debug"),
        ],
        Stdio::piped(),
    );
    let client = support::client();
    let orders = [
        "evil status=admin_override",
        r#"evil" status="admin_override"#,
    ];
    for order in orders {
        let response = client
            .post(format!("{}/v1/tools/refund_order/call", gateway.url))
            .json(&json!({"arguments": {"order_id": order, "amount": 5.0, "reason": "requested_by_customer"}}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let outcome: Value = response.json().await.unwrap();
        assert_eq!(outcome["status"], "done", "{outcome}");
    }

    let stderr = without_colours(&stop(gateway));
    let answered = stderr
        .lines()
        .filter(|line| line.contains("upstream answered") && line.contains("admin_override"))
        .count();
    assert_eq!(
        answered, 2,
        "a line about each call, with its key:\n{stderr}"
    );
    for line in stderr.lines() {
        assert!(
            !outside_quotes(line).contains("admin_override"),
            "a forged field outside a quoted value: {line}"
        );
    }
}

/// `line` without its quoted values (`"..."`, with `\"` escapes inside).
fn outside_quotes(line: &str) -> String {
    let mut outside = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            outside.push(c);
            continue;
        }
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => break,
                _ => {}
            }
        }
    }
    outside
}

#[test]
fn an_unknown_log_format_is_refused_at_startup_naming_the_accepted_ones() {
    let output = intentgate()
        .args(["config", "schema"])
        .env("INTENTGATE_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "nothing ran");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr.trim(),
        "error: INTENTGATE_LOG_FORMAT=\"xml\" is not a log format; use `text` (the default) or `json`"
    );
}

/// Regression: text lines carried ANSI colour codes into a file or a pipe (a journal, `2>
/// gateway.log`), and at the default level the log said when `serve` started but not when
/// it stopped. Now redirected lines are plain and the stop has its line too.
#[tokio::test]
async fn redirected_text_logs_are_plain_and_say_when_serve_starts_and_stops() {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let ledger = folder.path().join("ledger.db");
    let gateway = serve_with_stderr(
        EXAMPLE_CONFIG,
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &mock.url)],
        Stdio::piped(),
    );
    let stderr = stop(gateway);
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe:\n{stderr}"
    );
    assert!(stderr.contains("serving "), "{stderr}");
    assert!(
        stderr.contains("stopped: every call answered"),
        "no line for the stop:\n{stderr}"
    );
}

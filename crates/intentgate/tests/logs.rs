//! The log format an operator picks with `INTENTGATE_LOG_FORMAT`, through the real binary:
//! `json` makes every stderr line one JSON object, and each line about a call carries the
//! call's tool and intent key.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long the gateway gets to stop after SIGTERM before the test kills it.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A child process that is killed when dropped.
struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `intentgate ARGS` with `env` (and no inherited `RUST_LOG` or log format), stderr
/// piped when `capture_stderr`, and reads the `... listening on http://ADDR` line it prints.
fn start(args: &[&str], env: &[(&str, &str)], capture_stderr: bool) -> Running {
    let mut command = Command::new(env!("CARGO_BIN_EXE_intentgate"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(if capture_stderr {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .env_remove("RUST_LOG")
        .env_remove("INTENTGATE_LOG_FORMAT");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("intentgate starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("it prints where it listens");
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "unexpected first line: {line:?}"
    );
    Running { child, url }
}

/// Stops the gateway with SIGTERM (a graceful shutdown, logged too) and returns all it
/// wrote to stderr.
fn stop(mut gateway: Running) -> String {
    let mut stderr = gateway.child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let status = Command::new("kill")
        .args(["-TERM", &gateway.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + STOP_TIMEOUT;
    while gateway.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the gateway did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    reader.join().unwrap()
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/support-agent.yaml"
);

#[tokio::test]
async fn json_logs_are_one_object_a_line_and_a_calls_lines_carry_its_tool_and_key() {
    let folder = tempfile::tempdir().unwrap();
    let mock = start(
        &[
            "mock-provider",
            "--listen",
            "127.0.0.1:0",
            "--faults",
            "quiet",
        ],
        &[],
        false,
    );
    let ledger = folder.path().join("ledger.db");
    let gateway = start(
        &[
            "serve",
            "--config",
            CONFIG,
            "--listen",
            "127.0.0.1:0",
            "--ledger",
            ledger.to_str().unwrap(),
        ],
        &[
            ("INTENTGATE_MOCK_URL", &mock.url),
            ("INTENTGATE_LOG_FORMAT", "json"),
            ("RUST_LOG", "info"),
        ],
        true,
    );
    let response = client()
        .post(format!("{}/v1/tools/refund_order/call", gateway.url))
        .json(&json!({"arguments": {"order_id": "8812", "amount": 49.0, "reason": "requested_by_customer"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let outcome: Value = response.json().await.unwrap();
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
    assert_eq!(answered["level"], "INFO");
    assert_eq!(answered["tool"], "refund_order");
    assert_eq!(answered["key"], key);
}

#[test]
fn an_unknown_log_format_is_refused_at_startup_naming_the_accepted_ones() {
    let output = Command::new(env!("CARGO_BIN_EXE_intentgate"))
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

//! `intentgate audit` as a process: the example config, a per-attempt key in every output
//! format, the corpus of bad configs and prompts against its snapshots, and the tool lists
//! of real MCP servers (`intentgate mcp` over stdio, `intentgate serve`'s /mcp over HTTP).
//!
//! The corpus is `tests/audit/CASE/`: `config.yaml`, optionally `prompts/` and
//! `latency.json`, and `expected.json`, the audit's JSON output. After checking a changed
//! output by eye, `INTENTGATE_UPDATE_SNAPSHOTS=1 cargo test -p intentgate --test audit`
//! rewrites the snapshots.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use support::{EXAMPLE_CONFIG, example, example_config, intentgate};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/audit");

/// Runs `intentgate audit ARGS` in `folder`.
fn audit(folder: &Path, args: &[&str]) -> Output {
    intentgate()
        .arg("audit")
        .args(args)
        .current_dir(folder)
        .output()
        .expect("intentgate runs")
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The findings of a JSON report with the given severity.
fn with_severity<'a>(report: &'a Value, severity: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["severity"] == severity)
        .collect()
}

#[test]
fn the_example_config_has_no_errors_or_warnings() {
    let output = audit(
        Path::new("."),
        &["--config", EXAMPLE_CONFIG, "--format", "json"],
    );
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(report["summary"]["errors"], 0, "{report:#}");
    assert_eq!(report["summary"]["warnings"], 0, "{report:#}");
    // Every tool is classified.
    let classified: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["rule"] == "tool-classified")
        .map(|finding| finding["tool"].as_str().unwrap())
        .collect();
    assert_eq!(classified.len(), 15, "{classified:?}");
    let text = audit(Path::new("."), &["--config", EXAMPLE_CONFIG]);
    assert_eq!(text.status.code(), Some(0));
    let stdout = String::from_utf8(text.stdout).unwrap();
    assert!(
        stdout.ends_with("audit: 0 error(s), 0 warning(s), 18 note(s)\n"),
        "{stdout}"
    );
    // send_email's sensitive arguments, and why its upstream's key support does not make
    // its unknown intents re-sendable.
    let sensitive: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["rule"] == "sensitive-arguments")
        .collect();
    assert_eq!(sensitive.len(), 1, "{sensitive:?}");
    assert_eq!(sensitive[0]["tool"], "send_email");
    let message = sensitive[0]["message"].as_str().unwrap();
    assert!(
        message.contains("`body`, `subject`, `to`") && message.contains("never re-sent"),
        "{message}"
    );
}

/// The example with refund_order keyed by the tool call id (an argument of its schema, so
/// only the key is wrong), in `folder`; the key's line and the column of its value.
fn tool_call_id_config(folder: &Path) -> (PathBuf, u64, u64) {
    let path = example_config(folder, |text| {
        text.replace(
            "key: \"refund:{order_id}:{amount:.2}\"",
            "key: \"refund:{tool_call_id}\"",
        )
        .replace(
            "        reason: {type: string, enum: [requested_by_customer",
            "        tool_call_id: {type: string}\n        reason: {type: string, enum: [requested_by_customer",
        )
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let (index, line) = text
        .lines()
        .enumerate()
        .find(|(_, line)| line.contains("key: \"refund:{tool_call_id}\""))
        .expect("the edit applied");
    assert!(
        text.contains("tool_call_id: {type: string}"),
        "the schema edit applied"
    );
    (path, index as u64 + 1, line.find('"').unwrap() as u64 + 1)
}

#[test]
fn a_key_from_the_tool_call_id_is_an_error_at_its_line_in_every_format() {
    let folder = tempfile::tempdir().unwrap();
    let (config, line, column) = tool_call_id_config(folder.path());
    let config = config.to_str().unwrap();
    let run = |format: &str| audit(folder.path(), &["--config", config, "--format", format]);

    let text = run("text");
    assert_eq!(text.status.code(), Some(2));
    let stdout = String::from_utf8(text.stdout).unwrap();
    let expected = format!("support-agent.yaml:{line}:{column}: error[per-attempt-key] ");
    let at = stdout.find(&expected).unwrap_or_else(|| panic!("{stdout}"));
    let entry = &stdout[at..];
    assert!(entry.contains("changes on every attempt"), "{stdout}");
    assert!(
        entry.contains("\n  fix: build the key from the business fields"),
        "{stdout}"
    );
    assert!(stdout.contains("audit: 1 error(s)"), "{stdout}");

    let json = run("json");
    assert_eq!(json.status.code(), Some(2));
    let report = json_of(&json);
    let errors = with_severity(&report, "error");
    assert_eq!(errors.len(), 1, "{report:#}");
    assert_eq!(errors[0]["rule"], "per-attempt-key");
    assert_eq!(errors[0]["file"], "support-agent.yaml");
    assert_eq!(errors[0]["line"], line);
    assert_eq!(errors[0]["column"], column);
    assert!(errors[0]["fix"].as_str().unwrap().contains("{intent_id}"));
    assert_eq!(report["summary"]["errors"], 1);

    let sarif = run("sarif");
    assert_eq!(sarif.status.code(), Some(2));
    let log = json_of(&sarif);
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    assert_eq!(run["tool"]["driver"]["name"], "intentgate");
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    let rule = rules
        .iter()
        .find(|rule| rule["id"] == "per-attempt-key")
        .expect("the rule is described");
    assert!(rule["shortDescription"]["text"].is_string());
    assert!(rule["help"]["text"].is_string());
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{log:#}");
    let result = &results[0];
    assert_eq!(result["ruleId"], "per-attempt-key");
    assert_eq!(result["level"], "error");
    assert!(
        result["message"]["text"]
            .as_str()
            .unwrap()
            .contains("Fix: build the key")
    );
    let location = &result["locations"][0]["physicalLocation"];
    assert_eq!(location["artifactLocation"]["uri"], "support-agent.yaml");
    assert_eq!(location["region"]["startLine"], line);
    assert_eq!(location["region"]["startColumn"], column);
}

/// The corpus cases, in name order.
fn corpus_cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    cases
}

/// A report with the corpus folder's absolute path (if it appears at all) replaced by
/// `CORPUS`.
fn normalised(stdout: &[u8]) -> Value {
    let text = String::from_utf8(stdout.to_vec())
        .unwrap()
        .replace(CORPUS, "CORPUS");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_corpus_matches_its_snapshots() {
    let update = std::env::var("INTENTGATE_UPDATE_SNAPSHOTS").is_ok_and(|value| value == "1");
    let cases = corpus_cases();
    assert!(cases.len() >= 8, "the corpus is missing: {cases:?}");
    let mut failures = Vec::new();
    for case in cases {
        let mut args = vec!["--config", "config.yaml", "--format", "json"];
        if case.join("prompts").is_dir() {
            args.extend(["--prompts", "prompts"]);
        }
        if case.join("latency.json").is_file() {
            args.extend(["--latency", "latency.json"]);
        }
        let output = audit(&case, &args);
        let report = normalised(&output.stdout);
        let errors = report["summary"]["errors"].as_u64().unwrap();
        let status = if errors > 0 { 2 } else { 0 };
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        if output.status.code() != Some(status) {
            failures.push(format!(
                "{name}: exit {:?}, expected {status}",
                output.status.code()
            ));
        }
        let snapshot = case.join("expected.json");
        if update {
            std::fs::write(
                &snapshot,
                format!("{}\n", serde_json::to_string_pretty(&report).unwrap()),
            )
            .unwrap();
            continue;
        }
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(&snapshot)
                .unwrap_or_else(|_| panic!("{name}: no expected.json")),
        )
        .unwrap();
        if report != expected {
            failures.push(format!(
                "{name}: the findings changed; got\n{report:#}\nexpected\n{expected:#}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Regression guard for the prompt rules: a prohibition is never flagged, whatever else the
/// snapshot says.
#[test]
fn prompts_that_say_not_to_retry_are_not_flagged() {
    let case = Path::new(CORPUS).join("prompts");
    let output = audit(
        &case,
        &[
            "--config",
            "config.yaml",
            "--prompts",
            "prompts",
            "--format",
            "json",
        ],
    );
    let report = json_of(&output);
    let files: Vec<&str> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|finding| finding["file"].as_str())
        .collect();
    assert!(
        !files.iter().any(|file| file.ends_with("safe.yaml")),
        "{report:#}"
    );
    assert!(
        !files.iter().any(|file| file.ends_with(".py")),
        "{report:#}"
    );
    let side_effect = with_severity(&report, "error");
    assert!(
        side_effect
            .iter()
            .all(|finding| finding["rule"] == "prompt-retry-side-effect"
                && finding["tool"] == "refund_order"),
        "{report:#}"
    );
    assert_eq!(output.status.code(), Some(2));
}

/// The example without send_email (and the client-executed refund after it, which MCP does
/// not list), in `folder`: the MCP server of the full example then lists a tool this config
/// does not front.
fn without_send_email(folder: &Path) -> PathBuf {
    let path = folder.join("without-send-email.yaml");
    let text = example();
    let at = text
        .find("  - name: send_email")
        .expect("send_email is the last gateway tool");
    std::fs::write(&path, &text[..at]).unwrap();
    path
}

/// The findings about MCP tools (those whose file is the server).
fn mcp_findings<'a>(report: &'a Value, server: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|finding| finding["file"] == server)
        .collect()
}

fn check_mcp_findings(folder: &Path, server: &str) {
    // The example against its own server: every tool fronted and annotated.
    let output = audit(
        folder,
        &[
            "--config",
            EXAMPLE_CONFIG,
            "--mcp-server",
            server,
            "--format",
            "json",
        ],
    );
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let findings = mcp_findings(&report, server);
    assert_eq!(findings.len(), 1, "{report:#}");
    assert_eq!(findings[0]["rule"], "mcp-listed");
    assert_eq!(
        findings[0]["message"],
        "the server lists 14 tools; 14 of them are in the config"
    );
    assert_eq!(report["summary"]["warnings"], 0, "{report:#}");

    // A config that leaves send_email out.
    let config = without_send_email(folder);
    let output = audit(
        folder,
        &[
            "--config",
            config.to_str().unwrap(),
            "--mcp-server",
            server,
            "--format",
            "json",
        ],
    );
    let report = json_of(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let warnings: Vec<(&str, &str)> = with_severity(&report, "warning")
        .iter()
        .map(|finding| {
            (
                finding["rule"].as_str().unwrap(),
                finding["tool"].as_str().unwrap(),
            )
        })
        .collect();
    // Annotated idempotentHint: true by the gateway, so not side-effecting by default.
    assert_eq!(warnings, [("no-kill-switch", "send_email")], "{report:#}");
    let warning = with_severity(&report, "warning")[0];
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("no kill switch covers it"),
        "{warning:#}"
    );
}

#[test]
fn mcp_over_stdio_lists_the_tools_and_finds_the_one_outside_the_config() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("mcp.db");
    let server = format!(
        "'{}' mcp --config '{EXAMPLE_CONFIG}' --ledger '{}'",
        env!("CARGO_BIN_EXE_intentgate"),
        ledger.display()
    );
    check_mcp_findings(folder.path(), &server);
}

#[test]
fn mcp_over_http_lists_the_tools_and_finds_the_one_outside_the_config() {
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("serve.db");
    let gateway = support::serve(EXAMPLE_CONFIG, ledger.to_str().unwrap(), &[]);
    check_mcp_findings(folder.path(), &format!("{}/mcp", gateway.url));
}

#[test]
fn an_audit_that_cannot_run_exits_1() {
    let folder = tempfile::tempdir().unwrap();
    let missing = audit(folder.path(), &["--config", "missing.yaml"]);
    assert_eq!(missing.status.code(), Some(1));
    // A server that exits at once lists nothing: not a verdict.
    let silent = audit(
        folder.path(),
        &["--config", EXAMPLE_CONFIG, "--mcp-server", "true"],
    );
    assert_eq!(silent.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&silent.stderr);
    assert!(stderr.contains("--mcp-server true"), "{stderr}");
    let latency = folder.path().join("latency.json");
    std::fs::write(&latency, "[1, 2]").unwrap();
    let bad = audit(
        folder.path(),
        &[
            "--config",
            EXAMPLE_CONFIG,
            "--latency",
            latency.to_str().unwrap(),
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
}

//! The `intentgate` command, run as a process the way an operator runs it.
//!
//! These tests assert behaviour (exit status, what is printed), never speed: a benchmark's
//! figures depend on the machine, its correctness does not.

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::intentgate;

fn run(command: &mut Command) -> Output {
    command.output().expect("the intentgate binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_the_bench_command() {
    let output = run(intentgate().arg("--help"));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    assert!(stdout.contains("bench"), "{stdout}");
    assert!(stdout.contains("retry-safe tool gateway"), "{stdout}");
}

#[test]
fn smoke_and_demo_help_document_their_stripe_flags() {
    let smoke = run(intentgate().args(["smoke", "--help"]));
    assert!(smoke.status.success(), "{smoke:?}");
    let stdout = text(&smoke.stdout);
    for said in [
        "--mock-dialect",
        "stripe",
        "examples/stripe.yaml",
        "/v1/payment_intents",
    ] {
        assert!(stdout.contains(said), "{said}: {stdout}");
    }
    let demo = run(intentgate().args(["demo", "--help"]));
    assert!(demo.status.success(), "{demo:?}");
    let stdout = text(&demo.stdout);
    for said in [
        "--provider",
        "stripe",
        "examples/stripe.yaml",
        "[default: mock]",
    ] {
        assert!(stdout.contains(said), "{said}: {stdout}");
    }
    // The mock's dialect is the built-in mock's: not with --live.
    let both = run(intentgate().args([
        "smoke",
        "--config",
        "examples/stripe.yaml",
        "--live",
        "--mock-dialect",
        "stripe",
    ]));
    assert!(!both.status.success());
    assert!(
        text(&both.stderr).contains("cannot be used with"),
        "{}",
        text(&both.stderr)
    );
}

#[test]
fn bench_ledger_help_documents_every_flag() {
    let output = run(intentgate().args(["bench", "ledger", "--help"]));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    for flag in [
        "--dir",
        "--intents",
        "--durability",
        "--json",
        "strict",
        "relaxed",
        "INTENTGATE_BENCH_DIR",
    ] {
        assert!(stdout.contains(flag), "`{flag}` is not in:\n{stdout}");
    }
}

#[test]
fn bench_ledger_prints_positive_figures_as_json_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(intentgate()
        .args([
            "bench",
            "ledger",
            "--intents",
            "200",
            "--durability",
            "relaxed",
            "--json",
            "--dir",
        ])
        .arg(dir.path()));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("stdout is not one JSON object ({error}):\n{stdout}");
    });
    for field in [
        "intents_per_second_64",
        "intents_per_second_1",
        "fsync_median_us",
        "latency_p50_us",
    ] {
        let value = report[field].as_f64();
        assert!(
            value.is_some_and(|value| value > 0.0),
            "{field} is not a positive number: {report}"
        );
    }
    assert_eq!(report["durability"], "relaxed", "{report}");
    assert_eq!(report["intents_1"], 200, "{report}");
    assert_eq!(report["intents_64"], 200, "{report}");
    let expected_in_ledger = 200 + 200 + report["warm_up_intents"].as_u64().unwrap();
    assert_eq!(report["intents_in_ledger"], expected_in_ledger, "{report}");
    let remaining: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        remaining.is_empty(),
        "the temporary folder was left behind: {remaining:?}"
    );
}

#[test]
fn bench_ledger_in_a_missing_folder_fails_and_names_it() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("no-such-folder");
    let output = run(intentgate()
        .args(["bench", "ledger", "--intents", "10", "--dir"])
        .arg(&missing));
    assert!(!output.status.success(), "{output:?}");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&missing.display().to_string()),
        "the error does not name {}:\n{stderr}",
        missing.display()
    );
    assert!(stderr.contains("does not exist"), "{stderr}");
}

#[test]
fn bench_gateway_help_documents_every_flag() {
    let output = run(intentgate().args(["bench", "gateway", "--help"]));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    for flag in [
        "--calls",
        "--json",
        "--durability",
        "--dir",
        "--ledger",
        "--concurrent-calls",
        "strict",
        "relaxed",
        "already_done",
        "/healthz",
        "64 concurrent callers",
        "1.5 x SQLite strict",
        "forwarding proxy",
    ] {
        assert!(stdout.contains(flag), "`{flag}` is not in:\n{stdout}");
    }
}

/// Runs `bench gateway` with 50 calls of each kind and 128 concurrent ones, in a temporary
/// folder, with `extra` arguments; checks the report's counts and figures, and that the
/// folder is left empty. Returns the report.
fn bench_gateway(extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let output = run(intentgate()
        .args([
            "bench",
            "gateway",
            "--calls",
            "50",
            "--concurrent-calls",
            "128",
        ])
        .args(extra)
        .args(["--json", "--dir"])
        .arg(dir.path()));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("stdout is not one JSON object ({error}):\n{stdout}");
    });
    let fields = report.as_object().expect("the report is a JSON object");
    for field in [
        "gateway_call_p50_us",
        "gateway_call_p99_us",
        "direct_call_p50_us",
        "direct_call_p99_us",
        "ratio_call_p50",
        "overhead_call_p50_us",
        "proxy_call_p50_us",
        "proxy_call_p99_us",
        "overhead_proxy_p50_us",
        "overhead_beyond_proxy_p50_us",
        "overhead_beyond_proxy_p99_us",
        "already_done_p50_us",
        "already_done_p99_us",
        "healthz_p50_us",
        "healthz_p99_us",
        "ratio_already_done_p50",
        "concurrent_calls_per_second",
        "concurrent_call_p50_us",
        "concurrent_call_p99_us",
        "ledger_only_intents_per_second",
        "ratio_ledger_only_to_concurrent",
    ] {
        assert!(fields.contains_key(field), "{field} is missing: {report}");
    }
    // Every figure, named above or not, is a positive number.
    for (field, value) in fields.iter().filter(|(_, value)| value.is_number()) {
        assert!(
            value.as_f64().is_some_and(|value| value > 0.0),
            "{field} is not a positive number: {report}"
        );
    }
    assert_eq!(report["calls"], 50, "{report}");
    assert_eq!(report["concurrent_callers"], 64, "{report}");
    assert_eq!(report["concurrent_calls"], 128, "{report}");
    // One refund at the provider per intent (new ones, the repeated one, and the concurrent
    // callers' with one warm-up call each) and per direct or proxied call, warm-up included:
    // none lost, none doubled.
    let warm_up = report["warm_up_calls"].as_u64().unwrap();
    let intents = 50 + warm_up + 1 + 64 + 128;
    assert_eq!(report["intents"], intents, "{report}");
    assert_eq!(report["direct_calls"], 50 + warm_up, "{report}");
    assert_eq!(report["proxied_calls"], 50 + warm_up, "{report}");
    assert_eq!(
        report["provider_refunds"],
        intents + 2 * (50 + warm_up),
        "{report}"
    );
    // The proxy is the gateway's hop without the gateway: it costs more than the direct
    // call, and the gateway more than it.
    let p50 = |series: &str| report[format!("{series}_call_p50_us")].as_f64().unwrap();
    assert!(p50("direct") < p50("proxy"), "{report}");
    assert!(p50("proxy") < p50("gateway"), "{report}");
    // The phases of a new call, each measured: a `create` (one round trip to PostgreSQL, one
    // trip to SQLite's writer), no `begin` apart. (A read may have run: a repeat the gate
    // keeps in memory reads its key when the ledger can't confirm its epoch.)
    let (ran, never_ran) = (
        ["ledger_create_us"].as_slice(),
        ["ledger_begin_us"].as_slice(),
    );
    for phase in [
        "http_round_trip_us",
        "upstream_request_us",
        "ledger_finish_us",
        "call_mean_us",
        "fsync_p50_us",
    ]
    .iter()
    .chain(ran)
    {
        assert!(
            report["breakdown"][phase]
                .as_f64()
                .is_some_and(|value| value > 0.0),
            "{phase}: {report}"
        );
    }
    for phase in never_ran {
        assert_eq!(report["breakdown"][phase], 0.0, "{phase}: {report}");
    }
    let remaining: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        remaining.is_empty(),
        "the temporary folder was left behind: {remaining:?}"
    );
    report
}

/// The fields of the report's targets, each checked to carry a verdict.
fn target_fields(report: &Value) -> Vec<String> {
    report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|target| {
            assert!(target["met"].is_boolean(), "{report}");
            target["field"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn bench_gateway_prints_positive_figures_as_json_and_cleans_up() {
    let report = bench_gateway(&[]);
    assert_eq!(report["durability"], "strict", "{report}");
    assert_eq!(report["ledger"], "sqlite", "{report}");
    // The design targets of strict durability, each with its verdict.
    assert_eq!(
        target_fields(&report),
        [
            "overhead_beyond_proxy_p50_us",
            "overhead_beyond_proxy_p99_us",
            "ratio_already_done_p50",
            "ledger_only_intents_per_second",
        ],
        "{report}"
    );
}

#[test]
fn bench_gateway_on_postgresql_is_held_to_sqlite_strict_of_the_same_run() {
    let test = "bench_gateway_on_postgresql_is_held_to_sqlite_strict_of_the_same_run";
    let Some(url) = support::database_url(test) else {
        return;
    };
    let report = bench_gateway(&["--ledger", &url]);
    assert_eq!(report["ledger"], "postgresql", "{report}");
    assert!(
        report["sqlite_strict_overhead_beyond_proxy_p50_us"]
            .as_f64()
            .is_some()
            && report["ratio_beyond_proxy_to_sqlite_strict"]
                .as_f64()
                .is_some(),
        "{report}"
    );
    assert_eq!(
        target_fields(&report),
        [
            "overhead_beyond_proxy_p50_us",
            "overhead_beyond_proxy_p99_us",
            "ratio_already_done_p50",
            "ledger_only_intents_per_second",
        ],
        "{report}"
    );
}

#[test]
fn bench_mcp_help_documents_every_flag() {
    let output = run(intentgate().args(["bench", "mcp", "--help"]));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    for flag in [
        "--rounds",
        "--json",
        "--durability",
        "--dir",
        "strict",
        "relaxed",
        "/v1/tools/refund_order/call",
        "/mcp",
    ] {
        assert!(stdout.contains(flag), "`{flag}` is not in:\n{stdout}");
    }
}

#[test]
fn bench_mcp_prints_positive_figures_as_json_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(intentgate()
        .args(["bench", "mcp", "--rounds", "20", "--json", "--dir"])
        .arg(dir.path()));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("stdout is not one JSON object ({error}):\n{stdout}");
    });
    // Each series' latencies and ratios are positive; what a series adds over the direct
    // call may be negative on a noisy machine, but is there.
    for series in ["direct", "gate", "http", "mcp"] {
        for percentile in ["p50", "p99"] {
            let field = format!("{series}_{percentile}_us");
            assert!(
                report[&field].as_f64().is_some_and(|value| value > 0.0),
                "{field} is not a positive number: {report}"
            );
        }
    }
    for field in [
        "ratio_gate_to_direct_p50",
        "ratio_http_to_direct_p50",
        "ratio_mcp_to_direct_p50",
    ] {
        assert!(
            report[field].as_f64().is_some_and(|value| value > 0.0),
            "{field} is not a positive number: {report}"
        );
    }
    for field in [
        "added_by_gate_p50_us",
        "added_by_gate_p99_us",
        "added_over_http_p50_us",
        "added_over_http_p99_us",
        "added_over_mcp_p50_us",
        "added_over_mcp_p99_us",
    ] {
        assert!(report[field].is_number(), "{field} is missing: {report}");
    }
    assert_eq!(report["durability"], "strict", "{report}");
    assert_eq!(report["rounds"], 20, "{report}");
    // One refund at the server per call of each of the four series, and one done intent per
    // call through the gateway, warm-up included: none lost, none doubled.
    let warm_up = report["warm_up_rounds"].as_u64().unwrap();
    assert_eq!(report["refunds"], 4 * (20 + warm_up), "{report}");
    assert_eq!(report["intents_done"], 3 * (20 + warm_up), "{report}");
    let remaining: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        remaining.is_empty(),
        "the temporary folder was left behind: {remaining:?}"
    );
}

#[test]
fn bench_policies_help_documents_every_flag_and_its_relaxed_default() {
    let output = run(intentgate().args(["bench", "policies", "--help"]));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    for said in [
        "--rounds",
        "--json",
        "--durability",
        "--dir",
        "--ledger",
        "[default: relaxed]",
        "refund_plain",
        "refund_approval",
        "refund_budget",
    ] {
        assert!(stdout.contains(said), "`{said}` is not in:\n{stdout}");
    }
}

#[test]
fn bench_policies_prints_every_series_as_json_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(intentgate()
        .env_remove("INTENTGATE_DURABILITY")
        .args(["bench", "policies", "--rounds", "50", "--json", "--dir"])
        .arg(dir.path()));
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|error| {
        panic!("stdout is not one JSON object ({error}):\n{stdout}");
    });
    // Each series' latencies and ratios are positive; what a policy adds over the plain tool
    // may be negative on a noisy machine, but is there.
    for series in ["plain", "approval", "budget"] {
        for percentile in ["p50", "p99"] {
            let field = format!("{series}_{percentile}_us");
            assert!(
                report[&field].as_f64().is_some_and(|value| value > 0.0),
                "{field} is not a positive number: {report}"
            );
        }
    }
    for series in ["approval", "budget"] {
        for percentile in ["p50", "p99"] {
            let ratio = format!("ratio_{series}_to_plain_{percentile}");
            assert!(
                report[&ratio].as_f64().is_some_and(|value| value > 0.0),
                "{ratio} is not a positive number: {report}"
            );
            let added = format!("added_by_{series}_{percentile}_us");
            assert!(report[&added].is_number(), "{added} is missing: {report}");
        }
    }
    assert_eq!(report["durability"], "relaxed", "{report}");
    assert_eq!(report["ledger"], "sqlite", "{report}");
    assert_eq!(report["rounds"], 50, "{report}");
    // One done intent per call of each of the three tools, warm-up included, and each of
    // refund_budget's two budgets counted every call of it: every series completed.
    let calls = 50 + report["warm_up_rounds"].as_u64().unwrap();
    assert_eq!(report["intents_done"], 3 * calls, "{report}");
    assert_eq!(report["budget_counts"], 2 * calls, "{report}");
    // Whether a target is met depends on the machine; that both are reported does not.
    assert_eq!(
        target_fields(&report),
        ["ratio_approval_to_plain_p50", "ratio_budget_to_plain_p50"],
        "{report}"
    );
    let remaining: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        remaining.is_empty(),
        "the temporary folder was left behind: {remaining:?}"
    );
}

/// A ledger file created before it was made private stays readable by others until its
/// operator changes it: every command that opens it says so, with the command that fixes it.
#[cfg(unix)]
#[test]
fn a_ledger_others_may_read_is_opened_with_a_warning_that_says_how_to_close_it() {
    use std::os::unix::fs::PermissionsExt;
    let folder = tempfile::tempdir().unwrap();
    let ledger = folder.path().join("ledger.db");
    let list = |ledger: &std::path::Path| {
        run(intentgate().args(["intents", "list", "--ledger", ledger.to_str().unwrap()]))
    };
    drop(
        intentgate_ledger::SqliteLedger::open(&ledger, intentgate_ledger::SqliteOptions::default())
            .unwrap(),
    );
    let created = list(&ledger);
    assert!(created.status.success(), "{created:?}");
    assert!(!text(&created.stderr).contains("chmod"), "{created:?}");

    std::fs::set_permissions(&ledger, std::fs::Permissions::from_mode(0o644)).unwrap();
    let opened = list(&ledger);
    assert!(opened.status.success(), "{opened:?}");
    let stderr = text(&opened.stderr);
    assert!(
        stderr.contains(&format!("chmod 600 {}", ledger.display())),
        "{stderr}"
    );
}

/// One HTTP/1.1 request over a fresh connection; the whole response as text.
fn http(address: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("the mock provider accepts");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_mock_provider_speaks_stripe_with_dialect_stripe() {
    use std::io::BufRead;
    let help = text(&run(intentgate().args(["mock-provider", "--help"])).stdout);
    assert!(help.contains("--dialect"), "{help}");
    let refused = run(intentgate().args(["mock-provider", "--dialect", "yaml"]));
    assert!(!refused.status.success(), "{refused:?}");

    let mut child = intentgate()
        .args([
            "mock-provider",
            "--listen",
            "127.0.0.1:0",
            "--faults",
            "quiet",
            "--dialect",
            "stripe",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line.trim().rsplit("http://").next().unwrap().to_owned();
    let body = "payment_intent=pi_1&amount=4900&metadata%5Bintent_key%5D=refund%3Api_1%3A49.00";
    let request = format!(
        "POST /v1/refunds HTTP/1.1\r\nHost: {address}\r\nIdempotency-Key: k1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let first = http(&address, &request);
    let again = http(&address, &request);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.contains(r#""amount":4900"#), "{first}");
    assert!(
        !first.to_ascii_lowercase().contains("idempotent-replayed"),
        "{first}"
    );
    assert!(
        again
            .to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "{again}"
    );
}

//! The kill switch as an operator uses it: `intentgate flags` run as a process against the
//! ledger of real `intentgate serve` gateways (one on a SQLite file, or two replicas on one
//! PostgreSQL schema), in front of the real `intentgate mock-provider`, on loopback ports.
//!
//! The gateways re-read the flags every 500 ms, so a switch is honoured within about a
//! second; the tests poll for up to [`HONOURED_WITHIN`] and assert nothing tighter. They
//! print the delay they saw.
//!
//! The PostgreSQL test needs `DATABASE_URL`; without it it prints that it is skipped (with
//! `CI=true` it fails instead). It uses a schema of its own (`INTENTGATE_LEDGER_SCHEMA`),
//! dropped at the end.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Schema, database_url, example_config, get_json, mock_provider, serve, until};

/// Longest wait for a gateway to honour a switch: the design says within a second; the
/// margin is for a loaded CI machine, not a looser promise.
const HONOURED_WITHIN: Duration = Duration::from_secs(3);
/// Pause between two calls while waiting for a switch to be honoured.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The binary (see [`support::intentgate`]) without `USER` either, which `--actor` defaults
/// to, and with `env`.
fn intentgate(env: &[(&str, &str)]) -> Command {
    let mut command = support::intentgate();
    command.env_remove("USER");
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// `intentgate flags ARGS` to its end.
fn flags(args: &[&str], env: &[(&str, &str)]) -> Output {
    intentgate(env)
        .arg("flags")
        .args(args)
        .output()
        .expect("intentgate flags runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The tool names of the example config.
fn example_tools() -> Vec<String> {
    support::example()
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("- name: "))
        .map(|name| name.trim().to_owned())
        .collect()
}

fn refund(order: &str) -> Value {
    json!({"order_id": order, "amount": 25.0, "reason": "requested_by_customer"})
}

/// One refund call through `gateway`; its outcome.
async fn call_refund(client: &reqwest::Client, gateway: &str, order: &str) -> Value {
    support::call(client, gateway, "refund_order", refund(order)).await
}

/// Calls refund `order` through `gateway` until the answer's status is `status`; how long
/// that took. Panics after [`HONOURED_WITHIN`].
async fn wait_for_status(
    client: &reqwest::Client,
    gateway: &str,
    order: &str,
    status: &str,
) -> Duration {
    let ((), took) = until(HONOURED_WITHIN, POLL_EVERY, async || {
        let outcome = call_refund(client, gateway, order).await;
        if outcome["status"] == status {
            return Ok(());
        }
        Err(format!(
            "{gateway} still answers {outcome} after {HONOURED_WITHIN:?}, not `{status}`"
        ))
    })
    .await;
    took
}

async fn mock_json(client: &reqwest::Client, mock: &str, path: &str) -> Value {
    get_json(client, format!("{mock}{path}")).await
}

/// `flags list --format json` as an object by tool name.
fn listed(args: &[&str], env: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    let mut full = vec!["list", "--format", "json"];
    full.extend_from_slice(args);
    let output = flags(&full, env);
    assert!(output.status.success(), "{output:?}");
    let listing: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!("not JSON ({error}): {}", text(&output.stdout));
    });
    listing["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["tool"].as_str().unwrap().to_owned(), row.clone()))
        .collect()
}

/// A fresh folder with the example config and a ledger path in it (no ledger yet).
struct Setup {
    folder: tempfile::TempDir,
    config: String,
    ledger: String,
}

impl Setup {
    fn new() -> Setup {
        let folder = tempfile::tempdir().unwrap();
        let config = example_config(folder.path(), |text| text);
        let config = config.to_str().unwrap().to_owned();
        let ledger = folder.path().join("ledger.db").to_str().unwrap().to_owned();
        Setup {
            folder,
            config,
            ledger,
        }
    }

    /// `--config C --ledger L`.
    fn location(&self) -> [&str; 4] {
        ["--config", &self.config, "--ledger", &self.ledger]
    }

    fn with_location<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut full = args.to_vec();
        full.extend_from_slice(&self.location());
        full
    }
}

#[test]
fn list_on_a_fresh_ledger_shows_every_tool_on_and_creates_no_ledger() {
    let setup = Setup::new();
    let tools = example_tools();
    assert_eq!(tools.len(), 15);

    let rows = listed(&setup.location(), &[]);
    assert_eq!(rows.len(), tools.len());
    for tool in &tools {
        let row = &rows[tool];
        assert_eq!(
            (&row["state"], &row["enabled"], &row["configured"]),
            (&json!("on"), &json!(true), &json!(true)),
            "{row}"
        );
        assert_eq!(row["reason"], Value::Null, "{row}");
    }

    let output = flags(&setup.with_location(&["list"]), &[]);
    assert!(output.status.success(), "{output:?}");
    let table = text(&output.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("TOOL"), "{table}");
    assert_eq!(lines.len(), 1 + tools.len(), "{table}");
    for tool in &tools {
        let line = lines
            .iter()
            .find(|line| line.split_whitespace().next() == Some(tool.as_str()))
            .unwrap_or_else(|| panic!("{tool} is not listed:\n{table}"));
        assert_eq!(line.split_whitespace().nth(1), Some("on"), "{line}");
    }
    assert!(
        !Path::new(&setup.ledger).exists(),
        "listing must not create a ledger at a mistyped path"
    );
}

#[tokio::test]
async fn a_tool_switched_off_with_the_cli_is_refused_by_a_running_gateway_until_switched_on() {
    let setup = Setup::new();
    let mock = mock_provider();
    let gateway = serve(
        &setup.config,
        &setup.ledger,
        &[("INTENTGATE_MOCK_URL", &mock.url)],
    );
    let client = support::client();
    assert_eq!(
        call_refund(&client, &gateway.url, "before").await["status"],
        "done"
    );

    let reason = "duplicate refunds, incident 4411";
    let switched = Instant::now();
    let output = flags(
        &setup.with_location(&[
            "disable",
            "refund_order",
            "--reason",
            reason,
            "--actor",
            "alice",
        ]),
        &[],
    );
    let cli_took = switched.elapsed();
    assert!(output.status.success(), "{output:?}");
    let said = text(&output.stdout);
    assert!(
        said.contains("refund_order is now off (it was on)"),
        "{said}"
    );
    assert!(said.contains(reason), "{said}");
    assert!(said.contains("within a second"), "{said}");

    // Within about a second the gateway refuses the tool (a probe call made before it read
    // the flag may still run); from then on nothing of it reaches the provider.
    let refused_after = wait_for_status(&client, &gateway.url, "probe", "disabled").await;
    println!(
        "flags disable took {cli_took:?}; the gateway answered `disabled` {refused_after:?} after it exited"
    );
    let requests_before = mock_json(&client, &mock.url, "/admin/stats").await["requests"].clone();
    let outcome = call_refund(&client, &gateway.url, "after").await;
    assert_eq!(outcome["status"], "disabled", "{outcome}");
    assert!(
        outcome["message"]
            .as_str()
            .unwrap()
            .contains("a person will follow up"),
        "{outcome}"
    );
    let stats = mock_json(&client, &mock.url, "/admin/stats").await;
    assert_eq!(stats["requests"], requests_before, "{stats}");
    let effects = mock_json(&client, &mock.url, "/admin/effects").await;
    assert_eq!(effects["by_order"].get("after"), None, "{effects}");
    // Other tools keep working.
    let read = client
        .post(format!("{}/v1/tools/get_order/call", gateway.url))
        .json(&json!({"arguments": {"order_id": "o1"}}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(read["status"], "done", "{read}");

    // The list says who switched it off, when and why.
    let rows = listed(&setup.location(), &[]);
    let row = &rows["refund_order"];
    assert_eq!(
        (&row["state"], &row["enabled"]),
        (&json!("off"), &json!(false))
    );
    assert_eq!(row["reason"], reason);
    assert_eq!(row["actor"], "alice");
    assert!(row["updated_ms"].as_i64().unwrap() > 0, "{row}");
    assert!(row["updated_at"].as_str().unwrap().ends_with('Z'), "{row}");
    assert_eq!(rows["get_order"]["state"], "on");
    let output = flags(&setup.with_location(&["list"]), &[]);
    let table = text(&output.stdout);
    let line = table
        .lines()
        .find(|line| line.starts_with("refund_order "))
        .unwrap_or_else(|| panic!("{table}"));
    for part in [" off ", "alice", reason] {
        assert!(line.contains(part), "`{part}` is not in {line:?}");
    }

    // Switched back on: the same call now runs.
    let output = flags(
        &setup.with_location(&["enable", "refund_order", "--reason", "fixed in 2.4.1"]),
        &[("USER", "bob")],
    );
    assert!(output.status.success(), "{output:?}");
    assert!(
        text(&output.stdout).contains("refund_order is now on (it was off)"),
        "{output:?}"
    );
    let resumed_after = wait_for_status(&client, &gateway.url, "after", "done").await;
    println!("the gateway ran the call again {resumed_after:?} after flags enable exited");
    let effects = mock_json(&client, &mock.url, "/admin/effects").await;
    assert_eq!(effects["by_order"]["after"], 1, "{effects}");
    assert_eq!(effects["duplicates"], json!([]), "{effects}");
    let row = &listed(&setup.location(), &[])["refund_order"];
    assert_eq!(
        (&row["state"], &row["reason"], &row["actor"]),
        (&json!("on"), &json!("fixed in 2.4.1"), &json!("bob")),
        "the actor defaults to $USER: {row}"
    );
}

#[test]
fn an_unknown_tool_is_refused_with_the_config_tool_names() {
    let setup = Setup::new();
    for command in ["disable", "enable"] {
        let output = flags(
            &setup.with_location(&[command, "refund_ordr", "--reason", "typo"]),
            &[],
        );
        assert!(!output.status.success(), "{output:?}");
        let error = text(&output.stderr);
        assert!(error.contains("no tool named `refund_ordr`"), "{error}");
        for tool in example_tools() {
            assert!(error.contains(&tool), "{tool} is not named in: {error}");
        }
    }
    assert!(!Path::new(&setup.ledger).exists(), "nothing was written");
}

#[test]
fn disable_without_a_reason_is_refused() {
    let setup = Setup::new();
    let output = flags(&setup.with_location(&["disable", "refund_order"]), &[]);
    assert!(!output.status.success(), "{output:?}");
    let error = text(&output.stderr);
    assert!(error.contains("--reason"), "{error}");

    let output = flags(
        &setup.with_location(&["disable", "refund_order", "--reason", "  "]),
        &[],
    );
    assert!(!output.status.success(), "{output:?}");
    let error = text(&output.stderr);
    assert!(error.contains("--reason is empty"), "{error}");
    assert!(!Path::new(&setup.ledger).exists(), "nothing was written");
}

#[test]
fn a_reason_or_actor_longer_than_the_ledger_stores_is_refused_not_cut() {
    let setup = Setup::new();
    let longest = "r".repeat(4096);
    let output = flags(
        &setup.with_location(&["disable", "refund_order", "--reason", &longest]),
        &[],
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        listed(&setup.location(), &[])["refund_order"]["reason"],
        longest
    );

    let too_long = "r".repeat(4097);
    let output = flags(
        &setup.with_location(&["enable", "refund_order", "--reason", &too_long]),
        &[],
    );
    assert!(!output.status.success(), "{output:?}");
    let error = text(&output.stderr);
    assert!(
        error.contains("--reason is 4097 bytes long; the ledger stores at most 4096"),
        "{error}"
    );
    let actor = "a".repeat(257);
    let output = flags(
        &setup.with_location(&["enable", "refund_order", "--actor", &actor]),
        &[],
    );
    assert!(!output.status.success(), "{output:?}");
    assert!(
        text(&output.stderr).contains("--actor is 257 bytes long"),
        "{output:?}"
    );
    // Neither was stored: the tool is still off, with its first reason.
    let row = &listed(&setup.location(), &[])["refund_order"];
    assert_eq!(
        (&row["state"], &row["reason"]),
        (&json!("off"), &json!(longest))
    );
}

#[test]
fn the_actor_is_user_or_cli_when_not_given() {
    let setup = Setup::new();
    let output = flags(
        &setup.with_location(&["disable", "send_email", "--reason", "bounce storm"]),
        &[("USER", "carol")],
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        listed(&setup.location(), &[])["send_email"]["actor"],
        "carol"
    );
    let output = flags(&setup.with_location(&["enable", "send_email"]), &[]);
    assert!(output.status.success(), "{output:?}");
    let row = &listed(&setup.location(), &[])["send_email"];
    assert_eq!((&row["actor"], &row["reason"]), (&json!("cli"), &json!("")));
}

#[test]
fn a_flag_of_a_tool_no_longer_in_the_config_is_listed_as_such() {
    let setup = Setup::new();
    let output = flags(
        &setup.with_location(&["disable", "charge_card", "--reason", "card network outage"]),
        &[],
    );
    assert!(output.status.success(), "{output:?}");
    // The same ledger, under a config without charge_card.
    let config = std::fs::read_to_string(&setup.config).unwrap();
    let smaller = setup.folder.path().join("smaller.yaml");
    std::fs::write(&smaller, without_tool(&config, "charge_card")).unwrap();
    let location = [
        "--config",
        smaller.to_str().unwrap(),
        "--ledger",
        &setup.ledger,
    ];
    let rows = listed(&location, &[]);
    let row = &rows["charge_card"];
    assert_eq!(
        (&row["state"], &row["configured"]),
        (&json!("off"), &json!(false)),
        "{row}"
    );
    let mut args = vec!["list"];
    args.extend_from_slice(&location);
    let table = text(&flags(&args, &[]).stdout);
    assert!(table.contains("charge_card (not in the config)"), "{table}");
}

/// `config` without the tool named `name` (its `- name:` item, up to the next one).
fn without_tool(config: &str, name: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in config.lines() {
        if let Some(item) = line.trim_start().strip_prefix("- name: ") {
            skipping = item.trim() == name;
        } else if skipping && !line.starts_with("    ") && !line.trim().is_empty() {
            skipping = false;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[test]
fn each_flags_command_says_in_its_help_that_every_gateway_honours_it_within_a_second() {
    for command in ["list", "disable", "enable"] {
        let output = intentgate(&[])
            .args(["flags", command, "--help"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let help = text(&output.stdout);
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("every gateway sharing the ledger within a second"),
            "{command}: {help}"
        );
        for flag in [
            "--config",
            "--ledger",
            "INTENTGATE_CONFIG",
            "INTENTGATE_LEDGER",
        ] {
            assert!(
                help.contains(flag),
                "{command}: `{flag}` is not in:\n{help}"
            );
        }
    }
    let output = intentgate(&[]).args(["flags", "--help"]).output().unwrap();
    let help = text(&output.stdout);
    for command in ["list", "disable", "enable"] {
        assert!(help.contains(command), "{help}");
    }
}

#[tokio::test]
async fn two_replicas_on_postgresql_honour_a_switch_made_with_the_cli_or_through_the_other_replica()
{
    let test = "two_replicas";
    let Some(url) = database_url(test) else {
        return;
    };
    let schema = Schema::fresh(&url, &format!("flags_{test}"));
    let setup = Setup::new();
    let env = [("INTENTGATE_LEDGER_SCHEMA", schema.name.as_str())];
    let mock = mock_provider();
    const TOKEN: &str = "replica-admin-token-0123456789abcdef";
    let gateway_env = [
        env[0],
        ("INTENTGATE_MOCK_URL", &mock.url),
        ("INTENTGATE_ADMIN_TOKEN", TOKEN),
    ];
    // The first one sets the schema up; the second finds it.
    let replicas = [
        serve(&setup.config, &url, &gateway_env),
        serve(&setup.config, &url, &gateway_env),
    ];
    let client = support::client();
    for (index, replica) in replicas.iter().enumerate() {
        let outcome = call_refund(&client, &replica.url, &format!("before{index}")).await;
        assert_eq!(outcome["status"], "done", "{outcome}");
    }

    let location = ["--config", setup.config.as_str(), "--ledger", url.as_str()];
    let mut args = vec![
        "disable",
        "refund_order",
        "--reason",
        "duplicate refunds",
        "--actor",
        "alice",
    ];
    args.extend_from_slice(&location);
    let output = flags(&args, &env);
    assert!(output.status.success(), "{output:?}");
    let switched = Instant::now();
    // Within about a second each replica refuses the tool (a probe call made before it read
    // the flag may still run); from then on nothing of it reaches the provider.
    for (index, replica) in replicas.iter().enumerate() {
        wait_for_status(&client, &replica.url, &format!("probe{index}"), "disabled").await;
        println!(
            "replica {index} answered `disabled` {:?} after flags disable exited",
            switched.elapsed()
        );
    }
    let requests_before = mock_json(&client, &mock.url, "/admin/stats").await["requests"].clone();
    for (index, replica) in replicas.iter().enumerate() {
        let outcome = call_refund(&client, &replica.url, &format!("after{index}")).await;
        assert_eq!(outcome["status"], "disabled", "replica {index}: {outcome}");
    }
    let stats = mock_json(&client, &mock.url, "/admin/stats").await;
    assert_eq!(stats["requests"], requests_before, "{stats}");
    let row = &listed(&location, &env)["refund_order"];
    assert_eq!(
        (&row["state"], &row["actor"]),
        (&json!("off"), &json!("alice"))
    );

    let mut args = vec!["enable", "refund_order", "--reason", "fixed"];
    args.extend_from_slice(&location);
    let output = flags(&args, &env);
    assert!(output.status.success(), "{output:?}");
    for (index, replica) in replicas.iter().enumerate() {
        wait_for_status(&client, &replica.url, &format!("after{index}"), "done").await;
    }
    let effects = mock_json(&client, &mock.url, "/admin/effects").await;
    for index in 0..replicas.len() {
        assert_eq!(effects["by_order"][format!("after{index}")], 1, "{effects}");
    }
    assert_eq!(effects["duplicates"], json!([]), "{effects}");

    // A switch made through one replica's admin API is honoured by the other.
    for (through, other) in [(0, 1), (1, 0)] {
        let enabled = through == 1;
        let answer = client
            .put(format!("{}/v1/admin/flags/refund_order", replicas[through].url))
            .bearer_auth(TOKEN)
            .json(&json!({"enabled": enabled, "reason": "switched through a replica", "actor": "bob"}))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
        let switched = Instant::now();
        let wanted = if enabled { "done" } else { "disabled" };
        wait_for_status(
            &client,
            &replicas[other].url,
            &format!("via{through}"),
            wanted,
        )
        .await;
        println!(
            "replica {other} answered `{wanted}` {:?} after replica {through} stored the switch",
            switched.elapsed()
        );
    }
    drop(replicas);
    schema.remove();
}

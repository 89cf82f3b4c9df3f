//! `intentgate smoke` as a process: the example config passes against the built-in mock and
//! against a real `intentgate mock-provider` process (`--live`); a config whose key changes
//! per attempt, or whose refund has no lookup, fails; so does a lookup the config check
//! accepts that takes another intent's effect (a refund matched by order but not amount, a
//! charge matched by business fields when only the intent id tells two apart) or that never
//! finds its own (a `key` pointer where the provider keeps no key); `--format json` has
//! every tool.

mod support;

use std::path::Path;
use std::process::Output;
use std::time::Instant;

use serde_json::Value;
use support::{EXAMPLE_CONFIG, example_config, intentgate};

/// The example's side-effecting tools, in file order.
const SIDE_EFFECTING_TOOLS: [&str; 3] = ["refund_order", "charge_card", "send_email"];

/// `intentgate smoke ARGS` with `env`, run to its end; prints its output and how long it took.
fn smoke(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = intentgate();
    // Without a hash key in the environment, as in a CI job that has none: the smoke test's
    // ledger is thrown away, so it makes one up.
    command.env_remove("INTENTGATE_HASH_KEY");
    command.arg("smoke").args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    let started = Instant::now();
    let output = command.output().expect("intentgate smoke runs");
    println!(
        "intentgate smoke {} took {:.2} s, exit {:?}\n--- stdout\n{}--- stderr (last 2000 bytes)\n{}",
        args.join(" "),
        started.elapsed().as_secs_f64(),
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        tail(&String::from_utf8_lossy(&output.stderr), 2000),
    );
    output
}

fn tail(text: &str, bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The table row of `tool`.
fn row<'a>(table: &'a str, tool: &str) -> &'a str {
    table
        .lines()
        .find(|line| line.starts_with(&format!("{tool} ")))
        .unwrap_or_else(|| panic!("no row for {tool} in:\n{table}"))
}

#[test]
fn the_example_config_passes_against_the_built_in_mock() {
    let output = smoke(&["--config", EXAMPLE_CONFIG], &[]);
    assert_eq!(output.status.code(), Some(0));
    let table = stdout(&output);
    for tool in SIDE_EFFECTING_TOOLS {
        let row = row(&table, tool);
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>()[1..],
            ["pass", "pass", "pass", "pass", "ok"],
            "{row}"
        );
    }
    // Reads and idempotent tools are not smoke-tested.
    assert!(!table.contains("get_order"), "{table}");
    // The client-executed refund is skipped with the reason, not failed.
    assert!(
        table.contains(
            "refund_order_sdk skipped: executed by the caller's own code (`executor: client`)"
        ),
        "{table}"
    );
    assert!(
        table.contains("POST /v1/tools/refund_order_sdk/intents"),
        "{table}"
    );
    assert!(table.contains("PASSED: 3 of 3"), "{table}");
}

#[test]
fn json_output_has_every_side_effecting_tool_with_its_steps() {
    let output = smoke(&["--config", EXAMPLE_CONFIG, "--format", "json"], &[]);
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(report["passed"], true);
    assert_eq!(report["target"], "mock");
    let tools = report["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["tool"].as_str().unwrap())
        .collect();
    assert_eq!(names, SIDE_EFFECTING_TOOLS);
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report}");
    assert_eq!(skipped[0]["tool"], "refund_order_sdk");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap()
            .contains("executor: client"),
        "{report}"
    );
    for tool in tools {
        for step in [
            "effect_once",
            "repeats_answered",
            "lookup_finds_own",
            "kill_switch",
        ] {
            assert_eq!(tool[step], "pass", "{tool}");
        }
        assert_eq!(tool["effects"], 1, "{tool}");
        // The first call and 6 repeats, each done or already_done, one done at most.
        let answers = tool["answers"].as_array().unwrap();
        assert_eq!(answers.len(), 7, "{tool}");
        assert!(
            answers
                .iter()
                .all(|answer| answer == "done" || answer == "already_done"),
            "{tool}"
        );
        assert!(tool["intent_key"].as_str().is_some(), "{tool}");
    }
}

// Found by adding an approval policy to a config: every smoke call was held, and the
// smoke test failed a tool whose wiring was right.
#[test]
fn a_tool_with_approval_and_a_budget_is_smoke_tested_without_them() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        let key = "    key: \"refund:{order_id}:{amount:.2}\"\n";
        assert!(text.contains(key));
        text.replacen(
            key,
            &format!(
                "{key}    approval: {{}}\n    budgets:\n      - {{name: hourly, per: tool, \
                 window: 1h, count: 1}}\n"
            ),
            1,
        )
    });
    let output = smoke(&["--config", path(&config)], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
}

#[test]
fn a_key_built_from_a_per_attempt_argument_fails_the_smoke() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        let text = text.replace(
            "key: \"refund:{order_id}:{amount:.2}\"",
            "key: \"refund:{order_id}:{tool_call_id}\"",
        );
        let property = "        order_id: {type: string, description: \"The order to refund.\", minLength: 1, maxLength: 64}\n";
        assert!(text.contains(property));
        text.replacen(
            property,
            &format!("{property}        tool_call_id: {{type: string}}\n"),
            1,
        )
    });
    let output = smoke(&["--config", path(&config)], &[]);
    assert_eq!(output.status.code(), Some(1), "the smoke could not run");
    let errors = stderr(&output);
    assert!(errors.contains("the config was refused"), "{errors}");
    assert!(errors.contains("tool_call_id"), "{errors}");
    assert!(errors.contains("refund_order"), "{errors}");
}

#[test]
fn a_refund_without_a_lookup_fails_and_says_how_to_add_one() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        // Remove refund_order's `lookup:` block (up to its `list:`).
        let tool = text.find("  - name: refund_order").unwrap();
        let lookup = tool + text[tool..].find("    lookup:\n").unwrap();
        let list = lookup + text[lookup..].find("    list:\n").unwrap();
        format!("{}{}", &text[..lookup], &text[list..])
    });
    let output = smoke(&["--config", path(&config)], &[]);
    assert_eq!(output.status.code(), Some(2), "a check failed");
    let table = stdout(&output);
    let refund = row(&table, "refund_order");
    assert!(refund.ends_with("FAILED"), "{refund}");
    assert!(refund.contains("FAIL "), "{refund}");
    assert!(table.contains("refund_order has no `lookup`"), "{table}");
    assert!(table.contains("Add a `lookup:` block"), "{table}");
    // The other tools still pass.
    assert!(row(&table, "charge_card").ends_with("ok"), "{table}");
    assert!(row(&table, "send_email").ends_with("ok"), "{table}");
    assert!(stderr(&output).contains("smoke failed"));
}

#[test]
fn a_tool_the_mock_does_not_serve_fails_and_points_to_live() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        text.replacen("      path: /v1/emails\n", "      path: /v1/messages\n", 1)
    });
    let output = smoke(&["--config", path(&config), "--format", "json"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let email = &report["tools"][2];
    assert_eq!(email["tool"], "send_email");
    assert_eq!(email["passed"], false);
    let reason = email["reasons"][0].as_str().unwrap();
    assert!(
        reason.contains("does not serve POST /v1/messages"),
        "{reason}"
    );
    assert!(reason.contains("--live"), "{reason}");
}

/// The JSON report of `intentgate smoke` of the example edited by `edit`, which the config
/// check must accept (a check failed: exit 2), and the entry of `tool`, whose lookup check
/// failed while its other steps passed.
fn lookup_failure(edit: impl Fn(String) -> String, tool: &str) -> Value {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), edit);
    let output = smoke(&["--config", path(&config), "--format", "json"], &[]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "the config is accepted and a check fails"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let entry = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["tool"] == tool)
        .unwrap()
        .clone();
    assert_eq!(entry["passed"], false, "{entry:#}");
    assert_eq!(entry["lookup_finds_own"], "fail", "{entry:#}");
    for step in ["effect_once", "kill_switch"] {
        assert_eq!(entry[step], "pass", "{entry:#}");
    }
    // Every other tool still passes.
    for other in report["tools"].as_array().unwrap() {
        if other["tool"] != tool {
            assert_eq!(other["passed"], true, "{other:#}");
        }
    }
    entry
}

/// The reasons of a tool's report entry, one text.
fn reasons(entry: &Value) -> String {
    let reasons: Vec<&str> = entry["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|reason| reason.as_str().unwrap())
        .collect();
    reasons.join("\n")
}

#[test]
fn a_refund_lookup_that_matches_the_order_but_not_the_amount_takes_the_other_refund() {
    // The refunds of the order, proved by the order alone: the config check accepts it (it
    // has a `match`), and the first intent's own lookup finds its refund, the only one of
    // its order. Only a second refund of the same order, of another amount, shows that the
    // lookup takes whichever refund of the order it sees.
    let entry = lookup_failure(
        |text| {
            let proof = "      key: /idempotency_key\n      match: {order_id: {record: /order_id}, amount: {record: /amount}}\n";
            assert!(text.contains(proof), "refund_order's lookup proof");
            text.replacen(proof, "      match: {order_id: {record: /order_id}}\n", 1)
        },
        "refund_order",
    );
    // The first intent and the one repeated after the injected failure are unharmed.
    assert_eq!(entry["repeats_answered"], "pass", "{entry:#}");
    let reasons = reasons(&entry);
    assert!(
        reasons.contains("lookup: the lookup of the intent with another `amount`")
            && reasons.contains("found the effect of the first intent"),
        "{reasons}"
    );
    assert!(
        reasons.contains("the lookup of a never-executed intent with another `amount`")
            && reasons.contains("answered found with the effect of the first intent"),
        "{reasons}"
    );
    assert!(
        reasons.contains("somebody else's effect"),
        "what it did wrong: {reasons}"
    );
    // What to change.
    assert!(
        reasons.contains("lookup: fix: the lookup proves records by `match` alone")
            && reasons.contains("leaves out the key's `amount`")
            && reasons.contains("add `key: <pointer to it in a record>`")
            && reasons.contains("`query: {idempotency_key: \"{idempotency_key}\"}`")
            && reasons.contains("amount: {record: <its pointer in a record>}"),
        "{reasons}"
    );
    // An order's own refund is not what differs: the intent with another order is fine.
    assert!(
        !reasons.contains("the intent with another `order_id`"),
        "{reasons}"
    );
}

#[test]
fn a_charge_lookup_by_business_fields_alone_takes_the_charge_of_another_intent_id() {
    // charge_card's key has the application's intent id: a customer may be charged the same
    // amount twice. Its charges by customer, proved by customer, amount and currency, are
    // accepted by the config check, and can't tell two such charges apart.
    let entry = lookup_failure(
        |text| {
            let lookup = "      query: {idempotency_key: \"{idempotency_key}\"}\n      found: /data\n      key: /idempotency_key\n      match: {customer_id:";
            assert!(text.contains(lookup), "charge_card's lookup");
            text.replacen(
                lookup,
                "      query: {customer_id: \"{customer_id}\"}\n      found: /data\n      match: {customer_id:",
                1,
            )
        },
        "charge_card",
    );
    let reasons = reasons(&entry);
    assert!(
        reasons.contains("the lookup of the intent with the same arguments and another intent id")
            && reasons.contains("found the effect of the first intent"),
        "{reasons}"
    );
    assert!(
        reasons.contains(
            "the lookup of a never-executed intent with the same arguments and another intent id"
        ) && reasons.contains("answered found"),
        "{reasons}"
    );
    assert!(
        reasons
            .contains("the key has the application's intent id, which no business field carries")
            && reasons.contains("add `key: <pointer to it in a record>`"),
        "{reasons}"
    );
    // Its business fields are all in `match`: nothing to add there.
    assert!(!reasons.contains("leaves out"), "{reasons}");
}

#[test]
fn a_lookup_key_where_the_provider_keeps_none_finds_nothing_and_says_to_send_it() {
    // The provider (the mock) echoes the Idempotency-Key header at /idempotency_key, and
    // keeps in metadata only what the call's body sends there: the intent key. A `key` in
    // metadata is a valid pointer to the config check, and never holds the provider key.
    let entry = lookup_failure(
        |text| {
            let tool = text.find("  - name: refund_order").unwrap();
            let at = tool + text[tool..].find("      key: /idempotency_key\n").unwrap();
            format!(
                "{}      key: /metadata/idempotency_key\n{}",
                &text[..at],
                &text[at + "      key: /idempotency_key\n".len()..]
            )
        },
        "refund_order",
    );
    let reasons = reasons(&entry);
    assert!(
        reasons.contains("lookup: the lookup of the first intent")
            && reasons.contains("found nothing, though the provider holds its effect"),
        "{reasons}"
    );
    assert!(
        reasons.contains("`key: /metadata/idempotency_key` must point at the provider key")
            && reasons.contains("the call sends it only as the `Idempotency-Key` header")
            && reasons.contains("`metadata: {idempotency_key: \"{idempotency_key}\"}`"),
        "{reasons}"
    );
    assert!(!reasons.contains("somebody else's effect"), "{reasons}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_against_a_mock_provider_process_passes_with_one_effect_per_intent() {
    let mock = support::mock_provider();
    let url = mock.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        smoke(
            &["--config", EXAMPLE_CONFIG, "--live", "--format", "json"],
            &[("INTENTGATE_MOCK_URL", &url)],
        )
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["target"], "live");
    assert_eq!(report["passed"], true);

    let client = support::client();
    let effects = support::get_json(&client, format!("{}/admin/effects", mock.url)).await;
    assert_eq!(effects["duplicates"], serde_json::json!([]), "{effects}");
    let by_intent = effects["by_intent_key"].as_object().unwrap();
    // Each tool: the intent with the injected failure, the one made after the kill switch
    // was turned back on, and those of the lookup check: a first intent and one more per
    // business field of the key (refund_order: order and amount; charge_card: customer and
    // the intent id; send_email: recipient, template and reference).
    let lookup_check = [1 + 2, 1 + 2, 1 + 3];
    let intents = 2 * 3 + lookup_check.iter().sum::<usize>();
    assert_eq!(by_intent.len(), intents, "{effects}");
    assert!(by_intent.values().all(|count| count == 1), "{effects}");
    for tool in report["tools"].as_array().unwrap() {
        let key = tool["intent_key"].as_str().unwrap();
        assert_eq!(by_intent.get(key), Some(&serde_json::json!(1)), "{key}");
    }
    // The failure was injected: each first call's answer was lost, so the gate looked the
    // effect up (one lookup per tool); the smoke's own lists that count the effects are 6
    // more (two per tool), and the lookup check asks once per intent it made and once per
    // intent it did not (one fewer per tool). Without the injection there would be 3 fewer.
    let stats = support::get_json(&client, format!("{}/admin/stats", mock.url)).await;
    assert_eq!(stats["effects"]["refunds"], 2 + lookup_check[0], "{stats}");
    assert_eq!(
        stats["requests"], intents,
        "one request per intent: {stats}"
    );
    let check_lookups: usize = lookup_check.iter().map(|made| made + made - 1).sum();
    assert_eq!(stats["lookups"], 3 + 6 + check_lookups, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_counts_a_tool_without_a_list_by_its_lookup_and_says_what_that_cannot_see() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| {
        // refund_order without its `list:` block (up to the next tool); charge_card's list
        // pairs records by business fields, as for a provider that keeps no metadata.
        let tool = text.find("  - name: refund_order").unwrap();
        let list = tool + text[tool..].find("    list:\n").unwrap();
        let next = list + text[list..].find("  - name: charge_card").unwrap();
        let text = format!("{}\n{}", &text[..list], &text[next..]);
        let by_fields = text.replacen(
            "fields: {idempotency_key: /idempotency_key, intent_key: /metadata/intent_key, external_id: /id, amount: /amount, subject: /customer_id}",
            "fields: {external_id: /id, amount: /amount, subject: /customer_id}\n      match: {customer_id: {record: /customer_id}, amount: {record: /amount}}",
            1,
        );
        assert_ne!(by_fields, text, "charge_card's list is in the config");
        by_fields
    });
    let mock = support::mock_provider();
    let url = mock.url.clone();
    let config_path = path(&config).to_owned();
    let output = tokio::task::spawn_blocking(move || {
        smoke(
            &["--config", &config_path, "--live", "--format", "json"],
            &[("INTENTGATE_MOCK_URL", &url)],
        )
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "every tool passes");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let tool = |name: &str| {
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tool| tool["tool"] == name)
            .unwrap()
            .clone()
    };
    let refund = tool("refund_order");
    assert_eq!(refund["effect_once"], "pass", "{refund}");
    assert_eq!(refund["effects"], 1, "{refund}");
    assert_eq!(refund["effects_counted_by"], "lookup", "{refund}");
    let note = refund["notes"][0].as_str().unwrap();
    assert!(
        note.contains("finds one record at most") && note.contains("a duplicate would go unseen"),
        "{note}"
    );
    let charge = tool("charge_card");
    assert_eq!(charge["effects_counted_by"], "list", "{charge}");
    assert_eq!(charge["effects"], 1, "{charge}");
    assert!(charge.get("notes").is_none(), "{charge}");
    assert_eq!(tool("send_email")["effects_counted_by"], "list");

    // The lookup saw what the provider holds: one refund per intent.
    let effects =
        support::get_json(&support::client(), format!("{}/admin/effects", mock.url)).await;
    assert_eq!(effects["duplicates"], serde_json::json!([]), "{effects}");

    // The text report carries the caveat under the table.
    let config_path = path(&config).to_owned();
    let url = mock.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        smoke(
            &["--config", &config_path, "--live"],
            &[("INTENTGATE_MOCK_URL", &url)],
        )
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let text = stdout(&output);
    assert!(text.contains("refund_order, note:"), "{text}");
    assert!(text.contains("has no `list`"), "{text}");
}

fn path(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The Stripe example, as shipped.
const STRIPE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/stripe.yaml");

/// The environment the Stripe example reads: a dummy secret (the mock takes any), and no
/// `STRIPE_API_BASE` (the mock replaces every upstream's base URL).
const STRIPE_ENV: [(&str, &str); 1] = [("STRIPE_SECRET_KEY", "sk_test_intentgate_smoke")];

/// The JSON report of `intentgate smoke --mock-dialect stripe` of `config`, and its exit.
fn stripe_smoke(config: &str) -> (Option<i32>, Value) {
    let output = smoke(
        &[
            "--config",
            config,
            "--mock-dialect",
            "stripe",
            "--format",
            "json",
        ],
        &STRIPE_ENV,
    );
    let report = serde_json::from_slice(&output.stdout).expect("one JSON object");
    (output.status.code(), report)
}

#[test]
fn the_stripe_example_passes_unchanged_against_the_mock_in_its_stripe_dialect() {
    let (status, report) = stripe_smoke(STRIPE_CONFIG);
    assert_eq!(status, Some(0), "{report:#}");
    assert_eq!(
        (report["target"].as_str(), report["mock_dialect"].as_str()),
        (Some("mock"), Some("stripe"))
    );
    let tools = report["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|tool| tool["tool"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["refund_order", "charge_card"]);
    for tool in tools {
        for step in [
            "effect_once",
            "repeats_answered",
            "lookup_finds_own",
            "kill_switch",
        ] {
            assert_eq!(tool[step], "pass", "{tool:#}");
        }
        assert_eq!(tool["effects"], 1, "{tool:#}");
        assert_eq!(tool["effects_counted_by"], "effect_log", "{tool:#}");
        assert_eq!(tool["answers"].as_array().unwrap().len(), 7, "{tool:#}");
    }
    // The text says which API the mock spoke.
    let output = smoke(
        &["--config", STRIPE_CONFIG, "--mock-dialect", "stripe"],
        &STRIPE_ENV,
    );
    assert_eq!(output.status.code(), Some(0));
    let table = stdout(&output);
    assert!(
        table.contains("against the built-in mock provider in its Stripe dialect"),
        "{table}"
    );
    assert!(table.contains("PASSED: 2 of 2"), "{table}");
}

#[test]
fn a_stripe_refund_lookup_without_its_key_and_matched_by_payment_intent_alone_fails() {
    // Proved by the payment intent alone, the lookup of one refund takes the payment's other
    // refund, of another amount.
    let folder = tempfile::tempdir().unwrap();
    let broken = std::fs::read_to_string(STRIPE_CONFIG).unwrap().replacen(
        "      found: /data
      key: /metadata/intentgate_key
      match:
        payment_intent: {record: /payment_intent}
        amount: {record: /amount, minor_units: USD}
",
        "      found: /data
      match:
        payment_intent: {record: /payment_intent}
",
        1,
    );
    assert_ne!(broken, std::fs::read_to_string(STRIPE_CONFIG).unwrap());
    let config = folder.path().join("stripe.yaml");
    std::fs::write(&config, broken).unwrap();
    let (status, report) = stripe_smoke(path(&config));
    assert_eq!(status, Some(2), "{report:#}");
    let tools = report["tools"].as_array().unwrap();
    let refund = tools
        .iter()
        .find(|tool| tool["tool"] == "refund_order")
        .unwrap();
    assert_eq!(refund["lookup_finds_own"], "fail", "{refund:#}");
    assert_eq!(refund["passed"], false, "{refund:#}");
    for step in ["effect_once", "repeats_answered", "kill_switch"] {
        assert_eq!(refund[step], "pass", "{refund:#}");
    }
    let reasons = reasons(refund);
    assert!(reasons.contains("another `amount`"), "{reasons}");
    assert!(reasons.contains("somebody else's effect"), "{reasons}");
    assert!(reasons.contains("`amount`"), "{reasons}");
    // The charge is untouched and still passes.
    let charge = tools
        .iter()
        .find(|tool| tool["tool"] == "charge_card")
        .unwrap();
    assert_eq!(charge["passed"], true, "{charge:#}");
}

#[test]
fn the_stripe_example_against_the_mocks_own_dialect_says_to_ask_for_stripes() {
    let output = smoke(
        &["--config", STRIPE_CONFIG, "--format", "json"],
        &STRIPE_ENV,
    );
    assert_eq!(output.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        report.get("mock_dialect").is_some_and(|d| d == "json"),
        "{report:#}"
    );
    let charge = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["tool"] == "charge_card")
        .unwrap();
    assert!(
        reasons(charge).contains("`--mock-dialect stripe`"),
        "{charge:#}"
    );
}

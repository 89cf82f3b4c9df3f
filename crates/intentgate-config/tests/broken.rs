//! A corpus of broken configs. Each one is the small valid config below with one mistake,
//! and each test asserts the exact line (and column) of the error and that its message says
//! what is wrong and its fix says what to change.

use intentgate_config::{ConfigError, ConfigErrors, load_str};

/// A valid config with a read and a side effect. Mistakes are made by replacing one line.
const BASE: &str = r#"upstreams:
  payments:
    base_url: ${MOCK_URL:-http://127.0.0.1:8090}
    headers: {Authorization: "Bearer ${PAYMENTS_API_KEY}"}
    honours_idempotency_keys: true
owners:
  payments-team: {log: true}
tools:
  - name: get_order
    description: Look up an order.
    effect: read
    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    call: {upstream: payments, method: GET, path: "/v1/orders/{order_id}"}
  - name: refund_order
    description: Refund an order.
    effect: side_effect
    owner: payments-team
    input_schema:
      type: object
      properties:
        order_id: {type: string}
        amount: {type: number}
      required: [order_id, amount]
    key: "refund:{order_id}:{amount:.2}"
    timeout_ms: 10000
    call:
      upstream: payments
      method: POST
      path: /v1/refunds
      body:
        order_id: "{order_id}"
        amount: "{amount:.2}"
        metadata: {intent_key: "{intent_key}"}
    lookup: {path: /v1/refunds, query: {idempotency_key: "{idempotency_key}"}, found: /data, key: /idempotency_key}
"#;

/// The secret the environment holds; it must never appear in an error.
const SECRET: &str = "sk_live_51SECRETSECRET";

fn env(name: &str) -> Option<String> {
    match name {
        "PAYMENTS_API_KEY" => Some(SECRET.to_owned()),
        _ => None,
    }
}

/// `BASE` with `old` (a whole line, or part of one) replaced by `new`.
fn broken(old: &str, new: &str) -> String {
    assert!(BASE.contains(old), "the base config has no `{old}`");
    BASE.replacen(old, new, 1)
}

fn errors(text: &str) -> ConfigErrors {
    let errors = load_str(text, "agent.yaml", &env).expect_err("the config must be refused");
    let rendered = errors.to_string();
    assert!(
        !rendered.contains(SECRET),
        "a secret leaked into errors:\n{rendered}"
    );
    assert!(!format!("{errors:?}").contains(SECRET));
    errors
}

/// The only error of `text`.
fn only_error(text: &str) -> ConfigError {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected one error, got:\n{errors}");
    errors.errors[0].clone()
}

/// 1-based line and column where `needle` starts in `text` (its first occurrence).
fn position(text: &str, needle: &str) -> (u64, u64) {
    let offset = text
        .find(needle)
        .unwrap_or_else(|| panic!("`{needle}` is not in the text"));
    let before = &text[..offset];
    let line = before.matches('\n').count() as u64 + 1;
    let column = (offset - before.rfind('\n').map_or(0, |newline| newline + 1)) as u64 + 1;
    (line, column)
}

fn assert_at(error: &ConfigError, text: &str, needle: &str) {
    assert_eq!(
        (error.line, error.column),
        position(text, needle),
        "error at the wrong place (expected `{needle}`): {error}"
    );
}

fn assert_says(error: &ConfigError, message: &[&str], fix: &[&str]) {
    for part in message {
        assert!(
            error.message.contains(part),
            "message lacks `{part}`: {error}"
        );
    }
    for part in fix {
        assert!(error.fix.contains(part), "fix lacks `{part}`: {error}");
    }
}

#[test]
fn the_base_config_is_valid() {
    let loaded = load_str(BASE, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(loaded.tools.len(), 2);
}

#[test]
fn a_tool_without_an_effect_is_named_at_its_first_line() {
    let text = broken("    effect: side_effect\n", "");
    let error = only_error(&text);
    assert_at(&error, &text, "name: refund_order");
    assert_says(
        &error,
        &["tool `refund_order` has no effect"],
        &["add `effect: read`, `idempotent` or `side_effect`"],
    );
    assert_eq!(error.source, "agent.yaml");
}

#[test]
fn a_missing_effect_is_reported_even_next_to_a_parse_error() {
    // How it broke (by design, guarded here): a typed parse stops at its first error, so a
    // tool without an effect would hide behind any typo elsewhere.
    let text =
        broken("    effect: side_effect\n", "").replace("timeout_ms: 10000", "timout_ms: 10000");
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    assert_says(
        &errors.errors[0],
        &["tool `refund_order` has no effect"],
        &[],
    );
    assert_says(
        &errors.errors[1],
        &["unknown field `timout_ms`"],
        &["`timeout_ms`"],
    );
}

#[test]
fn an_empty_effect_is_as_missing_as_no_effect() {
    // How it could break: `effect:` parses as null, which the typed parse reads as "no
    // effect" without complaint; the tool must not be dropped silently.
    let text = broken("    effect: side_effect\n", "    effect:\n");
    let error = only_error(&text);
    assert_at(&error, &text, "name: refund_order");
    assert_says(&error, &["tool `refund_order` has no effect"], &[]);
}

#[test]
fn a_misspelt_field_is_an_error_with_a_suggestion() {
    let text = broken("    timeout_ms: 10000", "    timout_ms: 10000");
    let error = only_error(&text);
    assert_at(&error, &text, "timout_ms");
    assert_says(
        &error,
        &["unknown field `timout_ms`", "`tools[1]`"],
        &["did you mean `timeout_ms`?"],
    );
}

#[test]
fn bad_yaml_syntax_is_reported_where_the_parser_stopped() {
    // The flow mapping of `call` is never closed. YAML lets a flow mapping go on over
    // several lines, so the parser can only notice at the next line, where a block item
    // starts inside it; the fix says to look just above.
    let text = broken(
        r#"path: "/v1/orders/{order_id}"}"#,
        r#"path: "/v1/orders/{order_id}""#,
    );
    let error = only_error(&text);
    assert_at(&error, &text, "- name: refund_order");
    assert_says(
        &error,
        &["invalid YAML"],
        &["here or just above", "`{` is closed"],
    );

    let text = broken("    effect: read\n", "\teffect: read\n");
    let error = only_error(&text);
    assert_eq!(error.line, position(&text, "\teffect").0, "{error}");
    assert_says(&error, &["tab"], &["indent with spaces"]);
}

#[test]
fn a_key_from_the_tool_call_id_is_refused() {
    let text = broken(
        "        amount: {type: number}\n",
        "        amount: {type: number}\n        tool_call_id: {type: string}\n",
    )
    .replace(
        "refund:{order_id}:{amount:.2}",
        "refund:{order_id}:{tool_call_id}",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"refund:{order_id}:{tool_call_id}\"");
    assert_says(
        &error,
        &["{tool_call_id}", "changes on every attempt"],
        &[
            "refund:{order_id}:{amount:.2}",
            "{intent_id}",
            "remove `{tool_call_id}`",
        ],
    );
}

#[test]
fn a_key_from_a_name_that_is_not_an_argument_is_refused() {
    let text = broken(
        "refund:{order_id}:{amount:.2}",
        "refund:{order}:{amount:.2}",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"refund:{order}");
    assert_says(
        &error,
        &["`{order}`", "not an argument"],
        &[
            "`order_id`",
            "`amount`",
            "add `order` to input_schema.properties",
        ],
    );
}

#[test]
fn a_key_on_a_read_tool_is_refused() {
    let text = broken(
        "    effect: read\n",
        "    effect: read\n    key: \"order:{order_id}\"\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"order:{order_id}\"");
    assert_says(
        &error,
        &[
            "tool `get_order`",
            "only side-effecting tools take an intent key",
        ],
        &["remove `key:`"],
    );
}

#[test]
fn a_side_effect_without_a_key_is_refused_at_its_effect() {
    let text = broken("    key: \"refund:{order_id}:{amount:.2}\"\n", "");
    let error = only_error(&text);
    assert_at(&error, &text, "side_effect");
    assert_says(
        &error,
        &["no intent key"],
        &["key: \"refund:{order_id}:{amount:.2}\""],
    );
}

#[test]
fn an_unknown_upstream_is_named_with_the_ones_that_exist() {
    let text = broken("      upstream: payments\n", "      upstream: payment\n");
    let error = only_error(&text);
    assert_at(&error, &text, "payment\n");
    assert_says(
        &error,
        &["tool `refund_order` uses upstream `payment`, which is not in `upstreams`"],
        &["use one of: `payments`"],
    );
}

#[test]
fn an_unknown_owner_is_named_with_the_ones_that_exist() {
    let text = broken("    owner: payments-team\n", "    owner: payments\n");
    let error = only_error(&text);
    assert_at(&error, &text, "payments\n");
    assert_says(
        &error,
        &["owner `payments`, which is not in `owners`"],
        &["add `payments: {log: true}`", "`payments-team`"],
    );
}

#[test]
fn an_unset_variable_is_named_with_the_fix_and_never_its_value() {
    let text = BASE.to_owned();
    let errors = load_str(&text, "agent.yaml", &|_| None).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors}");
    let error = &errors.errors[0];
    assert_at(error, &text, "\"Bearer ${PAYMENTS_API_KEY}\"");
    assert_says(error, &["`PAYMENTS_API_KEY`", "is not set"], &[]);
    assert_eq!(
        error.fix,
        "export PAYMENTS_API_KEY, or write ${PAYMENTS_API_KEY:-value}"
    );
}

#[test]
fn a_secret_set_in_the_environment_never_appears_in_errors() {
    // The secret is resolved in the upstream and in a tool header; around it: an unset
    // variable, a header template with a bad placeholder next to the secret, and a base URL
    // from the environment that is not a URL.
    let text = broken(
        "    lookup: {path: /v1/refunds,",
        "    lookup: {headers: {X-Signature: \"${PAYMENTS_API_KEY}{nope}\", X-Other: \"${OTHER_TOKEN}\"}, path: /v1/refunds,",
    );
    let environment = |name: &str| match name {
        "PAYMENTS_API_KEY" => Some(SECRET.to_owned()),
        "MOCK_URL" => Some(format!("not a url {SECRET}")),
        _ => None,
    };
    let errors = load_str(&text, "agent.yaml", &environment).unwrap_err();
    let rendered = errors.to_string();
    assert!(!rendered.contains(SECRET), "{rendered}");
    assert!(!format!("{errors:?}").contains(SECRET));
    assert_eq!(errors.len(), 3, "{rendered}");
    assert_says(
        &errors.errors[0],
        &["`upstreams.payments.base_url`", "${MOCK_URL:-"],
        &[],
    );
    assert_says(&errors.errors[1], &["{nope}"], &["`order_id`"]);
    assert_says(
        &errors.errors[2],
        &["`OTHER_TOKEN`"],
        &["export OTHER_TOKEN"],
    );

    // A secret that parses as a URL scheme must not be quoted as "the scheme".
    let scheme_secret = "sklive51SECRETSECRET";
    let environment = |name: &str| match name {
        "PAYMENTS_API_KEY" => Some(SECRET.to_owned()),
        "MOCK_URL" => Some(format!("{scheme_secret}:opaque")),
        _ => None,
    };
    let errors = load_str(BASE, "agent.yaml", &environment).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors}");
    assert!(!errors.to_string().contains(scheme_secret), "{errors}");
    assert_says(&errors.errors[0], &["scheme is not http or https"], &[]);
}

#[test]
fn an_input_schema_that_is_not_json_schema_is_refused_at_the_keyword() {
    let text = broken(
        "        amount: {type: number}",
        "        amount: {type: numbr}",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "numbr");
    assert_says(
        &error,
        &[
            "tool `refund_order`: input_schema is not a valid JSON Schema at `/properties/amount/type`",
        ],
        &["JSON Schema"],
    );

    // Valid JSON Schema, but not an object schema: the engine refuses it.
    let text = broken(
        "    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}",
        "    input_schema: {type: array}",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "{type: array}");
    assert_says(&error, &["object schema"], &["type: object"]);
}

#[test]
fn duplicate_tool_names_are_refused_at_the_second() {
    let text = broken("  - name: refund_order\n", "  - name: get_order\n");
    let errors = errors(&text);
    // The second `get_order` is a side effect named like the read: one error for the name.
    let error = errors
        .iter()
        .find(|error| error.message.contains("already used"))
        .unwrap_or_else(|| panic!("{errors}"));
    assert_eq!(errors.len(), 1, "{errors}");
    assert_eq!((error.line, error.column), (14, 11));
    assert_says(
        error,
        &["tool name `get_order` is already used by the tool at line 9"],
        &["rename one of the two tools"],
    );
}

#[test]
fn a_wrong_type_says_what_to_write() {
    let text = broken("    timeout_ms: 10000", "    timeout_ms: ten");
    let error = only_error(&text);
    assert_at(&error, &text, "ten\n");
    assert_says(
        &error,
        &["`tools[1].timeout_ms` has the wrong type"],
        &["`timeout_ms: 10000`", "milliseconds"],
    );
}

#[test]
fn an_unknown_effect_lists_the_effects() {
    let text = broken("    effect: side_effect", "    effect: write");
    let error = only_error(&text);
    assert_at(&error, &text, "write");
    assert_says(
        &error,
        &["`tools[1].effect` can't be `write`"],
        &["`read`, `idempotent`, `side_effect`"],
    );
}

#[test]
fn message_keys_must_be_statuses() {
    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    messages:\n      pending: Do not retry.\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "pending:");
    assert_says(
        &error,
        &["`pending` in `messages` is not a call status"],
        &["`pending_unknown`", "`already_done`"],
    );
}

#[test]
fn a_template_placeholder_must_be_an_argument_or_a_gateway_value() {
    let text = broken("/v1/orders/{order_id}", "/v1/orders/{orderid}");
    let error = only_error(&text);
    assert_at(&error, &text, "\"/v1/orders/{orderid}\"");
    assert_says(
        &error,
        &["tool `get_order`", "`call.path`", "{orderid}"],
        &["add `orderid` to input_schema.properties", "`order_id`"],
    );

    // In a body, the error points at the string itself.
    let text = broken(r#"amount: "{amount:.2}""#, r#"amount: "{amount_due:.2}""#);
    let error = only_error(&text);
    assert_at(&error, &text, "\"{amount_due:.2}\"");
    assert_says(
        &error,
        &["`call.body at `/amount``", "{amount_due}"],
        &["`amount`"],
    );

    // A list runs outside any call: no intent key there.
    let text = format!(
        "{BASE}    list:\n      path: /v1/refunds\n      query: {{starting_after: \"{{cursor}}\", intent_key: \"{{intent_key}}\"}}\n      items: /data\n      next_cursor: /next_cursor\n      fields: {{idempotency_key: /idempotency_key, external_id: /id}}\n"
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"{intent_key}\"}\n      items");
    assert_says(
        &error,
        &["{intent_key}", "not available here"],
        &["{since_ms}"],
    );
}

#[test]
fn an_invalid_base_url_is_refused() {
    let text = broken("${MOCK_URL:-http://127.0.0.1:8090}", "localhost:8090");
    let error = only_error(&text);
    assert_at(&error, &text, "localhost:8090");
    assert_says(
        &error,
        &["`localhost:8090` is not a usable URL"],
        &["https://api.example.com"],
    );
}

#[test]
fn gateway_values_out_of_range_are_refused() {
    let text = format!("gateway:\n  retention_days: 0\n  concurrency_limit: 0\n{BASE}");
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    assert_at(&errors.errors[0], &text, "0\n  concurrency");
    assert_says(
        &errors.errors[0],
        &["`retention_days` is 0, outside 1 to 3650"],
        &["between 1 and 3650"],
    );
    assert_eq!(errors.errors[1].line, 3);
}

#[test]
fn connection_limits_out_of_range_are_refused() {
    let text = format!(
        "gateway:\n  header_read_timeout_ms: 0\n  idle_timeout_ms: 86400000\n  connection_limit: 0\n{BASE}"
    );
    let errors = errors(&text);
    assert_eq!(errors.len(), 3, "{errors}");
    assert_says(
        &errors.errors[0],
        &["`header_read_timeout_ms` is 0, outside 100 to 300000"],
        &["between 100 and 300000 milliseconds"],
    );
    assert_eq!(errors.errors[0].line, 2);
    assert_says(
        &errors.errors[1],
        &["`idle_timeout_ms` is 86400000, outside 100 to 3600000"],
        &["between 100 and 3600000 milliseconds"],
    );
    assert_says(
        &errors.errors[2],
        &["`connection_limit` is 0, outside 1 to 1048576"],
        &["between 1 and 1048576 connections"],
    );
    assert_eq!(errors.errors[2].line, 4);
}

#[test]
fn every_error_of_a_file_is_reported_in_file_order() {
    let text = broken("    owner: payments-team\n", "    owner: nobody\n")
        .replace("/v1/orders/{order_id}", "/v1/orders/{id}")
        .replace("refund:{order_id}:{amount:.2}", "refund:{request_id}");
    let errors = errors(&text);
    assert_eq!(errors.len(), 3, "{errors}");
    let lines: Vec<u64> = errors.iter().map(|error| error.line).collect();
    assert_eq!(lines, [13, 17, 24]);
    let rendered = errors.to_string();
    assert!(
        rendered.starts_with("agent.yaml:13:51: tool `get_order`: `call.path`"),
        "{rendered}"
    );
    assert_eq!(rendered.lines().count(), 6, "{rendered}");
    assert!(
        rendered
            .lines()
            .skip(1)
            .step_by(2)
            .all(|line| line.starts_with("  fix: ")),
        "{rendered}"
    );
}

#[test]
fn a_side_effect_without_a_lookup_or_key_honouring_upstream_is_not_an_error() {
    // The audit reports a missing lookup; loading accepts it.
    let text = broken(
        "    lookup: {path: /v1/refunds, query: {idempotency_key: \"{idempotency_key}\"}, found: /data, key: /idempotency_key}\n",
        "",
    )
    .replace("    honours_idempotency_keys: true\n", "");
    load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
}

#[test]
fn an_oversized_or_unreadable_file_is_refused_before_parsing() {
    let text = format!(
        "{BASE}#{}\n",
        "x".repeat(intentgate_config::limits::CONFIG_BYTES_MAX)
    );
    let error = only_error(&text);
    assert_eq!((error.line, error.column), (0, 0));
    assert_says(&error, &["a config is at most"], &[]);

    let missing = std::path::Path::new("/nonexistent/intentgate.yaml");
    let errors = intentgate_config::load_file(missing).unwrap_err();
    assert!(
        errors
            .to_string()
            .starts_with("/nonexistent/intentgate.yaml: can't open the config file"),
        "{errors}"
    );
}

#[test]
fn a_duplicate_yaml_key_is_refused() {
    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    timeout_ms: 20000\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "timeout_ms: 20000");
    assert_says(&error, &["`timeout_ms` is written twice"], &["keep one"]);
}

#[test]
fn a_missing_required_field_names_the_tool_at_its_first_line() {
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}\n",
        "",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "name: get_order");
    assert_says(
        &error,
        &["tool `get_order` has no `call`"],
        &["add `call: {upstream: payments"],
    );
}

#[test]
fn an_empty_file_or_a_list_is_not_a_config() {
    let error = only_error("# nothing here yet\n\n");
    assert_says(&error, &["the config file is empty"], &["`tools:`"]);
    assert_eq!(
        error.to_string().lines().next(),
        Some("agent.yaml: the config file is empty")
    );

    let error = only_error("- get_order\n- refund_order\n");
    assert_eq!((error.line, error.column), (1, 1));
    assert_says(&error, &["not a mapping"], &["`tools:`"]);
}

#[test]
fn side_effects_get_the_default_alert_rules_and_reads_none() {
    let loaded = load_str(BASE, "agent.yaml", &env).unwrap();
    let refund = &loaded.config.tools[1];
    assert_eq!(refund.alerts, intentgate_config::AlertRule::defaults());
    assert!(loaded.config.tools[0].alerts.is_empty());
    assert_eq!(loaded.config.reconcile.every_seconds, 3600);
}

#[test]
fn alert_rules_are_checked_where_they_are_written() {
    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    alerts:\n      - {per: intent, threshold: 0, window_seconds: 60}\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "0, window_seconds");
    assert_says(
        &error,
        &["`threshold` is 0, outside 1 to"],
        &["set `threshold` between 1"],
    );

    let text = broken(
        "    call: {upstream: payments, method: GET",
        "    alerts: [{per: tool, threshold: 5, window_seconds: 60}]\n    call: {upstream: payments, method: GET",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "[{per: tool");
    assert_says(
        &error,
        &[
            "tool `get_order` has alert rules",
            "only side-effecting tools",
        ],
        &["remove `alerts:`"],
    );

    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    alerts: [{per: attempt, threshold: 5, window_seconds: 60}]\n",
    );
    let rendered = errors(&text).to_string();
    assert!(rendered.contains("attempt"), "{rendered}");
}

#[test]
fn a_reconciliation_window_shorter_than_its_interval_is_refused() {
    let text = format!("reconcile: {{every_seconds: 3600, window_seconds: 600}}\n{BASE}");
    let error = only_error(&text);
    assert_at(&error, &text, "600}");
    assert_says(
        &error,
        &["`window_seconds` is 600, shorter than `every_seconds` (3600)"],
        &["at least 3600"],
    );
}

/// `BASE` with a list that pairs records with intents by business fields (`list.match`),
/// for a provider that keeps no metadata, with `old` replaced by `new`.
fn with_match_list(old: &str, new: &str) -> String {
    let list = "    list:\n      path: /v1/refunds\n      query: {created_gte_ms: \"{since_ms}\", starting_after: \"{cursor}\"}\n      items: /data\n      next_cursor: /next_cursor\n      fields: {external_id: /id, amount: /amount}\n      match: {order_id: {record: /order_id}, amount: {record: /amount}}\n";
    let text = format!("{BASE}{list}");
    assert!(text.contains(old), "the config has no `{old}`");
    text.replacen(old, new, 1)
}

#[test]
fn a_list_may_pair_records_by_business_fields_compared_as_the_schema_types_them() {
    use intentgate_http::spec::MatchCompare;
    let text = with_match_list("", "");
    let loaded = load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let list = loaded.config.tools[1].list.as_ref().unwrap();
    assert_eq!(list.fields.intent_key, None);
    let compare = |argument: &str| list.match_fields[argument].compare;
    assert_eq!(compare("amount"), Some(MatchCompare::Decimal));
    assert_eq!(compare("order_id"), Some(MatchCompare::Text));

    // What the config says is kept: an order id compared as a number.
    let text = with_match_list(
        "{order_id: {record: /order_id}",
        "{order_id: {record: /order_id, compare: decimal}",
    );
    let loaded = load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let list = loaded.config.tools[1].list.as_ref().unwrap();
    assert_eq!(
        list.match_fields["order_id"].compare,
        Some(MatchCompare::Decimal)
    );
}

#[test]
fn a_list_must_say_one_way_records_pair_with_intents() {
    // Neither the provider key nor business fields.
    let text = with_match_list(
        "\n      match: {order_id: {record: /order_id}, amount: {record: /amount}}",
        "",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "{external_id: /id, amount: /amount}");
    assert_says(
        &error,
        &[
            "tool `refund_order`",
            "neither `fields.idempotency_key` nor `match`",
        ],
        &[
            "idempotency_key: <pointer>",
            "match: {order_id: {record: /order_id}",
        ],
    );

    // Regression: the intent key alone paired two tenants' records of one order and amount
    // with either tenant's intent; it is not enough.
    let text = with_match_list(
        "fields: {external_id: /id, amount: /amount}\n      match: {order_id: {record: /order_id}, amount: {record: /amount}}",
        "fields: {intent_key: /metadata/intent_key, external_id: /id, amount: /amount}",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "/metadata/intent_key");
    assert_says(
        &error,
        &["`fields.intent_key` alone", "not scoped by tenant"],
        &["idempotency_key: <pointer>", "match: {order_id"],
    );

    // Both.
    let text = with_match_list(
        "fields: {external_id: /id,",
        "fields: {idempotency_key: /idempotency_key, external_id: /id,",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "{order_id: {record");
    assert_says(
        &error,
        &["both by `fields.idempotency_key` and by `match`"],
        &["remove `match:`"],
    );

    // An empty `match` says nothing either.
    let text = with_match_list(
        "match: {order_id: {record: /order_id}, amount: {record: /amount}}",
        "match: {}",
    );
    let error = only_error(&text);
    assert_says(&error, &["neither"], &["match:"]);
}

#[test]
fn a_match_field_must_be_an_argument_read_from_a_pointer_and_compared_sensibly() {
    let text = with_match_list("{order_id: {record", "{order: {record");
    let error = only_error(&text);
    assert_at(&error, &text, "order: {record");
    assert_says(
        &error,
        &["`match` names `order`", "not an argument"],
        // The arguments in the order the input schema declares them.
        &["`order_id`, `amount`", "customer.id"],
    );

    let text = with_match_list("{record: /amount}}", "{record: amount}}");
    let error = only_error(&text);
    assert_at(&error, &text, "amount}}");
    assert_says(
        &error,
        &["`amount` is not a JSON pointer"],
        &["JSON pointer"],
    );

    let text = with_match_list("{record: /amount}}", "{record: /amount, compare: exact}}");
    let error = only_error(&text);
    assert_says(&error, &["compare"], &["decimal"]);

    let text = broken(
        "amount: {type: number}",
        "amount: {type: number}\n        refund_all: {type: boolean}",
    ) + "    list:\n      path: /v1/refunds\n      query: {starting_after: \"{cursor}\"}\n      items: /data\n      next_cursor: /next_cursor\n      fields: {external_id: /id}\n      match: {order_id: {record: /order_id}, refund_all: {record: /full, compare: decimal}}\n";
    let error = only_error(&text);
    assert_at(&error, &text, "decimal}}");
    assert_says(
        &error,
        &["`match.refund_all` compares as a decimal", "boolean"],
        &["compare: text"],
    );
}

#[test]
fn an_idempotency_key_header_is_optional_and_may_be_required_only_of_side_effects() {
    use intentgate_config::IdempotencyKeyHeader;
    let loaded = load_str(BASE, "agent.yaml", &env).unwrap();
    assert!(
        loaded
            .config
            .tools
            .iter()
            .all(|tool| tool.idempotency_key == IdempotencyKeyHeader::Optional)
    );

    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    idempotency_key: required\n",
    );
    let loaded = load_str(&text, "agent.yaml", &env).unwrap();
    assert_eq!(
        loaded.config.tools[1].idempotency_key,
        IdempotencyKeyHeader::Required
    );

    let text = broken(
        "    call: {upstream: payments, method: GET",
        "    idempotency_key: required\n    call: {upstream: payments, method: GET",
    );
    let error = only_error(&text);
    assert_at(
        &error,
        &text,
        "required\n    call: {upstream: payments, method: GET",
    );
    assert_says(
        &error,
        &[
            "tool `get_order` requires an Idempotency-Key header",
            "only side-effecting tools",
        ],
        &["remove `idempotency_key: required`"],
    );

    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    idempotency_key: always\n",
    );
    let rendered = errors(&text).to_string();
    assert!(rendered.contains("idempotency_key"), "{rendered}");
}

/// `BASE`'s refund as a client-executed tool: no call, lookup or list.
fn client_refund(extra: &str) -> String {
    let call_start = BASE
        .find("    call:\n      upstream: payments\n      method: POST")
        .unwrap();
    format!("{}    executor: client\n{extra}", &BASE[..call_start])
}

#[test]
fn a_client_tool_loads_without_requests() {
    use intentgate_core::Executor;

    let text = client_refund("    key_window_hours: 48\n    mcp: listed\n");
    let loaded = load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let refund = &loaded.tools[1];
    assert_eq!(refund.executor, Executor::Client);
    assert!(refund.listed_over_mcp, "`mcp: listed` lists it");
    assert_eq!(
        refund.resend_window,
        Some(std::time::Duration::from_secs(47 * 60 * 60))
    );
    assert!(loaded.config.tools[1].call.is_none());

    // Hidden from MCP by default, and no re-sends without a key window.
    let loaded = load_str(&client_refund(""), "agent.yaml", &env).unwrap();
    assert!(!loaded.tools[1].listed_over_mcp);
    assert_eq!(loaded.tools[1].resend_window, None);
    // A gateway tool may be hidden from MCP too.
    let text = broken("    effect: read\n", "    effect: read\n    mcp: hidden\n");
    let loaded = load_str(&text, "agent.yaml", &env).unwrap();
    assert!(!loaded.tools[0].listed_over_mcp);
    assert!(loaded.tools[1].listed_over_mcp);
    // `idempotency_key: required` applies to the intents route of a client tool.
    let text = client_refund("    idempotency_key: required\n");
    assert!(load_str(&text, "agent.yaml", &env).is_ok());
}

#[test]
fn a_client_tool_with_a_call_lookup_or_list_is_refused_at_each() {
    let text = client_refund(concat!(
        "    call: {upstream: payments, method: POST, path: /v1/refunds}\n",
        "    lookup: {path: /v1/refunds, found: /data, key: /idempotency_key}\n",
        "    list: {path: /v1/refunds, items: /data, next_cursor: /next_cursor, fields: {idempotency_key: /idempotency_key, external_id: /id}}\n",
    ));
    let errors = errors(&text);
    assert_eq!(errors.len(), 3, "{errors}");
    for (error, (field, why)) in errors.errors.iter().zip([
        ("call:", "POST /v1/tools/refund_order/intents"),
        ("lookup:", "granted `look_up`"),
        ("list:", "the caller's"),
    ]) {
        // At the value, in the client tool (the read above has a `call:` too).
        let offset = text.rfind(&format!("{field} {{")).unwrap() + field.len() + 1;
        let (line, column) = position(&text, &text[offset..]);
        assert_eq!((error.line, error.column), (line, column), "{error}");
        assert_says(
            error,
            &[
                "tool `refund_order` is executed by the caller's code",
                &format!("has no `{}`", field.trim_end_matches(':')),
                why,
            ],
            &[&format!("remove `{field}`"), "remove `executor: client`"],
        );
    }
}

#[test]
fn a_client_tool_must_be_a_side_effect() {
    let text = broken(
        "    effect: read\n",
        "    effect: read\n    executor: client\n",
    );
    let error = only_error(&text);
    assert_at(
        &error,
        &text,
        "client\n    input_schema: {type: object, properties: {order_id",
    );
    assert_says(
        &error,
        &[
            "tool `get_order` says `executor: client`",
            "`effect: read`",
            "only side effects",
        ],
        &["remove `executor: client`", "`effect: side_effect`"],
    );
}

#[test]
fn a_gateway_tool_without_a_call_names_the_client_executor() {
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}\n",
        "",
    );
    let error = only_error(&text);
    assert_says(&error, &["has no `call`"], &["`executor: client`"]);
}

#[test]
fn a_key_window_belongs_to_client_tools_and_is_bounded() {
    let text = broken(
        "    timeout_ms: 10000\n",
        "    timeout_ms: 10000\n    key_window_hours: 24\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "24\n    call:");
    assert_says(
        &error,
        &["tool `refund_order`: `key_window_hours` is for client tools"],
        &["upstream `payments`"],
    );

    for hours in ["0", "8761"] {
        let text = client_refund(&format!("    key_window_hours: {hours}\n"));
        let error = only_error(&text);
        let (line, column) = position(&text, "key_window_hours: ");
        assert_eq!((error.line, error.column), (line, column + 18), "{error}");
        assert_says(&error, &["`key_window_hours` is"], &["between 1 and 8760"]);
    }
    let error = only_error(&client_refund("    key_window_hours: a day\n"));
    assert_says(&error, &["key_window_hours"], &["24"]);
}

#[test]
fn an_executor_or_mcp_listing_that_does_not_exist_is_refused() {
    let text = client_refund("").replace("executor: client", "executor: caller");
    let error = only_error(&text);
    assert_at(&error, &text, "caller");
    assert_says(&error, &["executor"], &["client", "gateway"]);
    let text = client_refund("    mcp: yes\n");
    let error = only_error(&text);
    assert_at(&error, &text, "yes");
    assert_says(&error, &["mcp"], &["hidden", "listed"]);
}

/// Regression: a lookup with `found: /data/0` and nothing else took the first record of the
/// provider's answer (another tenant's, another customer's) as the intent's effect. A lookup
/// must now say how a record is proved to be this intent's.
#[test]
fn a_lookup_that_can_not_tell_two_intents_apart_is_refused_at_its_line() {
    let text = BASE.replace("found: /data, key: /idempotency_key}", "found: /data/0}");
    let error = only_error(&text);
    assert_at(&error, &text, "{path: /v1/refunds, query");
    assert_says(
        &error,
        &["neither `key` nor `match`", "another tenant's"],
        &["key: /metadata/idempotency_key", "match: {<argument>"],
    );

    let pages = BASE.replace(
        "found: /data, key: /idempotency_key}",
        "found: /data, key: /idempotency_key, pages: {query: starting_after, max: 500}}",
    );
    let errors = load_str(&pages, "agent.yaml", &env)
        .expect_err("unusable pages must be refused")
        .to_string();
    assert!(
        errors.contains("exactly one of `next_cursor` and `has_more`"),
        "{errors}"
    );
    assert!(errors.contains("it must be 1 to 50"), "{errors}");
}

/// `BASE` with a list that pages the way Stripe's do, with `old` replaced by `new`.
fn with_stripe_list(old: &str, new: &str) -> String {
    let list = concat!(
        "    list:\n",
        "      path: /v1/refunds\n",
        "      query: {created_gte: \"{since_s}\", created_lt: \"{until_s}\", limit: \"{limit}\", starting_after: \"{cursor}\"}\n",
        "      items: /data\n",
        "      has_more: /has_more\n",
        "      limit_max: 100\n",
        "      fields: {idempotency_key: /idempotency_key, external_id: /id, subject: [/payment_intent, /charge/customer]}\n",
    );
    let text = format!("{BASE}{list}");
    assert!(text.contains(old), "the config has no `{old}`");
    text.replacen(old, new, 1)
}

#[test]
fn a_list_may_page_after_the_last_id_in_whole_seconds_with_a_capped_limit() {
    use intentgate_http::spec::ListSubject;
    let text = with_stripe_list("", "");
    let loaded = load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let list = loaded.config.tools[1].list.as_ref().unwrap();
    assert_eq!(list.has_more.as_deref(), Some("/has_more"));
    assert_eq!(list.next_cursor, None);
    assert_eq!(list.limit_max, Some(100));
    assert_eq!(
        list.fields.subject,
        Some(ListSubject::Several(vec![
            "/payment_intent".to_owned(),
            "/charge/customer".to_owned()
        ]))
    );
    let records = loaded.config.tools[1].list_records().unwrap();
    assert_eq!(records.has_more.as_deref(), Some("/has_more"));

    // The published schema says the same.
    let validator = jsonschema::validator_for(&intentgate_config::schema()).unwrap();
    let document = |text: &str| -> serde_json::Value { serde_saphyr::from_str(text).unwrap() };
    assert!(validator.is_valid(&document(&text)));
    assert!(validator.is_valid(&document(&with_stripe_list(
        "subject: [/payment_intent, /charge/customer]",
        "subject: /payment_intent"
    ))));
    for (old, new) in [
        ("      has_more: /has_more\n", ""),
        (
            "      has_more: /has_more\n",
            "      has_more: /has_more\n      next_cursor: /next_cursor\n",
        ),
        ("limit_max: 100", "limit_max: 0"),
        ("[/payment_intent, /charge/customer]", "[]"),
        (
            "[/payment_intent, /charge/customer]",
            "{customer: /customer}",
        ),
    ] {
        assert!(
            !validator.is_valid(&document(&with_stripe_list(old, new))),
            "the schema takes `{new}`"
        );
    }
}

#[test]
fn a_list_that_pages_both_ways_or_neither_is_refused() {
    let text = with_stripe_list(
        "      has_more: /has_more\n",
        "      has_more: /has_more\n      next_cursor: /next_cursor\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "/has_more\n      next_cursor");
    assert_says(
        &error,
        &["tool `refund_order`", "both `next_cursor` and `has_more`"],
        &["has_more: /has_more", "not both"],
    );

    let text = with_stripe_list("      has_more: /has_more\n", "");
    let error = only_error(&text);
    assert_at(
        &error,
        &text,
        "path: /v1/refunds\n      query: {created_gte",
    );
    assert_says(
        &error,
        &["neither `next_cursor` nor `has_more`"],
        &["next_cursor: <pointer", "has_more: <pointer to a boolean>"],
    );

    let text = with_stripe_list("has_more: /has_more", "has_more: has_more");
    let error = only_error(&text);
    assert_at(&error, &text, "has_more\n      limit_max");
    assert_says(
        &error,
        &["`has_more` is not a JSON pointer"],
        &["JSON pointer"],
    );
}

#[test]
fn a_list_without_a_cursor_is_refused_at_its_query() {
    let text = with_stripe_list(", starting_after: \"{cursor}\"", "");
    let error = only_error(&text);
    assert_at(&error, &text, "{created_gte");
    assert_says(
        &error,
        &["tool `refund_order`", "has no `{cursor}`", "the first one"],
        &["starting_after: \"{cursor}\""],
    );
    // Without any query, at the list.
    let text = with_stripe_list(
        "      query: {created_gte: \"{since_s}\", created_lt: \"{until_s}\", limit: \"{limit}\", starting_after: \"{cursor}\"}\n",
        "",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "path: /v1/refunds\n      items");
    assert_says(&error, &["has no `{cursor}`"], &["starting_after"]);
}

#[test]
fn a_list_placeholder_outside_the_window_and_paging_values_is_refused() {
    let text = with_stripe_list("\"{since_s}\"", "\"{since_sec}\"");
    let error = only_error(&text);
    assert_at(&error, &text, "\"{since_sec}\"");
    assert_says(
        &error,
        &[
            "`list.query.created_gte`",
            "{since_sec}",
            "{since_ms}, {until_ms}, {since_s}, {until_s}, {limit}, {cursor}",
        ],
        &["`{since_s}`, `{until_s}`"],
    );
}

#[test]
fn a_limit_max_of_zero_or_an_empty_subject_is_refused() {
    let text = with_stripe_list("limit_max: 100", "limit_max: 0");
    let error = only_error(&text);
    assert_at(&error, &text, "0\n      fields");
    assert_says(
        &error,
        &["`list.limit_max` is 0"],
        &["limit_max: 100", "remove `limit_max`"],
    );

    let text = with_stripe_list("[/payment_intent, /charge/customer]", "[]");
    let error = only_error(&text);
    assert_at(&error, &text, "[]}");
    assert_says(
        &error,
        &["`list.fields.subject` is an empty list"],
        &["subject: /customer"],
    );

    let text = with_stripe_list("/charge/customer]", "charge/customer]");
    let error = only_error(&text);
    assert_at(&error, &text, "charge/customer]");
    assert_says(
        &error,
        &["`charge/customer` is not a JSON pointer"],
        &["JSON pointer"],
    );
}

#[test]
fn minor_units_name_a_known_currency_or_an_argument() {
    // In a template: an unknown code, and a currency argument the tool does not have.
    let text = broken(
        r#"amount: "{amount:.2}""#,
        r#"amount: "{amount:minor(USX)}""#,
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"{amount:minor(USX)}\"");
    assert_says(
        &error,
        &["`call.body at `/amount``", "unknown ISO 4217 currency code"],
        &["{argument:minor(USD)}"],
    );
    let text = broken(
        r#"amount: "{amount:.2}""#,
        r#"amount: "{amount:minor(currency)}""#,
    );
    let error = only_error(&text);
    assert_at(&error, &text, "\"{amount:minor(currency)}\"");
    assert_says(
        &error,
        &["`call.body at `/amount``", "`currency`", "not an argument"],
        &["{amount:minor(USD)}", "`order_id`"],
    );
    // A form body and minor units load.
    let text = broken("      body:\n", "      body_format: form\n      body:\n").replace(
        r#"amount: "{amount:.2}""#,
        r#"amount: "{amount:minor(USD)}""#,
    );
    load_str(&text, "agent.yaml", &env).expect("a form body with minor units");

    // In a lookup's `match` and a list's amount.
    let lookup = "    lookup: {path: /v1/refunds, query: {idempotency_key: \"{idempotency_key}\"}, found: /data, key: /idempotency_key}\n";
    let text = broken(
        lookup,
        "    lookup:\n      path: /v1/refunds\n      query: {idempotency_key: \"{idempotency_key}\"}\n      found: /data\n      key: /idempotency_key\n      match: {amount: {record: /amount, minor_units: usd}}\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "usd}}");
    assert_says(
        &error,
        &["`match.amount.minor_units`", "`usd`", "nor an argument"],
        &["`USD`", "`order_id`"],
    );
    let text = broken(
        lookup,
        "    lookup:\n      path: /v1/refunds\n      query: {idempotency_key: \"{idempotency_key}\"}\n      found: /data\n      key: /idempotency_key\n      match: {amount: {record: /amount, minor_units: ABC}}\n",
    );
    let error = only_error(&text);
    assert_at(&error, &text, "ABC}}");
    assert_says(
        &error,
        &["`match.amount.minor_units`", "unknown ISO 4217"],
        &["`minor_units: USD`"],
    );
    let list = |minor_units: &str| {
        format!(
            "{BASE}    list:\n      path: /v1/refunds\n      query: {{starting_after: \"{{cursor}}\"}}\n      items: /data\n      next_cursor: /next_cursor\n      fields: {{idempotency_key: /idempotency_key, external_id: /id, amount: /amount, amount_minor_units: {minor_units}}}\n"
        )
    };
    load_str(&list("USD"), "agent.yaml", &env).expect("a list in minor units");
    let text = list("XYZ");
    let error = only_error(&text);
    assert_at(&error, &text, "XYZ}");
    assert_says(
        &error,
        &["`list.fields.amount_minor_units`", "unknown ISO 4217"],
        &["`JPY`"],
    );
}

#[test]
fn body_read_timeout_and_per_address_limit_out_of_range_are_refused() {
    let text =
        format!("gateway:\n  body_read_timeout_ms: 50\n  connection_limit_per_address: 0\n{BASE}");
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    assert_says(
        &errors.errors[0],
        &["`body_read_timeout_ms` is 50, outside 100 to 300000"],
        &["between 100 and 300000 milliseconds"],
    );
    assert_eq!(errors.errors[0].line, 2);
    assert_says(
        &errors.errors[1],
        &["`connection_limit_per_address` is 0, outside 1 to 1048576"],
        &["between 1 and 1048576 connections"],
    );
    assert_eq!(errors.errors[1].line, 3);
}

#[test]
fn a_body_read_timeout_written_as_text_says_what_to_write() {
    let text = format!("gateway:\n  body_read_timeout_ms: 10s\n{BASE}");
    let errors = errors(&text);
    assert_says(
        &errors.errors[0],
        &["body_read_timeout_ms"],
        &["10000", "milliseconds"],
    );
}

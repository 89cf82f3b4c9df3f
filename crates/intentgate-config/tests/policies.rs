//! A side-effecting tool's `approval` and `budgets`: a valid config parses into exactly the
//! core's `ToolPolicies`, and each mistake a person can make in them is reported at its line
//! (and column) with a message that says what is wrong and a fix that says what to write.

use intentgate_config::{
    ConfigError, ConfigErrors, HashKeySource, Secrets, load_file_as, load_str, schema,
};
use intentgate_core::policy::{
    APPROVAL_DEADLINE_MS_DEFAULT, BUDGETS_PER_TOOL_MAX, BeyondBudget, BudgetScope,
};
use intentgate_core::{ApprovalPolicy, Budget, Condition, Decimal, KeyTemplate, ToolPolicies};
use serde_json::{Value, json};

/// A valid config with a read and a side effect with both policies. Mistakes are made by
/// replacing part of one line.
const BASE: &str = r#"upstreams:
  payments:
    base_url: http://127.0.0.1:8090
    honours_idempotency_keys: true
tools:
  - name: get_order
    description: Look up an order.
    effect: read
    input_schema: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    call: {upstream: payments, method: GET, path: "/v1/orders/{order_id}"}
  - name: refund_order
    description: Refund an order.
    effect: side_effect
    input_schema:
      type: object
      properties:
        order_id: {type: string}
        amount: {type: number}
        price: {type: [string, number]}
        currency: {type: string}
        reason: {type: string}
        customer: {type: object, properties: {id: {type: string}, country: {type: string}}}
      required: [order_id, amount]
    key: "refund:{order_id}:{amount:.2}"
    call:
      upstream: payments
      method: POST
      path: /v1/refunds
      body: {order_id: "{order_id}", amount: "{amount:.2}"}
    lookup: {path: /v1/refunds, query: {idempotency_key: "{idempotency_key}"}, found: /data, key: /idempotency_key}
    approval:
      when: amount > 100.00 and currency in ["USD", "EUR"]
      tenants: [acme, globex]
      deadline: 4h
    budgets:
      - name: per-order
        per: subject
        subject: "{order_id}"
        window: 24h
        count: 2
        beyond: approval
        deadline: 30m
      - name: tenant-hourly
        per: tenant
        window: 1h
        amount: "5000.00"
        amount_argument: amount
      - name: tool-daily
        per: tool
        window: 1d
        count: 1000
        amount: 250000
        amount_argument: price
"#;

fn env(_: &str) -> Option<String> {
    None
}

/// `BASE` with `old` (a whole line, or part of one) replaced by `new`.
fn broken(old: &str, new: &str) -> String {
    assert!(BASE.contains(old), "the base config has no `{old}`");
    BASE.replacen(old, new, 1)
}

fn errors(text: &str) -> ConfigErrors {
    load_str(text, "agent.yaml", &env).expect_err("the config must be refused")
}

/// The only error of `text`.
fn only_error(text: &str) -> ConfigError {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "expected one error, got:\n{errors}");
    errors.errors[0].clone()
}

/// The policies of `refund_order` in `text`, which must load.
fn policies(text: &str) -> Option<ToolPolicies> {
    let loaded = load_str(text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    loaded
        .tools
        .into_iter()
        .find(|tool| tool.name == "refund_order")
        .expect("refund_order is loaded")
        .policies
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

/// `text` with `old` replaced and the one error it makes, which must be at `at` and say
/// `message` and `fix`.
fn assert_refused(old: &str, new: &str, at: &str, message: &[&str], fix: &[&str]) {
    let text = broken(old, new);
    let error = only_error(&text);
    assert_at(&error, &text, at);
    assert_says(&error, message, fix);
}

#[test]
fn a_full_example_parses_into_exactly_the_expected_policies() {
    let expected = ToolPolicies {
        approval: Some(ApprovalPolicy {
            when: Some(
                Condition::parse(r#"amount > 100.00 and currency in ["USD", "EUR"]"#).unwrap(),
            ),
            tenants: Some(vec!["acme".to_owned(), "globex".to_owned()]),
            deadline_ms: 4 * 60 * 60 * 1000,
        }),
        budgets: vec![
            Budget {
                name: "per-order".to_owned(),
                scope: BudgetScope::Subject(KeyTemplate::parse("{order_id}").unwrap()),
                window_ms: 24 * 60 * 60 * 1000,
                count_max: Some(2),
                amount_max: None,
                amount_argument: None,
                amount_places: 0,
                beyond: BeyondBudget::Approval {
                    deadline_ms: 30 * 60 * 1000,
                },
            },
            Budget {
                name: "tenant-hourly".to_owned(),
                scope: BudgetScope::Tenant,
                window_ms: 60 * 60 * 1000,
                count_max: None,
                amount_max: Some(Decimal::parse("5000").unwrap()),
                amount_argument: Some("amount".to_owned()),
                amount_places: 2,
                beyond: BeyondBudget::Refuse,
            },
            Budget {
                name: "tool-daily".to_owned(),
                scope: BudgetScope::Tool,
                window_ms: 24 * 60 * 60 * 1000,
                count_max: Some(1000),
                amount_max: Some(Decimal::parse("250000").unwrap()),
                amount_argument: Some("price".to_owned()),
                amount_places: 0,
                beyond: BeyondBudget::Refuse,
            },
        ],
    };
    assert_eq!(policies(BASE), Some(expected));
    // The budgets count as the core says: 5000.00 in cents.
    let loaded = policies(BASE).unwrap();
    assert_eq!(loaded.budgets[1].units_max(), Some(500_000));
}

#[test]
fn a_tool_without_approval_or_budgets_has_no_policies() {
    let start = BASE.find("    approval:").unwrap();
    let text = &BASE[..start];
    assert_eq!(policies(text), None);
    let loaded = load_str(text, "agent.yaml", &env).unwrap();
    assert!(loaded.tools.iter().all(|tool| tool.policies.is_none()));
    // `budgets: []` alone is no policy either, never an empty one.
    assert_eq!(policies(&format!("{text}    budgets: []\n")), None);
}

#[test]
fn approval_alone_holds_every_call_for_a_day_by_default() {
    let start = BASE.find("    approval:").unwrap();
    let text = format!("{}    approval: {{}}\n", &BASE[..start]);
    assert_eq!(
        policies(&text),
        Some(ToolPolicies {
            approval: Some(ApprovalPolicy {
                when: None,
                tenants: None,
                deadline_ms: APPROVAL_DEADLINE_MS_DEFAULT,
            }),
            budgets: Vec::new(),
        })
    );
}

#[test]
fn an_unquoted_amount_keeps_the_places_it_is_written_with() {
    // A float would have made 5000.00 into 5000 and counted whole units.
    let text = broken(r#"amount: "5000.00""#, "amount: 5000.00");
    let loaded = policies(&text).unwrap();
    assert_eq!(loaded.budgets[1].amount_places, 2);
    assert_eq!(loaded.budgets[1].amount_max, Decimal::parse("5000").ok());
    let text = broken(r#"amount: "5000.00""#, "amount: 0.000000000000000001");
    let loaded = policies(&text).unwrap();
    assert_eq!(loaded.budgets[1].amount_places, 18);
    assert_eq!(loaded.budgets[1].units_max(), Some(1));
}

#[test]
fn approval_or_budgets_on_a_read_or_idempotent_tool_are_refused_saying_why() {
    let read = BASE.replacen(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}\n",
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}\n    approval: {when: order_id == \"1\"}\n",
        1,
    );
    let error = only_error(&read);
    assert_at(&error, &read, "approval: {when: order_id");
    assert_says(
        &error,
        &[
            "tool `get_order` has `approval`",
            "`effect: read`",
            "only side-effecting tools record intents",
        ],
        &["remove `approval:` from this tool", "`effect: side_effect`"],
    );
    let idempotent = read
        .replacen("effect: read", "effect: idempotent", 1)
        .replacen(
            "    approval: {when: order_id == \"1\"}\n",
            "    budgets: [{name: a, per: tool, window: 1h, count: 1}]\n",
            1,
        );
    let error = only_error(&idempotent);
    assert_at(&error, &idempotent, "budgets: [{name: a");
    assert_says(
        &error,
        &[
            "has `budgets`",
            "`effect: idempotent`",
            "no intent for a budget to count",
        ],
        &["remove `budgets:`"],
    );
}

#[test]
fn an_empty_approval_is_refused_rather_than_holding_nothing() {
    let start = BASE.find("    approval:").unwrap();
    let text = format!("{}    approval:\n", &BASE[..start]);
    let error = only_error(&text);
    assert_at(&error, &text, "approval:\n");
    assert_says(
        &error,
        &["`approval:` is empty"],
        &["`approval: {}`", "`when: amount > 100.00`"],
    );
}

#[test]
fn a_condition_that_does_not_parse_quotes_the_error_and_shows_the_form() {
    assert_refused(
        r#"when: amount > 100.00 and currency in ["USD", "EUR"]"#,
        "when: amount >> 100",
        "amount >> 100",
        &[
            "tool `refund_order`: `approval.when` is not a condition",
            "(at character",
            "of `amount >> 100`",
        ],
        &[
            "`amount > 100.00`",
            "`currency in [\"USD\", \"EUR\"]`",
            "`and`, `or` and `not`",
        ],
    );
}

#[test]
fn a_condition_reading_an_argument_the_schema_lacks_names_the_arguments() {
    assert_refused(
        r#"when: amount > 100.00 and currency in ["USD", "EUR"]"#,
        "when: total > 100",
        "total > 100",
        &["`approval.when` reads `total`, which is not an argument of the tool"],
        &[
            "its arguments are `order_id`, `amount`",
            "add `total` to input_schema.properties",
        ],
    );
    // A member of a closed object is checked too.
    let text = broken(
        "customer: {type: object, properties: {id: {type: string}, country: {type: string}}}",
        "customer: {type: object, properties: {id: {type: string}}, additionalProperties: false}",
    )
    .replacen(
        r#"when: amount > 100.00 and currency in ["USD", "EUR"]"#,
        r#"when: customer.country != "US""#,
        1,
    );
    let error = only_error(&text);
    assert_at(&error, &text, r#"customer.country != "US""#);
    assert_says(&error, &["reads `customer.country`"], &[]);
}

#[test]
fn a_numeric_comparison_on_an_argument_that_is_not_a_number_is_refused() {
    assert_refused(
        r#"when: amount > 100.00 and currency in ["USD", "EUR"]"#,
        "when: reason >= 3",
        "reason >= 3",
        &[
            "`approval.when` compares `reason` with a number",
            "declares it as string, not as a number",
        ],
        &[
            "`type: number`",
            "`type: [string, number]`",
            "`reason == \"...\"`",
        ],
    );
    // A string that the schema makes a decimal may be compared with a number; `in` a list of
    // numbers is a numeric comparison too.
    let text = broken(
        r#"when: amount > 100.00 and currency in ["USD", "EUR"]"#,
        "when: price > 100 or customer.id in [1, 2]",
    );
    let error = only_error(&text);
    assert_says(&error, &["compares `customer.id` with a number"], &[]);
}

#[test]
fn a_tenant_name_that_is_not_one_is_refused_at_its_item() {
    assert_refused(
        "tenants: [acme, globex]",
        "tenants: [acme, Globex]",
        "Globex]",
        &["`approval.tenants`", "uppercase", "\"globex\""],
        &["list tenant names"],
    );
    assert_refused(
        "tenants: [acme, globex]",
        "tenants: []",
        "[]",
        &["`approval.tenants` is empty, so no call would be held"],
        &["remove `tenants:` to hold every tenant's"],
    );
}

#[test]
fn an_approval_deadline_of_zero_or_past_a_week_is_refused() {
    assert_refused(
        "deadline: 4h",
        "deadline: 0h",
        "0h",
        &[
            "`approval.deadline`",
            "`0h` is empty: a duration must be positive",
        ],
        &["`deadline: 4h`", "at most `7d`"],
    );
    assert_refused(
        "deadline: 4h",
        "deadline: 8d",
        "8d",
        &["`approval.deadline` is `8d`, longer than the 7d it may be"],
        &["write at most `7d`"],
    );
    assert_refused(
        "deadline: 4h",
        "deadline: 4 hours",
        "4 hours",
        &["`4 hours` is not a duration: write a whole number and a unit, s, m, h or d"],
        &["`deadline: 4h`"],
    );
}

#[test]
fn budget_names_must_be_identifiers_and_unique_within_the_tool() {
    assert_refused(
        "name: tool-daily",
        "name: per-order",
        "per-order\n        per: tool",
        &["tool `refund_order` has two budgets named `per-order`"],
        &["give each budget its own `name:`"],
    );
    assert_refused(
        "name: tool-daily",
        "name: Tool Daily",
        "Tool Daily",
        &["budget name `Tool Daily` is not 1 to 64 lowercase letters, digits, `_` or `-`"],
        &["`name: per-order`"],
    );
    assert_refused(
        "      - name: tool-daily\n        per: tool",
        "      - per: tool",
        "per: tool",
        &["tool `refund_order`, budget 3 has no `name`"],
        &["add `name: per-order`"],
    );
}

#[test]
fn more_budgets_than_the_limit_are_refused() {
    let start = BASE.find("    budgets:").unwrap();
    let mut text = format!("{}    budgets:\n", &BASE[..start]);
    for number in 0..=BUDGETS_PER_TOOL_MAX {
        text.push_str(&format!(
            "      - {{name: b{number}, per: tool, window: 1h, count: 5}}\n"
        ));
    }
    let error = only_error(&text);
    assert_at(&error, &text, &format!("{{name: b{BUDGETS_PER_TOOL_MAX},"));
    assert_says(
        &error,
        &[&format!(
            "has {} budgets; the limit is {BUDGETS_PER_TOOL_MAX}",
            BUDGETS_PER_TOOL_MAX + 1
        )],
        &["keep the few limits that matter"],
    );
}

#[test]
fn a_budget_without_count_or_amount_limits_nothing() {
    assert_refused(
        "        window: 24h\n        count: 2\n",
        "        window: 24h\n",
        "name: per-order",
        &["budget `per-order` limits nothing: it has neither `count` nor `amount`"],
        &[
            "add `count: 10`",
            "`amount: \"5000.00\"` with `amount_argument: amount`",
        ],
    );
}

#[test]
fn a_count_of_zero_is_refused() {
    assert_refused(
        "count: 2",
        "count: 0",
        "0\n        beyond",
        &["budget `per-order`: `count` is 0, so every call would be beyond it"],
        &["set `count` to at least 1", "kill switch"],
    );
}

#[test]
fn an_amount_that_is_not_an_exact_positive_decimal_is_refused() {
    let cases: [(&str, &[&str]); 6] = [
        (
            r#""0.00""#,
            &["is `0.00`; a budget's amount must be above 0"],
        ),
        (r#""-5""#, &["is `-5`; a budget's amount must be above 0"]),
        (
            "5e3",
            &["is `5e3`; write it as plain digits with an optional point"],
        ),
        (r#""5,000""#, &["`5,000` is not a decimal number"]),
        (r#""lots""#, &["`lots` is not a decimal number"]),
        ("99999999999999999999.00", &["too large to count"]),
    ];
    for (written, message) in cases {
        let text = broken(r#"amount: "5000.00""#, &format!("amount: {written}"));
        let error = only_error(&text);
        assert_at(&error, &text, written);
        assert_says(&error, &["budget `tenant-hourly`: `amount`"], &[]);
        assert_says(
            &error,
            message,
            &["`amount: \"5000.00\"` (counted in cents)"],
        );
    }
}

#[test]
fn an_amount_needs_its_argument_and_an_argument_its_amount() {
    assert_refused(
        "        amount_argument: amount\n",
        "",
        r#""5000.00""#,
        &["budget `tenant-hourly` has an `amount` but no `amount_argument`"],
        &["add `amount_argument: amount`"],
    );
    assert_refused(
        "        amount: \"5000.00\"\n",
        "",
        "amount\n      - name: tool-daily",
        &["budget `tenant-hourly` has an `amount_argument` but no `amount`"],
        &["add `amount: \"5000.00\"`", "or remove `amount_argument:`"],
    );
}

#[test]
fn an_amount_argument_must_be_a_top_level_number_of_the_schema() {
    assert_refused(
        "amount_argument: price",
        "amount_argument: total",
        "total",
        &["`amount_argument` is `total`, which is not an argument of the tool"],
        &[
            "its arguments are `order_id`, `amount`, `price`",
            "add `total`",
        ],
    );
    assert_refused(
        "amount_argument: price",
        "amount_argument: customer.id",
        "customer.id",
        &["an amount is read from a top-level argument"],
        &["name one of the tool's arguments"],
    );
    assert_refused(
        "amount_argument: price",
        "amount_argument: currency",
        "currency\n",
        &[
            "`amount_argument` `currency` is declared as string in the input schema, not as a number",
        ],
        &["declare `currency` a number (`type: number`)"],
    );
}

#[test]
fn a_subject_is_required_with_per_subject_and_refused_otherwise() {
    assert_refused(
        "        subject: \"{order_id}\"\n",
        "",
        "name: per-order",
        &["budget `per-order` is `per: subject` but has no `subject`"],
        &["add `subject: \"{order_id}\"`"],
    );
    assert_refused(
        "        per: tenant\n",
        "        per: tenant\n        subject: \"{order_id}\"\n",
        "\"{order_id}\"\n        window: 1h",
        &["budget `tenant-hourly` has a `subject`, but it is `per: tenant`"],
        &["remove `subject:`, or write `per: subject`"],
    );
}

#[test]
fn a_subject_that_names_what_the_tool_lacks_is_refused() {
    assert_refused(
        r#"subject: "{order_id}""#,
        r#"subject: "{order}""#,
        r#""{order}""#,
        &["budget `per-order`: the subject uses `{order}`, which is not an argument of the tool"],
        &[
            "its arguments are `order_id`",
            "add `order` to input_schema.properties",
        ],
    );
    assert_refused(
        r#"subject: "{order_id}""#,
        r#"subject: "{intent_id}""#,
        r#""{intent_id}""#,
        &["the subject uses `{intent_id}`, which is new for every intent"],
        &["`subject: \"{order_id}\"`"],
    );
    assert_refused(
        r#"subject: "{order_id}""#,
        r#"subject: "{request_id}""#,
        r#""{request_id}""#,
        &["changes on every attempt"],
        &["`subject: \"{order_id}\"`"],
    );
    assert_refused(
        r#"subject: "{order_id}""#,
        r#"subject: "orders""#,
        r#""orders""#,
        &["the subject has no placeholder"],
        &["`per: tenant`"],
    );
    assert_refused(
        r#"subject: "{order_id}""#,
        r#"subject: "{order_id""#,
        r#""{order_id""#,
        &["the subject is not a template"],
        &["`{order_id}`"],
    );
}

#[test]
fn a_subject_may_not_use_a_sensitive_argument() {
    let text = broken(
        "        reason: {type: string}\n",
        "        reason: {type: string}\n        email: {type: string, sensitive: true}\n",
    )
    .replacen(r#"subject: "{order_id}""#, r#"subject: "{email}""#, 1)
    .replacen(
        "upstreams:",
        "gateway: {hash_key: \"${KEY}\"}\nupstreams:",
        1,
    );
    let key = |name: &str| (name == "KEY").then(|| "k".repeat(40));
    let errors = load_str(&text, "agent.yaml", &key).expect_err("refused");
    assert_eq!(errors.len(), 1, "{errors}");
    let error = &errors.errors[0];
    assert_at(error, &text, r#""{email}""#);
    assert_says(
        error,
        &[
            "the subject uses sensitive argument `email`",
            "in the clear",
        ],
        &["not sensitive"],
    );
}

#[test]
fn a_window_of_zero_or_past_a_month_is_refused() {
    assert_refused(
        "window: 1h",
        "window: 0s",
        "0s",
        &[
            "budget `tenant-hourly`: `window`",
            "`0s` is empty: a duration must be positive",
        ],
        &["`window: 24h`", "at most `31d`"],
    );
    assert_refused(
        "window: 1h",
        "window: 32d",
        "32d",
        &["budget `tenant-hourly`: `window` is `32d`, longer than the 31d it may be"],
        &["write at most `31d`"],
    );
    assert_refused(
        "window: 1h",
        "window: 3600",
        "3600",
        &["`3600` is not a duration"],
        &["a whole number and a unit"],
    );
}

#[test]
fn a_deadline_is_only_for_calls_held_beyond_a_budget() {
    assert_refused(
        "        beyond: approval\n",
        "",
        "30m",
        &["budget `per-order` has a `deadline`, but a call beyond it is refused"],
        &["remove `deadline:`, or write `beyond: approval`"],
    );
    assert_refused(
        "deadline: 30m",
        "deadline: 2w",
        "2w",
        &["budget `per-order`: `deadline`: `2w` is not a duration"],
        &["at most `7d`"],
    );
}

#[test]
fn missing_per_and_window_are_named_at_the_budget() {
    let text = broken("        per: tenant\n", "").replacen("        window: 1h\n", "", 1);
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    for error in &errors.errors {
        assert_at(error, &text, "name: tenant-hourly");
    }
    assert_says(
        &errors.errors[0],
        &["budget `tenant-hourly` has no `per`"],
        &["`per: tool`", "`per: tenant`", "`per: subject`"],
    );
    assert_says(
        &errors.errors[1],
        &["budget `tenant-hourly` has no `window`"],
        &["add `window: 1h`", "(UTC)"],
    );
}

#[test]
fn unknown_values_and_fields_list_what_is_allowed() {
    assert_refused(
        "per: tenant",
        "per: customer",
        "customer\n",
        &["`tools[1].budgets[1].per` can't be `customer`"],
        &["`tool`, `tenant`, `subject`"],
    );
    assert_refused(
        "beyond: approval",
        "beyond: queue",
        "queue",
        &["`tools[1].budgets[0].beyond` can't be `queue`"],
        &["`refuse`, `approval`"],
    );
    assert_refused(
        "deadline: 4h",
        "dedline: 4h",
        "dedline",
        &["unknown field `dedline` in `tools[1].approval`"],
        &["did you mean `deadline`?"],
    );
    assert_refused(
        "count: 1000",
        "limit: 1000",
        "limit",
        &["unknown field `limit` in `tools[1].budgets[2]`"],
        &["`count`", "`amount`"],
    );
}

#[test]
fn a_value_of_the_wrong_type_is_answered_with_an_example_of_the_budget_field() {
    assert_refused(
        "count: 2",
        "count: many",
        "many",
        &["`tools[1].budgets[0].count` has the wrong type"],
        &["`count: 10` (a whole number of intents per window, at least 1)"],
    );
    assert_refused(
        "name: tenant-hourly",
        "name: [tenant, hourly]",
        "[tenant, hourly]",
        &["`tools[1].budgets[1].name` has the wrong type"],
        &["`name: per-order` (1 to 64 lowercase letters"],
    );
    assert_refused(
        r#"amount: "5000.00""#,
        "amount: {cents: 500000}",
        "{cents: 500000}",
        &["`tools[1].budgets[1].amount` has the wrong type"],
        &["`amount: \"5000.00\"` (an exact decimal, quoted)"],
    );
}

#[test]
fn every_mistake_of_one_tool_is_reported_together_in_file_order() {
    let text = broken("deadline: 4h", "deadline: 9d")
        .replacen("count: 2", "count: 0", 1)
        .replacen("window: 1h", "window: 40d", 1);
    let errors = errors(&text);
    assert_eq!(errors.len(), 3, "{errors}");
    assert_at(&errors.errors[0], &text, "9d");
    assert_at(&errors.errors[1], &text, "0\n        beyond");
    assert_at(&errors.errors[2], &text, "40d");
}

#[test]
fn config_check_reads_the_policies_from_a_file_without_secrets() {
    // What `intentgate config check FILE` does: the file, with unset variables optional.
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().join("agent.yaml");
    std::fs::write(&path, BASE).unwrap();
    let loaded = load_file_as(&path, &HashKeySource::NotNeeded, Secrets::Optional)
        .unwrap_or_else(|errors| panic!("{errors}"));
    let refund = loaded
        .tools
        .iter()
        .find(|tool| tool.name == "refund_order")
        .unwrap();
    assert_eq!(refund.policies, policies(BASE));

    std::fs::write(&path, broken("window: 1h", "window: 0s")).unwrap();
    let errors =
        load_file_as(&path, &HashKeySource::NotNeeded, Secrets::Optional).expect_err("refused");
    let rendered = errors.to_string();
    let (line, column) = position(&broken("window: 1h", "window: 0s"), "0s");
    assert!(
        rendered.starts_with(&format!("{}:{line}:{column}: ", path.display())),
        "{rendered}"
    );
    assert!(rendered.contains("\n  fix: "), "{rendered}");
}

#[test]
fn the_policies_validate_against_the_published_schema() {
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema");
    let document: Value = serde_saphyr::from_str(BASE).expect("the base is YAML");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let tool = &schema["$defs"]["Tool"]["properties"];
    assert!(tool["approval"].is_object(), "{tool:#}");
    assert!(tool["budgets"].is_object(), "{tool:#}");

    // What the loader refuses, the schema refuses: policies on a read, an unknown field, an
    // unknown `per`, a count of 0, an amount that is not a decimal, a budget without a name.
    let refused: [(&str, Value); 6] = [
        ("/tools/0/approval", json!({})),
        ("/tools/1/budgets/0/limit", json!(5)),
        ("/tools/1/budgets/0/per", json!("customer")),
        ("/tools/1/budgets/0/count", json!(0)),
        ("/tools/1/budgets/1/amount", json!("lots")),
        ("/tools/1/budgets/2/name", Value::Null),
    ];
    for (pointer, value) in refused {
        let mut changed = document.clone();
        let (parent, member) = pointer.rsplit_once('/').unwrap();
        let object = changed
            .pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap();
        if value.is_null() {
            object.remove(member);
        } else {
            object.insert(member.to_owned(), value);
        }
        assert!(!validator.is_valid(&changed), "{pointer} is accepted");
    }
}

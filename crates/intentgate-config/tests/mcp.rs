//! MCP upstreams in the config: `kind: mcp` servers, MCP calls and lookups beside HTTP ones,
//! and `imports`. Each broken config is the valid one below with one mistake; the error must
//! name the field, say what is wrong and how to fix it, and never show a secret.

use std::time::Duration;

use intentgate_config::{ConfigErrors, load_str};
use intentgate_core::Effect;
use intentgate_mcp_upstream::McpTransport;
use serde_json::json;

const VALID: &str = r#"upstreams:
  payments:
    base_url: http://127.0.0.1:8090
  refunds:
    kind: mcp
    command: python3
    args: [refund_server.py, "--token=${REFUND_TOKEN}"]
    env: {REFUND_API_KEY: "${REFUND_TOKEN}"}
    timeout_ms: 5000
    honours_idempotency_keys: true
  crm:
    kind: mcp
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer ${REFUND_TOKEN}"}
imports:
  - upstream: crm
    prefix: crm_
    effects: {update_contact: idempotent}
    exclude: [delete_contact]
tools:
  - name: refund_order
    description: Refund an order.
    effect: side_effect
    key: "refund:{order_id}"
    input_schema:
      type: object
      properties: {order_id: {type: string}, amount: {type: string}}
      required: [order_id, amount]
    call:
      upstream: refunds
      tool: refund
      arguments: {order: "{order_id}", amount: "{amount}"}
      idempotency_key_argument: idempotency_key
      not_processed: [rate limit]
      result: {external_id: /refund_id}
    lookup:
      tool: find_refund
      arguments: {order: "{order_id}"}
      found: /refund
      key: /idempotency_key
      external_id: /refund_id
    list:
      tool: list_refunds
      arguments: {created_from: "{since_ms}", created_before: "{until_ms}", page: "{cursor}"}
      items: /refunds
      next_cursor: /next
      fields: {external_id: /refund_id, amount: /amount}
      match: {order_id: {record: /order}}
  - name: get_order
    description: Look up an order.
    effect: read
    input_schema: {type: object, properties: {order_id: {type: string}}}
    call: {upstream: payments, method: GET, path: "/v1/orders/{order_id}"}
"#;

const SECRET: &str = "tok_SECRET_1234";

fn env(name: &str) -> Option<String> {
    (name == "REFUND_TOKEN").then(|| SECRET.to_owned())
}

fn broken(old: &str, new: &str) -> String {
    assert!(VALID.contains(old), "the config has no `{old}`");
    VALID.replacen(old, new, 1)
}

fn errors(text: &str) -> ConfigErrors {
    let errors = load_str(text, "agent.yaml", &env).expect_err("the config should be refused");
    assert!(!errors.to_string().contains(SECRET), "{errors}");
    errors
}

/// The one error, at `line`, whose message has every one of `says` and whose fix has `fix`.
fn only_error(text: &str, line: u64, says: &[&str], fix: &str) {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors}");
    let error = errors.iter().next().unwrap();
    assert_eq!(error.line, line, "{error}");
    for part in says {
        assert!(error.message.contains(part), "`{part}` not in: {error}");
    }
    assert!(error.fix.contains(fix), "`{fix}` not in the fix: {error}");
}

fn line_of(text: &str, needle: &str) -> u64 {
    let offset = text.find(needle).unwrap_or_else(|| panic!("no `{needle}`"));
    text[..offset].matches('\n').count() as u64 + 1
}

#[test]
fn a_valid_config_splits_http_and_mcp_upstreams_and_calls() {
    let loaded = load_str(VALID, "agent.yaml", &env).unwrap();
    let config = &loaded.config;
    assert_eq!(config.upstreams.keys().collect::<Vec<_>>(), ["payments"]);
    assert_eq!(
        config.mcp_upstreams.keys().collect::<Vec<_>>(),
        ["crm", "refunds"]
    );
    let refunds = &config.mcp_upstreams["refunds"];
    assert_eq!(refunds.server.timeout, Duration::from_millis(5000));
    match &refunds.server.transport {
        McpTransport::Stdio { command, args, env } => {
            assert_eq!(command, "python3");
            // References resolved where the server needs them.
            assert_eq!(args[1], format!("--token={SECRET}"));
            assert_eq!(env["REFUND_API_KEY"], SECRET);
        }
        other => panic!("{other:?}"),
    }
    // Debug output names secrets' holders, never their values.
    assert!(!format!("{config:?}").contains(SECRET));
    let crm = &config.mcp_upstreams["crm"];
    assert!(
        matches!(&crm.server.transport, McpTransport::Http { url, .. } if url == "http://127.0.0.1:9000/mcp")
    );
    // Defaults: 30 s per call, keys not honoured.
    assert_eq!(crm.server.timeout, Duration::from_secs(30));
    assert!(!crm.honours_idempotency_keys);

    let refund = &config.tools[0];
    assert!(refund.call.is_none());
    let mcp = refund.mcp.as_ref().unwrap();
    assert_eq!(mcp.upstream, "refunds");
    assert_eq!(mcp.tool.call.tool, "refund");
    assert_eq!(
        mcp.tool.call.idempotency_key_argument.as_deref(),
        Some("idempotency_key")
    );
    assert_eq!(mcp.tool.call.not_processed, ["rate limit"]);
    assert_eq!(
        mcp.tool.call.arguments,
        Some(json!({"order": "{order_id}", "amount": "{amount}"}))
    );
    let lookup = mcp.tool.lookup.as_ref().unwrap();
    assert_eq!(lookup.call.tool, "find_refund");
    assert_eq!(lookup.found, "/refund");
    assert_eq!(lookup.external_id.as_deref(), Some("/refund_id"));
    // The list is a tool of the same server, read like an HTTP list; the `match` field got
    // its comparison from the input schema (a string: text).
    let list = mcp.list.as_ref().unwrap();
    assert_eq!(list.call.tool, "list_refunds");
    assert_eq!(list.call.arguments.as_ref().unwrap()["page"], "{cursor}");
    assert_eq!(list.records.items, "/refunds");
    assert_eq!(list.records.next_cursor.as_deref(), Some("/next"));
    assert_eq!(
        list.records.match_fields["order_id"].compare,
        Some(intentgate_http::spec::MatchCompare::Text)
    );
    assert!(refund.list.is_none());
    assert_eq!(refund.list_records().unwrap(), list.records);
    let definition = &loaded.tools[0];
    assert_eq!(definition.external_id_pointer, "/refund_id");
    // The server honours keys: same-key re-sends inside its window (24 h less the margin).
    assert!(definition.resend_window.is_some());
    assert!(config.tools[1].call.is_some() && config.tools[1].mcp.is_none());

    let import = &config.imports[0];
    assert_eq!(
        (import.upstream.as_str(), import.prefix.as_str()),
        ("crm", "crm_")
    );
    assert_eq!(import.effects["update_contact"], Effect::Idempotent);
    assert_eq!(import.exclude, ["delete_contact"]);
    assert_eq!(import.line, line_of(VALID, "  - upstream: crm"));
    let tools = config.mcp_tools();
    assert_eq!(
        tools["refunds"].keys().collect::<Vec<_>>(),
        ["refund_order"]
    );
}

#[test]
fn an_import_alone_is_a_config() {
    let text = VALID.split("tools:\n").next().unwrap();
    let loaded = load_str(text, "agent.yaml", &env).unwrap();
    assert!(loaded.config.tools.is_empty());
    assert_eq!(loaded.config.imports.len(), 1);
}

#[test]
fn an_mcp_upstream_needs_exactly_one_of_command_and_url() {
    let text = broken("    command: python3\n", "");
    let text = text.replace(
        "    args: [refund_server.py, \"--token=${REFUND_TOKEN}\"]\n    env: {REFUND_API_KEY: \"${REFUND_TOKEN}\"}\n",
        "",
    );
    only_error(
        &text,
        line_of(&text, "    kind: mcp"),
        &["upstream `refunds`", "neither `command` nor `url`"],
        "`command:`",
    );
    let text = broken(
        "    command: python3\n",
        "    command: python3\n    url: http://127.0.0.1:9001/mcp\n",
    );
    only_error(
        &text,
        line_of(&text, "    url: http://127.0.0.1:9001/mcp"),
        &["both `command` and `url`"],
        "`url:`",
    );
}

#[test]
fn fields_of_the_other_kind_are_refused_at_their_line() {
    let text = broken(
        "    timeout_ms: 5000\n",
        "    timeout_ms: 5000\n    base_url: http://x\n",
    );
    only_error(
        &text,
        line_of(&text, "    base_url: http://x"),
        &["`base_url` is for HTTP APIs", "`kind: mcp`"],
        "remove `base_url`",
    );
    let text = broken(
        "    base_url: http://127.0.0.1:8090\n",
        "    base_url: http://127.0.0.1:8090\n    command: node\n",
    );
    only_error(
        &text,
        line_of(&text, "    command: node"),
        &["`command` is for MCP servers"],
        "`kind: mcp`",
    );
    // Headers go with HTTP requests; a stdio server takes its secrets in `env`.
    let text = broken(
        "    timeout_ms: 5000\n",
        "    timeout_ms: 5000\n    headers: {X: y}\n",
    );
    only_error(
        &text,
        line_of(&text, "    headers: {X: y}"),
        &["runs over stdio"],
        "`env`",
    );
    let text = broken("    timeout_ms: 5000\n", "    timeout_ms: 0\n");
    only_error(
        &text,
        line_of(&text, "    timeout_ms: 0"),
        &["`timeout_ms` is 0"],
        "between 1",
    );
}

#[test]
fn an_mcp_call_takes_no_http_fields_and_an_http_call_no_mcp_fields() {
    let text = broken(
        "      tool: refund\n",
        "      tool: refund\n      method: POST\n",
    );
    only_error(
        &text,
        line_of(&text, "      method: POST"),
        &["tool `refund_order`", "`method` is for HTTP requests"],
        "`arguments:`",
    );
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}",
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\", not_processed: [x]}",
    );
    only_error(
        &text,
        line_of(&text, "    call: {upstream: payments, method: GET"),
        &[
            "tool `get_order`",
            "`not_processed` is for calls of an MCP server's tool",
        ],
        "add `tool:`",
    );
    // An HTTP call without its method says so, and names the MCP form.
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}",
        "    call: {upstream: payments, path: \"/v1/orders/{order_id}\"}",
    );
    only_error(
        &text,
        line_of(&text, "    call: {upstream: payments, path"),
        &["`call` has no `method`"],
        "`tool:`",
    );
}

#[test]
fn a_call_must_name_an_upstream_of_its_kind() {
    let text = broken("      upstream: refunds\n", "      upstream: payments\n");
    only_error(
        &text,
        line_of(&text, "      upstream: payments\n      tool: refund"),
        &["MCP tool `refund`", "not an MCP server"],
        "is an HTTP API",
    );
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}",
        "    call: {upstream: crm, method: GET, path: \"/v1/orders/{order_id}\"}",
    );
    only_error(
        &text,
        line_of(&text, "    call: {upstream: crm"),
        &["upstream `crm` is an MCP server"],
        "call one of its tools",
    );
}

#[test]
fn an_mcp_lookup_is_a_tool_of_the_same_server() {
    let text = broken("      tool: find_refund\n", "      path: /v1/refunds\n");
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{errors}");
    let says = |part: &str| errors.iter().any(|error| error.message.contains(part));
    assert!(says("`lookup.path` is for HTTP lookups"), "{errors}");
    assert!(says("the lookup of an MCP call has no `tool`"), "{errors}");
    let text = broken(
        "      tool: find_refund\n",
        "      tool: find_refund\n      upstream: crm\n",
    );
    only_error(
        &text,
        line_of(&text, "      upstream: crm"),
        &["lookup names upstream `crm`", "(`refunds`)"],
        "remove `upstream:`",
    );
}

#[test]
fn arguments_must_name_arguments_of_the_tool() {
    let text = broken(
        "      arguments: {order: \"{order_id}\", amount: \"{amount}\"}",
        "      arguments: {order: \"{order}\", amount: \"{amount}\", key: \"{idempotency_key}\", text: \"{{order_id}}\"}",
    );
    only_error(
        &text,
        line_of(&text, "      arguments: {order: \"{order}\""),
        &["`arguments` uses `{order}`", "not an argument"],
        "`order_id`",
    );
    let text = broken(
        "      arguments: {order: \"{order_id}\"}",
        "      arguments: [\"{order_id}\"]",
    );
    only_error(
        &text,
        line_of(&text, "      arguments: [\"{order_id}\"]"),
        &["`arguments` is not a mapping"],
        "mapping",
    );
}

#[test]
fn a_key_argument_only_where_it_means_something() {
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}",
        "    call: {upstream: crm, tool: get_order, idempotency_key_argument: key}",
    );
    only_error(
        &text,
        line_of(&text, "    call: {upstream: crm, tool"),
        &["only side-effecting tools send an idempotency key"],
        "remove `idempotency_key_argument`",
    );
}

#[test]
fn an_mcp_list_is_a_tool_of_the_same_server_with_the_window_and_paging_values() {
    // HTTP fields in an MCP list, each at its line.
    let text = broken(
        "      tool: list_refunds\n",
        "      tool: list_refunds\n      path: /v1/refunds\n",
    );
    only_error(
        &text,
        line_of(&text, "      path: /v1/refunds"),
        &["`list.path` is for HTTP listings", "calls an MCP server"],
        "an MCP listing is another tool of the same server",
    );
    // Another server.
    let text = broken(
        "      tool: list_refunds\n",
        "      tool: list_refunds\n      upstream: crm\n",
    );
    only_error(
        &text,
        line_of(&text, "      upstream: crm"),
        &["names upstream `crm`", "the call's own server (`refunds`)"],
        "remove `upstream:`",
    );
    // A listing runs outside any call: an argument of the tool is no value there.
    let text = broken(
        "page: \"{cursor}\"",
        "page: \"{cursor}\", order: \"{order_id}\"",
    );
    only_error(
        &text,
        line_of(&text, "      arguments: {created_from"),
        &["`list.arguments` uses `{order_id}`", "outside any call"],
        "{since_ms}",
    );
    let text = broken(
        "      arguments: {created_from: \"{since_ms}\", created_before: \"{until_ms}\", page: \"{cursor}\"}",
        "      arguments: [since]",
    );
    only_error(
        &text,
        line_of(&text, "      arguments: [since]"),
        &["`list.arguments` is not a mapping"],
        "as a mapping",
    );
    // No tool to call.
    let text = broken("      tool: list_refunds\n", "");
    only_error(
        &text,
        // The list's mapping starts on its first member's line.
        line_of(&text, "      arguments: {created_from"),
        &["the list of an MCP call has no `tool`"],
        "tool: list_refunds",
    );
    // Its pages are read and paired as an HTTP list's: the same checks, at the same lines.
    let text = broken("      match: {order_id: {record: /order}}\n", "");
    only_error(
        &text,
        line_of(&text, "      fields: {external_id"),
        &["does not say how a provider record pairs with an intent"],
        "idempotency_key: <pointer>",
    );
    let text = broken("next_cursor: /next", "next_cursor: next");
    only_error(
        &text,
        line_of(&text, "      next_cursor: next"),
        &["next"],
        "/",
    );
}

#[test]
fn an_mcp_list_may_page_by_has_more_and_must_pass_the_cursor_on() {
    // After the last record's id while `has_more`, with the window in seconds.
    let text = broken(
        "arguments: {created_from: \"{since_ms}\", created_before: \"{until_ms}\", page: \"{cursor}\"}\n      items: /refunds\n      next_cursor: /next",
        "arguments: {created_from: \"{since_s}\", created_before: \"{until_s}\", page: \"{cursor}\"}\n      items: /refunds\n      has_more: /has_more",
    );
    let loaded = load_str(&text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let records = loaded.config.tools[0].list_records().unwrap();
    assert_eq!(records.has_more.as_deref(), Some("/has_more"));
    assert_eq!(records.next_cursor, None);

    // Arguments that never pass the cursor on would ask for the first page forever.
    let text = broken(", page: \"{cursor}\"}", "}");
    only_error(
        &text,
        line_of(&text, "      arguments: {created_from"),
        &["`list.arguments` has no `{cursor}`"],
        "cursor: \"{cursor}\"",
    );

    // The page size is the listing tool's to cap.
    let text = broken(
        "      next_cursor: /next\n",
        "      next_cursor: /next\n      limit_max: 100\n",
    );
    only_error(
        &text,
        line_of(&text, "      limit_max: 100"),
        &["`list.limit_max` is for HTTP listings"],
        "remove `limit_max`",
    );
}

#[test]
fn an_http_list_takes_no_mcp_fields() {
    let text = broken(
        "    call: {upstream: payments, method: GET, path: \"/v1/orders/{order_id}\"}",
        "    effect: side_effect\n    key: \"o:{order_id}\"\n    call: {upstream: payments, method: POST, path: \"/v1/orders/{order_id}\"}\n    list: {query: {after: \"{cursor}\"}, tool: list_orders, path: /v1/orders, items: /data, next_cursor: /next, fields: {idempotency_key: /k, external_id: /id}}",
    )
    .replace("    effect: read\n    input_schema", "    input_schema");
    only_error(
        &text,
        line_of(&text, "    list: {query"),
        &["`list.tool` is for listings of an MCP call"],
        "remove `tool`",
    );
    let text = text.replace("tool: list_orders, path: /v1/orders, ", "");
    only_error(
        &text,
        line_of(&text, "    list: {query"),
        &["`list` has no `path`"],
        "path: /v1/",
    );
}

#[test]
fn a_lookup_never_sends_a_sensitive_argument() {
    let text = broken(
        "      properties: {order_id: {type: string}, amount: {type: string}}",
        "      properties: {order_id: {type: string, sensitive: true}, amount: {type: string}}",
    )
    .replace(
        "upstreams:\n",
        "gateway: {hash_key: \"${HASH_KEY:-0123456789abcdef0123456789abcdef}\"}\nupstreams:\n",
    );
    let errors = errors(&text);
    assert!(
        errors.iter().any(|error| error
            .message
            .contains("the lookup would send sensitive argument `order_id`")),
        "{errors}"
    );
}

#[test]
fn imports_name_mcp_upstreams_and_leave_side_effects_to_tools() {
    let text = broken("  - upstream: crm\n", "  - upstream: payments\n");
    only_error(
        &text,
        line_of(&text, "  - upstream: payments"),
        &["`payments` is not an MCP server"],
        "only MCP servers can be imported",
    );
    let text = broken(
        "    effects: {update_contact: idempotent}",
        "    effects: {update_contact: idempotent, send_email: side_effect}",
    );
    only_error(
        &text,
        line_of(&text, "    effects: {update_contact"),
        &[
            "`send_email` is classified `side_effect`",
            "intent key and a lookup",
        ],
        "call: {upstream: crm, tool: send_email}",
    );
    let text = broken("    prefix: crm_", "    prefix: \"crm/\"");
    only_error(
        &text,
        line_of(&text, "    prefix:"),
        &["can't start a tool name"],
        "`prefix: memory_`",
    );
}

/// Regression: an MCP lookup's `match` skipped the checks an HTTP lookup's gets, so a
/// number argument was compared as text (`49.5` and `"49.50"` apart) and a sensitive one,
/// which the sweeper has only as a hash, was accepted. Now both are as for HTTP.
#[test]
fn an_mcp_lookups_match_is_checked_as_an_http_lookups() {
    let numeric = VALID
        .replace(
            "properties: {order_id: {type: string}, amount: {type: string}}",
            "properties: {order_id: {type: string}, amount: {type: number}}",
        )
        .replacen(
            "      found: /refund\n      key: /idempotency_key\n",
            "      found: /refund\n      match: {amount: {record: /amount}}\n",
            1,
        );
    let loaded = load_str(&numeric, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"));
    let lookup = loaded.config.tools[0]
        .mcp
        .as_ref()
        .unwrap()
        .tool
        .lookup
        .clone()
        .unwrap();
    assert_eq!(
        lookup.match_fields["amount"].compare,
        Some(intentgate_http::spec::MatchCompare::Decimal)
    );

    let sensitive = numeric.replace(
        "amount: {type: number}}",
        "amount: {type: number, sensitive: true}}",
    );
    let errors = load_str(&sensitive, "agent.yaml", &env)
        .expect_err("a sensitive match field must be refused")
        .to_string();
    assert!(errors.contains("sensitive argument `amount`"), "{errors}");
}

// Found by the Stripe work: the check read `{amount:.2}` as an argument named `amount:.2`
// and refused it, though the request renders it. The shared parser reads it as the tool's
// `amount`, written with two places, as every other template does.
#[test]
fn arguments_may_format_an_argument_as_every_template_does() {
    let text = broken(
        "      arguments: {order: \"{order_id}\", amount: \"{amount}\"}",
        "      arguments: {order: \"{order_id}\", amount: \"{amount:.2}\", cents: \"{amount:minor(USD)}\", note: \"refund of {order_id}\"}",
    );
    load_str(&text, "agent.yaml", &env).expect("formats are placeholders of the argument");

    // A format's argument is still checked, and so is where minor units take the currency.
    let text = broken(
        "      arguments: {order: \"{order_id}\", amount: \"{amount}\"}",
        "      arguments: {order: \"{order_id}\", amount: \"{amount_due:.2}\"}",
    );
    only_error(
        &text,
        line_of(
            &text,
            "      arguments: {order: \"{order_id}\", amount: \"{amount_due",
        ),
        &["`arguments` uses `{amount_due}`", "not an argument"],
        "`amount`",
    );
    let text = broken(
        "      arguments: {order: \"{order_id}\", amount: \"{amount}\"}",
        "      arguments: {order: \"{order_id}\", amount: \"{amount:minor(currency)}\"}",
    );
    only_error(
        &text,
        line_of(
            &text,
            "      arguments: {order: \"{order_id}\", amount: \"{amount:minor",
        ),
        &["`arguments` uses `{currency}`", "not an argument"],
        "`order_id`",
    );
    let text = broken(
        "      arguments: {order: \"{order_id}\", amount: \"{amount}\"}",
        "      arguments: {order: \"{order_id}\", amount: \"{amount:.x}\"}",
    );
    only_error(
        &text,
        line_of(
            &text,
            "      arguments: {order: \"{order_id}\", amount: \"{amount:.x",
        ),
        &["`arguments`", "a format must look like `.2`"],
        "{argument:minor(USD)}",
    );
}

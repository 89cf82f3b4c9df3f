//! Secrets are needed only where upstreams are called: with `Secrets::Optional` an unset
//! `${NAME}` is a warning naming the variable and where it is used, and with
//! `Secrets::Required` (what `serve`, `mcp`, `smoke` and `reconcile` load with) it is
//! still an error that names both.

use intentgate_config::{HashKeySource, Secrets, load_str_as};

/// A config whose upstreams are reached with secrets: an HTTP API's URL and credential, an
/// MCP server's URL, and the hash key of a sensitive argument.
const CONFIG: &str = r#"gateway:
  hash_key: ${INTENTGATE_HASH_KEY}
upstreams:
  payments:
    base_url: ${PAYMENTS_URL}
    honours_idempotency_keys: true
    headers:
      Authorization: "Bearer ${PAYMENTS_KEY}"
      X-Region: "${PAYMENTS_REGION:-eu}"
  knowledge:
    kind: mcp
    url: ${KNOWLEDGE_URL}
tools:
  - name: refund_order
    description: Refund an order.
    effect: side_effect
    input_schema:
      type: object
      properties:
        order_id: {type: string}
        email: {type: string, sensitive: true}
      required: [order_id, email]
    key: "refund:{order_id}"
    call: {upstream: payments, method: POST, path: /v1/refunds, body: {order_id: "{order_id}"}}
    lookup: {path: /v1/refunds, query: {idempotency_key: "{idempotency_key}"}, found: /data, key: /idempotency_key}
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn unset_secrets_are_warnings_that_name_each_variable_and_where_it_is_used() {
    let loaded = load_str_as(
        CONFIG,
        "agent.yaml",
        &no_env,
        &HashKeySource::Environment,
        Secrets::Optional,
    )
    .unwrap_or_else(|errors| panic!("refused without secrets:\n{errors}"));
    let unset: Vec<(&str, &str, u64)> = loaded
        .unset
        .iter()
        .map(|unset| (unset.name.as_str(), unset.field.as_str(), unset.line))
        .collect();
    assert_eq!(
        unset,
        [
            ("INTENTGATE_HASH_KEY", "gateway.hash_key", 2),
            ("PAYMENTS_URL", "upstreams.payments.base_url", 5),
            (
                "PAYMENTS_KEY",
                "upstreams.payments.headers.Authorization",
                8
            ),
            ("KNOWLEDGE_URL", "upstreams.knowledge.url", 12),
        ]
    );
    let shown = loaded.unset[2].to_string();
    assert!(
        shown.starts_with("agent.yaml:8:22: warning: environment variable `PAYMENTS_KEY` (used in `upstreams.payments.headers.Authorization`) is not set"),
        "{shown}"
    );
    // A reference with a default resolves and is no warning; the one whose variable is unset
    // is left out rather than sent as written.
    let headers = &loaded.config.upstreams["payments"].headers;
    assert_eq!(headers.get("X-Region").map(String::as_str), Some("eu"));
    assert!(!headers.contains_key("Authorization"), "{headers:?}");
    assert!(loaded.hash_key.is_none());
}

#[test]
fn commands_that_call_upstreams_still_refuse_an_unset_secret_and_say_which() {
    let errors = load_str_as(
        CONFIG,
        "agent.yaml",
        &no_env,
        &HashKeySource::Environment,
        Secrets::Required,
    )
    .expect_err("refused without secrets");
    let shown = errors.to_string();
    for (name, field) in [
        ("INTENTGATE_HASH_KEY", "gateway.hash_key"),
        ("PAYMENTS_URL", "upstreams.payments.base_url"),
        ("PAYMENTS_KEY", "upstreams.payments.headers.Authorization"),
        ("KNOWLEDGE_URL", "upstreams.knowledge.url"),
    ] {
        assert!(
            shown.contains(&format!("`{name}` (used in `{field}`) is not set")),
            "{name} in {field} not named:\n{shown}"
        );
    }
}

#[test]
fn a_set_secret_is_still_checked_when_secrets_are_optional() {
    // Optional means "may be unset", not "unchecked": a set value that is not a URL, or a
    // hash key that is too short, is an error as always.
    let env = |name: &str| match name {
        "PAYMENTS_URL" => Some("not a url".to_owned()),
        "INTENTGATE_HASH_KEY" => Some("short".to_owned()),
        _ => None,
    };
    let errors = load_str_as(
        CONFIG,
        "agent.yaml",
        &env,
        &HashKeySource::Environment,
        Secrets::Optional,
    )
    .expect_err("refused");
    let shown = errors.to_string();
    assert!(shown.contains("is not a usable URL"), "{shown}");
    assert!(
        shown.contains("`gateway.hash_key` (from the environment) is 5 bytes"),
        "{shown}"
    );
    assert!(
        !shown.contains("not a url"),
        "a resolved value is shown:\n{shown}"
    );
}

//! Sensitive arguments in the config: `sensitive: true` marks, the hash key they need
//! (`gateway.hash_key`, from the environment), and the requests that may not use them.

use intentgate_config::{ConfigError, HashKeySource, LoadedConfig, load_str, load_str_with};
use intentgate_core::HashKey;
use serde_json::json;

/// A valid config with an email tool whose recipient and body are sensitive.
const BASE: &str = r#"gateway:
  hash_key: ${INTENTGATE_HASH_KEY}
upstreams:
  mail:
    base_url: http://127.0.0.1:8090
    honours_idempotency_keys: true
tools:
  - name: send_email
    description: Send an email.
    effect: side_effect
    input_schema:
      type: object
      properties:
        to: {type: string, format: email, sensitive: true}
        reference: {type: string}
        amount: {type: number}
        body: {type: string, sensitive: true}
      required: [to, reference, body]
    key: "email:{to}:{reference}"
    call:
      upstream: mail
      method: POST
      path: /v1/emails
      body: {to: "{to}", body: "{body}", metadata: {intent_key: "{intent_key}"}}
    lookup: {path: /v1/emails, query: {idempotency_key: "{idempotency_key}"}, found: /data, key: /idempotency_key}
    list:
      path: /v1/emails
      query: {created_gte_ms: "{since_ms}", starting_after: "{cursor}"}
      items: /data
      next_cursor: /next_cursor
      fields: {idempotency_key: /idempotency_key, external_id: /id}
"#;

/// The key the environment holds; it must never appear in an error or a `Debug` print.
const KEY: &str = "4f1c0d9e8b7a6f5e4d3c2b1a09f8e7d6-hash-key-of-the-tests";

fn env(name: &str) -> Option<String> {
    (name == "INTENTGATE_HASH_KEY").then(|| KEY.to_owned())
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn broken(old: &str, new: &str) -> String {
    assert!(BASE.contains(old), "the base config has no `{old}`");
    BASE.replacen(old, new, 1)
}

fn only_error(text: &str, environment: &dyn Fn(&str) -> Option<String>) -> ConfigError {
    let errors = load_str(text, "agent.yaml", environment).expect_err("refused");
    assert!(!errors.to_string().contains(KEY), "{errors}");
    assert_eq!(errors.len(), 1, "expected one error:\n{errors}");
    errors.errors[0].clone()
}

fn line_of(text: &str, needle: &str) -> u64 {
    let offset = text.find(needle).expect("the needle is in the text");
    text[..offset].matches('\n').count() as u64 + 1
}

fn load(text: &str) -> LoadedConfig {
    load_str(text, "agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"))
}

#[test]
fn marked_arguments_are_loaded_with_the_key_and_published_without_the_mark() {
    let loaded = load(BASE);
    let tool = &loaded.tools[0];
    let names: Vec<String> = tool.sensitive.iter().map(ToString::to_string).collect();
    assert_eq!(names, ["body", "to"]);
    assert!(tool.hash_key.is_some() && loaded.hash_key.is_some());
    assert!(!tool.input_schema.to_string().contains("sensitive"));
    // The upstream honours keys, but a tool with sensitive arguments is never re-sent.
    assert_eq!(tool.resend_window, None);
    let expected = HashKey::new(KEY.as_bytes()).unwrap();
    let stored = tool
        .stored_arguments(&json!({"to": "a@example.com", "reference": "1", "body": "hi"}))
        .unwrap()
        .into_owned();
    assert_eq!(
        stored["to"],
        json!(expected.hash_value(&json!("a@example.com")))
    );
    // The key is a secret: never printed.
    let printed = format!("{loaded:?}");
    assert!(
        !printed.contains(KEY) && !printed.contains("hash-key-of"),
        "{printed}"
    );
}

#[test]
fn a_sensitive_argument_without_a_hash_key_is_refused_with_the_fix() {
    // Without the check the gateway would start and store the values in clear.
    let text = broken("gateway:\n  hash_key: ${INTENTGATE_HASH_KEY}\n", "");
    let error = only_error(&text, &env);
    assert_eq!(error.line, line_of(&text, "type: object\n      properties"));
    assert!(
        error.message.contains("`body`, `to`") && error.message.contains("gateway.hash_key"),
        "{error}"
    );
    assert!(
        error
            .fix
            .contains("export INTENTGATE_HASH_KEY=$(openssl rand -hex 32)"),
        "{error}"
    );
}

#[test]
fn the_hash_key_must_come_from_the_environment_and_be_long_enough() {
    let written = broken("${INTENTGATE_HASH_KEY}", "0123456789abcdef0123456789abcdef");
    let error = only_error(&written, &env);
    assert_eq!(error.line, 2);
    assert!(error.message.contains("written in the file"), "{error}");

    let error = only_error(BASE, &no_env);
    assert_eq!(error.line, 2);
    assert!(
        error.message.contains("`INTENTGATE_HASH_KEY`") && error.message.contains("not set"),
        "{error}"
    );
    assert!(error.fix.contains("openssl rand -hex 32"), "{error}");

    let short = |name: &str| (name == "INTENTGATE_HASH_KEY").then(|| "short-secret".to_owned());
    let error = only_error(BASE, &short);
    assert!(error.message.contains("12 bytes"), "{error}");
    assert!(!error.to_string().contains("short-secret"), "{error}");
}

#[test]
fn commands_that_hash_nothing_need_no_key_and_throwaway_ledgers_may_invent_one() {
    let loaded = load_str_with(BASE, "agent.yaml", &no_env, &HashKeySource::NotNeeded)
        .unwrap_or_else(|errors| panic!("{errors}"));
    assert!(loaded.tools[0].hash_key.is_none());

    let ephemeral = HashKey::new(&[9u8; 32]).unwrap();
    let source = HashKeySource::EnvironmentOrEphemeral(ephemeral.clone());
    let hashed = |loaded: &LoadedConfig| {
        loaded.tools[0]
            .stored_arguments(&json!({"to": "a@example.com"}))
            .unwrap()["to"]
            .clone()
    };
    let invented = load_str_with(BASE, "agent.yaml", &no_env, &source).unwrap();
    assert_eq!(
        hashed(&invented),
        json!(ephemeral.hash_value(&json!("a@example.com")))
    );
    let configured = load_str_with(BASE, "agent.yaml", &env, &source).unwrap();
    assert_eq!(hashed(&configured), hashed(&load(BASE)));
}

#[test]
fn a_lookup_or_amount_that_reads_a_sensitive_argument_is_refused() {
    // The sweeper's lookups run from the ledger's copy, where the value is a hash.
    let text = broken(
        r#"query: {idempotency_key: "{idempotency_key}"}, found"#,
        r#"query: {to: "{to}"}, found"#,
    );
    let error = only_error(&text, &env);
    assert_eq!(error.line, line_of(&text, "lookup:"));
    assert!(
        error.message.contains("`lookup.query.to`") && error.message.contains("`to`"),
        "{error}"
    );
    assert!(error.fix.contains("{idempotency_key}"), "{error}");

    // Nor may a lookup prove its records by a sensitive argument: the sweeper has its hash.
    let text = broken(
        "found: /data, key: /idempotency_key}",
        "found: /data, match: {to: {record: /to}}}",
    );
    let error = only_error(&text, &env);
    assert!(
        error.message.contains("sensitive argument `to`") && error.message.contains("lookup"),
        "{error}"
    );

    let text = broken(
        "reference: {type: string}",
        "reference: {type: string}\n        price: {type: number, sensitive: true}",
    )
    .replacen(
        "external_id: /id}",
        "external_id: /id, amount: /amount, amount_argument: /price}",
        1,
    );
    let error = only_error(&text, &env);
    assert!(
        error.message.contains("`price`") && error.message.contains("never match"),
        "{error}"
    );
}

#[test]
fn a_mark_the_gateway_would_ignore_is_refused_where_it_is() {
    let text = broken(
        "amount: {type: number}",
        "amount: {type: array, items: {type: number, sensitive: true}}",
    );
    let error = only_error(&text, &env);
    assert_eq!(error.line, line_of(&text, "amount: {type: array"));
    assert!(
        error.message.contains("/properties/amount/items")
            && error.message.contains("not on a property"),
        "{error}"
    );
    let text = broken(
        "body: {type: string, sensitive: true}",
        "body: {type: string, sensitive: yes}",
    );
    let error = only_error(&text, &env);
    assert!(error.message.contains("`true` or `false`"), "{error}");
}

#[test]
fn business_fields_that_pair_records_may_not_be_sensitive() {
    // Reconciliation reads the ledger's copy of the arguments, where the value is a hash.
    let text = broken(
        "fields: {idempotency_key: /idempotency_key, external_id: /id}",
        "fields: {external_id: /id}\n      match: {reference: {record: /metadata/reference}, to: {record: /to}}",
    );
    let error = only_error(&text, &env);
    assert_eq!(error.line, line_of(&text, "match:"));
    assert!(
        error
            .message
            .contains("`match` uses sensitive argument `to`"),
        "{error}"
    );
    assert!(error.fix.contains("not sensitive"), "{error}");
    // Without it, the same list loads.
    let text = broken(
        "fields: {idempotency_key: /idempotency_key, external_id: /id}",
        "fields: {external_id: /id}\n      match: {reference: {record: /metadata/reference}}",
    );
    load(&text);
}

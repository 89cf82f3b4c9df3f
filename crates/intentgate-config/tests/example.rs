//! The example config (`examples/support-agent.yaml`) loads, is what it says it is, and
//! validates against the published JSON Schema; a loaded config never prints a secret.

use std::path::PathBuf;

use intentgate_config::{HashKeySource, LoadedConfig, load_file_with, load_str, schema};
use intentgate_core::{CallStatus, Effect};
use serde_json::{Value, json};

fn example_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/support-agent.yaml")
}

fn example_text() -> String {
    std::fs::read_to_string(example_path()).expect("the example config exists")
}

/// Loads `text` with `env`, which provides the hash key unless it names one itself.
fn load(text: &str, env: &dyn Fn(&str) -> Option<String>) -> LoadedConfig {
    let env = |name: &str| {
        env(name).or_else(|| (name == "INTENTGATE_HASH_KEY").then(|| HASH_KEY.to_owned()))
    };
    load_str(text, "support-agent.yaml", &env).unwrap_or_else(|errors| panic!("{errors}"))
}

/// The hash key of the tests (the example reads it from `INTENTGATE_HASH_KEY`).
const HASH_KEY: &str = "0123456789abcdef0123456789abcdef-example-tests";

const SECRET: &str = "sk_live_51Hx9SECRETvalue";

#[test]
fn the_example_has_the_fifteen_tools_of_a_support_agent() {
    let loaded = load(&example_text(), &|_| None);
    let by_effect = |effect: Effect| -> Vec<&str> {
        loaded
            .tools
            .iter()
            .filter(|tool| tool.effect == effect)
            .map(|tool| tool.name.as_str())
            .collect()
    };
    assert_eq!(loaded.tools.len(), 15);
    assert_eq!(
        by_effect(Effect::Read),
        [
            "get_order",
            "check_refund_status",
            "get_customer",
            "list_customer_orders",
            "list_payment_methods",
            "get_product",
            "track_shipment",
            "get_ticket",
            "search_help_articles"
        ]
    );
    assert_eq!(
        by_effect(Effect::Idempotent),
        ["set_ticket_status", "update_address"]
    );
    assert_eq!(
        by_effect(Effect::SideEffect),
        [
            "refund_order",
            "charge_card",
            "send_email",
            "refund_order_sdk"
        ]
    );
    // The plain config and the definitions are in the same order.
    let names: Vec<&str> = loaded
        .config
        .tools
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    let definitions: Vec<&str> = loaded.tools.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, definitions);
}

#[test]
fn side_effects_are_keyed_by_intent_and_found_by_their_provider_key() {
    let loaded = load(&example_text(), &|_| None);
    let tool = |name: &str| loaded.tools.iter().find(|tool| tool.name == name).unwrap();
    let config = |name: &str| {
        loaded
            .config
            .tools
            .iter()
            .find(|tool| tool.name == name)
            .unwrap()
    };

    let key = |name: &str| tool(name).key.as_ref().map(|key| key.as_str().to_owned());
    assert_eq!(
        key("refund_order").as_deref(),
        Some("refund:{order_id}:{amount:.2}")
    );
    let charge = tool("charge_card").key.as_ref().unwrap();
    assert!(
        charge.uses_intent_id(),
        "a customer may be charged the same amount twice"
    );
    // The amount is not in the key: another amount under one intent id is a conflict.
    assert_eq!(charge.argument_names().collect::<Vec<_>>(), ["customer_id"]);
    assert_eq!(
        key("send_email").as_deref(),
        Some("email:{to}:{template_id}:{reference}")
    );

    for name in ["refund_order", "charge_card", "send_email"] {
        let definition = tool(name);
        let config = config(name);
        assert!(definition.owner.is_some(), "{name} has an owner");
        assert_eq!(definition.external_id_pointer, "/id");
        let lookup = config.lookup.as_ref().expect("a lookup");
        // Every record of the answer is judged by the provider key it carries and the
        // business fields it holds, never taken because it came first.
        assert_eq!(lookup.found, "/data");
        assert_eq!(lookup.key.as_deref(), Some("/idempotency_key"), "{name}");
        assert!(!lookup.match_fields.is_empty(), "{name}");
        let list = config.list.as_ref().expect("a list for reconciliation");
        assert_eq!(
            list.fields.idempotency_key.as_deref(),
            Some("/idempotency_key")
        );
        let call = config.call.as_ref().expect("a gateway tool's call");
        let body = call.body.as_ref().expect("a body");
        assert_eq!(body["metadata"]["intent_key"], "{intent_key}", "{name}");
        assert!(
            definition
                .published_description()
                .ends_with("Repeated calls return the original result."),
            "{name}"
        );
        assert_eq!(config.destructive, Some(true));
    }
    let refund = tool("refund_order");
    assert_eq!(refund.owner.as_deref(), Some("payments-team"));
    assert_eq!(refund.once_per, "order and amount");
    assert_eq!(refund.timeout.as_millis(), 10_000);
    assert!(refund.messages.0.contains_key(&CallStatus::PendingUnknown));
    assert!(!refund.retry_rejected);
    assert!(tool("charge_card").retry_rejected);
    assert!(
        tool("charge_card")
            .messages
            .0
            .contains_key(&CallStatus::Rejected)
    );

    // Reads and idempotent tools have no key; every schema is closed and says what it needs.
    for (definition, config) in loaded.tools.iter().zip(&loaded.config.tools) {
        assert_eq!(
            definition.key.is_some(),
            definition.effect == Effect::SideEffect
        );
        assert_eq!(
            config.input_schema["additionalProperties"],
            json!(false),
            "{}",
            config.name
        );
        assert!(
            config.input_schema["required"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        );
        assert!(config.line > 0);
    }
}

/// A tool's resend window: its upstream's key window less the margin, only where that
/// upstream honours idempotency keys and the sweeper could send the request again as it was.
#[test]
fn side_effects_on_an_upstream_that_honours_keys_get_a_resend_window() {
    use intentgate_config::limits::RESEND_WINDOW_MARGIN;
    use std::time::Duration;

    let window = |text: &str, name: &str| {
        load(text, &|_| None)
            .tools
            .into_iter()
            .find(|tool| tool.name == name)
            .unwrap()
            .resend_window
    };
    let text = example_text();
    let hours = |hours: u64| Some(Duration::from_secs(hours * 60 * 60) - RESEND_WINDOW_MARGIN);
    for tool in ["refund_order", "charge_card"] {
        // charge_card's key uses {intent_id}: the sweeper recovers it from the key.
        assert_eq!(window(&text, tool), hours(24), "{tool}");
    }
    // The ledger keeps send_email's recipient, subject and body as hashes only: the sweeper
    // could send only those.
    assert_eq!(window(&text, "send_email"), None);
    assert_eq!(window(&text, "update_address"), None, "not a side effect");
    assert_eq!(window(&text, "get_order"), None, "not a side effect");

    let shorter = text.replace("key_window_hours: 24", "key_window_hours: 6");
    assert_eq!(window(&shorter, "refund_order"), hours(6));
    // The margin leaves nothing of a one-hour window; the config is still accepted.
    let tiny = text.replace("key_window_hours: 24", "key_window_hours: 1");
    assert_eq!(window(&tiny, "refund_order"), None);
    let forgetful = text.replace(
        "honours_idempotency_keys: true",
        "honours_idempotency_keys: false",
    );
    assert_eq!(window(&forgetful, "refund_order"), None);

    // A request that needs the application's intent id while the key does not hold it
    // can't be sent again the same way: never re-sent.
    let needs_id = text.replacen(
        "metadata: {intent_key: \"{intent_key}\"}",
        "metadata: {intent_key: \"{intent_key}\", intent_id: \"{intent_id}\"}",
        1,
    );
    assert_ne!(needs_id, text);
    assert_eq!(window(&needs_id, "refund_order"), None);
}

#[test]
fn the_example_resolves_its_environment() {
    let text = example_text();
    let defaults = load(&text, &|_| None);
    let payments = &defaults.config.upstreams["payments"];
    assert_eq!(payments.base_url, "http://127.0.0.1:8090");
    assert_eq!(payments.headers["Authorization"], "Bearer sk_test_mock");
    assert!(payments.honours_idempotency_keys);

    let set = load(&text, &|name| match name {
        "INTENTGATE_MOCK_URL" => Some("http://10.0.0.7:9000".to_owned()),
        "PAYMENTS_API_KEY" => Some(SECRET.to_owned()),
        _ => None,
    });
    let payments = &set.config.upstreams["payments"];
    assert_eq!(payments.base_url, "http://10.0.0.7:9000");
    assert_eq!(
        payments.headers["Authorization"],
        format!("Bearer {SECRET}")
    );

    // And through the file, with the process environment (a random hash key when it has
    // none).
    let ephemeral = intentgate_core::HashKey::new(HASH_KEY.as_bytes()).unwrap();
    let loaded = load_file_with(
        &example_path(),
        &HashKeySource::EnvironmentOrEphemeral(ephemeral),
    )
    .unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(loaded.tools.len(), 15);
}

#[test]
fn debug_of_a_loaded_config_never_contains_a_secret() {
    // Secrets in an upstream header, in a base URL (user info and path) and in a tool's
    // lookup header.
    let text = example_text().replacen(
        "    lookup:\n      method: GET\n",
        "    lookup:\n      method: GET\n      headers: {X-Lookup-Token: \"${LOOKUP_TOKEN}\"}\n",
        1,
    );
    assert!(text.contains("LOOKUP_TOKEN"));
    let env = |name: &str| match name {
        "PAYMENTS_API_KEY" => Some(SECRET.to_owned()),
        "LOOKUP_TOKEN" => Some(format!("lookup-{SECRET}")),
        "INTENTGATE_HASH_KEY" => Some(format!("hash-key-{SECRET}-{SECRET}")),
        "INTENTGATE_MOCK_URL" => Some(format!(
            "https://agent:{SECRET}@mock.example.com/t/{SECRET}"
        )),
        _ => None,
    };
    let loaded = load(&text, &env);
    let refund = loaded
        .config
        .tools
        .iter()
        .find(|tool| tool.name == "refund_order")
        .unwrap();
    let lookup = refund.lookup.as_ref().unwrap();
    assert_eq!(
        lookup.headers["X-Lookup-Token"],
        format!("lookup-{SECRET}"),
        "resolved"
    );

    for debug in [
        format!("{loaded:?}"),
        format!("{loaded:#?}"),
        format!("{:?}", loaded.config),
        format!("{:?}", loaded.config.tools),
        format!("{:?}", loaded.config.gateway),
    ] {
        assert!(
            !debug.contains(SECRET),
            "a secret in Debug output:\n{debug}"
        );
    }
    let debug = format!("{:?}", loaded.config);
    assert!(debug.contains("\"Authorization\": <redacted>"), "{debug}");
    assert!(debug.contains("\"X-Lookup-Token\": <redacted>"), "{debug}");
    assert!(
        debug.contains("https://mock.example.com/<redacted>"),
        "{debug}"
    );
}

#[test]
fn the_example_keeps_an_emails_recipient_subject_and_body_as_hashes_only() {
    let loaded = load(&example_text(), &|_| None);
    let sensitive: Vec<(&str, Vec<String>)> = loaded
        .tools
        .iter()
        .filter(|tool| !tool.sensitive.is_empty())
        .map(|tool| {
            let names = tool.sensitive.iter().map(ToString::to_string).collect();
            (tool.name.as_str(), names)
        })
        .collect();
    assert_eq!(
        sensitive,
        [(
            "send_email",
            vec!["body".to_owned(), "subject".to_owned(), "to".to_owned()]
        )]
    );
    let email = loaded
        .tools
        .iter()
        .find(|tool| tool.name == "send_email")
        .unwrap();
    assert!(email.hash_key.is_some());
    assert_eq!(email.resend_window, None, "never re-sent from hashes");
    // Its reconciliation report names the order or ticket, not the address.
    let list = loaded.config.tools[13].list.as_ref().unwrap();
    assert_eq!(list.fields.subject, Some("/metadata/reference".into()));
}

#[test]
fn the_example_validates_against_the_published_schema() {
    let schema = schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["title"], "intentgate config");
    let tool = &schema["$defs"]["Tool"];
    assert_eq!(tool["additionalProperties"], json!(false));
    assert!(
        tool["required"]
            .as_array()
            .unwrap()
            .contains(&json!("effect")),
        "effect is required in the schema even though the loader reads it as optional"
    );
    assert!(
        tool["properties"]["timeout_ms"]["description"]
            .as_str()
            .unwrap()
            .contains("p99")
    );

    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema");
    let document: Value = serde_saphyr::from_str(&example_text()).expect("the example is YAML");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    // The schema refuses what the loader refuses: a missing effect, a misspelt field, a
    // message key that is not a status.
    let mut missing_effect = document.clone();
    missing_effect["tools"][0]
        .as_object_mut()
        .unwrap()
        .remove("effect");
    assert!(!validator.is_valid(&missing_effect));
    let mut typo = document.clone();
    typo["tools"][0]["timout_ms"] = json!(1000);
    assert!(!validator.is_valid(&typo));
    let mut message = document.clone();
    message["tools"][11]["messages"]["pending"] = json!("wait");
    assert!(!validator.is_valid(&message));

    // And what it refuses of executors: a gateway tool without a call, a client tool with
    // one, a client tool that is not a side effect, a key window on a gateway tool.
    let tools = document["tools"].as_array().unwrap();
    let client = tools
        .iter()
        .position(|tool| tool["executor"] == "client")
        .expect("the example has a client tool");
    let mut no_call = document.clone();
    no_call["tools"][0].as_object_mut().unwrap().remove("call");
    assert!(!validator.is_valid(&no_call), "a gateway tool needs a call");
    let mut client_call = document.clone();
    client_call["tools"][client]["call"] = document["tools"][11]["call"].clone();
    assert!(
        !validator.is_valid(&client_call),
        "a client tool has no call"
    );
    let mut client_list = document.clone();
    client_list["tools"][client]["list"] = document["tools"][11]["list"].clone();
    assert!(
        !validator.is_valid(&client_list),
        "a client tool has no list"
    );
    let mut client_read = document.clone();
    client_read["tools"][client]["effect"] = json!("read");
    assert!(
        !validator.is_valid(&client_read),
        "client tools are side effects"
    );
    let mut gateway_window = document.clone();
    gateway_window["tools"][11]["key_window_hours"] = json!(24);
    assert!(
        !validator.is_valid(&gateway_window),
        "a gateway tool's window is its upstream's"
    );
    let mut mcp = document;
    mcp["tools"][client]["mcp"] = json!("sometimes");
    assert!(!validator.is_valid(&mcp));
    mcp["tools"][client]["mcp"] = json!("listed");
    assert!(validator.is_valid(&mcp));
}

#[test]
fn the_client_executed_refund_has_no_requests_and_its_own_key_window() {
    use std::time::Duration;

    use intentgate_config::limits::RESEND_WINDOW_MARGIN;
    use intentgate_core::Executor;

    let loaded = load(&example_text(), &|_| None);
    let index = loaded
        .tools
        .iter()
        .position(|tool| tool.name == "refund_order_sdk")
        .expect("the example has a client-executed tool");
    let definition = &loaded.tools[index];
    let config = &loaded.config.tools[index];
    assert_eq!(definition.executor, Executor::Client);
    assert_eq!(config.executor, Executor::Client);
    assert!(!definition.listed_over_mcp, "hidden from MCP");
    assert!(!config.listed_over_mcp);
    assert_eq!(
        definition.key.as_ref().map(|key| key.as_str()),
        Some("refund:{order_id}:{amount:.2}"),
        "the same business intent as refund_order"
    );
    assert_eq!(
        definition.resend_window,
        Some(Duration::from_secs(24 * 60 * 60) - RESEND_WINDOW_MARGIN),
        "the tool's own key_window_hours, less the margin"
    );
    assert_eq!(config.key_window_hours, Some(24));
    assert!(config.call.is_none() && config.lookup.is_none() && config.list.is_none());
    assert!(
        !loaded.config.http_tools().contains_key("refund_order_sdk"),
        "the HTTP upstream gets no request for a tool it never sends"
    );
    assert!(loaded.config.http_tools().contains_key("refund_order"));
    // Every gateway tool is listed over MCP and executed by the gateway.
    for (definition, config) in loaded.tools.iter().zip(&loaded.config.tools) {
        if definition.name != "refund_order_sdk" {
            assert_eq!(
                definition.executor,
                Executor::Gateway,
                "{}",
                definition.name
            );
            assert!(definition.listed_over_mcp, "{}", definition.name);
            assert!(config.call.is_some(), "{}", definition.name);
        }
    }
}

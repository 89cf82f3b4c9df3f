//! The `auth:` section and `gateway.allowed_origins`: what a config may say about who calls
//! the gateway, and the errors (with their lines and fixes) for what it may not.

use intentgate_config::{AuthConfig, ConfigError, load_str};

const TOOLS: &str = r#"upstreams:
  payments: {base_url: "http://127.0.0.1:8090"}
tools:
  - name: get_order
    description: Look up an order.
    effect: read
    input_schema: {type: object, properties: {order_id: {type: string}}}
    call: {upstream: payments, method: GET, path: "/v1/orders/{order_id}"}
"#;

const DIGEST: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn config(auth: &str) -> String {
    format!("{auth}\n{TOOLS}")
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn errors(text: &str) -> Vec<ConfigError> {
    load_str(text, "agent.yaml", &no_env)
        .expect_err("the config must be refused")
        .errors
}

/// The one error of `text`, which must be on the line holding `needle` and mention `says`.
fn one_error_at(text: &str, needle: &str, says: &str) -> ConfigError {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    let error = errors.into_iter().next().unwrap();
    let line = text[..text.find(needle).unwrap()].matches('\n').count() as u64 + 1;
    assert_eq!(error.line, line, "{error}");
    assert!(
        error.message.contains(says) || error.fix.contains(says),
        "{error}"
    );
    error
}

#[test]
fn without_a_section_auth_is_none_and_none_can_be_written() {
    for text in [TOOLS.to_owned(), config("auth: none")] {
        let loaded = load_str(&text, "agent.yaml", &no_env).unwrap();
        assert_eq!(loaded.config.auth, AuthConfig::None);
    }
}

#[test]
fn every_method_loads() {
    let text = config(&format!(
        r#"auth:
  api_keys:
    - {{name: support-agent, sha256: {DIGEST}, tenant: acme, scopes: [call, "intents:read"], act_for: ["*"]}}
  jwt:
    jwks_url: https://auth.example.com/jwks.json
    issuer: https://auth.example.com/
    audience: [https://gateway.example.com/mcp]
    resource: https://gateway.example.com/mcp
  trusted_proxy: {{addresses: [10.0.0.0/8, "::1"], tenant_header: x-tenant}}"#
    ));
    let loaded = load_str(&text, "agent.yaml", &no_env).unwrap();
    let AuthConfig::Methods(methods) = loaded.config.auth else {
        panic!("methods expected");
    };
    assert_eq!(methods.api_keys[0].tenant, "acme");
    let jwt = methods.jwt.unwrap();
    assert_eq!(jwt.tenant_claim, "tenant");
    assert_eq!(jwt.algorithms, ["RS256", "ES256", "EdDSA"]);
    assert_eq!(
        methods.trusted_proxy.unwrap().subject_header,
        "x-intentgate-subject"
    );
    // A key's Debug never shows its digest.
    assert!(!format!("{:?}", methods.api_keys[0]).contains(DIGEST));
}

#[test]
fn a_key_is_refused_for_each_mistake_with_its_line_and_fix() {
    let key = |field: &str| {
        let fields = format!("name: agent, sha256: {DIGEST}, tenant: acme, scopes: [call]");
        let fields = match field.split_once('=') {
            Some((name, value)) => fields
                .split(", ")
                .map(|pair| {
                    if pair.starts_with(&format!("{name}:")) {
                        format!("{name}: {value}")
                    } else {
                        pair.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
            None => fields,
        };
        config(&format!("auth:\n  api_keys:\n    - {{{fields}}}"))
    };
    one_error_at(&key("sha256=the-key-itself"), "sha256", "never the key");
    one_error_at(&key("tenant=\"a b\""), "tenant", "tenant");
    one_error_at(&key("scopes=[write]"), "write", "`write` is not a scope");
    one_error_at(&key("scopes=[]"), "scopes", "no scope");
    let twice = config(&format!(
        "auth:\n  api_keys:\n    - {{name: a, sha256: {DIGEST}, tenant: acme, scopes: [call]}}\n    - {{name: b, sha256: {DIGEST}, tenant: globex, scopes: [call]}}"
    ));
    one_error_at(&twice, "name: b", "earlier key");
}

#[test]
fn a_jwt_section_is_refused_for_each_mistake() {
    let jwt = |extra: &str| {
        config(&format!(
            "auth:\n  jwt:\n    issuer: https://id.example.com/\n    audience: [gw]\n{extra}"
        ))
    };
    // Reported at the mapping of `jwt`, which starts with its first field.
    one_error_at(
        &jwt(""),
        "issuer",
        "exactly one of `jwks_url` and `jwks_file`",
    );
    one_error_at(
        &jwt("    jwks_url: http://id.example.com/jwks\n"),
        "jwks_url",
        "https",
    );
    one_error_at(
        &jwt("    jwks_file: k.json\n    algorithms: [HS256]\n"),
        "HS256",
        "HS256",
    );
    one_error_at(
        &jwt("    jwks_file: k.json\n    refresh_seconds: 1\n"),
        "refresh_seconds",
        "refresh_seconds",
    );
    // http is fine on loopback, for an identity provider in development.
    let local = jwt("    jwks_url: http://127.0.0.1:9000/jwks\n");
    assert!(load_str(&local, "agent.yaml", &no_env).is_ok());
}

#[test]
fn a_proxy_section_and_origins_are_checked() {
    let proxy =
        config("auth:\n  trusted_proxy: {addresses: [proxy.internal], tenant_header: x-tenant}");
    one_error_at(&proxy, "trusted_proxy", "not an IP address");
    let header =
        config("auth:\n  trusted_proxy: {addresses: [10.0.0.1], tenant_header: \"x tenant\"}");
    one_error_at(&header, "trusted_proxy", "not a header name");
    one_error_at(&config("auth: {}"), "auth", "names no method");
    let errors = errors(&config("auth: nobody"));
    assert!(errors[0].message.contains("none"), "{:?}", errors[0]);
    let origins =
        format!("gateway:\n  allowed_origins: [\"https://console.example.com/app\"]\n{TOOLS}");
    one_error_at(&origins, "allowed_origins", "not a web origin");
    let good = format!("gateway:\n  allowed_origins: [\"https://console.example.com\"]\n{TOOLS}");
    assert!(load_str(&good, "agent.yaml", &no_env).is_ok());
}

#[test]
fn trusted_proxies_are_addresses_or_networks() {
    let bad = format!("gateway:\n  trusted_proxies: [10.0.0.0/8, proxy.internal]\n{TOOLS}");
    one_error_at(&bad, "trusted_proxies", "not an IP address or network");
    let good = format!("gateway:\n  trusted_proxies: [10.0.0.0/8, \"::1\", 192.0.2.7]\n{TOOLS}");
    let loaded = load_str(&good, "agent.yaml", &no_env).unwrap();
    assert_eq!(loaded.config.gateway.trusted_proxies.len(), 3);
}

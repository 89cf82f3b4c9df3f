//! The gateway attacked the way a hostile or careless caller would: the real `intentgate
//! serve` on a loopback port, in front of the real mock provider, with requests that once
//! moved money they should not have. Each test names what broke and shows that nothing
//! reaches the provider now.

mod support;

use std::process::Stdio;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Stack, example_config, get_json, intentgate, with_api_keys, with_setting};

/// A key for tenant `north`, allowed to call and to read its intents.
const KEY_NORTH: &str = "igk_north_0123456789abcdef0123456789abcdef";
/// A key for tenant `south`, allowed only to call.
const KEY_SOUTH: &str = "igk_south_0123456789abcdef0123456789abcdef";
/// An operator's key with `admin`.
const KEY_ADMIN: &str = "igk_admin_0123456789abcdef0123456789abcdef";

/// The example config (short tool timeouts) in front of the mock provider, with `edit`
/// applied to its text.
fn stack(edit: impl Fn(String) -> String) -> Stack {
    support::stack(|text| edit(with_setting(&text, "timeout_ms", 2000)))
}

/// Three keys: `north` (call, intents:read), `south` (call), `ops` (admin, tenant north).
fn with_keys(text: String) -> String {
    with_api_keys(
        &text,
        &[
            ("agent-north", KEY_NORTH, "north", "call, \"intents:read\""),
            ("agent-south", KEY_SOUTH, "south", "call"),
            ("ops", KEY_ADMIN, "north", "admin"),
        ],
    )
}

fn refund(order: &str) -> Value {
    json!({"arguments": {"order_id": order, "amount": 7, "reason": "requested_by_customer"}})
}

impl Stack {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.gateway.url)
    }

    /// A refund call with `key` (if any) and extra headers; the status and the body.
    async fn refund(
        &self,
        order: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let mut request = self
            .client
            .post(self.url("/v1/tools/refund_order/call"))
            .json(&refund(order));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Refunds the provider made, for `order`.
    async fn refunds(&self, order: &str) -> u64 {
        let effects = get_json(&self.client, format!("{}/admin/effects", self.mock.url)).await;
        effects["by_order"][order].as_u64().unwrap_or(0)
    }

    /// Every effect the provider made.
    async fn effects_total(&self) -> u64 {
        let effects = get_json(&self.client, format!("{}/admin/effects", self.mock.url)).await;
        effects["total"].as_u64().unwrap()
    }
}

/// Regression: the tenant was whatever the `Intentgate-Tenant` header said, so `a`, `b`,
/// `DEFAULT` and `default` made four refunds of one order. Now the tenant is the key's: a
/// key naming another tenant is refused before anything is recorded or sent.
#[tokio::test]
async fn the_tenant_comes_from_the_credential_not_from_a_header() {
    let stack = stack(with_keys);
    let (status, body) = stack.refund("t-1", Some(KEY_NORTH), &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "done");
    for tenant in ["south", "a", "DEFAULT", "default", "North"] {
        let (status, body) = stack
            .refund("t-1", Some(KEY_NORTH), &[("Intentgate-Tenant", tenant)])
            .await;
        assert_eq!(status, 400, "{tenant}: {body}");
        assert_eq!(body["type"], "urn:intentgate:problem:tenant-not-allowed");
        let detail = body["detail"].as_str().unwrap();
        // Another tenant is refused naming the credential's; a name with uppercase letters
        // is no tenant name at all (tenant names are lowercase) and is refused saying so.
        let told = if tenant.bytes().any(|b| b.is_ascii_uppercase()) {
            detail.contains("uppercase")
        } else {
            detail.contains("north")
        };
        assert!(told, "{tenant}: {body}");
    }
    // Naming its own tenant is fine, and is the same intent.
    let (_, body) = stack
        .refund("t-1", Some(KEY_NORTH), &[("Intentgate-Tenant", "north")])
        .await;
    assert_eq!(body["status"], "already_done");
    assert_eq!(
        stack.refunds("t-1").await,
        1,
        "one refund whatever the headers said"
    );
    // Two credentials of two tenants are two intents because the credentials say so.
    let (_, body) = stack.refund("t-1", Some(KEY_SOUTH), &[]).await;
    assert_eq!(body["status"], "done");
    assert_eq!(stack.refunds("t-1").await, 2);
}

/// No credential, a wrong one, or a malformed header: 401 with a challenge, nothing sent.
#[tokio::test]
async fn callers_without_a_valid_credential_get_401() {
    let stack = stack(with_keys);
    for (key, header) in [
        (None, None),
        (Some("igk_not_a_configured_key"), None),
        (None, Some("Basic bm9ydGg6c2VjcmV0")),
        (None, Some("Bearer")),
    ] {
        let mut request = stack
            .client
            .post(stack.url("/v1/tools/refund_order/call"))
            .json(&refund("t-401"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(header) = header {
            request = request.header("Authorization", header);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{key:?} {header:?}");
        assert!(
            response.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer")
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "urn:intentgate:problem:unauthenticated");
    }
    // The tool list and MCP need a credential too; health and metrics don't.
    let tools = stack
        .client
        .get(stack.url("/v1/tools"))
        .send()
        .await
        .unwrap();
    assert_eq!(tools.status(), 401);
    let mcp = stack
        .client
        .post(stack.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 401);
    for open in ["/healthz", "/metrics"] {
        let response = stack.client.get(stack.url(open)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{open}");
    }
    let tools = stack
        .client
        .get(stack.url("/v1/tools"))
        .bearer_auth(KEY_SOUTH)
        .send()
        .await
        .unwrap();
    assert_eq!(tools.status(), 200);
    assert_eq!(stack.effects_total().await, 0);
}

/// Regression: `GET /v1/intents/{tool}/{key}` needed no credential and `?tenant=` picked any
/// tenant, so anyone read anyone's arguments and provider results. Now an intent is read by
/// its own tenant with `intents:read`, and `?tenant=` needs `admin`.
#[tokio::test]
async fn intents_are_read_only_by_their_tenant_with_intents_read() {
    let stack = stack(with_keys);
    assert_eq!(
        stack.refund("t-read", Some(KEY_NORTH), &[]).await.1["status"],
        "done"
    );
    let path = "/v1/intents/refund_order/refund:t-read:7.00";
    let read = |key: Option<&'static str>, query: &'static str| {
        let mut request = stack.client.get(stack.url(&format!("{path}{query}")));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = read(Some(KEY_NORTH), "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tenant"], "north");
    assert_eq!(read(None, "").await.0, 401);
    // south may call but not read intents; and north's intent is not south's anyway.
    let (status, body) = read(Some(KEY_SOUTH), "").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["type"], "urn:intentgate:problem:missing-scope");
    let (status, body) = read(Some(KEY_NORTH), "?tenant=south").await;
    assert_eq!(status, 403, "{body}");
    // An operator with `admin` reads any tenant's.
    let (status, body) = read(Some(KEY_ADMIN), "?tenant=north").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = read(Some(KEY_ADMIN), "?tenant=south").await;
    assert_eq!(status, 404);
    let (status, _) = read(Some(KEY_ADMIN), "?tenant=a%20b").await;
    assert_eq!(status, 400);
    let (status, _) = read(Some(KEY_ADMIN), "?tenant_id=north").await;
    assert_eq!(status, 400, "an unknown parameter is refused, not ignored");
}

/// Regression: a web page could refund through a gateway on loopback: a form posting
/// `text/plain` or form-encoded data (no preflight), any `Origin`, and a DNS-rebinding host
/// name were all accepted. Each is refused now, on every route, with nothing executed.
#[tokio::test]
async fn browsers_cannot_act_through_a_loopback_gateway() {
    let stack = stack(|text| text);
    let body = refund("t-browser").to_string();
    let call = stack.url("/v1/tools/refund_order/call");
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut request = stack.client.post(&call).body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header("Content-Type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 415, "{content_type:?}");
        let problem: Value = response.json().await.unwrap();
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("application/json")
        );
    }
    for path in [
        "/v1/tools/refund_order/call",
        "/mcp",
        "/healthz",
        "/v1/tools",
        "/v1/admin/flags",
    ] {
        for (header, value, kind) in [
            ("Origin", "https://evil.example", "origin-not-allowed"),
            ("Origin", "null", "origin-not-allowed"),
            ("Host", "rebind.evil.example", "host-not-allowed"),
            ("Host", "localhost.evil.example:8080", "host-not-allowed"),
        ] {
            let request = if path == "/healthz" || path == "/v1/tools" || path == "/v1/admin/flags"
            {
                stack.client.get(stack.url(path))
            } else {
                stack
                    .client
                    .post(stack.url(path))
                    .header("Accept", "application/json, text/event-stream")
                    .json(&refund("t-browser"))
            };
            let response = request.header(header, value).send().await.unwrap();
            assert_eq!(response.status(), 403, "{path} {header}: {value}");
            let problem: Value = response.json().await.unwrap();
            assert_eq!(
                problem["type"],
                format!("urn:intentgate:problem:{kind}"),
                "{path}"
            );
        }
    }
    // The same call as a program sends it works.
    let (status, outcome) = stack.refund("t-browser", None, &[]).await;
    assert_eq!(
        (status.as_u16(), outcome["status"].as_str()),
        (200, Some("done"))
    );
    assert_eq!(
        stack.refunds("t-browser").await,
        1,
        "only the program's call refunded"
    );
}

/// An origin the operator lists (a console of its own) is accepted.
#[tokio::test]
async fn listed_origins_are_accepted() {
    let stack = stack(|text| {
        text.replace(
            "  tenant: default\n",
            "  tenant: default\n  allowed_origins: [\"https://console.example.com\"]\n",
        )
    });
    let (status, body) = stack
        .refund(
            "t-origin",
            None,
            &[("Origin", "https://console.example.com")],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = stack
        .refund(
            "t-origin",
            None,
            &[("Origin", "https://console.example.com.evil.example")],
        )
        .await;
    assert_eq!(status, 403);
}

/// Regression: an empty or over-long tenant was answered 503 "ledger unavailable, try
/// again" (a CHECK constraint failed), logged as an outage. It is the caller's mistake: 400.
#[tokio::test]
async fn a_malformed_tenant_is_a_400_not_a_ledger_outage() {
    let stack = stack(|text| text);
    let long = "t".repeat(129);
    for tenant in ["", long.as_str(), "evil status=admin_override", "a/b"] {
        let (status, body) = stack
            .refund("t-tenant", None, &[("Intentgate-Tenant", tenant)])
            .await;
        assert_eq!(status, 400, "{tenant:?}: {body}");
    }
    assert_eq!(stack.effects_total().await, 0);
}

/// `auth: none` serves anyone who reaches the port as the one tenant, so the gateway
/// refuses to start with it on an address other hosts can reach.
#[test]
fn auth_none_refuses_to_listen_beyond_loopback() {
    let folder = tempfile::tempdir().unwrap();
    let config = example_config(folder.path(), |text| text);
    let output = intentgate()
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ])
        .args(["--ledger", folder.path().join("l.db").to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("auth: none"), "{stderr}");
    assert!(stderr.contains("loopback"), "{stderr}");
}

/// `intentgate auth new-key` prints a key and a config entry with only its digest; the
/// entry works as printed.
#[tokio::test]
async fn new_keys_work_as_printed() {
    let output = intentgate()
        .args([
            "auth",
            "new-key",
            "--name",
            "support-agent",
            "--tenant",
            "acme",
            "--scopes",
            "call,intents:read",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    let key = printed
        .lines()
        .find_map(|line| line.strip_prefix("key: "))
        .unwrap()
        .to_owned();
    assert!(key.starts_with("igk_") && key.len() == 68, "{key}");
    let entry = &printed[printed.find("auth:").unwrap()..];
    assert!(
        !entry.contains(&key),
        "the config entry holds the digest, never the key"
    );
    let stack = stack(|text| text.replace("\nauth: none\n", &format!("\n{entry}")));
    let (status, body) = stack.refund("t-new-key", Some(&key), &[]).await;
    assert_eq!(
        (status.as_u16(), body["status"].as_str()),
        (200, Some("done")),
        "{body}"
    );
    let intent = stack
        .client
        .get(stack.url("/v1/intents/refund_order/refund:t-new-key:7.00"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let intent: Value = intent.json().await.unwrap();
    assert_eq!(intent["tenant"], "acme");
}

/// A fronting proxy's identity headers are believed from its address only: the same headers
/// from another address are a caller's claim about itself, and get 401.
#[tokio::test]
async fn proxy_headers_are_believed_only_from_the_proxy() {
    let stack = stack(|text| {
        text.replace(
            "\nauth: none\n",
            "\nauth:\n  trusted_proxy:\n    addresses: [127.0.0.1]\n    tenant_header: x-tenant\n    subject_header: x-user\n",
        )
    });
    let (status, body) = stack
        .refund("t-proxy", None, &[("x-tenant", "east"), ("x-user", "ana")])
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "done");
    // The same headers from 127.0.0.2, which is not the proxy.
    let elsewhere = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let response = elsewhere
        .post(stack.url("/v1/tools/refund_order/call"))
        .header("x-tenant", "west")
        .json(&refund("t-proxy"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(stack.refunds("t-proxy").await, 1);
}

/// A key with the `admin` scope reaches the admin API without the admin token; a valid key
/// without it is a 403 (a credential, not a wrong token).
#[tokio::test]
async fn the_admin_scope_opens_the_admin_api() {
    let stack = stack(with_keys);
    let flags = |key: &'static str| {
        let request = stack
            .client
            .get(stack.url("/v1/admin/flags"))
            .bearer_auth(key);
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(flags(KEY_ADMIN).await, 200);
    assert_eq!(flags(KEY_NORTH).await, 403);
    assert_eq!(flags(KEY_SOUTH).await, 403);
    assert_eq!(
        flags("igk_nobody_0123456789abcdef0123456789abcd").await,
        401
    );
}

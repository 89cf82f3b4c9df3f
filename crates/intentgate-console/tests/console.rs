//! The console's sign-in, sessions, CSRF checks and headers through a real server on a
//! loopback port (the HTTP API's edge, the admin API and the console, as `intentgate serve`
//! mounts them), over a real SQLite ledger, with reqwest playing the browser. What a page
//! does with them is tested in a real browser (`tests/browser`).

use std::sync::Arc;

use intentgate_admin::{Admin, AdminOptions, FailureLimit};
use intentgate_console::{CSRF_HEADER, Console, SESSION_COOKIE};
use intentgate_core::{Scope, Scopes, Tenant};
use intentgate_ledger::Ledger;
use intentgate_mock::FaultPlan;
use intentgate_server::auth::{ActFor, ApiKey};
use intentgate_server::{AuthOptions, Authenticator, ServerOptions};
use intentgate_test_support::gate::Harness;
use intentgate_test_support::http::client;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

const TOKEN: &str = "console-test-admin-token-0123456789abcdef";
const ADMIN_KEY: &str = "igk_admin_key_for_the_console_tests_0123";
const CALL_KEY: &str = "igk_call_key_for_the_console_tests_01234";
/// A call key of another tenant, `b`, on the gateway that also has the admin token.
const TENANT_B_KEY: &str = "igk_tenant_b_call_key_for_the_console_01";
const REFUND_FLAG: &str = "/v1/admin/flags/refund_order";

/// What the test servers describe as the admin credentials they accept.
const CREDENTIALS: &[u8] = b"the credentials of this test";

struct Server {
    base: String,
    client: reqwest::Client,
    harness: Harness,
    /// The ledger that keeps the sessions (the harness's, or another server's).
    ledger: Arc<dyn Ledger>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// How the server authenticates: the admin token with `auth: none`, or API keys and no token.
enum Setup {
    Token,
    ApiKeys,
    AdminOff,
    /// API keys (tenant `b`'s call key among them) and the admin token, as `intentgate serve`
    /// runs with both.
    TokenAndApiKeys,
}

async fn start(setup: Setup) -> Server {
    start_on(setup, None, CREDENTIALS).await
}

/// A server whose admin API and sessions use `shared` (another server's ledger: a replica of
/// it) when given, and that accepts the admin credentials `credentials` describes.
async fn start_on(setup: Setup, shared: Option<Arc<dyn Ledger>>, credentials: &[u8]) -> Server {
    let harness = Harness::new(FaultPlan::none());
    let ledger = shared.unwrap_or_else(|| harness.ledger.clone());
    let (token, admin_scope, auth) = match setup {
        Setup::Token => (Some(TOKEN.to_owned()), false, AuthOptions::default()),
        Setup::AdminOff => (None, false, AuthOptions::default()),
        Setup::ApiKeys => (
            None,
            true,
            AuthOptions::Methods {
                api_keys: vec![
                    api_key("ops-alice", ADMIN_KEY, Scope::Admin),
                    api_key("support-agent", CALL_KEY, Scope::Call),
                ],
                jwt: None,
                trusted_proxy: None,
            },
        ),
        Setup::TokenAndApiKeys => (
            Some(TOKEN.to_owned()),
            true,
            AuthOptions::Methods {
                api_keys: vec![
                    api_key("ops-alice", ADMIN_KEY, Scope::Admin),
                    ApiKey {
                        tenant: Tenant::parse("b").unwrap(),
                        ..api_key("tenant-b-agent", TENANT_B_KEY, Scope::Call)
                    },
                ],
                jwt: None,
                trusted_proxy: None,
            },
        ),
    };
    let admin = Admin::new(
        ledger.clone(),
        AdminOptions {
            token,
            tools: vec!["refund_order".to_owned(), "get_order".to_owned()],
            actor_default: "admin-api".to_owned(),
            failure_limit: FailureLimit::default(),
            admin_scope,
            trusted_proxies: Vec::new(),
        },
        None,
        None,
    );
    let console = Console::new(admin, ledger.clone(), credentials);
    let options = ServerOptions {
        authenticator: Arc::new(Authenticator::new(auth).unwrap()),
        ..ServerOptions::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let gate = harness.gate.clone();
    let routes = console.admin_router().merge(console.router());
    tokio::spawn(async move {
        intentgate_server::run_with(listener, gate, options, Some(routes), async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    Server {
        base,
        client: client(None),
        harness,
        ledger,
        stop: Some(stop),
    }
}

fn api_key(name: &str, key: &str, scope: Scope) -> ApiKey {
    ApiKey {
        name: name.to_owned(),
        digest: Sha256::digest(key.as_bytes()).into(),
        tenant: Tenant::parse("default").unwrap(),
        scopes: Scopes::from_iter([scope]),
        act_for: ActFor::Own,
    }
}

/// A signed-in browser: the session cookie and the page's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

impl Server {
    fn origin(&self) -> &str {
        &self.base
    }

    /// `POST /console/session` as the sign-in form's script sends it.
    async fn sign_in_with(&self, credential: &str) -> reqwest::Response {
        self.client
            .post(format!("{}/console/session", self.base))
            .header("origin", self.origin())
            .header("sec-fetch-site", "same-origin")
            .bearer_auth(credential)
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    }

    async fn sign_in(&self, credential: &str) -> Browser {
        let response = self.sign_in_with(credential).await;
        assert_eq!(response.status(), StatusCode::OK);
        let set_cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .to_owned();
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        let page = self.page("/console/", Some(&cookie)).await;
        Browser {
            cookie,
            csrf: meta(&page, "intentgate-csrf")
                .expect("the console's page carries the CSRF token"),
        }
    }

    /// `GET {path}`, with the session cookie when given.
    async fn get(&self, path: &str, cookie: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        request.send().await.unwrap()
    }

    async fn page(&self, path: &str, cookie: Option<&str>) -> String {
        let response = self.get(path, cookie).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    /// `PUT` of the refund tool's flag with the browser's cookie and these extra headers.
    async fn switch_off(&self, browser: &Browser, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut map = HeaderMap::new();
        map.insert("cookie", HeaderValue::from_str(&browser.cookie).unwrap());
        for (name, value) in headers {
            map.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        self.client
            .put(format!("{}{REFUND_FLAG}", self.base))
            .headers(map)
            .json(
                &json!({"enabled": false, "reason": "INC-1: duplicates", "actor": "someone-else"}),
            )
            .send()
            .await
            .unwrap()
    }

    /// Whether the ledger has `refund_order` on (no stored flag, or an enabled one).
    async fn refund_enabled(&self) -> bool {
        let flags = self.harness.ledger.tool_flags().await.unwrap();
        !flags
            .iter()
            .any(|flag| flag.tool == "refund_order" && !flag.enabled)
    }
}

/// The `content` of `<meta name="{name}" content="...">`.
fn meta(page: &str, name: &str) -> Option<String> {
    let start = page.find(&format!("<meta name=\"{name}\" content=\""))?;
    let rest = &page[start..];
    let value = rest.split("content=\"").nth(1)?.split('"').next()?;
    Some(value.to_owned())
}

fn is_sign_in_form(page: &str) -> bool {
    page.contains("id=\"sign-in\"") && page.contains("<label for=\"credential\">")
}

#[tokio::test]
async fn a_page_without_a_session_is_the_sign_in_form_with_strict_headers() {
    let server = start(Setup::Token).await;
    for path in [
        "/console",
        "/console/",
        "/console/flags",
        "/console/intents/7",
    ] {
        let response = server.get(path, None).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let headers = response.headers().clone();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["referrer-policy"], "no-referrer");
        assert_eq!(headers["cache-control"], "no-store");
        assert_eq!(headers["x-frame-options"], "DENY");
        let page = response.text().await.unwrap();
        assert!(is_sign_in_form(&page), "{path}");
        assert!(meta(&page, "intentgate-csrf").is_none());
    }
    // A forged cookie is no session.
    let forged = format!("{SESSION_COOKIE}={}", "ab".repeat(32));
    assert!(is_sign_in_form(
        &server.page("/console/", Some(&forged)).await
    ));
    let admin = server.get("/v1/admin/flags", Some(&forged)).await;
    assert_eq!(admin.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_assets_are_embedded_and_served_with_their_types() {
    let server = start(Setup::Token).await;
    for (name, content_type) in [
        ("console.js", "text/javascript; charset=utf-8"),
        ("sign-in.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ] {
        let response = server.get(&format!("/console/assets/{name}"), None).await;
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        assert_eq!(response.headers()["content-type"], content_type, "{name}");
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        assert!(!response.bytes().await.unwrap().is_empty());
    }
    let missing = server.get("/console/assets/missing.js", None).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn signing_in_sets_a_secure_http_only_strict_host_cookie_and_the_page_gets_a_csrf_token() {
    let server = start(Setup::Token).await;
    let response = server.sign_in_with(TOKEN).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.starts_with(&format!("{SESSION_COOKIE}=")),
        "{cookie}"
    );
    for attribute in [
        "Path=/",
        "Secure",
        "HttpOnly",
        "SameSite=Strict",
        "Max-Age=",
    ] {
        assert!(cookie.contains(attribute), "{attribute} in {cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["actor"], "console:admin-token");
    let browser = server.sign_in(TOKEN).await;
    assert_eq!(browser.csrf.len(), 64);
    let page = server.page("/console/flags", Some(&browser.cookie)).await;
    assert!(!is_sign_in_form(&page));
    assert_eq!(
        meta(&page, "intentgate-actor").as_deref(),
        Some("console:admin-token")
    );
    // The token itself is in no answer.
    assert!(!page.contains(TOKEN));
}

#[tokio::test]
async fn sign_in_is_refused_without_the_credential_or_from_another_site() {
    let server = start(Setup::Token).await;
    let url = format!("{}/console/session", server.base);
    let wrong = server
        .sign_in_with("not-the-admin-token-0123456789abcdef")
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get("set-cookie").is_none());
    // No credential at all.
    let none = server
        .client
        .post(&url)
        .header("origin", server.origin())
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    // A page of another site (the edge), no Origin at all, a cross-site fetch, a form post.
    // What, Origin, Sec-Fetch-Site, content type, the answer.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
        StatusCode,
    );
    let cases: [Case; 4] = [
        (
            "another origin",
            Some("http://evil.example"),
            None,
            "application/json",
            StatusCode::FORBIDDEN,
        ),
        (
            "no origin",
            None,
            None,
            "application/json",
            StatusCode::FORBIDDEN,
        ),
        (
            "a cross-site fetch",
            Some(server.origin()),
            Some("cross-site"),
            "application/json",
            StatusCode::FORBIDDEN,
        ),
        (
            "a form post",
            Some(server.origin()),
            None,
            "application/x-www-form-urlencoded",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
    ];
    for (what, origin, site, content_type, status) in cases {
        let mut request = server
            .client
            .post(&url)
            .bearer_auth(TOKEN)
            .header("content-type", content_type)
            .body("{}");
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), status, "{what}");
        assert!(response.headers().get("set-cookie").is_none(), "{what}");
    }
}

#[tokio::test]
async fn a_change_with_the_session_cookie_needs_the_csrf_token_and_the_consoles_origin() {
    let server = start(Setup::Token).await;
    let browser = server.sign_in(TOKEN).await;
    // Reads need only the cookie, and are never cached.
    let flags = server.get("/v1/admin/flags", Some(&browser.cookie)).await;
    assert_eq!(flags.status(), StatusCode::OK);
    assert_eq!(flags.headers()["cache-control"], "no-store");
    let origin = server.origin().to_owned();
    let wrong_token = "0".repeat(64);
    // What, the headers besides the cookie, the answer.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, StatusCode);
    let refused: [Case; 5] = [
        ("no token", vec![("origin", &origin)], StatusCode::FORBIDDEN),
        (
            "a wrong token",
            vec![("origin", &origin), (CSRF_HEADER, &wrong_token)],
            StatusCode::FORBIDDEN,
        ),
        (
            "no origin",
            vec![(CSRF_HEADER, &browser.csrf)],
            StatusCode::FORBIDDEN,
        ),
        (
            "another origin",
            vec![
                ("origin", "http://evil.example"),
                (CSRF_HEADER, &browser.csrf),
            ],
            StatusCode::FORBIDDEN,
        ),
        (
            "a cross-site fetch",
            vec![
                ("origin", &origin),
                (CSRF_HEADER, &browser.csrf),
                ("sec-fetch-site", "cross-site"),
            ],
            StatusCode::FORBIDDEN,
        ),
    ];
    for (what, headers, status) in refused {
        let response = server.switch_off(&browser, &headers).await;
        assert_eq!(response.status(), status, "{what}");
        assert!(
            server.refund_enabled().await,
            "{what} switched the tool off"
        );
    }
    let accepted = server
        .switch_off(
            &browser,
            &[
                ("origin", &origin),
                (CSRF_HEADER, &browser.csrf),
                ("sec-fetch-site", "same-origin"),
            ],
        )
        .await;
    assert_eq!(accepted.status(), StatusCode::OK);
    assert!(!server.refund_enabled().await);
    let flag: Value = accepted.json().await.unwrap();
    // Recorded under who signed in, whatever the body named.
    assert_eq!(flag["actor"], "console:admin-token");
}

#[tokio::test]
async fn signing_out_needs_the_csrf_token_and_ends_the_session() {
    let server = start(Setup::Token).await;
    let browser = server.sign_in(TOKEN).await;
    let url = format!("{}/console/session", server.base);
    let forged = server
        .client
        .delete(&url)
        .header("cookie", &browser.cookie)
        .header("origin", server.origin())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert!(!is_sign_in_form(
        &server.page("/console/", Some(&browser.cookie)).await
    ));
    let signed_out = server
        .client
        .delete(&url)
        .header("cookie", &browser.cookie)
        .header("origin", server.origin())
        .header(CSRF_HEADER, &browser.csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::NO_CONTENT);
    let cleared = signed_out.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    assert!(is_sign_in_form(
        &server.page("/console/", Some(&browser.cookie)).await
    ));
    let admin = server.get("/v1/admin/flags", Some(&browser.cookie)).await;
    assert_eq!(admin.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_admin_scoped_api_key_signs_in_under_its_name_and_a_call_scoped_key_does_not() {
    let server = start(Setup::ApiKeys).await;
    let browser = server.sign_in(ADMIN_KEY).await;
    let page = server.page("/console/", Some(&browser.cookie)).await;
    assert_eq!(
        meta(&page, "intentgate-actor").as_deref(),
        Some("console:ops-alice")
    );
    // A valid key without the `admin` scope: 403, not a wrong token.
    let refused = server.sign_in_with(CALL_KEY).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(refused.headers().get("set-cookie").is_none());
    // The session's changes carry the key holder's name.
    let origin = server.origin().to_owned();
    let accepted = server
        .switch_off(
            &browser,
            &[("origin", &origin), (CSRF_HEADER, &browser.csrf)],
        )
        .await;
    assert_eq!(accepted.status(), StatusCode::OK);
    let flag: Value = accepted.json().await.unwrap();
    assert_eq!(flag["actor"], "console:ops-alice");
}

#[tokio::test]
async fn with_the_admin_api_off_nobody_signs_in_and_the_answer_says_how_to_turn_it_on() {
    let server = start(Setup::AdminOff).await;
    let response = server.sign_in_with(TOKEN).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.headers().get("set-cookie").is_none());
    let problem: Value = response.json().await.unwrap();
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("INTENTGATE_ADMIN_TOKEN"),
        "{problem}"
    );
}

/// Regression: any bearer that was not the admin token counted as a wrong admin token, a
/// tenant's valid call key included. Tenant B's key sent to `/v1/admin/flags` six times got
/// 401 five times and then 429, and for the rest of the minute the operator's right token got
/// 429 too, the kill switch included. Now a valid credential without the `admin` scope is a
/// 403 that is never counted as a guess.
#[tokio::test]
async fn a_tenants_call_key_at_the_admin_api_is_403_and_never_locks_the_operator_out() {
    let server = start(Setup::TokenAndApiKeys).await;
    let flags = format!("{}/v1/admin/flags", server.base);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let response = server
            .client
            .get(&flags)
            .bearer_auth(TENANT_B_KEY)
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == StatusCode::FORBIDDEN {
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let problem: Value = response.json().await.unwrap();
            assert_eq!(problem["type"], "urn:intentgate:problem:missing-scope");
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains("valid"), "{detail}");
            assert!(detail.contains("`admin` scope"), "{detail}");
        }
    }
    let operator = server
        .client
        .get(&flags)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    let switch_off = server
        .client
        .put(format!("{}{REFUND_FLAG}", server.base))
        .bearer_auth(TOKEN)
        .json(&json!({"enabled": false, "reason": "INC-3: duplicate refunds"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    eprintln!(
        "tenant B's call key six times: {statuses:?}; then the operator's token: {operator}; \
         switching refund_order off: {switch_off}"
    );
    assert_eq!(statuses, [403; 6]);
    assert_eq!(operator, 200);
    assert_eq!(switch_off, 200);
    assert!(!server.refund_enabled().await);
    // The console's sign-in judges the key the same way, and the admin key still signs in.
    let refused = server.sign_in_with(TENANT_B_KEY).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(refused.headers().get("set-cookie").is_none());
    server.sign_in(ADMIN_KEY).await;
    server.sign_in(TOKEN).await;
}

#[tokio::test]
async fn wrong_tokens_at_sign_in_count_towards_the_admin_apis_limit() {
    let server = start(Setup::Token).await;
    let limit = FailureLimit::default().failures;
    for _ in 0..limit {
        let wrong = server
            .sign_in_with("not-the-admin-token-0123456789abcdef")
            .await;
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    }
    // Past the limit wrong tokens are refused for a while, at sign-in and at the API; the
    // right token still signs in (before, it got 429 too: anyone could lock the operator out).
    let refused = server
        .sign_in_with("not-the-admin-token-0123456789abcdef")
        .await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().get("set-cookie").is_none());
    let api = server
        .client
        .get(format!("{}/v1/admin/flags", server.base))
        .bearer_auth("not-the-admin-token-0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS);
    server.sign_in(TOKEN).await;
}

#[tokio::test]
async fn a_request_with_a_bearer_credential_is_judged_by_it_whatever_cookie_it_carries() {
    let server = start(Setup::Token).await;
    let browser = server.sign_in(TOKEN).await;
    let with_wrong_bearer = server
        .client
        .get(format!("{}/v1/admin/flags", server.base))
        .header("cookie", &browser.cookie)
        .bearer_auth("not-the-admin-token-0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(with_wrong_bearer.status(), StatusCode::UNAUTHORIZED);
    // The right token needs no CSRF token (a page of another site can't send the header), and
    // its change is the caller's to name.
    let with_token = server
        .client
        .put(format!("{}{REFUND_FLAG}", server.base))
        .header("cookie", &browser.cookie)
        .bearer_auth(TOKEN)
        .json(&json!({"enabled": false, "reason": "INC-2", "actor": "pager"}))
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), StatusCode::OK);
    let flag: Value = with_token.json().await.unwrap();
    assert_eq!(flag["actor"], "pager");
}

#[tokio::test]
async fn a_rebinding_page_that_names_itself_as_origin_and_host_is_refused_on_loopback() {
    // A page of evil.example whose name now points at 127.0.0.1: its requests carry its own
    // name as Host and Origin, which the console's same-origin rule alone would accept.
    let server = start(Setup::Token).await;
    let port = server.base.rsplit(':').next().unwrap();
    let host = format!("evil.example:{port}");
    let page = server
        .client
        .get(format!("{}/console/", server.base))
        .header("host", &host)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    let sign_in = server
        .client
        .post(format!("{}/console/session", server.base))
        .header("host", &host)
        .header("origin", format!("http://{host}"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(sign_in.status(), StatusCode::FORBIDDEN);
    assert!(sign_in.headers().get("set-cookie").is_none());
    let problem: Value = sign_in.json().await.unwrap();
    assert_eq!(problem["type"], "urn:intentgate:problem:host-not-allowed");
}

/// The console's reopen button posts what this test posts: a rejected intent reopened with
/// the session (and its CSRF token), recorded under who signed in, then executed by the next
/// call. Its page script offers the button only on a rejected intent.
#[tokio::test]
async fn a_rejected_intent_is_reopened_from_the_console_under_its_user() {
    use intentgate_core::{CallStatus, IntentStatus};
    use intentgate_ledger::Ledger;
    use intentgate_mock::{Scripted, Shape};
    use intentgate_test_support::refund;

    let server = start(Setup::Token).await;
    let script = server.page("/console/assets/console.js", None).await;
    assert!(
        script.contains(r#"record.status === "rejected""#) && script.contains("/reopen"),
        "the intent page offers the reopen form on a rejected intent"
    );
    server.harness.provider.script([Scripted {
        shape: Shape::Reject,
        commit: false,
    }]);
    let arguments = refund("8812", json!(49));
    let refused = server.harness.call("refund_order", arguments.clone()).await;
    assert_eq!(refused.status, CallStatus::Rejected);
    let intent = server.harness.intent("refund:8812:49.00").await;

    let browser = server.sign_in(TOKEN).await;
    let reopened = server
        .client
        .post(format!(
            "{}/v1/admin/intents/{}/reopen",
            server.base, intent.id
        ))
        .header("cookie", &browser.cookie)
        .header("origin", server.origin())
        .header(CSRF_HEADER, &browser.csrf)
        .header("sec-fetch-site", "same-origin")
        .json(&json!({"reason": "the 401 was our rotated key"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reopened.status(), StatusCode::OK);
    let reopened: Value = reopened.json().await.unwrap();
    assert_eq!(reopened["status"], "not_executed");
    assert_eq!(reopened["resolved_by"], "console:admin-token");

    let next = server.harness.call("refund_order", arguments).await;
    assert_eq!(next.status, CallStatus::Done);
    assert_eq!(server.harness.provider.effect_count("refund:8812:49.00"), 1);
    let events = server.harness.ledger.events(intent.id).await.unwrap();
    let reopen = events.iter().find(|event| event.kind == "reopen").unwrap();
    assert_eq!(reopen.actor.as_deref(), Some("console:admin-token"));
    assert_eq!(
        server.harness.intent("refund:8812:49.00").await.status,
        IntentStatus::Done
    );
}

/// Sessions live in the ledger: a sign-in on one replica is honoured by another and by a
/// server started afterwards on the same ledger (a restart), and a sign-out on one is
/// refused by the others from their next request.
#[tokio::test]
async fn a_session_made_on_one_replica_works_on_the_others_until_signed_out_on_any() {
    let a = start(Setup::Token).await;
    let b = start_on(Setup::Token, Some(a.ledger.clone()), CREDENTIALS).await;
    let browser = a.sign_in(TOKEN).await;
    assert!(!is_sign_in_form(
        &b.page("/console/", Some(&browser.cookie)).await
    ));
    let flags = b.get("/v1/admin/flags", Some(&browser.cookie)).await;
    assert_eq!(flags.status(), StatusCode::OK);
    let started_later = start_on(Setup::Token, Some(a.ledger.clone()), CREDENTIALS).await;
    assert!(!is_sign_in_form(
        &started_later.page("/console/", Some(&browser.cookie)).await
    ));
    let signed_out = b
        .client
        .delete(format!("{}/console/session", b.base))
        .header("cookie", &browser.cookie)
        .header("origin", b.origin())
        .header(CSRF_HEADER, &browser.csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), StatusCode::NO_CONTENT);
    for server in [&a, &started_later] {
        assert!(is_sign_in_form(
            &server.page("/console/", Some(&browser.cookie)).await
        ));
        let refused = server.get("/v1/admin/flags", Some(&browser.cookie)).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    }
}

/// A session is bound to the admin credentials the gateway accepted when it was made: a
/// gateway started with others (a key revoked, the token rotated) ends it, for every replica.
#[tokio::test]
async fn a_gateway_with_other_admin_credentials_ends_the_sessions_made_before() {
    let a = start(Setup::Token).await;
    let browser = a.sign_in(TOKEN).await;
    let rotated = start_on(
        Setup::Token,
        Some(a.ledger.clone()),
        b"the credentials without the revoked key",
    )
    .await;
    assert!(is_sign_in_form(
        &rotated.page("/console/", Some(&browser.cookie)).await
    ));
    assert!(is_sign_in_form(
        &a.page("/console/", Some(&browser.cookie)).await
    ));
}

//! Console sessions and the notice history across separate `intentgate serve` processes on
//! one ledger, a SQLite file and a PostgreSQL schema: what a load balancer in front of
//! several replicas relies on. A sign-in on one replica works on the others and survives a
//! replica killed and started again; a sign-out on any ends it on all; a notice sent by one
//! replica is listed by the others.
//!
//! The PostgreSQL test needs `DATABASE_URL`; without it, it prints why it is skipped, and
//! with `CI=true` it fails instead.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Running, Schema, database_url, example_config, mock_provider, until};

/// The admin token every replica is started with: the console's sign-in credential.
const ADMIN_TOKEN: &str = "console-sessions-admin-token-0123456789abcdef";
/// The session cookie's name, as a browser stores it (`intentgate_console::SESSION_COOKIE`).
const SESSION_COOKIE: &str = "__Host-intentgate-console";
/// The header a change carries the session's CSRF token in (`intentgate_console::CSRF_HEADER`).
const CSRF_HEADER: &str = "x-intentgate-csrf";
/// A duplicate-call rule that fires on the third repeat of one refund: the notice the test
/// raises on one replica and reads on the other.
const ALERT_RULE: &str = "[{name: refund-repeats, per: intent, threshold: 3, window_seconds: 60}]";
/// Longest wait for a notice sent by one replica to be listed by another (its history is
/// written by a background task).
const NOTICE_LISTED_MAX: Duration = Duration::from_secs(10);

/// What every replica is started with: the mock provider, the config and the ledger.
struct Replicas {
    mock: Running,
    config: String,
    ledger: String,
    schema: Option<String>,
    client: reqwest::Client,
    _folder: tempfile::TempDir,
}

/// A signed-in browser: its session cookie and the page's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

impl Replicas {
    /// Replicas on `ledger` (a PostgreSQL URL with `schema`), or on a SQLite file in a
    /// folder of their own when `ledger` is None.
    fn new(ledger: Option<&str>, schema: Option<&str>) -> Replicas {
        let folder = tempfile::tempdir().unwrap();
        let config = example_config(folder.path(), |text| {
            // refund_order is the one tool with `retry_rejected: false`.
            assert!(text.contains("    retry_rejected: false\n"));
            text.replacen(
                "    retry_rejected: false\n",
                &format!("    retry_rejected: false\n    alerts: {ALERT_RULE}\n"),
                1,
            )
        });
        let ledger = ledger.map_or_else(
            || folder.path().join("ledger.db").to_str().unwrap().to_owned(),
            str::to_owned,
        );
        Replicas {
            mock: mock_provider(),
            config: config.to_str().unwrap().to_owned(),
            ledger,
            schema: schema.map(str::to_owned),
            client: intentgate_test_support::http::client(Some(Duration::from_secs(30))),
            _folder: folder,
        }
    }

    /// One more `intentgate serve` on the ledger, with the admin token.
    fn serve(&self) -> Running {
        let mut env = vec![
            ("INTENTGATE_MOCK_URL", self.mock.url.as_str()),
            ("INTENTGATE_ADMIN_TOKEN", ADMIN_TOKEN),
        ];
        if let Some(schema) = &self.schema {
            env.push(("INTENTGATE_LEDGER_SCHEMA", schema));
        }
        support::serve(&self.config, &self.ledger, &env)
    }

    /// `POST /console/session` on `replica` as the sign-in form's script sends it; answers
    /// the signed-in browser, its CSRF token read from the console's page.
    async fn sign_in(&self, replica: &Running) -> Browser {
        let response = self
            .client
            .post(format!("{}/console/session", replica.url))
            .header("origin", &replica.url)
            .header("sec-fetch-site", "same-origin")
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "signing in on {}", replica.url);
        let set_cookie = response.headers()["set-cookie"].to_str().unwrap();
        let cookie = set_cookie.split(';').next().unwrap().to_owned();
        assert!(
            cookie.starts_with(&format!("{SESSION_COOKIE}=")),
            "{cookie}"
        );
        let page = self.page(replica, &cookie).await;
        let csrf = meta(&page, "intentgate-csrf").expect("the console's page has a CSRF token");
        Browser { cookie, csrf }
    }

    /// The console's start page on `replica` with `cookie`.
    async fn page(&self, replica: &Running, cookie: &str) -> String {
        let response = self
            .client
            .get(format!("{}/console/", replica.url))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    /// Whether `replica` honours the browser's session: its console page is not the sign-in
    /// form, and the admin API answers its cookie.
    async fn honours(&self, replica: &Running, browser: &Browser) -> bool {
        let page = self.page(replica, &browser.cookie).await;
        let flags = self
            .client
            .get(format!("{}/v1/admin/flags", replica.url))
            .header("cookie", &browser.cookie)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        match (is_sign_in_form(&page), flags) {
            (false, 200) => true,
            (true, 401) => false,
            (form, flags) => panic!(
                "{}: the page is the sign-in form: {form}, yet the admin API answered {flags}",
                replica.url
            ),
        }
    }

    /// `DELETE /console/session` on `replica`, with the cookie and the CSRF token.
    async fn sign_out(&self, replica: &Running, browser: &Browser) {
        let response = self
            .client
            .delete(format!("{}/console/session", replica.url))
            .header("cookie", &browser.cookie)
            .header("origin", &replica.url)
            .header(CSRF_HEADER, &browser.csrf)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 204, "signing out on {}", replica.url);
    }

    /// A refund of `order` called on `replica`; answers the outcome's status.
    async fn refund(&self, replica: &Running, order: &str) -> String {
        let arguments = json!({"order_id": order, "amount": 30.0, "reason": "damaged"});
        let answer: Value = self
            .client
            .post(format!("{}/v1/tools/refund_order/call", replica.url))
            .json(&json!({ "arguments": arguments }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["status"].as_str().unwrap_or_default().to_owned()
    }

    /// The notices `replica` lists (`GET /v1/admin/alerts`), read with the session's cookie.
    async fn notices(&self, replica: &Running, browser: &Browser) -> Vec<Value> {
        let response = self
            .client
            .get(format!("{}/v1/admin/alerts", replica.url))
            .header("cookie", &browser.cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        body["alerts"].as_array().cloned().unwrap_or_default()
    }
}

/// The `content` of `<meta name="{name}" content="...">`.
fn meta(page: &str, name: &str) -> Option<String> {
    let start = page.find(&format!("<meta name=\"{name}\" content=\""))?;
    let value = page[start..]
        .split("content=\"")
        .nth(1)?
        .split('"')
        .next()?;
    Some(value.to_owned())
}

fn is_sign_in_form(page: &str) -> bool {
    page.contains("id=\"sign-in\"") && page.contains("<label for=\"credential\">")
}

/// The scenario on `replicas`: sign in on A, use the session on B; kill A and start it
/// again, the session works on it; a notice raised on A is listed on B; sign out on B, and
/// A refuses the cookie.
async fn sessions_and_notices_across_processes(name: &str, replicas: Replicas) {
    let mut a = replicas.serve();
    let b = replicas.serve();
    let browser = replicas.sign_in(&a).await;
    assert!(
        replicas.honours(&b, &browser).await,
        "{name}: a session made on replica A is refused by replica B"
    );

    a.kill();
    a = replicas.serve();
    assert!(
        replicas.honours(&a, &browser).await,
        "{name}: replica A, killed and started again, refuses the session it made"
    );

    // A duplicate-call notice raised through A: the third repeat of one refund.
    let order = "7731";
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(replicas.refund(&a, order).await);
    }
    assert_eq!(
        answers,
        ["done", "already_done", "already_done", "already_done"],
        "{name}: the refund and its repeats on replica A"
    );
    let (listed, listed_in) = until(NOTICE_LISTED_MAX, Duration::from_millis(100), async || {
        let notices = replicas.notices(&b, &browser).await;
        notices
            .into_iter()
            .find(|notice| {
                notice["kind"] == "duplicate_calls"
                    && notice["details"]["intent_key"] == format!("refund:{order}:30.00")
            })
            .ok_or_else(|| {
                format!(
                    "{name}: replica B does not list the duplicate-call notice replica A sent, \
                     {NOTICE_LISTED_MAX:?} after it"
                )
            })
    })
    .await;
    assert_eq!(listed["tool"], "refund_order", "{name}: {listed}");
    assert_eq!(
        listed["details"]["rule"], "refund-repeats",
        "{name}: {listed}"
    );

    replicas.sign_out(&b, &browser).await;
    assert!(
        !replicas.honours(&a, &browser).await,
        "{name}: replica A still honours a session signed out on replica B"
    );
    assert!(
        !replicas.honours(&b, &browser).await,
        "{name}: replica B still honours the session it signed out"
    );
    println!(
        "{name}: the session made on A worked on B and on A after a SIGKILL and a restart, \
         was refused by both after the sign-out on B; the notice sent by A was listed on B \
         {listed_in:?} after the last repeat"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_and_the_notices_are_shared_by_separate_processes_on_sqlite() {
    let replicas = Replicas::new(None, None);
    sessions_and_notices_across_processes("sessions across processes, SQLite", replicas).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_and_the_notices_are_shared_by_separate_processes_on_postgres() {
    let name = "sessions across processes, PostgreSQL";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "console_sessions");
    let replicas = Replicas::new(Some(&url), Some(&schema.name));
    sessions_and_notices_across_processes(name, replicas).await;
    schema.remove();
}

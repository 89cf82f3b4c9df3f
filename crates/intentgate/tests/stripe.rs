//! `examples/stripe.yaml`, unchanged, against a Stripe nobody here wrote: localstripe (a
//! stateful Stripe emulator from PyPI) behind `tests/stripe/fault_proxy.py`, which plays
//! Stripe's idempotency-key layer (localstripe has none) and injects faults between the
//! gateway and the emulator. `intentgate serve` and `intentgate reconcile` run as processes
//! with `STRIPE_API_BASE` pointed at the proxy; everything asserted about refunds is read
//! from localstripe's own refund list, not through the proxy.
//!
//! The emulator runs from the venv `.ci/run` makes (`target/stripe-venv`, from
//! `tests/stripe/requirements.txt`). Without it the emulator tests print that they are
//! skipped and why, except under `CI=true`, where they fail.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Running, intentgate, success, try_start_with_stderr, until};

/// The example config, as shipped.
const STRIPE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/stripe.yaml");
/// A test-mode-shaped key: localstripe accepts any `sk_...`.
const SECRET_KEY: &str = "sk_test_intentgate_emulator";
/// Refund intents in the storm, each on a payment of its own.
const INTENTS: usize = 10;
/// The storm's layers, each repeating what the layer below it did: the user asks again, the
/// model calls the tool again after reading the answer, the agent framework re-invokes the
/// tool node while the first invocation still runs, and the HTTP client retries a request it
/// gave up on.
const USER_REPEATS: usize = 2;
const MODEL_RETRIES: usize = 2;
const FRAMEWORK_RETRIES: usize = 2;
const HTTP_RETRIES: usize = 2;
const CALLS_PER_INTENT: usize = USER_REPEATS * MODEL_RETRIES * FRAMEWORK_RETRIES * HTTP_RETRIES;
/// How long the HTTP client layer waits before it gives up on an attempt and retries: less
/// than a refund held by the proxy takes (the tool's 10 s timeout), more than a good one.
const HTTP_PATIENCE: Duration = Duration::from_secs(3);
/// Longest the last attempt of the HTTP layer waits for its answer.
const LAST_ATTEMPT: Duration = Duration::from_secs(40);
/// Longest a helper process gets to write its port.
const START_MAX: Duration = Duration::from_secs(30);
/// Longest wait, once the storm is over, for every intent to be settled.
const SETTLE_MAX: Duration = Duration::from_secs(90);
/// Longest wait for reconciliation to see the refunds made by hand (the example leaves the
/// newest 5 s of each run to the next one).
const RECONCILE_MAX: Duration = Duration::from_secs(60);

/// The venv's python, or None (with why) when the venv is missing; with CI=true a missing
/// venv fails the test instead.
fn stripe_python() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join("target/stripe-venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    let why = format!(
        "{} is missing: make it as .ci/run does (python3 -m venv target/stripe-venv; \
         target/stripe-venv/bin/pip install -r crates/intentgate/tests/stripe/requirements.txt)",
        python.display()
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why}");
    }
    eprintln!("skipped: {why}");
    None
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/stripe")
        .join(name)
        .display()
        .to_string()
}

/// Starts `python SCRIPT ARGS --port-file F` with its output in `folder/NAME.log`, and waits
/// for the port it writes.
fn start_script(python: &Path, folder: &Path, name: &str, args: &[&str]) -> Running {
    let port_file = folder.join(format!("{name}.port"));
    let log = std::fs::File::create(folder.join(format!("{name}.log"))).unwrap();
    let mut child = Command::new(python)
        .arg(script(&format!("{name}.py")))
        .args(args)
        .arg("--port-file")
        .arg(&port_file)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|error| panic!("{name} starts: {error}"));
    let deadline = Instant::now() + START_MAX;
    loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            let port: u16 = text.trim().parse().unwrap();
            return Running {
                child,
                url: format!("http://127.0.0.1:{port}"),
            };
        }
        if let Some(status) = child.try_wait().unwrap() {
            let log = std::fs::read_to_string(folder.join(format!("{name}.log")));
            panic!("{name} ended ({status}) before listening: {log:?}");
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not listen within {START_MAX:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
fn form(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://form.invalid/").unwrap();
    url.query_pairs_mut().extend_pairs(pairs);
    url.query().unwrap_or_default().to_owned()
}

/// localstripe, the fault proxy in front of it, and the folder of their logs.
struct Emulator {
    localstripe: Running,
    proxy: Running,
    client: reqwest::Client,
    folder: tempfile::TempDir,
}

impl Emulator {
    fn start() -> Option<Emulator> {
        let python = stripe_python()?;
        let folder = tempfile::tempdir().unwrap();
        let localstripe = start_script(&python, folder.path(), "localstripe_server", &[]);
        let proxy = start_script(
            &python,
            folder.path(),
            "fault_proxy",
            &["--upstream", &localstripe.url],
        );
        Some(Emulator {
            localstripe,
            proxy,
            client: support::client(),
            folder,
        })
    }

    /// A request to localstripe itself (never through the proxy), which must succeed.
    async fn stripe(&self, method: reqwest::Method, path: &str, pairs: &[(&str, &str)]) -> Value {
        let url = format!("{}{path}", self.localstripe.url);
        let request = if method == reqwest::Method::GET {
            self.client.get(format!("{url}?{}", form(pairs)))
        } else {
            self.client
                .request(method, url)
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(form(pairs))
        };
        let response = request.bearer_auth(SECRET_KEY).send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert!(status.is_success(), "localstripe {path}: {status} {body}");
        body
    }

    async fn post(&self, path: &str, pairs: &[(&str, &str)]) -> Value {
        self.stripe(reqwest::Method::POST, path, pairs).await
    }

    /// A customer with a card that pays (Stripe's test card 4242...), or with `number`.
    async fn customer_with_card(&self, number: &str) -> (String, String) {
        let customer = self
            .post("/v1/customers", &[("email", "buyer@example.com")])
            .await;
        let customer = customer["id"].as_str().unwrap().to_owned();
        let card = self
            .post(
                "/v1/payment_methods",
                &[
                    ("type", "card"),
                    ("card[number]", number),
                    ("card[exp_month]", "12"),
                    ("card[exp_year]", "2030"),
                    ("card[cvc]", "123"),
                ],
            )
            .await;
        let card = card["id"].as_str().unwrap().to_owned();
        self.post(
            &format!("/v1/payment_methods/{card}/attach"),
            &[("customer", &customer)],
        )
        .await;
        (customer, card)
    }

    /// A confirmed payment of `cents` by `customer` with `card`: its PaymentIntent id.
    async fn payment(&self, customer: &str, card: &str, cents: &str, capture: &str) -> String {
        let intent = self
            .post(
                "/v1/payment_intents",
                &[
                    ("amount", cents),
                    ("currency", "usd"),
                    ("customer", customer),
                    ("payment_method", card),
                    ("payment_method_types[]", "card"),
                    ("capture_method", capture),
                    ("confirm", "true"),
                ],
            )
            .await;
        let expected = if capture == "manual" {
            "requires_capture"
        } else {
            "succeeded"
        };
        assert_eq!(intent["status"], expected, "{intent}");
        intent["id"].as_str().unwrap().to_owned()
    }

    /// Every refund localstripe holds, read from localstripe page by page.
    async fn refunds(&self) -> Vec<Value> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut query = vec![("limit", "100")];
            if let Some(id) = &after {
                query.push(("starting_after", id));
            }
            let page = self
                .stripe(reqwest::Method::GET, "/v1/refunds", &query)
                .await;
            let data = page["data"].as_array().unwrap().clone();
            after = data.last().map(|r| r["id"].as_str().unwrap().to_owned());
            all.extend(data);
            if page["has_more"] != true {
                return all;
            }
        }
    }

    /// Queues faults at the proxy: `(method, path, kind)`, each for the next matching request.
    async fn faults(&self, faults: &[(&str, &str, &str)]) {
        let faults: Vec<Value> = faults
            .iter()
            .map(|(method, path, kind)| json!({"method": method, "path": path, "kind": kind}))
            .collect();
        let response = self
            .client
            .post(format!("{}/__faults", self.proxy.url))
            .json(&json!({ "faults": faults }))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }

    /// Every request the proxy has seen.
    async fn stats(&self) -> Vec<Value> {
        let stats = support::get_json(&self.client, format!("{}/__stats", self.proxy.url)).await;
        stats["requests"].as_array().unwrap().clone()
    }

    /// What `intentgate` needs to use the example against this emulator.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("STRIPE_API_BASE", self.proxy.url.clone()),
            ("STRIPE_SECRET_KEY", SECRET_KEY.to_owned()),
        ]
    }

    /// `intentgate serve` of the example in front of the proxy, on a ledger in the folder,
    /// its log (at info) beside it.
    fn gateway(&self) -> Running {
        let log = std::fs::File::create(self.folder.path().join("gateway.log")).unwrap();
        let env = self.env();
        let mut env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        env.push(("RUST_LOG", "info"));
        try_start_with_stderr(
            &[
                "serve",
                "--config",
                STRIPE_CONFIG,
                "--listen",
                "127.0.0.1:0",
                "--ledger",
                self.ledger().as_str(),
            ],
            &env,
            log,
        )
        .unwrap_or_else(|problem| panic!("{problem}; log: {:?}", self.log("gateway")))
    }

    fn ledger(&self) -> String {
        self.folder
            .path()
            .join("ledger.db")
            .to_str()
            .unwrap()
            .to_owned()
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.folder.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// `intentgate reconcile --config examples/stripe.yaml --format json` over the ledger.
    fn reconcile(&self) -> Output {
        let mut command = intentgate();
        command.args([
            "reconcile",
            "--config",
            STRIPE_CONFIG,
            "--ledger",
            &self.ledger(),
            "--since",
            "1h",
            "--format",
            "json",
        ]);
        for (name, value) in self.env() {
            command.env(name, value);
        }
        command.output().unwrap()
    }
}

/// One call over the gateway's HTTP API with the JSON text `body` (numbers as written),
/// given up on after `patience`: the outcome's status, or what the client saw instead.
async fn call_raw(
    client: &reqwest::Client,
    gateway: &str,
    tool: &str,
    body: String,
    headers: &[(&str, &str)],
    patience: Duration,
) -> Result<Value, String> {
    let mut request = client
        .post(intentgate_test_support::http::tool_url(gateway, tool))
        .header("Content-Type", "application/json")
        .timeout(patience)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    match request.send().await {
        Ok(response) if response.status().as_u16() == 200 => {
            response.json().await.map_err(|error| error.to_string())
        }
        Ok(response) => Err(format!("http_{}", response.status().as_u16())),
        Err(error) if error.is_timeout() => Err("gave_up".to_owned()),
        Err(error) => Err(format!("connection: {error}")),
    }
}

/// One refund intent of the storm.
struct Refund {
    payment_intent: String,
    /// The refund in cents, and as the model writes it in dollars (numbers, as written).
    cents: u64,
    written: [String; 3],
}

impl Refund {
    fn dollars(&self) -> String {
        format!("{}.{:02}", self.cents / 100, self.cents % 100)
    }

    fn intent_key(&self) -> String {
        format!("refund:{}:{}", self.payment_intent, self.dollars())
    }

    /// What Stripe gets as Idempotency-Key and in `metadata[intentgate_key]` (the default
    /// tenant's provider key: `<tool>:<intent key>`).
    fn provider_key(&self) -> String {
        format!("refund_order:{}", self.intent_key())
    }

    /// The call's JSON text, the amount written the `way`th way.
    fn body(&self, way: usize) -> String {
        format!(
            r#"{{"arguments": {{"payment_intent": "{}", "amount": {}}}}}"#,
            self.payment_intent,
            self.written[way % 3]
        )
    }
}

/// What the storm's callers saw, per intent: each call's status (or `gave_up`, ...).
type Seen = Arc<std::sync::Mutex<BTreeMap<usize, Vec<String>>>>;

/// The calls of one intent through the four layers. A user turn waits for the one before;
/// so does a model retry; the framework's invocations run at once; the HTTP client gives up
/// on its first attempt after `HTTP_PATIENCE` and sends it again.
async fn storm_intent(
    client: reqwest::Client,
    gateway: String,
    index: usize,
    refund: Arc<Refund>,
    seen: Seen,
) {
    for user in 0..USER_REPEATS {
        for model in 0..MODEL_RETRIES {
            let mut framework = tokio::task::JoinSet::new();
            for invocation in 0..FRAMEWORK_RETRIES {
                let (client, gateway, refund, seen) = (
                    client.clone(),
                    gateway.clone(),
                    refund.clone(),
                    seen.clone(),
                );
                framework.spawn(async move {
                    for attempt in 0..HTTP_RETRIES {
                        let patience = if attempt + 1 == HTTP_RETRIES {
                            LAST_ATTEMPT
                        } else {
                            HTTP_PATIENCE
                        };
                        let way = user + model + invocation + attempt;
                        let answer = call_raw(
                            &client,
                            &gateway,
                            "refund_order",
                            refund.body(way),
                            &[],
                            patience,
                        )
                        .await;
                        let status = match answer {
                            Ok(outcome) => outcome["status"].as_str().unwrap_or("none").to_owned(),
                            Err(other) => other,
                        };
                        seen.lock().unwrap().entry(index).or_default().push(status);
                    }
                });
            }
            framework.join_all().await;
        }
    }
}

/// The intent's status in the ledger, as the gateway reads it.
async fn ledger_status(client: &reqwest::Client, gateway: &str, refund: &Refund) -> String {
    let url = format!("{gateway}/v1/intents/refund_order/{}", refund.intent_key());
    let response = client.get(url).send().await.unwrap();
    if response.status().as_u16() == 404 {
        return "missing".to_owned();
    }
    let intent: Value = response.json().await.unwrap();
    intent["status"].as_str().unwrap_or("none").to_owned()
}

/// The lines of `reconcile --format json`.
fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[test]
fn the_example_is_clean_for_config_check_and_audit() {
    let check = intentgate()
        .args(["config", "check", STRIPE_CONFIG])
        .env("STRIPE_SECRET_KEY", SECRET_KEY)
        .output()
        .unwrap();
    success(&check);
    let audit = intentgate()
        .args(["audit", "--config", STRIPE_CONFIG])
        .env("STRIPE_SECRET_KEY", SECRET_KEY)
        .output()
        .unwrap();
    let report = success(&audit);
    assert!(
        report.contains(" 0 error(s), 0 warning(s)"),
        "the audit finds nothing to fix:\n{report}"
    );
}

#[test]
fn the_example_reads_the_api_base_and_key_from_the_environment() {
    let text = std::fs::read_to_string(STRIPE_CONFIG).unwrap();
    assert!(text.contains("base_url: ${STRIPE_API_BASE:-https://api.stripe.com}"));
    assert!(text.contains("Authorization: \"Bearer ${STRIPE_SECRET_KEY}\""));
    let said = |output: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    // Without the key the file still checks, with a warning naming the variable...
    let check = intentgate()
        .args(["config", "check", STRIPE_CONFIG])
        .env_remove("STRIPE_SECRET_KEY")
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", said(&check));
    assert!(
        said(&check).contains("STRIPE_SECRET_KEY"),
        "{}",
        said(&check)
    );
    // ...but the gateway, which would call Stripe, refuses to start, naming it.
    let serve = intentgate()
        .args([
            "serve",
            "--config",
            STRIPE_CONFIG,
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("STRIPE_SECRET_KEY")
        .output()
        .unwrap();
    assert!(!serve.status.success(), "{}", said(&serve));
    assert!(
        said(&serve).contains("STRIPE_SECRET_KEY"),
        "{}",
        said(&serve)
    );
}

// Multi-threaded: the test waits on `intentgate reconcile` while its own clients run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_four_layer_retry_storm_through_every_fault_makes_one_refund_per_intent() {
    let Some(emulator) = Emulator::start() else {
        return;
    };
    let (customer, card) = emulator.customer_with_card("4242424242424242").await;
    let mut refunds = Vec::new();
    for index in 0..INTENTS {
        let payment = emulator
            .payment(&customer, &card, "10000", "automatic")
            .await;
        // 10.50, 11.50, ...: written 10.5 or 10.50 by the model, one intent.
        let cents = 1050 + 100 * index as u64;
        let whole = cents / 100;
        refunds.push(Arc::new(Refund {
            payment_intent: payment,
            cents,
            written: [
                format!("{whole}.5"),
                format!("{whole}.50"),
                format!("{whole}.5"),
            ],
        }));
    }
    // One more payment, refunded around the gateway (no key at all).
    let bypassed = emulator
        .payment(&customer, &card, "10000", "automatic")
        .await;

    let mut gateway = emulator.gateway();
    let client = support::client();

    // Every fault, each once, for the first refund requests that reach the "provider"; and
    // a lookup that fails once.
    let post = ("POST", "/v1/refunds");
    emulator
        .faults(&[
            (post.0, post.1, "lose_answer"),
            (post.0, post.1, "timeout_before"),
            (post.0, post.1, "store_500"),
            (post.0, post.1, "rate_limit"),
            (post.0, post.1, "drop"),
            ("GET", "/v1/refunds", "drop"),
        ])
        .await;

    let seen: Seen = Arc::default();
    let storm: Vec<_> = refunds
        .iter()
        .enumerate()
        .map(|(index, refund)| {
            tokio::spawn(storm_intent(
                client.clone(),
                gateway.url.clone(),
                index,
                refund.clone(),
                seen.clone(),
            ))
        })
        .collect();
    for intent in storm {
        intent.await.unwrap();
    }

    // Once the faults are spent, repeats (a user asking again) and the sweeper settle every
    // intent: each ends definite in the ledger.
    let settled = until(SETTLE_MAX, Duration::from_millis(500), async || {
        let mut open = Vec::new();
        for refund in &refunds {
            let status = ledger_status(&client, &gateway.url, refund).await;
            if !matches!(status.as_str(), "done" | "rejected" | "not_executed") {
                // The user asks again.
                let _ = call_raw(
                    &client,
                    &gateway.url,
                    "refund_order",
                    refund.body(0),
                    &[],
                    LAST_ATTEMPT,
                )
                .await;
                open.push(format!("{}: {status}", refund.intent_key()));
            }
        }
        if open.is_empty() {
            Ok(())
        } else {
            Err(format!("still open after {SETTLE_MAX:?}: {open:?}"))
        }
    });
    let ((), settle_time) = settled.await;

    // What happened, from localstripe's own refund list.
    let stripe_refunds = emulator.refunds().await;
    let stats = emulator.stats().await;
    let seen = seen.lock().unwrap().clone();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for answers in seen.values() {
        for status in answers {
            *statuses.entry(status.clone()).or_default() += 1;
        }
    }
    let calls: usize = seen.values().map(Vec::len).sum();
    assert_eq!(calls, INTENTS * CALLS_PER_INTENT, "{seen:?}");
    let mut figures = Vec::new();
    for (index, refund) in refunds.iter().enumerate() {
        let made: Vec<&Value> = stripe_refunds
            .iter()
            .filter(|r| r["payment_intent"] == refund.payment_intent.as_str())
            .collect();
        let answers = &seen[&index];
        let final_status = ledger_status(&client, &gateway.url, refund).await;
        assert_eq!(
            made.len(),
            1,
            "{}: one refund at Stripe, answers {answers:?}: {made:?}",
            refund.intent_key()
        );
        let record = made[0];
        assert_eq!(record["amount"], refund.cents, "{record}");
        assert_eq!(
            record["metadata"]["intentgate_key"],
            refund.provider_key().as_str(),
            "{record}"
        );
        assert_eq!(
            record["metadata"]["intent_key"],
            refund.intent_key().as_str(),
            "{record}"
        );
        // Nobody was told `done` of a refund that isn't there (it is), and no refund exists
        // of an intent whose answer was that nothing happened.
        assert_eq!(final_status, "done", "{}: {answers:?}", refund.intent_key());
        assert!(
            !answers.iter().any(|s| s == "rejected" || s == "conflict"),
            "{}: {answers:?}",
            refund.intent_key()
        );
        if let Some(last) = answers.iter().rev().find(|s| s.as_str() != "gave_up") {
            assert_ne!(last, "not_executed", "{}: {answers:?}", refund.intent_key());
        }
        let key = refund.provider_key();
        let posts: Vec<&Value> = stats
            .iter()
            .filter(|r| r["method"] == "POST" && r["idempotency_key"] == key.as_str())
            .collect();
        let lookups = stats
            .iter()
            .filter(|r| {
                r["method"] == "GET"
                    && r["query"]
                        .as_str()
                        .is_some_and(|q| q.contains(&refund.payment_intent))
            })
            .count();
        let faults: Vec<&str> = posts.iter().filter_map(|r| r["fault"].as_str()).collect();
        let replayed = posts.iter().filter(|r| r["replayed"] == true).count();
        if faults.contains(&"store_500") {
            // Its key replays a 500 for 24 h: the lookup is what settled it, and the key
            // was not sent again and again.
            assert!(
                posts.len() <= 2,
                "{}: re-sent under a stored 500: {posts:?}",
                refund.intent_key()
            );
        }
        figures.push(format!(
            "  {} {}: {} calls, {} provider requests ({} refund POSTs, {} replayed; {} lookups), \
             faults {:?}, refunds {}, ledger {final_status}",
            refund.payment_intent,
            refund.dollars(),
            answers.len(),
            posts.len() + lookups,
            posts.len(),
            replayed,
            lookups,
            faults,
            made.len(),
        ));
    }
    let spent: Vec<&str> = stats.iter().filter_map(|r| r["fault"].as_str()).collect();
    assert_eq!(spent.len(), 6, "every fault was applied: {spent:?}");
    let provider_requests = stats.len();
    println!(
        "stripe storm: {INTENTS} intents x {CALLS_PER_INTENT} calls \
         ({USER_REPEATS} user x {MODEL_RETRIES} model x {FRAMEWORK_RETRIES} framework x \
         {HTTP_RETRIES} HTTP), {calls} calls, {provider_requests} provider requests, \
         {} refunds at the emulator, settled {settle_time:?} after the storm, statuses {statuses:?}\n{}",
        stripe_refunds.len(),
        figures.join("\n")
    );

    // Reconciliation over the emulator names a refund made around the gateway, and a
    // duplicate made by hand: a second refund carrying an intent's key in its metadata.
    let around = emulator
        .post(
            "/v1/refunds",
            &[("payment_intent", &bypassed), ("amount", "700")],
        )
        .await;
    let around = around["id"].as_str().unwrap().to_owned();
    let twice = &refunds[0];
    let duplicate = emulator
        .post(
            "/v1/refunds",
            &[
                ("payment_intent", &twice.payment_intent),
                ("amount", &twice.cents.to_string()),
                ("metadata[intentgate_key]", &twice.provider_key()),
                ("metadata[intent_key]", &twice.intent_key()),
            ],
        )
        .await;
    let duplicate = duplicate["id"].as_str().unwrap().to_owned();
    let emulator = Arc::new(emulator);
    let (lines, _) = until(RECONCILE_MAX, Duration::from_secs(1), async || {
        let runner = emulator.clone();
        let output = tokio::task::spawn_blocking(move || runner.reconcile())
            .await
            .unwrap();
        let lines = json_lines(&output);
        let refund_lines: Vec<Value> = lines
            .iter()
            .filter(|line| line["type"] == "mismatch" && line["tool"] == "refund_order")
            .cloned()
            .collect();
        let names = |id: &str| {
            refund_lines.iter().any(|line| {
                line["external_ids"]
                    .as_array()
                    .is_some_and(|ids| ids.iter().any(|i| i == id))
            })
        };
        if names(&around) && names(&duplicate) {
            Ok((output, refund_lines))
        } else {
            Err(format!(
                "reconcile did not name both refunds: {:?}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    })
    .await;
    let (output, refund_lines) = lines;
    assert_eq!(
        output.status.code(),
        Some(2),
        "a duplicate is critical: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    let kinds: BTreeSet<&str> = refund_lines
        .iter()
        .map(|line| line["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(["duplicate", "no_intent"]),
        "nothing else is amiss with the storm's refunds: {refund_lines:#?}"
    );
    assert_eq!(refund_lines.len(), 2, "{refund_lines:#?}");
    let bypass = refund_lines
        .iter()
        .find(|line| line["kind"] == "no_intent")
        .unwrap();
    assert_eq!(bypass["external_ids"], json!([around]));
    let subject = bypass["subject"].as_str().unwrap();
    assert!(
        subject.contains(&bypassed) && subject.contains(&customer),
        "the payment and the customer are named: {subject}"
    );
    let twice_line = refund_lines
        .iter()
        .find(|line| line["kind"] == "duplicate")
        .unwrap();
    assert_eq!(twice_line["severity"], "critical");
    assert_eq!(twice_line["intent_key"], twice.intent_key().as_str());
    let ids = twice_line["external_ids"].as_array().unwrap();
    assert_eq!(ids.len(), 2, "{twice_line}");
    assert!(
        ids.iter().any(|id| id == duplicate.as_str()),
        "{twice_line}"
    );
    gateway.kill();
}

// Multi-threaded: the gateway's clients run while the test reads localstripe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_card_charges_once_per_intent_id_and_cancel_payment_cancels() {
    let Some(emulator) = Emulator::start() else {
        return;
    };
    let (customer, card) = emulator.customer_with_card("4242424242424242").await;
    let gateway = emulator.gateway();
    let client = support::client();
    let body = format!(
        r#"{{"arguments": {{"customer": "{customer}", "payment_method": "{card}", "amount": 25}}}}"#
    );
    let visit = [("Intent-Id", "visit-1")];
    let first = call_raw(
        &client,
        &gateway.url,
        "charge_card",
        body.clone(),
        &visit,
        LAST_ATTEMPT,
    )
    .await
    .unwrap();
    assert_eq!(first["status"], "done", "{first}");
    let again = call_raw(
        &client,
        &gateway.url,
        "charge_card",
        body.clone(),
        &visit,
        LAST_ATTEMPT,
    )
    .await
    .unwrap();
    assert_eq!(again["status"], "already_done", "{again}");
    let id = first["external_id"].as_str().unwrap().to_owned();
    let intent = emulator
        .stripe(
            reqwest::Method::GET,
            &format!("/v1/payment_intents/{id}"),
            &[],
        )
        .await;
    assert_eq!(intent["status"], "succeeded", "{intent}");
    assert_eq!(intent["amount"], 2500, "{intent}");
    assert_eq!(intent["customer"], customer.as_str());
    assert_eq!(
        intent["metadata"]["intentgate_key"],
        format!("charge_card:charge:{customer}:visit-1").as_str()
    );
    let stats = emulator.stats().await;
    let posts = stats
        .iter()
        .filter(|r| r["method"] == "POST" && r["path"] == "/v1/payment_intents")
        .count();
    assert_eq!(
        posts, 1,
        "the repeat was answered from the ledger: {stats:?}"
    );

    // Another charge request of the same amount is another intent id: a second charge.
    let second = call_raw(
        &client,
        &gateway.url,
        "charge_card",
        body,
        &[("Intent-Id", "visit-2")],
        LAST_ATTEMPT,
    )
    .await
    .unwrap();
    assert_eq!(second["status"], "done", "{second}");
    assert_ne!(second["external_id"], first["external_id"]);

    // An authorised, uncaptured payment is cancelled.
    let held = emulator.payment(&customer, &card, "3000", "manual").await;
    let cancel = call_raw(
        &client,
        &gateway.url,
        "cancel_payment",
        format!(r#"{{"arguments": {{"payment_intent": "{held}"}}}}"#),
        &[],
        LAST_ATTEMPT,
    )
    .await
    .unwrap();
    assert_eq!(cancel["status"], "done", "{cancel}");
    let held = emulator
        .stripe(
            reqwest::Method::GET,
            &format!("/v1/payment_intents/{held}"),
            &[],
        )
        .await;
    assert_eq!(held["status"], "canceled", "{held}");
}

// Multi-threaded: the gateway's clients run while the test reads localstripe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_card_is_rejected_with_stripes_message() {
    let Some(emulator) = Emulator::start() else {
        return;
    };
    // Stripe's test card that attaches but is declined when charged.
    let (customer, card) = emulator.customer_with_card("4000000000000341").await;
    let gateway = emulator.gateway();
    let client = support::client();
    let body = format!(
        r#"{{"arguments": {{"customer": "{customer}", "payment_method": "{card}", "amount": "12.00"}}}}"#
    );
    let outcome = call_raw(
        &client,
        &gateway.url,
        "charge_card",
        body,
        &[("Intent-Id", "declined-1")],
        LAST_ATTEMPT,
    )
    .await
    .unwrap();
    assert_eq!(outcome["status"], "rejected", "{outcome}");
    let message = outcome.to_string();
    assert!(message.contains("Your card was declined."), "{outcome}");
}

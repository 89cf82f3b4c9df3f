//! Chaos tests: the real `intentgate serve` replicas (on one PostgreSQL schema, or one SQLite
//! file) in front of the real `intentgate mock-provider`, on loopback ports, while calls storm
//! in and replicas are SIGKILLed or their database connections are cut. Each test checks the
//! mock's effect log against the ledger: no intent has two effects (duplicates), every effect
//! has its intent `done` after a settle (lost), and every answer agrees with the effect log.
//! Each prints one line: `intents N, calls N, kills N, duplicates N, lost N, unknown N`.
//!
//! The PostgreSQL tests need `DATABASE_URL`; without it they print that they are skipped
//! (with `CI=true` they fail instead). Each uses a schema of its own
//! (`INTENTGATE_LEDGER_SCHEMA`), dropped at the end.

mod support;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Running, Schema, connect, database_url, example_config, get_json, mock_provider, set_faults,
    try_serve_with_stderr, with_setting,
};

/// Tool timeouts in the test config: short, so ambiguous outcomes take a second, not ten.
const TOOL_TIMEOUT_MS: u64 = 700;
/// Retries of "not processed" answers in the test config. One, not the example's three, so
/// that a lease (every attempt's timeout, the capped pauses and a margin) ends in about 11 s
/// and the sweeper can settle a killed call's intent within the test.
const RETRY_BUDGET: u64 = 1;
/// How long the mock holds a "timeout" answer: well past the tool timeout.
const TIMEOUT_HOLD_MS: u64 = 2_000;
/// Intents per storm, and calls per intent.
const INTENTS: usize = 30;
const CALLS_PER_INTENT: usize = 12;
/// Longest a client keeps one call going (connection errors and 503s are retried).
const CALL_MAX: Duration = Duration::from_secs(40);
/// Longest wait, after a storm, for every intent to settle (leases expire, the sweeper runs
/// every 10 s).
const SETTLE_MAX: Duration = Duration::from_secs(35);
/// How long replicas are killed (or connections cut) during a storm, and how often.
const CHAOS_FOR: Duration = Duration::from_secs(3);
const KILL_EVERY: Duration = Duration::from_millis(300);
const TERMINATE_EVERY: Duration = Duration::from_millis(150);
/// Every fault shape at moderate rates, small latencies.
const STORM_FAULTS: &str = r#"{"reject": 30, "rate_limited": 50, "unavailable": 30, "timeout": 40,
    "dropped": 40, "server_error": 50, "commit_when_ambiguous": 500, "lookup_failure": 100,
    "latency_p50_ms": 5, "latency_p95_ms": 60}"#;

/// The example config with short timeouts and a small retry budget, written to `folder`.
fn test_config(folder: &Path) -> PathBuf {
    example_config(folder, |text| {
        let text = with_setting(&text, "timeout_ms", TOOL_TIMEOUT_MS);
        with_setting(&text, "retry_budget", RETRY_BUDGET)
    })
}

/// How to start one more gateway replica.
#[derive(Clone)]
struct GatewaySpec {
    config: PathBuf,
    ledger: String,
    mock_url: String,
    schema: Option<String>,
    /// Where the replicas' stderr goes (at level info): `$CHAOS_LOGS/NAME.log` when CHAOS_LOGS
    /// is set, else a file in the test's folder, quoted when a replica fails to start.
    log: PathBuf,
}

/// How many times a killed replica is started again before the test gives up on it.
const RESTART_TRIES: usize = 3;

impl GatewaySpec {
    /// The replica, or why it did not start, with the end of the replicas' log.
    fn try_start(&self) -> Result<Running, String> {
        let mut env = vec![
            ("INTENTGATE_MOCK_URL", self.mock_url.as_str()),
            ("RUST_LOG", "info"),
        ];
        if let Some(schema) = &self.schema {
            env.push(("INTENTGATE_LEDGER_SCHEMA", schema.as_str()));
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        try_serve_with_stderr(self.config.to_str().unwrap(), &self.ledger, &env, file).map_err(
            |problem| {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = lines[lines.len().saturating_sub(30)..].join("\n");
                format!("{problem}; the replicas' log ends with:\n{tail}")
            },
        )
    }

    fn start(&self) -> Running {
        self.try_start()
            .unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// A replica started again after a kill. A start that fails (a loaded machine can make
    /// one miss a connect timeout) is printed and tried again, up to `RESTART_TRIES` times.
    fn restart(&self) -> Running {
        for _ in 1..RESTART_TRIES {
            match self.try_start() {
                Ok(running) => return running,
                Err(problem) => eprintln!("a replica failed to start again: {problem}"),
            }
        }
        self.start()
    }
}

/// The mock provider and the replicas in front of it.
struct Cluster {
    mock: Running,
    spec: GatewaySpec,
    replicas: Arc<Mutex<Vec<Running>>>,
    urls: Arc<RwLock<Vec<String>>>,
    client: reqwest::Client,
    log: Arc<Mutex<Log>>,
    _folder: tempfile::TempDir,
}

/// What the clients saw over HTTP, every attempt counted.
#[derive(Default, Debug)]
struct Log {
    http: BTreeMap<u16, u64>,
    connection_errors: u64,
    problems: Vec<String>,
}

fn refund(order: &str) -> Value {
    json!({"order_id": order, "amount": 25.0, "reason": "requested_by_customer"})
}

fn order(intent: usize) -> String {
    format!("c{intent}")
}

impl Cluster {
    /// The mock (quiet) and `count` replicas on `ledger` (a SQLite file name in the test's
    /// folder, or a PostgreSQL URL with `schema`).
    fn start(log_name: &str, count: usize, ledger: Option<&str>, schema: Option<&str>) -> Cluster {
        let folder = tempfile::tempdir().unwrap();
        let mock = mock_provider();
        let ledger = match ledger {
            Some(url) => url.to_owned(),
            None => folder.path().join("ledger.db").to_str().unwrap().to_owned(),
        };
        let spec = GatewaySpec {
            config: test_config(folder.path()),
            ledger,
            mock_url: mock.url.clone(),
            schema: schema.map(str::to_owned),
            log: std::env::var_os("CHAOS_LOGS").map_or_else(
                || folder.path().join("replicas.log"),
                |logs| PathBuf::from(logs).join(format!("{log_name}.log")),
            ),
        };
        // The first one sets the schema up; the others find it.
        let replicas: Vec<Running> = (0..count).map(|_| spec.start()).collect();
        let urls = replicas.iter().map(|replica| replica.url.clone()).collect();
        Cluster {
            mock,
            spec,
            replicas: Arc::new(Mutex::new(replicas)),
            urls: Arc::new(RwLock::new(urls)),
            client: support::client(),
            log: Arc::default(),
            _folder: folder,
        }
    }

    async fn faults(&self, plan: Value) {
        set_faults(&self.client, &self.mock, Some(TIMEOUT_HOLD_MS), plan).await;
    }

    /// The storm's faults. Without `server_errors`, every shape but stored 5xx: an attempt
    /// answered with an uncommitted 5xx has that 5xx stored for its key and replayed to
    /// every re-send (as Stripe does), so such an intent stays `unknown` for
    /// reconciliation, and a test that expects the sweeper to settle everything leaves
    /// that shape out.
    async fn storm_faults(&self, seed: u64, server_errors: bool) {
        let mut plan: Value = serde_json::from_str(STORM_FAULTS).unwrap();
        plan["seed"] = json!(seed);
        if !server_errors {
            plan["server_error"] = json!(0);
        }
        self.faults(plan).await;
    }

    async fn effects(&self) -> Value {
        get_json(&self.client, format!("{}/admin/effects", self.mock.url)).await
    }

    fn url(&self, index: usize) -> String {
        let urls = self.urls.read().unwrap();
        urls[index % urls.len()].clone()
    }

    /// One call of `refund_order` the way a client behind a load balancer makes it: first
    /// to replica `first`, and on a connection error or a 503 again, to the next one.
    /// Answers the outcome's status, or `http_CODE` for any other answer.
    async fn call(&self, first: usize, order: &str) -> String {
        let deadline = Instant::now() + CALL_MAX;
        let mut attempt = 0;
        while Instant::now() < deadline {
            let url = self.url(first + attempt);
            attempt += 1;
            let sent = self
                .client
                .post(format!("{url}/v1/tools/refund_order/call"))
                .json(&json!({ "arguments": refund(order) }))
                .send()
                .await;
            let answer = match sent {
                Ok(response) => {
                    let code = response.status().as_u16();
                    response.text().await.map(|body| (code, body))
                }
                Err(error) => Err(error),
            };
            let Ok((code, body)) = answer else {
                self.log.lock().unwrap().connection_errors += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            *self.log.lock().unwrap().http.entry(code).or_insert(0) += 1;
            match code {
                200 => {
                    let outcome: Value = serde_json::from_str(&body).unwrap_or_default();
                    return match outcome["status"].as_str() {
                        Some(status) => status.to_owned(),
                        None => {
                            self.log.lock().unwrap().problems.push(body);
                            "http_200_unreadable".to_owned()
                        }
                    };
                }
                // Overloaded, or the ledger unavailable: nothing executed, try again.
                503 => tokio::time::sleep(Duration::from_millis(100)).await,
                _ => {
                    self.log
                        .lock()
                        .unwrap()
                        .problems
                        .push(format!("{code}: {body}"));
                    return format!("http_{code}");
                }
            }
        }
        "gave_up".to_owned()
    }

    /// The intent's status as some live replica reads it (`missing` when there is none).
    async fn status(&self, order: &str) -> Option<String> {
        let count = self.urls.read().unwrap().len();
        for index in 0..count {
            let url = format!(
                "{}/v1/intents/refund_order/refund:{order}:25.00",
                self.url(index)
            );
            let Ok(response) = self.client.get(url).send().await else {
                continue;
            };
            match response.status().as_u16() {
                200 => {
                    let intent: Value = response.json().await.ok()?;
                    return intent["status"].as_str().map(str::to_owned);
                }
                404 => return Some("missing".to_owned()),
                _ => continue,
            }
        }
        None
    }

    /// A storm of `INTENTS x CALLS_PER_INTENT` calls, all at once: call `j` of intent `i`
    /// goes first to replica `i + j` and starts after `delay(i, j)`. Answers (order, answer)
    /// per call.
    async fn storm(self: &Arc<Self>, delay: fn(usize, usize) -> Duration) -> Vec<(String, String)> {
        let mut calls = tokio::task::JoinSet::new();
        for intent in 0..INTENTS {
            for call in 0..CALLS_PER_INTENT {
                let cluster = self.clone();
                calls.spawn(async move {
                    tokio::time::sleep(delay(intent, call)).await;
                    let order = order(intent);
                    let answer = cluster.call(intent + call, &order).await;
                    (order, answer)
                });
            }
        }
        calls.join_all().await
    }

    /// SIGKILLs a live replica every `KILL_EVERY` for `CHAOS_FOR`, one after the other, and
    /// restarts it (on the same ledger) in the background. Answers how many were killed.
    async fn kill_loop(self: &Arc<Self>) -> u64 {
        let end = Instant::now() + CHAOS_FOR;
        let count = self.urls.read().unwrap().len();
        let mut restarts: Vec<Option<tokio::task::JoinHandle<()>>> =
            (0..count).map(|_| None).collect();
        let mut kills = 0u64;
        let mut next = 0;
        while Instant::now() < end {
            tokio::time::sleep(KILL_EVERY).await;
            // The next replica that is up (not being restarted).
            let Some(slot) = (0..count)
                .map(|offset| (next + offset) % count)
                .find(|slot| {
                    restarts[*slot]
                        .as_ref()
                        .is_none_or(|task| task.is_finished())
                })
            else {
                continue;
            };
            next = slot + 1;
            self.replicas.lock().unwrap()[slot].kill();
            kills += 1;
            let cluster = self.clone();
            restarts[slot] = Some(tokio::spawn(async move {
                let spec = cluster.spec.clone();
                let fresh = tokio::task::spawn_blocking(move || spec.restart())
                    .await
                    .unwrap();
                cluster.urls.write().unwrap()[slot] = fresh.url.clone();
                // The old one is dead: dropping it only reaps it again.
                cluster.replicas.lock().unwrap()[slot] = fresh;
            }));
        }
        for restart in restarts.into_iter().flatten() {
            restart.await.unwrap();
        }
        kills
    }

    /// Heals the mock, then waits (up to `SETTLE_MAX`) until every intent with an effect is
    /// `done` and none is `in_flight` or `unknown`; then checks the effect log against the
    /// ledger and the answers, prints the line and fails on a duplicate, a loss or an
    /// answer that disagrees with the effect log.
    async fn settle_and_check(
        &self,
        name: &str,
        answers: &[(String, String)],
        kills: u64,
        unknown_allowed: bool,
    ) {
        self.faults(json!({})).await;
        let orders: Vec<String> = (0..INTENTS).map(order).collect();
        let started = Instant::now();
        let (effects, statuses) = loop {
            // Statuses first, then the effect log: an effect is made before its intent is
            // recorded done, so a `done` read here has its effect in the log read after it.
            // (Read the other way round, a re-send settling between the two reads looked
            // like "done with 0 effects".)
            let mut statuses = BTreeMap::new();
            for order in &orders {
                let status = self.status(order).await.unwrap_or_else(|| "unread".into());
                statuses.insert(order.clone(), status);
            }
            let effects = self.effects().await;
            let unsettled = orders.iter().any(|order| {
                let made = effects["by_order"][order].as_u64().unwrap_or(0);
                let status = statuses[order].as_str();
                (made > 0 && status != "done")
                    || matches!(status, "in_flight" | "unknown" | "unread")
            });
            if !unsettled || started.elapsed() > SETTLE_MAX {
                break (effects, statuses);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };

        let made = |order: &str| effects["by_order"][order].as_u64().unwrap_or(0);
        let mut duplicates: Vec<String> = effects["duplicates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|key| key.to_string())
            .collect();
        duplicates.extend(
            orders
                .iter()
                .filter(|order| made(order) > 1)
                .map(|order| format!("{order}: {} effects", made(order))),
        );
        let lost: Vec<&String> = orders
            .iter()
            .filter(|order| made(order) > 0 && statuses[*order] != "done")
            .collect();
        let unknown: Vec<&String> = orders
            .iter()
            .filter(|order| matches!(statuses[*order].as_str(), "in_flight" | "unknown"))
            .collect();
        // A done intent has its effect; a refused or not-executed one has none.
        let mut disagreements: Vec<String> = orders
            .iter()
            .filter(|order| match statuses[*order].as_str() {
                "done" => made(order) != 1,
                "rejected" | "not_executed" => made(order) != 0,
                _ => false,
            })
            .map(|order| format!("{order}: {} with {} effects", statuses[order], made(order)))
            .collect();
        let mut answered = BTreeMap::new();
        for (order, answer) in answers {
            *answered.entry(answer.clone()).or_insert(0u64) += 1;
            let wrong = match answer.as_str() {
                "done" | "already_done" => made(order) != 1,
                "rejected" => made(order) != 0,
                _ => false,
            };
            if wrong {
                disagreements.push(format!(
                    "{order}: answered {answer}, {} effects",
                    made(order)
                ));
            }
        }
        let log = self.log.lock().unwrap();
        println!(
            "{name}: intents {INTENTS}, calls {}, kills {kills}, duplicates {}, lost {}, unknown {}",
            answers.len(),
            duplicates.len(),
            lost.len(),
            unknown.len()
        );
        eprintln!(
            "{name}: answers {answered:?}, http {:?}, connection errors {}, final {:?}, settled in {:?}",
            log.http,
            log.connection_errors,
            count_values(&statuses),
            started.elapsed()
        );
        assert!(duplicates.is_empty(), "{name}: duplicates {duplicates:?}");
        assert!(lost.is_empty(), "{name}: lost {lost:?} ({statuses:?})");
        assert!(disagreements.is_empty(), "{name}: {disagreements:?}");
        assert!(
            log.http.keys().all(|code| matches!(code, 200 | 503)),
            "{name}: answers other than 200 and 503: {:?} {:?}",
            log.http,
            log.problems
        );
        assert!(
            !answered.contains_key("gave_up"),
            "{name}: calls found no live replica for {CALL_MAX:?}"
        );
        if !unknown_allowed {
            assert!(
                unknown.is_empty(),
                "{name}: the sweeper left {unknown:?} unknown (the payments upstream honours \
                 keys, so they should have been re-sent)"
            );
        }
    }
}

fn count_values(map: &BTreeMap<String, String>) -> BTreeMap<&str, u64> {
    let mut counts = BTreeMap::new();
    for value in map.values() {
        *counts.entry(value.as_str()).or_insert(0) += 1;
    }
    counts
}

/// Calls of one intent fire almost together.
fn together(_intent: usize, call: usize) -> Duration {
    Duration::from_millis((call % 4) as u64 * 20)
}

/// Calls of one intent are spread over the chaos period.
fn spread(intent: usize, call: usize) -> Duration {
    Duration::from_millis(call as u64 * 250 + (intent * 7 % 50) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_over_three_postgres_replicas_makes_one_effect_per_intent() {
    let name = "chaos (a) 3 replicas, one schema";
    let Some(url) = database_url(name) else {
        return;
    };
    // Dropped after the cluster, which is declared later: its replicas are killed first.
    let schema = Schema::fresh(&url, "chaos_a");
    let cluster = Arc::new(Cluster::start(
        &schema.name,
        3,
        Some(&url),
        Some(&schema.name),
    ));
    cluster.storm_faults(11, true).await;
    let answers = cluster.storm(together).await;
    cluster.settle_and_check(name, &answers, 0, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_killed_again_and_again_on_postgres_lose_and_repeat_nothing() {
    let name = "chaos (b) SIGKILL replicas, PostgreSQL";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "chaos_b");
    let cluster = Arc::new(Cluster::start(
        &schema.name,
        3,
        Some(&url),
        Some(&schema.name),
    ));
    cluster.storm_faults(12, false).await;
    let killer = {
        let cluster = cluster.clone();
        tokio::spawn(async move { cluster.kill_loop().await })
    };
    let answers = cluster.storm(spread).await;
    let kills = killer.await.unwrap();
    cluster.settle_and_check(name, &answers, kills, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replica_killed_again_and_again_on_sqlite_loses_and_repeats_nothing() {
    let name = "chaos (c) SIGKILL the replica, SQLite";
    let cluster = Arc::new(Cluster::start("chaos_c", 1, None, None));
    cluster.storm_faults(13, false).await;
    let killer = {
        let cluster = cluster.clone();
        tokio::spawn(async move { cluster.kill_loop().await })
    };
    let answers = cluster.storm(spread).await;
    let kills = killer.await.unwrap();
    cluster.settle_and_check(name, &answers, kills, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_connections_cut_mid_call_give_200_or_503_and_lose_nothing() {
    let name = "chaos (d) PostgreSQL connections cut";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "chaos_d");
    let cluster = Arc::new(Cluster::start(
        &schema.name,
        2,
        Some(&url),
        Some(&schema.name),
    ));
    cluster.storm_faults(14, true).await;
    // Only this test's gateways: their connections are named after the schema.
    let application_name = format!("intentgate:{}", schema.name);
    let terminator = {
        let admin = connect(&url).await;
        tokio::spawn(async move {
            let end = Instant::now() + CHAOS_FOR;
            let mut terminated = 0u64;
            while Instant::now() < end {
                tokio::time::sleep(TERMINATE_EVERY).await;
                let rows = admin
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = $1",
                        &[&application_name],
                    )
                    .await
                    .unwrap();
                terminated += rows.iter().filter(|row| row.get::<_, bool>(0)).count() as u64;
            }
            terminated
        })
    };
    let answers = cluster.storm(spread).await;
    let terminated = terminator.await.unwrap();
    assert!(terminated > 0, "{name}: no gateway connection was cut");
    cluster
        .settle_and_check(name, &answers, terminated, true)
        .await;
}

//! The fault suite: what the gateway promises when production breaks under it, checked with
//! the real `intentgate serve` replicas in front of the real `intentgate mock-provider`, all
//! on loopback.
//!
//! - **PostgreSQL failover**, with synchronous and with asynchronous replication: a primary
//!   and a streaming standby of the test's own ([`postgres_pair`]); three replicas on it serve
//!   a retry storm; the standby falls behind (its replication held by a [`proxy`]), the
//!   primary is stopped hard and the standby promoted. The replicas are given both hosts with
//!   `target_session_attrs=read-write`, and reach the new primary by themselves.
//! - **A partition between a replica and its database**, longer than every ledger timeout,
//!   then healed.
//! - **A partition between the gateway and the provider**, longer than every call and lookup
//!   timeout, then healed.
//! - **A rolling upgrade** ([`upgrade`]): replicas of the previous release replaced one at a
//!   time by this build mid-storm, the first running the migration while old ones serve.
//! - **A failing fsync under the SQLite ledger** ([`fsync`]): a shim loaded into the replica
//!   makes the ledger's syncs fail with EIO mid-storm, then succeed again; the replica is
//!   then killed and restarted on the same file.
//!
//! Each scenario checks the provider's effect log against the ledger and against every answer
//! given, and prints its figures: intents, calls, effects per intent, answers by status, time
//! to recover, and what the operator saw (`/readyz`, the calls metric, reconciliation).
//!
//! The failover scenarios need the PostgreSQL server programs (`INTENTGATE_PG_BIN`, or the
//! newest `/usr/lib/postgresql/VERSION/bin`), the database partition needs `DATABASE_URL`,
//! the rolling upgrade that and `INTENTGATE_PREVIOUS_BIN`; without them they print why they
//! are skipped, and with `CI=true` they fail instead.

#[path = "../support/mod.rs"]
mod support;

mod disk;
mod downgrade;
mod fsync;
mod postgres_pair;
mod proxy;
mod upgrade;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use postgres_pair::{Pair, Replication};
use proxy::Proxy;
use serde_json::{Value, json};
use support::{
    Running, Schema, Webhook, database_url, example_config, mock_provider, set_faults, with_setting,
};

/// Longest an HTTP client waits for one answer: longer than the slowest honest answer (a
/// ledger operation that runs into its 30 s bound).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(90);
/// Longest a storm's call keeps trying (503s and connection errors are retried).
const CALL_MAX: Duration = Duration::from_secs(45);
/// Longest wait, after a fault ends, for every intent to settle. An intent whose outcome
/// could not be recorded settles through the sweeper once its lease expires (sweeps every
/// 10 s): about 16 s on an idle machine, several times that on a loaded CI one.
const SETTLE_MAX: Duration = Duration::from_secs(120);
/// Calls per intent in a storm: the model, the framework, the HTTP client and the user each
/// ask again (3 x 2 x 2, the low end of the stacked retries that make 18).
const CALLS_PER_INTENT: usize = 12;
/// How often the operator's probe asks every replica's `/readyz`.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// The config every scenario starts from: the example's, with `timeout_ms` on every tool
/// and lookup, `retry_budget` retries of not-processed answers, the payments team's notices
/// posted to `webhook` too, and a reconciliation that looks at everything at once (no
/// settle time, no grace for unknown intents).
fn config(folder: &Path, timeout_ms: u64, retry_budget: u64, webhook: &str) -> PathBuf {
    example_config(folder, |text| {
        assert!(text.contains("payments-team: {log: true}"));
        let text = text.replace(
            "payments-team: {log: true}",
            &format!("payments-team: {{log: true, webhook: \"{webhook}\"}}"),
        );
        let text = with_setting(&text, "timeout_ms", timeout_ms);
        let text = with_setting(&text, "retry_budget", retry_budget);
        format!("{text}\nreconcile: {{settle_seconds: 0, unknown_grace_seconds: 0}}\n")
    })
}

fn refund(order: &str) -> Value {
    json!({"order_id": order, "amount": 25.0, "reason": "requested_by_customer"})
}

/// The PostgreSQL server programs, or None (with a message) when `test` can't run here.
/// With CI=true that fails the test instead.
fn server_binaries(test: &str) -> Option<PathBuf> {
    match postgres_pair::binaries() {
        Ok(bin) => Some(bin),
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: no PostgreSQL server programs ({why}), and with CI=true the fault suite \
                 must run, not be skipped"
            );
            println!(
                "{test}: skipped: no PostgreSQL server programs ({why}); install PostgreSQL's \
                 server package or set INTENTGATE_PG_BIN to the folder of initdb and pg_ctl"
            );
            None
        }
    }
}

/// What one call ended with: the outcome's status, `http_CODE` for an answer that is not a
/// 200 or a 503, or `gave_up` when every try got a 503 or a connection error.
type Answer = String;

/// The mock provider and the gateway replicas in front of it, and what the clients saw.
struct Fleet {
    mock: Running,
    /// The replicas, in the order added; one is replaced in place during a rolling upgrade.
    replicas: RwLock<Vec<Running>>,
    client: reqwest::Client,
    config: PathBuf,
    log: PathBuf,
    /// Every HTTP answer by code, every try counted, and tries without an answer.
    http: Mutex<BTreeMap<String, u64>>,
    /// Answers that were neither a 200 nor a 503, for the failure message.
    problems: Mutex<Vec<String>>,
    /// Where the payments team's notices arrive (duplicate-call alerts, reconciliation).
    webhook: Webhook,
    folder: tempfile::TempDir,
}

impl Fleet {
    /// The mock (quiet) and a config with `timeout_ms` and `retry_budget`; no replica yet.
    async fn new(name: &str, timeout_ms: u64, retry_budget: u64) -> Fleet {
        let folder = tempfile::tempdir().unwrap();
        let webhook = Webhook::start().await;
        let config = config(folder.path(), timeout_ms, retry_budget, &webhook.url);
        Fleet {
            mock: mock_provider(),
            replicas: RwLock::default(),
            client: intentgate_test_support::http::client(Some(CLIENT_TIMEOUT)),
            config,
            log: std::env::var_os("FAULTS_LOGS").map_or_else(
                || folder.path().join("replicas.log"),
                |logs| PathBuf::from(logs).join(format!("{}.log", name.replace(' ', "_"))),
            ),
            http: Mutex::default(),
            problems: Mutex::default(),
            webhook,
            folder,
        }
    }

    /// One more replica on `ledger`, calling the provider at `provider` (the mock, or a proxy
    /// in front of it), with `schema` when given.
    fn add_replica(&mut self, ledger: &str, provider: &str, schema: Option<&str>) -> usize {
        self.add_replica_with_env(ledger, provider, schema, &[])
    }

    /// [`Fleet::add_replica`], with `extra` added to the replica's environment.
    fn add_replica_with_env(
        &mut self,
        ledger: &str,
        provider: &str,
        schema: Option<&str>,
        extra: &[(&str, &str)],
    ) -> usize {
        let replica = self.start_replica(None, ledger, provider, schema, extra);
        let replicas = self.replicas.get_mut().unwrap();
        replicas.push(replica);
        replicas.len() - 1
    }

    /// A replica as [`Fleet::add_replica_with_env`] starts it, of `binary` (another build of
    /// `intentgate`) when given, not yet in the fleet.
    fn start_replica(
        &self,
        binary: Option<&Path>,
        ledger: &str,
        provider: &str,
        schema: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Running {
        let mut env = vec![("INTENTGATE_MOCK_URL", provider), ("RUST_LOG", "info")];
        if let Some(schema) = schema {
            env.push(("INTENTGATE_LEDGER_SCHEMA", schema));
        }
        env.extend_from_slice(extra);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        support::try_serve_binary_with_stderr(
            binary,
            self.config.to_str().unwrap(),
            ledger,
            &env,
            log,
        )
        .unwrap_or_else(|problem| panic!("{problem}; the replicas' log:\n{}", self.log_tail()))
    }

    /// Every replica's URL, in order.
    fn urls(&self) -> Vec<String> {
        let replicas = self.replicas.read().unwrap();
        replicas.iter().map(|replica| replica.url.clone()).collect()
    }

    /// The owner's notices received so far, by kind.
    fn notices(&self) -> BTreeMap<String, u64> {
        let mut kinds = BTreeMap::new();
        for (_, notice) in self.webhook.notices() {
            let kind = notice["kind"].as_str().unwrap_or("unnamed").to_owned();
            *kinds.entry(kind).or_insert(0) += 1;
        }
        kinds
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn url(&self, replica: usize) -> String {
        let replicas = self.replicas.read().unwrap();
        replicas[replica % replicas.len()].url.clone()
    }

    async fn faults(&self, plan: Value) {
        set_faults(&self.client, &self.mock, None, plan).await;
    }

    fn count_http(&self, what: String) {
        *self.http.lock().unwrap().entry(what).or_insert(0) += 1;
    }

    /// One try of a call of `refund_order` for `order` at replica `replica`: the outcome's
    /// status, `http_503` (nothing executed, try again), `http_CODE`, or `connection_error`.
    async fn try_call(&self, replica: usize, order: &str) -> Answer {
        let sent = self
            .client
            .post(format!("{}/v1/tools/refund_order/call", self.url(replica)))
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
            self.count_http("connection_error".to_owned());
            return "connection_error".to_owned();
        };
        self.count_http(code.to_string());
        match code {
            200 => {
                let outcome: Value = serde_json::from_str(&body).unwrap_or_default();
                outcome["status"]
                    .as_str()
                    .map_or_else(|| format!("unreadable: {body}"), str::to_owned)
            }
            503 => {
                let problem: Value = serde_json::from_str(&body).unwrap_or_default();
                let detail = problem["detail"].as_str().unwrap_or_default();
                // What the gateway promises with a 503: nothing was executed.
                if !detail.contains("nothing was executed") && !detail.is_empty() {
                    self.problems.lock().unwrap().push(format!("503: {body}"));
                }
                "http_503".to_owned()
            }
            _ => {
                self.problems
                    .lock()
                    .unwrap()
                    .push(format!("{code}: {body}"));
                format!("http_{code}")
            }
        }
    }

    /// A call the way a client behind a load balancer makes it: to replica `first`, and on a
    /// 503 or a connection error again, to the next one, for up to [`CALL_MAX`].
    async fn call(&self, first: usize, order: &str) -> Answer {
        let deadline = Instant::now() + CALL_MAX;
        let mut replica = first;
        while Instant::now() < deadline {
            let answer = self.try_call(replica, order).await;
            if answer != "http_503" && answer != "connection_error" {
                return answer;
            }
            replica += 1;
            // The HTTP client's backoff before it tries again.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        "gave_up".to_owned()
    }

    /// A storm over `orders`: `CALLS_PER_INTENT` calls of each, call `j` of intent `i` first
    /// to replica `i + j`, started after `delay(i, j)`. Answers (order, answer) per call.
    async fn storm(
        self: &Arc<Self>,
        orders: &[String],
        delay: fn(usize, usize) -> Duration,
    ) -> Vec<(String, Answer)> {
        let mut calls = tokio::task::JoinSet::new();
        for (intent, order) in orders.iter().enumerate() {
            for call in 0..CALLS_PER_INTENT {
                let fleet = self.clone();
                let order = order.clone();
                calls.spawn(async move {
                    tokio::time::sleep(delay(intent, call)).await;
                    let answer = fleet.call(intent + call, &order).await;
                    (order, answer)
                });
            }
        }
        calls.join_all().await
    }

    /// Refunds per order at the provider, and the intent keys it has more than one effect for.
    async fn effects(&self) -> (BTreeMap<String, u64>, Vec<String>) {
        let effects =
            support::get_json(&self.client, format!("{}/admin/effects", self.mock.url)).await;
        let by_order = effects["by_order"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(order, count)| (order.clone(), count.as_u64().unwrap()))
            .collect();
        let duplicates = effects["duplicates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|key| key.to_string())
            .collect();
        (by_order, duplicates)
    }

    /// The intent's status as replica `replica` reads it: `missing` when the ledger has no
    /// such intent, `unread` when the replica could not say.
    async fn status(&self, replica: usize, order: &str) -> String {
        let url = format!(
            "{}/v1/intents/refund_order/refund:{order}:25.00",
            self.url(replica)
        );
        let Ok(response) = self.client.get(url).send().await else {
            return "unread".to_owned();
        };
        match response.status().as_u16() {
            200 => {
                let intent: Value = response.json().await.unwrap_or_default();
                intent["status"].as_str().unwrap_or("unread").to_owned()
            }
            404 => "missing".to_owned(),
            _ => "unread".to_owned(),
        }
    }

    /// Waits (up to [`SETTLE_MAX`]) until no intent of `orders` is `in_flight` or `unknown`
    /// and every one the provider has an effect for is `done` (or, when `missing_allowed`,
    /// absent from the ledger); answers the statuses, the effects and how long it took.
    async fn settle(
        &self,
        replica: usize,
        orders: &[String],
        missing_allowed: bool,
    ) -> (BTreeMap<String, String>, BTreeMap<String, u64>, Duration) {
        let started = Instant::now();
        loop {
            // Statuses first, then the effects: an effect is made before its intent is
            // recorded done, so a `done` read here has its effect in the counts read after.
            let mut statuses = BTreeMap::new();
            for order in orders {
                statuses.insert(order.clone(), self.status(replica, order).await);
            }
            let (effects, _) = self.effects().await;
            let unsettled = orders.iter().any(|order| {
                let made = effects.get(order).copied().unwrap_or(0);
                let status = statuses[order].as_str();
                matches!(status, "in_flight" | "unknown" | "unread")
                    || (made > 0 && status != "done" && !(missing_allowed && status == "missing"))
            });
            if !unsettled || started.elapsed() > SETTLE_MAX {
                return (statuses, effects, started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// `intentgate_calls_total` of `refund_order` by status, added up over the replicas
    /// that answer.
    async fn calls_metric(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for url in self.urls() {
            let Ok(response) = self.client.get(format!("{url}/metrics")).send().await else {
                continue;
            };
            let text = response.text().await.unwrap_or_default();
            for line in text.lines() {
                let Some(rest) = line.strip_prefix("intentgate_calls_total{") else {
                    continue;
                };
                if !rest.contains("tool=\"refund_order\"") {
                    continue;
                }
                let Some(status) = rest
                    .split("status=\"")
                    .nth(1)
                    .and_then(|tail| tail.split('"').next())
                else {
                    continue;
                };
                let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap_or(0.0);
                *counts.entry(status.to_owned()).or_insert(0) += value as u64;
            }
        }
        counts
    }

    /// `intentgate reconcile --format json` over `ledger`: its mismatches (kind, order).
    fn reconcile(&self, ledger: &str, schema: Option<&str>) -> Vec<(String, String)> {
        let mut command = support::intentgate();
        command
            .args([
                "reconcile",
                "--config",
                self.config.to_str().unwrap(),
                "--ledger",
                ledger,
                "--since",
                "1h",
                "--format",
                "json",
            ])
            .env("INTENTGATE_MOCK_URL", &self.mock.url);
        if let Some(schema) = schema {
            command.env("INTENTGATE_LEDGER_SCHEMA", schema);
        }
        let output = command.output().unwrap();
        assert!(
            matches!(output.status.code(), Some(0 | 2)),
            "reconcile could not run: {output:?}"
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["type"] != "summary")
            .map(|line| {
                (
                    line["kind"].as_str().unwrap_or_default().to_owned(),
                    line["subject"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

/// What one replica did once a fault under its ledger had ended ([`recover`]).
struct Recovery {
    /// From the fault's end until a fresh call was served.
    served_again_in: Duration,
    /// Every intent: the groups of before the end, the fresh calls (g), the storm after (r).
    all: Vec<String>,
    /// Every call of group r's storm.
    answers_r: Vec<(String, Answer)>,
    /// Every intent asked once more.
    answers_after: Vec<(String, Answer)>,
    statuses: BTreeMap<String, String>,
    effects: BTreeMap<String, u64>,
    /// From the storm after until every intent settled.
    settled_in: Duration,
    /// From the fault's end until every intent settled.
    recovered_in: Duration,
    /// What the operator's probe saw, stopped after the storm.
    readiness: Readiness,
    /// `/readyz` at the end.
    ready_after: u16,
}

/// After a fault under replica 0's ledger ended at `ended_at` (`what_ended` for messages):
/// fresh calls until one is served (group g, for 30 s at most), a storm of `group_size`
/// intents (group r), the readiness `probe` stopped, then every intent (`before`'s, g's and
/// r's) asked once more and settled.
async fn recover(
    fleet: &Arc<Fleet>,
    name: &str,
    what_ended: &str,
    ended_at: Instant,
    before: Vec<Vec<String>>,
    group_size: usize,
    (stop_probe, probe): (
        Arc<std::sync::atomic::AtomicBool>,
        tokio::task::JoinHandle<Readiness>,
    ),
) -> Recovery {
    let mut recovery_probes = 0;
    let (_, served_again_in) = support::until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            recovery_probes += 1;
            let order = format!("g{recovery_probes}");
            match fleet.try_call(0, &order).await.as_str() {
                "done" => Ok(()),
                answer => Err(format!(
                    "{name}: 30 s after {what_ended} a fresh call answers {answer}"
                )),
            }
        },
    )
    .await;
    let group_g = orders("g", recovery_probes + 1)[1..].to_vec();

    // Group r: a storm after the fault.
    let group_r = orders("r", group_size);
    let answers_r = fleet.storm(&group_r, together).await;
    stop_probe.store(true, std::sync::atomic::Ordering::SeqCst);
    let readiness = probe.await.unwrap();

    // Every intent is asked once more, and settles.
    let all: Vec<String> = [before, vec![group_g, group_r]].concat().concat();
    let mut answers_after = Vec::new();
    for order in &all {
        answers_after.push((order.clone(), fleet.call(0, order).await));
    }
    let (statuses, effects, settled_in) = fleet.settle(0, &all, false).await;
    let recovered_in = ended_at.elapsed();
    let ready_after = fleet
        .client
        .get(format!("{}/readyz", fleet.url(0)))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    Recovery {
        served_again_in,
        all,
        answers_r,
        answers_after,
        statuses,
        effects,
        settled_in,
        recovered_in,
        readiness,
        ready_after,
    }
}

/// What the operator's probe saw of `/readyz`, per replica, over a fault.
#[derive(Default, Debug)]
struct Readiness {
    /// Probes answered 200, answered otherwise, not answered, per replica.
    ready: BTreeMap<usize, u64>,
    not_ready: BTreeMap<usize, u64>,
    /// When each replica was last seen not ready.
    last_not_ready: BTreeMap<usize, Instant>,
    /// The first detail of a 503, as an operator reads it.
    detail: Option<String>,
}

/// Asks every replica's `/readyz` every [`PROBE_EVERY`] until `stop` is set.
fn probe_readiness(
    fleet: &Arc<Fleet>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Readiness> {
    let fleet = fleet.clone();
    tokio::spawn(async move {
        let mut seen = Readiness::default();
        let probe = intentgate_test_support::http::client(Some(Duration::from_secs(5)));
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for (index, url) in fleet.urls().into_iter().enumerate() {
                let answer = probe.get(format!("{url}/readyz")).send().await;
                match answer {
                    Ok(response) if response.status().is_success() => {
                        *seen.ready.entry(index).or_insert(0) += 1;
                    }
                    other => {
                        *seen.not_ready.entry(index).or_insert(0) += 1;
                        seen.last_not_ready.insert(index, Instant::now());
                        if seen.detail.is_none()
                            && let Ok(response) = other
                        {
                            let body: Value = response.json().await.unwrap_or_default();
                            seen.detail = body["detail"].as_str().map(str::to_owned);
                        }
                    }
                }
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        seen
    })
}

fn count<'a>(values: impl IntoIterator<Item = &'a String>) -> BTreeMap<&'a str, u64> {
    let mut counts = BTreeMap::new();
    for value in values {
        *counts.entry(value.as_str()).or_insert(0) += 1;
    }
    counts
}

/// How many intents have 0, 1, 2... effects at the provider.
fn effects_per_intent(orders: &[String], effects: &BTreeMap<String, u64>) -> BTreeMap<u64, u64> {
    let mut histogram = BTreeMap::new();
    for order in orders {
        *histogram
            .entry(effects.get(order).copied().unwrap_or(0))
            .or_insert(0) += 1;
    }
    histogram
}

/// The promises every scenario checks once its intents have settled: no intent has two
/// effects; an intent the provider has an effect for is `done` (unless `missing_allowed`
/// leaves an intent absent from the ledger to the caller's checks); and no answer disagrees
/// with the provider: `done` and `already_done` only with the effect, `rejected` only
/// without. Answers the lost and the misreported, for the figures.
fn check_promises(
    name: &str,
    orders: &[String],
    answers: &[(String, Answer)],
    statuses: &BTreeMap<String, String>,
    effects: &BTreeMap<String, u64>,
    duplicates: &[String],
    missing_allowed: bool,
) -> (Vec<String>, Vec<String>) {
    let made = |order: &str| effects.get(order).copied().unwrap_or(0);
    let twice: Vec<String> = orders
        .iter()
        .filter(|order| made(order) > 1)
        .map(|order| format!("{order}: {} effects", made(order)))
        .chain(duplicates.iter().cloned())
        .collect();
    let lost: Vec<String> = orders
        .iter()
        .filter(|order| {
            made(order) > 0
                && statuses[*order] != "done"
                && !(missing_allowed && statuses[*order] == "missing")
        })
        .map(|order| format!("{order}: {} with {} effects", statuses[order], made(order)))
        .collect();
    let mut misreported: Vec<String> = orders
        .iter()
        .filter(|order| match statuses[*order].as_str() {
            "done" => made(order) != 1,
            "rejected" | "not_executed" => made(order) != 0,
            _ => false,
        })
        .map(|order| {
            format!(
                "{order}: recorded {} with {} effects",
                statuses[order],
                made(order)
            )
        })
        .collect();
    for (order, answer) in answers {
        let wrong = match answer.as_str() {
            "done" | "already_done" => made(order) != 1,
            "rejected" => made(order) != 0,
            _ => false,
        };
        if wrong {
            misreported.push(format!(
                "{order}: answered {answer}, {} effects",
                made(order)
            ));
        }
    }
    assert!(twice.is_empty(), "{name}: duplicates {twice:?}");
    assert!(lost.is_empty(), "{name}: lost {lost:?}");
    assert!(
        misreported.is_empty(),
        "{name}: misreported {misreported:?}"
    );
    (lost, misreported)
}

fn orders(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|index| format!("{prefix}{index}")).collect()
}

/// Calls of one intent fire almost together.
fn together(_intent: usize, call: usize) -> Duration {
    Duration::from_millis((call % 4) as u64 * 20)
}

/// Calls of one intent are spread over three seconds.
fn spread(intent: usize, call: usize) -> Duration {
    Duration::from_millis(call as u64 * 250 + (intent * 7 % 50) as u64)
}

// ------------------------------------------------------------------------------------------
// 1. PostgreSQL failover
// ------------------------------------------------------------------------------------------

/// Intents of each of the failover's three groups.
const FAILOVER_GROUP: usize = 10;
/// Tool timeout in the failover scenarios: the provider answers at once here, the fault
/// under test is the database's.
const FAILOVER_TIMEOUT_MS: u64 = 2_000;
/// How long, with synchronous replication, the standby is held behind before the primary
/// is stopped: the commits made meanwhile wait for it.
const LAG_FOR: Duration = Duration::from_millis(1_500);
/// Longest wait, with asynchronous replication, for group b's storm to be answered while
/// the standby is held behind.
const B_ANSWERED_MAX: Duration = Duration::from_secs(30);
/// Provider faults during the failover storm: refusals and not-processed answers (each
/// intent still ends with one effect or none, and every outcome is definite).
const FAILOVER_FAULTS: &str = r#"{"reject": 30, "rate_limited": 50, "unavailable": 30}"#;

/// The failover scenario in `mode`. Group `a` is called while the standby keeps up; then
/// the standby's replication is held, and group `b` is called (with asynchronous
/// replication its calls are answered from commits the standby never gets; with
/// synchronous replication they wait for it); then group `c`'s storm starts, and while it
/// runs the primary is stopped hard and the standby promoted.
async fn failover(name: &str, mode: Replication, seed: u64) {
    let Some(bin) = server_binaries(name) else {
        return;
    };
    let pair = Pair::start(bin, mode).await;
    let ledger = pair.url();
    let mut fleet = Fleet::new(name, FAILOVER_TIMEOUT_MS, 1).await;
    let mock_url = fleet.mock.url.clone();
    for _ in 0..3 {
        fleet.add_replica(&ledger, &mock_url, None);
    }
    let fleet = Arc::new(fleet);
    let mut faults: Value = serde_json::from_str(FAILOVER_FAULTS).unwrap();
    faults["seed"] = json!(seed);
    fleet.faults(faults).await;
    let (group_a, group_b, group_c) = (
        orders("a", FAILOVER_GROUP),
        orders("b", FAILOVER_GROUP),
        orders("c", FAILOVER_GROUP),
    );
    let stop_probe = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = probe_readiness(&fleet, stop_probe.clone());

    let mut answers = fleet.storm(&group_a, together).await;

    pair.replication.partition();
    let lag_started = Instant::now();
    let storm_b = {
        let (fleet, group_b) = (fleet.clone(), group_b.clone());
        tokio::spawn(async move { fleet.storm(&group_b, together).await })
    };
    // Asynchronous: group b's storm is answered from commits the standby never receives.
    // Synchronous: its first commits wait for the standby, so nothing of it is sent, and
    // they are still waiting when the primary stops.
    let mut storm_b = storm_b;
    let b_answered_before_failover = match mode {
        Replication::Asynchronous => Some(
            tokio::time::timeout(B_ANSWERED_MAX, &mut storm_b)
                .await
                .unwrap_or_else(|_| panic!("{name}: group b unanswered after {B_ANSWERED_MAX:?}"))
                .unwrap(),
        ),
        Replication::Synchronous => {
            let answered = tokio::time::timeout(LAG_FOR, &mut storm_b).await;
            assert!(
                answered.is_err(),
                "{name}: group b was answered while the standby received nothing"
            );
            None
        }
    };
    let (effects_before, _) = fleet.effects().await;
    let b_sent_before_failover: Vec<String> = group_b
        .iter()
        .filter(|order| effects_before.contains_key(*order))
        .cloned()
        .collect();
    let storm_c = {
        let (fleet, group_c) = (fleet.clone(), group_c.clone());
        tokio::spawn(async move { fleet.storm(&group_c, spread).await })
    };
    // Group c's first calls are on their way; the primary goes now.
    let mut pair = pair;
    let lag = lag_started.elapsed();
    let failover_started = Instant::now();
    let pair = tokio::task::spawn_blocking(move || {
        pair.fail_over();
        pair
    })
    .await
    .unwrap();
    let promoted_in = failover_started.elapsed();
    let answers_b = match b_answered_before_failover {
        Some(answered) => answered,
        None => storm_b.await.unwrap(),
    };
    let b_done = answers_b
        .iter()
        .filter(|(_, answer)| matches!(answer.as_str(), "done" | "already_done"))
        .count();
    answers.extend(answers_b);
    answers.extend(storm_c.await.unwrap());
    stop_probe.store(true, std::sync::atomic::Ordering::SeqCst);
    let readiness = probe.await.unwrap();
    let recovered_in = readiness
        .last_not_ready
        .values()
        .max()
        .map(|last| last.saturating_duration_since(failover_started));

    fleet.faults(json!({})).await;
    let all: Vec<String> = [group_a.clone(), group_b.clone(), group_c.clone()].concat();
    let asynchronous = mode == Replication::Asynchronous;
    let (statuses, effects, settled_in) = fleet.settle(0, &all, asynchronous).await;
    let (_, duplicates) = fleet.effects().await;

    // Intents the provider has an effect for and the new primary has no record of: their
    // records were committed on the old primary only.
    let records_lost: Vec<String> = all
        .iter()
        .filter(|order| {
            statuses[*order] == "missing" && effects.get(*order).copied().unwrap_or(0) > 0
        })
        .cloned()
        .collect();
    let reconciled = fleet.reconcile(&ledger, None);
    let reported: BTreeSet<&str> = reconciled
        .iter()
        .filter(|(kind, _)| kind == "no_intent")
        .map(|(_, order)| order.as_str())
        .collect();
    let unreported: Vec<&String> = records_lost
        .iter()
        .filter(|order| !reported.contains(order.as_str()))
        .collect();
    // The user asks again about each: the gateway finds the effect by its key.
    let mut found_again = Vec::new();
    for order in &records_lost {
        found_again.push((order.clone(), fleet.call(0, order).await));
    }
    let (statuses, effects, _) = fleet.settle(0, &all, false).await;
    answers.extend(found_again.iter().cloned());
    let metric = fleet.calls_metric().await;
    check_promises(
        name,
        &all,
        &answers,
        &statuses,
        &effects,
        &duplicates,
        false,
    );

    let notices = fleet.notices();
    println!(
        "{name}: intents {}, calls {}, effects per intent {:?}, answers {:?}, http {:?}, \
         group b with effects before the failover {} ({b_done} done answers), standby held back {lag:?}, \
         promoted in {promoted_in:?}, replicas ready again {recovered_in:?} after the \
         failover began, settled {settled_in:?} after the storm, records lost {} \
         ({records_lost:?}), reported by reconciliation {} ({reconciled:?}), found again {:?}, \
         /readyz not ready {:?} times (ready {:?}) saying {:?}, calls metric {metric:?}, \
         owner's notices {notices:?}",
        all.len(),
        answers.len(),
        effects_per_intent(&all, &effects),
        count(answers.iter().map(|(_, answer)| answer)),
        fleet.http.lock().unwrap(),
        b_sent_before_failover.len(),
        records_lost.len(),
        reported.len(),
        found_again,
        readiness.not_ready,
        readiness.ready,
        readiness.detail,
    );
    assert!(
        fleet.problems.lock().unwrap().is_empty(),
        "{name}: answers other than 200 and 503 (nothing executed): {:?}",
        fleet.problems.lock().unwrap()
    );
    assert!(
        !answers.iter().any(|(_, answer)| answer == "gave_up"),
        "{name}: calls found no replica to serve them for {CALL_MAX:?}"
    );
    // The owner was told: reconciliation's notice counts each of them.
    let reconciliation_notice = fleet
        .webhook
        .notices()
        .into_iter()
        .rev()
        .find(|(_, notice)| notice["kind"] == "reconciliation");
    let notified = reconciliation_notice
        .as_ref()
        .and_then(|(_, notice)| notice["details"]["counts"]["no_intent"].as_u64())
        .unwrap_or(0);
    assert_eq!(
        notified as usize,
        records_lost.len(),
        "{name}: the owner's notice does not count every effect whose record was lost: \
         {reconciliation_notice:?}"
    );
    assert!(
        unreported.is_empty(),
        "{name}: effects whose records were lost and that reconciliation did not report: \
         {unreported:?}"
    );
    assert!(
        found_again
            .iter()
            .all(|(_, answer)| matches!(answer.as_str(), "done" | "already_done")),
        "{name}: an effect whose record was lost was not found again: {found_again:?}"
    );
    match mode {
        Replication::Synchronous => {
            assert!(
                b_sent_before_failover.is_empty(),
                "{name}: requests left before the standby had their in_flight records: \
                 {b_sent_before_failover:?}"
            );
            assert!(
                records_lost.is_empty(),
                "{name}: with synchronous replication no record of an effect may be lost: \
                 {records_lost:?}"
            );
        }
        // Group b's effects were made on commits the standby never received: each one's
        // record is lost, and was found again above.
        Replication::Asynchronous => {
            assert!(
                !b_sent_before_failover.is_empty(),
                "{name}: group b made no effect before the failover; the scenario did not \
                 exercise what asynchronous replication can lose"
            );
            let kept: Vec<&String> = b_sent_before_failover
                .iter()
                .filter(|order| !records_lost.contains(order))
                .collect();
            assert!(
                kept.is_empty(),
                "{name}: records committed while the standby received nothing survived the \
                 failover: {kept:?}"
            );
        }
    }
    drop(pair);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_with_synchronous_replication_loses_and_repeats_nothing() {
    failover(
        "failover (synchronous replication)",
        Replication::Synchronous,
        21,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_with_asynchronous_replication_reports_every_record_it_lost() {
    failover(
        "failover (asynchronous replication)",
        Replication::Asynchronous,
        22,
    )
    .await;
}

// ------------------------------------------------------------------------------------------
// 2. A partition between a replica and its database
// ------------------------------------------------------------------------------------------

/// The ledger's longest bound on one operation ([`intentgate_ledger::postgres`]'s
/// `OPERATION_TIMEOUT`): the partition lasts longer.
const LEDGER_OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the database partition lasts at least: past every ledger timeout.
const DATABASE_PARTITION_MIN: Duration = Duration::from_secs(33);
/// How long the provider holds each answer in the partition scenarios, after it has made
/// the effect: the calls are in flight when the partition begins.
const ANSWER_HOLD_MS: u64 = 1_000;
/// Tool timeout of the partition scenarios: longer than the answer hold.
const PARTITION_TIMEOUT_MS: u64 = 3_000;
/// Intents of each group in the partition scenarios.
const PARTITION_GROUP: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_cut_off_from_its_database_answers_honestly_and_recovers() {
    let name = "partition replica <-> database";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = Schema::fresh(&url, "faults_db_partition");
    let database: std::net::SocketAddr = {
        let config: tokio_postgres::Config = url.parse().unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            #[allow(unreachable_patterns)]
            _ => panic!("{name}: DATABASE_URL must name a TCP host"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        tokio::net::lookup_host((host.as_str(), port))
            .await
            .unwrap()
            .next()
            .unwrap()
    };
    let proxy = Proxy::start(database).await;
    let proxied_url = {
        let (before, after) = url.split_once('@').expect("DATABASE_URL names a user");
        let rest = after.split_once('/').map_or("", |(_, rest)| rest);
        format!("{before}@{}/{rest}", proxy.host_port())
    };

    let mut fleet = Fleet::new(name, PARTITION_TIMEOUT_MS, 1).await;
    let mock_url = fleet.mock.url.clone();
    // Replica 0 reaches the database through the proxy; replica 1 directly.
    let cut = fleet.add_replica(&proxied_url, &mock_url, Some(&schema.name));
    let whole = fleet.add_replica(&url, &mock_url, Some(&schema.name));
    let fleet = Arc::new(fleet);
    fleet
        .faults(json!({"latency_p50_ms": ANSWER_HOLD_MS, "latency_p95_ms": ANSWER_HOLD_MS}))
        .await;
    let stop_probe = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = probe_readiness(&fleet, stop_probe.clone());

    // Group p: in flight at the provider (the effect made, its answer held) when the
    // partition begins, so their outcomes can't be recorded.
    let group_p = orders("p", PARTITION_GROUP);
    let mut in_flight = tokio::task::JoinSet::new();
    for order in &group_p {
        let (fleet, order) = (fleet.clone(), order.clone());
        in_flight.spawn(async move {
            let answer = fleet.try_call(cut, &order).await;
            (order, answer)
        });
    }
    support::until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        async || {
            let (effects, _) = fleet.effects().await;
            let made = group_p
                .iter()
                .filter(|order| effects.contains_key(*order))
                .count();
            if made == group_p.len() {
                Ok(())
            } else {
                Err(format!(
                    "{name}: only {made} of group p reached the provider"
                ))
            }
        },
    )
    .await;
    proxy.partition();
    let partitioned_at = Instant::now();

    // Group q: new intents called on the cut-off replica during the partition; group p
    // asked again there; group r called on the replica that still reaches the database.
    let group_q = orders("q", PARTITION_GROUP);
    let group_r = orders("r", PARTITION_GROUP);
    let mut during = tokio::task::JoinSet::new();
    for order in group_q.iter().chain(&group_p) {
        let (fleet, order) = (fleet.clone(), order.clone());
        during.spawn(async move {
            let started = Instant::now();
            let answer = fleet.try_call(cut, &order).await;
            (order, answer, started.elapsed())
        });
    }
    let mut answers_r = Vec::new();
    for order in &group_r {
        answers_r.push((order.clone(), fleet.try_call(whole, order).await));
    }
    let answers_p: Vec<(String, Answer)> = in_flight.join_all().await;
    let answers_during = during.join_all().await;
    let slowest = answers_during
        .iter()
        .map(|(_, _, took)| *took)
        .max()
        .unwrap_or_default();
    // Nothing of group q was sent: the provider has no effect for it.
    let (effects, _) = fleet.effects().await;
    let q_sent: Vec<&String> = group_q
        .iter()
        .filter(|order| effects.contains_key(*order))
        .collect();
    // The partition outlasts every ledger timeout.
    let remaining = DATABASE_PARTITION_MIN.saturating_sub(partitioned_at.elapsed());
    tokio::time::sleep(remaining).await;
    let partition_lasted = partitioned_at.elapsed();
    proxy.heal();
    let healed_at = Instant::now();
    let (_, ready_in) = support::until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let response = fleet
                .client
                .get(format!("{}/readyz", fleet.url(cut)))
                .send()
                .await
                .map_err(|error| error.to_string())?;
            if response.status().is_success() {
                Ok(())
            } else {
                Err(format!(
                    "{name}: the replica is not ready 30 s after the heal"
                ))
            }
        },
    )
    .await;
    stop_probe.store(true, std::sync::atomic::Ordering::SeqCst);
    let readiness = probe.await.unwrap();

    // After the heal every intent is asked once more on the replica that was cut off.
    let all: Vec<String> = [group_p.clone(), group_q.clone(), group_r.clone()].concat();
    let mut answers_after = Vec::new();
    for order in &all {
        answers_after.push((order.clone(), fleet.call(cut, order).await));
    }
    let (statuses, effects, _) = fleet.settle(cut, &all, false).await;
    let recovered_in = healed_at.elapsed();
    let (_, duplicates) = fleet.effects().await;
    let mut answers: Vec<(String, Answer)> = answers_p.clone();
    answers.extend(
        answers_during
            .iter()
            .map(|(order, answer, _)| (order.clone(), answer.clone())),
    );
    answers.extend(answers_r.clone());
    answers.extend(answers_after.clone());
    let metric = fleet.calls_metric().await;
    check_promises(
        name,
        &all,
        &answers,
        &statuses,
        &effects,
        &duplicates,
        false,
    );

    let during_answers = count(answers_during.iter().map(|(_, answer, _)| answer));
    let notices = fleet.notices();
    println!(
        "{name}: intents {}, calls {}, effects per intent {:?}, in flight when cut {:?}, \
         during the partition {during_answers:?} (slowest {slowest:?}), on the other replica \
         {:?}, after the heal {:?}, partition {partition_lasted:?}, ready again \
         {ready_in:?} after the heal, settled {:?} after the heal, /readyz not ready {:?} \
         times (ready {:?}) saying {:?}, calls metric {metric:?}, owner's notices \
         {notices:?}",
        all.len(),
        answers.len(),
        effects_per_intent(&all, &effects),
        count(answers_p.iter().map(|(_, answer)| answer)),
        count(answers_r.iter().map(|(_, answer)| answer)),
        count(answers_after.iter().map(|(_, answer)| answer)),
        recovered_in,
        readiness.not_ready,
        readiness.ready,
        readiness.detail,
    );
    // Nothing was sent for a call answered "nothing was executed".
    assert!(
        q_sent.is_empty(),
        "{name}: sent during the partition: {q_sent:?}"
    );
    // Each call during the partition was answered, within the ledger's bound and a margin,
    // with a 503 that says nothing was executed, or a status that is true.
    for (order, answer, took) in &answers_during {
        assert!(
            matches!(
                answer.as_str(),
                "http_503" | "pending_unknown" | "done" | "already_done"
            ),
            "{name}: {order} answered {answer} during the partition"
        );
        assert!(
            *took < LEDGER_OPERATION_TIMEOUT + Duration::from_secs(15),
            "{name}: {order} was answered only after {took:?}: a ledger operation is not \
             bounded"
        );
    }
    for (order, answer) in &answers_p {
        assert!(
            matches!(answer.as_str(), "done" | "pending_unknown" | "http_503"),
            "{name}: {order}, in flight when the partition began, answered {answer}"
        );
    }
    assert!(
        answers_r.iter().all(|(_, answer)| answer == "done"),
        "{name}: the replica that reaches the database did not serve: {answers_r:?}"
    );
    assert!(
        readiness.not_ready.get(&cut).copied().unwrap_or(0) > 0,
        "{name}: /readyz never said the cut-off replica was not ready"
    );
    assert_eq!(
        readiness.not_ready.get(&whole).copied().unwrap_or(0),
        0,
        "{name}: /readyz said the replica that reaches the database was not ready"
    );
    assert!(
        fleet.problems.lock().unwrap().is_empty(),
        "{name}: {:?}",
        fleet.problems.lock().unwrap()
    );
    drop(fleet);
    schema.remove();
}

// ------------------------------------------------------------------------------------------
// 3. A partition between the gateway and the provider
// ------------------------------------------------------------------------------------------

/// How long the provider partition lasts: past the tool timeout, the lookup's, and a lease.
const PROVIDER_PARTITION: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_cut_off_from_the_provider_end_unknown_and_settle_once_after_the_heal() {
    let name = "partition gateway <-> provider";
    let mut fleet = Fleet::new(name, PARTITION_TIMEOUT_MS, 1).await;
    let mock_address = fleet
        .mock
        .url
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = Proxy::start(mock_address).await;
    let provider = format!("http://{}", proxy.host_port());
    let ledger = fleet.folder.path().join("ledger.db");
    fleet.add_replica(ledger.to_str().unwrap(), &provider, None);
    let fleet = Arc::new(fleet);
    fleet
        .faults(json!({"latency_p50_ms": ANSWER_HOLD_MS, "latency_p95_ms": ANSWER_HOLD_MS}))
        .await;
    let stop_probe = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = probe_readiness(&fleet, stop_probe.clone());

    // Group s: the provider has made the effect and holds the answer when the partition
    // begins. Group u: called during the partition; their requests never arrive.
    let group_s = orders("s", PARTITION_GROUP);
    let group_u = orders("u", PARTITION_GROUP);
    let mut calls = tokio::task::JoinSet::new();
    for order in &group_s {
        let (fleet, order) = (fleet.clone(), order.clone());
        calls.spawn(async move { (order.clone(), fleet.try_call(0, &order).await) });
    }
    support::until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        async || {
            let (effects, _) = fleet.effects().await;
            let made = group_s
                .iter()
                .filter(|order| effects.contains_key(*order))
                .count();
            if made == group_s.len() {
                Ok(())
            } else {
                Err(format!(
                    "{name}: only {made} of group s reached the provider"
                ))
            }
        },
    )
    .await;
    proxy.partition();
    let partitioned_at = Instant::now();
    for order in &group_u {
        let (fleet, order) = (fleet.clone(), order.clone());
        calls.spawn(async move { (order.clone(), fleet.try_call(0, &order).await) });
    }
    let answers_during: Vec<(String, Answer)> = calls.join_all().await;
    // Everyone asks again while the partition lasts: answered from the ledger at once.
    let mut repeats = Vec::new();
    for order in group_s.iter().chain(&group_u) {
        repeats.push((order.clone(), fleet.try_call(0, order).await));
    }
    let statuses_during: Vec<String> = {
        let mut statuses = Vec::new();
        for order in group_s.iter().chain(&group_u) {
            statuses.push(fleet.status(0, order).await);
        }
        statuses
    };
    let metric_during = fleet.calls_metric().await;
    let remaining = PROVIDER_PARTITION.saturating_sub(partitioned_at.elapsed());
    tokio::time::sleep(remaining).await;
    let partition_lasted = partitioned_at.elapsed();
    proxy.heal();

    let all: Vec<String> = [group_s.clone(), group_u.clone()].concat();
    // No call after the heal: the gateway settles them by itself.
    let (statuses, effects, settled_in) = fleet.settle(0, &all, false).await;
    stop_probe.store(true, std::sync::atomic::Ordering::SeqCst);
    let readiness = probe.await.unwrap();
    let (_, duplicates) = fleet.effects().await;
    // And the user asks once more.
    let mut answers_after = Vec::new();
    for order in &all {
        answers_after.push((order.clone(), fleet.call(0, order).await));
    }
    let mut answers = answers_during.clone();
    answers.extend(repeats.clone());
    answers.extend(answers_after.clone());
    let metric = fleet.calls_metric().await;
    check_promises(
        name,
        &all,
        &answers,
        &statuses,
        &effects,
        &duplicates,
        false,
    );

    let notices = fleet.notices();
    println!(
        "{name}: intents {}, calls {}, effects per intent {:?}, answers during the partition \
         {:?}, repeats during it {:?}, ledger during it {:?}, after the heal {:?}, partition \
         {partition_lasted:?}, settled {settled_in:?} after the heal with no call, /readyz \
         not ready {:?} times (ready {:?}), owner's notices {notices:?}, calls metric during \
         {metric_during:?}, after \
         {metric:?}",
        all.len(),
        answers.len(),
        effects_per_intent(&all, &effects),
        count(answers_during.iter().map(|(_, answer)| answer)),
        count(repeats.iter().map(|(_, answer)| answer)),
        count(statuses_during.iter()),
        count(answers_after.iter().map(|(_, answer)| answer)),
        readiness.not_ready,
        readiness.ready,
    );
    for (order, answer) in answers_during.iter().chain(&repeats) {
        assert_eq!(
            answer, "pending_unknown",
            "{name}: {order} answered {answer} while the provider was cut off"
        );
    }
    assert!(
        statuses.values().all(|status| status == "done"),
        "{name}: not every intent settled done after the heal: {statuses:?}"
    );
    assert!(
        effects_per_intent(&all, &effects)
            .keys()
            .all(|made| *made == 1),
        "{name}: {effects:?}"
    );
    assert!(
        answers_after
            .iter()
            .all(|(_, answer)| answer == "already_done"),
        "{name}: {answers_after:?}"
    );
    assert!(
        readiness.not_ready.is_empty(),
        "{name}: the ledger was reachable, yet /readyz said not ready: {readiness:?}"
    );
}

//! Routing notices to a tool's owner: a log line and, where configured, a webhook.
//!
//! A notice is one reconciliation run's mismatches for one owner, or one duplicate-call
//! alert. Its log line ([`Notifier::log`]) is written at once, on the caller's task, with the
//! summary as a field; the duplicate-call alerts write one per rule and window, summing up
//! the rest (see `alerts`). Its webhook ([`Notifier::post`]) is queued and
//! posted by one background worker, so a slow or dead endpoint never delays a call, an
//! alert or a run; the queue is bounded and a notice that finds it full is dropped with an
//! error log. A delivery is retried a
//! few times with backoff, then given up with an error log naming the owner, never the URL
//! (chat webhooks carry their credential in the URL).
//!
//! Every notice sent is kept for the admin API's `GET /v1/admin/alerts` and the console
//! ([`Notifier::history`]): in the ledger, shared by every replica and kept over a restart,
//! once [`Notifier::with_history`] gave it one (`history.rs`); otherwise the last
//! [`RECENT_NOTICES_MAX`] in this process's memory ([`Notifier::recent`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use intentgate_config::{LoadedConfig, OwnerConfig};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

use crate::Severity;
use crate::history::History;
use intentgate_ledger::{Ledger, LedgerError};

/// Webhook notices waiting to be posted. A notice is at most a few hundred KiB (mismatch
/// lists are capped), so a full queue holds tens of MiB at worst; past it, alerting has
/// fallen far behind and a dropped notice is logged rather than queued without bound.
pub const WEBHOOK_QUEUE_MAX: usize = 256;
/// The message of a notice's log line. The summary quotes intent keys, which hold what
/// callers sent, so it is a field (quoted in text logs), never the message text.
const NOTICE_LOG_MESSAGE: &str = "notice for the tool's owner";
/// The owner named in the log line and webhook of a tool that has none.
const NO_OWNER: &str = "(no owner)";
/// Longest wait for one webhook answer.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts per notice: the first post and two retries, 1 s and 2 s apart.
pub const WEBHOOK_ATTEMPTS: u32 = 3;
/// Pause before the first retry; doubles per retry.
pub const WEBHOOK_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait for queued webhooks when a short-lived command (`intentgate reconcile`)
/// ends.
pub const WEBHOOK_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Notices kept in memory for the console's alerts page. A storm fires at most one alert per
/// rule, intent and window, so a few hundred cover the last incident; each is a few KiB.
pub const RECENT_NOTICES_MAX: usize = 200;

/// What an owner is told.
#[derive(Debug, Clone, Serialize)]
pub struct Notice {
    /// `reconciliation`, `duplicate_calls` or `upstream_misconfigured`.
    pub kind: &'static str,
    pub tool: String,
    pub severity: Severity,
    /// One line for a human: what happened and what to do.
    pub summary: String,
    /// The structured details (the mismatches, or the alert).
    pub details: Value,
}

/// Sends notices to owners. Create it inside a tokio runtime; [`Notifier::close`] waits
/// for the queued webhooks.
pub struct Notifier {
    owners: BTreeMap<String, OwnerConfig>,
    queue: mpsc::Sender<Delivery>,
    worker: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<Stats>,
    /// The latest notices with the time they were sent, oldest first (without a history).
    recent: std::sync::Mutex<VecDeque<Value>>,
    /// The ledger's history of notices, where they are kept when there is one.
    history: Option<History>,
}

#[derive(Default)]
struct Stats {
    delivered: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

struct Delivery {
    owner: String,
    url: String,
    body: Value,
}

/// Counts of webhook deliveries, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeliveryStats {
    pub delivered: u64,
    pub failed: u64,
    pub dropped: u64,
}

impl Notifier {
    /// A notifier for the config's owners, with its webhook worker started.
    pub fn new(owners: BTreeMap<String, OwnerConfig>) -> Notifier {
        // The gateway may not have made an HTTPS client yet; webhooks are often https.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            // A redirected POST could land anywhere; webhooks answer where they are.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with rustls and default settings builds");
        let (queue, receiver) = mpsc::channel(WEBHOOK_QUEUE_MAX);
        let stats = Arc::new(Stats::default());
        let worker = tokio::spawn(deliver_forever(client, receiver, stats.clone()));
        Notifier {
            owners,
            queue,
            worker: Mutex::new(Some(worker)),
            stats,
            recent: std::sync::Mutex::new(VecDeque::with_capacity(RECENT_NOTICES_MAX)),
            history: None,
        }
    }

    /// Keeps the notices in `ledger`'s history, where every replica on it lists them,
    /// instead of this process's memory. Call inside a tokio runtime.
    pub fn with_history(mut self, ledger: Arc<dyn Ledger>) -> Notifier {
        self.history = Some(History::start(ledger));
        self
    }

    /// The latest notices, newest first, at most `limit`: from the ledger's history when
    /// there is one, else [`Notifier::recent`]. Each has `at_ms`, `kind`, `tool`, `owner`,
    /// `severity`, `summary` and `details` (and its `id` in the history).
    pub async fn history(&self, limit: u32) -> Result<Vec<Value>, LedgerError> {
        match &self.history {
            Some(history) => history.list(limit).await,
            None => Ok(self.recent().into_iter().take(limit as usize).collect()),
        }
    }

    /// The notices sent lately, newest first: `at_ms`, `kind`, `tool`, `owner`, `severity`,
    /// `summary` and `details`.
    pub fn recent(&self) -> Vec<Value> {
        let recent = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        recent.iter().rev().cloned().collect()
    }

    fn keep(&self, owner: &str, notice: &Notice) {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| {
                i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
            });
        if let Some(history) = &self.history {
            history.keep(at_ms, owner, notice);
            return;
        }
        let kept = json!({
            "at_ms": at_ms,
            "kind": notice.kind,
            "tool": notice.tool,
            "owner": owner,
            "severity": notice.severity,
            "summary": notice.summary,
            "details": notice.details,
        });
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if recent.len() == RECENT_NOTICES_MAX {
            recent.pop_front();
        }
        recent.push_back(kept);
    }

    /// Logs `notice` and queues its webhook: [`Notifier::log`] and [`Notifier::post`].
    pub fn notify(&self, owner: Option<&str>, notice: &Notice) {
        self.log(owner, notice);
        self.post(owner, notice);
    }

    /// The owner of each tool of `loaded` that has one, by tool name: where a notice about
    /// the tool goes.
    pub fn owners_of(loaded: &LoadedConfig) -> HashMap<String, String> {
        loaded
            .config
            .tools
            .iter()
            .filter_map(|tool| Some((tool.name.clone(), tool.owner.clone()?)))
            .collect()
    }

    /// Reads `events` until their sender is gone, and sends each notice `observe` makes of
    /// one (with its owner). `what` names the events in the line logged when this falls
    /// behind and loses some (the gate's own log lines still have them).
    pub async fn relay<E: Clone>(
        &self,
        mut events: tokio::sync::broadcast::Receiver<E>,
        what: &str,
        mut observe: impl FnMut(&E) -> Option<(Option<String>, Notice)>,
    ) {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        what,
                        "the owner notices fell behind the gate's events; some were not told (the log has them)"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            if let Some((owner, notice)) = observe(&event) {
                self.notify(owner.as_deref(), &notice);
            }
        }
    }

    /// Writes `notice`'s log line, unless its owner opted out of log lines. A tool without
    /// an owner is logged: someone must hear about it.
    pub fn log(&self, owner: Option<&str>, notice: &Notice) {
        let config = owner.and_then(|name| self.owners.get(name));
        let owner_name = owner.unwrap_or(NO_OWNER);
        if config.is_none_or(|config| config.log) {
            match notice.severity {
                Severity::Critical => tracing::error!(
                    kind = notice.kind, tool = %notice.tool, owner = owner_name,
                    severity = notice.severity.as_str(), summary = %notice.summary,
                    "{NOTICE_LOG_MESSAGE}"
                ),
                Severity::Warning => tracing::warn!(
                    kind = notice.kind, tool = %notice.tool, owner = owner_name,
                    severity = notice.severity.as_str(), summary = %notice.summary,
                    "{NOTICE_LOG_MESSAGE}"
                ),
                Severity::Info => tracing::info!(
                    kind = notice.kind, tool = %notice.tool, owner = owner_name,
                    severity = notice.severity.as_str(), summary = %notice.summary,
                    "{NOTICE_LOG_MESSAGE}"
                ),
            }
        }
    }

    /// Keeps `notice` among the recent ones and queues its webhook, if its owner has one.
    pub fn post(&self, owner: Option<&str>, notice: &Notice) {
        let config = owner.and_then(|name| self.owners.get(name));
        let owner_name = owner.unwrap_or(NO_OWNER);
        self.keep(owner_name, notice);
        let Some(url) = config.and_then(|config| config.webhook.clone()) else {
            return;
        };
        // `text` first: a chat tool's incoming webhook (Slack, Mattermost, Google Chat)
        // shows it as the message and ignores the rest.
        let body = json!({
            "text": format!("[intentgate {}] {}", notice.severity.as_str(), notice.summary),
            "source": "intentgate",
            "kind": notice.kind,
            "tool": notice.tool,
            "owner": owner_name,
            "severity": notice.severity,
            "summary": notice.summary,
            "details": notice.details,
        });
        let delivery = Delivery {
            owner: owner_name.to_owned(),
            url,
            body,
        };
        if self.queue.try_send(delivery).is_err() {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                owner = owner_name, tool = %notice.tool, kind = notice.kind,
                "webhook queue full ({WEBHOOK_QUEUE_MAX} notices waiting); this notice was not posted"
            );
        }
    }

    /// Webhook deliveries so far.
    pub fn stats(&self) -> DeliveryStats {
        DeliveryStats {
            delivered: self.stats.delivered.load(Ordering::Relaxed),
            failed: self.stats.failed.load(Ordering::Relaxed),
            dropped: self.stats.dropped.load(Ordering::Relaxed),
        }
    }

    /// Stops taking notices and waits (at most [`WEBHOOK_DRAIN_TIMEOUT`]) for the queued
    /// ones to be posted or given up.
    pub async fn close(self) -> DeliveryStats {
        let Notifier {
            queue,
            worker,
            stats,
            history,
            ..
        } = self;
        drop(queue);
        if let Some(history) = history
            && tokio::time::timeout(WEBHOOK_DRAIN_TIMEOUT, history.close())
                .await
                .is_err()
        {
            tracing::error!(
                "notices still queued for the ledger's history after {WEBHOOK_DRAIN_TIMEOUT:?}; \
not all of them were kept"
            );
        }
        if let Some(worker) = worker.lock().await.take()
            && tokio::time::timeout(WEBHOOK_DRAIN_TIMEOUT, worker)
                .await
                .is_err()
        {
            tracing::error!(
                "webhooks still queued after {WEBHOOK_DRAIN_TIMEOUT:?}; not all of them were posted"
            );
        }
        DeliveryStats {
            delivered: stats.delivered.load(Ordering::Relaxed),
            failed: stats.failed.load(Ordering::Relaxed),
            dropped: stats.dropped.load(Ordering::Relaxed),
        }
    }
}

async fn deliver_forever(
    client: reqwest::Client,
    mut receiver: mpsc::Receiver<Delivery>,
    stats: Arc<Stats>,
) {
    while let Some(delivery) = receiver.recv().await {
        let mut pause = WEBHOOK_BACKOFF;
        let mut last_error = String::new();
        let mut delivered = false;
        for attempt in 1..=WEBHOOK_ATTEMPTS {
            match client.post(&delivery.url).json(&delivery.body).send().await {
                Ok(response) if response.status().is_success() => {
                    delivered = true;
                    break;
                }
                Ok(response) => last_error = format!("HTTP {}", response.status().as_u16()),
                // Without the URL: reqwest's errors quote it, and it may hold a credential.
                Err(error) => last_error = describe(&error),
            }
            if attempt < WEBHOOK_ATTEMPTS {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
        if delivered {
            stats.delivered.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                owner = %delivery.owner,
                error = %last_error,
                "could not post a notice to the owner's webhook after {WEBHOOK_ATTEMPTS} attempts"
            );
        }
    }
}

/// A transport error without the URL it carries.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        format!("no answer within {WEBHOOK_TIMEOUT:?}")
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(tool: &str) -> Notice {
        Notice {
            kind: "duplicate_calls",
            tool: tool.to_owned(),
            severity: Severity::Warning,
            summary: format!("{tool} was called again"),
            details: json!({"intent_id": 7}),
        }
    }

    #[tokio::test]
    async fn the_latest_notices_are_kept_newest_first_and_bounded() {
        let notifier = Notifier::new(BTreeMap::new());
        assert!(notifier.recent().is_empty());
        for index in 0..RECENT_NOTICES_MAX + 3 {
            notifier.post(Some("payments-team"), &notice(&format!("tool_{index}")));
        }
        let recent = notifier.recent();
        assert_eq!(recent.len(), RECENT_NOTICES_MAX);
        assert_eq!(
            recent[0]["tool"],
            format!("tool_{}", RECENT_NOTICES_MAX + 2)
        );
        assert_eq!(recent[RECENT_NOTICES_MAX - 1]["tool"], "tool_3");
        assert_eq!(recent[0]["owner"], "payments-team");
        assert_eq!(recent[0]["details"]["intent_id"], 7);
        assert!(recent[0]["at_ms"].as_i64().unwrap() > 0);
    }
}

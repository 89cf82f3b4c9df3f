//! The history of notices sent to tools' owners, kept in the ledger so that every replica
//! on it lists the same notices (`GET /v1/admin/alerts`, the console's alerts page) and a
//! restart keeps them.
//!
//! A notice is queued here as it is sent and written by one background task, so a slow
//! ledger never delays a call, an alert or a run; the queue is bounded
//! ([`HISTORY_QUEUE_MAX`]) and a notice that finds it full is left out of the history with
//! an error log (its log line and webhook are sent all the same). The ledger keeps the
//! latest [`intentgate_ledger::ALERTS_KEPT_MAX`], and its purge deletes the older ones with
//! the other records; an erasure of a tenant deletes the notices about that tenant's
//! intents (a notice names its tenant and intent key when its details do).

use std::sync::Arc;

use intentgate_core::text::cut;
use intentgate_ledger::{
    ALERT_DETAILS_BYTES_MAX, ALERT_KIND_LENGTH_MAX, ALERT_OWNER_LENGTH_MAX,
    ALERT_SUMMARY_LENGTH_MAX, Ledger, LedgerError, StoredAlert,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::notify::Notice;

/// Notices waiting to be written to the ledger. A storm fires at most one alert per rule,
/// intent and window, and the ledger writes one in a few milliseconds: a full queue means
/// the ledger is failing, and the history then misses notices rather than growing memory.
pub const HISTORY_QUEUE_MAX: usize = 1_024;

/// The ledger's history of notices, and the task that writes to it.
pub(crate) struct History {
    ledger: Arc<dyn Ledger>,
    queue: mpsc::Sender<StoredAlert>,
    pub(crate) writer: JoinHandle<()>,
}

impl History {
    /// Starts the writing task; call inside a tokio runtime.
    pub(crate) fn start(ledger: Arc<dyn Ledger>) -> History {
        let (queue, receiver) = mpsc::channel(HISTORY_QUEUE_MAX);
        let writer = tokio::spawn(write_forever(ledger.clone(), receiver));
        History {
            ledger,
            queue,
            writer,
        }
    }

    /// Queues `notice`, sent to `owner` at `at_ms`, for the history.
    pub(crate) fn keep(&self, at_ms: i64, owner: &str, notice: &Notice) {
        if self.queue.try_send(stored(at_ms, owner, notice)).is_err() {
            tracing::error!(
                owner, tool = %notice.tool, kind = notice.kind,
                "the notice history's queue is full ({HISTORY_QUEUE_MAX} waiting for the \
            ledger); this notice is left out of the history"
            );
        }
    }

    /// The latest notices, newest first, as `GET /v1/admin/alerts` shows them.
    pub(crate) async fn list(&self, limit: u32) -> Result<Vec<Value>, LedgerError> {
        Ok(self
            .ledger
            .alerts(limit)
            .await?
            .into_iter()
            .map(shown)
            .collect())
    }

    /// Stops taking notices; the writer ends once the queued ones are written.
    pub(crate) fn close(self) -> JoinHandle<()> {
        drop(self.queue);
        self.writer
    }
}

async fn write_forever(ledger: Arc<dyn Ledger>, mut receiver: mpsc::Receiver<StoredAlert>) {
    while let Some(alert) = receiver.recv().await {
        if let Err(error) = ledger.record_alert(&alert).await {
            tracing::error!(
                %error, tool = %alert.tool, kind = %alert.kind,
                "could not write a notice to the ledger's history; its log line and webhook \
            were sent"
            );
        }
    }
}

/// `notice` as the ledger keeps it: its text cut to the ledger's limits, and details too
/// long for it replaced by a note saying so (the log line and webhook have them whole).
pub(crate) fn stored(at_ms: i64, owner: &str, notice: &Notice) -> StoredAlert {
    let text = |name: &str| {
        notice
            .details
            .get(name)
            .and_then(Value::as_str)
            .filter(|value| !value.is_empty())
    };
    let mut details = notice.details.to_string();
    if details.len() > ALERT_DETAILS_BYTES_MAX {
        details = json!({
            "cut": format!(
                "the details were {} bytes, over the history's {ALERT_DETAILS_BYTES_MAX}; the \
        log line and the webhook have them",
                details.len()
            ),
        })
        .to_string();
    }
    let tenant = text("tenant");
    StoredAlert {
        id: 0,
        at_ms,
        kind: cut(notice.kind, ALERT_KIND_LENGTH_MAX).to_owned(),
        tool: cut(&notice.tool, intentgate_core::limits::TOOL_NAME_LENGTH_MAX).to_owned(),
        owner: cut(owner, ALERT_OWNER_LENGTH_MAX).to_owned(),
        severity: notice.severity.as_str().to_owned(),
        intent_key: tenant
            .and_then(|_| text("intent_key"))
            .map(|key| cut(key, intentgate_core::limits::INTENT_KEY_LENGTH_MAX).to_owned()),
        tenant: tenant
            .map(|tenant| cut(tenant, intentgate_core::limits::TENANT_LENGTH_MAX).to_owned()),
        summary: cut(&notice.summary, ALERT_SUMMARY_LENGTH_MAX).to_owned(),
        details,
    }
}

/// A stored notice as the admin API shows it.
fn shown(alert: StoredAlert) -> Value {
    let details = serde_json::from_str(&alert.details).unwrap_or(Value::String(alert.details));
    json!({
        "id": alert.id,
        "at_ms": alert.at_ms,
        "kind": alert.kind,
        "tool": alert.tool,
        "owner": alert.owner,
        "severity": alert.severity,
        "summary": alert.summary,
        "details": details,
    })
}

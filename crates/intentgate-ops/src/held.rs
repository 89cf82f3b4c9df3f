//! Owner notices for calls held for approval (docs/design.md section 13): each held intent
//! is told to its tool's owner once, as a warning (a person must decide before its
//! deadline), with the path of its page in the console and, when the gateway knows the
//! address people reach it at ([`PUBLIC_URL_ENV`]), the whole link.
//!
//! The webhook body carries `text` as every notice does, so a chat tool's incoming webhook
//! shows the summary and the link as they are.

use std::collections::HashMap;
use std::sync::Arc;

use intentgate_config::LoadedConfig;
use intentgate_gate::HeldNotice;
use serde_json::json;
use tokio::sync::broadcast;

use crate::Severity;
use crate::notify::{Notice, Notifier};

/// The kind of these notices, in their webhook and log line.
pub const HELD_FOR_APPROVAL: &str = "held_for_approval";

/// The environment variable naming the address people reach the gateway at
/// (`https://intentgate.example.com`), for the links in notices.
pub const PUBLIC_URL_ENV: &str = "INTENTGATE_PUBLIC_URL";

/// The console page of a held intent, from the gateway's root.
pub fn console_path(intent: i64) -> String {
    format!("/console/intents/{intent}")
}

/// Sends an owner notice for each call the gate holds for approval.
pub struct HeldNotices {
    owners: HashMap<String, String>,
    public_url: Option<String>,
}

impl HeldNotices {
    /// The owners of `loaded`'s tools; links start at `public_url` when it is set.
    pub fn new(loaded: &LoadedConfig, public_url: Option<String>) -> HeldNotices {
        HeldNotices {
            owners: Notifier::owners_of(loaded),
            public_url: public_url
                .map(|url| url.trim_end_matches('/').to_owned())
                .filter(|url| !url.is_empty()),
        }
    }

    /// The notice for `held` and the owner it goes to.
    pub fn observe(&self, held: &HeldNotice) -> (Option<&str>, Notice) {
        let path = console_path(held.intent);
        let link = match &self.public_url {
            Some(root) => format!("{root}{path}"),
            None => path.clone(),
        };
        let summary = format!(
            "{tool}: a call by {who} (tenant {tenant}) is held for approval ({why}); nothing \
             was executed. Approve or deny intent {intent} before its deadline: {link}",
            tool = held.tool,
            who = held.requested_by,
            tenant = held.tenant,
            why = held.held_by,
            intent = held.intent,
        );
        let notice = Notice {
            kind: HELD_FOR_APPROVAL,
            tool: held.tool.clone(),
            severity: Severity::Warning,
            summary,
            details: json!({
                "tool": held.tool,
                "tenant": held.tenant,
                "intent_id": held.intent,
                "requested_by": held.requested_by,
                "held_by": held.held_by,
                "deadline_ms": held.deadline_ms,
                "console_path": path,
                "console_url": self.public_url.as_ref().map(|_| link.clone()),
            }),
        };
        (self.owners.get(&held.tool).map(String::as_str), notice)
    }

    /// Reads the gate's held intents until the gate is gone, telling owners.
    pub async fn run(self, held: broadcast::Receiver<HeldNotice>, notifier: Arc<Notifier>) {
        notifier
            .relay(held, "calls held for approval", |held| {
                let (owner, notice) = self.observe(held);
                Some((owner.map(str::to_owned), notice))
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> HeldNotice {
        HeldNotice {
            tool: "refund_order".to_owned(),
            owner: Some("payments-team".to_owned()),
            intent: 42,
            tenant: "acme".to_owned(),
            requested_by: "support-agent".to_owned(),
            held_by: "approval policy (amount > 100.00)".to_owned(),
            deadline_ms: 1_000,
        }
    }

    #[test]
    fn the_owner_is_told_who_asked_why_it_is_held_and_where_to_decide() {
        let notices = HeldNotices {
            owners: HashMap::from([("refund_order".to_owned(), "payments-team".to_owned())]),
            public_url: Some("https://gate.example.com".to_owned()),
        };
        let (owner, notice) = notices.observe(&held());
        assert_eq!(owner, Some("payments-team"));
        assert_eq!(
            (notice.kind, notice.severity),
            (HELD_FOR_APPROVAL, Severity::Warning)
        );
        assert!(
            notice.summary.contains("support-agent")
                && notice.summary.contains("tenant acme")
                && notice.summary.contains("amount > 100.00")
                && notice
                    .summary
                    .ends_with("https://gate.example.com/console/intents/42"),
            "{}",
            notice.summary
        );
        assert_eq!(
            notice.details["console_url"],
            "https://gate.example.com/console/intents/42"
        );
    }

    #[test]
    fn without_a_public_address_the_notice_names_the_console_path() {
        let notices = HeldNotices {
            owners: HashMap::new(),
            public_url: None,
        };
        let (owner, notice) = notices.observe(&held());
        assert_eq!(owner, None);
        assert!(
            notice.summary.ends_with(" /console/intents/42"),
            "{}",
            notice.summary
        );
        assert!(notice.details["console_url"].is_null());
    }
}

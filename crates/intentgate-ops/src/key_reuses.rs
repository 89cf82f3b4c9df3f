//! Owner notices for attempts the provider refused because their idempotency key was first
//! used for a request with other parameters (Stripe's 400 `idempotency_error`). Two
//! different requests share a key: nothing new happened, but the key's first request may
//! have acted. The gate keeps the intent `unknown` and never re-sends it; somebody must find
//! out which request the provider holds under the key, so the tool's owner is told at once,
//! as a critical notice.
//!
//! Each such attempt stops its intent's re-sends, so an intent is refused this way about
//! once; [`KeyReuseNotices`] still tells an owner about one intent at most once per
//! [`NOTICE_EVERY`], in case callers start it again.
//!
//! Who was told when is kept in a bounded [`Told`].

use std::collections::HashMap;
use std::sync::Arc;

use intentgate_config::LoadedConfig;
use intentgate_gate::KeyReused;
use serde_json::json;
use tokio::sync::broadcast;

use crate::Severity;
use crate::notify::{Notice, Notifier};
use crate::told::Told;
pub use crate::told::{INTENTS_TRACKED_MAX, NOTICE_EVERY};

/// The kind of these notices, in their webhook and log line.
pub const KEY_REUSED: &str = "idempotency_key_reused";

/// Sends owner notices for the gate's reused keys, once per intent per interval.
pub struct KeyReuseNotices {
    owners: HashMap<String, String>,
    told: Told,
}

impl KeyReuseNotices {
    /// The owners of `loaded`'s tools.
    pub fn new(loaded: &LoadedConfig) -> KeyReuseNotices {
        KeyReuseNotices {
            owners: Notifier::owners_of(loaded),
            told: Told::default(),
        }
    }

    /// The notice for `reused` and the owner it goes to, or `None` when this intent was
    /// told less than [`NOTICE_EVERY`] ago.
    pub fn observe(&mut self, reused: &KeyReused) -> Option<(Option<&str>, Notice)> {
        if !self.told.may_tell(reused.intent_id, reused.at_ms) {
            return None;
        }
        let provider = if reused.provider_message.is_empty() {
            String::new()
        } else {
            format!(" (the provider: {})", reused.provider_message)
        };
        let summary = format!(
            "{tool}: the provider refused intent {key} (tenant {tenant}) because its \
             idempotency key was first used for a request with other parameters{provider}. Two \
             different requests share a key; the first may have acted. The intent stays \
             unknown and is never re-sent: find which request the provider holds under the key, \
             then resolve the intent by hand",
            tool = reused.tool,
            key = reused.intent_key,
            tenant = reused.tenant,
        );
        let notice = Notice {
            kind: KEY_REUSED,
            tool: reused.tool.clone(),
            severity: Severity::Critical,
            summary,
            details: json!({
                "tool": reused.tool,
                "tenant": reused.tenant,
                "intent_id": reused.intent_id,
                "intent_key": reused.intent_key,
                "provider_message": reused.provider_message,
                "at_ms": reused.at_ms,
            }),
        };
        Some((self.owners.get(&reused.tool).map(String::as_str), notice))
    }

    /// Reads the gate's reused keys until the gate is gone, telling owners as
    /// [`KeyReuseNotices::observe`] says.
    pub async fn run(mut self, reuses: broadcast::Receiver<KeyReused>, notifier: Arc<Notifier>) {
        notifier
            .relay(reuses, "reused idempotency keys", |reused| {
                self.observe(reused)
                    .map(|(owner, notice)| (owner.map(str::to_owned), notice))
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reused(intent_id: i64, at_ms: i64) -> KeyReused {
        KeyReused {
            tool: "refund_order".to_owned(),
            tenant: "north".to_owned(),
            intent_id,
            intent_key: format!("refund:pi_{intent_id}:49.00"),
            provider_message: "Keys for idempotent requests can only be used with the same \
                               parameters they were first used with."
                .to_owned(),
            at_ms,
        }
    }

    #[test]
    fn the_owner_is_told_critically_once_per_intent_per_interval() {
        let mut engine = KeyReuseNotices {
            owners: HashMap::from([("refund_order".to_owned(), "payments-team".to_owned())]),
            told: Told::default(),
        };
        let (owner, notice) = engine.observe(&reused(7, 1_000)).unwrap();
        assert_eq!(owner, Some("payments-team"));
        assert_eq!(
            (notice.kind, notice.severity),
            (KEY_REUSED, Severity::Critical)
        );
        assert!(
            notice.summary.contains("refund:pi_7:49.00")
                && notice.summary.contains("tenant north")
                && notice.summary.contains("same parameters")
                && notice.summary.contains("never re-sent"),
            "{}",
            notice.summary
        );
        assert!(engine.observe(&reused(7, 2_000)).is_none());
        assert!(engine.observe(&reused(8, 2_000)).is_some());
        let every = NOTICE_EVERY.as_millis() as i64;
        assert!(engine.observe(&reused(7, 1_000 + every)).is_some());
    }
}

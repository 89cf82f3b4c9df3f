//! Owner notices for upstream errors that are the operator's (docs/design.md section 5): a wrong
//! credential, a route that does not exist, an upstream the gateway can't reach. Every call
//! of the tool fails until someone fixes the config, so its owner is told at once, and a
//! storm of such calls is one notice, not thousands.
//!
//! The [`UpstreamNotices`] engine reads the gate's events (`Gate::upstream_errors`, already
//! at most one per tool and upstream per `UPSTREAM_ERROR_LOG_EVERY`) and sends a notice to the
//! tool's owner (log line, webhook, the admin API's recent notices) at most once per
//! [`NOTICE_EVERY`] per tool and kind; the failures of the events it held back are added to
//! the next notice it sends.
//!
//! **Bounded:** one entry per tool and kind that failed (config names and a fixed word list).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_config::LoadedConfig;
use intentgate_core::Misconfiguration;
use intentgate_gate::UpstreamError;
use serde_json::json;
use tokio::sync::broadcast;

use crate::Severity;
use crate::notify::{Notice, Notifier};

/// Least time between two notices about one tool and kind of error. Long enough that a storm
/// is one notice per owner's look at it, short enough that an error still there after a fix
/// was tried is heard again within minutes.
pub const NOTICE_EVERY: Duration = Duration::from_secs(5 * 60);
/// The kind of these notices, in their webhook and log line.
pub const UPSTREAM_MISCONFIGURED: &str = "upstream_misconfigured";

/// When a tool's kind of error was last told, and what was held back since.
struct Told {
    at_ms: i64,
    /// Failures in the events held back since then.
    held_back: u64,
}

/// Sends owner notices for the gate's upstream errors, rate-limited per tool and kind.
pub struct UpstreamNotices {
    owners: HashMap<String, String>,
    told: HashMap<(String, Misconfiguration), Told>,
}

impl UpstreamNotices {
    /// The owners of `loaded`'s tools.
    pub fn new(loaded: &LoadedConfig) -> UpstreamNotices {
        UpstreamNotices {
            owners: Notifier::owners_of(loaded),
            told: HashMap::new(),
        }
    }

    /// The notice for `error`, and the owner it goes to, or `None` when one about the same
    /// tool and kind went out less than [`NOTICE_EVERY`] ago (its failures then go into the
    /// next one).
    pub fn observe(&mut self, error: &UpstreamError) -> Option<(Option<&str>, Notice)> {
        let id = (error.tool.clone(), error.kind);
        let every_ms = NOTICE_EVERY.as_millis() as i64;
        let held_back = match self.told.get_mut(&id) {
            Some(told) if error.at_ms.saturating_sub(told.at_ms) < every_ms => {
                told.held_back += error.failures;
                return None;
            }
            Some(told) => std::mem::take(&mut told.held_back),
            None => 0,
        };
        self.told.insert(
            id,
            Told {
                at_ms: error.at_ms,
                held_back: 0,
            },
        );
        let failures = error.failures + held_back;
        let status = error
            .status
            .map(|status| format!(" (HTTP {status})"))
            .unwrap_or_default();
        let summary = format!(
            "{tool}: calls are not executed because the gateway is misconfigured for upstream \
             `{upstream}`: {kind}{status}, {failures} failed request{plural} so far; {advice}. \
             The model tells customers a person will follow up; once it is fixed, their next \
             call executes",
            tool = error.tool,
            upstream = error.upstream,
            kind = error.kind,
            plural = if failures == 1 { "" } else { "s" },
            advice = error.kind.advice(),
        );
        let notice = Notice {
            kind: UPSTREAM_MISCONFIGURED,
            tool: error.tool.clone(),
            severity: Severity::Warning,
            summary,
            details: json!({
                "tool": error.tool,
                "upstream": error.upstream,
                "kind": error.kind,
                "status": error.status,
                "cause": error.cause,
                "failures": failures,
                "since_ms": error.since_ms,
                "at_ms": error.at_ms,
            }),
        };
        Some((self.owners.get(&error.tool).map(String::as_str), notice))
    }

    /// Reads the gate's upstream errors until the gate is gone, telling owners as
    /// [`UpstreamNotices::observe`] says.
    pub async fn run(
        mut self,
        errors: broadcast::Receiver<UpstreamError>,
        notifier: Arc<Notifier>,
    ) {
        notifier
            .relay(errors, "upstream errors", |error| {
                self.observe(error)
                    .map(|(owner, notice)| (owner.map(str::to_owned), notice))
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> UpstreamNotices {
        UpstreamNotices {
            owners: HashMap::from([("refund_order".to_owned(), "payments-team".to_owned())]),
            told: HashMap::new(),
        }
    }

    fn error(kind: Misconfiguration, failures: u64, at_ms: i64) -> UpstreamError {
        UpstreamError {
            tool: "refund_order".to_owned(),
            upstream: "payments".to_owned(),
            kind,
            status: Some(401),
            cause: "HTTP 401".to_owned(),
            failures,
            since_ms: 1_000,
            at_ms,
        }
    }

    #[test]
    fn a_storm_is_one_notice_per_tool_and_kind_per_interval_and_nothing_is_lost() {
        let mut engine = engine();
        let every = NOTICE_EVERY.as_millis() as i64;
        let (owner, first) = engine
            .observe(&error(Misconfiguration::Unauthorized, 1, 1_000))
            .unwrap();
        assert_eq!(owner, Some("payments-team"));
        assert_eq!(first.kind, UPSTREAM_MISCONFIGURED);
        assert!(
            first.summary.contains("upstream `payments`")
                && first.summary.contains("unauthorized (HTTP 401)")
                && first.summary.contains("1 failed request so far"),
            "{}",
            first.summary
        );
        for n in 1..20 {
            let held = engine.observe(&error(Misconfiguration::Unauthorized, 3, 1_000 + n * 10));
            assert!(held.is_none(), "within the interval: held back");
        }
        // Another kind of the same tool is told at once.
        assert!(
            engine
                .observe(&error(Misconfiguration::Connect, 1, 1_500))
                .is_some()
        );
        let (_, next) = engine
            .observe(&error(Misconfiguration::Unauthorized, 2, 1_000 + every))
            .unwrap();
        assert_eq!(next.details["failures"], 2 + 19 * 3);
    }

    #[test]
    fn a_tool_without_an_owner_is_still_told() {
        let mut engine = engine();
        let mut other = error(Misconfiguration::Dns, 1, 1);
        other.tool = "send_email".to_owned();
        let (owner, notice) = engine.observe(&other).unwrap();
        assert_eq!((owner, notice.tool.as_str()), (None, "send_email"));
    }
}

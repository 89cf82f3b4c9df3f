//! Errors that are the operator's (docs/design.md section 5): the gateway can't use an upstream as
//! configured (a wrong credential, a route that does not exist, an upstream it can't reach).
//! Nothing was processed, and the customer can't fix it, so the call ends `not_executed`
//! with a message that a person will follow up; this module makes sure that person hears
//! about it at once:
//!
//! - every failed request counts in `intentgate_upstream_errors_total{tool,upstream,kind}`;
//! - a `warn` line names the tool, the upstream, the kind, the status and the cause (never the
//!   URL or a header: they hold secrets), at the first failure of a streak and then at most
//!   once per [`UPSTREAM_ERROR_LOG_EVERY`] per tool and upstream, with how many failures it
//!   stands for;
//! - each such line is also an [`UpstreamError`] event on a bounded broadcast
//!   ([`Gate::upstream_errors`](crate::Gate::upstream_errors)), from which the gateway's
//!   notifier tells the tool's owner (rate-limited again there, per tool and kind);
//! - the tool and upstream are [`DegradedUpstream`] until a request of theirs is answered as
//!   configured (done, or a refusal of the customer's request), which `/readyz` lists.
//!
//! **Bounded:** the state holds one entry per tool and upstream that failed (names from the
//! config), at most [`DEGRADED_UPSTREAMS_MAX`]; the event rate is bounded by the log's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use intentgate_core::{Misconfiguration, RequestFacts, UpstreamObservation};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::metrics::Metrics;

/// The `upstream` of an error whose upstream did not say its name (an embedded gate's own
/// `Upstream`): one fixed word, so that the label stays bounded.
pub const UNNAMED_UPSTREAM: &str = "unnamed";
/// Least time between two log lines (and owner events) about one tool and upstream while its
/// requests keep failing. A storm of calls with a wrong key is one line per 10 s, each saying
/// how many failures it stands for, not one per call.
pub const UPSTREAM_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);
/// Events a receiver of [`Gate::upstream_errors`](crate::Gate::upstream_errors) may fall
/// behind before it loses the oldest. Events come at most one per tool and upstream per
/// [`UPSTREAM_ERROR_LOG_EVERY`], so this is minutes of slack for a config of a few dozen tools.
pub const UPSTREAM_ERROR_BUFFER: usize = 256;
/// Most (tool, upstream) pairs tracked as degraded. A config names far fewer; the bound
/// only keeps an embedder whose upstream invents names from growing it without end.
pub const DEGRADED_UPSTREAMS_MAX: usize = 1024;
/// Longest piece of the provider's own words (its error message) kept in the event log.
pub const PROVIDER_TEXT_MAX: usize = 200;

/// A tool's requests to an upstream that fail because the gateway is misconfigured, as one
/// log line and owner event stands for them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamError {
    pub tool: String,
    /// The upstream's name in the config ([`UNNAMED_UPSTREAM`] when it has none).
    pub upstream: String,
    pub kind: Misconfiguration,
    /// The status the upstream answered; none for a request that could not be sent.
    pub status: Option<u16>,
    /// What the gateway saw, without the URL or headers: `HTTP 401`, or the transport's reason.
    pub cause: String,
    /// Failures this event stands for: this one and those since the previous event.
    pub failures: u64,
    /// Since when every request of this tool to this upstream failed this way
    /// (milliseconds since the Unix epoch).
    pub since_ms: i64,
    pub at_ms: i64,
}

/// A tool whose requests to an upstream have all failed as misconfigured since `since_ms`,
/// as `/readyz` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DegradedUpstream {
    pub upstream: String,
    pub tool: String,
    /// The kind of the latest failure.
    pub kind: Misconfiguration,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub cause: String,
    /// The first failure since the last request answered as configured (milliseconds since
    /// the Unix epoch).
    pub since_ms: i64,
    /// The latest failure.
    pub last_ms: i64,
    /// Failed requests since `since_ms`.
    pub failures: u64,
}

/// One failed request, as the gate observed it.
pub(crate) struct Failure<'a> {
    pub tool: &'a str,
    pub facts: &'a RequestFacts,
    pub kind: Misconfiguration,
    pub observation: &'a UpstreamObservation,
    pub now_ms: i64,
}

impl Failure<'_> {
    pub(crate) fn upstream(&self) -> &str {
        self.facts.upstream.as_deref().unwrap_or(UNNAMED_UPSTREAM)
    }

    pub(crate) fn status(&self) -> Option<u16> {
        match self.observation {
            UpstreamObservation::Response { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// What was seen, for the log line: the status, or the transport's reason (which names
    /// no URL).
    pub(crate) fn cause(&self) -> String {
        match self.observation {
            UpstreamObservation::Response { status, .. } => format!("HTTP {status}"),
            UpstreamObservation::NotSent { reason } | UpstreamObservation::Dropped { reason } => {
                reason.clone()
            }
            UpstreamObservation::Timeout => "timeout".to_owned(),
        }
    }

    /// What the intent's event log says about the call that ended on this failure: the
    /// cause, the provider's own words (bounded), and what to change. `retries` is how many
    /// retries the call made before it.
    pub(crate) fn detail(&self, retries: u32, provider_text: &str) -> String {
        let seen = match self.status() {
            Some(_) => format!("upstream `{}` answered {}", self.upstream(), self.cause()),
            None => format!(
                "upstream `{}` could not be reached: {}",
                self.upstream(),
                self.cause()
            ),
        };
        let words = if provider_text.is_empty() {
            String::new()
        } else {
            format!(
                " ({:?})",
                intentgate_core::text::cut(provider_text, PROVIDER_TEXT_MAX)
            )
        };
        let retried = match retries {
            0 => String::new(),
            1 => " after 1 retry".to_owned(),
            n => format!(" after {n} retries"),
        };
        format!(
            "not processed, the gateway is misconfigured ({kind}): {seen}{words}{retried}; {advice}",
            kind = self.kind,
            advice = self.kind.advice()
        )
    }
}

struct Entry {
    degraded: DegradedUpstream,
    /// When the last line about it was written.
    logged_ms: i64,
    /// Failures since then.
    unlogged: u64,
}

/// The misconfigured upstreams a gate has seen: what `/readyz` lists and what the log and the
/// owner events say.
pub(crate) struct UpstreamHealth {
    entries: Mutex<HashMap<(String, String), Entry>>,
    sender: broadcast::Sender<UpstreamError>,
}

impl UpstreamHealth {
    pub(crate) fn new() -> UpstreamHealth {
        let (sender, _) = broadcast::channel(UPSTREAM_ERROR_BUFFER);
        UpstreamHealth {
            entries: Mutex::default(),
            sender,
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<UpstreamError> {
        self.sender.subscribe()
    }

    /// Counts one failed request, keeps its tool and upstream degraded, and, at the first
    /// failure of a streak or once [`UPSTREAM_ERROR_LOG_EVERY`] has passed since the last
    /// line, writes the `warn` line and sends the event.
    pub(crate) fn failed(&self, metrics: &Metrics, failure: &Failure<'_>) {
        let upstream = failure.upstream().to_owned();
        metrics.upstream_error(failure.tool, &upstream, failure.kind.as_str());
        let status = failure.status();
        let cause = failure.cause();
        let now_ms = failure.now_ms;
        let event = {
            let mut entries = self.entries.lock().expect("upstream health lock");
            let id = (upstream.clone(), failure.tool.to_owned());
            if !entries.contains_key(&id) && entries.len() >= DEGRADED_UPSTREAMS_MAX {
                // Still counted and logged below, just not listed by /readyz.
                drop(entries);
                tracing::warn!(
                    tool = %failure.tool, upstream = %upstream, kind = %failure.kind,
                    "{DEGRADED_UPSTREAMS_MAX} tools and upstreams are failing at once; this one is not listed by /readyz"
                );
                None
            } else {
                let entry = entries.entry(id).or_insert_with(|| Entry {
                    degraded: DegradedUpstream {
                        upstream: upstream.clone(),
                        tool: failure.tool.to_owned(),
                        kind: failure.kind,
                        status,
                        cause: cause.clone(),
                        since_ms: now_ms,
                        last_ms: now_ms,
                        failures: 0,
                    },
                    logged_ms: i64::MIN,
                    unlogged: 0,
                });
                let degraded = &mut entry.degraded;
                degraded.kind = failure.kind;
                degraded.status = status;
                degraded.cause = cause.clone();
                degraded.last_ms = now_ms;
                degraded.failures += 1;
                entry.unlogged += 1;
                let due = now_ms.saturating_sub(entry.logged_ms)
                    >= UPSTREAM_ERROR_LOG_EVERY.as_millis() as i64;
                due.then(|| {
                    let failures = std::mem::take(&mut entry.unlogged);
                    entry.logged_ms = now_ms;
                    UpstreamError {
                        tool: failure.tool.to_owned(),
                        upstream: upstream.clone(),
                        kind: failure.kind,
                        status,
                        cause: cause.clone(),
                        failures,
                        since_ms: entry.degraded.since_ms,
                        at_ms: now_ms,
                    }
                })
            }
        };
        let Some(event) = event else {
            return;
        };
        // The URL and headers are never logged: they may hold secrets.
        let advice = event.kind.advice();
        match event.status {
            Some(status) => tracing::warn!(
                tool = %event.tool, upstream = %event.upstream, kind = %event.kind, status,
                cause = %event.cause, failures = event.failures, fix = advice,
                "upstream request not processed: the gateway is misconfigured"
            ),
            None => tracing::warn!(
                tool = %event.tool, upstream = %event.upstream, kind = %event.kind,
                cause = %event.cause, failures = event.failures, fix = advice,
                "upstream request not processed: the gateway is misconfigured"
            ),
        }
        // Fails only when nobody listens: then the log line is all there is to tell.
        let _ = self.sender.send(event);
    }

    /// A request of `tool` to `upstream` was answered as configured: it is no longer degraded.
    pub(crate) fn answered(&self, tool: &str, facts: &RequestFacts) {
        let upstream = facts.upstream.as_deref().unwrap_or(UNNAMED_UPSTREAM);
        let mut entries = self.entries.lock().expect("upstream health lock");
        if entries.is_empty() {
            return;
        }
        if let Some(entry) = entries.remove(&(upstream.to_owned(), tool.to_owned())) {
            drop(entries);
            tracing::info!(
                tool,
                upstream,
                failures = entry.degraded.failures,
                "the upstream answered as configured again; no longer degraded"
            );
        }
    }

    /// The tools and upstreams whose requests all failed as misconfigured since their
    /// `since_ms`, by upstream, then tool.
    pub(crate) fn degraded(&self) -> Vec<DegradedUpstream> {
        let entries = self.entries.lock().expect("upstream health lock");
        let mut degraded: Vec<DegradedUpstream> = entries
            .values()
            .map(|entry| entry.degraded.clone())
            .collect();
        degraded.sort_by(|a, b| (&a.upstream, &a.tool).cmp(&(&b.upstream, &b.tool)));
        degraded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unauthorized() -> UpstreamObservation {
        UpstreamObservation::response(
            401,
            json!({"error": {"message": "Invalid API key provided"}}),
        )
    }

    fn facts() -> RequestFacts {
        RequestFacts {
            upstream: Some("payments".to_owned()),
            fixed_route: true,
            unreachable: None,
        }
    }

    fn fail(health: &UpstreamHealth, metrics: &Metrics, facts: &RequestFacts, now_ms: i64) {
        let observation = unauthorized();
        health.failed(
            metrics,
            &Failure {
                tool: "refund_order",
                facts,
                kind: Misconfiguration::Unauthorized,
                observation: &observation,
                now_ms,
            },
        );
    }

    #[test]
    fn a_storm_is_one_event_per_interval_and_one_answer_clears_it() {
        let health = UpstreamHealth::new();
        let metrics = Metrics::new();
        let mut events = health.subscribe();
        let every = UPSTREAM_ERROR_LOG_EVERY.as_millis() as i64;
        for n in 0..5 {
            fail(&health, &metrics, &facts(), 1_000 + n);
        }
        let first = events.try_recv().unwrap();
        assert_eq!(
            (first.failures, first.status, first.cause.as_str()),
            (1, Some(401), "HTTP 401")
        );
        assert!(events.try_recv().is_err(), "the rest wait for the interval");
        fail(&health, &metrics, &facts(), 1_000 + every);
        let second = events.try_recv().unwrap();
        assert_eq!((second.failures, second.since_ms), (5, 1_000));
        let degraded = health.degraded();
        assert_eq!(degraded.len(), 1);
        assert_eq!(
            (
                degraded[0].upstream.as_str(),
                degraded[0].tool.as_str(),
                degraded[0].kind,
                degraded[0].failures
            ),
            (
                "payments",
                "refund_order",
                Misconfiguration::Unauthorized,
                6
            )
        );
        assert!(metrics.encode().contains(
            "intentgate_upstream_errors_total{tool=\"refund_order\",upstream=\"payments\",kind=\"unauthorized\"} 6"
        ));
        // Another upstream's answer changes nothing; this one's clears it.
        let other = RequestFacts {
            upstream: Some("email".to_owned()),
            ..facts()
        };
        health.answered("refund_order", &other);
        assert_eq!(health.degraded().len(), 1);
        health.answered("refund_order", &facts());
        assert!(health.degraded().is_empty());
        // The next failure starts a new streak, told at once.
        fail(&health, &metrics, &facts(), 2_000 + every);
        assert_eq!(events.try_recv().unwrap().failures, 1);
        assert_eq!(health.degraded()[0].since_ms, 2_000 + every);
    }

    #[test]
    fn an_upstream_without_a_name_is_one_fixed_word() {
        let health = UpstreamHealth::new();
        let metrics = Metrics::new();
        fail(&health, &metrics, &RequestFacts::default(), 1);
        assert_eq!(health.degraded()[0].upstream, UNNAMED_UPSTREAM);
    }

    #[test]
    fn the_event_log_detail_names_the_upstream_the_cause_and_the_fix_but_no_secret() {
        let observation = UpstreamObservation::NotSent {
            reason: "could not connect: tcp connect error: Connection refused (os error 111)"
                .to_owned(),
        };
        let facts = facts();
        let failure = Failure {
            tool: "refund_order",
            facts: &facts,
            kind: Misconfiguration::Connect,
            observation: &observation,
            now_ms: 1,
        };
        let detail = failure.detail(3, "");
        assert!(
            detail.starts_with("not processed, the gateway is misconfigured (connect): upstream `payments` could not be reached: could not connect"),
            "{detail}"
        );
        assert!(
            detail.contains("after 3 retries") && detail.contains("base_url"),
            "{detail}"
        );
        let observation = unauthorized();
        let failure = Failure {
            kind: Misconfiguration::Unauthorized,
            observation: &observation,
            ..failure
        };
        let long = "x".repeat(PROVIDER_TEXT_MAX * 2);
        let detail = failure.detail(0, &long);
        assert!(detail.contains("answered HTTP 401"), "{detail}");
        assert!(
            !detail.contains(&"x".repeat(PROVIDER_TEXT_MAX + 1)),
            "{detail}"
        );
    }
}

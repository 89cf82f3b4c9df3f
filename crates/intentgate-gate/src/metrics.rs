//! What a gate counts and times, for Prometheus, and the repeated-call events the
//! duplicate-call alerts consume (docs/design.md section 8).
//!
//! One [`Metrics`] per [`Gate`](crate::Gate), created by `Gate::new` and read with
//! [`Gate::metrics`](crate::Gate::metrics); [`Metrics::encode`] renders it in the Prometheus
//! text format (version 0.0.4). The families, whose names are a promise to dashboards and
//! alert rules:
//!
//! | family | type | labels | what it counts |
//! |---|---|---|---|
//! | `intentgate_calls_total` | counter | `tool`, `status` | every outcome of `Gate::call` by its status (`done`, `already_done`, `rejected`, ...), or `ledger_unavailable` when the ledger failed before anything was sent; for a client-executed tool, every grant answered at once and every settle's answer, so one grant and its settle count once |
//! | `intentgate_repeated_calls_total` | counter | `tool` | calls for an intent that already existed (the "duplicate calls" of docs/design.md section 8) |
//! | `intentgate_upstream_request_duration_seconds` | histogram | `tool`, `request` | one upstream request, `request` = `execute` (side effects, reads, idempotent calls, re-sends) or `lookup`; the tool's timeout included |
//! | `intentgate_ledger_operation_duration_seconds` | histogram | `operation` | the ledger operations of the call path: `begin`, `create` (a new key's insert, or the read of a key found taken, in one round trip: on PostgreSQL, instead of `get` and `begin`), `finish`, `get` (the fast path's read), `record_calls` (the counts of repeats answered without a write, written together after the answers) |
//! | `intentgate_lease_waits_total` | counter | `tool` | calls that found the intent's lease held and waited for its holder |
//! | `intentgate_lease_wait_seconds` | histogram | `tool` | how long each of those calls waited, in all |
//! | `intentgate_intents_unknown_total` | counter | `tool` | attempts and lookups that left an intent `unknown` |
//! | `intentgate_lookups_total` | counter | `tool`, `result` | every lookup by what it concluded: `found` (a record proved to be the intent's), `not_found`, `failed` (the lookup could not be made or read, a placeholder without a value included), `mismatch` (a record half the intent's: its key with other fields, or its fields under another key), `unsupported` |
//! | `intentgate_upstream_errors_total` | counter | `tool`, `upstream`, `kind` | upstream requests not processed because the gateway is misconfigured (docs/design.md section 5: the operator's errors), each retry counted; `upstream` is its name in the config (`unnamed` for an upstream that gave none), `kind` one of `unauthorized` (401), `forbidden` (403), `proxy_auth` (407), `route_not_found` (405, or 404 to a fixed route), `connect`, `dns`, `tls` |
//! | `intentgate_resends_stopped_total` | counter | `tool`, `reason` | attempts whose answer stopped their intent's same-key re-sends for good, the provider answering the key the same way every time: `replayed_server_error` (a stored 5xx replayed), `provider_says_no_retry` (a 5xx with `Stripe-Should-Retry: false`), `key_reused` (400 `idempotency_error`: the key was first used with other parameters; the owner is told) |
//! | `intentgate_intents` | gauge | `tool`, `status` | intents in the ledger by status, set from outside ([`Metrics::set_intent_counts`]) |
//! | `intentgate_reconcile_mismatches_total` | counter | `tool`, `kind` | mismatches reconciliation found ([`Metrics::reconcile_mismatches`]) |
//! | `intentgate_alerts_fired_total` | counter | `tool`, `rule` | duplicate-call alerts fired ([`Metrics::alert_fired`]) |
//! | `intentgate_repeated_call_events_dropped_total` | counter | | repeated-call events evicted before every receiver saw them |
//! | `intentgate_connections_open` | gauge | | HTTP connections the server holds open ([`Metrics::connection_opened`]) |
//! | `intentgate_connections_dropped_total` | counter | `reason` | connections the server closed on its own: `header_timeout` (no whole request head in time), `idle` (kept alive with no request), `limit` (refused at the connection limit, none stalled), `body_timeout` (no whole request body in time), `address_limit` (refused at the per-address limit, none stalled), `evicted` (the longest-stalled connection, closed to make room) ([`Metrics::connection_dropped`]) |
//!
//! **Bounded labels.** A label value is a tool name from the config, a status, or one of a
//! few fixed words; never an intent key, a tenant, an argument or a client's address, so the
//! number of series is at most tools × statuses. Callers of the setters pass config tool
//! names too.
//!
//! **Repeated-call events.** [`Gate::repeated_calls`](crate::Gate::repeated_calls) hands
//! out a receiver of every later [`RepeatedCall`], emitted where
//! `intentgate_repeated_calls_total` is counted. The channel is a bounded broadcast: a
//! receiver more than [`REPEATED_CALL_BUFFER`] events behind loses the oldest (its next
//! `recv` says how many), and the gate counts each evicted event in
//! `intentgate_repeated_call_events_dropped_total`. With no receiver nothing is built.
//!
//! **Cost.** An update is one read-locked hash lookup per family (a write lock the first
//! time a label set is seen) and an atomic add or a short mutex for a histogram: about a
//! microsecond for everything one call records, against a ledger write of tens of them.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use intentgate_core::{CallStatus, ResendStop};
use intentgate_ledger::IntentId;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;

/// Repeated-call events a receiver may fall behind before it loses the oldest. A retry storm
/// is hundreds to thousands of repeats a second; the consumer (the alert rules) only counts
/// them per window, so this leaves it seconds of slack, while the buffer stays near a
/// megabyte at worst (an event is a few short strings). A power of two, because the
/// broadcast channel rounds its capacity up to one and the eviction count relies on the
/// exact capacity.
pub const REPEATED_CALL_BUFFER: usize = 4096;

/// Upper bounds of the upstream request histogram, in seconds: a fast API answers in a few
/// milliseconds, a tool's timeout is at most tens of seconds.
const UPSTREAM_BUCKETS_SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the ledger operation histogram, in seconds: a SQLite read takes tens of
/// microseconds, a grouped fsync milliseconds, a struggling PostgreSQL seconds.
const LEDGER_BUCKETS_SECONDS: [f64; 15] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    5.0,
];
/// Upper bounds of the lease wait histogram, in seconds: a wait ends when the holder
/// commits (one upstream request) or at the tool's timeout plus a margin.
const LEASE_WAIT_BUCKETS_SECONDS: [f64; 14] = UPSTREAM_BUCKETS_SECONDS;

/// The `status` of a call that ended in [`GateError::Ledger`](crate::GateError::Ledger):
/// nothing was sent, and the caller got an error rather than an outcome.
pub(crate) const STATUS_LEDGER_UNAVAILABLE: &str = "ledger_unavailable";

/// A call for an intent that already existed, as seen by this gate.
#[derive(Debug, Clone, PartialEq)]
pub struct RepeatedCall {
    pub tenant: String,
    pub tool: String,
    pub key: String,
    pub intent_id: IntentId,
    /// The intent's call count after this call (2 for the first repeat), as far as this gate knows.
    pub call_count: u64,
    pub at_ms: i64,
}

/// Why the HTTP server closed a connection on its own, for
/// `intentgate_connections_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionDrop {
    /// The client had not sent a whole request head within the header read timeout (a slow
    /// or half-open client).
    HeaderTimeout,
    /// A kept-alive connection carried no request for the idle timeout.
    Idle,
    /// Refused on arrival: the server already held its limit of open connections, none of
    /// them stalled.
    Limit,
    /// The client had not sent a whole request body within the body read timeout after its
    /// head (a stalled or trickled body); answered 408 when the answer could still be sent.
    BodyTimeout,
    /// Refused on arrival: the client's address already held its limit of open connections,
    /// none of them stalled.
    AddressLimit,
    /// Closed to make room for a new connection: at a connection limit, the connection that
    /// had waited longest for its client (a request head, a body, or the next request).
    Evicted,
}

impl ConnectionDrop {
    /// Every reason, so that each series exists (at zero) from the start.
    pub const ALL: [ConnectionDrop; 6] = [
        ConnectionDrop::HeaderTimeout,
        ConnectionDrop::Idle,
        ConnectionDrop::Limit,
        ConnectionDrop::BodyTimeout,
        ConnectionDrop::AddressLimit,
        ConnectionDrop::Evicted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionDrop::HeaderTimeout => "header_timeout",
            ConnectionDrop::Idle => "idle",
            ConnectionDrop::Limit => "limit",
            ConnectionDrop::BodyTimeout => "body_timeout",
            ConnectionDrop::AddressLimit => "address_limit",
            ConnectionDrop::Evicted => "evicted",
        }
    }
}

/// An upstream request, for `intentgate_upstream_request_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamRequest {
    Execute,
    Lookup,
}

impl UpstreamRequest {
    fn as_str(self) -> &'static str {
        match self {
            UpstreamRequest::Execute => "execute",
            UpstreamRequest::Lookup => "lookup",
        }
    }
}

/// A ledger operation of the call path, for `intentgate_ledger_operation_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LedgerOperation {
    Begin,
    Create,
    Finish,
    Get,
    RecordCalls,
}

impl LedgerOperation {
    fn as_str(self) -> &'static str {
        match self {
            LedgerOperation::Begin => "begin",
            LedgerOperation::Create => "create",
            LedgerOperation::Finish => "finish",
            LedgerOperation::Get => "get",
            LedgerOperation::RecordCalls => "record_calls",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolStatusLabels {
    tool: String,
    status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolRequestLabels {
    tool: String,
    request: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolResultLabels {
    tool: String,
    result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct UpstreamErrorLabels {
    tool: String,
    upstream: String,
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolKindLabels {
    tool: String,
    kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolReasonLabels {
    tool: String,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolEventLabels {
    tool: String,
    event: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolBudgetLabels {
    tool: String,
    budget: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolRuleLabels {
    tool: String,
    rule: String,
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

fn upstream_histogram() -> Histogram {
    Histogram::new(UPSTREAM_BUCKETS_SECONDS)
}

fn ledger_histogram() -> Histogram {
    Histogram::new(LEDGER_BUCKETS_SECONDS)
}

fn lease_wait_histogram() -> Histogram {
    Histogram::new(LEASE_WAIT_BUCKETS_SECONDS)
}

/// A gate's metrics (see the module documentation for the families).
pub struct Metrics {
    registry: Registry,
    calls: Family<ToolStatusLabels, Counter>,
    repeated_calls: Family<ToolLabels, Counter>,
    upstream_duration: HistogramFamily<ToolRequestLabels>,
    ledger_duration: HistogramFamily<OperationLabels>,
    lease_waits: Family<ToolLabels, Counter>,
    lease_wait_duration: HistogramFamily<ToolLabels>,
    intents_unknown: Family<ToolLabels, Counter>,
    lookups: Family<ToolResultLabels, Counter>,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    resends_stopped: Family<ToolReasonLabels, Counter>,
    approvals: Family<ToolEventLabels, Counter>,
    over_budget: Family<ToolBudgetLabels, Counter>,
    intents: Family<ToolStatusLabels, Gauge>,
    /// Every (tool, status) pair `intents` was ever set for, so that a pair missing from a
    /// later refresh is set to zero rather than left at its old count. Held across a whole
    /// refresh, so two refreshes don't interleave.
    intents_seen: Mutex<HashSet<(String, String)>>,
    reconcile_mismatches: Family<ToolKindLabels, Counter>,
    alerts_fired: Family<ToolRuleLabels, Counter>,
    repeated_call_events_dropped: Counter,
    connections_open: Gauge,
    connections_dropped: Family<ReasonLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every family registered, no series yet. Names are given without `_total`: the
    /// encoder adds it to counters.
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            calls: Family::default(),
            repeated_calls: Family::default(),
            upstream_duration: Family::new_with_constructor(upstream_histogram),
            ledger_duration: Family::new_with_constructor(ledger_histogram),
            lease_waits: Family::default(),
            lease_wait_duration: Family::new_with_constructor(lease_wait_histogram),
            intents_unknown: Family::default(),
            lookups: Family::default(),
            upstream_errors: Family::default(),
            resends_stopped: Family::default(),
            approvals: Family::default(),
            over_budget: Family::default(),
            intents: Family::default(),
            intents_seen: Mutex::default(),
            reconcile_mismatches: Family::default(),
            alerts_fired: Family::default(),
            repeated_call_events_dropped: Counter::default(),
            connections_open: Gauge::default(),
            connections_dropped: Family::default(),
        };
        // Registered in the order written, which is the order `encode` prints them in.
        metrics.register_call_path();
        metrics.register_operations();
        // One count per process, whichever gate's registry is scraped.
        metrics.registry.register(
            "intentgate_trace_spans_dropped",
            "Spans not exported because the export queue was full (a slow or unreachable collector)",
            crate::trace::spans_dropped().clone(),
        );
        for reason in ConnectionDrop::ALL {
            let _ = metrics.connections_dropped.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        metrics
    }

    /// The families of the call path: calls, upstream requests, ledger operations, leases,
    /// lookups and upstream errors.
    fn register_call_path(&mut self) {
        self.registry.register(
            "intentgate_calls",
            "Outcomes of tool calls, by tool and status",
            self.calls.clone(),
        );
        self.registry.register(
            "intentgate_repeated_calls",
            "Calls for an intent that already existed (duplicate calls)",
            self.repeated_calls.clone(),
        );
        self.registry.register(
            "intentgate_upstream_request_duration_seconds",
            "Duration of one upstream request (execute or lookup), timeout included",
            self.upstream_duration.clone(),
        );
        self.registry.register(
            "intentgate_ledger_operation_duration_seconds",
            "Duration of the call path's ledger operations (begin, finish, get)",
            self.ledger_duration.clone(),
        );
        self.registry.register(
            "intentgate_lease_waits",
            "Calls that found the intent's lease held and waited for its holder",
            self.lease_waits.clone(),
        );
        self.registry.register(
            "intentgate_lease_wait_seconds",
            "Time one call spent waiting for another's lease, in all",
            self.lease_wait_duration.clone(),
        );
        self.registry.register(
            "intentgate_intents_unknown",
            "Attempts and lookups that left an intent unknown",
            self.intents_unknown.clone(),
        );
        self.registry.register(
            "intentgate_lookups",
            "Lookups of side effects, by tool and what they concluded",
            self.lookups.clone(),
        );
        self.registry
            .register("intentgate_upstream_errors", "Upstream requests not processed because the gateway is misconfigured, by tool, upstream and kind", self.upstream_errors.clone());
        self.registry
            .register("intentgate_resends_stopped", "Attempts whose answer stopped their intent's same-key re-sends for good, by tool and reason", self.resends_stopped.clone());
    }

    /// The families of the operations around it: approvals, budgets, the ledger's intents,
    /// reconciliation, alerts and connections.
    fn register_operations(&mut self) {
        self.registry
            .register("intentgate_approvals", "Intents held for approval, and what became of them (event: held, approved, denied, expired)", self.approvals.clone());
        self.registry.register(
            "intentgate_over_budget",
            "New intents refused because they went beyond a budget, by tool and budget",
            self.over_budget.clone(),
        );
        self.registry.register(
            "intentgate_intents",
            "Intents in the ledger, by tool and status",
            self.intents.clone(),
        );
        self.registry.register(
            "intentgate_reconcile_mismatches",
            "Mismatches between the ledger and the provider found by reconciliation",
            self.reconcile_mismatches.clone(),
        );
        self.registry.register(
            "intentgate_alerts_fired",
            "Duplicate-call alerts fired, by tool and rule",
            self.alerts_fired.clone(),
        );
        self.registry.register(
            "intentgate_repeated_call_events_dropped",
            "Repeated-call events evicted before every receiver saw them",
            self.repeated_call_events_dropped.clone(),
        );
        self.registry.register(
            "intentgate_connections_open",
            "HTTP connections the server holds open",
            self.connections_open.clone(),
        );
        self.registry
            .register("intentgate_connections_dropped", "Connections the server closed on its own: no request head or body in time, idle, over a connection limit, or closed to make room", self.connections_dropped.clone());
    }

    /// Every family in the Prometheus text exposition format, version 0.0.4 (served as
    /// `text/plain; version=0.0.4; charset=utf-8`).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
            .expect("writing to a String does not fail");
        text
    }

    /// Sets `intentgate_intents` to these counts of (tool, status, intents); every pair set
    /// before and missing now goes to zero. Pass tool names of the config and intent
    /// statuses only.
    pub fn set_intent_counts(&self, counts: impl IntoIterator<Item = (String, String, u64)>) {
        let mut seen = self.intents_seen.lock().expect("intent counts lock");
        let mut now = HashSet::new();
        for (tool, status, count) in counts {
            let labels = ToolStatusLabels { tool, status };
            self.intents
                .get_or_create(&labels)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
            now.insert((labels.tool, labels.status));
        }
        for (tool, status) in seen.difference(&now) {
            let labels = ToolStatusLabels {
                tool: tool.clone(),
                status: status.clone(),
            };
            self.intents.get_or_create(&labels).set(0);
        }
        seen.extend(now);
    }

    /// Adds `count` mismatches of `kind` found by reconciliation for `tool`.
    pub fn reconcile_mismatches(&self, tool: &str, kind: &str, count: u64) {
        let labels = ToolKindLabels {
            tool: tool.to_owned(),
            kind: kind.to_owned(),
        };
        self.reconcile_mismatches
            .get_or_create(&labels)
            .inc_by(count);
    }

    /// Counts one duplicate-call alert fired for `tool` by `rule`.
    pub fn alert_fired(&self, tool: &str, rule: &str) {
        let labels = ToolRuleLabels {
            tool: tool.to_owned(),
            rule: rule.to_owned(),
        };
        self.alerts_fired.get_or_create(&labels).inc();
    }

    /// Counts one more open HTTP connection; pair it with [`Metrics::connection_closed`].
    pub fn connection_opened(&self) {
        self.connections_open.inc();
    }

    /// Counts one HTTP connection fewer.
    pub fn connection_closed(&self) {
        self.connections_open.dec();
    }

    /// Counts a connection the server closed on its own, and why.
    pub fn connection_dropped(&self, reason: ConnectionDrop) {
        self.connections_dropped
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub(crate) fn call(&self, tool: &str, status: CallStatus) {
        self.call_status(tool, status.as_str());
    }

    pub(crate) fn call_status(&self, tool: &str, status: &str) {
        let labels = ToolStatusLabels {
            tool: tool.to_owned(),
            status: status.to_owned(),
        };
        self.calls.get_or_create(&labels).inc();
    }

    pub(crate) fn repeated_call(&self, tool: &str) {
        self.repeated_calls.get_or_create(&tool_labels(tool)).inc();
    }

    pub(crate) fn upstream_request(&self, tool: &str, request: UpstreamRequest, took: Duration) {
        let labels = ToolRequestLabels {
            tool: tool.to_owned(),
            request: request.as_str(),
        };
        self.upstream_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub(crate) fn ledger_operation(&self, operation: LedgerOperation, took: Duration) {
        let labels = OperationLabels {
            operation: operation.as_str(),
        };
        self.ledger_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A call starts waiting for a held lease (counted once per call).
    pub(crate) fn lease_wait_started(&self, tool: &str) {
        self.lease_waits.get_or_create(&tool_labels(tool)).inc();
    }

    /// A call that waited is done waiting, after `waited` in all.
    pub(crate) fn lease_waited(&self, tool: &str, waited: Duration) {
        self.lease_wait_duration
            .get_or_create(&tool_labels(tool))
            .observe(waited.as_secs_f64());
    }

    /// One request of `tool` to `upstream` not processed because the gateway is
    /// misconfigured, of `kind` (`Misconfiguration::as_str`).
    pub(crate) fn upstream_error(&self, tool: &str, upstream: &str, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels {
                tool: tool.to_owned(),
                upstream: upstream.to_owned(),
                kind,
            })
            .inc();
    }

    /// An attempt of `tool` whose answer stopped its intent's same-key re-sends.
    pub(crate) fn resends_stopped(&self, tool: &str, reason: ResendStop) {
        self.resends_stopped
            .get_or_create(&ToolReasonLabels {
                tool: tool.to_owned(),
                reason: reason.as_str(),
            })
            .inc();
    }

    /// An intent of `tool` held for approval, or its request decided (`approved`, `denied`)
    /// or `expired`.
    pub(crate) fn approval(&self, tool: &str, event: &'static str) {
        self.approvals
            .get_or_create(&ToolEventLabels {
                tool: tool.to_owned(),
                event,
            })
            .inc();
    }

    /// A new intent of `tool` refused by `budget`.
    pub(crate) fn over_budget(&self, tool: &str, budget: &str) {
        self.over_budget
            .get_or_create(&ToolBudgetLabels {
                tool: tool.to_owned(),
                budget: budget.to_owned(),
            })
            .inc();
    }

    pub(crate) fn intent_left_unknown(&self, tool: &str) {
        self.intents_unknown.get_or_create(&tool_labels(tool)).inc();
    }

    /// One lookup of `tool`, by [`LookupOutcome::kind`](crate::LookupOutcome::kind).
    pub(crate) fn lookup(&self, tool: &str, result: &'static str) {
        self.lookups
            .get_or_create(&ToolResultLabels {
                tool: tool.to_owned(),
                result,
            })
            .inc();
    }
}

fn tool_labels(tool: &str) -> ToolLabels {
    ToolLabels {
        tool: tool.to_owned(),
    }
}

/// The sending side of the repeated-call events.
pub(crate) struct RepeatedCalls {
    sender: broadcast::Sender<RepeatedCall>,
}

impl RepeatedCalls {
    pub(crate) fn new() -> RepeatedCalls {
        let (sender, _) = broadcast::channel(REPEATED_CALL_BUFFER);
        RepeatedCalls { sender }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<RepeatedCall> {
        self.sender.subscribe()
    }

    /// Sends the event `build` makes, if anyone listens; counts the oldest event as dropped
    /// when the buffer is full (some receiver has not seen it, or it would have left).
    pub(crate) fn send(&self, metrics: &Metrics, build: impl FnOnce() -> RepeatedCall) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        if self.sender.len() >= REPEATED_CALL_BUFFER {
            metrics.repeated_call_events_dropped.inc();
        }
        // Fails only when the last receiver went away since the check: nobody to tell.
        let _ = self.sender.send(build());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line that starts with `series` (name and labels).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .map(|value| value.parse().unwrap())
    }

    /// Asserts each of `expected`, a series (name and labels) and its value as the text format
    /// writes them, against the value of that series in what `metrics` encodes.
    fn assert_samples(metrics: &Metrics, expected: &[&str]) {
        let text = metrics.encode();
        for line in expected {
            let (series, value) = line.rsplit_once(' ').expect("a series and its value");
            let value: f64 = value.parse().expect("a number");
            assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
        }
    }

    #[test]
    fn counters_are_encoded_in_the_text_format_with_their_total_suffix() {
        let metrics = Metrics::new();
        metrics.call("refund_order", CallStatus::Done);
        metrics.call("refund_order", CallStatus::Done);
        metrics.call_status("refund_order", STATUS_LEDGER_UNAVAILABLE);
        metrics.repeated_call("refund_order");
        let text = metrics.encode();
        assert!(
            text.contains("# TYPE intentgate_calls_total counter\n"),
            "{text}"
        );
        assert_samples(
            &metrics,
            &[
                r#"intentgate_calls_total{tool="refund_order",status="done"} 2.0"#,
                r#"intentgate_calls_total{tool="refund_order",status="ledger_unavailable"} 1.0"#,
                r#"intentgate_repeated_calls_total{tool="refund_order"} 1.0"#,
            ],
        );
        assert!(
            !text.contains("# EOF"),
            "the 0.0.4 format has no EOF marker"
        );
    }

    #[test]
    fn histograms_have_their_buckets_and_counts() {
        let metrics = Metrics::new();
        metrics.upstream_request(
            "refund_order",
            UpstreamRequest::Execute,
            Duration::from_millis(3),
        );
        metrics.ledger_operation(LedgerOperation::Begin, Duration::from_micros(70));
        assert_samples(
            &metrics,
            &[
                r#"intentgate_upstream_request_duration_seconds_bucket{tool="refund_order",request="execute",le="0.0025"} 0.0"#,
                r#"intentgate_upstream_request_duration_seconds_bucket{tool="refund_order",request="execute",le="0.005"} 1.0"#,
                r#"intentgate_ledger_operation_duration_seconds_count{operation="begin"} 1.0"#,
                r#"intentgate_ledger_operation_duration_seconds_bucket{operation="begin",le="0.0001"} 1.0"#,
            ],
        );
    }

    #[test]
    fn intent_counts_that_disappear_go_to_zero() {
        let metrics = Metrics::new();
        metrics.set_intent_counts([
            ("refund_order".to_owned(), "done".to_owned(), 7),
            ("refund_order".to_owned(), "unknown".to_owned(), 2),
        ]);
        metrics.set_intent_counts([("refund_order".to_owned(), "done".to_owned(), 9)]);
        assert_samples(
            &metrics,
            &[
                r#"intentgate_intents{tool="refund_order",status="done"} 9.0"#,
                r#"intentgate_intents{tool="refund_order",status="unknown"} 0.0"#,
            ],
        );
    }

    #[test]
    fn setters_from_outside_count_under_their_labels() {
        let metrics = Metrics::new();
        metrics.reconcile_mismatches("refund_order", "duplicate", 3);
        metrics.reconcile_mismatches("refund_order", "duplicate", 1);
        metrics.alert_fired("refund_order", "repeats_per_minute");
        assert_samples(
            &metrics,
            &[
                r#"intentgate_reconcile_mismatches_total{tool="refund_order",kind="duplicate"} 4.0"#,
                r#"intentgate_alerts_fired_total{tool="refund_order",rule="repeats_per_minute"} 1.0"#,
            ],
        );
    }

    #[test]
    fn connections_are_counted_open_and_dropped_by_reason() {
        let metrics = Metrics::new();
        let text = metrics.encode();
        for reason in ConnectionDrop::ALL {
            let series = format!(
                "intentgate_connections_dropped_total{{reason=\"{}\"}}",
                reason.as_str()
            );
            assert_eq!(sample(&text, &series), Some(0.0), "{text}");
        }
        metrics.connection_opened();
        metrics.connection_opened();
        metrics.connection_closed();
        metrics.connection_dropped(ConnectionDrop::HeaderTimeout);
        assert_samples(
            &metrics,
            &[
                r#"intentgate_connections_open 1.0"#,
                r#"intentgate_connections_dropped_total{reason="header_timeout"} 1.0"#,
            ],
        );
    }

    fn event(call_count: u64) -> RepeatedCall {
        RepeatedCall {
            tenant: "default".to_owned(),
            tool: "refund_order".to_owned(),
            key: "refund:1:1.00".to_owned(),
            intent_id: 1,
            call_count,
            at_ms: 0,
        }
    }

    #[test]
    fn with_no_receiver_no_event_is_built() {
        let metrics = Metrics::new();
        let events = RepeatedCalls::new();
        events.send(&metrics, || unreachable!("nobody listens"));
    }

    #[test]
    fn a_receiver_that_falls_behind_loses_the_oldest_events_and_they_are_counted() {
        let metrics = Metrics::new();
        let events = RepeatedCalls::new();
        let mut receiver = events.subscribe();
        let extra = 3;
        for n in 0..(REPEATED_CALL_BUFFER as u64 + extra) {
            events.send(&metrics, || event(n));
        }
        assert_eq!(metrics.repeated_call_events_dropped.get(), extra);
        assert_eq!(
            receiver.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(extra))
        );
        assert_eq!(receiver.try_recv().unwrap().call_count, extra);
    }
}

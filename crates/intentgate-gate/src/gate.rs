//! [`Gate`]: the engine's state, made once and shared by every call, and what it offers
//! besides calls (its tools, settings, metrics and the receivers of its notices).
//!
//! The call path itself is the `call` module, one submodule per phase of docs/design.md
//! section 5; the resolution of `unknown` intents is `resolve`, the sweeper `sweeper`, the
//! intent API `client` and approvals `approval`. Each adds its methods to `Gate`; this module
//! depends on none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use intentgate_core::ToolDefinition;
use intentgate_ledger::Ledger;
use tokio::sync::broadcast;

use crate::approval::notice::{HeldNotice, held_channel};
use crate::clock::Clock;
use crate::error::GateError;
use crate::metrics::{Metrics, RepeatedCall, RepeatedCalls};
use crate::misconfigured::{DegradedUpstream, UpstreamError, UpstreamHealth};
use crate::options::GateOptions;
use crate::resolution::ResendBudget;
use crate::trace;
use crate::upstream::{
    KEY_REUSE_BUFFER, KeyReused, LOOKUP_MISMATCH_BUFFER, LookupMismatch, Upstream,
};

/// A loaded tool: its definition and its compiled input schema.
pub(crate) struct Tool {
    /// The tool as configured.
    pub(crate) definition: ToolDefinition,
    /// The input schema, compiled once ([`crate::schema::validator`]): formats asserted,
    /// numbers compared exactly as sent.
    pub(crate) validator: jsonschema::Validator,
}

/// The retry-safe gateway engine. Cheap to share: wrap it in an `Arc`.
pub struct Gate {
    /// The loaded tools by name.
    pub(crate) tools: HashMap<String, Tool>,
    /// The intent ledger: every side effect's intent, lease and outcome.
    pub(crate) ledger: Arc<dyn Ledger>,
    /// Where requests and lookups go: the tools' HTTP or MCP upstreams.
    pub(crate) upstream: Arc<dyn Upstream>,
    /// The time leases, intervals and events are measured by (a test's is its own).
    pub(crate) clock: Arc<dyn Clock>,
    /// The settings this gate runs with.
    pub(crate) options: GateOptions,
    /// The number after the instance in the next lease owner id (`{instance}/{n}`), so that
    /// every call and sweeper step of this process holds leases under an id of its own.
    pub(crate) lease_owner_sequence: AtomicU64,
    /// The kill-switch flags as last read from the ledger, trusted for
    /// [`FLAG_REFRESH`](crate::FLAG_REFRESH).
    pub(crate) flags: Mutex<FlagCache>,
    /// Held by the one caller re-reading the flags; the others wait for its read.
    pub(crate) flag_refresh: tokio::sync::Mutex<FlagRefresh>,
    /// Reads of the flags begun, failed or not: a caller that waited for the refresh and
    /// finds it moved, the copy still stale, shares the error of the read it waited for.
    pub(crate) flag_reads: AtomicU64,
    /// What this gate counts and times, in the Prometheus text format.
    pub(crate) metrics: Arc<Metrics>,
    /// Calls for intents that already existed, for the duplicate-call alerts.
    pub(crate) repeated_calls: RepeatedCalls,
    /// The upstream errors that are the operator's, by tool and upstream: what `/readyz`
    /// reports and the owners are told.
    pub(crate) upstream_health: UpstreamHealth,
    /// Lookups that found a record half an intent's, for the owners' notices.
    pub(crate) lookup_mismatches: broadcast::Sender<LookupMismatch>,
    /// Attempts the provider refused because their key was first used with other
    /// parameters, for the owners' notices.
    pub(crate) key_reuses: broadcast::Sender<KeyReused>,
    /// Calls held for approval, for the owners' notices.
    pub(crate) held: broadcast::Sender<HeldNotice>,
    /// Same-key re-sends left this second, per tool ([`crate::Resolution::resends_per_second`]).
    pub(crate) resend_budget: ResendBudget,
    /// Settled intents as last read, to answer their repeats without a read while the
    /// ledger says nothing settled has changed.
    pub(crate) settled: crate::call::settled::SettledCache,
    /// The counts of repeats answered without a write, until they are written together.
    pub(crate) repeat_counts: crate::call::settled::RepeatCounts,
    /// The last call the ledger failed before anything was sent, unless a call has been
    /// served since: what `/readyz` reports while reads still work (a full disk).
    pub(crate) ledger_failure: Mutex<Option<LedgerFailure>>,
    /// Calls the ledger failed before anything was sent, since the start: a call reads it
    /// when it starts, and its outcome clears [`Gate::ledger_failure`] only when no failure
    /// was noted since.
    pub(crate) ledger_failures_noted: AtomicU64,
}

/// How long a call the ledger failed keeps `/readyz` not ready when no call is served after
/// it: long enough for a load balancer's probe to see it, short enough that the traffic the
/// probe holds back comes again to find out whether the ledger writes again.
pub const LEDGER_FAILURE_NOT_READY_MS: i64 = 5_000;

/// A call the ledger failed before anything was sent, as `/readyz` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerFailure {
    /// When (the gate's clock, milliseconds).
    pub at_ms: i64,
    /// The ledger's error, as the log has it.
    pub error: String,
}

/// The last read of the kill-switch flags, held while one is made.
#[derive(Default)]
pub(crate) struct FlagRefresh {
    /// Its error, when it failed.
    pub(crate) failed: Option<intentgate_ledger::LedgerError>,
}

/// The kill-switch flags as last read from the ledger.
#[derive(Default)]
pub(crate) struct FlagCache {
    /// When they were read (clock milliseconds); `None` before the first read.
    pub(crate) read_ms: Option<i64>,
    /// By tool: true when switched off.
    pub(crate) disabled: HashMap<String, bool>,
}

impl Gate {
    /// A gate over `tools`, checked here: every input schema compiles, no two tools share a
    /// name, and a tool with sensitive arguments has a hash key.
    pub fn new(
        tools: Vec<ToolDefinition>,
        ledger: Arc<dyn Ledger>,
        upstream: Arc<dyn Upstream>,
        clock: Arc<dyn Clock>,
        options: GateOptions,
    ) -> Result<Gate, GateError> {
        let mut by_name = HashMap::new();
        for definition in tools {
            definition.check_hash_key().map_err(GateError::Definition)?;
            let validator =
                crate::schema::validator(&definition.input_schema).map_err(|error| {
                    GateError::BadSchema {
                        tool: definition.name.clone(),
                        reason: error.to_string(),
                    }
                })?;
            let name = definition.name.clone();
            if by_name
                .insert(
                    name.clone(),
                    Tool {
                        definition,
                        validator,
                    },
                )
                .is_some()
            {
                return Err(GateError::DuplicateTool(name));
            }
        }
        Ok(Gate {
            tools: by_name,
            ledger,
            upstream,
            clock,
            options,
            lease_owner_sequence: AtomicU64::new(0),
            flags: Mutex::default(),
            flag_refresh: tokio::sync::Mutex::default(),
            flag_reads: AtomicU64::new(0),
            metrics: Arc::new(Metrics::new()),
            repeated_calls: RepeatedCalls::new(),
            upstream_health: UpstreamHealth::new(),
            lookup_mismatches: broadcast::channel(LOOKUP_MISMATCH_BUFFER).0,
            key_reuses: broadcast::channel(KEY_REUSE_BUFFER).0,
            held: held_channel(),
            settled: crate::call::settled::SettledCache::default(),
            repeat_counts: crate::call::settled::RepeatCounts::default(),
            resend_budget: ResendBudget::default(),
            ledger_failure: Mutex::default(),
            ledger_failures_noted: AtomicU64::new(0),
        })
    }

    /// The loaded tools, sorted by name.
    pub fn tools(&self) -> Vec<&ToolDefinition> {
        let mut tools: Vec<&ToolDefinition> =
            self.tools.values().map(|tool| &tool.definition).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// One loaded tool.
    pub fn tool(&self, name: &str) -> Option<&ToolDefinition> {
        self.tools.get(name).map(|tool| &tool.definition)
    }

    /// The intent ledger this gate records in.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// The settings this gate runs with; `instance` begins every lease owner it writes, and
    /// is what a gateway process registers in the ledger.
    pub fn options(&self) -> &GateOptions {
        &self.options
    }

    /// This gate's metrics (see the `metrics` module for the families).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Every repeated call from now on. Bounded: a receiver that falls more than
    /// [`REPEATED_CALL_BUFFER`](crate::REPEATED_CALL_BUFFER) events behind loses the oldest
    /// (counted in `intentgate_repeated_call_events_dropped_total`).
    pub fn repeated_calls(&self) -> broadcast::Receiver<RepeatedCall> {
        self.repeated_calls.subscribe()
    }

    /// Every upstream error that is the operator's from now on (a wrong credential, a route
    /// that does not exist, an upstream that can't be reached): one event per tool and
    /// upstream at the first failure of a streak, then at most one per
    /// [`UPSTREAM_ERROR_LOG_EVERY`](crate::UPSTREAM_ERROR_LOG_EVERY) while it lasts, saying how
    /// many failures it stands for. Bounded: a receiver more than
    /// [`UPSTREAM_ERROR_BUFFER`](crate::UPSTREAM_ERROR_BUFFER) events behind loses the oldest.
    pub fn upstream_errors(&self) -> broadcast::Receiver<UpstreamError> {
        self.upstream_health.subscribe()
    }

    /// Every lookup from now on that found a record half an intent's (its provider key with
    /// other business fields, or its fields under another gateway key): nothing was settled,
    /// and the owner must look. Bounded: a receiver more than
    /// [`LOOKUP_MISMATCH_BUFFER`] events behind loses the oldest.
    pub fn lookup_mismatches(&self) -> broadcast::Receiver<LookupMismatch> {
        self.lookup_mismatches.subscribe()
    }

    /// Every attempt from now on that the provider refused because its idempotency key was
    /// first used for a request with other parameters (Stripe's 400 `idempotency_error`):
    /// two different requests share a key, the intent stays `unknown` with its re-sends
    /// stopped, and the owner must look. Bounded: a receiver more than
    /// [`KEY_REUSE_BUFFER`] events behind loses the oldest.
    pub fn key_reuses(&self) -> broadcast::Receiver<KeyReused> {
        self.key_reuses.subscribe()
    }

    /// The tools whose requests to an upstream have all failed as the operator's errors since
    /// the first of them (none answered as configured since), by upstream and tool: what
    /// `/readyz` reports.
    pub fn degraded_upstreams(&self) -> Vec<DegradedUpstream> {
        self.upstream_health.degraded()
    }

    /// The last call the ledger failed before anything was sent, if no call has been served
    /// since and it is less than [`LEDGER_FAILURE_NOT_READY_MS`] old: reads may still work
    /// (a full disk fails writes only), so `/readyz` reports this too.
    pub fn recent_ledger_failure(&self) -> Option<LedgerFailure> {
        let failure = self.ledger_failure.lock().unwrap().clone()?;
        (self.clock.now_ms() - failure.at_ms < LEDGER_FAILURE_NOT_READY_MS).then_some(failure)
    }

    /// How many calls the ledger has failed so far: what a call reads as it starts, to pass
    /// to [`Gate::note_ledger`] when it ends.
    pub(crate) fn ledger_failures_noted(&self) -> u64 {
        self.ledger_failures_noted.load(Ordering::SeqCst)
    }

    /// Notes how a call ended for [`Gate::recent_ledger_failure`]: a ledger error before
    /// anything was sent is remembered; an outcome forgets it, unless a failure was noted
    /// after the call started (`noted_at_start`, from [`Gate::ledger_failures_noted`]).
    ///
    /// A call that started before the failure wrote its `begin` before it, and its outcome
    /// may be written when a `begin` is not: a failing fsync fails the commits that sync
    /// (every `begin`, under strict durability) while those that don't (outcomes) succeed.
    /// Such an outcome says nothing of whether new calls can be recorded again, and
    /// `/readyz` would turn ready between two refused calls.
    pub(crate) fn note_ledger(
        &self,
        failed: Option<&intentgate_ledger::LedgerError>,
        noted_at_start: u64,
    ) {
        let mut last = self.ledger_failure.lock().unwrap();
        match failed {
            Some(error) => {
                self.ledger_failures_noted.fetch_add(1, Ordering::SeqCst);
                *last = Some(LedgerFailure {
                    at_ms: self.clock.now_ms(),
                    error: error.to_string(),
                });
            }
            None => {
                if last.is_some() && self.ledger_failures_noted() == noted_at_start {
                    *last = None;
                }
            }
        }
    }

    /// A lease owner id unique across replicas and calls: `{instance}/{n}`, or
    /// `{instance}/{role}/{n}` for a background role such as the sweeper.
    pub(crate) fn lease_owner(&self, role: &str) -> String {
        let n = self.lease_owner_sequence.fetch_add(1, Ordering::Relaxed);
        if role.is_empty() {
            format!("{}/{n}", self.options.instance)
        } else {
            format!("{}/{role}/{n}", self.options.instance)
        }
    }

    /// Links `span` to the span that executed the intent `id` (its trace kept by
    /// `Ledger::record_trace`), when traces are on: the trace of a repeat, or of the
    /// sweeper's work on the intent, then points at the original call.
    pub(crate) async fn link_to_executing(&self, span: &tracing::Span, id: i64) {
        if !trace::enabled() {
            return;
        }
        match self.ledger.trace_of(id).await {
            Ok(traceparent) => trace::link_to(span, traceparent.as_deref()),
            Err(error) => tracing::debug!(intent = id, %error, "could not read the call's trace"),
        }
    }
}

//! The call path (docs/design.md section 5), one method per phase.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use intentgate_core::key::provider_key;
use intentgate_core::limits::{CALLER_KEY_LENGTH_MAX, RESULT_BYTES_MAX};
use intentgate_core::{
    CallStatus, Effect, Executor, Fingerprint, IntentStatus, KeyError, OutcomeClass, OutcomeReason,
    RequestFacts, ResendStop, ToolDefinition, ToolError, UpstreamObservation, classify_with,
    differing_fields,
};
use intentgate_ledger::{
    Begin, BeginRequest, Bound, CallerKey, Finish, Finished, IntentRecord, Ledger, LedgerError,
    ProcessEnd, instance_of,
};
use serde_json::Value;
use tokio::sync::broadcast;
use tracing::Instrument;

use crate::clock::Clock;
use crate::metrics::{
    LedgerOperation, Metrics, RepeatedCall, RepeatedCalls, STATUS_LEDGER_UNAVAILABLE,
    UpstreamRequest,
};
use crate::misconfigured::{DegradedUpstream, Failure, UpstreamError, UpstreamHealth};
use crate::outcome::CallOutcome;
use crate::resolve::{Driver, ResendBudget, Resolution, StepRequest, millis};
use crate::trace;
use crate::upstream::{
    KEY_REUSE_BUFFER, KeyReused, LOOKUP_MISMATCH_BUFFER, LookupMismatch, LookupOutcome, Upstream,
    UpstreamCall,
};

/// Time a waiting caller gives the lease holder beyond the tool's timeout before it answers
/// from the ledger.
pub const WAIT_MARGIN: Duration = Duration::from_secs(1);
/// Time added to a lease beyond the attempt's worst case, so a slow but healthy holder is
/// not taken for a crashed one.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Least time a call's lease must have left for its outcome to be answered before the write
/// commits ([`Gate::record_queued`]): far more than a commit takes, so the lease still runs
/// when it lands. A call that used up more of its lease waits for the commit.
pub const QUEUED_FINISH_MIN_LEASE: Duration = Duration::from_secs(2);
/// Longest `Retry-After` the gate honours; a longer one ends the retries (`not_executed`).
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(5);
/// First backoff of a bounded retry; doubles per retry, capped by [`RETRY_AFTER_CAP`].
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Least time between two lookups of one unknown intent; repeats in between get
/// `pending_unknown` at once, so a storm does not become a storm of lookups.
pub const LOOKUP_INTERVAL: Duration = Duration::from_secs(5);
/// How long a cached kill-switch flag is trusted before the ledger is read again. Bounds
/// how late a replica honours a switch.
pub const FLAG_REFRESH: Duration = Duration::from_millis(500);
/// How long a test waits for a changed flag to be seen.
pub const FLAG_REFRESH_FOR_TESTS: Duration = Duration::from_millis(600);
/// How often a caller waiting for another's lease checks that the owner's process still
/// runs (and asks `begin` again): a dead process never commits, so no change wakes the
/// waiter. Often enough that a killed process's intents are taken over well within a
/// second; each check is one indexed read, made only while waiting.
pub const OWNER_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Settings of a gate.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// This process's id in lease owners; unique among replicas sharing a ledger.
    pub instance: String,
    pub lookup_interval: Duration,
    pub retry_after_cap: Duration,
    pub backoff_base: Duration,
    /// How unknown intents are driven to an answer: the same-key re-send backoff and its
    /// rate limit (docs/design.md section 5).
    pub resolution: Resolution,
    /// How often a waiting caller checks the lease owner's process ([`OWNER_CHECK_EVERY`]).
    pub owner_check_every: Duration,
}

impl Default for GateOptions {
    fn default() -> GateOptions {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or(0);
        GateOptions {
            instance: format!("{}-{nanos:x}", std::process::id()),
            lookup_interval: LOOKUP_INTERVAL,
            retry_after_cap: RETRY_AFTER_CAP,
            backoff_base: BACKOFF_BASE,
            resolution: Resolution::default(),
            owner_check_every: OWNER_CHECK_EVERY,
        }
    }
}

/// Who is calling, beyond the arguments.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub tenant: String,
    /// The application's intent id, for tools whose key uses `{intent_id}` (and the
    /// requests that send it).
    pub intent_id: Option<String>,
    /// The key the caller chose for this operation (the HTTP API's IETF `Idempotency-Key`
    /// header). It never replaces the intent key, which is the tool's business key: for a
    /// key template that uses `{intent_id}` it is the intent id (an `intent_id` that
    /// disagrees is `invalid_arguments`), and for every side effect it is bound, within the
    /// tenant and the tool, to the intent its first call named ([`Ledger::bind_caller_key`]).
    /// A later call under it that names another intent (another business key, or other
    /// arguments) is refused with [`GateError::IdempotencyKeyReused`], nothing recorded or
    /// executed; the same intent under a second key is one intent, as any repeat. Reads and
    /// idempotent tools record no intent and ignore it. At most `CALLER_KEY_LENGTH_MAX`
    /// bytes, not empty: another is `invalid_arguments`.
    pub explicit_key: Option<String>,
    /// Who is calling: the credential's subject (`Principal::subject`), never the
    /// credential. An intent held for approval remembers it, and it may never approve that
    /// intent (docs/design.md section 13).
    pub caller: String,
}

impl Default for CallContext {
    fn default() -> CallContext {
        CallContext {
            tenant: "default".to_owned(),
            intent_id: None,
            explicit_key: None,
            caller: "anonymous".to_owned(),
        }
    }
}

/// Errors of the gate itself, as opposed to outcomes of a call.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("no tool named `{0}`")]
    UnknownTool(String),
    /// The call's tenant is not a tenant name: nothing was recorded or executed.
    #[error("invalid tenant: {0}")]
    InvalidTenant(#[from] intentgate_core::TenantError),
    #[error("tool `{tool}`: its input schema is not a valid JSON Schema: {reason}")]
    BadSchema { tool: String, reason: String },
    #[error("two tools are named `{0}`")]
    DuplicateTool(String),
    /// A definition the gate can't run as it is (sensitive arguments without a hash key).
    #[error("{0}")]
    Definition(ToolError),
    /// The tool is executed by the caller's own code ([`Executor::Client`]): it is granted
    /// through the intent API, never called.
    #[error(
        "tool `{0}` is executed by the caller's own code: ask for a grant with POST /v1/tools/{0}/intents instead of calling it"
    )]
    ClientExecuted(String),
    /// The intent API was asked for a grant of a tool the gateway executes itself.
    #[error("tool `{0}` is executed by the gateway: call it with POST /v1/tools/{0}/call")]
    NotClientExecuted(String),
    /// No randomness for a lease token of the intent API: nothing was recorded or granted.
    #[error("no randomness for a lease token, nothing was granted: {0}")]
    Randomness(getrandom::Error),
    /// The call's own key for its operation ([`CallContext::explicit_key`], the HTTP API's
    /// `Idempotency-Key`) was first used, in this tenant and tool, for another intent: another
    /// business key, or the same key with other arguments. Nothing was recorded or executed.
    #[error("{}", key_reused(.caller_key, .first_intent_key, .intent_key, .differing_fields))]
    IdempotencyKeyReused {
        /// The caller's key, as it sent it.
        caller_key: String,
        /// The key of the intent the caller key was first used for.
        first_intent_key: String,
        /// The key of the intent this call's arguments name.
        intent_key: String,
        /// The arguments that differ from those of the intent first named (empty when that
        /// intent is no longer, or never was, in the ledger).
        differing_fields: Vec<String>,
    },
    /// The ledger failed before anything was sent upstream: nothing was executed.
    #[error("the intent ledger is unavailable, nothing was executed: {0}")]
    Ledger(#[from] LedgerError),
}

/// The message of [`GateError::IdempotencyKeyReused`].
fn key_reused(
    caller_key: &str,
    first_intent_key: &str,
    intent_key: &str,
    differing_fields: &[String],
) -> String {
    let first = if first_intent_key == intent_key {
        format!("intent `{first_intent_key}` with other arguments")
    } else {
        format!("intent `{first_intent_key}`, and this call's arguments name intent `{intent_key}`")
    };
    let differing = if differing_fields.is_empty() {
        String::new()
    } else {
        format!(" (differing: {})", differing_fields.join(", "))
    };
    format!(
        "the idempotency key `{}` was first used for {first}{differing}; nothing was recorded or \
         executed: repeat the first call's arguments to get its answer, or send a new key for a \
         new operation",
        caller_key.escape_default()
    )
}

/// Why an attempt is being made, which decides what a spent retry budget means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A caller's attempt: nothing was sent before it under this attempt, so a budget spent
    /// on not-processed answers means the intent is certainly not done.
    Call,
    /// The sweeper's same-key re-send of an `unknown` intent: a budget spent on
    /// not-processed answers proves nothing about the attempt it repeats, so the intent
    /// stays `unknown`.
    Resend,
}

/// What the phases before the lease decided ([`Gate::acquire_intent`]).
pub(crate) enum Acquired {
    /// Nothing to run: the answer (invalid key, settled repeat, conflict, still busy).
    Answered(CallOutcome),
    /// This owner holds the lease and the intent is durably `in_flight`.
    Execute {
        intent: IntentRecord,
        /// The last `begin` asked.
        request: BeginRequest,
    },
    /// This owner holds the lookup lease of an `unknown` intent whose next step is due.
    Lookup {
        intent: IntentRecord,
        request: BeginRequest,
    },
}

/// What the call path's first read found.
enum Read {
    /// A settled repeat, to be answered from the read ([`Gate::answer_settled`]).
    Settled(IntentRecord),
    /// Anything else: the intent as read, if it exists, for `begin` to decide on.
    Open(Option<IntentRecord>),
}

/// What a lookup of an `unknown` intent found, once its answer is in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Looked {
    /// The effect exists: the intent is done.
    Found,
    /// The provider answered and has no such effect (yet).
    NotFound,
    /// The lookup itself failed: nothing is known.
    Failed,
    /// A record half this intent's: nothing is settled, and no re-send may follow.
    Mismatch,
    /// The tool has no lookup.
    Unsupported,
}

pub(crate) struct Tool {
    pub(crate) definition: ToolDefinition,
    validator: jsonschema::Validator,
}

/// The retry-safe gateway engine. Cheap to share: wrap it in an `Arc`.
pub struct Gate {
    pub(crate) tools: HashMap<String, Tool>,
    pub(crate) ledger: Arc<dyn Ledger>,
    upstream: Arc<dyn Upstream>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) options: GateOptions,
    calls: AtomicU64,
    flags: Mutex<FlagCache>,
    pub(crate) metrics: Arc<Metrics>,
    repeated_calls: RepeatedCalls,
    upstream_health: UpstreamHealth,
    /// Lookups that found a record half an intent's, for the owners' notices.
    lookup_mismatches: broadcast::Sender<LookupMismatch>,
    /// Attempts the provider refused because their key was first used with other
    /// parameters, for the owners' notices.
    key_reuses: broadcast::Sender<KeyReused>,
    /// Calls held for approval, for the owners' notices.
    pub(crate) held: broadcast::Sender<crate::approval::HeldNotice>,
    pub(crate) resend_budget: ResendBudget,
}

#[derive(Default)]
struct FlagCache {
    read_ms: Option<i64>,
    disabled: HashMap<String, bool>,
}

impl Gate {
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
            calls: AtomicU64::new(0),
            flags: Mutex::default(),
            metrics: Arc::new(Metrics::new()),
            repeated_calls: RepeatedCalls::new(),
            upstream_health: UpstreamHealth::new(),
            lookup_mismatches: broadcast::channel(LOOKUP_MISMATCH_BUFFER).0,
            key_reuses: broadcast::channel(KEY_REUSE_BUFFER).0,
            held: crate::approval::held_channel(),
            resend_budget: ResendBudget::default(),
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
    /// [`LOOKUP_MISMATCH_BUFFER`](crate::LOOKUP_MISMATCH_BUFFER) events behind loses the oldest.
    pub fn lookup_mismatches(&self) -> broadcast::Receiver<LookupMismatch> {
        self.lookup_mismatches.subscribe()
    }

    /// Every attempt from now on that the provider refused because its idempotency key was
    /// first used for a request with other parameters (Stripe's 400 `idempotency_error`):
    /// two different requests share a key, the intent stays `unknown` with its re-sends
    /// stopped, and the owner must look. Bounded: a receiver more than
    /// [`KEY_REUSE_BUFFER`](crate::KEY_REUSE_BUFFER) events behind loses the oldest.
    pub fn key_reuses(&self) -> broadcast::Receiver<KeyReused> {
        self.key_reuses.subscribe()
    }

    /// The tools whose requests to an upstream have all failed as the operator's errors since
    /// the first of them (none answered as configured since), by upstream and tool: what
    /// `/readyz` reports.
    pub fn degraded_upstreams(&self) -> Vec<DegradedUpstream> {
        self.upstream_health.degraded()
    }

    /// Runs one tool call. Returns `Err` only for an unknown tool or a ledger that failed
    /// before anything was sent; every outcome of the call itself is a [`CallOutcome`].
    ///
    /// The call runs in a `call` span with the tool, the tenant and (once rendered) the
    /// intent key, so every log line about it carries them.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let span = tracing::info_span!(
            "call",
            tool = %tool,
            key = tracing::field::Empty,
            tenant = %context.tenant
        );
        if trace::enabled() {
            // The GenAI conventions' tool call, and intentgate's own names.
            trace::set_attribute(&span, "gen_ai.operation.name", "execute_tool");
            trace::set_attribute(&span, "gen_ai.tool.name", tool.to_owned());
            trace::set_attribute(&span, "intentgate.tool", tool.to_owned());
            trace::set_attribute(&span, "intentgate.tenant", context.tenant.clone());
            if let Some(intent_id) = &context.intent_id {
                trace::set_attribute(&span, "intentgate.intent_id", intent_id.clone());
            }
        }
        let result = self
            .call_counted(tool, arguments, context)
            .instrument(span.clone())
            .await;
        if trace::enabled() {
            let status = match &result {
                Ok(outcome) => outcome.status.as_str(),
                Err(GateError::Ledger(_)) => STATUS_LEDGER_UNAVAILABLE,
                Err(_) => "error",
            };
            trace::set_attribute(&span, "intentgate.status", status);
        }
        result
    }

    /// [`Gate::call`], counted in `intentgate_calls_total` by its outcome.
    async fn call_counted(
        &self,
        name: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| GateError::UnknownTool(name.to_owned()))?;
        if tool.definition.executor == Executor::Client {
            return Err(GateError::ClientExecuted(name.to_owned()));
        }
        // Checked before the ledger sees it: a malformed tenant is the caller's mistake, not
        // a ledger outage (the schema's length check would fail the write).
        intentgate_core::Tenant::parse(&context.tenant)?;
        let result = self.call_tool(tool, arguments, context).await;
        match &result {
            Ok(outcome) => self.metrics.call(&tool.definition.name, outcome.status),
            Err(GateError::Ledger(_)) => self
                .metrics
                .call_status(&tool.definition.name, STATUS_LEDGER_UNAVAILABLE),
            Err(_) => {}
        }
        result
    }

    async fn call_tool(
        &self,
        tool: &Tool,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        let definition = &tool.definition;
        trace::set_attribute(
            &tracing::Span::current(),
            "intentgate.effect",
            definition.effect.as_str(),
        );
        let arguments = one_spelling(arguments);
        if let Some(refused) = self.admit(tool, &arguments, context).await? {
            return Ok(refused);
        }
        match definition.effect {
            Effect::Read | Effect::Idempotent => Ok(self.call_direct(definition, &arguments).await),
            Effect::SideEffect => self.call_side_effect(definition, arguments, context).await,
        }
    }

    /// Validate and honour the kill switch: the answer to a call refused before its key is
    /// rendered (`invalid_arguments`, `disabled`), or `None` when it may go on.
    ///
    /// A call of a tool keyed by `{intent_id}` that carries no intent id is answered first,
    /// whatever its arguments: nothing the model does can make it work, so it is told that
    /// before it is told to fix an argument.
    pub(crate) async fn admit(
        &self,
        tool: &Tool,
        arguments: &Value,
        context: &CallContext,
    ) -> Result<Option<CallOutcome>, GateError> {
        let definition = &tool.definition;
        if let Some(refused) = self.missing_intent_id(definition, context) {
            return Ok(Some(refused));
        }
        let validate = crate::phase!("validate");
        let validating = validate.enter();
        // The messages go back to the caller: a sensitive argument's value is never quoted.
        let mut errors: Vec<String> = tool
            .validator
            .iter_errors(arguments)
            .map(|error| crate::schema::error_message(&error, &definition.sensitive))
            .collect();
        if errors.is_empty() {
            errors = crate::schema::unreadable_numbers(arguments, &definition.sensitive);
        }
        // How many errors, never what they quote (an argument's value).
        trace::set_attribute(&validate, "intentgate.errors", errors.len() as i64);
        drop(validating);
        if !errors.is_empty() {
            set_decision("invalid_arguments");
            return Ok(Some(
                self.outcome(definition, CallStatus::InvalidArguments, &errors.join("; "))
                    .with_errors(errors),
            ));
        }
        let kill_switch = crate::phase!("kill_switch");
        let disabled = self
            .is_disabled(&definition.name)
            .instrument(kill_switch.clone())
            .await?;
        trace::set_attribute(&kill_switch, "intentgate.disabled", disabled);
        if disabled {
            set_decision("disabled");
            self.ledger
                .record_disabled_call(&context.tenant, &definition.name, self.clock.now_ms())
                .await?;
            tracing::warn!(tool = %definition.name, "call refused: the tool is switched off");
            return Ok(Some(self.outcome(definition, CallStatus::Disabled, "")));
        }
        Ok(None)
    }

    /// Reads and idempotent tools: no ledger, bounded retries with the same arguments.
    async fn call_direct(&self, tool: &ToolDefinition, arguments: &Value) -> CallOutcome {
        let call = UpstreamCall::without_intent(tool, arguments);
        if let Err(reason) = self.upstream.check(call) {
            return self.request_not_buildable(tool, reason);
        }
        let mut retry = 0;
        loop {
            let (observation, facts) = self.send(call).await;
            let class = classify_with(&observation, &facts);
            self.observe_upstream(tool, &facts, &class, &observation);
            let retry_after = match &class {
                OutcomeClass::Done => {
                    return self
                        .outcome(tool, CallStatus::Done, "")
                        .with_result(body(observation), None);
                }
                OutcomeClass::Rejected => {
                    let reason = rejection_reason(&observation);
                    return self
                        .outcome(tool, CallStatus::Rejected, &reason)
                        .with_result(body(observation), None);
                }
                // The answer to a wrong credential or route won't change within the call.
                OutcomeClass::Misconfigured { kind } if !kind.retried() => {
                    return self.misconfigured_outcome(tool);
                }
                OutcomeClass::Misconfigured { .. } => None,
                // The provider said a retry won't help.
                OutcomeClass::NotProcessed { retry: false, .. } => {
                    return self.outcome(tool, CallStatus::NotExecuted, "");
                }
                OutcomeClass::NotProcessed { retry_after_ms, .. } => *retry_after_ms,
                OutcomeClass::Ambiguous { .. } => None,
            };
            match self.backoff(retry, tool.retry_budget, retry_after) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    retry += 1;
                }
                None if matches!(class, OutcomeClass::Misconfigured { .. }) => {
                    return self.misconfigured_outcome(tool);
                }
                None => return self.outcome(tool, CallStatus::NotExecuted, ""),
            }
        }
    }

    /// The answer to a call of a tool keyed by `{intent_id}` that carries none (and no
    /// `Idempotency-Key` standing in for it): `invalid_arguments` with reason
    /// `missing_intent_id`, whose instruction is to tell the user and not retry, since only
    /// the application can send the id. Nothing is recorded, so every repeat of the call gets
    /// this same answer. `None` when the call may go on.
    fn missing_intent_id(
        &self,
        tool: &ToolDefinition,
        context: &CallContext,
    ) -> Option<CallOutcome> {
        if !tool.needs_intent_id() || !matches!(call_intent_id(tool, context), Ok(None)) {
            return None;
        }
        set_decision("invalid_arguments");
        tracing::info!(
            tool = %tool.name,
            "call refused: the tool's key uses {{intent_id}} and the call carried none"
        );
        Some(
            self.outcome(tool, CallStatus::InvalidArguments, "")
                .with_reason(tool, OutcomeReason::MissingIntentId)
                .with_errors(vec![KeyError::MissingIntentId.to_string()]),
        )
    }

    /// The answer to a call that was not processed because the gateway is misconfigured:
    /// `not_executed`, and the instruction that a person will follow up.
    fn misconfigured_outcome(&self, tool: &ToolDefinition) -> CallOutcome {
        self.outcome(tool, CallStatus::NotExecuted, "")
            .with_reason(tool, OutcomeReason::Misconfigured)
    }

    /// Tells the upstream's health what one request showed: an error that is the operator's
    /// is counted, logged and reported ([`UpstreamHealth::failed`]); an answer as configured
    /// (done, or a refusal of the customer's request) clears the tool and upstream.
    fn observe_upstream(
        &self,
        tool: &ToolDefinition,
        facts: &RequestFacts,
        class: &OutcomeClass,
        observation: &UpstreamObservation,
    ) {
        match class {
            OutcomeClass::Misconfigured { kind } => self.upstream_health.failed(
                &self.metrics,
                &Failure {
                    tool: &tool.name,
                    facts,
                    kind: *kind,
                    observation,
                    now_ms: self.clock.now_ms(),
                },
            ),
            OutcomeClass::Done | OutcomeClass::Rejected => {
                self.upstream_health.answered(&tool.name, facts)
            }
            OutcomeClass::NotProcessed { .. } | OutcomeClass::Ambiguous { .. } => {}
        }
    }

    /// The call path of a side-effecting tool, as section 5 of docs/design.md's named phases: the key and
    /// fingerprint, look up (a settled repeat is answered from a read), check the request can
    /// be built, acquire (the lease, with `in_flight` durable, or a lookup lease), then under
    /// the lease send, classify and finish ([`Gate::execute`], [`Gate::look_up_unknown`]).
    async fn call_side_effect(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        self.run_side_effect(tool, arguments, context, true).await
    }

    /// An approved intent's execution by the gateway (docs/design.md section 13): the call
    /// path of a side effect with the arguments the ledger kept, counting no call.
    pub(crate) async fn call_approved(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
    ) -> Result<CallOutcome, GateError> {
        self.run_side_effect(tool, arguments, context, false).await
    }

    async fn run_side_effect(
        &self,
        tool: &ToolDefinition,
        arguments: Value,
        context: &CallContext,
        count_call: bool,
    ) -> Result<CallOutcome, GateError> {
        let owner = self.lease_owner("");
        let (intent, request, lookup) = match self
            .acquire_intent(tool, &arguments, context, &owner, count_call)
            .await?
        {
            Acquired::Answered(outcome) => return Ok(outcome),
            Acquired::Execute { intent, request } => (intent, request, false),
            Acquired::Lookup { intent, request } => (intent, request, true),
        };
        // `acquire_intent` answered a call whose intent id can't be told.
        let intent_id = call_intent_id(tool, context).ok().flatten();
        if !lookup {
            return Ok(self
                .execute(tool, &arguments, intent_id, intent, &owner, Attempt::Call)
                .await);
        }
        // The next step of an unknown intent is due: run it, within this call.
        let step = StepRequest {
            arguments: &arguments,
            intent_id,
            owner: &owner,
            driver: Driver::Caller,
            begin: &request,
        };
        match self.advance_unknown(tool, step, intent).await {
            Ok(step) => Ok(step.outcome),
            // The lookup is recorded; only the re-send's `begin` failed, and nothing
            // was re-sent: the intent is as unknown as the lookup left it.
            Err(error) => {
                tracing::warn!(tool = %tool.name, %error, "could not re-send an unknown intent; it stays unknown");
                Ok(self.outcome(tool, CallStatus::PendingUnknown, ""))
            }
        }
    }

    /// The phases of a side-effecting call before anything is sent, shared by
    /// [`Gate::call`] and the intent API's [`Gate::grant`]: the key and fingerprint, look up
    /// (a settled repeat is answered from a read), check the request can be built (for a
    /// tool the gateway sends), and acquire under `owner`: the lease with `in_flight`
    /// durable, or a lookup lease, or the answer of a settled, conflicting or busy intent.
    pub(crate) async fn acquire_intent(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        context: &CallContext,
        owner: &str,
        count_call: bool,
    ) -> Result<Acquired, GateError> {
        let call_span = tracing::Span::current();
        let keying = crate::phase!("key_and_fingerprint");
        let entered = keying.enter();
        let keyed = check_caller_key(context)
            .and_then(|()| call_intent_id(tool, context))
            .and_then(|intent_id| Ok((intent_id, intent_key(tool, arguments, intent_id)?)));
        let (intent_id, key) = match keyed {
            Ok(keyed) => keyed,
            Err(reason) => {
                drop(entered);
                set_decision("invalid_arguments");
                return Ok(Acquired::Answered(
                    self.outcome(tool, CallStatus::InvalidArguments, &reason)
                        .with_errors(vec![reason]),
                ));
            }
        };
        call_span.record("key", key.as_str());
        // The key holds argument values: exported only as its hash.
        trace::set_attribute(
            &call_span,
            "intentgate.key_hash",
            trace::key_hash(&context.tenant, key.as_str()),
        );
        // The ledger keeps sensitive values as keyed hashes only, and the fingerprint is of
        // that form too: a plain SHA-256 over the clear values would let anyone holding the
        // ledger test guesses (an address book) against it. Equal values still hash alike,
        // so a repeat matches and a changed value is a conflict.
        let stored_arguments = tool
            .stored_arguments(arguments)
            .expect("Gate::new checked that a tool with sensitive arguments has a hash key");
        let mut fingerprint = tool.fingerprint(&stored_arguments);
        drop(entered);

        let read = match self
            .look_up_settled(tool, &context.tenant, &key, &mut fingerprint)
            .await?
        {
            Read::Settled(intent) => {
                // A settled repeat under a caller key: the key must name this intent too.
                self.bind_caller_key(tool, context, &key, fingerprint.as_str(), &stored_arguments)
                    .await?;
                return Ok(Acquired::Answered(self.answer_settled(tool, intent).await));
            }
            Read::Open(read) => read,
        };

        // The request must be buildable from these arguments before an intent is recorded: a
        // header value with a line break is the caller's mistake, not an intent. (A settled
        // repeat, answered above, has the arguments its first call was checked with.) The
        // real provider key may carry an epoch (`#2`), which changes nothing a check refuses.
        // The caller's own code builds a client-executed tool's request: nothing to check.
        if tool.executor == Executor::Gateway {
            let check_key = provider_key(&context.tenant, &tool.name, &key, 1);
            let check =
                UpstreamCall::for_intent(tool, arguments, &key, Some(&check_key), intent_id, 1);
            if let Err(reason) = self.upstream.check(check) {
                return Ok(Acquired::Answered(self.request_not_buildable(tool, reason)));
            }
        }
        // Bound once the call may become an intent: a call refused above (bad arguments, a
        // request that can't be built) never used its key, which stays free for the caller
        // to send again with arguments that work.
        self.bind_caller_key(tool, context, &key, fingerprint.as_str(), &stored_arguments)
            .await?;

        let now_ms = self.clock.now_ms();
        let policies = match self.call_policies(tool, arguments, context, intent_id, now_ms) {
            Ok(policies) => policies,
            Err(reason) => {
                set_decision("invalid_arguments");
                return Ok(Acquired::Answered(
                    self.outcome(tool, CallStatus::InvalidArguments, &reason)
                        .with_errors(vec![reason]),
                ));
            }
        };
        let request = BeginRequest {
            tenant: context.tenant.clone(),
            tool: tool.name.clone(),
            key: key.clone(),
            fingerprint: fingerprint.as_str().to_owned(),
            arguments: stored_arguments.clone().into_owned(),
            lease_owner: owner.to_owned(),
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call,
            retry_rejected: tool.retry_rejected,
            // When the intent exists and is unknown, its next step's due time.
            lookup_interval_ms: match &read {
                Some(intent) => self.step_interval_ms(tool, intent, now_ms, Driver::Caller),
                None => millis(self.options.lookup_interval),
            },
            resend_unknown: false,
            expect_new: read.is_none(),
            policies,
        };
        let (begun, request) = self.acquire(tool, request).await?;
        if let Some(intent) = begun_intent(&begun).filter(|intent| intent.call_count > 1) {
            // A repeat: its trace points at the call that executed the intent.
            self.link_to_executing(&call_span, intent.id).await;
        }
        set_decision(match &begun {
            Begin::Execute(_) => "execute",
            Begin::Lookup(_) => "look_up",
            Begin::Settled(_) => "answer_from_ledger",
            Begin::Conflict(_) => "conflict",
            Begin::Busy(_) => "busy",
            Begin::Held(..) => "held",
            Begin::OverBudget { .. } => "over_budget",
        });
        Ok(match begun {
            Begin::Execute(intent) => Acquired::Execute { intent, request },
            Begin::Lookup(intent) => Acquired::Lookup { intent, request },
            Begin::Settled(intent) => Acquired::Answered(self.answer_from(tool, &intent)),
            Begin::Conflict(intent) => {
                Acquired::Answered(self.conflict(tool, key, &intent, &stored_arguments))
            }
            // Still held when the wait ran out: answer from the ledger as it stands.
            Begin::Busy(intent) => Acquired::Answered(self.answer_from(tool, &intent)),
            Begin::Held(intent, approval) => {
                // The call that asked: its request is the one the ledger stored.
                let asked_now = count_call
                    && approval.requested_ms == request.now_ms
                    && approval.requested_by == context.caller;
                Acquired::Answered(self.held(tool, &intent, &approval, asked_now))
            }
            Begin::OverBudget { budget } => Acquired::Answered(self.over_budget(tool, &budget)),
        })
    }

    /// Look up: a repeat of a settled intent (done, or rejected for good) is found by a read,
    /// to be answered from it ([`Gate::answer_settled`]) without a durable write. Any other
    /// call goes on with the intent as read, if it exists.
    ///
    /// An intent recorded before fingerprints gave each value its one spelling has the
    /// older form (of `"20.00"` as written, say). When its stored arguments fingerprint as
    /// this call's do now, it is the same intent: `fingerprint` becomes the stored one, so
    /// this read, the caller key's binding and the ledger's `begin` all find them equal, and
    /// a repeat across the upgrade is answered rather than called a conflict.
    async fn look_up_settled(
        &self,
        tool: &ToolDefinition,
        tenant: &str,
        key: &str,
        fingerprint: &mut Fingerprint,
    ) -> Result<Read, GateError> {
        let started = Instant::now();
        let read = self
            .ledger
            .get(tenant, &tool.name, key)
            .instrument(crate::phase!(
                "ledger.get",
                db.operation.name = "get",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Get, started.elapsed());
        let Some(intent) = read? else {
            return Ok(Read::Open(None));
        };
        if intent.fingerprint != fingerprint.as_str()
            && tool.fingerprint(&intent.arguments) == *fingerprint
        {
            *fingerprint = Fingerprint::from_hex(intent.fingerprint.clone());
        }
        let fingerprint = fingerprint.as_str();
        let settled = intent.status == IntentStatus::Done
            || (intent.status == IntentStatus::Rejected && !tool.retry_rejected);
        if intent.fingerprint != fingerprint || !settled {
            return Ok(Read::Open(Some(intent)));
        }
        Ok(Read::Settled(intent))
    }

    /// The answer to a settled repeat, from the intent as read; the call is still counted,
    /// in the background.
    async fn answer_settled(&self, tool: &ToolDefinition, intent: IntentRecord) -> CallOutcome {
        set_decision("answer_from_ledger");
        self.link_to_executing(&tracing::Span::current(), intent.id)
            .await;
        // The count the write below will make, unless another repeat's write lands first.
        self.repeated_call(tool, &intent, intent.call_count + 1);
        // Counting the call is bookkeeping: the answer does not wait for its commit.
        let ledger = self.ledger.clone();
        let (id, now_ms, tool_name) = (intent.id, self.clock.now_ms(), tool.name.clone());
        tokio::spawn(
            async move {
                if let Err(error) = ledger.record_call(id, now_ms).await {
                    tracing::warn!(tool = %tool_name, intent = id, %error, "could not count a repeated call");
                }
            }
            .in_current_span(),
        );
        self.answer_from(tool, &intent)
    }

    /// Binds the call's own key for its operation ([`CallContext::explicit_key`], if it sent
    /// one) to the intent it names (`key`, `fingerprint`), within its tenant and tool, or
    /// refuses the call when that key was first used for another intent
    /// ([`GateError::IdempotencyKeyReused`], naming the arguments that differ from that
    /// intent's): the IETF draft's "same key, other payload". The key is only ever compared
    /// with the keys of the caller's own tenant and the tool.
    async fn bind_caller_key(
        &self,
        tool: &ToolDefinition,
        context: &CallContext,
        key: &str,
        fingerprint: &str,
        stored_arguments: &Value,
    ) -> Result<(), GateError> {
        let Some(caller_key) = &context.explicit_key else {
            return Ok(());
        };
        let binding = CallerKey {
            tenant: context.tenant.clone(),
            tool: tool.name.clone(),
            caller_key: caller_key.clone(),
            intent_key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            bound_ms: self.clock.now_ms(),
        };
        let bound = self
            .ledger
            .bind_caller_key(&binding)
            .instrument(crate::phase!(
                "ledger.bind_caller_key",
                db.operation.name = "bind_caller_key",
                db.collection.name = "caller_keys"
            ))
            .await?;
        let Bound::Other(first) = bound else {
            return Ok(());
        };
        // What differs from the intent the key first named, as a conflict says it.
        let differing_fields = match self
            .ledger
            .get(&context.tenant, &tool.name, &first.intent_key)
            .await?
        {
            Some(intent) => differing_fields(&intent.arguments, stored_arguments),
            None => Vec::new(),
        };
        set_decision("idempotency_key_reused");
        tracing::warn!(
            tool = %tool.name,
            key = %key,
            first_key = %first.intent_key,
            fields = ?differing_fields,
            "idempotency key reused for another intent; nothing executed"
        );
        Err(GateError::IdempotencyKeyReused {
            caller_key: caller_key.clone(),
            first_intent_key: first.intent_key,
            intent_key: key.to_owned(),
            differing_fields,
        })
    }

    /// Acquire: `begin` takes the intent's lease and records `in_flight` durably (or a lookup
    /// lease, or finds it settled or conflicting). While another caller holds the lease this
    /// caller waits, woken when the holder commits and bounded by the tool's timeout plus
    /// [`WAIT_MARGIN`], and then takes what `begin` answers last (`Busy` when still held).
    /// `request` is the first `begin`; a retry after a wait is not counted as another call.
    /// Returns the last `begin` asked with what it answered.
    ///
    /// A holder that died commits nothing, so the waiter also asks `begin` again at least
    /// every [`GateOptions::owner_check_every`], and as often checks the holder's process:
    /// found gone on this machine, it is marked dead and `begin` takes its lease at once
    /// (elsewhere its silent heartbeat makes `begin` take it).
    async fn acquire(
        &self,
        tool: &ToolDefinition,
        mut request: BeginRequest,
    ) -> Result<(Begin, BeginRequest), LedgerError> {
        let wait_until = request.now_ms + (tool.timeout + WAIT_MARGIN).as_millis() as i64;
        // Time spent waiting for another caller's lease, once this call has waited.
        let mut waited: Option<Duration> = None;
        let check_every_ms = self.options.owner_check_every.as_millis() as i64;
        let mut owner_checked_ms: Option<i64> = None;
        let begun = loop {
            let begin = match self.ledger_begin(request.clone()).await {
                Ok(begin) => begin,
                Err(error) => break Err(error),
            };
            if request.count_call
                && let Some(intent) = begun_intent(&begin)
                && intent.call_count > 1
            {
                self.repeated_call(tool, intent, intent.call_count);
            }
            request.count_call = false;
            // The first `begin` created the intent if it was new.
            request.expect_new = false;
            let Begin::Busy(intent) = &begin else {
                break Ok(begin);
            };
            let remaining_ms = wait_until - self.clock.now_ms();
            if remaining_ms <= 0 {
                break Ok(begin);
            }
            if waited.is_none() {
                self.metrics.lease_wait_started(&tool.name);
            }
            let started = Instant::now();
            let now_ms = self.clock.now_ms();
            let check_due = owner_checked_ms.is_none_or(|at| now_ms - at >= check_every_ms);
            if check_due {
                owner_checked_ms = Some(now_ms);
            }
            let lease_wait = crate::phase!("lease_wait", intentgate.intent = intent.id);
            if !(check_due
                && self
                    .lease_owner_found_dead(intent)
                    .instrument(lease_wait.clone())
                    .await)
            {
                let wait_ms = remaining_ms.min(check_every_ms.max(1));
                self.ledger
                    .wait_for_change(intent.id, Duration::from_millis(wait_ms as u64))
                    .instrument(lease_wait)
                    .await;
            }
            *waited.get_or_insert(Duration::ZERO) += started.elapsed();
            request.now_ms = self.clock.now_ms();
            request.lease_expires_ms = request.now_ms + millis(self.lease_duration(tool));
            // The holder's attempt may leave the intent unknown: its next step is due by
            // the schedule of the attempt count it had.
            request.lookup_interval_ms =
                self.step_interval_ms(tool, intent, request.now_ms, Driver::Caller);
        };
        if let Some(waited) = waited {
            self.metrics.lease_waited(&tool.name, waited);
        }
        begun.map(|begun| (begun, request))
    }

    /// True when the process holding `intent`'s lease is registered on this machine and no
    /// longer runs ([`crate::process::runs_no_longer`]): it is then marked dead in the
    /// ledger, so that the next `begin` (of any caller, on any replica) takes its leases. A
    /// failure only means waiting on: the silent heartbeat and the lease's expiry still free
    /// the intent.
    async fn lease_owner_found_dead(&self, intent: &IntentRecord) -> bool {
        let Some(instance) = intent.lease_owner.as_deref().and_then(instance_of) else {
            return false;
        };
        if instance == self.options.instance {
            return false;
        }
        let owner = match self.ledger.process(instance).await {
            Ok(Some(owner)) if owner.ended.is_none() => owner,
            Ok(_) => return false,
            Err(error) => {
                tracing::debug!(%error, instance, "could not read the lease owner's process");
                return false;
            }
        };
        if !crate::process::runs_no_longer(&owner) {
            return false;
        }
        let now_ms = self.clock.now_ms();
        match self
            .ledger
            .end_process(instance, ProcessEnd::Dead, now_ms)
            .await
        {
            Ok(_) => {
                tracing::warn!(
                    instance,
                    pid = owner.pid,
                    host = %owner.host,
                    intent = intent.id,
                    "the process holding the lease is gone; marked dead, its leases are taken over"
                );
                true
            }
            Err(error) => {
                tracing::warn!(%error, instance, "could not mark a gone lease owner dead; waiting on");
                false
            }
        }
    }

    /// The answer to a call whose key names an intent made with other arguments: which
    /// fields differ, compared as the ledger keeps them, so a sensitive field is compared by
    /// its hash and only its name is ever shown.
    fn conflict(
        &self,
        tool: &ToolDefinition,
        key: String,
        intent: &IntentRecord,
        stored_arguments: &Value,
    ) -> CallOutcome {
        let fields = differing_fields(&intent.arguments, stored_arguments);
        tracing::warn!(tool = %tool.name, key = %key, fields = ?fields, "conflict: same key, other arguments");
        let mut outcome = self.outcome(tool, CallStatus::Conflict, &fields.join(", "));
        outcome.intent_key = Some(key);
        outcome.differing_fields = fields;
        outcome
    }

    /// Counts a call for an intent that already existed and tells the receivers of
    /// [`Gate::repeated_calls`]; `call_count` is the intent's count with this call.
    fn repeated_call(&self, tool: &ToolDefinition, intent: &IntentRecord, call_count: u64) {
        self.metrics.repeated_call(&tool.name);
        self.repeated_calls.send(&self.metrics, || RepeatedCall {
            tenant: intent.tenant.clone(),
            tool: tool.name.clone(),
            key: intent.key.clone(),
            intent_id: intent.id,
            call_count,
            at_ms: self.clock.now_ms(),
        });
    }

    /// [`Ledger::begin`], timed.
    pub(crate) async fn ledger_begin(&self, request: BeginRequest) -> Result<Begin, LedgerError> {
        let started = Instant::now();
        let begin = self
            .ledger
            .begin(request)
            .instrument(crate::phase!(
                "ledger.begin",
                db.operation.name = "begin",
                db.collection.name = "intents"
            ))
            .await;
        self.metrics
            .ledger_operation(LedgerOperation::Begin, started.elapsed());
        begin
    }

    /// What `owner` records about its attempt of `intent`, now: `status` and why, learned by
    /// `resolved_by`, with no result and no lookup made (the caller adds what it has).
    pub(crate) fn finish(
        &self,
        intent: &IntentRecord,
        owner: &str,
        status: IntentStatus,
        resolved_by: &'static str,
        detail: String,
    ) -> Finish {
        Finish {
            id: intent.id,
            lease_owner: owner.to_owned(),
            attempt: intent.attempt,
            now_ms: self.clock.now_ms(),
            status,
            result: None,
            external_id: None,
            resolved_by,
            looked_up: false,
            detail,
            lease_required: false,
            resend_stopped: None,
        }
    }

    /// [`Ledger::finish`], timed.
    pub(crate) async fn ledger_finish(&self, finish: Finish) -> Result<Finished, LedgerError> {
        let started = Instant::now();
        let settle = settle_span(&finish);
        let finished = self.ledger.finish(finish).instrument(settle).await;
        self.metrics
            .ledger_operation(LedgerOperation::Finish, started.elapsed());
        finished
    }

    /// Under the lease, with `in_flight` durable: call the upstream, classify, settle.
    /// `intent_id` is the application's intent id, for upstream templates that use it.
    pub(crate) async fn execute(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        intent_id: Option<&str>,
        intent: IntentRecord,
        owner: &str,
        attempt: Attempt,
    ) -> CallOutcome {
        let idempotency_key = provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch);
        let call = UpstreamCall::for_intent(
            tool,
            arguments,
            &intent.key,
            Some(&idempotency_key),
            intent_id,
            intent.attempt,
        );
        if trace::enabled() {
            let current = tracing::Span::current();
            trace::set_attribute(&current, "intentgate.attempt", i64::from(intent.attempt));
            trace::set_attribute(&current, "intentgate.intent", intent.id);
            // Kept with the intent, so a repeat's or a re-send's trace links to this one.
            // Bookkeeping in the background: the request does not wait for it.
            if let Some(traceparent) = trace::traceparent_of(&current) {
                let (ledger, id) = (self.ledger.clone(), intent.id);
                tokio::spawn(async move {
                    if let Err(error) = ledger.record_trace(id, traceparent).await {
                        tracing::debug!(intent = id, %error, "could not keep the call's trace");
                    }
                });
            }
        }
        let mut retry = 0;
        loop {
            let (observation, facts) = self.send(call).await;
            let class = {
                let classifying = crate::phase!("classify");
                let _entered = classifying.enter();
                let class = classify_with(&observation, &facts);
                trace::set_attribute(&classifying, "intentgate.class", class_name(&class));
                class
            };
            tracing::debug!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, ?class, "upstream answered");
            self.observe_upstream(tool, &facts, &class, &observation);
            let mut reason = None;
            let (status, detail) = match class {
                OutcomeClass::Done => (IntentStatus::Done, "the upstream confirmed it".to_owned()),
                OutcomeClass::Rejected => (IntentStatus::Rejected, rejection_reason(&observation)),
                OutcomeClass::NotProcessed { .. } | OutcomeClass::Misconfigured { .. } => {
                    // The bounded retries with the same key, where they may help: not a wrong
                    // credential or route, whose answer won't change within the call.
                    let retried = match class {
                        OutcomeClass::NotProcessed {
                            retry_after_ms,
                            retry: true,
                        } => Some(retry_after_ms),
                        OutcomeClass::Misconfigured { kind } => kind.retried().then_some(None),
                        _ => None,
                    };
                    let pause = retried
                        .and_then(|retry_after_ms| {
                            self.backoff(retry, tool.retry_budget, retry_after_ms)
                        })
                        .filter(|pause| self.fits_lease(&intent, tool, *pause));
                    if let Some(pause) = pause {
                        tokio::time::sleep(pause).await;
                        retry += 1;
                        continue;
                    }
                    let cause = match class {
                        OutcomeClass::Misconfigured { kind } => {
                            reason = Some(OutcomeReason::Misconfigured);
                            Failure {
                                tool: &tool.name,
                                facts: &facts,
                                kind,
                                observation: &observation,
                                now_ms: self.clock.now_ms(),
                            }
                            .detail(retry, &provider_text(&observation))
                        }
                        OutcomeClass::NotProcessed { retry: false, .. } => format!(
                            "not processed by the upstream ({}), which said not to retry",
                            seen(&observation)
                        ),
                        _ => format!(
                            "not processed by the upstream ({}); retries spent",
                            seen(&observation)
                        ),
                    };
                    match attempt {
                        Attempt::Call => (IntentStatus::NotExecuted, cause),
                        // This request did nothing, but the attempt it repeats may have: that
                        // one's outcome is as unknown as before.
                        Attempt::Resend => (
                            IntentStatus::Unknown,
                            format!(
                                "re-send {cause}; the first attempt's outcome is still unknown"
                            ),
                        ),
                    }
                }
                OutcomeClass::Ambiguous { why } => {
                    let stop = why.resend_stop();
                    if let Some(stop) = stop {
                        self.resends_stop(tool, &intent, stop, &observation);
                    }
                    let found = self.lookup(call).await;
                    // What was found, not the provider's record: it may hold personal data.
                    tracing::debug!(tool = %tool.name, key = %intent.key, why = why.as_str(), found = found.kind(), "ambiguous outcome looked up");
                    let (outcome, _) = self
                        .settle_lookup(
                            tool,
                            intent,
                            owner,
                            found,
                            why.as_str(),
                            CallStatus::Done,
                            "lookup",
                            stop,
                        )
                        .await;
                    return outcome;
                }
            };
            let (result, external_id) = match status {
                IntentStatus::Done => {
                    let result = body(observation);
                    let external_id = external_id(tool, &result);
                    (
                        Some(kept_result(tool, result, &intent.arguments)),
                        external_id,
                    )
                }
                IntentStatus::Rejected => (
                    Some(kept_result(tool, body(observation), &intent.arguments)),
                    None,
                ),
                _ => (None, None),
            };
            let finish = Finish {
                result,
                external_id,
                ..self.finish(&intent, owner, status, "upstream", detail)
            };
            let outcome = self.record_queued(tool, &intent, finish).await;
            // What this attempt learned is what the ledger holds: say why it was not executed.
            return match reason {
                Some(reason) if outcome.status == CallStatus::NotExecuted => {
                    outcome.with_reason(tool, reason)
                }
                _ => outcome,
            };
        }
    }

    /// Under the lookup lease of an `unknown` intent: find out whether it happened. Returns
    /// the answer, and what the lookup found; `resolved_by` names who settles the intent if
    /// it is found ("lookup" for a caller, "sweeper").
    pub(crate) async fn look_up_unknown(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        intent_id: Option<&str>,
        intent: IntentRecord,
        owner: &str,
        resolved_by: &'static str,
    ) -> (CallOutcome, Looked) {
        // The same request the first attempt's lookup renders, provider key included: a
        // lookup that filters or proves by `{idempotency_key}` must never go without it.
        let idempotency_key = provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch);
        let call = UpstreamCall::for_intent(
            tool,
            arguments,
            &intent.key,
            Some(&idempotency_key),
            intent_id,
            intent.attempt,
        );
        let found = self.lookup(call).await;
        self.settle_lookup(
            tool,
            intent,
            owner,
            found,
            "unknown intent",
            CallStatus::AlreadyDone,
            resolved_by,
            None,
        )
        .await
    }

    /// Counts, logs and (for a reused key) reports an attempt of `intent` whose answer stops
    /// its same-key re-sends for good ([`ResendStop`]); the finish that follows records it.
    fn resends_stop(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        stop: ResendStop,
        observation: &UpstreamObservation,
    ) {
        self.resends_stopped(tool, intent, stop, &seen(observation), || {
            provider_text(observation)
        });
    }

    /// [`Gate::resends_stop`] for an answer the gateway did not see itself: `seen` says
    /// where it came from, `provider_message` gives the provider's words (for a reused key's
    /// notice). The intent API's settle reports a client-executed attempt so.
    pub(crate) fn resends_stopped(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        stop: ResendStop,
        seen: &str,
        provider_message: impl FnOnce() -> String,
    ) {
        self.metrics.resends_stopped(&tool.name, stop);
        tracing::warn!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, reason = stop.as_str(), %seen, "same-key re-sends of this intent stop for good: {}; only lookups continue", stop.describe());
        if stop == ResendStop::KeyReused {
            // No receiver (a gate without notices) is fine: the log line stands.
            let _ = self.key_reuses.send(KeyReused {
                tool: tool.name.clone(),
                tenant: intent.tenant.clone(),
                intent_id: intent.id,
                intent_key: intent.key.clone(),
                provider_message: provider_message(),
                at_ms: self.clock.now_ms(),
            });
        }
    }

    /// Records what a lookup found: `done` when found (answered as `found_status`),
    /// otherwise the intent is or stays `unknown`. `stop` is why the attempt looked up
    /// stopped the intent's same-key re-sends, if it did.
    #[allow(clippy::too_many_arguments)]
    async fn settle_lookup(
        &self,
        tool: &ToolDefinition,
        intent: IntentRecord,
        owner: &str,
        found: LookupOutcome,
        why: &str,
        found_status: CallStatus,
        resolved_by: &'static str,
        stop: Option<ResendStop>,
    ) -> (CallOutcome, Looked) {
        let looked = match &found {
            LookupOutcome::Found { .. } => Looked::Found,
            LookupOutcome::NotFound => Looked::NotFound,
            LookupOutcome::Failed(_) => Looked::Failed,
            LookupOutcome::Mismatch(_) => Looked::Mismatch,
            LookupOutcome::Unsupported => Looked::Unsupported,
        };
        let mut finish = Finish {
            looked_up: true,
            ..self.finish(
                &intent,
                owner,
                IntentStatus::Unknown,
                resolved_by,
                String::new(),
            )
        };
        match found {
            LookupOutcome::Found {
                external_id,
                result,
            } => {
                finish.status = IntentStatus::Done;
                finish.external_id = external_id;
                finish.result = Some(kept_result(tool, result, &intent.arguments));
                finish.detail = format!("{why}; the lookup found the effect");
            }
            LookupOutcome::NotFound => {
                finish.detail = format!("{why}; the lookup found nothing yet")
            }
            LookupOutcome::Failed(reason) => {
                tracing::info!(tool = %tool.name, key = %intent.key, %reason, "lookup failed; the intent stays unknown");
                finish.detail = format!("{why}; the lookup failed: {reason}")
            }
            LookupOutcome::Mismatch(reason) => {
                // Never a silent done: the provider holds something the ledger can't explain.
                tracing::warn!(tool = %tool.name, key = %intent.key, owner = tool.owner.as_deref().unwrap_or("-"), %reason, "lookup mismatch: a record is half this intent's; nothing settled, the owner must check");
                // No receiver (a gate without notices) is fine: the log line stands.
                let _ = self.lookup_mismatches.send(LookupMismatch {
                    tool: tool.name.clone(),
                    tenant: intent.tenant.clone(),
                    intent_id: intent.id,
                    intent_key: intent.key.clone(),
                    reason: reason.clone(),
                    at_ms: self.clock.now_ms(),
                });
                finish.detail = format!(
                    "{why}; the lookup found a record it can't prove is this intent's: {reason}; \
                     nothing was settled: check the provider's record"
                )
            }
            LookupOutcome::Unsupported => finish.detail = format!("{why}; the tool has no lookup"),
        }
        if let Some(stop) = stop {
            finish.resend_stopped = Some(stop);
            if finish.status == IntentStatus::Unknown {
                finish.detail = format!(
                    "{}; same-key re-sends stopped for good: {}",
                    finish.detail,
                    stop.describe()
                );
            }
        }
        let mut outcome = self.record(tool, finish).await;
        if outcome.status == CallStatus::Done {
            outcome.status = found_status;
            outcome.message = tool
                .messages
                .render(found_status, tool.effect, &tool.name, "");
        }
        (outcome, looked)
    }

    /// Stores an attempt's outcome and answers from what the ledger now holds. If the
    /// ledger write fails the answer still tells the truth this call learned; the intent
    /// stays `in_flight` and is resolved later through the lookup.
    async fn record(&self, tool: &ToolDefinition, finish: Finish) -> CallOutcome {
        let learned = finish.status;
        let key_for_log = finish.id;
        match self.ledger_finish(finish.clone()).await {
            Ok(Finished::Recorded(intent)) => {
                if intent.status == IntentStatus::Unknown {
                    self.metrics.intent_left_unknown(&tool.name);
                }
                self.recorded_answer(tool, &intent, learned)
            }
            Ok(Finished::Superseded(intent)) => {
                tracing::warn!(tool = %tool.name, key = %intent.key, status = %intent.status, "attempt superseded; answering from the ledger");
                self.answer_from(tool, &intent)
            }
            Err(error) => self.unrecorded_answer(tool, key_for_log, &error, finish),
        }
    }

    /// [`Gate::record`] for the outcome of this call's own attempt, under a lease it still
    /// holds for [`QUEUED_FINISH_MIN_LEASE`] or more: answers as soon as the write is
    /// queued, from what the ledger will hold, while the write commits (docs/design.md section 7: only
    /// `in_flight` must be durable before the upstream call; a crash before this commit
    /// leaves the intent `in_flight`, resolved by its lookup). Nobody else can take the
    /// intent while the lease runs, so what the ledger will hold is what this call learned.
    /// Reads through the ledger wait for the queued write ([`Ledger::finish_queued`]); a
    /// repeat elsewhere waits on the lease until it commits.
    async fn record_queued(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        finish: Finish,
    ) -> CallOutcome {
        let lease_left_ms = intent.lease_expires_ms.unwrap_or(i64::MIN) - self.clock.now_ms();
        if lease_left_ms < millis(QUEUED_FINISH_MIN_LEASE) {
            return self.record(tool, finish).await;
        }
        let learned = finish.status;
        let started = Instant::now();
        let settle = settle_span(&finish);
        let queued = match self
            .ledger
            .finish_queued(finish.clone())
            .instrument(settle.clone())
            .await
        {
            Ok(queued) => queued,
            Err(error) => return self.unrecorded_answer(tool, intent.id, &error, finish),
        };
        let mut settled = intent.clone();
        settled.status = learned;
        settled.result = finish.result;
        settled.external_id = finish.external_id;
        let (metrics, tool_name, id) = (self.metrics.clone(), tool.name.clone(), intent.id);
        tokio::spawn(
            async move {
                match queued.await {
                    Ok(Finished::Recorded(intent)) if intent.status == IntentStatus::Unknown => {
                        metrics.intent_left_unknown(&tool_name)
                    }
                    Ok(Finished::Recorded(_)) => {}
                    Ok(Finished::Superseded(intent)) => {
                        tracing::warn!(tool = %tool_name, key = %intent.key, status = %intent.status, "a queued outcome was superseded; the ledger keeps the later one")
                    }
                    Err(error) => {
                        tracing::error!(tool = %tool_name, intent = id, %error, "could not record the outcome; the intent stays in flight until looked up")
                    }
                }
                metrics.ledger_operation(LedgerOperation::Finish, started.elapsed());
            }
            .instrument(settle),
        );
        self.recorded_answer(tool, &settled, learned)
    }

    /// The answer to the call whose attempt learned `learned` and left `intent` so: a repeat's
    /// answer, except that the call that did the work is told `done`, not `already_done`.
    fn recorded_answer(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        learned: IntentStatus,
    ) -> CallOutcome {
        let mut outcome = self.answer_from(tool, intent);
        if learned == IntentStatus::Done && outcome.status == CallStatus::AlreadyDone {
            outcome.status = CallStatus::Done;
            outcome.message = tool
                .messages
                .render(CallStatus::Done, tool.effect, &tool.name, "");
        }
        outcome
    }

    /// The answer when the outcome could not be recorded: the truth this call learned.
    fn unrecorded_answer(
        &self,
        tool: &ToolDefinition,
        id: i64,
        error: &LedgerError,
        finish: Finish,
    ) -> CallOutcome {
        tracing::error!(tool = %tool.name, intent = id, %error, "could not record the outcome; the intent stays in flight until looked up");
        let status = match finish.status {
            IntentStatus::Done => CallStatus::Done,
            IntentStatus::Rejected => CallStatus::Rejected,
            IntentStatus::NotExecuted => CallStatus::NotExecuted,
            _ => CallStatus::PendingUnknown,
        };
        self.outcome(tool, status, "")
            .with_result(finish.result.unwrap_or(Value::Null), finish.external_id)
    }

    /// The answer a repeat gets from the ledger.
    pub(crate) fn answer_from(&self, tool: &ToolDefinition, intent: &IntentRecord) -> CallOutcome {
        let (status, details) = match intent.status {
            IntentStatus::Done => (CallStatus::AlreadyDone, String::new()),
            IntentStatus::Rejected => (
                CallStatus::Rejected,
                intent
                    .result
                    .as_ref()
                    .map(rejection_text)
                    .unwrap_or_default(),
            ),
            IntentStatus::NotExecuted => (CallStatus::NotExecuted, String::new()),
            // Held for approval, or approved and about to start.
            IntentStatus::Pending if !intent.lease_live(self.clock.now_ms()) => {
                (CallStatus::AwaitingApproval, String::new())
            }
            IntentStatus::Pending | IntentStatus::InFlight | IntentStatus::Unknown => {
                (CallStatus::PendingUnknown, String::new())
            }
        };
        let mut outcome = match crate::approval::denial_reason(intent) {
            Some(reason) => self.outcome(tool, status, "").with_reason_details(
                tool,
                OutcomeReason::Denied,
                &reason,
            ),
            None => self.outcome(tool, status, &details),
        };
        outcome.intent_key = Some(intent.key.clone());
        if matches!(intent.status, IntentStatus::Done | IntentStatus::Rejected) {
            outcome.result = intent.result.clone();
            outcome.external_id = intent.external_id.clone();
        }
        outcome
    }

    /// The answer for arguments the upstream can't build a request from: `invalid_arguments`,
    /// nothing sent and nothing recorded.
    fn request_not_buildable(&self, tool: &ToolDefinition, reason: String) -> CallOutcome {
        tracing::info!(tool = %tool.name, %reason, "call refused: no request can be built from its arguments");
        self.outcome(tool, CallStatus::InvalidArguments, &reason)
            .with_errors(vec![reason])
    }

    pub(crate) fn outcome(
        &self,
        tool: &ToolDefinition,
        status: CallStatus,
        details: &str,
    ) -> CallOutcome {
        CallOutcome {
            status,
            reason: None,
            message: tool
                .messages
                .render(status, tool.effect, &tool.name, details),
            tool: tool.name.clone(),
            intent_key: None,
            result: None,
            external_id: None,
            differing_fields: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// One upstream request, bounded by the tool's timeout, with what the upstream knows of
    /// it ([`Upstream::execute_with_facts`]).
    async fn send(&self, call: UpstreamCall<'_>) -> (UpstreamObservation, RequestFacts) {
        let started = Instant::now();
        let request = crate::phase!(
            "upstream.request",
            otel.kind = "client",
            gen_ai.tool.name = %call.tool.name,
            intentgate.attempt = call.attempt
        );
        let observation =
            tokio::time::timeout(call.timeout, self.upstream.execute_with_facts(call))
                .instrument(request)
                .await
                .unwrap_or((UpstreamObservation::Timeout, RequestFacts::default()));
        self.metrics
            .upstream_request(&call.tool.name, UpstreamRequest::Execute, started.elapsed());
        observation
    }

    /// One lookup, bounded by the tool's timeout.
    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let started = Instant::now();
        let request = crate::phase!(
            "lookup",
            otel.kind = "client",
            gen_ai.tool.name = %call.tool.name
        );
        let found = match tokio::time::timeout(call.timeout, self.upstream.lookup(call))
            .instrument(request.clone())
            .await
        {
            Ok(found) => found,
            Err(_) => LookupOutcome::Failed("the lookup timed out".to_owned()),
        };
        self.metrics
            .upstream_request(&call.tool.name, UpstreamRequest::Lookup, started.elapsed());
        trace::set_attribute(&request, "intentgate.found", found.kind());
        self.metrics.lookup(&call.tool.name, found.kind());
        found
    }

    /// The pause before retry number `retry + 1`, or `None` when the budget is spent or the
    /// provider asks for a longer pause than the cap.
    fn backoff(&self, retry: u32, budget: u32, retry_after_ms: Option<u64>) -> Option<Duration> {
        if retry >= budget {
            return None;
        }
        let cap = self.options.retry_after_cap;
        match retry_after_ms.map(Duration::from_millis) {
            Some(asked) if asked > cap => None,
            Some(asked) => Some(asked),
            None => Some((self.options.backoff_base * 2u32.saturating_pow(retry)).min(cap)),
        }
    }

    /// A lease owner id unique across replicas and calls: `{instance}/{n}`, or
    /// `{instance}/{role}/{n}` for a background role such as the sweeper.
    pub(crate) fn lease_owner(&self, role: &str) -> String {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        if role.is_empty() {
            format!("{}/{n}", self.options.instance)
        } else {
            format!("{}/{role}/{n}", self.options.instance)
        }
    }

    /// A lease covers every attempt of one call: each timeout, each capped pause, a margin.
    /// The caller's own code makes one attempt per lease (and renews it): its timeout and
    /// the margin.
    pub(crate) fn lease_duration(&self, tool: &ToolDefinition) -> Duration {
        if tool.executor == Executor::Client {
            return tool.timeout + LEASE_MARGIN;
        }
        let attempts = tool.retry_budget + 1;
        tool.timeout * attempts + self.options.retry_after_cap * tool.retry_budget + LEASE_MARGIN
    }

    /// True when one more pause and attempt end before the lease does.
    fn fits_lease(&self, intent: &IntentRecord, tool: &ToolDefinition, pause: Duration) -> bool {
        let end_ms = self.clock.now_ms() + (pause + tool.timeout).as_millis() as i64;
        intent
            .lease_expires_ms
            .is_some_and(|expiry| end_ms < expiry)
    }

    pub(crate) async fn is_disabled(&self, tool: &str) -> Result<bool, GateError> {
        self.with_flags(|disabled| disabled.get(tool).copied().unwrap_or(false))
            .await
    }

    /// The tools this gate treats as switched off now: the same cached view its calls are
    /// refused by (read from the ledger at most every [`FLAG_REFRESH`]), so whoever shows it
    /// (the MCP tool list) never runs ahead of or behind the calls.
    pub async fn switched_off(&self) -> Result<BTreeSet<String>, GateError> {
        self.with_flags(|disabled| {
            disabled
                .iter()
                .filter(|(tool, off)| **off && self.tools.contains_key(*tool))
                .map(|(tool, _)| tool.clone())
                .collect()
        })
        .await
    }

    /// `read` over the flags by tool (true: switched off), re-read from the ledger when the
    /// cached copy is older than [`FLAG_REFRESH`].
    async fn with_flags<T>(
        &self,
        read: impl Fn(&HashMap<String, bool>) -> T,
    ) -> Result<T, GateError> {
        let now_ms = self.clock.now_ms();
        {
            let cache = self.flags.lock().expect("flag cache lock");
            if cache
                .read_ms
                .is_some_and(|read| now_ms - read < FLAG_REFRESH.as_millis() as i64)
            {
                return Ok(read(&cache.disabled));
            }
        }
        let flags = self.ledger.tool_flags().await?;
        let mut cache = self.flags.lock().expect("flag cache lock");
        cache.read_ms = Some(now_ms);
        cache.disabled = flags
            .into_iter()
            .map(|flag| (flag.tool, !flag.enabled))
            .collect();
        Ok(read(&cache.disabled))
    }
}

impl CallOutcome {
    fn with_result(mut self, result: Value, external_id: Option<String>) -> CallOutcome {
        self.result = Some(result);
        self.external_id = external_id;
        self
    }

    fn with_errors(mut self, errors: Vec<String>) -> CallOutcome {
        self.errors = errors;
        self
    }

    /// The outcome with `reason`, and the instruction for it.
    fn with_reason(self, tool: &ToolDefinition, reason: OutcomeReason) -> CallOutcome {
        self.with_reason_details(tool, reason, "")
    }

    /// [`CallOutcome::with_reason`], its message filled in with `details`.
    fn with_reason_details(
        mut self,
        tool: &ToolDefinition,
        reason: OutcomeReason,
        details: &str,
    ) -> CallOutcome {
        self.reason = Some(reason);
        self.message = tool.messages.render_with_reason(
            self.status,
            Some(reason),
            tool.effect,
            &tool.name,
            details,
        );
        self
    }
}

/// The intent as `begin` left it, whatever it decided.
/// The `settle` phase's span: the write of an attempt's outcome.
fn settle_span(finish: &Finish) -> tracing::Span {
    crate::phase!(
        "settle",
        db.operation.name = "finish",
        db.collection.name = "intents",
        intentgate.status = finish.status.as_str()
    )
}

fn begun_intent(begin: &Begin) -> Option<&IntentRecord> {
    match begin {
        Begin::Execute(intent)
        | Begin::Lookup(intent)
        | Begin::Busy(intent)
        | Begin::Settled(intent)
        | Begin::Conflict(intent)
        | Begin::Held(intent, _) => Some(intent),
        Begin::OverBudget { .. } => None,
    }
}

fn body(observation: UpstreamObservation) -> Value {
    match observation {
        UpstreamObservation::Response { body, .. } => body,
        _ => Value::Null,
    }
}

/// A result as the ledger keeps it: within the ledger's limit, and with the upstream's
/// echoes of sensitive arguments as their keyed hashes. `stored_arguments` are the intent's
/// arguments as the ledger keeps them (hashes in place of sensitive values).
pub(crate) fn kept_result(tool: &ToolDefinition, result: Value, stored_arguments: &Value) -> Value {
    // Bounded first, so that the hashing is bounded too.
    let result = storable(result);
    let redaction = tool
        .redaction()
        .expect("Gate::new checked that a tool with sensitive arguments has a hash key");
    match redaction {
        None => result,
        // Hashes may lengthen it again.
        Some(redaction) => storable(redaction.result(result, stored_arguments)),
    }
}

/// A result the ledger can store: one over the ledger's limit is replaced by a note saying
/// so, rather than failing the write that settles the intent.
fn storable(result: Value) -> Value {
    let bytes = result.to_string().len();
    if bytes <= RESULT_BYTES_MAX {
        return result;
    }
    tracing::warn!(
        bytes,
        limit = RESULT_BYTES_MAX,
        "upstream result too large to store; storing a note instead"
    );
    serde_json::json!({"truncated": true, "bytes": bytes, "note": "the upstream's answer was too large to store"})
}

fn external_id(tool: &ToolDefinition, result: &Value) -> Option<String> {
    match result.pointer(&tool.external_id_pointer)? {
        Value::String(id) => Some(id.clone()),
        Value::Number(id) => Some(id.to_string()),
        _ => None,
    }
}

/// A call's arguments in one spelling: every string in NFC ([`intentgate_core::text::nfc`]),
/// before they are validated, keyed, fingerprinted, stored or sent. The provider is sent this
/// form too: a provider that compares text byte by byte then sees one value where the model
/// wrote two spellings, and the request the ledger's arguments rebuild (a re-send, a lookup)
/// is the one first sent. NFC changes no character's meaning, unlike NFKC, which would also
/// fold fullwidth forms; those are refused in keys instead ([`intentgate_core::KeyError`]).
pub(crate) fn one_spelling(arguments: Value) -> Value {
    intentgate_core::text::nfc_strings(arguments)
}

/// The intent key of a side-effecting call: the tool's template rendered from the
/// arguments and the call's intent id ([`call_intent_id`]). Nothing a caller chooses
/// replaces it: a caller's own key is at most the intent id of a template that has one.
fn intent_key(
    tool: &ToolDefinition,
    arguments: &Value,
    intent_id: Option<&str>,
) -> Result<String, String> {
    tool.render_key(arguments, intent_id)
        .expect("side-effecting tools have a key (checked at load)")
        .map_err(|error| error.to_string())
}

/// Refuses a caller's own key ([`CallContext::explicit_key`]) the ledger could not keep: the
/// caller's mistake, refused like arguments that render no key.
fn check_caller_key(context: &CallContext) -> Result<(), String> {
    match &context.explicit_key {
        Some(key) if key.is_empty() || key.len() > CALLER_KEY_LENGTH_MAX => Err(format!(
            "an idempotency key must be 1 to {CALLER_KEY_LENGTH_MAX} bytes, got {}",
            key.len()
        )),
        _ => Ok(()),
    }
}

/// The application's intent id of a call of `tool`. For a key template that uses
/// `{intent_id}`, the caller's own key for the operation (the IETF `Idempotency-Key`) is that
/// id, so it stands in for a missing `intent_id`, and the two must agree when both are
/// given; otherwise the `intent_id` as given (requests may send it).
pub(crate) fn call_intent_id<'c>(
    tool: &ToolDefinition,
    context: &'c CallContext,
) -> Result<Option<&'c str>, String> {
    let keyed_by_id = tool.key.as_ref().is_some_and(|key| key.uses_intent_id());
    match (
        context.intent_id.as_deref(),
        context.explicit_key.as_deref(),
    ) {
        (Some(id), Some(caller_key)) if keyed_by_id && id != caller_key => Err(format!(
            "this tool's key uses {{intent_id}}, and the call names two different ones: \
             Intent-Id `{}` and Idempotency-Key `{}`; send one of them, or the same value in both",
            id.escape_default(),
            caller_key.escape_default()
        )),
        (None, Some(caller_key)) if keyed_by_id => Ok(Some(caller_key)),
        (intent_id, _) => Ok(intent_id),
    }
}

fn rejection_reason(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { status, body, .. } => {
            let text = rejection_text(body);
            if text.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {text}")
            }
        }
        _ => String::new(),
    }
}

/// What an observation was, for the event log: its status or its transport reason.
fn seen(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { status, .. } => format!("HTTP {status}"),
        UpstreamObservation::NotSent { reason } => format!("not sent: {reason}"),
        UpstreamObservation::Timeout => "timeout".to_owned(),
        UpstreamObservation::Dropped { reason } => format!("dropped: {reason}"),
    }
}

/// The provider's own words in an answer, if it has a body that holds them.
fn provider_text(observation: &UpstreamObservation) -> String {
    match observation {
        UpstreamObservation::Response { body, .. } => rejection_text(body),
        _ => String::new(),
    }
}

/// The provider's own words for a refusal, from common error body shapes.
fn rejection_text(body: &Value) -> String {
    ["/error/message", "/message", "/error", "/detail"]
        .iter()
        .find_map(|pointer| body.pointer(pointer).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

impl Gate {
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

/// Records what the gateway decided about the current call (`execute`, `conflict`,
/// `answer_from_ledger`, ...) on its exported span.
fn set_decision(decision: &'static str) {
    trace::set_attribute(&tracing::Span::current(), "intentgate.decision", decision);
}

/// The name of an outcome class, as exported.
fn class_name(class: &OutcomeClass) -> &'static str {
    match class {
        OutcomeClass::Done => "done",
        OutcomeClass::Rejected => "rejected",
        OutcomeClass::NotProcessed { .. } => "not_processed",
        OutcomeClass::Misconfigured { .. } => "misconfigured",
        OutcomeClass::Ambiguous { .. } => "ambiguous",
    }
}

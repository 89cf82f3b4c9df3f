//! The sweeper: drives forward the intents nobody is asking about any more.
//!
//! A crash, a lost connection or a lease that ran out leaves an intent `in_flight` with an
//! expired lease, or `unknown` (docs/design.md section 5). A later call for it runs the next step of
//! its resolution, but the user may never ask again. [`Gate::sweep`] takes those intents from
//! the ledger ([`Ledger::stale`](intentgate_ledger::Ledger::stale)) and, for each one of a
//! configured side-effecting tool whose next step is due:
//!
//! 1. takes its lease through `begin`, like a caller (so a live caller, another process's
//!    sweeper or a step not yet due wins and the intent is left alone): an expired
//!    `in_flight` intent becomes `unknown` there;
//! 2. runs one step of its resolution ([`Gate::advance_unknown`], the same code a repeat
//!    call runs; see the `resolve` module): the lookup, and when it finds nothing and the
//!    tool allows it, the same request again with the **same** provider key.
//!
//! A client-executed tool's intents ([`Executor::Client`]) are the caller's code to look up
//! or re-send (the intent API): the sweeper only turns an expired `in_flight` one `unknown`,
//! and sends nothing.
//!
//! The sweeper never sends a new key for an intent and never starts an attempt of any other
//! kind. A re-send the provider did not process (retries spent on 429s) leaves the intent
//! `unknown`, never `not_executed`: it says nothing about the attempt it repeats.
//!
//! **The application's intent id.** The ledger keeps the intent's key, not the id the
//! application passed with the call. For a tool whose key uses `{intent_id}`, the id is
//! recovered from the key ([`KeyTemplate::intent_id_in`]), checked by rendering the key
//! again; when it can't be, the intent is looked up without it and never re-sent (the
//! request could differ from the first one). For a tool whose key does not use
//! `{intent_id}`, the sweeper's requests carry none; the config loader gives a resend window
//! only to tools whose request does not need one (`intentgate-config`).
//!
//! **Sensitive arguments.** The ledger keeps a tool's sensitive arguments as keyed hashes,
//! and the sweeper has nothing else to build a request from. An intent of such a tool is
//! never re-sent by the sweeper ([`ToolDefinition::may_resend`]): the provider would get
//! hashes where the caller's values were. It is looked up, with the stored arguments (the
//! config refuses a lookup that uses a sensitive argument), and its id recovered past the
//! hashes in its key. A repeat call, which carries the values, may re-send it.
//!
//! **Limits.** One sweep reads at most `limit` intents of each status and steps at most
//! [`SWEEP_CONCURRENCY`] of them at a time, each step bounded by the tool's timeouts and
//! lease. Intents come oldest update first; when more than `limit` unknown intents wait,
//! those at the front that are not due yet hold the others back until they are. The report
//! says when the earliest examined intent falls due ([`SweepReport::next_due_ms`]), so the
//! caller can sweep again then rather than on a fixed tick.

use futures_util::StreamExt;
use intentgate_core::key::KeyTemplate;
use intentgate_core::{CallStatus, Effect, Executor, IntentStatus, ToolDefinition};
use intentgate_ledger::{BeginRequest, IntentRecord};
use tracing::Instrument;

use crate::approval::ApprovalSweep;
use crate::call::look_up::Looked;
use crate::error::GateError;
use crate::gate::Gate;
use crate::lease::{Begun, Lease};
use crate::resolution::{Driver, millis};
use crate::resolve::{Resend, SWEEPER_ROLE, Step, StepRequest, UNASKED_ATTEMPT};
use crate::trace;

/// The event log's reason when the sweeper gives back the lookup lease of a client-executed
/// tool's intent, which only the caller's code can look up.
const CLIENT_LOOKUP_LEASE: &str =
    "lookup lease released: only the caller's code can look up a client-executed tool";

/// Most intents one sweep steps at once. Each step holds one provider request at a time, so
/// this bounds what a sweep asks of the provider at once; the re-send budget per tool
/// (`Resolution::resends_per_second`) bounds the rate.
pub const SWEEP_CONCURRENCY: usize = 32;

/// What one sweep did. Each examined intent is counted once in `resolved_done`,
/// `still_unknown`, `settled_otherwise`, `skipped_busy`, `not_due`, `skipped_tool` or
/// `errors`; `resent`, `resends_deferred`, `looked_up` and `lookup_failed` say how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Intents read from the ledger: expired `in_flight` and free `unknown` ones.
    pub examined: u32,
    /// Now `done`: found by the lookup, or confirmed by a re-send.
    pub resolved_done: u32,
    /// Re-sent with their provider key (however the re-send ended).
    pub resent: u32,
    /// Not found and re-sendable, but the tool's re-send budget was spent: a later step
    /// re-sends them.
    pub resends_deferred: u32,
    /// Lookups made.
    pub looked_up: u32,
    /// Lookups that failed, or found a record half the intent's (a mismatch); those intents
    /// stay `unknown` and nothing was re-sent.
    pub lookup_failed: u32,
    /// Left `unknown`: not found (and not re-sent, or re-sent without a definite answer),
    /// lookup failed, or no lookup.
    pub still_unknown: u32,
    /// Settled some other way meanwhile (by a caller or an operator), or by a re-send the
    /// provider refused.
    pub settled_otherwise: u32,
    /// Someone else holds the intent's lease: a caller, or another process's sweeper.
    pub skipped_busy: u32,
    /// Their next step is not due yet; a later sweep takes it.
    pub not_due: u32,
    /// Of a tool this gate does not have, or that is not side-effecting: left alone.
    pub skipped_tool: u32,
    /// The ledger failed for these intents; a later sweep tries again.
    pub errors: u32,
    /// A listing was cut at the limit: there are more intents than one sweep took.
    pub truncated: bool,
    /// When the earliest examined intent that stays unknown has its next step due (clock
    /// milliseconds); `None` when none does.
    pub next_due_ms: Option<i64>,
    /// Requests for approval settled at their deadline, and approved intents started
    /// ([`Gate::sweep_approvals`]); not counted in `examined`.
    pub approvals: ApprovalSweep,
}

impl SweepReport {
    /// True when the sweep asked the provider something or changed an intent: worth a log
    /// line at info.
    pub fn acted(&self) -> bool {
        self.looked_up
            + self.resent
            + self.resolved_done
            + self.settled_otherwise
            + self.approvals.expired
            + self.approvals.executed
            > 0
    }

    /// True when another sweep now would find nothing it could change: every examined
    /// intent was conclusively looked up (or has no lookup) and stays unknown, none waited
    /// for a lease or its next step, nothing failed and nothing was left for later. Only a
    /// change at the provider (or by an operator) can move those intents on.
    pub fn nothing_left(&self) -> bool {
        self.resolved_done == 0
            && self.resent == 0
            && self.resends_deferred == 0
            && self.lookup_failed == 0
            && self.settled_otherwise == 0
            && self.skipped_busy == 0
            && self.not_due == 0
            && self.errors == 0
            && !self.truncated
    }

    /// Adds another report's counts to this one.
    pub fn add(&mut self, other: &SweepReport) {
        self.examined += other.examined;
        self.resolved_done += other.resolved_done;
        self.resent += other.resent;
        self.resends_deferred += other.resends_deferred;
        self.looked_up += other.looked_up;
        self.lookup_failed += other.lookup_failed;
        self.still_unknown += other.still_unknown;
        self.settled_otherwise += other.settled_otherwise;
        self.skipped_busy += other.skipped_busy;
        self.not_due += other.not_due;
        self.skipped_tool += other.skipped_tool;
        self.errors += other.errors;
        self.truncated |= other.truncated;
        self.approvals.expired += other.approvals.expired;
        self.approvals.executed += other.approvals.executed;
        self.next_due_ms = match (self.next_due_ms, other.next_due_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Gate {
    /// One sweep over at most `limit` expired `in_flight` and `limit` `unknown` intents
    /// (see the module documentation). Returns `Err` only when the ledger can't list them;
    /// a failure on one intent is counted in [`SweepReport::errors`] and logged.
    pub async fn sweep(&self, limit: u32) -> Result<SweepReport, GateError> {
        let mut report = SweepReport::default();
        // Held intents exist only where a policy held them: a gate without policies asks
        // nothing about them (one held under a policy since removed is settled by its next
        // call once its deadline has passed).
        if self
            .tools
            .values()
            .any(|tool| tool.definition.policies.is_some())
        {
            report.approvals = self.sweep_approvals().await?;
        }
        let now_ms = self.clock.now_ms();
        let mut stale = Vec::new();
        // Nothing steps an unknown intent of a client-executed tool but its caller's next
        // grant: listing them would only fill the page. Expired in-flight ones are listed,
        // to be turned unknown.
        let client_tools: Vec<String> = self
            .tools
            .values()
            .filter(|tool| tool.definition.executor == Executor::Client)
            .map(|tool| tool.definition.name.clone())
            .collect();
        for status in [IntentStatus::InFlight, IntentStatus::Unknown] {
            let skip_tools: &[String] = match status {
                IntentStatus::Unknown => &client_tools,
                _ => &[],
            };
            let page = self.ledger.stale(status, now_ms, limit, skip_tools).await?;
            report.truncated |= page.len() as u64 >= u64::from(limit);
            stale.extend(page);
        }
        let mut steps = futures_util::stream::iter(stale)
            .map(|record| self.sweep_logged(record))
            .buffer_unordered(SWEEP_CONCURRENCY);
        while let Some(one) = steps.next().await {
            report.add(&one);
        }
        Ok(report)
    }

    /// [`Gate::sweep_one`] in a span naming the intent, with a failure counted and logged.
    async fn sweep_logged(&self, record: IntentRecord) -> SweepReport {
        // Every log line about this intent carries its tool and key.
        // A trace of its own (no parent), linked to the call that executed the intent.
        let span = tracing::info_span!(
            parent: None,
            "sweep",
            tool = %record.tool,
            key = %record.key,
            tenant = %record.tenant
        );
        if trace::enabled() {
            trace::set_attribute(&span, "intentgate.tool", record.tool.clone());
            trace::set_attribute(&span, "intentgate.tenant", record.tenant.clone());
            trace::set_attribute(
                &span,
                "intentgate.key_hash",
                trace::key_hash(&record.tenant, &record.key),
            );
            trace::set_attribute(&span, "intentgate.intent", record.id);
            trace::set_attribute(&span, "intentgate.status", record.status.as_str());
            self.link_to_executing(&span, record.id).await;
        }
        let (id, tool) = (record.id, record.tool.clone());
        let mut report = SweepReport {
            examined: 1,
            ..SweepReport::default()
        };
        let result = self
            .sweep_one(record, &mut report)
            .instrument(span.clone())
            .await;
        if let Err(error) = result {
            report.errors += 1;
            span.in_scope(|| {
                tracing::warn!(%tool, intent = id, %error, "sweeper: could not handle an intent; a later sweep tries again");
            });
        }
        report
    }

    /// One intent the ledger listed: skipped when its tool is not this gate's side effect or
    /// its next step is not due (or would re-send with the tool's budget spent), otherwise
    /// its lookup lease taken ([`Gate::sweep_lease`]) and one step of its resolution run.
    async fn sweep_one(
        &self,
        record: IntentRecord,
        report: &mut SweepReport,
    ) -> Result<(), GateError> {
        let Some(tool) = self
            .tools
            .get(&record.tool)
            .map(|tool| &tool.definition)
            .filter(|tool| tool.effect == Effect::SideEffect)
        else {
            report.skipped_tool += 1;
            return Ok(());
        };
        let now_ms = self.clock.now_ms();
        if tool.executor == Executor::Client {
            return self.sweep_client_intent(tool, record, now_ms, report).await;
        }
        let interval_ms = self.step_interval_ms(tool, &record, now_ms, Driver::Sweeper);
        if self.not_due(tool, &record, now_ms, interval_ms, report) {
            return Ok(());
        }
        let template = tool
            .key
            .as_ref()
            .expect("side-effecting tools have a key (checked at load)");
        let intent_id = recovered_intent_id(template, &record);
        let owner = self.lease_owner(SWEEPER_ROLE);
        let begin = self.sweep_request(&record, &owner, now_ms, interval_ms, tool);
        let Some(lease) = self.sweep_lease(begin.clone(), now_ms, report).await? else {
            return Ok(());
        };
        report.looked_up += 1;
        let request = StepRequest {
            arguments: &record.arguments,
            intent_id: intent_id.as_deref(),
            driver: Driver::Sweeper,
            begin: &begin,
        };
        let step = self.advance_unknown(tool, request, lease).await?;
        self.count_step(&step, report);
        Ok(())
    }

    /// True, counted in `report`, when `record`'s next step is not due at `now_ms`: an
    /// `unknown` intent looked up less than `interval_ms` ago (answered without a ledger
    /// write), or one whose step would end in a re-send while the tool's re-send budget is
    /// spent (its lookup would only be repeated by the step that re-sends).
    fn not_due(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        now_ms: i64,
        interval_ms: i64,
        report: &mut SweepReport,
    ) -> bool {
        if record.status != IntentStatus::Unknown {
            return false;
        }
        if let Some(due_ms) = record
            .last_lookup_ms
            .map(|last| last.saturating_add(interval_ms))
            .filter(|due_ms| *due_ms > now_ms)
        {
            report.not_due += 1;
            report.next_due_ms = Some(due_ms);
            return true;
        }
        let rate = self.options.resolution.resends_per_second;
        if rate > 0
            && self.resend_possible(tool, record, now_ms, Driver::Sweeper)
            && !self.resend_budget.available(&tool.name, rate, now_ms)
        {
            report.not_due += 1;
            report.resends_deferred += 1;
            report.next_due_ms = Some(now_ms + 1_000 / i64::from(rate));
            return true;
        }
        false
    }

    /// The sweeper's `begin`: the lookup lease of the intent, or `None`, counted in
    /// `report`, when a live caller, another process's sweeper or a settlement got there
    /// first.
    async fn sweep_lease(
        &self,
        begin: BeginRequest,
        now_ms: i64,
        report: &mut SweepReport,
    ) -> Result<Option<Lease>, GateError> {
        match self.ledger_begin(begin).await? {
            Begun::Lookup(lease) => return Ok(Some(lease)),
            Begun::Busy(_) => report.skipped_busy += 1,
            Begun::Settled(intent) => match intent.status {
                IntentStatus::Unknown if intent.lease_live(now_ms) => report.skipped_busy += 1,
                IntentStatus::Unknown => report.not_due += 1,
                _ => report.settled_otherwise += 1,
            },
            // Between the listing and this `begin` a caller settled the intent as not
            // executed, and `begin` started a new attempt for us. The sweeper starts no such
            // attempt: give it back untouched, nothing sent.
            Begun::Execute(lease) => {
                self.release_unused(lease, IntentStatus::NotExecuted, "sweeper", UNASKED_ATTEMPT)
                    .await?;
                report.settled_otherwise += 1;
            }
            // Only an intent that is neither in flight nor unknown is held: settled meanwhile.
            Begun::Held(..) => report.settled_otherwise += 1,
            Begun::Conflict(_) | Begun::OverBudget { .. } => {
                unreachable!("the sweeper asks for an existing intent with its own fingerprint")
            }
        }
        Ok(None)
    }

    /// Counts what one step did in `report`.
    fn count_step(&self, step: &Step, report: &mut SweepReport) {
        // A mismatch is a lookup that could not conclude, as a failed one.
        report.lookup_failed += u32::from(matches!(step.looked, Looked::Failed | Looked::Mismatch));
        match step.resend {
            Resend::Sent => report.resent += 1,
            Resend::Deferred => report.resends_deferred += 1,
            Resend::NotTried | Resend::Raced => {}
        }
        match step.outcome.status {
            CallStatus::Done | CallStatus::AlreadyDone => report.resolved_done += 1,
            CallStatus::PendingUnknown => {
                report.still_unknown += 1;
                // Due again one backoff from now at the earliest; the sweep after that reads
                // the intent's real due time.
                report.next_due_ms =
                    Some(self.clock.now_ms() + millis(self.options.resolution.backoff(1)));
            }
            _ => report.settled_otherwise += 1,
        }
    }

    /// An intent of a client-executed tool: the gateway can neither look it up nor re-send
    /// it, so the sweeper only turns an expired `in_flight` one `unknown` (as the next
    /// caller's `begin` would), so operators see it listed so, and gives back the lookup
    /// lease that `begin` hands it. An `unknown` one is left for the next caller's look-up
    /// grant, and never makes the sweep due again.
    async fn sweep_client_intent(
        &self,
        tool: &ToolDefinition,
        record: IntentRecord,
        now_ms: i64,
        report: &mut SweepReport,
    ) -> Result<(), GateError> {
        if record.status != IntentStatus::InFlight {
            report.skipped_tool += 1;
            return Ok(());
        }
        let owner = self.lease_owner(SWEEPER_ROLE);
        let begin = self.sweep_request(&record, &owner, now_ms, i64::MAX, tool);
        match self.ledger_begin(begin).await? {
            Begun::Lookup(lease) => {
                self.release_unused(lease, IntentStatus::Unknown, "sweeper", CLIENT_LOOKUP_LEASE)
                    .await?;
                report.still_unknown += 1;
            }
            Begun::Busy(_) => report.skipped_busy += 1,
            Begun::Settled(intent) if intent.status == IntentStatus::Unknown => {
                report.still_unknown += 1
            }
            Begun::Settled(_) => report.settled_otherwise += 1,
            Begun::Execute(lease) => {
                self.release_unused(lease, IntentStatus::NotExecuted, "sweeper", UNASKED_ATTEMPT)
                    .await?;
                report.settled_otherwise += 1;
            }
            Begun::Held(..) => report.settled_otherwise += 1,
            Begun::Conflict(_) | Begun::OverBudget { .. } => {
                unreachable!("the sweeper asks for an existing intent with its own fingerprint")
            }
        }
        Ok(())
    }

    /// The sweeper's `begin` for `record`: not a call (uncounted), never a retry of a
    /// rejection, a lookup lease when its next step is due.
    fn sweep_request(
        &self,
        record: &IntentRecord,
        owner: &str,
        now_ms: i64,
        interval_ms: i64,
        tool: &ToolDefinition,
    ) -> BeginRequest {
        BeginRequest {
            tenant: record.tenant.clone(),
            tool: record.tool.clone(),
            key: record.key.clone(),
            fingerprint: record.fingerprint.clone(),
            arguments: record.arguments.clone(),
            lease_owner: owner.to_owned(),
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call: false,
            retry_rejected: false,
            lookup_interval_ms: interval_ms,
            resend_unknown: false,
            expect_new: false,
            policies: None,
        }
    }
}

/// The application's intent id of `record`, when its tool's key uses one and it can be
/// recovered from the key.
fn recovered_intent_id(template: &KeyTemplate, record: &IntentRecord) -> Option<String> {
    if !template.uses_intent_id() {
        return None;
    }
    let id = template.intent_id_in(&record.key, &record.arguments);
    if id.is_none() {
        tracing::warn!(tool = %record.tool, intent = record.id, "sweeper: the intent id can't be recovered from the key; the intent is looked up without it and never re-sent");
    }
    id
}

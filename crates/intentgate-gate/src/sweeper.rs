//! The sweeper: resolves the intents nobody is asking about any more.
//!
//! A crash, a lost connection or a lease that ran out leaves an intent `in_flight` with an
//! expired lease, or `unknown` (SPEC section 5). A later call for it runs the lookup, but
//! the user may never ask again. [`Gate::sweep`] takes those intents from the ledger
//! ([`Ledger::stale`](intentgate_ledger::Ledger::stale)) and, for each one of a configured
//! side-effecting tool:
//!
//! 1. takes its lease through `begin`, like a caller (so a live caller, another replica's
//!    sweeper or a lookup not yet due wins and the intent is left alone): an expired
//!    `in_flight` intent becomes `unknown` there;
//! 2. runs the tool's lookup with the gate's own lookup code: found means `done`;
//! 3. only when the lookup answered "not found" (a failed lookup proves nothing), the tool
//!    declares a resend window (its upstream stores and replays responses per idempotency
//!    key) and the whole re-send fits inside that window counted from when the intent was
//!    first seen: re-sends the same request with the **same** provider key, through the
//!    gate's normal execute path. If the first attempt had committed, the provider replays
//!    its answer and nothing happens twice; if it had not, this is the one effect.
//!
//! Otherwise, and once an intent has had [`RESEND_ATTEMPTS_MAX`] attempts, it stays
//! `unknown` for reconciliation or an operator. The sweeper never sends a new key for an
//! intent and never starts an attempt of any other kind. A re-send the provider did not
//! process (retries spent on 429s) leaves the intent `unknown`, never `not_executed`: it
//! says nothing about the attempt it repeats.
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
//! never re-sent ([`ToolDefinition::may_resend`]): the provider would get hashes where the
//! caller's values were. It is looked up, with the stored arguments (the config refuses a
//! lookup that uses a sensitive argument), and its id recovered past the hashes in its key.
//!
//! **Limits.** One sweep reads at most `limit` intents of each status and handles them one
//! at a time, so it makes at most `2 * limit` lookups and re-sends, each bounded by the
//! tool's timeout and lease. An intent that stays unknown is looked up less often as it
//! ages ([`SWEEP_LOOKUP_AGE_FRACTION`], [`SWEEP_LOOKUP_INTERVAL_MAX`]), so the provider is
//! not asked about it every few seconds for as long as it is kept. Intents come oldest
//! update first; when more than `limit` unknown intents wait, those at the front that are
//! not due yet hold the others back until they are, which is at most
//! [`SWEEP_LOOKUP_INTERVAL_MAX`].

use std::time::Duration;

use intentgate_core::key::KeyTemplate;
use intentgate_core::{CallStatus, Effect, IntentStatus, ToolDefinition};
use intentgate_ledger::{Begin, BeginRequest, IntentRecord};
use tracing::Instrument;

use crate::gate::{Attempt, Gate, GateError, Looked};

/// The event log's reason when the sweeper gives back an attempt `begin` started on a
/// not-executed intent: the intent is not executed, as it was.
const UNASKED_ATTEMPT: &str =
    "the sweeper starts no attempt of a not-executed intent; nothing was sent";
/// The event log's reason when the sweeper gives back a lookup lease without looking up.
const UNUSED_LOOKUP_LEASE: &str = "lookup lease released unused by the sweeper";

/// The part of an unknown intent's age the sweeper waits between two of its lookups: one
/// tenth, so an intent a minute old is asked about again within seconds, one a day old
/// about once an hour. Never less than the gate's own lookup interval.
pub const SWEEP_LOOKUP_AGE_FRACTION: u32 = 10;
/// Longest wait between two sweeper lookups of one unknown intent. Hourly reconciliation
/// catches up with the provider's records anyway; an hour keeps an intent that stays
/// unknown (they are kept until resolved) to 24 lookups a day after its first day.
pub const SWEEP_LOOKUP_INTERVAL_MAX: Duration = Duration::from_secs(60 * 60);
/// Most attempts an intent may have had for the sweeper to re-send it once more: a first
/// attempt and two re-sends. A re-send answered with a 5xx gets that stored 5xx replayed for
/// the whole key window, so re-sending on would only add load; one that timed out may go
/// through the next time. The ledger does not tell re-sends from other attempts, so an
/// intent that took several attempts before it went unknown gets fewer re-sends (never
/// more); past the limit it stays unknown for reconciliation or an operator.
pub const RESEND_ATTEMPTS_MAX: u32 = 3;

/// What one sweep did. Each examined intent is counted once in `resolved_done`,
/// `still_unknown`, `settled_otherwise`, `skipped_busy`, `not_due`, `skipped_tool` or
/// `errors`; `resent`, `looked_up` and `lookup_failed` say how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Intents read from the ledger: expired `in_flight` and free `unknown` ones.
    pub examined: u32,
    /// Now `done`: found by the lookup, or confirmed by a re-send.
    pub resolved_done: u32,
    /// Re-sent with their provider key (however the re-send ended).
    pub resent: u32,
    /// Lookups made.
    pub looked_up: u32,
    /// Lookups that failed; those intents stay `unknown` and nothing was re-sent.
    pub lookup_failed: u32,
    /// Left `unknown`: not found (and not re-sendable), lookup failed, no lookup, or a
    /// re-send that learned nothing definite.
    pub still_unknown: u32,
    /// Settled some other way meanwhile (by a caller or an operator), or by a re-send the
    /// provider refused.
    pub settled_otherwise: u32,
    /// Someone else holds the intent's lease: a caller, or another replica's sweeper.
    pub skipped_busy: u32,
    /// Looked up too recently; a later sweep will.
    pub not_due: u32,
    /// Of a tool this gate does not have, or that is not side-effecting: left alone.
    pub skipped_tool: u32,
    /// The ledger failed for these intents; a later sweep tries again.
    pub errors: u32,
    /// A listing was cut at the limit: there are more intents than one sweep took.
    pub truncated: bool,
}

impl SweepReport {
    /// True when the sweep asked the provider something or changed an intent: worth a log
    /// line at info.
    pub fn acted(&self) -> bool {
        self.looked_up + self.resent + self.resolved_done + self.settled_otherwise > 0
    }

    /// True when another sweep now would find nothing it could change: every examined
    /// intent was conclusively looked up (or has no lookup) and stays unknown, none waited
    /// for a lease or its next lookup, nothing failed and nothing was left for later. Only a
    /// change at the provider (or by an operator) can move those intents on.
    pub fn nothing_left(&self) -> bool {
        self.resolved_done == 0
            && self.resent == 0
            && self.lookup_failed == 0
            && self.settled_otherwise == 0
            && self.skipped_busy == 0
            && self.not_due == 0
            && self.errors == 0
            && !self.truncated
    }
}

impl Gate {
    /// One sweep over at most `limit` expired `in_flight` and `limit` `unknown` intents
    /// (see the module documentation). Returns `Err` only when the ledger can't list them;
    /// a failure on one intent is counted in [`SweepReport::errors`] and logged.
    pub async fn sweep(&self, limit: u32) -> Result<SweepReport, GateError> {
        let now_ms = self.clock.now_ms();
        let mut report = SweepReport::default();
        let mut stale = Vec::new();
        for status in [IntentStatus::InFlight, IntentStatus::Unknown] {
            let page = self.ledger.stale(status, now_ms, limit).await?;
            report.truncated |= page.len() as u64 >= u64::from(limit);
            stale.extend(page);
        }
        for record in stale {
            report.examined += 1;
            // Every log line about this intent carries its tool and key.
            let span = tracing::info_span!(
                "sweep",
                tool = %record.tool,
                key = %record.key,
                tenant = %record.tenant
            );
            let (id, tool) = (record.id, record.tool.clone());
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
        }
        Ok(report)
    }

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
        let lookup_interval_ms = self.sweep_lookup_interval_ms(&record, now_ms);
        // Not due yet: answered without a ledger write.
        if record.status == IntentStatus::Unknown
            && record
                .last_lookup_ms
                .is_some_and(|last| now_ms.saturating_sub(last) < lookup_interval_ms)
        {
            report.not_due += 1;
            return Ok(());
        }
        let template = tool
            .key
            .as_ref()
            .expect("side-effecting tools have a key (checked at load)");
        let intent_id = recovered_intent_id(template, &record);
        let owner = self.lease_owner("sweeper");
        let begin = self
            .ledger_begin(self.sweep_request(tool, &record, &owner, now_ms, false))
            .await?;
        let intent = match begin {
            Begin::Lookup(intent) => intent,
            Begin::Busy(_) => {
                report.skipped_busy += 1;
                return Ok(());
            }
            Begin::Settled(intent) => {
                match intent.status {
                    IntentStatus::Unknown if intent.lease_live(now_ms) => report.skipped_busy += 1,
                    IntentStatus::Unknown => report.not_due += 1,
                    _ => report.settled_otherwise += 1,
                }
                return Ok(());
            }
            // Between the listing and this `begin` a caller settled the intent as not
            // executed, and `begin` started a new attempt for us. The sweeper starts no such
            // attempt: give it back untouched, nothing sent.
            Begin::Execute(intent) => {
                self.release_unused(&intent, &owner, IntentStatus::NotExecuted, UNASKED_ATTEMPT)
                    .await?;
                report.settled_otherwise += 1;
                return Ok(());
            }
            Begin::Conflict(_) => {
                unreachable!("the sweeper asks with the intent's own fingerprint")
            }
        };

        report.looked_up += 1;
        let looked_up_attempt = intent.attempt;
        let attempts_left = looked_up_attempt < RESEND_ATTEMPTS_MAX;
        let (outcome, looked) = self
            .look_up_unknown(
                tool,
                &record.arguments,
                intent_id.as_deref(),
                intent,
                &owner,
                "sweeper",
            )
            .await;
        match (outcome.status, looked) {
            (CallStatus::Done | CallStatus::AlreadyDone, _) => {
                report.resolved_done += 1;
                return Ok(());
            }
            (CallStatus::PendingUnknown, Looked::NotFound) => {}
            (CallStatus::PendingUnknown, looked) => {
                report.lookup_failed += u32::from(looked == Looked::Failed);
                report.still_unknown += 1;
                return Ok(());
            }
            _ => {
                report.settled_otherwise += 1;
                return Ok(());
            }
        }

        // Not found: re-send with the same key, if the tool allows it right now.
        let now_ms = self.clock.now_ms();
        let resendable = tool.may_resend(record.first_seen_ms, now_ms, self.lease_duration(tool))
            && attempts_left
            && (intent_id.is_some() || !template.uses_intent_id())
            && !self.is_disabled(&tool.name).await?;
        if !resendable {
            report.still_unknown += 1;
            return Ok(());
        }
        let owner = self.lease_owner("sweeper");
        let begin = self
            .ledger_begin(self.sweep_request(tool, &record, &owner, now_ms, true))
            .await?;
        let intent = match begin {
            // The attempt after the one looked up: the re-send.
            Begin::Execute(intent) if intent.attempt == looked_up_attempt + 1 => intent,
            // Others made attempts since (it went not executed): not ours to start.
            Begin::Execute(intent) => {
                self.release_unused(&intent, &owner, IntentStatus::NotExecuted, UNASKED_ATTEMPT)
                    .await?;
                report.settled_otherwise += 1;
                return Ok(());
            }
            // A re-send by another replica ran out its lease in between: that one needs its
            // own lookup first, by a later sweep.
            Begin::Lookup(intent) => {
                self.release_unused(&intent, &owner, IntentStatus::Unknown, UNUSED_LOOKUP_LEASE)
                    .await?;
                report.still_unknown += 1;
                return Ok(());
            }
            Begin::Settled(intent) if intent.status != IntentStatus::Unknown => {
                report.settled_otherwise += 1;
                return Ok(());
            }
            Begin::Busy(_) | Begin::Settled(_) => {
                report.skipped_busy += 1;
                return Ok(());
            }
            Begin::Conflict(_) => {
                unreachable!("the sweeper asks with the intent's own fingerprint")
            }
        };
        tracing::info!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, "sweeper: re-sending an unknown intent with its provider key");
        report.resent += 1;
        let outcome = self
            .execute(
                tool,
                &record.arguments,
                intent_id.as_deref(),
                intent,
                &owner,
                Attempt::Resend,
            )
            .await;
        match outcome.status {
            CallStatus::Done | CallStatus::AlreadyDone => report.resolved_done += 1,
            CallStatus::PendingUnknown => report.still_unknown += 1,
            _ => report.settled_otherwise += 1,
        }
        Ok(())
    }

    /// The sweeper's `begin` for `record`: not a call (uncounted), never a retry of a
    /// rejection; `resend` asks for the same-key re-send of an unknown intent.
    fn sweep_request(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        owner: &str,
        now_ms: i64,
        resend: bool,
    ) -> BeginRequest {
        BeginRequest {
            tenant: record.tenant.clone(),
            tool: record.tool.clone(),
            key: record.key.clone(),
            fingerprint: record.fingerprint.clone(),
            arguments: record.arguments.clone(),
            lease_owner: owner.to_owned(),
            lease_expires_ms: now_ms + self.lease_duration(tool).as_millis() as i64,
            now_ms,
            count_call: false,
            retry_rejected: false,
            lookup_interval_ms: self.sweep_lookup_interval_ms(record, now_ms),
            resend_unknown: resend,
        }
    }

    /// The least time between two sweeper lookups of `record`: a fraction of its age,
    /// between the gate's lookup interval and [`SWEEP_LOOKUP_INTERVAL_MAX`].
    fn sweep_lookup_interval_ms(&self, record: &IntentRecord, now_ms: i64) -> i64 {
        let floor_ms = self.options.lookup_interval.as_millis() as i64;
        let ceiling_ms = (SWEEP_LOOKUP_INTERVAL_MAX.as_millis() as i64).max(floor_ms);
        let age_ms = now_ms.saturating_sub(record.first_seen_ms).max(0);
        (age_ms / i64::from(SWEEP_LOOKUP_AGE_FRACTION)).clamp(floor_ms, ceiling_ms)
    }

    /// Gives back a lease `begin` granted the sweeper without sending anything: the intent
    /// keeps `status`, the one it had, and the event log says why.
    async fn release_unused(
        &self,
        intent: &IntentRecord,
        owner: &str,
        status: IntentStatus,
        detail: &str,
    ) -> Result<(), GateError> {
        let finish = self.finish(intent, owner, status, "sweeper", detail.to_owned());
        self.ledger_finish(finish).await?;
        Ok(())
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

//! The intent API's side of the gate: tools whose effect the caller's own code performs
//! ([`Executor::Client`], `docs/intent-api.md`).
//!
//! The gateway can't send such a tool's request, look it up or re-send it. It still owns
//! everything else of the call path: validation, the kill switch, the key and fingerprint,
//! the settled read, `begin` with its wait, conflicts and repeats ([`Gate::acquire_intent`],
//! the phases [`Gate::call`] runs too). Where the call path would send, [`Gate::grant`] hands
//! the lease to the caller instead:
//!
//! - [`Grant::Execute`]: the intent is durably `in_flight` under the caller's lease; its code
//!   runs the effect once with [`GrantedLease::provider_key`];
//! - [`Grant::LookUp`]: the intent is `unknown` and its next step is due; the caller checks
//!   with the provider, never executes;
//! - [`Grant::Answer`]: nothing to run, the [`CallOutcome`] a call would answer.
//!
//! The caller reports back with [`Gate::settle`] and keeps a long run alive with
//! [`Gate::renew`]. Both prove the lease with its token, and the ledger records only while
//! that lease is held and live (`Finish::lease_required`, `Ledger::renew`): a holder whose
//! lease expired may already have been replaced by a caller looking the intent up.
//!
//! **The lease token.** 32 random bytes from the OS, shown once as `igl_` and 64 hex digits
//! ([`LeaseToken`]). The ledger keeps only the lease owner `client:` and the token's hex
//! SHA-256 (`client:resend:` for a re-send grant, so that a settle knows the grant it
//! answers without trusting the caller). Owners without `/` name no gateway process, so the
//! dead-process takeover never frees a client's lease: only its expiry does.
//!
//! **Unknown intents.** A lookup grant follows the rules of `resolve`: at most one per step
//! interval per intent (callers in between are answered `pending_unknown`), and a lookup
//! that found nothing leads to a re-send grant (same provider key, `resend: true`) only
//! inside the tool's resend window, with a token from the tool's re-send budget. An
//! `unknown` settle of an execute grant may say why the provider will answer every re-send
//! the same way ([`ResendStop`]): it is recorded as the call path records such an answer
//! (the ledger's `resend_stopped`, the event's detail, `intentgate_resends_stopped_total`),
//! and from then on the intent is granted lookups only.

use std::fmt;

use intentgate_core::hex::lower_hex;
use intentgate_core::key::provider_key;
use intentgate_core::limits::{EVENT_DETAIL_LENGTH_MAX, EXTERNAL_ID_LENGTH_MAX, RESULT_BYTES_MAX};
use intentgate_core::{CallStatus, Executor, IntentStatus, ResendStop, ToolDefinition};
use intentgate_ledger::{
    BeginRequest, Finish, Finished, IntentId, IntentRecord, LedgerError, Renew, Renewed,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::Instrument;

use crate::call::Acquired;
use crate::call::key::one_spelling;
use crate::call::record::kept_result;
use crate::context::CallContext;
use crate::error::GateError;
use crate::gate::Gate;
use crate::lease::{Begun, finish_of};
use crate::metrics::STATUS_LEDGER_UNAVAILABLE;
use crate::options::QUEUED_FINISH_MIN_LEASE;
use crate::outcome::CallOutcome;
use crate::resolution::{Driver, millis};
use crate::resolve::UNUSED_LOOKUP_LEASE;

/// What every lease token starts with, so a leaked one is recognised by secret scanners.
pub const LEASE_TOKEN_PREFIX: &str = "igl_";
/// Random bytes in a lease token: as many as a SHA-256, beyond any guessing.
const LEASE_TOKEN_BYTES: usize = 32;
/// The lease owner of an execute or look-up grant: this, then the token's hex SHA-256.
const CLIENT_OWNER_PREFIX: &str = "client:";
/// The lease owner of a re-send grant (an execute grant of an `unknown` intent).
const RESEND_OWNER_PREFIX: &str = "client:resend:";
/// Who settled an intent the caller's code executed.
const RESOLVED_BY_CLIENT: &str = "client";
/// Who settled an intent the caller's code looked up.
const RESOLVED_BY_LOOKUP: &str = "lookup";
/// Where a settle's reason to stop re-sends came from, for the log.
const SEEN_BY_CLIENT: &str = "the caller's settle";

/// The secret that proves a caller holds an intent's lease. Shown once, in the grant; the
/// ledger keeps its SHA-256 only. `Debug` shows the prefix alone.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// A new token of [`LEASE_TOKEN_BYTES`] random bytes.
    fn generate() -> Result<LeaseToken, getrandom::Error> {
        let mut bytes = [0u8; LEASE_TOKEN_BYTES];
        getrandom::fill(&mut bytes)?;
        Ok(LeaseToken(format!(
            "{LEASE_TOKEN_PREFIX}{}",
            lower_hex(&bytes)
        )))
    }

    /// A token as a caller presented it, unchecked: a wrong one holds no lease.
    pub fn presented(token: &str) -> LeaseToken {
        LeaseToken(token.to_owned())
    }

    /// The token's text, for the one answer that hands it to its holder.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lease owner the ledger stores for this token.
    fn owner(&self, resend: bool) -> String {
        let prefix = if resend {
            RESEND_OWNER_PREFIX
        } else {
            CLIENT_OWNER_PREFIX
        };
        format!("{prefix}{}", lower_hex(&Sha256::digest(self.0.as_bytes())))
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({LEASE_TOKEN_PREFIX}…)")
    }
}

/// What [`Gate::grant`] (and a settle that leads to a re-send) tells the caller to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Grant {
    /// Nothing to run: what a call of the tool would answer.
    Answer(CallOutcome),
    /// Run the effect once, with the provider key, under the lease.
    Execute(GrantedLease),
    /// An earlier attempt's outcome is unknown: check with the provider, never execute.
    LookUp(GrantedLease),
}

/// A lease handed to the caller: which intent, what to send the provider, and until when.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantedLease {
    pub intent_id: IntentId,
    pub tool: String,
    pub intent_key: String,
    /// The idempotency key to send the provider: the same for every attempt of one epoch.
    pub provider_key: String,
    /// The attempt this lease is for (1 for the first).
    pub attempt: u32,
    /// The same request again for an intent whose earlier attempt's outcome is unknown.
    pub resend: bool,
    pub token: LeaseToken,
    /// When the lease expires unless renewed (clock milliseconds).
    pub expires_at_ms: i64,
    /// How long each lease and renewal lasts: the tool's timeout and the lease margin.
    pub duration_ms: i64,
}

/// What the caller's code learned, for [`Gate::settle`].
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// The effect exists. `result` is what repeats are shown, `external_id` the provider's id.
    Done {
        result: Option<Value>,
        external_id: Option<String>,
    },
    /// The provider refused; nothing happened.
    Rejected {
        reason: String,
        result: Option<Value>,
    },
    /// Certainly nothing reached the provider (execute grants only).
    NotExecuted { reason: String },
    /// The outcome is ambiguous, or a lookup failed. `resend_stop` (execute grants only)
    /// says the provider's answer to the provider key can't change (a stored 5xx it
    /// replays, a 5xx it says not to retry, a key it holds for other parameters): same-key
    /// re-sends of the intent then stop for good, and only lookups are granted.
    Unknown {
        reason: String,
        resend_stop: Option<ResendStop>,
    },
    /// The lookup answered and the provider has no such effect (look-up grants only).
    NotFound,
}

impl Settlement {
    /// The outcome's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Settlement::Done { .. } => "done",
            Settlement::Rejected { .. } => "rejected",
            Settlement::NotExecuted { .. } => "not_executed",
            Settlement::Unknown { .. } => "unknown",
            Settlement::NotFound => "not_found",
        }
    }
}

/// Why a settle or renew changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// No intent of a client-executed tool with that id in the caller's tenant (another
    /// tenant's intent is not found either).
    #[error("no intent {0} of a client-executed tool in this tenant")]
    NotFound(IntentId),
    /// The token does not hold the intent's lease now (wrong, expired, settled, or taken by
    /// another caller): nothing was written. The intent as it now stands.
    #[error("the lease is not held: intent {} is {} now; ask for a grant again to learn its answer", .0.id, .0.status)]
    LeaseLost(Box<IntentRecord>),
    /// The outcome does not answer the grant the lease was given for.
    #[error("outcome `{outcome}` is not allowed on {grant} grant: {hint}")]
    NotAllowed {
        outcome: &'static str,
        grant: &'static str,
        hint: &'static str,
    },
    /// A settled value over its limit: nothing was written.
    #[error("{field} is {length} bytes, over the limit of {limit}")]
    TooLarge {
        field: &'static str,
        length: usize,
        limit: usize,
    },
    /// No randomness for a re-send grant's token: nothing was re-granted (the settle was
    /// recorded).
    #[error("no randomness for a lease token: {0}")]
    Randomness(getrandom::Error),
    /// The ledger failed; nothing or only the settle was written.
    #[error("the intent ledger is unavailable: {0}")]
    Ledger(#[from] LedgerError),
}

/// The grant a lease was given for, as the ledger's row and owner say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Execute { resend: bool },
    LookUp,
}

impl Held {
    fn name(self) -> &'static str {
        match self {
            Held::Execute { .. } => "an execute",
            Held::LookUp => "a look_up",
        }
    }
}

impl Gate {
    /// Asks for a grant of client-executed tool `tool` (the intent API's
    /// `POST /v1/tools/{name}/intents`). Runs the call path's phases up to the lease and hands
    /// the lease to the caller (see the module documentation). Returns `Err` for an unknown
    /// tool, one the gateway executes itself ([`GateError::NotClientExecuted`]), an invalid
    /// tenant, a ledger that failed, or no randomness for the token.
    pub async fn grant(
        &self,
        tool: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<Grant, GateError> {
        let span = tracing::info_span!(
            "grant",
            tool = %tool,
            key = tracing::field::Empty,
            tenant = %context.tenant
        );
        self.grant_counted(tool, arguments, context)
            .instrument(span)
            .await
    }

    /// [`Gate::grant`], its answers counted in `intentgate_calls_total` (a granted lease
    /// is counted when it is settled).
    async fn grant_counted(
        &self,
        name: &str,
        arguments: Value,
        context: &CallContext,
    ) -> Result<Grant, GateError> {
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| GateError::UnknownTool(name.to_owned()))?;
        let definition = &tool.definition;
        if definition.executor != Executor::Client {
            return Err(GateError::NotClientExecuted(name.to_owned()));
        }
        intentgate_core::Tenant::parse(&context.tenant)?;
        let arguments = one_spelling(arguments);
        let granted = async {
            if let Some(refused) = self.admit(tool, &arguments, context).await? {
                return Ok(Grant::Answer(refused));
            }
            let token = LeaseToken::generate().map_err(GateError::Randomness)?;
            let owner = token.owner(false);
            Ok(
                match self
                    .acquire_intent(definition, &arguments, context, &owner, true)
                    .await?
                {
                    Acquired::Answered(outcome) => Grant::Answer(outcome),
                    // The lease passes to the caller's code, which proves it with the token.
                    Acquired::Execute { lease } => {
                        Grant::Execute(self.granted_lease(definition, lease.intent(), token, false))
                    }
                    Acquired::Lookup { lease, .. } => {
                        Grant::LookUp(self.granted_lease(definition, lease.intent(), token, false))
                    }
                },
            )
        }
        .await;
        match &granted {
            Ok(Grant::Answer(outcome)) => self.metrics().call(name, outcome.status),
            Err(GateError::Ledger(_)) => {
                self.metrics().call_status(name, STATUS_LEDGER_UNAVAILABLE)
            }
            _ => {}
        }
        granted
    }

    /// Records what the caller's code learned under the lease `token` of intent `id` (the
    /// intent API's `POST /v1/intents/{id}/settle`), and answers what the model should see,
    /// or, after a lookup that found nothing inside the resend window, a re-send grant.
    pub async fn settle(
        &self,
        tenant: &str,
        id: IntentId,
        token: &str,
        settlement: Settlement,
    ) -> Result<Grant, SettleError> {
        let (tool, intent) = self.client_intent(tenant, id).await?;
        let now_ms = self.clock.now_ms();
        let token = LeaseToken::presented(token);
        let Some(held) = held(&intent, &token, now_ms) else {
            return Err(SettleError::LeaseLost(Box::new(intent)));
        };
        check_allowed(held, &settlement)?;
        check_bounds(&settlement)?;
        let owner = token.owner(held == Held::Execute { resend: true });
        let resolved_by = match held {
            Held::Execute { .. } => RESOLVED_BY_CLIENT,
            Held::LookUp => RESOLVED_BY_LOOKUP,
        };
        let looked_up = held == Held::LookUp;
        let found_nothing = settlement == Settlement::NotFound;
        let stop = match &settlement {
            Settlement::Unknown { resend_stop, .. } => *resend_stop,
            _ => None,
        };
        let provider_message = match &settlement {
            Settlement::Unknown { reason, .. } => reason.clone(),
            _ => String::new(),
        };
        let Recorded {
            status,
            result,
            external_id,
            detail,
        } = recorded(tool, &intent, held, settlement);
        let finish = Finish {
            result,
            external_id,
            looked_up,
            lease_required: true,
            resend_stopped: stop,
            ..finish_of(&intent, &owner, now_ms, status, resolved_by, detail)
        };
        // The final outcome of an `in_flight` intent's attempt, under a lease with time left,
        // is answered once its write is queued, as the call path answers its own attempt's
        // (`Gate::queue_finish`): nobody else can change the intent before it commits, reads
        // of an `in_flight` intent wait for its queued finish, and a crash before the commit
        // leaves it `in_flight`, settled by the lookup of the next grant after the lease.
        let lease_left_ms = intent.lease_expires_ms.unwrap_or(now_ms) - now_ms;
        let recorded = if intent.status == IntentStatus::InFlight
            && status != IntentStatus::Unknown
            && lease_left_ms >= millis(QUEUED_FINISH_MIN_LEASE)
        {
            self.queue_finish(&tool.name, &intent, finish).await?
        } else {
            match self.ledger_finish(finish).await? {
                Finished::Recorded(recorded) => recorded,
                Finished::Superseded(now) => return Err(SettleError::LeaseLost(Box::new(now))),
            }
        };
        if let Some(stop) = stop {
            // Counted once recorded: a settle that lost its lease stopped nothing.
            self.resends_stopped(tool, &intent, stop, SEEN_BY_CLIENT, || provider_message);
        }
        if recorded.status == IntentStatus::Unknown {
            self.metrics().intent_left_unknown(&tool.name);
            if found_nothing {
                return self.resend_grant(tool, recorded).await;
            }
        }
        let mut outcome = self.answer_from(tool, &recorded);
        if recorded.status == IntentStatus::Done && !looked_up {
            outcome.status = CallStatus::Done;
            outcome.message = tool
                .messages
                .render(CallStatus::Done, tool.effect, &tool.name, "");
        }
        self.metrics().call(&tool.name, outcome.status);
        Ok(Grant::Answer(outcome))
    }

    /// Extends the lease `token` holds on intent `id` by the tool's lease duration from now
    /// (the intent API's `POST /v1/intents/{id}/renew`); the same token stays valid.
    pub async fn renew(
        &self,
        tenant: &str,
        id: IntentId,
        token: &str,
    ) -> Result<GrantedLease, SettleError> {
        let (tool, intent) = self.client_intent(tenant, id).await?;
        let now_ms = self.clock.now_ms();
        let token = LeaseToken::presented(token);
        let Some(held) = held(&intent, &token, now_ms) else {
            return Err(SettleError::LeaseLost(Box::new(intent)));
        };
        let resend = held == Held::Execute { resend: true };
        let renew = Renew {
            id,
            lease_owner: token.owner(resend),
            attempt: intent.attempt,
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
        };
        match self.ledger.renew(renew).await? {
            Renewed::Renewed(intent) => Ok(self.granted_lease(tool, &intent, token, resend)),
            Renewed::Lost(intent) => Err(SettleError::LeaseLost(Box::new(intent))),
        }
    }

    /// The intent `id` of `tenant`, of a client-executed tool of this gate.
    async fn client_intent(
        &self,
        tenant: &str,
        id: IntentId,
    ) -> Result<(&ToolDefinition, IntentRecord), SettleError> {
        let intent = self
            .ledger
            .get_by_id(id)
            .await?
            .filter(|intent| intent.tenant == tenant)
            .ok_or(SettleError::NotFound(id))?;
        let tool = self
            .tool(&intent.tool)
            .filter(|tool| tool.executor == Executor::Client)
            .ok_or(SettleError::NotFound(id))?;
        Ok((tool, intent))
    }

    /// After a lookup that found nothing: a re-send grant when the resend window, the kill
    /// switch and the tool's re-send budget allow one now, else the answer (`pending_unknown`).
    async fn resend_grant(
        &self,
        tool: &ToolDefinition,
        intent: IntentRecord,
    ) -> Result<Grant, SettleError> {
        let now_ms = self.clock.now_ms();
        let pending = |gate: &Gate, intent: &IntentRecord| {
            let outcome = gate.answer_from(tool, intent);
            gate.metrics().call(&tool.name, outcome.status);
            Ok(Grant::Answer(outcome))
        };
        let disabled = self
            .is_disabled(&tool.name)
            .await
            .map_err(|error| match error {
                GateError::Ledger(error) => SettleError::Ledger(error),
                other => unreachable!("reading the tool flags fails only in the ledger: {other}"),
            })?;
        let rate = self.options.resolution.resends_per_second;
        if disabled
            || !self.resend_possible(tool, &intent, now_ms, Driver::Caller)
            || !self.resend_budget.take(&tool.name, rate, now_ms)
        {
            return pending(self, &intent);
        }
        let token = LeaseToken::generate().map_err(SettleError::Randomness)?;
        let owner = token.owner(true);
        let begin = BeginRequest {
            tenant: intent.tenant.clone(),
            tool: intent.tool.clone(),
            key: intent.key.clone(),
            fingerprint: intent.fingerprint.clone(),
            arguments: intent.arguments.clone(),
            lease_owner: owner,
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call: false,
            retry_rejected: tool.retry_rejected,
            lookup_interval_ms: self.step_interval_ms(tool, &intent, now_ms, Driver::Caller),
            resend_unknown: true,
            expect_new: false,
            policies: None,
        };
        match self.ledger_begin(begin).await? {
            // The owner says re-send, whichever attempt `begin` started: a not-executed
            // settle of it then leaves the intent unknown, the safe side.
            Begun::Execute(lease) => {
                let next = lease.intent();
                tracing::debug!(tool = %tool.name, key = %next.key, attempt = next.attempt, "granting a re-send of an unknown intent with its provider key");
                Ok(Grant::Execute(self.granted_lease(tool, next, token, true)))
            }
            // Another re-send's lease ran out in between: that attempt needs its own lookup,
            // by a later grant.
            Begun::Lookup(lease) => {
                let next = lease.intent().clone();
                self.release_unused(
                    lease,
                    IntentStatus::Unknown,
                    RESOLVED_BY_LOOKUP,
                    UNUSED_LOOKUP_LEASE,
                )
                .await
                .map_err(|error| match error {
                    GateError::Ledger(error) => SettleError::Ledger(error),
                    other => unreachable!("releasing a lease fails only in the ledger: {other}"),
                })?;
                pending(self, &next)
            }
            Begun::Settled(next)
            | Begun::Busy(next)
            | Begun::Conflict(next)
            | Begun::Held(next, ..) => pending(self, &next),
            Begun::OverBudget { .. } => unreachable!("a re-send asks for an existing intent"),
        }
    }

    /// The lease `token` holds on `intent`, as the caller is shown it.
    fn granted_lease(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        token: LeaseToken,
        resend: bool,
    ) -> GrantedLease {
        GrantedLease {
            intent_id: intent.id,
            tool: intent.tool.clone(),
            intent_key: intent.key.clone(),
            provider_key: provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch),
            attempt: intent.attempt,
            resend,
            token,
            expires_at_ms: intent
                .lease_expires_ms
                .expect("a granted intent holds a lease"),
            duration_ms: millis(self.lease_duration(tool)),
        }
    }
}

/// What a settle records: the status, the result and provider id kept, and the event log's
/// detail.
struct Recorded {
    /// The status the intent takes.
    status: IntentStatus,
    /// The result repeats are shown, as the ledger keeps it.
    result: Option<Value>,
    /// The provider's id of the effect.
    external_id: Option<String>,
    /// Why, for the event log.
    detail: String,
}

/// What the caller's `settlement` of a lease held for `held` records about `intent`. A
/// re-send that was not executed leaves the intent `unknown`: the first attempt may have
/// happened.
fn recorded(
    tool: &ToolDefinition,
    intent: &IntentRecord,
    held: Held,
    settlement: Settlement,
) -> Recorded {
    let (status, result, external_id, detail) = match settlement {
        Settlement::Done {
            result,
            external_id,
        } => (
            IntentStatus::Done,
            result.map(|result| kept_result(tool, result, &intent.arguments)),
            external_id,
            if held == Held::LookUp {
                "the caller's lookup found the effect".to_owned()
            } else {
                "the caller's code confirmed it".to_owned()
            },
        ),
        Settlement::Rejected { reason, result } => {
            let result = result.unwrap_or_else(|| json!({ "message": reason }));
            (
                IntentStatus::Rejected,
                Some(kept_result(tool, result, &intent.arguments)),
                None,
                format!("the provider refused: {reason}"),
            )
        }
        Settlement::NotExecuted { reason } if held == (Held::Execute { resend: true }) => (
            IntentStatus::Unknown,
            None,
            None,
            format!(
                "re-send not executed ({reason}); the first attempt's outcome is still unknown"
            ),
        ),
        Settlement::NotExecuted { reason } => (
            IntentStatus::NotExecuted,
            None,
            None,
            format!("not executed: {reason}"),
        ),
        Settlement::Unknown {
            reason,
            resend_stop: None,
        } => (
            IntentStatus::Unknown,
            None,
            None,
            format!("the caller's outcome is unknown: {reason}"),
        ),
        // Worded as the call path words an answer it saw itself; the stop first, so
        // that cutting a long reason to the event log's limit keeps it.
        Settlement::Unknown {
            reason,
            resend_stop: Some(stop),
        } => (
            IntentStatus::Unknown,
            None,
            None,
            format!(
                "the caller's outcome is unknown; same-key re-sends stopped for good: {}; \
                 the caller said: {reason}",
                stop.describe()
            ),
        ),
        Settlement::NotFound => (
            IntentStatus::Unknown,
            None,
            None,
            "the caller's lookup found nothing".to_owned(),
        ),
    };
    Recorded {
        status,
        result,
        external_id,
        detail,
    }
}

/// The grant `token` holds a live lease of on `intent` at `now_ms`, if any.
fn held(intent: &IntentRecord, token: &LeaseToken, now_ms: i64) -> Option<Held> {
    if !intent.lease_live(now_ms) {
        return None;
    }
    let owner = intent.lease_owner.as_deref()?;
    // Hashed once; a re-send grant's owner is the only other one the token can hold.
    let plain = token.owner(false);
    match intent.status {
        IntentStatus::InFlight if owner == plain => Some(Held::Execute { resend: false }),
        IntentStatus::InFlight if owner == token.owner(true) => {
            Some(Held::Execute { resend: true })
        }
        IntentStatus::Unknown if owner == plain => Some(Held::LookUp),
        _ => None,
    }
}

/// Refuses an outcome that does not answer the grant (the contract's table).
fn check_allowed(held: Held, settlement: &Settlement) -> Result<(), SettleError> {
    let hint = match (held, settlement) {
        (Held::LookUp, Settlement::NotExecuted { .. }) => {
            "a lookup never executes; settle what it found: done, rejected, not_found or unknown"
        }
        (Held::Execute { .. }, Settlement::NotFound) => {
            "not_found answers a lookup; settle what the execution did: done, rejected, not_executed or unknown"
        }
        (
            Held::LookUp,
            Settlement::Unknown {
                resend_stop: Some(_),
                ..
            },
        ) => {
            "a lookup sends nothing under the provider key, so its answer can't stop re-sends; settle unknown without resend_stop"
        }
        _ => return Ok(()),
    };
    Err(SettleError::NotAllowed {
        outcome: settlement.name(),
        grant: held.name(),
        hint,
    })
}

/// Refuses values over the ledger's limits, before anything is written.
fn check_bounds(settlement: &Settlement) -> Result<(), SettleError> {
    let over = |field, length: usize, limit| {
        if length > limit {
            Err(SettleError::TooLarge {
                field,
                length,
                limit,
            })
        } else {
            Ok(())
        }
    };
    match settlement {
        Settlement::Done {
            result,
            external_id,
        } => {
            if let Some(result) = result {
                over("result", result.to_string().len(), RESULT_BYTES_MAX)?;
            }
            if let Some(id) = external_id {
                over("external_id", id.len(), EXTERNAL_ID_LENGTH_MAX)?;
            }
        }
        Settlement::Rejected { reason, result } => {
            over("reason", reason.len(), EVENT_DETAIL_LENGTH_MAX)?;
            if let Some(result) = result {
                over("result", result.to_string().len(), RESULT_BYTES_MAX)?;
            }
        }
        Settlement::NotExecuted { reason } | Settlement::Unknown { reason, .. } => {
            over("reason", reason.len(), EVENT_DETAIL_LENGTH_MAX)?;
        }
        Settlement::NotFound => {}
    }
    Ok(())
}

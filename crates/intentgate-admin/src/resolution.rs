//! The rules of resolving an intent by hand, shared by the admin API and
//! `intentgate intents resolve`: what an operator may ask for, and which intents may be
//! resolved. The ledger checks the transition again inside its transaction; these checks
//! come first so that the operator reads why, and what to do instead.
//!
//! Reopening (`intentgate intents reopen`, `POST /v1/admin/intents/{id}/reopen`) is the other
//! manual change: a `rejected` intent whose refusal was stored wrongly (the gateway's own
//! error, such as a wrong API key answered 401 before such errors were told apart) becomes
//! `not_executed`, so that the next call executes it ([`ManualReopen`], [`check_reopenable`]).

use intentgate_core::IntentStatus;
use intentgate_core::limits::{ACTOR_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX, EXTERNAL_ID_LENGTH_MAX};
use intentgate_gate::LeaseHolder;
use intentgate_ledger::{IntentId, IntentRecord, LedgerError, Resolve};

/// The statuses an operator may set: the effect happened (`done`, with the provider's id
/// for it) or certainly did not (`not_executed`). A refusal (`rejected`) is the provider's
/// to give, not an operator's.
pub const MANUAL_STATUSES: [IntentStatus; 2] = [IntentStatus::Done, IntentStatus::NotExecuted];

/// A resolution as an operator asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualResolution {
    pub status: IntentStatus,
    /// The provider's id for the effect; required for `done`, refused otherwise.
    pub external_id: Option<String>,
    /// Why: written to the event log with the actor.
    pub reason: String,
    /// Who: a person or a system.
    pub actor: String,
}

impl ManualResolution {
    /// Checks what is asked, before anything is read: a manual status, an external id
    /// exactly for `done`, a reason, an actor, and every text within the ledger's limits.
    /// The message says what to change.
    pub fn check(&self) -> Result<(), String> {
        if !MANUAL_STATUSES.contains(&self.status) {
            return Err(format!(
                "an intent can be resolved by hand only as done or not_executed, not {}",
                self.status
            ));
        }
        match (self.status, self.external_id.as_deref().map(str::trim)) {
            (IntentStatus::Done, None | Some("")) => {
                return Err(
                    "resolving an intent as done needs the provider's external id for the \
effect (the refund's or charge's id), so that repeats of the call can return it"
                        .to_owned(),
                );
            }
            (IntentStatus::NotExecuted, Some(_)) => {
                return Err(
                    "a not_executed intent has no external id: leave it out, or resolve as \
done if the provider did perform the effect"
                        .to_owned(),
                );
            }
            _ => {}
        }
        if let Some(external_id) = &self.external_id {
            check_length("the external id", external_id, EXTERNAL_ID_LENGTH_MAX)?;
        }
        if self.reason.trim().is_empty() {
            return Err(
                "a reason is required: say why (what the provider's dashboard or the customer \
showed); it goes to the intent's event log"
                    .to_owned(),
            );
        }
        check_length("the reason", &self.reason, EVENT_DETAIL_LENGTH_MAX)?;
        if self.actor.trim().is_empty() {
            return Err("the actor (who resolves the intent) must not be empty".to_owned());
        }
        check_length("the actor", &self.actor, ACTOR_LENGTH_MAX)?;
        Ok(())
    }

    /// The ledger's operation for intent `id` at `now_ms`.
    pub fn to_resolve(&self, id: IntentId, now_ms: i64) -> Resolve {
        Resolve {
            id,
            status: self.status,
            external_id: self.external_id.as_deref().map(|id| id.trim().to_owned()),
            result: None,
            actor: self.actor.trim().to_owned(),
            reason: self.reason.trim().to_owned(),
            now_ms,
        }
    }
}

fn check_length(what: &str, text: &str, limit: usize) -> Result<(), String> {
    if text.len() > limit {
        return Err(format!(
            "{what} is {} bytes long; the limit is {limit}",
            text.len()
        ));
    }
    Ok(())
}

/// A reopening as an operator asks for it: who, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualReopen {
    /// Why the stored refusal was wrong: written to the event log with the actor.
    pub reason: String,
    /// Who: a person or a system.
    pub actor: String,
}

impl ManualReopen {
    /// Checks what is asked, before anything is read: a reason and an actor, within the
    /// ledger's limits.
    pub fn check(&self) -> Result<(), String> {
        if self.reason.trim().is_empty() {
            return Err(
                "a reason is required: say why the stored refusal was wrong (the gateway's \
misconfiguration that caused it, and that it is fixed); it goes to the intent's event log"
                    .to_owned(),
            );
        }
        check_length("the reason", &self.reason, EVENT_DETAIL_LENGTH_MAX)?;
        if self.actor.trim().is_empty() {
            return Err("the actor (who reopens the intent) must not be empty".to_owned());
        }
        check_length("the actor", &self.actor, ACTOR_LENGTH_MAX)
    }

    /// The ledger's operation for intent `id` at `now_ms`: `rejected` to `not_executed`,
    /// which the ledger records as a reopening (a new provider-key epoch, the refusal dropped).
    pub fn to_resolve(&self, id: IntentId, now_ms: i64) -> Resolve {
        Resolve {
            id,
            status: IntentStatus::NotExecuted,
            external_id: None,
            result: None,
            actor: self.actor.trim().to_owned(),
            reason: self.reason.trim().to_owned(),
            now_ms,
        }
    }
}

/// Why an intent can't be reopened: only a `rejected` one can, and the message says what to
/// do with the others.
pub fn check_reopenable(intent: &IntentRecord) -> Result<(), String> {
    let id = intent.id;
    match intent.status {
        IntentStatus::Rejected => Ok(()),
        IntentStatus::NotExecuted => Err(format!(
            "intent {id} is already not_executed: the next call of the tool executes it; \
nothing to reopen"
        )),
        IntentStatus::Unknown | IntentStatus::InFlight => Err(format!(
            "intent {id} is {}: its outcome is not known, so it can't be reopened (it may have \
happened); check the provider, then resolve it with `intentgate intents resolve`",
            intent.status
        )),
        IntentStatus::Done => Err(format!(
            "intent {id} is done{}: the effect happened, so it can't be reopened",
            intent
                .external_id
                .as_deref()
                .map(|external_id| format!(" (external id {external_id})"))
                .unwrap_or_default()
        )),
        IntentStatus::Pending => Err(format!(
            "intent {id} is pending: no attempt has started, so there is nothing to reopen"
        )),
    }
}

/// Why an intent can't be resolved by hand now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolvable {
    /// A caller or the sweeper holds the intent's lease: it is being executed, re-sent or
    /// looked up right now, and resolving it by hand would race what that step learns.
    LeaseHeld {
        status: IntentStatus,
        /// The lease owner id, read with [`LeaseHolder::of`].
        owner: String,
        /// When the lease ends at the latest (milliseconds since the Unix epoch).
        expires_ms: i64,
        remaining_ms: i64,
    },
    /// The state machine has no edge from the intent's status to the one asked for.
    Settled {
        status: IntentStatus,
        external_id: Option<String>,
    },
}

impl Unresolvable {
    /// The intent's current status.
    pub fn status(&self) -> IntentStatus {
        match self {
            Unresolvable::LeaseHeld { status, .. } | Unresolvable::Settled { status, .. } => {
                *status
            }
        }
    }

    /// What is wrong and what can be done instead, about intent `id`.
    pub fn message(&self, id: IntentId) -> String {
        match self {
            Unresolvable::LeaseHeld {
                status,
                owner,
                expires_ms,
                remaining_ms,
            } => {
                let holder = LeaseHolder::of(owner);
                let doing = match (holder, status) {
                    (LeaseHolder::Sweeper, IntentStatus::InFlight) => {
                        "re-sending it with its provider key"
                    }
                    (LeaseHolder::Sweeper, _) => "looking it up at the provider",
                    (_, IntentStatus::InFlight) => "executing it",
                    _ => "looking it up at the provider",
                };
                format!(
                    "intent {id} is {status} and {} holds its lease until {} (another {} s): \
it is {doing} right now, and a resolution by hand would race what that step learns. Try \
again after {}: the intent may be settled by then; if it is still unknown, resolve it then",
                    holder.describe(),
                    utc(*expires_ms),
                    (remaining_ms + 999) / 1000,
                    utc(*expires_ms),
                )
            }
            Unresolvable::Settled {
                status: IntentStatus::Done,
                external_id,
            } => format!(
                "intent {id} is already done{}; a done intent can't be changed",
                external_id
                    .as_deref()
                    .map(|external_id| format!(" (external id {external_id})"))
                    .unwrap_or_default()
            ),
            Unresolvable::Settled {
                status: IntentStatus::Pending,
                ..
            } => format!(
                "intent {id} is pending: no attempt has started, so there is nothing to resolve"
            ),
            Unresolvable::Settled {
                status: IntentStatus::Rejected,
                ..
            } => format!(
                "intent {id} is rejected: the provider refused it and nothing happened; if that \
refusal was the gateway's own error (a wrong API key, a wrong route), reopen it with \
`intentgate intents reopen` (or POST /v1/admin/intents/{id}/reopen) and the next call executes \
it"
            ),
            Unresolvable::Settled { status, .. } => format!(
                "intent {id} is already {status}, which is settled (nothing happened at the \
provider; a later call of the tool may start a new attempt); only an unknown intent, or an \
in_flight one whose lease has expired, can be resolved by hand"
            ),
        }
    }
}

/// Whether `intent` may be resolved by hand to `to` at `now_ms`: only from `unknown`, or
/// from `in_flight` once its lease has expired, and never while a caller holds the lease. (A
/// `rejected` intent is reopened instead, [`check_reopenable`]: the state machine's edge to
/// `not_executed` is not a resolution.)
pub fn check_resolvable(
    intent: &IntentRecord,
    to: IntentStatus,
    now_ms: i64,
) -> Result<(), Unresolvable> {
    let resolvable = matches!(
        intent.status,
        IntentStatus::Unknown | IntentStatus::InFlight
    );
    if !resolvable || !intent.status.can_become(to) {
        return Err(Unresolvable::Settled {
            status: intent.status,
            external_id: intent.external_id.clone(),
        });
    }
    if intent.lease_live(now_ms) {
        let expires_ms = intent.lease_expires_ms.unwrap_or(now_ms);
        return Err(Unresolvable::LeaseHeld {
            status: intent.status,
            owner: intent.lease_owner.clone().unwrap_or_default(),
            expires_ms,
            remaining_ms: expires_ms - now_ms,
        });
    }
    Ok(())
}

impl Unresolvable {
    /// The refusal of a resolution the ledger turned down inside its transaction
    /// ([`LedgerError::LeaseHeld`]): a lease taken after the check above read the intent.
    pub fn from_ledger(error: &LedgerError, status: IntentStatus, now_ms: i64) -> Option<Self> {
        match error {
            LedgerError::LeaseHeld {
                owner, expires_ms, ..
            } => Some(Unresolvable::LeaseHeld {
                status,
                owner: owner.clone(),
                expires_ms: *expires_ms,
                remaining_ms: expires_ms - now_ms,
            }),
            _ => None,
        }
    }

    /// When trying again may succeed: the end of the lease that refused it, in whole
    /// seconds from `now_ms` (at least one); `None` for a settled intent, which no wait helps.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            Unresolvable::LeaseHeld { remaining_ms, .. } => Some(
                u64::try_from((remaining_ms + 999) / 1000)
                    .unwrap_or(0)
                    .max(1),
            ),
            Unresolvable::Settled { .. } => None,
        }
    }
}

/// Milliseconds since the Unix epoch in UTC, to the second (`2026-05-01T09:30:00Z`), as the
/// API's messages write times.
pub fn utc(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(time) => time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => format!("{ms} ms since the Unix epoch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(status: IntentStatus, external_id: Option<&str>) -> ManualResolution {
        ManualResolution {
            status,
            external_id: external_id.map(str::to_owned),
            reason: "the provider's dashboard shows it".to_owned(),
            actor: "alice".to_owned(),
        }
    }

    #[test]
    fn done_needs_an_external_id_and_not_executed_refuses_one() {
        assert!(asked(IntentStatus::Done, Some("re_1")).check().is_ok());
        assert!(asked(IntentStatus::NotExecuted, None).check().is_ok());
        assert!(
            asked(IntentStatus::Done, None)
                .check()
                .unwrap_err()
                .contains("external id")
        );
        assert!(
            asked(IntentStatus::Done, Some(" "))
                .check()
                .unwrap_err()
                .contains("external id")
        );
        assert!(
            asked(IntentStatus::NotExecuted, Some("re_1"))
                .check()
                .is_err()
        );
    }

    fn intent(status: IntentStatus) -> IntentRecord {
        IntentRecord {
            id: 7,
            tenant: "default".into(),
            tool: "refund_order".into(),
            key: "refund:1:49.00".into(),
            fingerprint: String::new(),
            arguments: serde_json::Value::Null,
            status,
            attempt: 1,
            epoch: 1,
            lease_owner: None,
            lease_expires_ms: None,
            result: None,
            external_id: None,
            resolved_by: None,
            call_count: 1,
            first_seen_ms: 0,
            last_seen_ms: 0,
            updated_ms: 0,
            last_lookup_ms: None,
            resend_stopped: None,
        }
    }

    #[test]
    fn only_a_rejected_intent_is_reopened_and_a_rejected_one_is_not_resolved() {
        assert_eq!(check_reopenable(&intent(IntentStatus::Rejected)), Ok(()));
        for (status, says) in [
            (IntentStatus::Done, "effect happened"),
            (IntentStatus::NotExecuted, "next call"),
            (IntentStatus::Unknown, "intents resolve"),
            (IntentStatus::InFlight, "intents resolve"),
            (IntentStatus::Pending, "nothing to reopen"),
        ] {
            let refused = check_reopenable(&intent(status)).unwrap_err();
            assert!(refused.contains(says), "{status}: {refused}");
        }
        let refused = check_resolvable(
            &intent(IntentStatus::Rejected),
            IntentStatus::NotExecuted,
            0,
        )
        .unwrap_err();
        assert!(refused.message(7).contains("intents reopen"), "{refused:?}");
        let asked = ManualReopen {
            reason: " the 401 was our key ".into(),
            actor: "alice".into(),
        };
        assert!(asked.check().is_ok());
        let resolve = asked.to_resolve(7, 5);
        assert_eq!(
            (resolve.status, resolve.reason.as_str()),
            (IntentStatus::NotExecuted, "the 401 was our key")
        );
        let no_reason = ManualReopen {
            reason: " ".into(),
            ..asked
        };
        assert!(
            no_reason
                .check()
                .unwrap_err()
                .contains("reason is required")
        );
    }

    #[test]
    fn only_done_and_not_executed_with_a_reason_within_the_limits_are_accepted() {
        for status in [
            IntentStatus::Rejected,
            IntentStatus::Unknown,
            IntentStatus::InFlight,
            IntentStatus::Pending,
        ] {
            assert!(
                asked(status, None)
                    .check()
                    .unwrap_err()
                    .contains("only as done")
            );
        }
        let mut no_reason = asked(IntentStatus::NotExecuted, None);
        no_reason.reason = "  ".to_owned();
        assert!(
            no_reason
                .check()
                .unwrap_err()
                .contains("reason is required")
        );
        let mut long = asked(IntentStatus::NotExecuted, None);
        long.reason = "x".repeat(EVENT_DETAIL_LENGTH_MAX + 1);
        assert!(long.check().unwrap_err().contains("the limit is"));
        let mut long_actor = asked(IntentStatus::NotExecuted, None);
        long_actor.actor = "a".repeat(ACTOR_LENGTH_MAX + 1);
        assert!(long_actor.check().unwrap_err().contains("the actor"));
    }
}

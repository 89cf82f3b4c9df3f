//! The rules of resolving an intent by hand, shared by the admin API and
//! `intentgate intents resolve`: what an operator may ask for, and which intents may be
//! resolved. The ledger checks the transition again inside its transaction; these checks
//! come first so that the operator reads why, and what to do instead.

use intentgate_core::IntentStatus;
use intentgate_core::limits::{ACTOR_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX, EXTERNAL_ID_LENGTH_MAX};
use intentgate_ledger::{IntentId, IntentRecord, Resolve};

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

/// Why an intent can't be resolved by hand now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolvable {
    /// A caller holds the intent's lease: it is being executed or looked up right now.
    LeaseHeld {
        status: IntentStatus,
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
                remaining_ms,
            } => format!(
                "intent {id} is {status} and a call holds its lease for another {} s (it is \
being executed or looked up right now); wait for it to finish, then resolve it if it is \
still unknown",
                (remaining_ms + 999) / 1000
            ),
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
            Unresolvable::Settled { status, .. } => format!(
                "intent {id} is already {status}, which is settled (nothing happened at the \
provider; a later call of the tool may start a new attempt); only an unknown intent, or an \
in_flight one whose lease has expired, can be resolved by hand"
            ),
        }
    }
}

/// Whether `intent` may be resolved by hand to `to` at `now_ms`: only from `unknown`, or
/// from `in_flight` once its lease has expired, and never while a caller holds the lease.
pub fn check_resolvable(
    intent: &IntentRecord,
    to: IntentStatus,
    now_ms: i64,
) -> Result<(), Unresolvable> {
    if !intent.status.can_become(to) {
        return Err(Unresolvable::Settled {
            status: intent.status,
            external_id: intent.external_id.clone(),
        });
    }
    if intent.lease_live(now_ms) {
        return Err(Unresolvable::LeaseHeld {
            status: intent.status,
            remaining_ms: intent.lease_expires_ms.unwrap_or(now_ms) - now_ms,
        });
    }
    Ok(())
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

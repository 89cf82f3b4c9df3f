//! The intent state machine.
//!
//! An intent is one business action ("refund 49.00 for order 8812"). Its status moves only
//! along the edges below; every store checks each transition with
//! [`IntentStatus::transition`] before writing it, and an impossible one is a bug.
//!
//! ```text
//!   pending ──▶ in_flight ──▶ done
//!   (held)  └─(denied)─▶ rejected   └─(deadline passed)─▶ not_executed ──(asked again)──▶ pending
//!                 │  ▲  ├───▶ rejected ──(retry_rejected: a new attempt)──▶ in_flight
//!                 │  │  │        └──(an operator reopens it)──▶ not_executed
//!                 │  │  ├───▶ not_executed ──(a later call)──▶ in_flight
//!                 ▼  │  └───▶ unknown ──(lookup, sweeper, reconciliation, operator)──▶ done
//!              unknown ─(same-key re-send, inside the provider's key window)─┘      not_executed
//! ```
//!
//! `unknown` may also become `rejected` or `not_executed` when the attempt that left it
//! unknown later learns its own definite outcome. `rejected` becomes `not_executed` only by
//! an operator's reopening (`intentgate intents reopen`): a refusal that was stored wrongly (a
//! wrong API key answered 401 before the gateway knew such errors are its own) is then executed
//! by the next call, since a rejected attempt is known to have done nothing.
//!
//! `pending` is where an intent held for a person's approval waits (docs/design.md section
//! 13): approved, it starts its first attempt; denied, it is `rejected` with the approver's
//! reason; unanswered by its deadline, `not_executed`. Asked for again after that, it is held
//! again (`not_executed -> pending`) with a new request for approval.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where an intent stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentStatus {
    /// Recorded; no attempt has started. A held intent waits here for an approver.
    Pending,
    /// An attempt holds the lease and may be talking to the upstream right now. Written
    /// durably before the request leaves. Once the lease has expired it means `unknown`.
    InFlight,
    /// The effect happened; the result is stored and replayed to every repeat.
    Done,
    /// The provider refused; nothing happened. Replayed to repeats.
    Rejected,
    /// Certainly not done (rate limited or unreachable, retries spent); a later call may try.
    NotExecuted,
    /// May have happened. Never executed again blindly: resolved by a lookup, the sweeper,
    /// reconciliation or an operator.
    Unknown,
}

/// A transition that the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal intent transition {from} -> {to}")]
pub struct IllegalTransition {
    pub from: IntentStatus,
    pub to: IntentStatus,
}

impl IntentStatus {
    pub const ALL: [IntentStatus; 6] = [
        IntentStatus::Pending,
        IntentStatus::InFlight,
        IntentStatus::Done,
        IntentStatus::Rejected,
        IntentStatus::NotExecuted,
        IntentStatus::Unknown,
    ];

    /// True when the state machine has an edge `self -> to`.
    pub fn can_become(self, to: IntentStatus) -> bool {
        use IntentStatus::*;
        matches!(
            (self, to),
            (Pending, InFlight | Rejected | NotExecuted)
                | (NotExecuted, Pending)
                | (InFlight, Done | Rejected | NotExecuted | Unknown)
                | (Unknown, Done | Rejected | NotExecuted | InFlight)
                | (NotExecuted, InFlight)
                | (Rejected, InFlight | NotExecuted)
        )
    }

    /// Checks a transition; stores call this before every status write.
    pub fn transition(self, to: IntentStatus) -> Result<IntentStatus, IllegalTransition> {
        if self.can_become(to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }

    /// Settled statuses need no further work from the gateway. `rejected` and
    /// `not_executed` may still start a new attempt when a later call allows it.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            IntentStatus::Done | IntentStatus::Rejected | IntentStatus::NotExecuted
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IntentStatus::Pending => "pending",
            IntentStatus::InFlight => "in_flight",
            IntentStatus::Done => "done",
            IntentStatus::Rejected => "rejected",
            IntentStatus::NotExecuted => "not_executed",
            IntentStatus::Unknown => "unknown",
        }
    }
}

impl fmt::Display for IntentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IntentStatus {
    type Err = String;

    fn from_str(text: &str) -> Result<IntentStatus, String> {
        IntentStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| format!("`{text}` is not an intent status"))
    }
}

#[cfg(test)]
mod tests {
    use super::IntentStatus::{self, *};

    const LEGAL: &[(IntentStatus, IntentStatus)] = &[
        (Pending, InFlight),
        (Pending, Rejected),
        (Pending, NotExecuted),
        (NotExecuted, Pending),
        (InFlight, Done),
        (InFlight, Rejected),
        (InFlight, NotExecuted),
        (InFlight, Unknown),
        (Unknown, Done),
        (Unknown, Rejected),
        (Unknown, NotExecuted),
        (Unknown, InFlight),
        (NotExecuted, InFlight),
        (Rejected, InFlight),
        (Rejected, NotExecuted),
    ];

    #[test]
    fn every_legal_transition_is_allowed_and_every_other_refused() {
        for from in IntentStatus::ALL {
            for to in IntentStatus::ALL {
                let legal = LEGAL.contains(&(from, to));
                assert_eq!(from.transition(to).is_ok(), legal, "{from} -> {to}");
                if !legal {
                    let error = from.transition(to).unwrap_err();
                    assert_eq!(
                        error.to_string(),
                        format!("illegal intent transition {from} -> {to}")
                    );
                }
            }
        }
    }

    #[test]
    fn done_is_final() {
        assert!(IntentStatus::ALL.iter().all(|to| !Done.can_become(*to)));
    }

    #[test]
    fn statuses_round_trip_through_text() {
        for status in IntentStatus::ALL {
            assert_eq!(status.as_str().parse::<IntentStatus>().unwrap(), status);
        }
        assert!("finished".parse::<IntentStatus>().is_err());
    }
}

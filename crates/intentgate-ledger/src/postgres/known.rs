//! The intents this ledger has just begun, as it wrote them, with the version of the row it
//! left: what lets their `finish` skip the read.
//!
//! A `finish` decides from the intent as it stands. Read and locked, that costs a round trip
//! before the one that writes. But the caller finishing an intent it just began usually
//! finds it exactly as `begin` left it, and this ledger knows how that was: the row it
//! inserted, and the row's version (`xmin`, the transaction that wrote it, which every
//! later change replaces). So `finish` decides from that record and sends its writes
//! guarded by the version: the update applies only to the row still as it was, and its
//! events only with it, in one statement. A row changed meanwhile (a repeat counted, a
//! lease taken over, the intent erased) refuses the guard; `finish` then reads, locks and
//! decides as before. What is known here is a hint and never an answer: the guard alone
//! decides whether it is still true.
//!
//! Bounded: the oldest entries go first, so intents whose `finish` never comes (a caller
//! that died) cost nothing but their slot.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::{IntentId, IntentRecord};

/// Most intents remembered. A finish usually follows its begin within one upstream call, so
/// this covers thousands of calls in flight at once.
pub const KNOWN_MAX: usize = 8_192;

/// An intent as this ledger last wrote it, and the version of its row then.
#[derive(Debug, Clone)]
pub struct Known {
    pub intent: IntentRecord,
    /// The row's `xmin` (as a number) after that write.
    pub version: i64,
}

/// The remembered intents, oldest first.
#[derive(Default)]
pub struct KnownIntents {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each entry with the number it was remembered under.
    by_id: HashMap<IntentId, (Known, u64)>,
    /// Ids and their numbers in the order remembered. An entry taken stays here until it
    /// comes out; one remembered anew comes out under its new number only.
    order: VecDeque<(IntentId, u64)>,
    next: u64,
}

impl KnownIntents {
    /// Remembers `intent` as written, its row at `version`.
    pub fn remember(&self, intent: IntentRecord, version: i64) {
        let mut state = self.state.lock().expect("known intents lock");
        let id = intent.id;
        while state.by_id.len() >= KNOWN_MAX || state.order.len() >= 2 * KNOWN_MAX {
            let Some((oldest, number)) = state.order.pop_front() else {
                break;
            };
            if state
                .by_id
                .get(&oldest)
                .is_some_and(|entry| entry.1 == number)
            {
                state.by_id.remove(&oldest);
            }
        }
        let number = state.next;
        state.next += 1;
        state.by_id.insert(id, (Known { intent, version }, number));
        state.order.push_back((id, number));
    }

    /// Takes what is known of intent `id`: the next write changes its row, so it is not
    /// known any more either way.
    pub fn take(&self, id: IntentId) -> Option<Known> {
        self.state
            .lock()
            .expect("known intents lock")
            .by_id
            .remove(&id)
            .map(|(known, _)| known)
    }

    /// How many intents are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.state.lock().expect("known intents lock").by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(id: IntentId) -> IntentRecord {
        IntentRecord {
            id,
            tenant: "acme".into(),
            tool: "refund".into(),
            key: format!("k{id}"),
            fingerprint: "f".repeat(64),
            arguments: serde_json::json!({}),
            status: intentgate_core::IntentStatus::InFlight,
            attempt: 1,
            epoch: 1,
            lease_owner: Some("me".into()),
            lease_expires_ms: Some(10),
            result: None,
            external_id: None,
            resolved_by: None,
            call_count: 1,
            first_seen_ms: 1,
            last_seen_ms: 1,
            updated_ms: 1,
            last_lookup_ms: None,
            resend_stopped: None,
        }
    }

    #[test]
    fn an_intent_is_taken_once() {
        let known = KnownIntents::default();
        known.remember(intent(7), 42);
        let taken = known.take(7).expect("remembered");
        assert_eq!((taken.intent.id, taken.version), (7, 42));
        assert!(known.take(7).is_none());
    }

    #[test]
    fn the_oldest_go_first_beyond_the_bound() {
        let known = KnownIntents::default();
        for id in 1..=(KNOWN_MAX as i64 + 10) {
            known.remember(intent(id), id);
        }
        assert_eq!(known.len(), KNOWN_MAX);
        assert!(known.take(1).is_none());
        assert!(known.take(10).is_none());
        assert!(known.take(11).is_some());
        assert!(known.take(KNOWN_MAX as i64 + 10).is_some());
    }

    #[test]
    fn taking_and_remembering_again_keeps_the_bound() {
        let known = KnownIntents::default();
        for round in 0..(3 * KNOWN_MAX as i64) {
            known.remember(intent(round % 5), round);
            if round % 2 == 0 {
                known.take(round % 5);
            }
        }
        assert!(known.len() <= 5);
        assert!(known.state.lock().unwrap().order.len() <= 2 * KNOWN_MAX);
    }
}

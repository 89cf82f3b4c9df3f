//! When each intent's owner was last told about it: the memory behind the notices that come
//! at most once per intent per interval ([`crate::lookup_mismatches`], [`crate::key_reuses`]).
//!
//! **Bounded:** at most [`INTENTS_TRACKED_MAX`] intents are remembered; past it the half told
//! longest ago are forgotten in one pass (at worst, one is told again sooner).

use std::collections::HashMap;
use std::time::Duration;

/// Least time between two notices about one intent: the owner has been told and is looking;
/// the same finding an hour later is told again.
pub const NOTICE_EVERY: Duration = Duration::from_secs(60 * 60);
/// Intents whose last notice is remembered.
pub const INTENTS_TRACKED_MAX: usize = 10_000;

/// When each intent was last told, by intent id.
#[derive(Debug, Default)]
pub struct Told {
    at_ms: HashMap<i64, i64>,
}

impl Told {
    /// True, and remembered, when intent `intent_id` may be told at `at_ms`: it never was,
    /// or last was [`NOTICE_EVERY`] ago or more.
    pub fn may_tell(&mut self, intent_id: i64, at_ms: i64) -> bool {
        let every_ms = NOTICE_EVERY.as_millis() as i64;
        if let Some(told_ms) = self.at_ms.get(&intent_id)
            && at_ms.saturating_sub(*told_ms) < every_ms
        {
            return false;
        }
        if self.at_ms.len() >= INTENTS_TRACKED_MAX {
            let mut times: Vec<i64> = self.at_ms.values().copied().collect();
            times.sort_unstable();
            let cutoff = times[times.len() / 2];
            self.at_ms.retain(|_, told_ms| *told_ms > cutoff);
        }
        self.at_ms.insert(intent_id, at_ms);
        true
    }

    /// How many intents are remembered.
    pub fn len(&self) -> usize {
        self.at_ms.len()
    }

    /// True when no intent is remembered.
    pub fn is_empty(&self) -> bool {
        self.at_ms.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intent_is_told_once_per_interval() {
        let mut told = Told::default();
        let hour = NOTICE_EVERY.as_millis() as i64;
        assert!(told.may_tell(7, 0));
        assert!(!told.may_tell(7, hour - 1));
        assert!(told.may_tell(8, 1), "another intent is told at once");
        assert!(told.may_tell(7, hour));
    }

    #[test]
    fn the_memory_stays_bounded() {
        let mut told = Told::default();
        for id in 0..(INTENTS_TRACKED_MAX as i64 + 10) {
            assert!(told.may_tell(id, id));
        }
        assert!(told.len() <= INTENTS_TRACKED_MAX, "{}", told.len());
    }
}

//! The settings of a [`Gate`](crate::Gate) and the bounds of its call path, each with why it
//! is what it is.

use std::time::Duration;

use crate::resolution::Resolution;

/// Time a waiting caller gives the lease holder beyond the tool's timeout before it answers
/// from the ledger.
pub const WAIT_MARGIN: Duration = Duration::from_secs(1);
/// Time added to a lease beyond the attempt's worst case, so a slow but healthy holder is
/// not taken for a crashed one.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Least time a call's lease must have left for its outcome to be answered before the write
/// commits (the record phase, `Gate::record_queued`): far more than a commit takes, so the
/// lease still runs when it lands. A call that used up more of its lease waits for the commit.
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
    /// Least time between two lookups of one unknown intent by callers ([`LOOKUP_INTERVAL`]).
    pub lookup_interval: Duration,
    /// Longest `Retry-After` honoured ([`RETRY_AFTER_CAP`]); also the cap of each backoff.
    pub retry_after_cap: Duration,
    /// First pause of a bounded retry ([`BACKOFF_BASE`]), doubled per retry.
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

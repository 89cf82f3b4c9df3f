//! The settings and bounds of resolving `unknown` intents (docs/design.md section 5,
//! "Resolving unknown intents"): the re-send backoff ([`Resolution`]), the token bucket that
//! limits re-sends per tool ([`ResendBudget`]) and who drives a step ([`Driver`]). The steps
//! themselves are the `resolve` module's; what is here holds no gate, so the gate can hold it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// First pause between an unknown attempt and the next step (lookup, then re-send).
pub const RESEND_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Longest pause between two steps of one intent inside the provider's key window.
pub const RESEND_BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);
/// Most same-key re-sends one process starts per second for one tool, by default.
pub const RESENDS_PER_SECOND: u32 = 50;
/// The part of an unknown intent's age the sweeper waits between two of its lookups once
/// it can't be re-sent: one tenth, so an intent a minute old is asked about again within
/// seconds, one a day old about once an hour. Never less than the gate's lookup interval.
pub const SWEEP_LOOKUP_AGE_FRACTION: u32 = 10;
/// Longest wait between two sweeper lookups of one unknown intent that can't be re-sent.
/// Hourly reconciliation catches up with the provider's records anyway; an hour keeps an
/// intent that stays unknown (they are kept until resolved) to 24 lookups a day.
pub const SWEEP_LOOKUP_INTERVAL_MAX: Duration = Duration::from_secs(60 * 60);

/// How unknown intents are driven forward: the re-send backoff and its rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolution {
    /// Pause after an intent's first unknown attempt before its next step.
    pub backoff_initial: Duration,
    /// The pause doubles per attempt up to this.
    pub backoff_max: Duration,
    /// Most re-sends one process starts per second for one tool (a burst of as many is
    /// allowed). Zero turns re-sends off: unknown intents are only looked up.
    pub resends_per_second: u32,
}

impl Default for Resolution {
    fn default() -> Resolution {
        Resolution {
            backoff_initial: RESEND_BACKOFF_INITIAL,
            backoff_max: RESEND_BACKOFF_MAX,
            resends_per_second: RESENDS_PER_SECOND,
        }
    }
}

impl Resolution {
    /// The pause after attempt number `attempt` before the next step:
    /// `backoff_initial * 2^(attempt - 1)`, at most `backoff_max`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.backoff_initial
            .saturating_mul(1 << doublings)
            .min(self.backoff_max)
    }
}

/// Who drives a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// A repeat call, with the caller's own arguments.
    Caller,
    /// The sweeper, with the ledger's copy of the arguments (sensitive ones as hashes).
    Sweeper,
}

impl Driver {
    /// Who settles the intent when the step finds or confirms the effect.
    pub(crate) fn resolved_by(self) -> &'static str {
        match self {
            Driver::Caller => "lookup",
            Driver::Sweeper => "sweeper",
        }
    }
}

/// A token bucket of re-sends per tool: `rate` tokens a second, at most `rate` saved up.
/// Counted in thousandths of a token against the gate's clock, so a simulation replays it.
#[derive(Default)]
pub(crate) struct ResendBudget {
    /// One bucket per tool name, made full at its first use.
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// One tool's bucket.
struct Bucket {
    /// Tokens saved up, in thousandths: one re-send costs 1000.
    milli_tokens: u64,
    /// The clock milliseconds up to which tokens were added.
    refilled_ms: i64,
}

impl ResendBudget {
    /// Takes one re-send of `tool` at `now_ms`; false when the bucket is empty.
    pub(crate) fn take(&self, tool: &str, rate: u32, now_ms: i64) -> bool {
        self.with_bucket(tool, rate, now_ms, true)
    }

    /// True when [`ResendBudget::take`] would succeed now; takes nothing.
    pub(crate) fn available(&self, tool: &str, rate: u32, now_ms: i64) -> bool {
        self.with_bucket(tool, rate, now_ms, false)
    }

    fn with_bucket(&self, tool: &str, rate: u32, now_ms: i64, take: bool) -> bool {
        if rate == 0 {
            return false;
        }
        let full = u64::from(rate) * 1000;
        let mut buckets = self.buckets.lock().expect("resend budget lock");
        let bucket = buckets.entry(tool.to_owned()).or_insert(Bucket {
            milli_tokens: full,
            refilled_ms: now_ms,
        });
        let elapsed_ms = u64::try_from(now_ms.saturating_sub(bucket.refilled_ms)).unwrap_or(0);
        bucket.milli_tokens = bucket
            .milli_tokens
            .saturating_add(elapsed_ms.saturating_mul(u64::from(rate)))
            .min(full);
        bucket.refilled_ms = bucket.refilled_ms.max(now_ms);
        if bucket.milli_tokens < 1000 {
            return false;
        }
        if take {
            bucket.milli_tokens -= 1000;
        }
        true
    }
}

/// A duration as the ledger's milliseconds.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

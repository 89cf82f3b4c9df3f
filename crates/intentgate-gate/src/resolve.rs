//! Driving an `unknown` intent to a definite answer (docs/design.md section 5, "Resolving unknown
//! intents").
//!
//! An intent is `unknown` when an attempt ended without a definite answer (a timeout, a
//! dropped connection, a 5xx) and the lookup after it did not find the effect. Safety alone
//! would leave it there; liveness asks that it reach `done`, `rejected` or `not_executed`
//! once the provider is healthy, without an operator. Two drivers move it forward, through
//! the one routine here, [`Gate::advance_unknown`]: the sweeper of every gateway process,
//! and any repeat call of the intent (the user asking "did it go through?").
//!
//! **One step** runs under the intent's lease, so one driver at a time, across processes:
//!
//! 1. look it up: found means `done`;
//! 2. not found, and the tool's upstream honours idempotency keys and the whole attempt fits
//!    inside its key window less a margin ([`ToolDefinition::within_resend_window`]): send
//!    the same request again with the same provider key, through the gate's execute path.
//!    If an earlier attempt committed, the provider replays its answer; if none did, this is
//!    the one effect. A re-send that ends ambiguous is looked up at once, like any attempt.
//!
//! Past the window, or without key support, a step is a lookup only; the intent waits for
//! reconciliation or a person, and the alerts tell its owner. So is every step of an intent
//! whose re-sends stopped for good ([`IntentRecord::resend_stopped`]): an attempt got an
//! answer the provider gives every request with that key (a stored 5xx replayed, a 5xx it
//! said not to retry, a key first used with other parameters), so a re-send would only
//! fetch it again. Its steps follow the lookup schedule below from then on.
//!
//! **The schedule.** Each step is due a pause after the intent's last lookup (every attempt
//! ends with one, and so does every step). Inside the window the pause is the re-send
//! backoff of the intent's attempt count: [`Resolution::backoff_initial`] after the first
//! attempt, doubling per attempt up to [`Resolution::backoff_max`]. Outside it the pause is
//! the gate's lookup interval for a caller, and for the sweeper a tenth of the intent's age
//! (between the lookup interval and [`SWEEP_LOOKUP_INTERVAL_MAX`]), so an intent that stays
//! unknown for days is asked about about once an hour. A step that is not due answers from
//! the ledger at once: a storm of repeats is never a storm of provider requests.
//!
//! **Bounds.** At most one attempt per intent is in flight (the lease). Re-sends are limited
//! per tool and per process by a token bucket ([`Resolution::resends_per_second`]). The
//! sweeper does not start a step that would re-send while the bucket is empty (its lookup
//! would be wasted); a caller's step whose re-send finds the bucket empty stays a lookup and
//! the re-send waits for the next step. A `done` or `rejected` intent is never sent again, and a `not_executed` one is only
//! started again by a new call, never by a step.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use intentgate_core::{CallStatus, IntentStatus, ToolDefinition};
use intentgate_ledger::{Begin, BeginRequest, IntentRecord};
use serde_json::Value;

use crate::gate::{Attempt, Gate, GateError, Looked};
use crate::outcome::CallOutcome;

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

/// The event log's reason when a driver gives back an attempt `begin` started on a
/// not-executed intent it did not ask to start.
pub(crate) const UNASKED_ATTEMPT: &str =
    "the sweeper starts no attempt of a not-executed intent; nothing was sent";
/// The event log's reason when a driver gives back a lookup lease without looking up.
pub(crate) const UNUSED_LOOKUP_LEASE: &str = "lookup lease released unused";

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
    fn resolved_by(self) -> &'static str {
        match self {
            Driver::Caller => "lookup",
            Driver::Sweeper => "sweeper",
        }
    }
}

/// What one step needs besides the intent: what to send, and the `begin` that took the
/// lookup lease (the re-send asks again with it).
pub(crate) struct StepRequest<'a> {
    pub arguments: &'a Value,
    /// The application's intent id, for a tool whose key uses one.
    pub intent_id: Option<&'a str>,
    pub owner: &'a str,
    pub driver: Driver,
    pub begin: &'a BeginRequest,
}

/// What one step did.
#[derive(Debug)]
pub(crate) struct Step {
    /// The answer, from the ledger as the step left it.
    pub outcome: CallOutcome,
    /// What the lookup found.
    pub looked: Looked,
    pub resend: Resend,
}

/// Whether a step re-sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Not needed (found, or the lookup failed) or not allowed (past the window, no key
    /// support, sensitive arguments held as hashes, switched off).
    NotTried,
    /// The tool's re-send budget for this second is spent; the next step tries again.
    Deferred,
    /// Another driver moved the intent between the lookup and the re-send.
    Raced,
    /// The same request went out again with the same provider key.
    Sent,
}

/// A token bucket of re-sends per tool: `rate` tokens a second, at most `rate` saved up.
/// Counted in thousandths of a token against the gate's clock, so a simulation replays it.
#[derive(Default)]
pub(crate) struct ResendBudget {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    milli_tokens: u64,
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

impl Gate {
    /// True when `driver` could re-send `record` at `now_ms`, as far as the tool and the
    /// intent decide: never once its re-sends stopped (the provider answers its key the same
    /// way every time: [`IntentRecord::resend_stopped`]), else inside the key window for a
    /// whole attempt, and for the sweeper only without sensitive arguments (it holds their
    /// hashes, not their values).
    pub(crate) fn resend_possible(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        now_ms: i64,
        driver: Driver,
    ) -> bool {
        if record.resend_stopped.is_some() {
            return false;
        }
        let attempt = self.lease_duration(tool);
        let first_seen_ms = record.first_seen_ms;
        match driver {
            Driver::Caller => tool.within_resend_window(first_seen_ms, now_ms, attempt),
            Driver::Sweeper => tool.may_resend(first_seen_ms, now_ms, attempt),
        }
    }

    /// The least time between two steps of `record` for `driver` (see the module
    /// documentation): the re-send backoff inside the key window, else the lookup interval.
    pub(crate) fn step_interval_ms(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        now_ms: i64,
        driver: Driver,
    ) -> i64 {
        let resolution = &self.options.resolution;
        if resolution.resends_per_second > 0 && self.resend_possible(tool, record, now_ms, driver) {
            return millis(resolution.backoff(record.attempt));
        }
        let floor_ms = millis(self.options.lookup_interval);
        match driver {
            Driver::Caller => floor_ms,
            Driver::Sweeper => {
                let ceiling_ms = millis(SWEEP_LOOKUP_INTERVAL_MAX).max(floor_ms);
                let age_ms = now_ms.saturating_sub(record.first_seen_ms).max(0);
                (age_ms / i64::from(SWEEP_LOOKUP_AGE_FRACTION)).clamp(floor_ms, ceiling_ms)
            }
        }
    }

    /// One step of an `unknown` intent whose lookup lease `driver` holds: look it up, and
    /// when nothing is found and the tool allows it now, re-send it with its provider key.
    /// `Err` only when the ledger failed on the re-send's `begin` (nothing was re-sent).
    pub(crate) async fn advance_unknown(
        &self,
        tool: &ToolDefinition,
        request: StepRequest<'_>,
        intent: IntentRecord,
    ) -> Result<Step, GateError> {
        let looked_up_attempt = intent.attempt;
        let looked_up = intent.clone();
        let (outcome, looked) = self
            .look_up_unknown(
                tool,
                request.arguments,
                request.intent_id,
                intent,
                request.owner,
                request.driver.resolved_by(),
            )
            .await;
        let step = |outcome, resend| Step {
            outcome,
            looked,
            resend,
        };
        if looked != Looked::NotFound || outcome.status != CallStatus::PendingUnknown {
            return Ok(step(outcome, Resend::NotTried));
        }

        let now_ms = self.clock.now_ms();
        let template = tool
            .key
            .as_ref()
            .expect("side-effecting tools have a key (checked at load)");
        // Without the application's intent id the request could differ from the first one.
        let allowed = self.resend_possible(tool, &looked_up, now_ms, request.driver)
            && (request.intent_id.is_some() || !template.uses_intent_id())
            && !self.is_disabled(&tool.name).await?;
        if !allowed {
            return Ok(step(outcome, Resend::NotTried));
        }
        let rate = self.options.resolution.resends_per_second;
        if !self.resend_budget.take(&tool.name, rate, now_ms) {
            return Ok(step(outcome, Resend::Deferred));
        }
        let begin = BeginRequest {
            lease_owner: request.owner.to_owned(),
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call: false,
            resend_unknown: true,
            expect_new: false,
            ..request.begin.clone()
        };
        let intent = match self.ledger_begin(begin).await? {
            // The attempt after the one looked up: the re-send.
            Begin::Execute(intent) if intent.attempt == looked_up_attempt + 1 => intent,
            // It went not executed meanwhile and `begin` started a new attempt: a caller's
            // to make, as any call of a not-executed intent; the sweeper gives it back.
            Begin::Execute(intent) => {
                return match request.driver {
                    Driver::Caller => {
                        let outcome = self
                            .execute(
                                tool,
                                request.arguments,
                                request.intent_id,
                                intent,
                                request.owner,
                                Attempt::Call,
                            )
                            .await;
                        Ok(step(outcome, Resend::Raced))
                    }
                    Driver::Sweeper => {
                        self.release_unused(
                            &intent,
                            request.owner,
                            IntentStatus::NotExecuted,
                            "sweeper",
                            UNASKED_ATTEMPT,
                        )
                        .await?;
                        Ok(step(self.answer_from(tool, &intent), Resend::Raced))
                    }
                };
            }
            // A re-send by another driver ran out its lease in between: that attempt needs
            // its own lookup first, by a later step.
            Begin::Lookup(intent) => {
                self.release_unused(
                    &intent,
                    request.owner,
                    IntentStatus::Unknown,
                    request.driver.resolved_by(),
                    UNUSED_LOOKUP_LEASE,
                )
                .await?;
                return Ok(step(self.answer_from(tool, &intent), Resend::Raced));
            }
            Begin::Settled(intent) | Begin::Busy(intent) | Begin::Held(intent, _) => {
                return Ok(step(self.answer_from(tool, &intent), Resend::Raced));
            }
            Begin::Conflict(_) | Begin::OverBudget { .. } => {
                unreachable!("a step asks for an existing intent with its own fingerprint")
            }
        };
        tracing::debug!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, driver = ?request.driver, "re-sending an unknown intent with its provider key");
        let outcome = self
            .execute(
                tool,
                request.arguments,
                request.intent_id,
                intent,
                request.owner,
                Attempt::Resend,
            )
            .await;
        Ok(step(outcome, Resend::Sent))
    }

    /// Gives back a lease `begin` granted without sending anything: the intent keeps
    /// `status`, the one it had, and the event log says why.
    pub(crate) async fn release_unused(
        &self,
        intent: &IntentRecord,
        owner: &str,
        status: IntentStatus,
        by: &'static str,
        detail: &str,
    ) -> Result<(), GateError> {
        let finish = self.finish(intent, owner, status, by, detail.to_owned());
        self.ledger_finish(finish).await?;
        Ok(())
    }
}

/// Who holds an intent's lease, read from its owner id (the forms [`Gate`] and the intent
/// API write): what an operator is told when a resolution by hand must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseHolder {
    /// A gateway process's sweeper: looking the intent up, or re-sending it with its key.
    Sweeper,
    /// A call through a gateway: its attempt, or a repeat's lookup or re-send.
    Call,
    /// The caller's own code, through the intent API (an attempt, a lookup or a re-send).
    Client,
}

impl LeaseHolder {
    /// The holder named by the lease owner id `owner`.
    pub fn of(owner: &str) -> LeaseHolder {
        // The intent API's owners are `client:` (or `client:resend:`) and a token's hash
        // (`client.rs`); a gateway's are `{instance}/{n}` or `{instance}/{role}/{n}`.
        if owner.starts_with("client:") {
            LeaseHolder::Client
        } else if owner.split('/').nth(1) == Some(SWEEPER_ROLE) {
            LeaseHolder::Sweeper
        } else {
            LeaseHolder::Call
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseHolder::Sweeper => "sweeper",
            LeaseHolder::Call => "call",
            LeaseHolder::Client => "client",
        }
    }

    /// Who, in words: "the sweeper", "a call", "the caller's own code".
    pub fn describe(self) -> &'static str {
        match self {
            LeaseHolder::Sweeper => "the sweeper",
            LeaseHolder::Call => "a call",
            LeaseHolder::Client => "the caller's own code (intent API)",
        }
    }
}

/// The role of the sweeper in its lease owner ids (`{instance}/sweeper/{n}`).
pub(crate) const SWEEPER_ROLE: &str = "sweeper";

/// What this gateway's sweeper will do with an `unknown` intent, for the people watching it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownPlan {
    /// When the sweeper's next step is due (clock milliseconds): its next lookup, followed
    /// by a re-send when [`Resends::Active`] and nothing is found. `None`: the sweeper takes
    /// no step for this intent (a client-executed tool's, or a tool this gate does not have).
    pub next_step_ms: Option<i64>,
    pub resends: Resends,
}

/// Whether the sweeper re-sends an `unknown` intent with its provider key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resends {
    /// Each step that finds nothing re-sends it, with backoff, until `until_ms` (the
    /// provider's key window less one attempt).
    Active { until_ms: i64 },
    /// Lookups only, for the reason given: the intent waits for the provider's record,
    /// reconciliation or a person.
    LookupsOnly { why: String },
    /// Re-sends stopped for good: the provider answers this key the same way every time.
    Stopped { why: String },
}

impl Gate {
    /// What the sweeper will do next with `record`, an `unknown` intent, as of now (see the
    /// module documentation); `None` for an intent in another status.
    pub fn unknown_plan(&self, record: &IntentRecord) -> Option<UnknownPlan> {
        if record.status != IntentStatus::Unknown {
            return None;
        }
        let now_ms = self.clock.now_ms();
        let Some(tool) = self
            .tools
            .get(&record.tool)
            .map(|tool| &tool.definition)
            .filter(|tool| tool.effect == intentgate_core::Effect::SideEffect)
        else {
            return Some(UnknownPlan {
                next_step_ms: None,
                resends: Resends::LookupsOnly {
                    why: "this gateway has no side-effecting tool of this name".to_owned(),
                },
            });
        };
        if tool.executor == intentgate_core::Executor::Client {
            return Some(UnknownPlan {
                next_step_ms: None,
                resends: Resends::LookupsOnly {
                    why: "the caller's own code executes this tool: its next grant looks the \
intent up, the gateway's sweeper does not"
                        .to_owned(),
                },
            });
        }
        let interval_ms = self.step_interval_ms(tool, record, now_ms, Driver::Sweeper);
        let next_step_ms = Some(
            record
                .last_lookup_ms
                .map_or(now_ms, |last| last.saturating_add(interval_ms)),
        );
        let resends = if let Some(stop) = record.resend_stopped {
            Resends::Stopped {
                why: stop.describe().to_owned(),
            }
        } else if self.options.resolution.resends_per_second == 0 {
            Resends::LookupsOnly {
                why: "re-sends are turned off on this gateway".to_owned(),
            }
        } else if let Some(window) = tool.resend_window {
            let attempt_ms = millis(self.lease_duration(tool));
            let until_ms = record
                .first_seen_ms
                .saturating_add(millis(window))
                .saturating_sub(attempt_ms);
            if !tool.sensitive.is_empty() {
                Resends::LookupsOnly {
                    why: "the ledger keeps this tool's sensitive arguments as hashes, so only \
a repeat call (which carries them) may re-send it"
                        .to_owned(),
                }
            } else if !self.resend_possible(tool, record, now_ms, Driver::Sweeper) {
                Resends::LookupsOnly {
                    why: "the provider's key window for this intent has closed: a re-send \
could be a second effect"
                        .to_owned(),
                }
            } else {
                Resends::Active { until_ms }
            }
        } else {
            Resends::LookupsOnly {
                why: "the tool declares no key window (its upstream is not known to honour \
idempotency keys), so it is never re-sent"
                    .to_owned(),
            }
        };
        Some(UnknownPlan {
            next_step_ms,
            resends,
        })
    }
}

/// A duration as the ledger's milliseconds.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_owner_names_its_holder() {
        assert_eq!(LeaseHolder::of("4242-ab12/sweeper/7"), LeaseHolder::Sweeper);
        assert_eq!(LeaseHolder::of("4242-ab12/31"), LeaseHolder::Call);
        assert_eq!(LeaseHolder::of("client:9f86d081"), LeaseHolder::Client);
        assert_eq!(
            LeaseHolder::of("client:resend:9f86d081"),
            LeaseHolder::Client
        );
        // An instance named like the role is still a call's owner.
        assert_eq!(LeaseHolder::of("sweeper/12"), LeaseHolder::Call);
    }
}

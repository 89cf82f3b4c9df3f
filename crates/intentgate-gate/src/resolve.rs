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
//! backoff of the intent's attempt count: [`Resolution::backoff_initial`](crate::Resolution::backoff_initial) after the first
//! attempt, doubling per attempt up to [`Resolution::backoff_max`](crate::Resolution::backoff_max). Outside it the pause is
//! the gate's lookup interval for a caller, and for the sweeper a tenth of the intent's age
//! (between the lookup interval and [`SWEEP_LOOKUP_INTERVAL_MAX`](crate::SWEEP_LOOKUP_INTERVAL_MAX)), so an intent that stays
//! unknown for days is asked about about once an hour. A step that is not due answers from
//! the ledger at once: a storm of repeats is never a storm of provider requests.
//!
//! **Bounds.** At most one attempt per intent is in flight (the lease). Re-sends are limited
//! per tool and per process by a token bucket ([`Resolution::resends_per_second`](crate::Resolution::resends_per_second)). The
//! sweeper does not start a step that would re-send while the bucket is empty (its lookup
//! would be wasted); a caller's step whose re-send finds the bucket empty stays a lookup and
//! the re-send waits for the next step. A `done` or `rejected` intent is never sent again, and a `not_executed` one is only
//! started again by a new call, never by a step.

use intentgate_core::{CallStatus, IntentStatus, ToolDefinition};
use intentgate_ledger::{BeginRequest, IntentRecord};
use serde_json::Value;

use crate::call::execute::Attempt;
use crate::call::look_up::Looked;
use crate::error::GateError;
use crate::gate::Gate;
use crate::lease::{Begun, Lease};
use crate::outcome::CallOutcome;
use crate::resolution::{Driver, millis};

/// The event log's reason when a driver gives back an attempt `begin` started on a
/// not-executed intent it did not ask to start.
pub(crate) const UNASKED_ATTEMPT: &str =
    "the sweeper starts no attempt of a not-executed intent; nothing was sent";
/// The event log's reason when a driver gives back a lookup lease without looking up.
pub(crate) const UNUSED_LOOKUP_LEASE: &str = "lookup lease released unused";

/// What one step needs besides the intent: what to send, and the `begin` that took the
/// lookup lease (the re-send asks again with it).
pub(crate) struct StepRequest<'a> {
    /// The arguments to send: the caller's, or for the sweeper the ledger's copy.
    pub arguments: &'a Value,
    /// The application's intent id, for a tool whose key uses one.
    pub intent_id: Option<&'a str>,
    /// Who drives the step.
    pub driver: Driver,
    /// The `begin` that took the lookup lease, which the re-send asks again.
    pub begin: &'a BeginRequest,
}

/// What one step did.
#[derive(Debug)]
pub(crate) struct Step {
    /// The answer, from the ledger as the step left it.
    pub outcome: CallOutcome,
    /// What the lookup found.
    pub looked: Looked,
    /// Whether the step re-sent.
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

impl Gate {
    /// One step of an `unknown` intent whose lookup `lease` `driver` holds: look it up, and
    /// when nothing is found and the tool allows it now, re-send it with its provider key.
    /// `Err` only when the ledger failed on the re-send's `begin` (nothing was re-sent).
    pub(crate) async fn advance_unknown(
        &self,
        tool: &ToolDefinition,
        request: StepRequest<'_>,
        lease: Lease,
    ) -> Result<Step, GateError> {
        let (outcome, looked) = self
            .look_up_unknown(
                tool,
                request.arguments,
                request.intent_id,
                &lease,
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
        let looked_up = lease.intent();
        let now_ms = self.clock.now_ms();
        if !self
            .resend_allowed(tool, &request, looked_up, now_ms)
            .await?
        {
            return Ok(step(outcome, Resend::NotTried));
        }
        let rate = self.options.resolution.resends_per_second;
        if !self.resend_budget.take(&tool.name, rate, now_ms) {
            return Ok(step(outcome, Resend::Deferred));
        }
        let (outcome, resend) = self.resend(tool, &request, &lease, now_ms).await?;
        Ok(step(outcome, resend))
    }

    /// True when `looked_up`, found nowhere, may be re-sent now by the step's driver: inside
    /// the tool's window, with the application's intent id its request needs (without it
    /// the request could differ from the first one), and the tool switched on.
    async fn resend_allowed(
        &self,
        tool: &ToolDefinition,
        request: &StepRequest<'_>,
        looked_up: &IntentRecord,
        now_ms: i64,
    ) -> Result<bool, GateError> {
        let template = tool
            .key
            .as_ref()
            .expect("side-effecting tools have a key (checked at load)");
        Ok(
            self.resend_possible(tool, looked_up, now_ms, request.driver)
                && (request.intent_id.is_some() || !template.uses_intent_id())
                && !self.is_disabled(&tool.name).await?,
        )
    }

    /// The re-send of a step: `begin` again under the same owner, for the attempt after the
    /// one looked up, and that attempt under its new lease. Another driver may have moved the
    /// intent in between (`Resend::Raced`); then nothing is sent, unless `begin` started a
    /// caller's attempt of an intent that went `not_executed`, which a caller runs as any
    /// call does and the sweeper gives back.
    async fn resend(
        &self,
        tool: &ToolDefinition,
        request: &StepRequest<'_>,
        lookup_lease: &Lease,
        now_ms: i64,
    ) -> Result<(CallOutcome, Resend), GateError> {
        let looked_up_attempt = lookup_lease.intent().attempt;
        let begin = BeginRequest {
            lease_owner: lookup_lease.owner().to_owned(),
            lease_expires_ms: now_ms + millis(self.lease_duration(tool)),
            now_ms,
            count_call: false,
            resend_unknown: true,
            expect_new: false,
            ..request.begin.clone()
        };
        let lease = match self.ledger_begin(begin).await? {
            // The attempt after the one looked up: the re-send.
            Begun::Execute(lease) if lease.intent().attempt == looked_up_attempt + 1 => lease,
            // It went not executed meanwhile and `begin` started a new attempt: a caller's
            // to make, as any call of a not-executed intent; the sweeper gives it back.
            Begun::Execute(lease) => {
                let outcome = match request.driver {
                    Driver::Caller => {
                        self.execute(
                            tool,
                            request.arguments,
                            request.intent_id,
                            lease,
                            Attempt::Call,
                        )
                        .await
                    }
                    Driver::Sweeper => {
                        let answer = self.answer_from(tool, lease.intent());
                        self.release_unused(
                            lease,
                            IntentStatus::NotExecuted,
                            "sweeper",
                            UNASKED_ATTEMPT,
                        )
                        .await?;
                        answer
                    }
                };
                return Ok((outcome, Resend::Raced));
            }
            // A re-send by another driver ran out its lease in between: that attempt needs
            // its own lookup first, by a later step.
            Begun::Lookup(lease) => {
                let answer = self.answer_from(tool, lease.intent());
                self.release_unused(
                    lease,
                    IntentStatus::Unknown,
                    request.driver.resolved_by(),
                    UNUSED_LOOKUP_LEASE,
                )
                .await?;
                return Ok((answer, Resend::Raced));
            }
            Begun::Settled(intent) | Begun::Busy(intent) | Begun::Held(intent, ..) => {
                return Ok((self.answer_from(tool, &intent), Resend::Raced));
            }
            Begun::Conflict(_) | Begun::OverBudget { .. } => {
                unreachable!("a step asks for an existing intent with its own fingerprint")
            }
        };
        tracing::debug!(tool = %tool.name, key = %lease.intent().key, attempt = lease.intent().attempt, driver = ?request.driver, "re-sending an unknown intent with its provider key");
        let outcome = self
            .execute(
                tool,
                request.arguments,
                request.intent_id,
                lease,
                Attempt::Resend,
            )
            .await;
        Ok((outcome, Resend::Sent))
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

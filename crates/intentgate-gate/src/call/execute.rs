//! The execute phase (docs/design.md section 5, step 8): under the lease, with `in_flight`
//! durable, the request goes out with the intent's provider key and the tool's timeout,
//! again with the same key where a bounded retry may help; what it learned is classified,
//! looked up when ambiguous, and recorded.
//!
//! A request leaves here only: a side effect's through [`Gate::send_attempt`], which takes
//! the [`Lease`] and asserts it ([`Lease::check_send`]), a read's or an idempotent tool's
//! through [`Gate::send_read`], which asserts it carries no intent.

use std::time::{Duration, Instant};

use intentgate_core::{
    Effect, IntentStatus, OutcomeClass, RequestFacts, ToolDefinition, UpstreamObservation,
};
use serde_json::Value;
use tracing::Instrument;

use crate::gate::Gate;
use crate::lease::Lease;
use crate::metrics::UpstreamRequest;
use crate::outcome::CallOutcome;
use crate::trace;
use crate::upstream::UpstreamCall;

/// Why an attempt is being made, which decides what a spent retry budget means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A caller's attempt: nothing was sent before it under this attempt, so a budget spent
    /// on not-processed answers means the intent is certainly not done.
    Call,
    /// The sweeper's same-key re-send of an `unknown` intent: a budget spent on
    /// not-processed answers proves nothing about the attempt it repeats, so the intent
    /// stays `unknown`.
    Resend,
}

impl Gate {
    /// Under the lease, with `in_flight` durable: send, classify, look up when ambiguous,
    /// record. `intent_id` is the application's intent id, for upstream templates that use
    /// it; `attempt` says whether this is a caller's attempt or a same-key re-send.
    pub(crate) async fn execute(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        intent_id: Option<&str>,
        lease: Lease,
        attempt: Attempt,
    ) -> CallOutcome {
        let call = lease.upstream_call(tool, arguments, intent_id);
        self.keep_trace(lease.intent().id, lease.intent().attempt);
        let mut retry = 0;
        loop {
            let (observation, facts) = self.send_attempt(&lease, call).await;
            let class = self.classify(tool, lease.intent(), &facts, &observation);
            let learned = match class {
                OutcomeClass::Ambiguous { why } => {
                    return self
                        .look_up_ambiguous(tool, &lease, call, why, &observation)
                        .await;
                }
                OutcomeClass::Done => Learned::done(),
                OutcomeClass::Rejected => Learned::rejected(&observation),
                OutcomeClass::NotProcessed { .. } | OutcomeClass::Misconfigured { .. } => {
                    if let Some(pause) = self.retry_pause(tool, &lease, &class, retry) {
                        tokio::time::sleep(pause).await;
                        retry += 1;
                        continue;
                    }
                    self.not_processed(tool, &class, &facts, &observation, retry, attempt)
                }
            };
            return self
                .record_attempt(tool, &lease, learned, observation)
                .await;
        }
    }

    /// Keeps the call's trace with the intent when traces are on, so a repeat's or a
    /// re-send's trace links to this one. Bookkeeping in the background: the request does
    /// not wait for it.
    fn keep_trace(&self, id: i64, attempt: u32) {
        if !trace::enabled() {
            return;
        }
        let current = tracing::Span::current();
        trace::set_attribute(&current, "intentgate.attempt", i64::from(attempt));
        trace::set_attribute(&current, "intentgate.intent", id);
        if let Some(traceparent) = trace::traceparent_of(&current) {
            let ledger = self.ledger.clone();
            tokio::spawn(async move {
                if let Err(error) = ledger.record_trace(id, traceparent).await {
                    tracing::debug!(intent = id, %error, "could not keep the call's trace");
                }
            });
        }
    }

    /// The pause before the next same-key retry of an answer that was not processed, where
    /// one may help (not a wrong credential or route, whose answer won't change within the
    /// call), the budget allows it and the lease outlasts it; `None` otherwise.
    fn retry_pause(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        class: &OutcomeClass,
        retry: u32,
    ) -> Option<Duration> {
        let retry_after_ms = match class {
            OutcomeClass::NotProcessed {
                retry_after_ms,
                retry: true,
            } => *retry_after_ms,
            OutcomeClass::Misconfigured { kind } if kind.retried() => None,
            _ => return None,
        };
        self.backoff(retry, tool.retry_budget, retry_after_ms)
            .filter(|pause| self.fits_lease(lease, tool, *pause))
    }

    /// Sends one attempt of the lease's intent: the one way a side effect's request leaves.
    /// Asserts first that it may ([`Lease::check_send`]): this intent's request, the intent
    /// durably `in_flight`. A lease that ran out meanwhile (the process stalled) sends
    /// nothing: the attempt is `NotSent`, which records `not_executed` if the intent is still
    /// this attempt's, and is superseded if another caller took it over.
    pub(crate) async fn send_attempt(
        &self,
        lease: &Lease,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        lease.check_send(&call);
        if !lease.live_at(self.clock.now_ms()) {
            tracing::warn!(
                tool = %call.tool.name,
                key = call.intent_key.unwrap_or_default(),
                "the lease ran out before the request left (the process stalled); nothing was sent"
            );
            return (
                UpstreamObservation::NotSent {
                    reason: "the gateway's lease ran out before the request left".to_owned(),
                },
                RequestFacts::default(),
            );
        }
        self.request(call).await
    }

    /// Sends one request of a read or an idempotent tool, which no intent covers: asserts
    /// that it is one (no side effect, no provider key).
    pub(crate) async fn send_read(
        &self,
        call: UpstreamCall<'_>,
    ) -> (UpstreamObservation, RequestFacts) {
        assert!(
            call.tool.effect != Effect::SideEffect && call.idempotency_key.is_none(),
            "a side effect of tool `{}` was about to be sent without its lease",
            call.tool.name
        );
        self.request(call).await
    }

    /// One upstream request, bounded by the tool's timeout, with what the upstream knows of
    /// it ([`Upstream::execute_with_facts`](crate::Upstream::execute_with_facts)). Private:
    /// a request leaves through [`Gate::send_attempt`] or [`Gate::send_read`] only.
    async fn request(&self, call: UpstreamCall<'_>) -> (UpstreamObservation, RequestFacts) {
        let started = Instant::now();
        let request = crate::phase!(
            "upstream.request",
            otel.kind = "client",
            gen_ai.tool.name = %call.tool.name,
            intentgate.attempt = call.attempt
        );
        let observation =
            tokio::time::timeout(call.timeout, self.upstream.execute_with_facts(call))
                .instrument(request)
                .await
                .unwrap_or((UpstreamObservation::Timeout, RequestFacts::default()));
        self.metrics
            .upstream_request(&call.tool.name, UpstreamRequest::Execute, started.elapsed());
        observation
    }

    /// The pause before retry number `retry + 1`, or `None` when the budget is spent or the
    /// provider asks for a longer pause than the cap.
    pub(crate) fn backoff(
        &self,
        retry: u32,
        budget: u32,
        retry_after_ms: Option<u64>,
    ) -> Option<Duration> {
        if retry >= budget {
            return None;
        }
        let cap = self.options.retry_after_cap;
        match retry_after_ms.map(Duration::from_millis) {
            Some(asked) if asked > cap => None,
            Some(asked) => Some(asked),
            None => Some((self.options.backoff_base * 2u32.saturating_pow(retry)).min(cap)),
        }
    }

    /// True when one more pause and attempt end before the lease does.
    fn fits_lease(&self, lease: &Lease, tool: &ToolDefinition, pause: Duration) -> bool {
        let end_ms = self.clock.now_ms() + (pause + tool.timeout).as_millis() as i64;
        end_ms < lease.expires_ms()
    }
}

/// What an attempt learned, to be recorded: the status, the event log's detail, and the
/// reason the answer gives when it is `not_executed` for a reason of its own.
pub(crate) struct Learned {
    /// The status the intent takes.
    pub(crate) status: IntentStatus,
    /// Why, for the event log.
    pub(crate) detail: String,
    /// The answer's reason, for a call that was not processed because the gateway is
    /// misconfigured.
    pub(crate) reason: Option<intentgate_core::OutcomeReason>,
}

impl Learned {
    /// The upstream confirmed the effect.
    fn done() -> Learned {
        Learned {
            status: IntentStatus::Done,
            detail: "the upstream confirmed it".to_owned(),
            reason: None,
        }
    }

    /// The upstream refused: nothing happened.
    fn rejected(observation: &UpstreamObservation) -> Learned {
        Learned {
            status: IntentStatus::Rejected,
            detail: crate::answer::rejection_reason(observation),
            reason: None,
        }
    }
}

//! The look-up phase (docs/design.md section 5, "What \"found\" means"): after an ambiguous
//! answer, and as each step of an `unknown` intent, the tool's lookup asks the provider
//! whether the effect exists, under the intent's lease, and what it found is recorded: `done`
//! when found, otherwise the intent is or stays `unknown`. A record that is half this
//! intent's is a mismatch, reported to the tool's owner and never settled.

use std::time::Instant;

use intentgate_core::{
    Ambiguity, CallStatus, IntentStatus, ResendStop, ToolDefinition, UpstreamObservation,
};
use intentgate_ledger::{Finish, IntentRecord};
use serde_json::Value;
use tracing::Instrument;

use crate::answer::{provider_text, seen};
use crate::call::record::kept_result;
use crate::gate::Gate;
use crate::lease::Lease;
use crate::metrics::UpstreamRequest;
use crate::outcome::CallOutcome;
use crate::trace;
use crate::upstream::{KeyReused, LookupMismatch, LookupOutcome, UpstreamCall};

/// What a lookup of an `unknown` intent found, once its answer is in the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Looked {
    /// The effect exists: the intent is done.
    Found,
    /// The provider answered and has no such effect (yet).
    NotFound,
    /// The lookup itself failed: nothing is known.
    Failed,
    /// A record half this intent's: nothing is settled, and no re-send may follow.
    Mismatch,
    /// The tool has no lookup.
    Unsupported,
}

/// Why a lookup was made, and how what it finds is told.
pub(crate) struct LookupReason<'a> {
    /// What made it necessary, for the event log ("a timeout", "unknown intent").
    why: &'a str,
    /// The answer when found: `done` for the attempt that looked up, `already_done` for a
    /// step of an intent an earlier attempt left unknown.
    found_status: CallStatus,
    /// Who settles the intent when found ("lookup", "sweeper").
    resolved_by: &'static str,
    /// Why the attempt looked up stopped the intent's same-key re-sends, if it did.
    stop: Option<ResendStop>,
}

impl Gate {
    /// An attempt's ambiguous answer: stops the intent's re-sends when the answer says no
    /// request with its key can settle anything, then looks the effect up and records what
    /// it found.
    pub(crate) async fn look_up_ambiguous(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        call: UpstreamCall<'_>,
        why: Ambiguity,
        observation: &UpstreamObservation,
    ) -> CallOutcome {
        let stop = why.resend_stop();
        if let Some(stop) = stop {
            self.resends_stop(tool, lease.intent(), stop, observation);
        }
        let found = self.lookup(lease, call).await;
        // What was found, not the provider's record: it may hold personal data.
        tracing::debug!(tool = %tool.name, key = %lease.intent().key, why = why.as_str(), found = found.kind(), "ambiguous outcome looked up");
        let reason = LookupReason {
            why: why.as_str(),
            found_status: CallStatus::Done,
            resolved_by: "lookup",
            stop,
        };
        self.settle_lookup(tool, lease, found, reason).await.0
    }

    /// Under the lookup lease of an `unknown` intent: find out whether it happened. Returns
    /// the answer, and what the lookup found; `resolved_by` names who settles the intent if
    /// it is found ("lookup" for a caller, "sweeper").
    pub(crate) async fn look_up_unknown(
        &self,
        tool: &ToolDefinition,
        arguments: &Value,
        intent_id: Option<&str>,
        lease: &Lease,
        resolved_by: &'static str,
    ) -> (CallOutcome, Looked) {
        // The same request the first attempt's lookup renders, provider key included: a
        // lookup that filters or proves by `{idempotency_key}` must never go without it.
        let call = lease.upstream_call(tool, arguments, intent_id);
        let found = self.lookup(lease, call).await;
        let reason = LookupReason {
            why: "unknown intent",
            found_status: CallStatus::AlreadyDone,
            resolved_by,
            stop: None,
        };
        self.settle_lookup(tool, lease, found, reason).await
    }

    /// Records what a lookup found: `done` when found (answered as the reason's
    /// `found_status`), otherwise the intent is or stays `unknown`.
    async fn settle_lookup(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        found: LookupOutcome,
        reason: LookupReason<'_>,
    ) -> (CallOutcome, Looked) {
        let looked = match &found {
            LookupOutcome::Found { .. } => Looked::Found,
            LookupOutcome::NotFound => Looked::NotFound,
            LookupOutcome::Failed(_) => Looked::Failed,
            LookupOutcome::Mismatch(_) => Looked::Mismatch,
            LookupOutcome::Unsupported => Looked::Unsupported,
        };
        let found_status = reason.found_status;
        let finish = self.lookup_finish(tool, lease, found, reason);
        let mut outcome = self.record(tool, finish).await;
        if outcome.status == CallStatus::Done {
            outcome.status = found_status;
            outcome.message = tool
                .messages
                .render(found_status, tool.effect, &tool.name, "");
        }
        (outcome, looked)
    }

    /// What the lease's holder records about a lookup that found `found`.
    fn lookup_finish(
        &self,
        tool: &ToolDefinition,
        lease: &Lease,
        found: LookupOutcome,
        reason: LookupReason<'_>,
    ) -> Finish {
        let intent = lease.intent();
        let why = reason.why;
        let mut finish = Finish {
            looked_up: true,
            ..lease.finish(
                self.clock.now_ms(),
                IntentStatus::Unknown,
                reason.resolved_by,
                String::new(),
            )
        };
        match found {
            LookupOutcome::Found {
                external_id,
                result,
            } => {
                finish.status = IntentStatus::Done;
                finish.external_id = external_id;
                finish.result = Some(kept_result(tool, result, &intent.arguments));
                finish.detail = format!("{why}; the lookup found the effect");
            }
            LookupOutcome::NotFound => {
                finish.detail = format!("{why}; the lookup found nothing yet")
            }
            LookupOutcome::Failed(reason) => {
                tracing::info!(tool = %tool.name, key = %intent.key, %reason, "lookup failed; the intent stays unknown");
                finish.detail = format!("{why}; the lookup failed: {reason}")
            }
            LookupOutcome::Mismatch(reason) => {
                // Never a silent done: the provider holds something the ledger can't explain.
                tracing::warn!(tool = %tool.name, key = %intent.key, owner = tool.owner.as_deref().unwrap_or("-"), %reason, "lookup mismatch: a record is half this intent's; nothing settled, the owner must check");
                // No receiver (a gate without notices) is fine: the log line stands.
                let _ = self.lookup_mismatches.send(LookupMismatch {
                    tool: tool.name.clone(),
                    tenant: intent.tenant.clone(),
                    intent_id: intent.id,
                    intent_key: intent.key.clone(),
                    reason: reason.clone(),
                    at_ms: self.clock.now_ms(),
                });
                finish.detail = format!(
                    "{why}; the lookup found a record it can't prove is this intent's: {reason}; \
                     nothing was settled: check the provider's record"
                )
            }
            LookupOutcome::Unsupported => finish.detail = format!("{why}; the tool has no lookup"),
        }
        if let Some(stop) = reason.stop {
            finish.resend_stopped = Some(stop);
            if finish.status == IntentStatus::Unknown {
                finish.detail = format!(
                    "{}; same-key re-sends stopped for good: {}",
                    finish.detail,
                    stop.describe()
                );
            }
        }
        finish
    }

    /// One lookup of the lease's intent, bounded by the tool's timeout. Asserts first that
    /// `call` is the intent's, with its provider key ([`Lease::check_request`]).
    async fn lookup(&self, lease: &Lease, call: UpstreamCall<'_>) -> LookupOutcome {
        lease.check_request(&call);
        let started = Instant::now();
        let request = crate::phase!(
            "lookup",
            otel.kind = "client",
            gen_ai.tool.name = %call.tool.name
        );
        let found = match tokio::time::timeout(call.timeout, self.upstream.lookup(call))
            .instrument(request.clone())
            .await
        {
            Ok(found) => found,
            Err(_) => LookupOutcome::Failed("the lookup timed out".to_owned()),
        };
        self.metrics
            .upstream_request(&call.tool.name, UpstreamRequest::Lookup, started.elapsed());
        trace::set_attribute(&request, "intentgate.found", found.kind());
        self.metrics.lookup(&call.tool.name, found.kind());
        found
    }

    /// Counts, logs and (for a reused key) reports an attempt of `intent` whose answer stops
    /// its same-key re-sends for good ([`ResendStop`]); the finish that follows records it.
    pub(crate) fn resends_stop(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        stop: ResendStop,
        observation: &UpstreamObservation,
    ) {
        self.resends_stopped(tool, intent, stop, &seen(observation), || {
            provider_text(observation)
        });
    }

    /// [`Gate::resends_stop`] for an answer the gateway did not see itself: `seen` says
    /// where it came from, `provider_message` gives the provider's words (for a reused key's
    /// notice). The intent API's settle reports a client-executed attempt so.
    pub(crate) fn resends_stopped(
        &self,
        tool: &ToolDefinition,
        intent: &IntentRecord,
        stop: ResendStop,
        seen: &str,
        provider_message: impl FnOnce() -> String,
    ) {
        self.metrics.resends_stopped(&tool.name, stop);
        tracing::warn!(tool = %tool.name, key = %intent.key, attempt = intent.attempt, reason = stop.as_str(), %seen, "same-key re-sends of this intent stop for good: {}; only lookups continue", stop.describe());
        if stop == ResendStop::KeyReused {
            // No receiver (a gate without notices) is fine: the log line stands.
            let _ = self.key_reuses.send(KeyReused {
                tool: tool.name.clone(),
                tenant: intent.tenant.clone(),
                intent_id: intent.id,
                intent_key: intent.key.clone(),
                provider_message: provider_message(),
                at_ms: self.clock.now_ms(),
            });
        }
    }
}

//! The in-process face of the provider: an [`Upstream`] for the gate's tests and simulation.
//!
//! A call goes straight into the shared [`crate::model`] (no serialisation, no sockets), and
//! the decision is acted out with `tokio::time::sleep`, so a paused runtime replays a run
//! exactly. Every effect is a refund (`re_000001`), whatever the tool.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::UpstreamObservation;
use intentgate_gate::{Clock, LookupOutcome, Upstream, UpstreamCall};
use serde_json::{Map, Value, json};

use crate::model::{Effect, EffectKind, EffectRequest, Latency, Model, Plan, Scripted};

/// The odds of each fault, in parts per thousand of requests, and how slow the provider is.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    pub reject: u32,
    pub rate_limited: u32,
    pub unavailable: u32,
    pub not_sent: u32,
    pub timeout: u32,
    pub dropped: u32,
    pub server_error: u32,
    /// The first this many side-effecting requests carrying each idempotency key time out
    /// without committing; later ones with that key are served by the odds above (or the
    /// script, which these timeouts do not consume). Not a draw: a retry storm against a
    /// provider that recovers is the same at every seed, and the other requests' draws do
    /// not move. Requests without a key are not counted. 0 turns it off.
    pub first_timeouts_per_key: u32,
    /// Per thousand: an ambiguous shape committed anyway.
    pub commit_when_ambiguous: u32,
    /// Per thousand: a lookup fails.
    pub lookup_failure: u32,
    /// Latency of a normal answer: uniform between these bounds (the in-process face's; the
    /// HTTP face draws its own).
    pub latency_min: Duration,
    pub latency_max: Duration,
    /// Retry-After sent with 429 and 503.
    pub retry_after: Duration,
}

impl FaultPlan {
    /// No faults, no latency.
    pub fn none() -> FaultPlan {
        FaultPlan {
            reject: 0,
            rate_limited: 0,
            unavailable: 0,
            not_sent: 0,
            timeout: 0,
            dropped: 0,
            server_error: 0,
            first_timeouts_per_key: 0,
            commit_when_ambiguous: 500,
            lookup_failure: 0,
            latency_min: Duration::ZERO,
            latency_max: Duration::ZERO,
            retry_after: Duration::from_millis(200),
        }
    }

    /// No faults; every answer takes exactly `latency`: a request still running while a
    /// test does something beside it.
    pub fn slow(latency: Duration) -> FaultPlan {
        FaultPlan {
            latency_min: latency,
            latency_max: latency,
            ..FaultPlan::none()
        }
    }

    /// Every fault shape, often: about a third of requests fail somehow.
    pub fn stormy() -> FaultPlan {
        FaultPlan {
            reject: 30,
            rate_limited: 50,
            unavailable: 30,
            not_sent: 40,
            timeout: 60,
            dropped: 40,
            server_error: 60,
            first_timeouts_per_key: 0,
            commit_when_ambiguous: 500,
            lookup_failure: 150,
            latency_min: Duration::from_millis(5),
            latency_max: Duration::from_millis(400),
            retry_after: Duration::from_millis(200),
        }
    }
}

impl From<&FaultPlan> for Plan {
    fn from(plan: &FaultPlan) -> Plan {
        Plan {
            faults: plan.clone(),
            latency: Latency::Uniform {
                min: plan.latency_min,
                max: plan.latency_max,
            },
        }
    }
}

/// The fake provider. Share it with `Arc`.
pub struct FakeProvider {
    model: Mutex<Model>,
}

impl FakeProvider {
    pub fn new(seed: u64, plan: FaultPlan, clock: Arc<dyn Clock>) -> FakeProvider {
        FakeProvider {
            model: Mutex::new(Model::new(seed, Plan::from(&plan), clock)),
        }
    }

    /// Forces the shapes of the next requests, in order, before random ones resume.
    pub fn script(&self, shapes: impl IntoIterator<Item = Scripted>) {
        self.lock().script(shapes);
    }

    /// Forces the next lookups to fail (`false`) or answer (`true`).
    pub fn script_lookups(&self, answers: impl IntoIterator<Item = bool>) {
        self.lock().script_lookups(answers);
    }

    pub fn set_plan(&self, plan: FaultPlan) {
        self.lock().set_plan(Plan::from(&plan));
    }

    /// Moves the provider's clock forward (to let it forget keys).
    pub fn advance(&self, by: Duration) {
        self.lock().advance(by);
    }

    /// Every effect, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.lock().effects().to_vec()
    }

    /// Effects recorded for one intent key.
    pub fn effect_count(&self, intent_key: &str) -> usize {
        self.lock().effect_count(intent_key)
    }

    /// Requests received (including those not processed and never sent).
    pub fn requests(&self) -> u64 {
        self.lock().requests()
    }

    pub fn lookups(&self) -> u64 {
        self.lock().lookups()
    }

    /// The error status the provider replays for an idempotency key inside its window, if
    /// it stored one: a key whose first request failed with a server error answers every
    /// repeat with that error, whatever happens later.
    pub fn replayed_error(&self, idempotency_key: &str) -> Option<u16> {
        self.lock().replayed_error(idempotency_key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().expect("fake provider lock")
    }
}

/// The object a refund returns in process: small, and what the lookup returns too.
fn refund_object(intent_key: Option<&str>) -> Map<String, Value> {
    let object =
        json!({"object": "refund", "status": "succeeded", "metadata": {"intent_key": intent_key}});
    match object {
        Value::Object(object) => object,
        _ => unreachable!("a JSON object literal"),
    }
}

#[async_trait]
impl Upstream for FakeProvider {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        let decision = self.lock().side_effect(EffectRequest {
            kind: EffectKind::Refund,
            tool: &call.tool.name,
            parameters: call.arguments,
            object: refund_object(call.intent_key),
            idempotency_key: call.idempotency_key,
            intent_key: call.intent_key,
            attempt: call.attempt,
            echo_key: true,
        });
        if decision.reply == UpstreamObservation::Timeout {
            // Hold the caller past its timeout; the gate's own timer ends the wait.
            tokio::time::sleep(call.timeout + decision.latency + Duration::from_millis(1)).await;
        } else {
            tokio::time::sleep(decision.latency).await;
        }
        decision.reply
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let (answer, latency) = {
            let mut model = self.lock();
            let draw = model.draw_lookup();
            let answer = if !draw.answers {
                LookupOutcome::Failed("the provider did not answer the lookup".into())
            } else {
                // By the provider key the gateway sent, as a real lookup proves its records.
                match call
                    .idempotency_key
                    .and_then(|key| model.first_for_idempotency_key(key))
                {
                    Some(effect) => LookupOutcome::Found {
                        external_id: Some(effect.id.clone()),
                        result: effect.object.clone(),
                    },
                    None => LookupOutcome::NotFound,
                }
            };
            (answer, draw.latency)
        };
        tokio::time::sleep(latency).await;
        answer
    }
}

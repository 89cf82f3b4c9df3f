//! A fake payments provider, in process.
//!
//! It behaves like a payment API with Stripe-like idempotency keys: the first response
//! for a key is stored and replayed (a stored 500 included), the same key with other
//! parameters is refused, a concurrent request with the same key gets 409, and keys are
//! forgotten after a window. Every real effect is appended to an effect log, which is the
//! ground truth that exactly-once checks compare the gateway's ledger against.
//!
//! Faults are seeded. Each request draws a [`Shape`], one per row of SPEC section 5's
//! table, and for the ambiguous shapes whether the provider committed is drawn
//! independently of what the caller sees: that independence is what makes them ambiguous.
//! Tests can also script exact shapes with [`FakeProvider::script`].

mod rng;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::UpstreamObservation;
use intentgate_core::fingerprint::fingerprint;
use intentgate_gate::{Clock, LookupOutcome, Upstream, UpstreamCall};
use serde_json::{Value, json};

pub use rng::Rng;

/// How long the provider remembers an idempotency key (Stripe: at least 24 hours).
pub const KEY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// What one request does, one variant per row of the outcome table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// 200: committed.
    Ok,
    /// 402 card declined: refused, nothing happened.
    Reject,
    /// 429 with Retry-After: not processed.
    RateLimited,
    /// 503 with Retry-After: not processed.
    Unavailable,
    /// Connection refused before the request was sent: not processed.
    NotSent,
    /// No answer within the caller's timeout; may have committed.
    Timeout,
    /// The connection drops after the request was sent; may have committed.
    Dropped,
    /// 500, 502, 504 or 503 without Retry-After; may have committed. Stored for the key and
    /// replayed, as Stripe does.
    ServerError(u16),
}

/// A scripted request: the shape, and for ambiguous shapes whether the provider commits.
#[derive(Debug, Clone, Copy)]
pub struct Scripted {
    pub shape: Shape,
    pub commit: bool,
}

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
    /// Per thousand: an ambiguous shape committed anyway.
    pub commit_when_ambiguous: u32,
    /// Per thousand: a lookup fails.
    pub lookup_failure: u32,
    /// Latency of a normal answer: uniform between these bounds.
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
            commit_when_ambiguous: 500,
            lookup_failure: 0,
            latency_min: Duration::ZERO,
            latency_max: Duration::ZERO,
            retry_after: Duration::from_millis(200),
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
            commit_when_ambiguous: 500,
            lookup_failure: 150,
            latency_min: Duration::from_millis(5),
            latency_max: Duration::from_millis(400),
            retry_after: Duration::from_millis(200),
        }
    }
}

/// One real effect at the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub id: String,
    pub tool: String,
    /// The intent key the request carried as metadata (how the lookup finds it).
    pub intent_key: Option<String>,
    pub idempotency_key: Option<String>,
    /// The gate's attempt that made it.
    pub attempt: u32,
    pub arguments: Value,
    pub at_ms: i64,
}

struct KeyEntry {
    parameters: String,
    /// The stored response (status, body), replayed for repeats.
    response: Option<(u16, Value)>,
    created_ms: i64,
    /// A request with this key is being processed until then: a concurrent one gets 409.
    busy_until_ms: i64,
}

struct State {
    rng: Rng,
    plan: FaultPlan,
    script: VecDeque<Scripted>,
    lookup_script: VecDeque<bool>,
    keys: HashMap<String, KeyEntry>,
    effects: Vec<Effect>,
    by_intent: HashMap<String, Vec<usize>>,
    requests: u64,
    lookups: u64,
    /// Added to the clock: lets tests jump past the key window.
    skew_ms: i64,
}

/// The fake provider. Share it with `Arc`.
pub struct FakeProvider {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl FakeProvider {
    pub fn new(seed: u64, plan: FaultPlan, clock: Arc<dyn Clock>) -> FakeProvider {
        FakeProvider {
            state: Mutex::new(State {
                rng: Rng::new(seed),
                plan,
                script: VecDeque::new(),
                lookup_script: VecDeque::new(),
                keys: HashMap::new(),
                effects: Vec::new(),
                by_intent: HashMap::new(),
                requests: 0,
                lookups: 0,
                skew_ms: 0,
            }),
            clock,
        }
    }

    /// Forces the shapes of the next requests, in order, before random ones resume.
    pub fn script(&self, shapes: impl IntoIterator<Item = Scripted>) {
        self.lock().script.extend(shapes);
    }

    /// Forces the next lookups to fail (`false`) or answer (`true`).
    pub fn script_lookups(&self, answers: impl IntoIterator<Item = bool>) {
        self.lock().lookup_script.extend(answers);
    }

    pub fn set_plan(&self, plan: FaultPlan) {
        self.lock().plan = plan;
    }

    /// Moves the provider's clock forward (to let it forget keys).
    pub fn advance(&self, by: Duration) {
        self.lock().skew_ms += by.as_millis() as i64;
    }

    /// Every effect, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.lock().effects.clone()
    }

    /// Effects recorded for one intent key.
    pub fn effect_count(&self, intent_key: &str) -> usize {
        self.lock().by_intent.get(intent_key).map_or(0, Vec::len)
    }

    /// Requests received (including those not processed and never sent).
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    pub fn lookups(&self) -> u64 {
        self.lock().lookups
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("fake provider lock")
    }

    /// Decides and applies one request; returns what the caller will see and when.
    fn process(&self, call: &UpstreamCall<'_>) -> (UpstreamObservation, Duration) {
        let now_ms = self.clock.now_ms();
        let mut state = self.lock();
        let state = &mut *state;
        state.requests += 1;
        let now_ms = now_ms + state.skew_ms;
        let scripted = state.script.pop_front();
        let plan = state.plan.clone();
        let (shape, commit) = match scripted {
            Some(scripted) => (scripted.shape, scripted.commit),
            None => {
                let shape = draw_shape(&mut state.rng, &plan);
                (shape, state.rng.chance(plan.commit_when_ambiguous))
            }
        };
        let latency = state.rng.between(plan.latency_min, plan.latency_max);
        let retry_after_ms = Some(plan.retry_after.as_millis() as u64);
        // Shapes that never reach the idempotency layer.
        match shape {
            Shape::NotSent => {
                return (
                    UpstreamObservation::NotSent {
                        reason: "connection refused".into(),
                    },
                    Duration::ZERO,
                );
            }
            Shape::RateLimited => {
                return (
                    response(
                        429,
                        retry_after_ms,
                        json!({"error": {"message": "rate limited"}}),
                    ),
                    latency,
                );
            }
            Shape::Unavailable => {
                return (
                    response(
                        503,
                        retry_after_ms,
                        json!({"error": {"message": "maintenance"}}),
                    ),
                    latency,
                );
            }
            _ => {}
        }
        let parameters = fingerprint(call.arguments).as_str().to_owned();
        if let Some(key) = call.idempotency_key {
            let window_ms = KEY_WINDOW.as_millis() as i64;
            if let Some(entry) = state
                .keys
                .get(key)
                .filter(|entry| now_ms - entry.created_ms < window_ms)
            {
                if entry.parameters != parameters {
                    let body = json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters they were first used with."}});
                    return (response(400, None, body), latency);
                }
                if entry.busy_until_ms > now_ms {
                    let body = json!({"error": {"type": "idempotency_error", "message": "A request with this key is in progress."}});
                    return (response(409, None, body), latency);
                }
                if let Some((status, body)) = &entry.response {
                    // Replayed: no new effect, though the way back can still fail.
                    let replay = response(*status, None, body.clone());
                    return (transport(shape, replay), latency);
                }
            }
        }
        let committed = match shape {
            Shape::Ok => true,
            Shape::Reject => false,
            _ => commit,
        };
        let stored = if committed {
            let id = format!("re_{:06}", state.effects.len() + 1);
            if let Some(intent_key) = call.intent_key {
                state
                    .by_intent
                    .entry(intent_key.to_owned())
                    .or_default()
                    .push(state.effects.len());
            }
            let body = json!({"id": id, "object": "refund", "status": "succeeded", "metadata": {"intent_key": call.intent_key}});
            state.effects.push(Effect {
                id,
                tool: call.tool.name.clone(),
                intent_key: call.intent_key.map(str::to_owned),
                idempotency_key: call.idempotency_key.map(str::to_owned),
                attempt: call.attempt,
                arguments: call.arguments.clone(),
                at_ms: now_ms,
            });
            Some((200, body))
        } else if shape == Shape::Reject {
            Some((
                402,
                json!({"error": {"type": "card_error", "message": "Your card was declined."}}),
            ))
        } else {
            None
        };
        let stored = match shape {
            Shape::ServerError(status) => {
                Some((status, json!({"error": {"message": "internal error"}})))
            }
            _ => stored,
        };
        let answer = stored
            .clone()
            .map(|(status, body)| response(status, None, body));
        if let Some(key) = call.idempotency_key {
            state.keys.insert(
                key.to_owned(),
                KeyEntry {
                    parameters,
                    response: stored,
                    created_ms: now_ms,
                    busy_until_ms: now_ms + latency.as_millis() as i64,
                },
            );
        }
        let observation = answer.unwrap_or(UpstreamObservation::Timeout);
        (transport(shape, observation), latency)
    }
}

/// What the transport does to a response on the way back.
fn transport(shape: Shape, answer: UpstreamObservation) -> UpstreamObservation {
    match shape {
        Shape::Timeout => UpstreamObservation::Timeout,
        Shape::Dropped => UpstreamObservation::Dropped {
            reason: "connection reset after the request was sent".into(),
        },
        _ => answer,
    }
}

fn response(status: u16, retry_after_ms: Option<u64>, body: Value) -> UpstreamObservation {
    UpstreamObservation::Response {
        status,
        retry_after_ms,
        body,
    }
}

fn draw_shape(rng: &mut Rng, plan: &FaultPlan) -> Shape {
    let roll = rng.below(1000) as u32;
    let table = [
        (plan.reject, Shape::Reject),
        (plan.rate_limited, Shape::RateLimited),
        (plan.unavailable, Shape::Unavailable),
        (plan.not_sent, Shape::NotSent),
        (plan.timeout, Shape::Timeout),
        (plan.dropped, Shape::Dropped),
        (plan.server_error, Shape::ServerError(0)),
    ];
    let mut threshold = 0;
    for (weight, shape) in table {
        threshold += weight;
        if roll < threshold {
            if shape == Shape::ServerError(0) {
                return Shape::ServerError([500, 502, 503, 504][rng.below(4) as usize]);
            }
            return shape;
        }
    }
    Shape::Ok
}

#[async_trait]
impl Upstream for FakeProvider {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        let (observation, latency) = self.process(&call);
        if observation == UpstreamObservation::Timeout {
            // Hold the caller past its timeout; the gate's own timer ends the wait.
            tokio::time::sleep(call.timeout + latency + Duration::from_millis(1)).await;
        } else {
            tokio::time::sleep(latency).await;
        }
        observation
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let (answer, latency) = {
            let mut state = self.lock();
            state.lookups += 1;
            let plan = state.plan.clone();
            let answers = match state.lookup_script.pop_front() {
                Some(answers) => answers,
                None => !state.rng.chance(plan.lookup_failure),
            };
            let latency = state.rng.between(plan.latency_min, plan.latency_max);
            let answer = if !answers {
                LookupOutcome::Failed("the provider did not answer the lookup".into())
            } else {
                match call
                    .intent_key
                    .and_then(|key| state.by_intent.get(key))
                    .and_then(|found| found.first())
                {
                    Some(&index) => {
                        let effect = &state.effects[index];
                        LookupOutcome::Found {
                            external_id: Some(effect.id.clone()),
                            result: json!({"id": effect.id, "object": "refund", "status": "succeeded", "metadata": {"intent_key": effect.intent_key}}),
                        }
                    }
                    None => LookupOutcome::NotFound,
                }
            };
            (answer, latency)
        };
        tokio::time::sleep(latency).await;
        answer
    }
}

//! The provider's model, independent of any transport: a request in, a decision out.
//!
//! Both faces of the mock provider share it: [`crate::FakeProvider`] (the in-process
//! `Upstream` of the simulation tests) and [`crate::MockProvider`] (the HTTP server). It
//! holds what a real payments provider holds (the idempotency-key store, the effect log and
//! its indexes) plus what only a fake has: the seeded generator, the fault plan and the
//! scripts that override it. It never sleeps and never does I/O; it says what the caller
//! should see ([`UpstreamObservation`]) and after how long, and the transport acts it out.
//!
//! The order of draws from the generator is part of the contract "same seed and same
//! requests, same faults": for a side effect, the shape (and for a server error its
//! status), then whether an ambiguous shape committed, then the latency; for a lookup,
//! whether it fails, then the latency. The plan's `first_timeouts_per_key` draws nothing: it
//! is a count per key, so turning it on or off never shifts the draws of other requests.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use intentgate_core::UpstreamObservation;
use intentgate_core::fingerprint::fingerprint;
use intentgate_gate::Clock;
use serde_json::{Map, Value, json};

use crate::FaultPlan;
use crate::rng::Rng;

/// How long the provider remembers an idempotency key (Stripe: at least 24 hours).
pub const KEY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Most effects kept in the log. Every effect is kept until a reset (it is the ground truth
/// of exactly-once checks, so none may be evicted); this bounds the memory of a long demo at
/// a few gigabytes. When full, a request that would commit is refused with 507.
pub const EFFECTS_MAX: usize = 10_000_000;

/// Most idempotency keys remembered inside the key window. Keys older than the window are
/// purged as new ones arrive; when the window alone holds this many, a request with a new key
/// is refused with 507 before anything happens.
pub const KEYS_MAX: usize = 10_000_000;

/// Longest latency drawn: the log-normal tail is unbounded, a held connection must not be.
pub const LATENCY_MAX: Duration = Duration::from_secs(10 * 60);

/// z-score of the 95th percentile of a standard normal: turns a p95 into a log-normal sigma.
const Z_95: f64 = 1.644_853_626_951_472_2;

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
    /// Connection refused before the request was sent: not processed. (The HTTP server can't
    /// refuse a connection it accepted: a scripted `NotSent` cuts it without processing.)
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

/// The kinds of side effect the provider performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EffectKind {
    Refund,
    Charge,
    Email,
    /// A Stripe PaymentIntent (the Stripe dialect's charge of a card).
    PaymentIntent,
}

impl EffectKind {
    pub const ALL: [EffectKind; 4] = [
        EffectKind::Refund,
        EffectKind::Charge,
        EffectKind::Email,
        EffectKind::PaymentIntent,
    ];

    /// The `object` field of its JSON form: `refund`.
    pub fn object(self) -> &'static str {
        match self {
            EffectKind::Refund => "refund",
            EffectKind::Charge => "charge",
            EffectKind::Email => "email",
            EffectKind::PaymentIntent => "payment_intent",
        }
    }

    /// The collection in paths and stats: `refunds`.
    pub fn plural(self) -> &'static str {
        match self {
            EffectKind::Refund => "refunds",
            EffectKind::Charge => "charges",
            EffectKind::Email => "emails",
            EffectKind::PaymentIntent => "payment_intents",
        }
    }

    /// The prefix of its ids: `re_000001`.
    pub fn id_prefix(self) -> &'static str {
        match self {
            EffectKind::Refund => "re_",
            EffectKind::Charge => "ch_",
            EffectKind::Email => "em_",
            EffectKind::PaymentIntent => "pi_",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The sequence number in an id of this kind (`re_000042` is 42), if it is one.
    pub fn sequence_of(self, id: &str) -> Option<usize> {
        let digits = id.strip_prefix(self.id_prefix())?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().filter(|sequence| *sequence > 0)
    }
}

/// One real effect at the provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub id: String,
    pub kind: EffectKind,
    /// The tool that made it (in process), or the kind's object name (over HTTP).
    pub tool: String,
    /// The intent key the request carried as metadata (how the lookup finds it).
    pub intent_key: Option<String>,
    pub idempotency_key: Option<String>,
    /// The gate's attempt that made it (0 over HTTP, which does not carry it).
    pub attempt: u32,
    /// The request's parameters, normalised (amounts with two places over HTTP).
    pub arguments: Value,
    /// The object as the provider returns it: answers, replays, lookups and lists.
    pub object: Value,
    pub at_ms: i64,
}

/// How latency is drawn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Latency {
    /// Uniform between two bounds (the in-process plan).
    Uniform { min: Duration, max: Duration },
    /// Log-normal with this median and 95th percentile, times `scale` (the HTTP plan).
    LogNormal {
        p50: Duration,
        p95: Duration,
        scale: f64,
    },
}

impl Latency {
    fn draw(&self, rng: &mut Rng) -> Duration {
        match self {
            Latency::Uniform { min, max } => rng.between(*min, *max),
            Latency::LogNormal { p50, p95, scale } => {
                let median_ms = p50.as_secs_f64() * 1000.0;
                let sigma = if *p95 > *p50 && median_ms > 0.0 {
                    (p95.as_secs_f64() / p50.as_secs_f64()).ln() / Z_95
                } else {
                    0.0
                };
                // Always draw, so the sequence of faults does not depend on the latency.
                let z = rng.normal();
                let ms = median_ms * (sigma * z).exp() * scale;
                if !ms.is_finite() || ms <= 0.0 {
                    return Duration::ZERO;
                }
                Duration::from_millis(ms.round() as u64).min(LATENCY_MAX)
            }
        }
    }
}

/// What the model draws from, whichever face's plan it came from: the odds of a
/// [`FaultPlan`] (the HTTP face's plan translated into one), and the face's latency.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub faults: FaultPlan,
    /// What every answer's latency is drawn from. The HTTP face's is log-normal, so the
    /// uniform bounds of `faults` are not read here.
    pub latency: Latency,
}

/// A side-effecting request, already validated and normalised by the transport.
#[derive(Debug)]
pub(crate) struct EffectRequest<'a> {
    pub kind: EffectKind,
    pub tool: &'a str,
    /// What the idempotency check compares (by fingerprint) and the effect log keeps.
    pub parameters: &'a Value,
    /// The object to return on success, without its `id` (the model adds it).
    pub object: Map<String, Value>,
    pub idempotency_key: Option<&'a str>,
    pub intent_key: Option<&'a str>,
    pub attempt: u32,
    /// Whether the object shows the key it was made under (`idempotency_key`). Stripe's
    /// objects don't: a caller keeps the key in metadata.
    pub echo_key: bool,
}

/// What the model decided for one side-effecting request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// What the caller will see. `Timeout` means no answer (the transport holds it).
    pub reply: UpstreamObservation,
    /// How long before the reply (not used for `Timeout`, which has its own hold).
    pub latency: Duration,
    /// The reply is the answer stored for the idempotency key, not a new one.
    pub replayed: bool,
}

/// A lookup's draw: does it answer, and after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LookupDraw {
    pub answers: bool,
    pub latency: Duration,
}

/// Filters of a list; every one that is set must match.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListFilter {
    pub intent_key: Option<String>,
    /// The idempotency key the effect was made under.
    pub idempotency_key: Option<String>,
    /// A top-level string field of the object and the value it must have (`order_id`).
    pub field: Option<(&'static str, String)>,
    pub created_gte_ms: Option<i64>,
    pub created_lt_ms: Option<i64>,
    /// Start after this sequence number of the kind (from `starting_after`): the newer
    /// ones, or with `newest_first` the older ones.
    pub after_sequence: usize,
    /// Newest first, as Stripe lists (the mock's own lists are oldest first).
    pub newest_first: bool,
}

/// One page of a list.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    pub data: Vec<Value>,
    pub has_more: bool,
}

/// What a stored key replays.
#[derive(Debug, Clone)]
enum Stored {
    /// The success that made this effect (an index into the log: replays can't drift).
    Effect(usize),
    /// Any other stored answer: a rejection or a server error.
    Response(u16, Value),
}

struct KeyEntry {
    /// Fingerprint of the first request's parameters.
    parameters: String,
    /// The stored response, replayed for repeats. `None` when the request neither
    /// committed nor answered (a timeout or drop that did not commit): a repeat is processed.
    response: Option<Stored>,
    created_ms: i64,
    /// A request with this key is being processed until then: a concurrent one gets 409.
    busy_until_ms: i64,
}

/// How many requests with one idempotency key the `first_timeouts_per_key` fault timed out.
/// Kept apart from [`KeyEntry`]: those timeouts store nothing for the key (a key with an
/// entry replays or refuses), yet the count must outlive them.
struct FirstTimeouts {
    served: u32,
    /// When the key was first counted: the count is forgotten with the key window.
    created_ms: i64,
}

/// The provider's state. Callers keep it behind one mutex and never hold that across an
/// await.
pub(crate) struct Model {
    clock: Arc<dyn Clock>,
    /// Added to the clock: `/admin/clock` and `advance` move it forward.
    skew_ms: i64,
    rng: Rng,
    plan: Plan,
    script: VecDeque<Scripted>,
    lookup_script: VecDeque<bool>,
    keys: HashMap<String, KeyEntry>,
    /// Keys in the order they were stored, to purge the ones older than the window.
    key_order: VecDeque<(i64, String)>,
    /// Counts of the `first_timeouts_per_key` fault, bounded like `keys`: forgotten after the
    /// key window, at most [`KEYS_MAX`] inside it. Empty while the fault is off.
    first_timeouts: HashMap<String, FirstTimeouts>,
    /// Keys in the order they were first counted, to purge the ones older than the window.
    first_timeout_order: VecDeque<(i64, String)>,
    effects: Vec<Effect>,
    /// Indexes into `effects`, one list per kind in id order: sequence `n` is at `n - 1`.
    by_kind: [Vec<usize>; 4],
    by_intent: HashMap<String, Vec<usize>>,
    /// Effects by the idempotency key they were made under (the gateway's provider key).
    by_idempotency_key: HashMap<String, Vec<usize>>,
    /// Refunds by their `order_id`.
    by_order: HashMap<String, Vec<usize>>,
    requests: u64,
    lookups: u64,
    reads: u64,
}

impl Model {
    pub fn new(seed: u64, plan: Plan, clock: Arc<dyn Clock>) -> Model {
        Model {
            clock,
            skew_ms: 0,
            rng: Rng::new(seed),
            plan,
            script: VecDeque::new(),
            lookup_script: VecDeque::new(),
            keys: HashMap::new(),
            key_order: VecDeque::new(),
            first_timeouts: HashMap::new(),
            first_timeout_order: VecDeque::new(),
            effects: Vec::new(),
            by_kind: [Vec::new(), Vec::new(), Vec::new(), Vec::new()],
            by_intent: HashMap::new(),
            by_idempotency_key: HashMap::new(),
            by_order: HashMap::new(),
            requests: 0,
            lookups: 0,
            reads: 0,
        }
    }

    /// The provider's clock: the injected clock plus every advance.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms() + self.skew_ms
    }

    pub fn advance(&mut self, by: Duration) {
        self.skew_ms = self
            .skew_ms
            .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    pub fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    pub fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    pub fn script(&mut self, shapes: impl IntoIterator<Item = Scripted>) {
        self.script.extend(shapes);
    }

    pub fn script_lookups(&mut self, answers: impl IntoIterator<Item = bool>) {
        self.lookup_script.extend(answers);
    }

    /// Forgets every effect, key, count and script; keeps the plan, the clock and the
    /// generator's position (the caller re-seeds it if it wants a replay).
    pub fn reset(&mut self) {
        self.script.clear();
        self.lookup_script.clear();
        self.keys.clear();
        self.key_order.clear();
        self.first_timeouts.clear();
        self.first_timeout_order.clear();
        self.effects.clear();
        self.by_kind = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        self.by_intent.clear();
        self.by_idempotency_key.clear();
        self.by_order.clear();
        self.requests = 0;
        self.lookups = 0;
        self.reads = 0;
    }

    pub fn effects(&self) -> &[Effect] {
        &self.effects
    }

    pub fn effect_count(&self, intent_key: &str) -> usize {
        self.by_intent.get(intent_key).map_or(0, Vec::len)
    }

    /// Effect counts by intent key (only effects that carried one).
    pub fn by_intent(&self) -> impl Iterator<Item = (&str, usize)> {
        self.by_intent
            .iter()
            .map(|(key, found)| (key.as_str(), found.len()))
    }

    /// Refund counts by order id.
    pub fn by_order(&self) -> impl Iterator<Item = (&str, usize)> {
        self.by_order
            .iter()
            .map(|(order, found)| (order.as_str(), found.len()))
    }

    pub fn count_of(&self, kind: EffectKind) -> usize {
        self.by_kind[kind.index()].len()
    }

    /// The error status stored for `idempotency_key` and replayed to its repeats inside the
    /// key window, if any.
    pub fn replayed_error(&self, idempotency_key: &str) -> Option<u16> {
        let window_ms = KEY_WINDOW.as_millis() as i64;
        let now_ms = self.now_ms();
        let entry = self
            .keys
            .get(idempotency_key)
            .filter(|entry| now_ms - entry.created_ms < window_ms)?;
        match entry.response {
            Some(Stored::Response(status, _)) if status >= 500 => Some(status),
            _ => None,
        }
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn lookups(&self) -> u64 {
        self.lookups
    }

    pub fn reads(&self) -> u64 {
        self.reads
    }

    pub fn count_read(&mut self) {
        self.reads += 1;
    }

    /// The first effect made under an idempotency key (the gateway's provider key, scoped by
    /// tenant and tool): what a lookup finds.
    pub fn first_for_idempotency_key(&self, idempotency_key: &str) -> Option<&Effect> {
        let index = *self.by_idempotency_key.get(idempotency_key)?.first()?;
        Some(&self.effects[index])
    }

    /// One effect by its id.
    pub fn effect(&self, kind: EffectKind, id: &str) -> Option<&Effect> {
        let sequence = kind.sequence_of(id)?;
        let index = *self.by_kind[kind.index()].get(sequence - 1)?;
        Some(&self.effects[index]).filter(|effect| effect.id == id)
    }

    /// The object of one effect, to change in place (a PaymentIntent cancelled): lists,
    /// lookups and replays show it as it is now.
    pub fn effect_object_mut(&mut self, kind: EffectKind, id: &str) -> Option<&mut Value> {
        let sequence = kind.sequence_of(id)?;
        let index = *self.by_kind[kind.index()].get(sequence - 1)?;
        let effect = self.effects.get_mut(index)?;
        (effect.id == id).then_some(&mut effect.object)
    }

    /// Effects of a kind that match `filter`, oldest first, at most `limit`.
    pub fn list(&self, kind: EffectKind, filter: &ListFilter, limit: usize) -> Page {
        // Narrow by the most selective index available, then check every filter.
        let candidates: Box<dyn Iterator<Item = usize> + '_> = if filter.newest_first {
            let indexes: &[usize] = match &filter.field {
                Some(("payment_intent", payment_intent)) if kind == EffectKind::Refund => {
                    self.by_order.get(payment_intent).map_or(&[], Vec::as_slice)
                }
                _ => &self.by_kind[kind.index()],
            };
            Box::new(indexes.iter().rev().copied())
        } else {
            match (&filter.intent_key, &filter.field) {
                _ if filter.idempotency_key.is_some() => Box::new(
                    self.by_idempotency_key
                        .get(filter.idempotency_key.as_deref().unwrap_or_default())
                        .into_iter()
                        .flatten()
                        .copied(),
                ),
                (Some(key), _) => Box::new(self.by_intent.get(key).into_iter().flatten().copied()),
                (None, Some(("order_id", order))) if kind == EffectKind::Refund => {
                    Box::new(self.by_order.get(order).into_iter().flatten().copied())
                }
                _ => Box::new(
                    self.by_kind[kind.index()]
                        .iter()
                        .skip(filter.after_sequence)
                        .copied(),
                ),
            }
        };
        let mut data = Vec::new();
        let mut has_more = false;
        for index in candidates {
            let effect = &self.effects[index];
            if !self.matches(kind, effect, filter) {
                continue;
            }
            if data.len() == limit {
                has_more = true;
                break;
            }
            data.push(effect.object.clone());
        }
        Page { data, has_more }
    }

    fn matches(&self, kind: EffectKind, effect: &Effect, filter: &ListFilter) -> bool {
        effect.kind == kind
            && kind.sequence_of(&effect.id).is_some_and(|sequence| {
                if !filter.newest_first {
                    sequence > filter.after_sequence
                } else {
                    filter.after_sequence == 0 || sequence < filter.after_sequence
                }
            })
            && filter
                .intent_key
                .as_deref()
                .is_none_or(|key| effect.intent_key.as_deref() == Some(key))
            && filter
                .idempotency_key
                .as_deref()
                .is_none_or(|key| effect.idempotency_key.as_deref() == Some(key))
            && filter.field.as_ref().is_none_or(|(name, value)| {
                effect.object.get(*name).and_then(Value::as_str) == Some(value.as_str())
            })
            && filter.created_gte_ms.is_none_or(|gte| effect.at_ms >= gte)
            && filter.created_lt_ms.is_none_or(|lt| effect.at_ms < lt)
    }

    /// Draws whether a lookup (or a list) answers, and its latency.
    pub fn draw_lookup(&mut self) -> LookupDraw {
        self.lookups += 1;
        let answers = match self.lookup_script.pop_front() {
            Some(answers) => answers,
            None => !self.rng.chance(self.plan.faults.lookup_failure),
        };
        let latency = self.plan.latency.draw(&mut self.rng);
        LookupDraw { answers, latency }
    }

    /// Decides and applies one side-effecting request. An effect drawn as committed is in
    /// the log when this returns, whatever the caller will see.
    pub fn side_effect(&mut self, request: EffectRequest<'_>) -> Decision {
        let now_ms = self.now_ms();
        self.requests += 1;
        self.purge_keys(now_ms);
        // Before the script and the draws, and consuming neither: the provider is down for
        // this key's first requests whatever the seed.
        if let Some(key) = request.idempotency_key
            && let Some(decision) = self.first_timeout(key, now_ms)
        {
            return decision;
        }
        let (shape, commit) = self.next_shape();
        let latency = self.plan.latency.draw(&mut self.rng);
        if let Some(decision) = self.refused_before_keys(shape, latency) {
            return decision;
        }
        let parameters = fingerprint(request.parameters).as_str().to_owned();
        if let Some(key) = request.idempotency_key
            && let Some(decision) = self.answered_by_key(key, &parameters, shape, latency, now_ms)
        {
            return decision;
        }
        let decided = |reply| Decision {
            reply,
            latency,
            replayed: false,
        };
        let committed = match shape {
            Shape::Ok => true,
            Shape::Reject => false,
            _ => commit,
        };
        if committed && self.effects.len() >= EFFECTS_MAX {
            return decided(full(format!(
                "The provider keeps at most {EFFECTS_MAX} effects; reset it."
            )));
        }
        let mut stored = if committed {
            Some(Stored::Effect(self.commit(request.kind, &request, now_ms)))
        } else if shape == Shape::Reject {
            Some(Stored::Response(402, decline()))
        } else {
            None
        };
        if let Shape::ServerError(status) = shape {
            stored = Some(Stored::Response(
                status,
                error_body("api_error", "An internal error occurred."),
            ));
        }
        let answer = stored.as_ref().map(|stored| self.stored_response(stored));
        if let Some(key) = request.idempotency_key {
            self.keys.insert(
                key.to_owned(),
                KeyEntry {
                    parameters,
                    response: stored,
                    created_ms: now_ms,
                    busy_until_ms: now_ms.saturating_add(latency.as_millis() as i64),
                },
            );
            self.key_order.push_back((now_ms, key.to_owned()));
        }
        let observation = answer.unwrap_or(UpstreamObservation::Timeout);
        decided(transport(shape, observation))
    }

    /// The next request's shape and whether an ambiguous one commits: scripted, or drawn.
    fn next_shape(&mut self) -> (Shape, bool) {
        match self.script.pop_front() {
            Some(scripted) => (scripted.shape, scripted.commit),
            None => {
                let shape = draw_shape(&mut self.rng, &self.plan.faults);
                (
                    shape,
                    self.rng.chance(self.plan.faults.commit_when_ambiguous),
                )
            }
        }
    }

    /// The answer of the shapes that never reach the idempotency layer: not sent, rate
    /// limited, unavailable; `None` for the others.
    fn refused_before_keys(&self, shape: Shape, latency: Duration) -> Option<Decision> {
        let retry_after_ms = Some(self.plan.faults.retry_after.as_millis() as u64);
        let reply = match shape {
            Shape::NotSent => {
                return Some(Decision {
                    reply: UpstreamObservation::NotSent {
                        reason: "connection refused".into(),
                    },
                    latency: Duration::ZERO,
                    replayed: false,
                });
            }
            Shape::RateLimited => response(
                429,
                retry_after_ms,
                error_body("rate_limit_error", "Too many requests; retry later."),
            ),
            Shape::Unavailable => response(
                503,
                retry_after_ms,
                error_body(
                    "api_error",
                    "The service is down for maintenance; retry later.",
                ),
            ),
            _ => return None,
        };
        Some(Decision {
            reply,
            latency,
            replayed: false,
        })
    }

    /// The idempotency layer's answer for a key it remembers within its window: refused for
    /// other parameters or while the first request runs, else the stored answer replayed.
    /// For a new key, refused when the provider remembers too many. `None`: process anew.
    fn answered_by_key(
        &self,
        key: &str,
        parameters: &str,
        shape: Shape,
        latency: Duration,
        now_ms: i64,
    ) -> Option<Decision> {
        let decided = |reply| Decision {
            reply,
            latency,
            replayed: false,
        };
        let window_ms = KEY_WINDOW.as_millis() as i64;
        let Some(entry) = self
            .keys
            .get(key)
            .filter(|entry| now_ms - entry.created_ms < window_ms)
        else {
            return (self.key_order.len() >= KEYS_MAX).then(|| {
                decided(full(format!(
                    "The provider remembers at most {KEYS_MAX} idempotency keys within its key window; reset it or move its clock."
                )))
            });
        };
        if entry.parameters != parameters {
            return Some(decided(response(
                400,
                None,
                error_body(
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                ),
            )));
        }
        if entry.busy_until_ms > now_ms {
            return Some(decided(response(
                409,
                None,
                error_body(
                    "idempotency_error",
                    "A request with this idempotency key is in progress.",
                ),
            )));
        }
        // Replayed: no new effect, though the way back can still fail.
        entry.response.as_ref().map(|stored| Decision {
            replayed: true,
            ..decided(transport(shape, self.stored_response(stored)))
        })
    }

    /// The provider's answer stored for a key: the effect's object, or a refusal.
    fn stored_response(&self, stored: &Stored) -> UpstreamObservation {
        match stored {
            Stored::Effect(index) => response(200, None, self.effects[*index].object.clone()),
            Stored::Response(status, body) => response(*status, None, body.clone()),
        }
    }

    /// The `first_timeouts_per_key` fault for one request with this key: a timeout that did
    /// not commit (nothing is stored for the key, so a later request is processed anew) while
    /// the key has had fewer than that many, `None` once it has had them all.
    fn first_timeout(&mut self, key: &str, now_ms: i64) -> Option<Decision> {
        let first = self.plan.faults.first_timeouts_per_key;
        if first == 0 {
            return None;
        }
        let window_ms = KEY_WINDOW.as_millis() as i64;
        let count = match self
            .first_timeouts
            .get_mut(key)
            .filter(|count| now_ms - count.created_ms < window_ms)
        {
            Some(count) => count,
            None => {
                if self.first_timeout_order.len() >= KEYS_MAX {
                    return Some(Decision {
                        reply: full(format!(
                            "The provider counts the first timeouts of at most {KEYS_MAX} idempotency keys within its key window; reset it or move its clock."
                        )),
                        latency: Duration::ZERO,
                        replayed: false,
                    });
                }
                self.first_timeout_order.push_back((now_ms, key.to_owned()));
                self.first_timeouts
                    .entry(key.to_owned())
                    .insert_entry(FirstTimeouts {
                        served: 0,
                        created_ms: now_ms,
                    })
                    .into_mut()
            }
        };
        if count.served >= first {
            return None;
        }
        count.served += 1;
        // No latency drawn: the caller's own timeout (or the HTTP face's hold) is the wait.
        Some(Decision {
            reply: UpstreamObservation::Timeout,
            latency: Duration::ZERO,
            replayed: false,
        })
    }

    /// Appends the effect to the log and its indexes; returns its index.
    fn commit(&mut self, kind: EffectKind, request: &EffectRequest<'_>, now_ms: i64) -> usize {
        let index = self.effects.len();
        let sequence = self.by_kind[kind.index()].len() + 1;
        let id = format!("{}{sequence:06}", kind.id_prefix());
        let mut object = request.object.clone();
        object.insert("id".into(), Value::String(id.clone()));
        // The key the effect was made under, as the object shows it: what a lookup proves
        // an effect by (some providers echo it; others keep it only where the caller put
        // it, in metadata).
        if request.echo_key {
            object.insert(
                "idempotency_key".into(),
                request
                    .idempotency_key
                    .map_or(Value::Null, |key| Value::String(key.to_owned())),
            );
        }
        if let Some(key) = request.idempotency_key {
            self.by_idempotency_key
                .entry(key.to_owned())
                .or_default()
                .push(index);
        }
        if let Some(intent_key) = request.intent_key {
            self.by_intent
                .entry(intent_key.to_owned())
                .or_default()
                .push(index);
        }
        // Refunds by order, or by payment intent in the Stripe dialect.
        if kind == EffectKind::Refund
            && let Some(order) = ["order_id", "payment_intent"]
                .iter()
                .find_map(|name| request.parameters.get(*name).and_then(Value::as_str))
        {
            self.by_order
                .entry(order.to_owned())
                .or_default()
                .push(index);
        }
        self.by_kind[kind.index()].push(index);
        self.effects.push(Effect {
            id,
            kind,
            tool: request.tool.to_owned(),
            intent_key: request.intent_key.map(str::to_owned),
            idempotency_key: request.idempotency_key.map(str::to_owned),
            attempt: request.attempt,
            arguments: request.parameters.clone(),
            object: Value::Object(object),
            at_ms: now_ms,
        });
        index
    }

    /// Forgets keys stored (and first-timeout counts started) longer ago than the window.
    fn purge_keys(&mut self, now_ms: i64) {
        let window_ms = KEY_WINDOW.as_millis() as i64;
        while let Some((created_ms, _)) = self.key_order.front() {
            if now_ms - *created_ms < window_ms {
                break;
            }
            let (created_ms, key) = self.key_order.pop_front().expect("front exists");
            // A key stored again later has a newer entry: only the one from then goes.
            if self
                .keys
                .get(&key)
                .is_some_and(|entry| entry.created_ms == created_ms)
            {
                self.keys.remove(&key);
            }
        }
        while let Some((created_ms, _)) = self.first_timeout_order.front() {
            if now_ms - *created_ms < window_ms {
                break;
            }
            let (created_ms, key) = self.first_timeout_order.pop_front().expect("front exists");
            if self
                .first_timeouts
                .get(&key)
                .is_some_and(|count| count.created_ms == created_ms)
            {
                self.first_timeouts.remove(&key);
            }
        }
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
        signals: Default::default(),
    }
}

/// A Stripe-like error body.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "message": message}})
}

/// 507: a bound of the mock itself was reached; nothing happened.
fn full(message: String) -> UpstreamObservation {
    response(507, None, error_body("api_error", &message))
}

/// The stored refusal of a `reject` shape: a decline, whatever the kind (a card processor's
/// words, as the in-process fake always answered).
fn decline() -> Value {
    error_body("card_error", "Your card was declined.")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_normal_latency_has_the_configured_median_and_p95() {
        let latency = Latency::LogNormal {
            p50: Duration::from_millis(300),
            p95: Duration::from_millis(4800),
            scale: 1.0,
        };
        let mut rng = Rng::new(42);
        let mut draws: Vec<u128> = (0..20_000)
            .map(|_| latency.draw(&mut rng).as_millis())
            .collect();
        draws.sort_unstable();
        let (p50, p95) = (draws[10_000], draws[19_000]);
        assert!((270..=330).contains(&p50), "p50 {p50}");
        assert!((4_200..=5_400).contains(&p95), "p95 {p95}");
    }

    #[test]
    fn latency_scale_multiplies_and_equal_percentiles_are_constant() {
        let mut rng = Rng::new(1);
        let constant = Latency::LogNormal {
            p50: Duration::from_millis(500),
            p95: Duration::from_millis(500),
            scale: 0.1,
        };
        for _ in 0..100 {
            assert_eq!(constant.draw(&mut rng), Duration::from_millis(50));
        }
        let huge = Latency::LogNormal {
            p50: Duration::from_secs(3600),
            p95: Duration::from_secs(3600),
            scale: 100.0,
        };
        assert_eq!(huge.draw(&mut rng), LATENCY_MAX);
    }

    /// A clock that never moves: only `Model::advance` does.
    struct Fixed;

    impl Clock for Fixed {
        fn now_ms(&self) -> i64 {
            1_700_000_000_000
        }
    }

    fn model(faults: FaultPlan) -> Model {
        Model::new(7, Plan::from(&faults), Arc::new(Fixed))
    }

    fn refund<'a>(parameters: &'a Value, key: Option<&'a str>) -> EffectRequest<'a> {
        EffectRequest {
            kind: EffectKind::Refund,
            tool: "refund_order",
            parameters,
            object: Map::new(),
            idempotency_key: key,
            intent_key: parameters["intent_key"].as_str(),
            attempt: 1,
            echo_key: true,
        }
    }

    #[test]
    fn the_first_timeouts_of_a_key_commit_nothing_then_it_is_served_once() {
        let mut model = model(FaultPlan {
            first_timeouts_per_key: 3,
            ..FaultPlan::none()
        });
        let one = json!({"order_id": "o1", "intent_key": "i1"});
        for _ in 0..3 {
            let decision = model.side_effect(refund(&one, Some("k1")));
            assert_eq!(decision.reply, UpstreamObservation::Timeout);
        }
        assert!(model.effects().is_empty(), "a first timeout never commits");
        let fourth = model.side_effect(refund(&one, Some("k1"))).reply;
        assert!(
            matches!(&fourth, UpstreamObservation::Response { status: 200, body, .. } if body["id"] == "re_000001"),
            "{fourth:?}"
        );
        // The fifth replays the stored success: still one effect.
        assert_eq!(model.side_effect(refund(&one, Some("k1"))).reply, fourth);
        assert_eq!(model.effect_count("i1"), 1);
        // Another key has its own count; a request without a key is not counted.
        let two = json!({"order_id": "o2", "intent_key": "i2"});
        let decision = model.side_effect(refund(&two, Some("k2")));
        assert_eq!(decision.reply, UpstreamObservation::Timeout);
        let three = json!({"order_id": "o3", "intent_key": "i3"});
        let unkeyed = model.side_effect(refund(&three, None)).reply;
        assert!(
            matches!(unkeyed, UpstreamObservation::Response { status: 200, .. }),
            "{unkeyed:?}"
        );
        assert_eq!((model.effect_count("i2"), model.effect_count("i3")), (0, 1));
        assert_eq!(model.requests(), 7);
    }

    #[test]
    fn first_timeouts_draw_nothing_and_later_requests_are_drawn_as_usual() {
        // The same seed and stormy odds, with and without the fault: once a key's first
        // timeouts are over, its requests see exactly what they would have seen without them.
        let mut with = model(FaultPlan {
            first_timeouts_per_key: 2,
            ..FaultPlan::stormy()
        });
        let mut without = model(FaultPlan::stormy());
        for n in 0..200 {
            let parameters = json!({"order_id": format!("o{n}"), "intent_key": format!("i{n}")});
            let key = format!("k{n}");
            for _ in 0..2 {
                let decision = with.side_effect(refund(&parameters, Some(&key)));
                assert_eq!(decision.reply, UpstreamObservation::Timeout);
            }
            for _ in 0..3 {
                assert_eq!(
                    with.side_effect(refund(&parameters, Some(&key))),
                    without.side_effect(refund(&parameters, Some(&key)))
                );
            }
            assert_eq!(with.draw_lookup(), without.draw_lookup());
        }
        assert_eq!(with.effects(), without.effects());
    }

    #[test]
    fn first_timeout_counts_are_forgotten_with_the_key_window() {
        let mut model = model(FaultPlan {
            first_timeouts_per_key: 1,
            ..FaultPlan::none()
        });
        let one = json!({"order_id": "o1", "intent_key": "i1"});
        let timeout = UpstreamObservation::Timeout;
        assert_eq!(model.side_effect(refund(&one, Some("k1"))).reply, timeout);
        assert_ne!(model.side_effect(refund(&one, Some("k1"))).reply, timeout);
        assert_eq!(model.first_timeouts.len(), 1);
        model.advance(KEY_WINDOW);
        // The window forgot the key and its count: to the provider it is a new key.
        assert_eq!(model.side_effect(refund(&one, Some("k1"))).reply, timeout);
        assert_eq!(
            (model.first_timeouts.len(), model.first_timeout_order.len()),
            (1, 1)
        );
        model.reset();
        assert!(model.first_timeouts.is_empty() && model.first_timeout_order.is_empty());
    }

    #[test]
    fn ids_and_sequences_round_trip() {
        assert_eq!(EffectKind::Refund.sequence_of("re_000042"), Some(42));
        assert_eq!(
            EffectKind::Refund.sequence_of("re_1234567"),
            Some(1_234_567)
        );
        for bad in ["ch_000001", "re_", "re_00a1", "re_000000", "re_-1", "re_+1"] {
            assert_eq!(EffectKind::Refund.sequence_of(bad), None, "{bad}");
        }
    }
}

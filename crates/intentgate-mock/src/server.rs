//! The HTTP face of the provider: the API of `docs/mock-provider.md`, served with axum.
//!
//! [`MockProvider`] is the handle: it owns the shared [`crate::model`] (behind one mutex,
//! never held across an await), the HTTP fault plan and the updates of the read endpoints,
//! and lets tests and the demo read effect counts without HTTP. Its two other halves live
//! apart because they change for different reasons: `routes.rs` is the REST API (what a
//! request means, and how a fault's decision is acted out as a response), `connection.rs`
//! the accept loop ([`serve`], [`serve_provider`], [`MockServer`]), which is what turns a
//! response marked [`CutConnection`] into a connection closed without a byte.

mod connection;
mod routes;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use intentgate_gate::{Clock, SystemClock};
use serde_json::Value;

use crate::model::{EffectKind, Model, Plan, Scripted};
use crate::stripe::Dialect;
use crate::wire::{EffectCounts, EffectTotals, HttpFaultPlan, PlanError, Stats};

pub use connection::{
    CONNECTIONS_MAX, CutConnection, HEADER_READ_TIMEOUT, MockServer, SHUTDOWN_DRAIN_MAX, serve,
    serve_provider,
};
pub use routes::{
    BODY_BYTES_MAX, BODY_READ_TIMEOUT, CLOCK_ADVANCE_MS_MAX, HELP_QUERY_BYTES_MAX,
    LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, UPDATES_MAX,
};

/// How to start a provider.
#[derive(Clone)]
pub struct MockOptions {
    /// The fault plan, including the seed of the fault generator.
    pub plan: HttpFaultPlan,
    /// The provider's clock before any `/admin/clock` move: the wall clock by default, a
    /// `TokioClock` in tests with a paused runtime.
    pub clock: Arc<dyn Clock>,
    /// What the side effects speak: the mock's own JSON, or Stripe's v1 API (which adds
    /// `/v1/payment_intents`).
    pub dialect: Dialect,
}

impl Default for MockOptions {
    fn default() -> MockOptions {
        MockOptions {
            plan: HttpFaultPlan::default(),
            clock: Arc::new(SystemClock),
            dialect: Dialect::Json,
        }
    }
}

impl MockOptions {
    /// A plan on the wall clock.
    pub fn new(plan: HttpFaultPlan) -> MockOptions {
        MockOptions {
            plan,
            ..MockOptions::default()
        }
    }

    /// The same options, speaking `dialect`.
    pub fn with_dialect(self, dialect: Dialect) -> MockOptions {
        MockOptions { dialect, ..self }
    }
}

struct ProviderState {
    model: Model,
    /// The plan as it was set, answered by `GET /admin/faults`.
    plan: HttpFaultPlan,
    /// Ticket statuses set by `PUT /v1/tickets/{id}/status`.
    ticket_statuses: HashMap<String, String>,
    /// Addresses set by `PUT /v1/customers/{id}/address`.
    addresses: HashMap<String, Value>,
}

/// The HTTP mock provider's state. Share it with `Arc`; serve it with [`serve_provider`]
/// or [`MockServer`].
pub struct MockProvider {
    state: Mutex<ProviderState>,
    dialect: Dialect,
}

impl MockProvider {
    /// A provider with no effects, after checking the plan.
    pub fn new(options: MockOptions) -> Result<Arc<MockProvider>, PlanError> {
        options.plan.validate()?;
        let model = Model::new(options.plan.seed, Plan::from(&options.plan), options.clock);
        Ok(Arc::new(MockProvider {
            state: Mutex::new(ProviderState {
                model,
                plan: options.plan,
                ticket_statuses: HashMap::new(),
                addresses: HashMap::new(),
            }),
            dialect: options.dialect,
        }))
    }

    /// What the side effects speak.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Every effect, in order.
    pub fn effects(&self) -> Vec<crate::model::Effect> {
        self.lock().model.effects().to_vec()
    }

    /// Effects recorded for one intent key.
    pub fn effect_count(&self, intent_key: &str) -> usize {
        self.lock().model.effect_count(intent_key)
    }

    /// What `GET /admin/effects` answers: counts by intent key and order, duplicates.
    pub fn effect_counts(&self) -> EffectCounts {
        let state = self.lock();
        let model = &state.model;
        let by_intent_key: std::collections::BTreeMap<String, u64> = model
            .by_intent()
            .map(|(key, count)| (key.to_owned(), count as u64))
            .collect();
        let duplicates = by_intent_key
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(key, _)| key.clone())
            .collect();
        EffectCounts {
            total: model.effects().len() as u64,
            by_intent_key,
            duplicates,
            by_order: model
                .by_order()
                .map(|(order, count)| (order.to_owned(), count as u64))
                .collect(),
        }
    }

    /// What `GET /admin/stats` answers.
    pub fn stats(&self) -> Stats {
        let state = self.lock();
        let model = &state.model;
        Stats {
            requests: model.requests(),
            lookups: model.lookups(),
            reads: model.reads(),
            effects: EffectTotals {
                refunds: model.count_of(EffectKind::Refund) as u64,
                charges: model.count_of(EffectKind::Charge) as u64,
                emails: model.count_of(EffectKind::Email) as u64,
                payment_intents: model.count_of(EffectKind::PaymentIntent) as u64,
            },
        }
    }

    pub fn plan(&self) -> HttpFaultPlan {
        self.lock().plan.clone()
    }

    /// Replaces the plan and re-seeds the fault generator with its seed (so setting the
    /// same plan again replays the same faults).
    pub fn set_plan(&self, plan: HttpFaultPlan) -> Result<(), PlanError> {
        plan.validate()?;
        let mut state = self.lock();
        state.model.set_plan(Plan::from(&plan));
        state.model.reseed(plan.seed);
        state.plan = plan;
        Ok(())
    }

    /// Forces the shapes of the next side-effecting requests, before drawn ones resume.
    pub fn script(&self, shapes: impl IntoIterator<Item = Scripted>) {
        self.lock().model.script(shapes);
    }

    /// Forces the next lookups and lists to fail (`false`) or answer (`true`).
    pub fn script_lookups(&self, answers: impl IntoIterator<Item = bool>) {
        self.lock().model.script_lookups(answers);
    }

    /// Moves the provider's clock forward; keys older than the window are forgotten.
    pub fn advance_clock(&self, by: Duration) {
        self.lock().model.advance(by);
    }

    /// The provider's clock, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.lock().model.now_ms()
    }

    /// Forgets every effect, key, count, script and update, and re-seeds the generator with
    /// the plan's seed; keeps the plan and the clock.
    pub fn reset(&self) {
        let mut state = self.lock();
        let seed = state.plan.seed;
        state.model.reset();
        state.model.reseed(seed);
        state.ticket_statuses.clear();
        state.addresses.clear();
    }

    fn lock(&self) -> MutexGuard<'_, ProviderState> {
        self.state.lock().expect("mock provider lock")
    }
}

//! A fake payments provider, in process and over HTTP.
//!
//! It behaves like a payment API with Stripe-like idempotency keys: the first response
//! for a key is stored and replayed (a stored 500 included), the same key with other
//! parameters is refused, a concurrent request with the same key gets 409, and keys are
//! forgotten after a window. Every real effect is appended to an effect log, which is the
//! ground truth that exactly-once checks compare the gateway's ledger against.
//!
//! Faults are seeded. Each side-effecting request draws a [`Shape`], one per row of the
//! table in docs/design.md section 5, and for the ambiguous shapes whether the provider committed is drawn
//! independently of what the caller sees: that independence is what makes them ambiguous.
//! Tests can also script exact shapes.
//!
//! Two faces share one transport-independent model (`model.rs`: a request in, a decision
//! out):
//!
//! - [`FakeProvider`] (`fake.rs`): an in-process `Upstream` for the gate's tests and its
//!   deterministic simulation, with a [`FaultPlan`].
//! - [`MockProvider`] (`server.rs`): the HTTP API of `docs/mock-provider.md` (what
//!   `intentgate mock-provider` and the demo serve), with an [`HttpFaultPlan`] whose JSON
//!   is the contract's. Its wire types are in `wire.rs`, the synthetic data of its read
//!   endpoints in `synthetic.rs`, and its Stripe dialect of `/v1/refunds` and
//!   `/v1/payment_intents` ([`Dialect`]: form bodies, minor units, Stripe's lists) in
//!   `stripe.rs`.

mod fake;
mod model;
mod rng;
mod server;
mod stripe;
mod synthetic;
mod wire;

pub use fake::{FakeProvider, FaultPlan};
pub use model::{
    EFFECTS_MAX, Effect, EffectKind, KEY_WINDOW, KEYS_MAX, LATENCY_MAX, Scripted, Shape,
};
pub use rng::Rng;
pub use server::{
    BODY_BYTES_MAX, BODY_READ_TIMEOUT, CLOCK_ADVANCE_MS_MAX, CONNECTIONS_MAX, CutConnection,
    HEADER_READ_TIMEOUT, HELP_QUERY_BYTES_MAX, LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, MockOptions,
    MockProvider, MockServer, SHUTDOWN_DRAIN_MAX, UPDATES_MAX, serve, serve_provider,
};
pub use stripe::{
    CANCELLATION_REASONS, Dialect, METADATA_KEY_CHARS_MAX, METADATA_VALUE_CHARS_MAX,
    PAYMENT_METHOD_TYPES, REFUND_REASONS, STRIPE_AMOUNT_MAX, STRIPE_LIST_LIMIT_DEFAULT,
    STRIPE_LIST_LIMIT_MAX,
};
pub use synthetic::{HELP_RESULTS_MAX, TICKET_STATUSES};
pub use wire::{
    EffectCounts, EffectTotals, FIRST_TIMEOUTS_PER_KEY_MAX, HttpFaultPlan, ID_BYTES_MAX,
    LATENCY_MS_MAX, LATENCY_SCALE_MAX, METADATA_ENTRIES_MAX, PER_THOUSAND, PlanError,
    RETRY_AFTER_MS_MAX, Stats, TIMEOUT_HOLD_MS_MAX,
};

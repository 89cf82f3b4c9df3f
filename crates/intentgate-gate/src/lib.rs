//! `Gate`: the retry-safe call path of intentgate.
//!
//! A [`Gate`] holds the tool definitions, a [`Ledger`](intentgate_ledger::Ledger) and an
//! [`Upstream`]. [`Gate::call`] runs one tool call the way docs/design.md section 5 says: validate (with
//! [`schema::validator`]: formats asserted, numbers compared exactly as sent), honour the
//! kill switch, derive the intent key, check that the upstream can build its request from the
//! arguments ([`Upstream::check`]), get-or-create the intent, take its lease, write
//! `in_flight` durably, call the upstream with the intent's idempotency key, classify what
//! happened, look the effect up when that is ambiguous, and store the answer that every later
//! repeat receives. Reads and idempotent tools skip the ledger and are retried within a bound.
//! Each phase is a submodule of `call`, named for it (`validate`, `key`, `settled`,
//! `acquire`, `execute`, `classify`, `look_up`, `record`); [`Gate`] itself (`gate`) is the
//! state they share and depends on none of them.
//!
//! **Architecture invariant:** nothing is sent without a durable `in_flight` record and a
//! held lease. The `lease` module makes it a type: a `Lease` is made only from what the
//! ledger's `begin` answered, and the one function that sends a side effect's request takes
//! it and asserts, where the request leaves, that the request is the intent's and the intent
//! `in_flight`; a lease that ran out by the gate's clock meanwhile sends nothing.
//!
//! Every gate counts and times what it does ([`Metrics`], in the Prometheus text format),
//! announces each repeated call for an existing intent ([`Gate::repeated_calls`]), for the
//! duplicate-call alerts, and each upstream error that is the operator's
//! ([`Gate::upstream_errors`], [`Gate::degraded_upstreams`]: a wrong credential, a route that
//! does not exist, an upstream it can't reach), which ends a call `not_executed` with reason
//! `misconfigured`, never `rejected`.
//!
//! An `unknown` intent is driven to a definite answer (the `resolve` module): each repeat
//! call whose step is due, and [`Gate::sweep`] for the intents nobody asks about, look it up
//! and, where the tool's upstream replays responses per key and its window has not passed,
//! re-send it with its own provider key, with exponential backoff ([`Resolution`]).
//!
//! A tool whose effect the caller's own code performs (`executor: client`) is not called
//! but granted (the `client` module): [`Gate::grant`] runs the same phases up to the lease and
//! hands it to the caller with the provider key ([`Grant`]), and [`Gate::settle`] records what
//! the caller's code learned, only while its lease ([`LeaseToken`]) is live.
//!
//! **API boundary:** the gate owns no transport. The HTTP and MCP servers, the CLI and Rust
//! agents all call [`Gate::call`] and turn its [`CallOutcome`] into their own wire format.

mod answer;
mod approval;
mod call;
mod client;
mod clock;
mod context;
mod error;
mod gate;
mod lease;
mod metrics;
mod misconfigured;
mod options;
mod outcome;
pub mod process;
mod resolution;
mod resolve;
mod schedule;
pub mod schema;
mod sweeper;
pub mod trace;
mod upstream;

pub use approval::notice::{HELD_NOTICE_BUFFER, HeldNotice};
pub use approval::{APPROVALS_PER_SWEEP, ApprovalSweep, DecisionOutcome};
pub use client::{Grant, GrantedLease, LEASE_TOKEN_PREFIX, LeaseToken, SettleError, Settlement};
pub use clock::{Clock, SystemClock, TokioClock};
pub use context::CallContext;
pub use error::GateError;
pub use gate::{Gate, LEDGER_FAILURE_NOT_READY_MS, LedgerFailure};
pub use metrics::{ConnectionDrop, Metrics, REPEATED_CALL_BUFFER, RepeatedCall};
pub use misconfigured::{
    DEGRADED_UPSTREAMS_MAX, DegradedUpstream, PROVIDER_TEXT_MAX, UNNAMED_UPSTREAM,
    UPSTREAM_ERROR_BUFFER, UPSTREAM_ERROR_LOG_EVERY, UpstreamError,
};
pub use options::{
    BACKOFF_BASE, FLAG_REFRESH, FLAG_REFRESH_FOR_TESTS, GateOptions, LEASE_MARGIN, LOOKUP_INTERVAL,
    OWNER_CHECK_EVERY, QUEUED_FINISH_MIN_LEASE, RETRY_AFTER_CAP, WAIT_MARGIN,
};
pub use outcome::CallOutcome;
pub use resolution::{
    RESEND_BACKOFF_INITIAL, RESEND_BACKOFF_MAX, RESENDS_PER_SECOND, Resolution,
    SWEEP_LOOKUP_AGE_FRACTION, SWEEP_LOOKUP_INTERVAL_MAX,
};
pub use resolve::{LeaseHolder, Resends, UnknownPlan};
pub use sweeper::{SWEEP_CONCURRENCY, SweepReport};
pub use upstream::{
    KEY_REUSE_BUFFER, KeyReused, LOOKUP_MISMATCH_BUFFER, LookupMismatch, LookupOutcome, Upstream,
    UpstreamCall,
};

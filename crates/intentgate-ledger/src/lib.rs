//! The durable intent ledger.
//!
//! One trait, [`Ledger`], and its two stores: `SqliteLedger` (one file, the embedded
//! default) and `PostgresLedger` (shared by replicas), each behind a cargo feature of its
//! name (`sqlite`, `postgres`; both on by default). [`open`] picks one by [`Location`], so
//! no caller tells a URL from a path itself. The ledger remembers every business intent the
//! gateway has seen, keyed by (tenant, tool, key): its fingerprint and arguments, its
//! status, who holds its lease, the stored result or rejection, and an append-only log of
//! every call and transition. Every store decides every operation through one module of
//! pure rules (`plan`) and builds its filtered reads with one query builder (`query`), so
//! they behave alike. The gateway's guarantees rest on three of its operations:
//!
//! - [`Ledger::begin`] gets or creates the intent and, when this caller may act, takes the
//!   lease and writes `in_flight` durably, in one transaction, before the upstream call;
//! - [`Ledger::finish`] stores what the attempt learned and releases the lease;
//! - [`Ledger::wait_for_change`] lets a concurrent caller wait for the lease holder.
//!
//! Leases belong to gateway processes that register and heartbeat in the ledger
//! ([`Ledger::register_process`], [`Ledger::heartbeat_process`], [`Ledger::end_process`]):
//! `begin` takes a live lease from an owner whose process is gone as if it had expired.
//!
//! A call that carries the caller's own key for its operation (the HTTP API's
//! `Idempotency-Key`) binds it to the intent it names ([`Ledger::bind_caller_key`]): within
//! the tenant and tool, never as an intent key.
//!
//! A tool's approval policy and budgets ride on `begin` ([`CallPolicies`]): in the
//! transaction that creates a new intent, the ledger counts it against its budgets (or
//! refuses it, [`Begin::OverBudget`]), or creates it `pending` with a request for approval
//! ([`Begin::Held`]). A person decides with [`Ledger::decide`]; operators page through held
//! intents with [`Ledger::approvals`] ([`Ledger::approval`] reads one), the sweeper settles
//! the requests nobody decided in time with [`Ledger::expire_approvals`], and
//! [`Ledger::budget_usage`] shows what a tool's budgets have counted. A tool without policies
//! reads and writes nothing for them.
//!
//! The other operations serve the gateway's neighbours: the sweeper ([`Ledger::stale`]),
//! operators ([`Ledger::resolve`], [`Ledger::set_tool_flag`], [`Ledger::events`], and
//! [`Ledger::intents`], which pages through the intents matching an [`IntentFilter`]), the
//! metrics gauges ([`Ledger::status_counts`]), retention ([`Ledger::purge`]), erasing a
//! tenant's data on request ([`Ledger::erase`]) and reconciliation, which pages through one
//! tool's window with [`Ledger::intents`], looks a provider record's key up across tenants
//! the same way, and stores what it found ([`Ledger::record_reconciliation`], read back with
//! [`Ledger::reconciliations`], [`Ledger::reconciliation`] and
//! [`Ledger::reconciliation_mismatches`]). Every operation that returns rows returns a
//! bounded page of them ([`INTENTS_PAGE_MAX`], [`RECONCILIATIONS_PAGE_MAX`],
//! [`RECONCILIATION_MISMATCHES_STORED_MAX`]).
//!
//! **API boundary:** stores check every status change with
//! [`IntentStatus::transition`](intentgate_core::IntentStatus::transition) and bound every
//! text they write by the limits in `intentgate_core::limits`; callers pass the clock in
//! (`now_ms`), so the ledger never reads it.

mod console;
mod error;
mod location;
// What the stores share: with none built (a crate that only speaks the trait), nothing.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod migrations;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod plan;
#[cfg(feature = "postgres")]
pub mod postgres;
mod process;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod query;
pub mod queue;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod queued;
mod queued_finish;
mod record;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::limits::EVENT_DETAIL_LENGTH_MAX;
use intentgate_core::{IntentStatus, ResendStop};
use serde::Serialize;
use serde_json::Value;

pub use console::{
    ALERT_DETAILS_BYTES_MAX, ALERT_KIND_LENGTH_MAX, ALERT_OWNER_LENGTH_MAX, ALERT_SEVERITIES,
    ALERT_SUMMARY_LENGTH_MAX, ALERTS_KEPT_MAX, ALERTS_PAGE_MAX, CONSOLE_SESSIONS_MAX,
    ConsoleSession, DIGEST_HEX_LENGTH, SESSION_ACTOR_LENGTH_MAX, SESSION_CSRF_LENGTH_MAX,
    StoredAlert,
};
pub use error::LedgerError;
pub use location::Location;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresLedger, PostgresOptions};
pub use process::{
    HOST_LENGTH_MAX, INSTANCE_LENGTH_MAX, PID_SCOPE_LENGTH_MAX, PROCESSES_ENDED_KEPT_MAX,
    ProcessEnd, ProcessRecord, ProcessRegistration, instance_of,
};
pub use queued_finish::QueuedFinish;
pub use record::{
    Approval, BudgetUsageRow, Decision, Event, IntentId, IntentRecord, ReconciliationRun,
    StatusCount, StoredMismatch, ToolFlag,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{CommitCounts, SqliteLedger, SqliteOptions};

/// What every ledger operation returns: its answer, or a [`LedgerError`].
pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// The environment variable that names the PostgreSQL schema [`open`] uses instead of the
/// default (`intentgate`): one database can then hold several separate ledgers.
pub const SCHEMA_ENV: &str = "INTENTGATE_LEDGER_SCHEMA";

/// Opens the ledger at `location` (see [`Location::parse`]): PostgreSQL for a
/// `postgres://` or `postgresql://` URL (in the schema named by [`SCHEMA_ENV`] if set, else
/// the default schema), otherwise the SQLite file at that path, with grouped commits. A
/// location whose store this build leaves out (its cargo feature is off) is refused, naming
/// the feature.
pub async fn open(location: &str, durability: Durability) -> Result<Arc<dyn Ledger>> {
    // A build with no store has nothing to open with it.
    #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
    let _ = durability;
    match Location::parse(location) {
        #[cfg(feature = "postgres")]
        Location::Postgres(url) => {
            let mut options = PostgresOptions {
                durability,
                ..PostgresOptions::default()
            };
            if let Some(schema) = std::env::var(SCHEMA_ENV).ok().filter(|s| !s.is_empty()) {
                options.schema = schema;
            }
            Ok(Arc::new(PostgresLedger::connect(&url, options).await?))
        }
        #[cfg(feature = "sqlite")]
        Location::Sqlite(path) => {
            let options = SqliteOptions {
                durability,
                inline: false,
            };
            Ok(Arc::new(SqliteLedger::open(path, options)?))
        }
        // Only reached in a build without one of the stores.
        #[allow(unreachable_patterns)]
        left_out => Err(LedgerError::Open {
            path: left_out.to_string(),
            reason: format!(
                "this intentgate was built without the `{}` feature of intentgate-ledger, \
                 which that store needs: build it with `--features {}`",
                left_out.feature(),
                left_out.feature()
            ),
        }),
    }
}

/// `location` as it may be shown: a PostgreSQL URL without its password.
pub fn display_location(location: &str) -> String {
    Location::parse(location).to_string()
}

/// How much a ledger write promises before the upstream call leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The `in_flight` write is on disk (fsync) before the request leaves: survives a power
    /// loss. Later writes of the call may be batched without their own fsync, because
    /// recovery of an `in_flight` intent goes through the lookup.
    #[default]
    Strict,
    /// No fsync: survives a crash of the process, not of the machine. After a power loss
    /// the provider's idempotency-key window is the backstop.
    Relaxed,
}

/// What a caller asks of [`Ledger::begin`].
#[derive(Debug, Clone)]
pub struct BeginRequest {
    pub tenant: String,
    pub tool: String,
    pub key: String,
    /// Hex SHA-256 of the canonical arguments.
    pub fingerprint: String,
    pub arguments: Value,
    /// This caller's lease owner id, unique per call across replicas.
    pub lease_owner: String,
    /// When this caller's lease would expire, if it gets one.
    pub lease_expires_ms: i64,
    pub now_ms: i64,
    /// Count this as a new call (false when the same call asks again after waiting).
    pub count_call: bool,
    /// The tool lets a rejected intent start a new attempt.
    pub retry_rejected: bool,
    /// Least time between two lookups of one unknown intent; callers in between are
    /// answered from the ledger at once.
    pub lookup_interval_ms: i64,
    /// Re-send an `unknown` intent whose lease is free: start a new attempt with the same
    /// provider-key epoch (so the same idempotency key) instead of taking a lookup lease.
    /// Only for a caller that has just looked the intent up and found nothing, for a tool
    /// whose upstream honours idempotency keys, inside the provider's key window
    /// (docs/design.md section 5); the sweeper is the one such caller. False everywhere else.
    pub resend_unknown: bool,
    /// The caller read this key just before and found no intent. A hint: a store may try
    /// the insert before any read (PostgreSQL then saves a round trip), and `begin` decides
    /// the same either way.
    pub expect_new: bool,
    /// The tool's approval and budgets as they apply to this call (docs/design.md section
    /// 13); `None` for a tool with neither, whose `begin` reads and writes nothing for them.
    pub policies: Option<CallPolicies>,
}

/// What a tool's policies ask of one [`Ledger::begin`].
///
/// - A **new** intent is counted against every budget of `budgets` in the same transaction
///   that creates it. If it fits none of the budgets that refuse (`hold_deadline_ms` of the
///   [`BudgetCharge`] is `None`), nothing is written and `begin` answers
///   [`Begin::OverBudget`]. If it fits every budget and `hold` is `None`, every budget
///   counts it and it executes as without policies. Otherwise (`hold` is set, or a budget
///   that holds is full) the intent is created `pending`, counted by no budget, with an
///   open [`Approval`]: [`Begin::Held`].
/// - An **existing** intent is never counted again. A `pending` one with an open approval
///   answers [`Begin::Held`]; past its deadline it is settled `not_executed` first (the
///   approval `expired`). An approved one starts its attempt like any other. A
///   `not_executed` one that would start an attempt while `hold` is set and it has no
///   approval of its own is held again, with a new approval request. A `rejected` one whose
///   approval was denied is settled for good, also for a tool that retries rejections.
#[derive(Debug, Clone, Default)]
pub struct CallPolicies {
    /// The tool's approval policy holds this call.
    pub hold: Option<Hold>,
    /// Who asked (the credential's subject): it may never approve the intent.
    pub requested_by: String,
    /// The application's intent id of the call, kept with an approval request so that the
    /// gateway can execute the approved intent as the call would have.
    pub intent_id: Option<String>,
    /// The budgets a new intent counts against.
    pub budgets: Vec<BudgetCharge>,
}

/// Why a call is held, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// What held it, for approvers and the event log: `approval policy (amount > 100.00)`.
    pub held_by: String,
    /// When the request for approval lapses (settled `not_executed`) if nobody decides.
    pub deadline_ms: i64,
}

/// One budget's count of a new intent, for [`CallPolicies::budgets`]: what the budget is,
/// the bucket and window the intent counts in, and its limits in the ledger's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetCharge {
    /// The budget's name, unique within the tool.
    pub budget: String,
    /// The bucket within the budget (`tool`, `tenant:acme`, `subject:acme:8812`).
    pub bucket: String,
    /// The start of the fixed window the intent counts in.
    pub window_start_ms: i64,
    /// Its end (exclusive): a purge may delete the window's count after it.
    pub window_end_ms: i64,
    /// The intent's amount in the budget's units (0 without an amount limit).
    pub units: u64,
    pub count_max: Option<u64>,
    pub units_max: Option<u64>,
    /// `None`: a call beyond this budget is refused (`over_budget`); `Some`: held for
    /// approval until this deadline.
    pub hold_deadline_ms: Option<i64>,
}

/// An approver's decision on a held intent, for [`Ledger::decide`].
#[derive(Debug, Clone)]
pub struct Decide {
    pub id: IntentId,
    /// Approve (the intent may start its attempt) or deny (settled `rejected`).
    pub approve: bool,
    /// Who decided: never the subject that asked ([`Decided::OwnRequest`]).
    pub actor: String,
    /// Why; required for a denial (the model reads it), optional for an approval.
    pub reason: String,
    pub now_ms: i64,
    /// The budgets an approved intent counts against (unconditionally: the approver has
    /// decided), in its window at `now_ms`.
    pub budgets: Vec<BudgetCharge>,
}

/// What [`Ledger::decide`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// Approved: the intent is `pending` with an approved approval and starts its attempt
    /// at its next `begin` (the gateway's own, or the caller's).
    Approved(IntentRecord, Approval),
    /// Denied: the intent is `rejected`, its result `{"denied": reason, "by": actor}`.
    Denied(IntentRecord, Approval),
    /// The deadline had passed: the intent is now `not_executed`, the approval `expired`.
    Expired(IntentRecord, Approval),
    /// Nothing written: the actor is the subject that asked for it.
    OwnRequest(IntentRecord, Approval),
    /// Nothing written: the intent has no open approval (decided already, or never held).
    NotAwaiting(IntentRecord, Option<Approval>),
}

/// Which approvals [`Ledger::approvals`] returns, newest request first.
#[derive(Debug, Clone, Default)]
pub struct ApprovalFilter {
    /// Only this tenant's.
    pub tenant: Option<String>,
    /// Only these tools'.
    pub tool: Option<String>,
    /// Only approvals in this state.
    pub state: Option<ApprovalState>,
}

/// Where an approval stands, as [`ApprovalFilter`] selects it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalState {
    /// Nobody has decided yet (its deadline may have passed without the sweeper settling it).
    Open,
    /// Approved, and the intent is still `pending`: its attempt has not started yet.
    Approved,
    /// Decided or expired.
    Closed,
}

/// A held intent with its approval, as [`Ledger::approvals`] pages them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldIntent {
    pub approval: Approval,
    pub intent: IntentRecord,
}

/// Most approvals one call of [`Ledger::approvals`] (or [`Ledger::expire_approvals`])
/// returns.
pub const APPROVALS_PAGE_MAX: u32 = 1_000;
/// Longest stored `held_by` of an [`Approval`]: the program's own words (a policy's
/// condition, budget names), cut to it rather than refused.
pub const HELD_BY_LENGTH_MAX: usize = 1024;
/// Longest budget name a [`BudgetCharge`] may carry; a longer one is refused.
pub const BUDGET_NAME_LENGTH_MAX: usize = 128;
/// Longest budget bucket a [`BudgetCharge`] may carry (`subject:`, a tenant and a subject
/// rendered from the arguments, as long as a key); a longer one is refused.
pub const BUDGET_BUCKET_LENGTH_MAX: usize = 1024;
/// The `resolved_by` of an intent an approver denied: `begin` knows a denial by it, without
/// reading the approval, and answers it settled also for a tool that retries rejections.
pub const DENIED_BY: &str = "approver";

/// What [`Ledger::begin`] decided. Every variant carries the intent as it now stands.
// `Held` carries the approval beside the intent: one answer per call, moved and matched at
// once, never stored in bulk, so its size costs nothing a box would save.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// This caller holds the lease and the intent is durably `in_flight`: execute it (for
    /// a re-sent `unknown` intent, with the provider key of its epoch, unchanged).
    Execute(IntentRecord),
    /// This caller holds the lease on an `unknown` intent: look it up.
    Lookup(IntentRecord),
    /// Another caller holds the lease until `lease_expires_ms` (an attempt in flight, or a
    /// lookup or re-send of an unknown intent): wait, then ask again.
    Busy(IntentRecord),
    /// Nothing to do here: answer from the record.
    Settled(IntentRecord),
    /// The key exists with another fingerprint: nothing executes.
    Conflict(IntentRecord),
    /// The intent is `pending`, waiting for an approver ([`CallPolicies`]), and whether
    /// this `begin` made the request for approval or found it open.
    Held(IntentRecord, Approval, ApprovalRequest),
    /// A new intent beyond the budget named here, which refuses such calls: nothing was
    /// written.
    OverBudget { budget: String },
}

/// What [`Ledger::create`] did.
// One answer per call, as [`Begin`]: a box would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// `begin` decided: the key had no intent and this one is new (its lease is this
    /// caller's: [`Begin::Execute`]), or another caller created it meanwhile and `begin`
    /// decided from what it wrote, as for any existing intent.
    Begun(Begin),
    /// The key had an intent: nothing was decided or written. The caller decides from it as
    /// from a read (a settled repeat is answered from it, anything else asks `begin`).
    Found(IntentRecord),
}

/// [`Ledger::create`] as a read and then, when the key has no intent, a `begin`: what a
/// store whose reads are cheap does (SQLite reads on a connection of its own, sparing the
/// writer).
pub async fn read_then_begin<L: Ledger + ?Sized>(
    ledger: &L,
    request: BeginRequest,
) -> Result<Created> {
    match ledger
        .get(&request.tenant, &request.tool, &request.key)
        .await?
    {
        Some(intent) => Ok(Created::Found(intent)),
        None => Ok(Created::Begun(
            ledger
                .begin(BeginRequest {
                    expect_new: true,
                    ..request
                })
                .await?,
        )),
    }
}

/// Who asked for the approval that holds an intent ([`Begin::Held`]): the request that
/// made it is announced and counted once, and every repeat (however close in time, from
/// whichever caller) finds it open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalRequest {
    /// This `begin` made the request (a new intent held, or a lapsed one held again).
    Made,
    /// The request was already open.
    Open,
}

/// What an attempt learned, for [`Ledger::finish`].
#[derive(Debug, Clone)]
pub struct Finish {
    pub id: IntentId,
    pub lease_owner: String,
    /// The attempt this caller started (or looked up); a later attempt supersedes it.
    pub attempt: u32,
    pub now_ms: i64,
    /// The status to record. `unknown` on an intent that is already unknown only releases
    /// the lease (a lookup that found nothing).
    pub status: IntentStatus,
    /// The stored result (done) or rejection (rejected).
    pub result: Option<Value>,
    pub external_id: Option<String>,
    /// Who settled it: "upstream", "lookup", "sweeper".
    pub resolved_by: &'static str,
    /// A lookup was made at `now_ms` (it counts toward the lookup rate limit).
    pub looked_up: bool,
    /// A short reason for the event log.
    pub detail: String,
    /// Record only while `lease_owner` holds the intent's lease, live at `now_ms`, for
    /// `attempt` (the intent API's settle: the caller's lease is its only proof). False on
    /// the gateway's own call path, where an attempt whose lease ran out still records what
    /// it learned on an intent that went `unknown` meanwhile.
    pub lease_required: bool,
    /// Same-key re-sends of the intent stop for good, for this reason: the attempt's answer
    /// is one the provider will give every re-send. Kept once set (`None` changes nothing).
    pub resend_stopped: Option<ResendStop>,
}

/// What [`Ledger::finish`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// Recorded; the intent as it now stands.
    Recorded(IntentRecord),
    /// A later attempt owns the intent now, or it was settled meanwhile (by an operator,
    /// reconciliation or the lookup of another caller): nothing was written.
    Superseded(IntentRecord),
}

/// A lease holder asking for more time, for [`Ledger::renew`].
#[derive(Debug, Clone)]
pub struct Renew {
    pub id: IntentId,
    /// The owner that must hold the lease now.
    pub lease_owner: String,
    /// The attempt the lease was granted for; a later attempt's lease is another lease.
    pub attempt: u32,
    /// The new expiry. A lease is never shortened: an earlier one leaves it as it is.
    pub lease_expires_ms: i64,
    pub now_ms: i64,
}

/// What [`Ledger::renew`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Renewed {
    /// The lease is held by the owner until the intent's `lease_expires_ms`.
    Renewed(IntentRecord),
    /// The owner no longer holds a live lease for that attempt (it expired, was settled,
    /// or another caller holds the intent now): nothing was written.
    Lost(IntentRecord),
}

/// A key a caller chose for one operation (the HTTP API's `Idempotency-Key` header), bound
/// to the intent its first call named, within its tenant and tool: for
/// [`Ledger::bind_caller_key`]. It is never an intent key: the intent's key is the tool's own
/// (rendered from the arguments), and this only says which intent the caller meant by its
/// key, so that the same key with another payload can be refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerKey {
    pub tenant: String,
    pub tool: String,
    /// The caller's key, as the header named it.
    pub caller_key: String,
    /// The key of the intent it names.
    pub intent_key: String,
    /// The fingerprint of the arguments it was first used with.
    pub fingerprint: String,
    /// When it was bound; for a binding asked for, the time of the call.
    pub bound_ms: i64,
}

/// What [`Ledger::bind_caller_key`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// The caller key was free in its tenant and tool: it is bound now.
    New,
    /// The caller key was bound to the same intent (key and fingerprint): nothing written.
    Same,
    /// The caller key is bound to another intent (another key, or the same key with other
    /// arguments): the binding as stored; nothing written.
    Other(CallerKey),
}

/// A manual or automatic resolution of an intent (operator, reconciliation).
#[derive(Debug, Clone)]
pub struct Resolve {
    pub id: IntentId,
    pub status: IntentStatus,
    pub external_id: Option<String>,
    pub result: Option<Value>,
    pub actor: String,
    pub reason: String,
    pub now_ms: i64,
}

/// What [`Ledger::erase`] deletes: one tenant's intents, or those of one of its tools, or
/// the one intent with a key; with their events, the caller keys bound to them and the
/// reconciliation mismatches that name them.
#[derive(Debug, Clone)]
pub struct Erase {
    pub tenant: String,
    pub tool: Option<String>,
    /// The intent key (as stored); only together with `tool`.
    pub key: Option<String>,
    /// Also erase intents that are not settled (`pending`, `unknown`, `in_flight` with an
    /// expired lease): the effect of such an intent may have happened, and once it is erased
    /// nothing remembers it. An intent whose lease is live (a call is running) is never
    /// erased.
    pub force: bool,
    /// Who asked, and why: written to the event log (never what was erased).
    pub actor: String,
    pub reason: String,
    pub now_ms: i64,
}

/// What [`Ledger::erase`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Erasure {
    /// Deleted; with `more`, more intents match than one call erases
    /// ([`ERASE_BATCH_MAX`]): call again.
    Erased(Erased),
    /// Nothing deleted: these intents (the first [`ERASE_SHOWN_MAX`]) are not settled, and
    /// the erasure did not say `force`.
    Unsettled { ids: Vec<IntentId> },
    /// Nothing deleted: a call holds the lease of these intents right now.
    Busy { ids: Vec<IntentId> },
}

/// The counts of one erasure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Erased {
    pub intents: u64,
    pub events: u64,
    /// Reconciliation mismatches that named the tenant's intents.
    pub mismatches: u64,
    /// More intents match: this call erased [`ERASE_BATCH_MAX`] of them.
    pub more: bool,
}

/// Most intents one [`Ledger::erase`] deletes, in one transaction: a tenant's millions go in
/// many short transactions that never hold the writer (SQLite) or row locks (PostgreSQL)
/// for long.
pub const ERASE_BATCH_MAX: u32 = 1_000;
/// Most intent ids an [`Erasure`] refusal names: enough to look at, never a page of them.
pub const ERASE_SHOWN_MAX: u32 = 10;

/// Most intents one call of [`Ledger::intents`] returns; a larger `limit` is cut to it (not
/// refused) and the caller pages on with the cursor. Reconciliation reads this many at a
/// time. A page is held in memory whole, and one intent may carry up to
/// `ARGUMENTS_BYTES_MAX` of arguments and `RESULT_BYTES_MAX` of result, so the page is
/// bounded too.
pub const INTENTS_PAGE_MAX: u32 = 10_000;
/// Most runs one call of [`Ledger::reconciliations`] returns; a larger `limit` is cut to it.
/// An hourly job makes about 9,000 runs a year; operators look at the latest few.
pub const RECONCILIATIONS_PAGE_MAX: u32 = 1_000;
/// Most mismatches the ledger keeps per reconciliation run, and most
/// [`Ledger::reconciliation_mismatches`] returns. The report itself names every one; the
/// ledger keeps the first N per run (in the order given), so that one run gone wrong (a
/// provider answering garbage, a window of millions) can't fill the ledger. How many were
/// not kept is written into the run's summary, under [`SUMMARY_MISMATCHES_NOT_STORED`].
pub const RECONCILIATION_MISMATCHES_STORED_MAX: usize = 10_000;
/// The key of a stored run's summary that says how many of its mismatches the ledger did not
/// keep (0 when it kept them all). The ledger sets it on every run it stores.
pub const SUMMARY_MISMATCHES_NOT_STORED: &str = "mismatches_not_stored";
/// Largest stored run summary, as JSON text. A summary holds counts by kind and a few notes;
/// one this large is a bug, refused rather than cut (cut JSON is no JSON).
pub const RECONCILIATION_SUMMARY_BYTES_MAX: usize = 64 * 1024;
/// Longest mismatch kind (the longest in use, `effect_despite_status`, is 21 bytes), as for
/// the event log's kinds. Kinds are the program's own words: a longer one is refused.
pub const MISMATCH_KIND_LENGTH_MAX: usize = 32;
/// The severities a mismatch may have, least urgent first.
pub const MISMATCH_SEVERITIES: [&str; 3] = ["info", "warning", "critical"];
/// Longest stored subject of a mismatch (a customer or an order, often from the provider's
/// record); a longer one is cut.
pub const MISMATCH_SUBJECT_LENGTH_MAX: usize = 256;
/// Longest stored detail of a mismatch; a longer one is cut, like an event's detail.
pub const MISMATCH_DETAIL_LENGTH_MAX: usize = EVENT_DETAIL_LENGTH_MAX;
/// Most external ids stored with one mismatch (a duplicate names each of its records). The
/// first ones are kept and the detail says how many were left out.
pub const MISMATCH_EXTERNAL_IDS_MAX: usize = 32;
/// Largest stored list of a mismatch's external ids, as JSON text. The most ids of the
/// longest length fit in it unescaped; ids that JSON escaping would push past it are left out
/// like those beyond the count.
pub const MISMATCH_EXTERNAL_IDS_BYTES_MAX: usize = 16 * 1024;

/// Which intents [`Ledger::intents`] returns; every field that is set narrows the set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IntentFilter {
    pub tenant: Option<String>,
    pub tool: Option<String>,
    /// The intent key; with `tool` and without `tenant` it finds one key across tenants
    /// (reconciliation looks up a provider record's key that way), from an index.
    pub key: Option<String>,
    pub status: Option<IntentStatus>,
    /// Only intents first seen at or after this time.
    pub first_seen_from_ms: Option<i64>,
    /// Only intents first seen before this time.
    pub first_seen_until_ms: Option<i64>,
}

/// The order of [`Ledger::intents`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Ascending ids: the order intents were created in, so a new intent never lands on a
    /// page already read. Reconciliation reads this way.
    #[default]
    Oldest,
    /// Descending ids: what an operator wants to see first.
    Newest,
}

/// Length of a W3C version-00 `traceparent` (`00-{32 hex}-{16 hex}-{2 hex}`), the only form
/// [`Ledger::record_trace`] keeps.
pub const TRACEPARENT_LENGTH: usize = 55;

/// Refuses a `traceparent` that is not [`TRACEPARENT_LENGTH`] bytes of ASCII.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_traceparent(traceparent: &str) -> std::result::Result<(), LedgerError> {
    if traceparent.len() == TRACEPARENT_LENGTH && traceparent.is_ascii() {
        return Ok(());
    }
    Err(LedgerError::Invalid {
        field: "traceparent",
        reason: format!("must be {TRACEPARENT_LENGTH} ASCII bytes"),
    })
}

/// Defines [`Ledger`] from its operations, and the impl that lets an `Arc` of a ledger
/// (`Arc<dyn Ledger>`, as the gateway holds one) stand wherever a ledger is taken: each
/// operation is written once, and forwarded to the ledger inside.
macro_rules! ledger_trait {
    (
        $(#[$trait_attribute:meta])*
        pub trait Ledger {
            $(
                $(#[$attribute:meta])*
                async fn $operation:ident(&self $(, $argument:ident: $type:ty)* $(,)?)
                    $(-> $output:ty)?;
            )*
        }
    ) => {
        $(#[$trait_attribute])*
        #[async_trait]
        pub trait Ledger: Send + Sync + 'static {
            $(
                $(#[$attribute])*
                async fn $operation(&self $(, $argument: $type)*) $(-> $output)?;
            )*
        }

        #[async_trait]
        impl<L: Ledger + ?Sized> Ledger for Arc<L> {
            $(
                async fn $operation(&self $(, $argument: $type)*) $(-> $output)? {
                    (**self).$operation($($argument),*).await
                }
            )*
        }

        #[async_trait]
        impl<L: Ledger> Ledger for CountingLedger<L> {
            $(
                async fn $operation(&self $(, $argument: $type)*) $(-> $output)? {
                    self.count(stringify!($operation));
                    tokio::task::yield_now().await;
                    self.inner.$operation($($argument),*).await
                }
            )*
        }
    };
}

/// A ledger that counts the calls of each operation, then hands them to the ledger inside
/// after yielding to the runtime once, so that concurrent callers interleave at every call
/// as they would over a networked store: for tests that prove an operation is asked for only
/// as often as it should be.
pub struct CountingLedger<L> {
    inner: L,
    calls: std::sync::Mutex<std::collections::HashMap<&'static str, u64>>,
}

impl<L: Ledger> CountingLedger<L> {
    pub fn new(inner: L) -> CountingLedger<L> {
        CountingLedger {
            inner,
            calls: Default::default(),
        }
    }

    /// How many times `operation` (a [`Ledger`] method's name, as `"tool_flags"`) was called.
    pub fn calls(&self, operation: &str) -> u64 {
        let calls = self.calls.lock().expect("call counts lock");
        calls.get(operation).copied().unwrap_or(0)
    }

    fn count(&self, operation: &'static str) {
        *self
            .calls
            .lock()
            .expect("call counts lock")
            .entry(operation)
            .or_default() += 1;
    }
}

ledger_trait! {
    /// The durable intent ledger. Implementations: `SqliteLedger`, `PostgresLedger`.
    pub trait Ledger {
        /// Gets or creates the intent for (tenant, tool, key) and decides what this caller does.
        /// When it returns [`Begin::Execute`], `in_flight` is durable (per the store's
        /// [`Durability`]) before it returns.
        async fn begin(&self, request: BeginRequest) -> Result<Begin>;

        /// Creates the intent of `request`'s key when the key has none, as
        /// [`Ledger::begin`] would, or answers [`Created::Found`] with the key's intent,
        /// deciding and writing nothing: the call path's first step for a key it has not
        /// read. PostgreSQL sends the insert, its commit and the read of a key found taken in
        /// one round trip, where a read and then a `begin` take two
        /// ([`Ledger::creates_in_one_round_trip`]); SQLite reads the key in the writer's
        /// transaction and inserts there when it has no intent (one trip to the writer, where
        /// a read on a connection of its own and then a `begin` would make two); a store
        /// without a cheaper way reads, then begins ([`read_then_begin`]). Never used with
        /// `request.policies` by the gateway: a call with policies is read first.
        async fn create(&self, request: BeginRequest) -> Result<Created>;

        /// True when [`Ledger::create`] of a new key costs one round trip where a read and a
        /// `begin` would cost two (PostgreSQL's to the server, SQLite's to the writer): the
        /// gateway then creates first instead of reading first. False for a store whose
        /// `create` is [`read_then_begin`].
        async fn creates_in_one_round_trip(&self) -> bool;

        /// Records what an attempt (or a lookup) learned and releases the lease.
        async fn finish(&self, finish: Finish) -> Result<Finished>;

        /// [`Ledger::finish`], returning once the write is queued rather than committed: the
        /// call it ends is answered meanwhile. Await the [`QueuedFinish`] for what it did.
        ///
        /// Every read through this ledger object made after it returns sees the write: a
        /// read of the intent that finds it still open waits for it, and a read of many
        /// waits for every finish queued before it. Another process or replica may see the
        /// intent `in_flight` for as long as the commit takes, under a lease still live.
        /// Only writes after the durable `in_flight` may be queued so (docs/design.md section 7): a
        /// crash before the commit leaves the intent `in_flight`, resolved by its lookup.
        async fn finish_queued(&self, finish: Finish) -> Result<QueuedFinish>;

        /// Waits until every finish queued so far by [`Ledger::finish_queued`] has committed
        /// (or failed). A gateway process calls it on its clean shutdown, before it marks
        /// itself stopped and its leases free.
        async fn drain_queued(&self);

        /// Extends a live lease held by `renew.lease_owner` for `renew.attempt` to
        /// `renew.lease_expires_ms` (never shortening it), or answers [`Renewed::Lost`]
        /// without writing when that owner holds no such lease at `renew.now_ms`.
        async fn renew(&self, renew: Renew) -> Result<Renewed>;

        /// Counts repeated calls answered from a read or from memory (the already-done fast
        /// path), each `(intent, now_ms)` as one call more and a `call` event, all in one
        /// transaction: not durable on its own (a later commit's sync makes it so). Answers
        /// the ids of intents gone meanwhile (erased, purged), whose calls count for nothing.
        async fn record_calls(&self, calls: Vec<(IntentId, i64)>) -> Result<Vec<IntentId>>;

        /// Keeps the W3C `traceparent` of the span that executed the intent `id`'s latest
        /// attempt (only while traces are on), so that the trace of a repeat or a re-send
        /// links to it. Bookkeeping: not durable before it returns. A value that is not 55
        /// bytes is refused.
        async fn record_trace(&self, id: IntentId, traceparent: String) -> Result<()>;

        /// The `traceparent` [`Ledger::record_trace`] kept for `id`, if any.
        async fn trace_of(&self, id: IntentId) -> Result<Option<String>>;

        /// Binds `binding.caller_key` to the intent `binding` names (its key and fingerprint),
        /// within its tenant and tool, unless that caller key is bound already, and answers what
        /// it found: [`Bound::New`], [`Bound::Same`], or [`Bound::Other`] with the stored binding.
        /// A binding never changes: a caller key names the intent of its first call until
        /// [`Ledger::purge`] or [`Ledger::erase`] deletes it with that intent. Of two callers
        /// binding one caller key at once, one binds it and the other finds it bound. Not
        /// durable on its own when it returns (the durable `begin` that follows it commits it
        /// too). Refused (nothing written): an empty or over-long tenant, tool, caller key or
        /// intent key, or a fingerprint that is not 64 hex digits.
        async fn bind_caller_key(&self, binding: &CallerKey) -> Result<Bound>;

        /// Reads an intent by its scope and key.
        async fn get(&self, tenant: &str, tool: &str, key: &str) -> Result<Option<IntentRecord>>;

        /// A number that stays the same for as long as no settled intent (`done`, or
        /// `rejected` for a tool that never retries a rejection) can have changed or gone, in
        /// this process or any other: such an intent, read with the epoch taken before the
        /// read, may be answered again without a read while the epoch is unchanged. Only an
        /// erasure, a purge or a resolution changes one (a repeat's count aside); this
        /// ledger's own make the epoch move once they have committed, another process's by
        /// the next call (SQLite) or once its notification arrives (PostgreSQL). `None` when
        /// the store can't tell for less than a read (a PostgreSQL ledger not listening for
        /// notifications; a SQLite ledger whose writer is busy, or inline): the caller reads.
        async fn settled_epoch(&self) -> Option<u64>;

        /// Reads an intent by id.
        async fn get_by_id(&self, id: IntentId) -> Result<Option<IntentRecord>>;

        /// Intents in a status whose lease is free or expired at `now_ms`, or held by a
        /// registered process that is gone (ended, or silent for longer than it registered),
        /// for the sweeper and for recovery, oldest first, at most `limit`, leaving out the
        /// intents of `skip_tools` (tools the sweeper can't step, such as client-executed
        /// ones, whose intents would otherwise hold the others back for good).
        async fn stale(
            &self,
            status: IntentStatus,
            now_ms: i64,
            limit: u32,
            skip_tools: &[String],
        ) -> Result<Vec<IntentRecord>>;

        /// Every intent, in id order, `limit` at a time after `after_id` (for checks and reports).
        async fn list(&self, after_id: IntentId, limit: u32) -> Result<Vec<IntentRecord>>;

        /// The intent's event log, oldest first.
        async fn events(&self, id: IntentId) -> Result<Vec<Event>>;

        /// Sets an intent's status by hand (operator) or by proof (reconciliation).
        async fn resolve(&self, resolve: Resolve) -> Result<IntentRecord>;

        /// Records a call refused because the tool is switched off.
        async fn record_disabled_call(&self, tenant: &str, tool: &str, now_ms: i64) -> Result<()>;

        /// Switches a tool on or off.
        async fn set_tool_flag(&self, flag: ToolFlag) -> Result<()>;

        /// Every stored tool flag.
        async fn tool_flags(&self) -> Result<Vec<ToolFlag>>;

        /// Records an approver's decision on a held intent, in one transaction with the
        /// intent's change (see [`Decided`]) and an `approval` event naming who decided,
        /// when and why. Refused (an error): an empty actor, a denial without a reason,
        /// texts over their limits.
        async fn decide(&self, decide: Decide) -> Result<Decided>;

        /// The approval of intent `id`, if it was ever held (the latest request).
        async fn approval(&self, id: IntentId) -> Result<Option<Approval>>;

        /// Held intents matching `filter` with their approvals, newest intent first (by
        /// intent id: an intent held again keeps its place), at most `limit` (cut to
        /// [`APPROVALS_PAGE_MAX`]), strictly older than `before` (the last intent id of the
        /// previous page; `None`: from the newest). Each page walks an index in that order
        /// and sorts nothing.
        async fn approvals(
            &self, filter: &ApprovalFilter, before: Option<IntentId>, limit: u32,
        ) -> Result<Vec<HeldIntent>>;

        /// Settles every open approval whose deadline is at or before `now_ms` (at most
        /// `limit` of them, cut to [`APPROVALS_PAGE_MAX`], oldest deadline first): the intent
        /// `not_executed`, the approval `expired`, an `approval` event. Returns them as they
        /// now stand, and wakes the callers waiting on them.
        async fn expire_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<HeldIntent>>;

        /// What every budget of `tool` has counted in windows that have not ended at
        /// `now_ms`, by budget, bucket and window start (byte order on every store).
        async fn budget_usage(&self, tool: &str, now_ms: i64) -> Result<Vec<BudgetUsageRow>>;

        /// Deletes settled intents (done, rejected, not_executed) not seen since `before_ms`,
        /// with their events, and the reconciliation runs finished before `before_ms` with their
        /// mismatches. Unknown and in-flight intents are kept until resolved. Also deletes the
        /// caller keys ([`Ledger::bind_caller_key`]) bound before `before_ms` whose intent is
        /// gone (a key is bound at a call of its intent, so no later than the intent was last
        /// seen), the processes that ended, or last heartbeaten, before `before_ms`, and the
        /// ended ones beyond the latest [`PROCESSES_ENDED_KEPT_MAX`], the approvals of the
        /// intents it deletes, and the budget counts of windows that ended at or before
        /// `before_ms`. A held (`pending`) intent is never purged. Also deletes the console
        /// sessions that ended (idle or past their end) before `before_ms` and the notices of
        /// the history sent before `before_ms`. Returns how many intents were deleted.
        async fn purge(&self, before_ms: i64) -> Result<u64>;

        /// Deletes what [`Erase`] selects (at most [`ERASE_BATCH_MAX`] intents per call, with
        /// their events, approvals and the caller keys bound to them; the tenant's reconciliation
        /// mismatches, for a whole tenant or tool its refused-call events, and, in the call that
        /// erases the last selected intent, the selection's caller keys bound to no intent; the
        /// notices of the history about the selection's tenant, tool or intent), in one
        /// transaction, and appends an `erased` event (tenant,
        /// tool, counts, actor and reason; no key, argument or result) that retention keeps.
        /// Refuses, writing nothing, while any selected intent is held by a call, or is not
        /// settled and `force` is not set. Refused too (an error): an empty reason or actor, a
        /// key without a tool, names over their limits.
        async fn erase(&self, erase: &Erase) -> Result<Erasure>;

        /// Intents matching `filter`, in id order (`Oldest`: ascending, `Newest`: descending),
        /// at most `limit` (cut to [`INTENTS_PAGE_MAX`]), strictly after `cursor` in that order
        /// (`None`: from the start). The last id of a page is the cursor of the next; the pages
        /// are over when one comes back shorter than asked. A page never repeats an intent of an
        /// earlier page, and an intent that existed when paging began and matched the filter
        /// all along is on one of them.
        ///
        /// With a `tool` and both ends of the first-seen window, the first page starts at the
        /// window's first id (found from an index) and each next page where the last ended, so
        /// paging through a window reads it about once, and, on its last page, the tool's
        /// intents created after it; no page sorts the window.
        async fn intents(
            &self, filter: &IntentFilter, order: Order, cursor: Option<IntentId>, limit: u32,
        ) -> Result<Vec<IntentRecord>>;

        /// How many intents each tool has in each status (statuses with none are left out),
        /// by tool, then status in the state machine's order (pending first). For the metrics
        /// gauges; it counts every intent (from an index, without reading the rows).
        async fn status_counts(&self) -> Result<Vec<StatusCount>>;

        /// Stores a finished run and (at most [`RECONCILIATION_MISMATCHES_STORED_MAX`] of) its
        /// mismatches, the first ones in the order given, in one transaction; returns the run's
        /// id. The run's `id` and each mismatch's `run_id` are ignored. The stored summary says
        /// how many mismatches were not kept ([`SUMMARY_MISMATCHES_NOT_STORED`]); `summary` must
        /// be a JSON object (or null, stored as `{}`).
        ///
        /// Refused (nothing written): an actor, tool or kind that is empty or over its limit, a
        /// severity not in [`MISMATCH_SEVERITIES`], a summary over
        /// [`RECONCILIATION_SUMMARY_BYTES_MAX`], a count over `i64::MAX`, or fewer mismatches
        /// counted (`run.mismatches`) than given: those are bugs of the caller. Text that may
        /// come from the provider (tenant, intent key, external ids, subject, detail) is cut to
        /// its limit instead, so that one odd provider record can't lose a run's report.
        async fn record_reconciliation(
            &self,
            run: &ReconciliationRun,
            mismatches: &[StoredMismatch],
        ) -> Result<i64>;

        /// The latest runs, newest first, at most `limit` (cut to [`RECONCILIATIONS_PAGE_MAX`]).
        async fn reconciliations(&self, limit: u32) -> Result<Vec<ReconciliationRun>>;

        /// One run by id, or `None` (never stored, or purged).
        async fn reconciliation(&self, run_id: i64) -> Result<Option<ReconciliationRun>>;

        /// A run's stored mismatches, in the order they were stored, at most `limit` (cut to
        /// [`RECONCILIATION_MISMATCHES_STORED_MAX`], so one call can return all of them). Empty
        /// for a run that does not exist.
        async fn reconciliation_mismatches(
            &self,
            run_id: i64,
            limit: u32,
        ) -> Result<Vec<StoredMismatch>>;

        /// Registers a gateway process as running since `registration.now_ms`, or registers
        /// it again (an instance that ended, or was found dead, and still runs starts over).
        /// Returns the row as stored. Refused: an instance that is empty, over
        /// [`INSTANCE_LENGTH_MAX`] or holds a `/`; a pid scope over
        /// [`PID_SCOPE_LENGTH_MAX`]; a silence that is not positive. A host name over
        /// [`HOST_LENGTH_MAX`] is cut.
        async fn register_process(&self, registration: ProcessRegistration) -> Result<ProcessRecord>;

        /// Records that a running process was alive at `now_ms` (a heartbeat never moves back).
        /// False, writing nothing, when it is not registered or has ended: its leases may
        /// have been taken over, and it should register again.
        async fn heartbeat_process(&self, instance: &str, now_ms: i64) -> Result<bool>;

        /// Marks a running process ended at `now_ms`: stopped (its own clean shutdown) or dead
        /// (found gone by another process). The live leases it holds are taken over by the
        /// next `begin` of each intent. False, writing nothing, when it is not registered or
        /// had ended already.
        async fn end_process(&self, instance: &str, end: ProcessEnd, now_ms: i64) -> Result<bool>;

        /// A registered process by its instance, running or ended (until purged).
        async fn process(&self, instance: &str) -> Result<Option<ProcessRecord>>;

        /// Stores a new console session. Sessions that have ended by `session.created_ms` are
        /// deleted first, and, when [`CONSOLE_SESSIONS_MAX`] are still kept, the ones idle
        /// longest until there is room. Refused (nothing written): a digest that is not
        /// [`DIGEST_HEX_LENGTH`] lowercase hex digits, an empty or over-long actor or CSRF
        /// token, half an approver, an expiry that ends before it starts.
        async fn create_console_session(&self, session: &ConsoleSession) -> Result<()>;

        /// The session whose token has the SHA-256 `token_digest`, if it is live at `now_ms`
        /// (used within its idle time, before its end), marked used at `now_ms`; `None` for an
        /// unknown session or one that has ended (which is deleted).
        async fn console_session(
            &self,
            token_digest: &str,
            now_ms: i64,
        ) -> Result<Option<ConsoleSession>>;

        /// Ends the session whose token has the SHA-256 `token_digest`: deletes it, so that
        /// every replica refuses it from then on. False when there was none.
        async fn end_console_session(&self, token_digest: &str) -> Result<bool>;

        /// Adds a notice to the history, and deletes the oldest beyond [`ALERTS_KEPT_MAX`];
        /// returns its id (`alert.id` is ignored). Refused (nothing written): a kind, owner,
        /// tool, tenant, summary or details over its limit, an empty kind, owner or details, a
        /// severity not in [`ALERT_SEVERITIES`].
        async fn record_alert(&self, alert: &StoredAlert) -> Result<i64>;

        /// The latest notices of the history, newest first, at most `limit` (cut to
        /// [`ALERTS_PAGE_MAX`]).
        async fn alerts(&self, limit: u32) -> Result<Vec<StoredAlert>>;

        /// Waits until the intent may have changed, or `timeout` passes. Spurious wake-ups are
        /// allowed: callers read the intent again afterwards.
        async fn wait_for_change(&self, id: IntentId, timeout: Duration);
    }
}

/// Only a build without one of the stores has a location it can't open.
#[cfg(all(test, not(all(feature = "sqlite", feature = "postgres"))))]
mod tests {
    use super::*;

    /// Such a location is refused by the feature's name, and no SQLite file created.
    #[tokio::test]
    async fn a_location_of_a_store_left_out_of_the_build_is_refused_naming_its_feature() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let (location, feature) = if cfg!(feature = "sqlite") {
            ("postgres://alice:s3cret@db/test".to_owned(), "postgres")
        } else {
            (path.display().to_string(), "sqlite")
        };
        let Err(LedgerError::Open {
            path: shown,
            reason,
        }) = open(&location, Durability::Strict).await
        else {
            panic!("{location} was opened without its store");
        };
        assert!(reason.contains(&format!("`{feature}` feature")), "{reason}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!path.exists());
    }
}

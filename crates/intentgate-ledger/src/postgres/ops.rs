//! The body of every ledger operation on PostgreSQL. Writes run inside the one transaction
//! that `PostgresLedger` opened for them: each locks the intent's row (`SELECT ... FOR
//! UPDATE`, sent with the `BEGIN`) and asks [`crate::plan`] what to do; [`commit`] then sends
//! the plan's writes, the notification and the `COMMIT` together, in one round trip. A
//! `begin` expected to find no intent (`BeginRequest::expect_new`) sends the `BEGIN`, the
//! insert of the new row, its events and the `COMMIT` at once ([`insert_fresh`]), and locks
//! the row, in a transaction of its own, only when the key was taken meanwhile: one round
//! trip for a new intent. The finish of an intent this ledger just began sends the guarded
//! write of its row and events with the `BEGIN` and the `COMMIT` ([`finish_known`],
//! [`write_known`]): one round trip, for one finish or a group of them.
//! Because the row is locked until the commit, replicas that work on one intent at once
//! take turns, and each decides from what the previous one committed.

use std::future::Future;
use std::pin::Pin;

use futures_util::future::join_all;
use intentgate_core::{IntentStatus, ResendStop};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::known::Known;
use super::pool::Session;
use super::{Attempt, Failure, is_connection_lost};
use intentgate_core::policy::BudgetUsage;

use crate::plan::{
    self, MismatchRow, NewCall, NewEvent, NewIntent, Plan, StoredIntent, StoredRun, Write,
};
use crate::process::{PROCESSES_ENDED_KEPT_MAX, ProcessEnd, ProcessRecord, ProcessRegistration};
use crate::query::{self, Dialect, Parameter, Query};
use crate::record::{
    Approval, BudgetUsageRow, Decision, Event, IntentId, IntentRecord, ReconciliationRun,
    StatusCount, StoredMismatch, ToolFlag,
};
use crate::{
    APPROVALS_PAGE_MAX, ApprovalFilter, Begin, BeginRequest, Bound, BudgetCharge, CallerKey,
    Decide, Decided, ERASE_BATCH_MAX, Erase, Erased, Erasure, Finish, Finished, HeldIntent,
    IntentFilter, LedgerError, Order, RECONCILIATION_MISMATCHES_STORED_MAX,
    RECONCILIATIONS_PAGE_MAX, Renew, Renewed, Resolve,
};

/// The columns of an intent, in the order [`read_intent`] reads them.
macro_rules! intent_columns {
    () => {
        "id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
         lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, \
         first_seen_ms, last_seen_ms, updated_ms, last_lookup_ms, resend_stopped"
    };
}

const BY_KEY: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE tenant = $1 AND tool = $2 AND intent_key = $3"
);
const BY_KEY_LOCKED: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE tenant = $1 AND tool = $2 AND intent_key = $3 FOR UPDATE"
);
const BY_ID: &str = concat!("SELECT ", intent_columns!(), " FROM intents WHERE id = $1");
const BY_ID_LOCKED: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE id = $1 FOR UPDATE"
);
/// An intent whose lease is free, expired, or held by a gone process: the owner's instance
/// (the owner up to its first `/`) is registered and ended, or silent for longer than it
/// registered (`plan::owner_gone`, as SQL).
const STALE: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE status = $1 AND (lease_expires_ms IS NULL OR lease_expires_ms <= $2 \
     OR EXISTS (SELECT 1 FROM processes WHERE processes.instance = \
     CASE WHEN strpos(intents.lease_owner, '/') > 1 \
     THEN substr(intents.lease_owner, 1, strpos(intents.lease_owner, '/') - 1) END \
     AND (processes.ended IS NOT NULL OR $2 - processes.heartbeat_ms > processes.silent_after_ms))) \
     AND NOT (tool = ANY($4)) ORDER BY updated_ms, id LIMIT $3"
);
/// The columns of a process, in the order [`read_process`] reads them.
macro_rules! process_columns {
    () => {
        "instance, host, pid_scope, pid, started_ms, heartbeat_ms, silent_after_ms, ended, ended_ms"
    };
}
const PROCESS: &str = concat!(
    "SELECT ",
    process_columns!(),
    " FROM processes WHERE instance = $1"
);
const REGISTER_PROCESS: &str = "INSERT INTO processes (instance, host, pid_scope, pid, started_ms, \
     heartbeat_ms, silent_after_ms, ended, ended_ms) VALUES ($1, $2, $3, $4, $5, $5, $6, NULL, NULL) \
     ON CONFLICT (instance) DO UPDATE SET host = EXCLUDED.host, pid_scope = EXCLUDED.pid_scope, \
     pid = EXCLUDED.pid, started_ms = EXCLUDED.started_ms, heartbeat_ms = EXCLUDED.heartbeat_ms, \
     silent_after_ms = EXCLUDED.silent_after_ms, ended = NULL, ended_ms = NULL";
const HEARTBEAT_PROCESS: &str = "UPDATE processes SET heartbeat_ms = greatest(heartbeat_ms, $2) \
     WHERE instance = $1 AND ended IS NULL";
const END_PROCESS: &str =
    "UPDATE processes SET ended = $2, ended_ms = $3 WHERE instance = $1 AND ended IS NULL";
/// Processes that ended or last heartbeaten before the cutoff.
const DELETE_OLD_PROCESSES: &str = "DELETE FROM processes WHERE ended_ms < $1 OR heartbeat_ms < $1";
/// Ended processes beyond the latest [`PROCESSES_ENDED_KEPT_MAX`].
const DELETE_ENDED_PROCESSES_BEYOND: &str = "DELETE FROM processes WHERE ended_ms IS NOT NULL \
     AND instance NOT IN (SELECT instance FROM processes WHERE ended_ms IS NOT NULL \
     ORDER BY ended_ms DESC LIMIT $1)";
const LIST: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE id > $1 ORDER BY id LIMIT $2"
);
/// A new intent's row as its first `begin` leaves it. Another replica may insert the same
/// key at the same moment: the insert then waits for its transaction, and does nothing if
/// it committed.
const INSERT_INTENT: &str = "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, \
     status, attempt, epoch, lease_owner, lease_expires_ms, call_count, first_seen_ms, last_seen_ms, \
     updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
     ON CONFLICT (tenant, tool, intent_key) DO NOTHING RETURNING id, xmin::text::bigint";
/// A new intent's row and its events in one statement: the events are appended only with
/// the row, in the order given (a key taken inserts nothing, and logs nothing). Returns the
/// row's id and version, or no row when the key was taken.
const INSERT_FRESH: &str = "WITH inserted AS (INSERT INTO intents (tenant, tool, intent_key, \
     fingerprint, arguments, status, attempt, epoch, lease_owner, lease_expires_ms, call_count, \
     first_seen_ms, last_seen_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
     $11, $12, $13, $14) ON CONFLICT (tenant, tool, intent_key) DO NOTHING \
     RETURNING id, xmin::text::bigint AS version), \
     logged AS (INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, \
     to_status, attempt, actor, detail) SELECT inserted.id, event.tenant, event.tool, \
     event.at_ms, event.kind, event.from_status, event.to_status, event.attempt, event.actor, \
     event.detail FROM inserted, unnest($15::text[], $16::text[], $17::bigint[], $18::text[], \
     $19::text[], $20::text[], $21::bigint[], $22::text[], $23::text[]) WITH ORDINALITY \
     AS event (tenant, tool, at_ms, kind, from_status, to_status, attempt, actor, detail, \
     position) ORDER BY event.position) \
     SELECT id, version FROM inserted";
/// The key's intent unless it is the row this session inserted last: sent right after the
/// `COMMIT` of a new intent's insert ([`insert_fresh`]), it finds nothing when the insert
/// succeeded, and the intent that took the key when the insert found it taken (committed:
/// the insert waited for it, so this later statement's snapshot holds it). The value the
/// insert drew is read once, in a subquery (`currval` is volatile), and the key is found by
/// its unique index.
const BY_KEY_TAKEN: &str = concat!(
    "SELECT ",
    intent_columns!(),
    " FROM intents WHERE tenant = $1 AND tool = $2 AND intent_key = $3 \
     AND id <> (SELECT currval(pg_get_serial_sequence('intents', 'id')))"
);
const UPDATE_INTENT: &str = "UPDATE intents SET status = $2, attempt = $3, epoch = $4, lease_owner = $5, \
     lease_expires_ms = $6, result = $7, external_id = $8, resolved_by = $9, call_count = $10, \
     last_seen_ms = $11, updated_ms = $12, last_lookup_ms = $13, resend_stopped = $14 WHERE id = $1";
/// A plan's write of one intent and its events in one statement, guarded by the version of
/// the row it was decided from (`xmin`: the transaction that last wrote it): the update
/// applies only to the row still as it was, and the events are appended only with it, in
/// the order given. Returns the row's new version, or no row when it had changed (or is
/// gone): then nothing was written. Under a concurrent writer the update waits for it and
/// checks the guard against what it committed.
const UPDATE_INTENT_GUARDED: &str = "WITH changed AS (UPDATE intents SET status = $2, attempt = $3, \
     epoch = $4, lease_owner = $5, lease_expires_ms = $6, result = $7, external_id = $8, \
     resolved_by = $9, call_count = $10, last_seen_ms = $11, updated_ms = $12, \
     last_lookup_ms = $13, resend_stopped = $14 WHERE id = $1 AND xmin::text::bigint = $15 \
     RETURNING id, xmin::text::bigint AS version), \
     logged AS (INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, \
     to_status, attempt, actor, detail) SELECT changed.id, event.tenant, event.tool, \
     event.at_ms, event.kind, event.from_status, event.to_status, event.attempt, event.actor, \
     event.detail FROM changed, unnest($16::text[], $17::text[], $18::bigint[], $19::text[], \
     $20::text[], $21::text[], $22::bigint[], $23::text[], $24::text[]) WITH ORDINALITY \
     AS event (tenant, tool, at_ms, kind, from_status, to_status, attempt, actor, detail, \
     position) ORDER BY event.position) \
     SELECT version FROM changed";
const UPDATE_COUNTS: &str = "UPDATE intents SET call_count = $2, last_seen_ms = $3 WHERE id = $1";
const INSERT_EVENT: &str = "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, \
     to_status, attempt, actor, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
const EVENTS: &str = "SELECT id, intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, \
     actor, detail FROM events WHERE intent_id = $1 ORDER BY id";
const UPSERT_TOOL_FLAG: &str = "INSERT INTO tool_flags (tool, enabled, reason, actor, updated_ms) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tool) DO UPDATE SET enabled = EXCLUDED.enabled, \
     reason = EXCLUDED.reason, actor = EXCLUDED.actor, updated_ms = EXCLUDED.updated_ms";
/// Delivered to every listener of the channel when the transaction commits.
const NOTIFY: &str = "SELECT pg_notify($1, $2)";
const TOOL_FLAGS: &str =
    "SELECT tool, enabled, reason, actor, updated_ms FROM tool_flags ORDER BY tool";
/// Locks the settled intents to purge, so that no replica writes an event for one of them
/// between the deletion of its events and the deletion of the row.
const PURGEABLE_LOCKED: &str = "SELECT id FROM intents \
     WHERE status IN ('done', 'rejected', 'not_executed') AND last_seen_ms < $1 FOR UPDATE";
const DELETE_EVENTS_OF: &str = "DELETE FROM events WHERE intent_id = ANY($1)";
/// Their traces and approvals go with them (ON DELETE CASCADE), in the same statement.
const DELETE_INTENTS: &str = "DELETE FROM intents WHERE id = ANY($1)";
/// Binds a caller key, or finds it bound, in one statement: the no-op update of a key taken
/// (also by a replica whose insert committed meanwhile, which this one waits for) returns
/// the stored row, locked, and `xmax = 0` tells a row this statement inserted.
const BIND_CALLER_KEY: &str = "INSERT INTO caller_keys (tenant, tool, caller_key, intent_key, \
     fingerprint, bound_ms) VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (tenant, tool, caller_key) DO UPDATE SET bound_ms = caller_keys.bound_ms \
     RETURNING intent_key, fingerprint, bound_ms, xmax = 0";
/// The caller keys bound before the cutoff (`$1`) whose intent is gone: those of the intents
/// a purge deleted (bound at a call of the intent, so no later than it was last seen), and
/// those whose intent was never recorded (its call failed after the binding).
const PURGE_CALLER_KEYS: &str = "DELETE FROM caller_keys WHERE bound_ms < $1 AND NOT EXISTS \
     (SELECT 1 FROM intents WHERE intents.tenant = caller_keys.tenant \
      AND intents.tool = caller_keys.tool AND intents.intent_key = caller_keys.intent_key)";
/// The caller keys of the intents with the ids `$1`, deleted before the intents are.
const DELETE_CALLER_KEYS_OF: &str = "DELETE FROM caller_keys USING intents \
     WHERE intents.id = ANY($1) AND caller_keys.tenant = intents.tenant \
     AND caller_keys.tool = intents.tool AND caller_keys.intent_key = intents.intent_key";
/// Refused calls of a switched-off tool can pile up; switch changes are kept (audit).
const DELETE_DISABLED_CALLS: &str =
    "DELETE FROM events WHERE intent_id IS NULL AND kind = 'disabled_call' AND at_ms < $1";

const STATUS_COUNTS: &str = "SELECT tool, status, count(*) FROM intents GROUP BY tool, status";
const INSERT_RUN: &str = "INSERT INTO reconciliation_runs (started_ms, finished_ms, since_ms, \
     until_ms, actor, intents_checked, records_checked, mismatches, critical, summary) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id";
/// Every mismatch of a run in one statement (one round trip), a column per array.
const INSERT_MISMATCHES: &str = "INSERT INTO reconciliation_mismatches (run_id, position, tool, \
     kind, severity, intent_id, tenant, intent_key, external_ids, subject, detail) \
     SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], \
     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])";
/// The columns of a run, in the order [`read_run`] reads them.
macro_rules! run_columns {
    () => {
        "id, started_ms, finished_ms, since_ms, until_ms, actor, intents_checked, \
         records_checked, mismatches, critical, summary"
    };
}
const RUNS: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reconciliation_runs ORDER BY id DESC LIMIT $1"
);
const RUN: &str = concat!(
    "SELECT ",
    run_columns!(),
    " FROM reconciliation_runs WHERE id = $1"
);
const MISMATCHES: &str = "SELECT run_id, tool, kind, severity, intent_id, tenant, intent_key, \
     external_ids, subject, detail FROM reconciliation_mismatches WHERE run_id = $1 \
     ORDER BY position LIMIT $2";
/// Their mismatches go with them (ON DELETE CASCADE), in the same statement.
const DELETE_RUNS: &str = "DELETE FROM reconciliation_runs WHERE finished_ms < $1";

/// The columns of an approval, in the order [`read_approval`] reads them.
macro_rules! approval_columns {
    () => {
        "intent, tenant, tool, requested_by, requested_ms, deadline_ms, held_by, intent_id, \
         decision, decided_by, decided_ms, reason"
    };
}
/// How many columns `intent_columns!` names: an approval read beside its intent starts here.
const INTENT_COLUMN_COUNT: usize = 20;
const APPROVAL: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approvals WHERE intent = $1"
);
/// An intent's approval, inserted or replacing its earlier request.
const UPSERT_APPROVAL: &str = concat!(
    "INSERT INTO approvals (",
    approval_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
     ON CONFLICT (intent) DO UPDATE SET tenant = EXCLUDED.tenant, tool = EXCLUDED.tool, \
     requested_by = EXCLUDED.requested_by, requested_ms = EXCLUDED.requested_ms, \
     deadline_ms = EXCLUDED.deadline_ms, held_by = EXCLUDED.held_by, \
     intent_id = EXCLUDED.intent_id, decision = EXCLUDED.decision, \
     decided_by = EXCLUDED.decided_by, decided_ms = EXCLUDED.decided_ms, reason = EXCLUDED.reason"
);
/// One more intent in a budget's window: the row inserted, or added to (units saturating at
/// the largest bigint, which an addition would otherwise overflow).
const COUNT_BUDGET: &str = "INSERT INTO budget_usage (tool, budget, bucket, window_start_ms, \
     window_end_ms, count, units) VALUES ($1, $2, $3, $4, $5, 1, $6) \
     ON CONFLICT (tool, budget, bucket, window_start_ms) DO UPDATE SET \
     count = budget_usage.count + 1, units = CASE \
     WHEN budget_usage.units > 9223372036854775807 - EXCLUDED.units THEN 9223372036854775807 \
     ELSE budget_usage.units + EXCLUDED.units END";
const BUDGET_USED: &str = "SELECT count, units FROM budget_usage \
     WHERE tool = $1 AND budget = $2 AND bucket = $3 AND window_start_ms = $4";
/// The first key of the advisory locks on budget windows ("ib" in ASCII), apart from the
/// migration's; the second is a hash of the schema and the window.
const BUDGET_LOCK_CLASS: i32 = 0x6962;
/// Takes the transaction-level advisory lock of every window in `$2` (each `tool`, budget,
/// bucket and window start joined by a unit separator), in the order of their keys, so
/// that two transactions locking windows in common take them in the same order. Replicas
/// deciding on one window take turns; no row is written to lock it, so a refused call
/// writes nothing.
const LOCK_BUDGETS: &str = "SELECT pg_advisory_xact_lock($1, locked.key) FROM \
     (SELECT DISTINCT hashtext(current_schema() || chr(31) || named) AS key \
      FROM unnest($2::text[]) AS named ORDER BY key) AS locked ORDER BY locked.key";
/// The open approvals due at `$1`, oldest deadline first (`approvals_by_decision_deadline`).
const DUE_APPROVALS: &str = "SELECT intent FROM approvals WHERE decision IS NULL \
     AND deadline_ms <= $1 ORDER BY deadline_ms, intent LIMIT $2";
/// A tool's budget rows whose window has not ended at `$2`, along the primary key.
const BUDGET_USAGE: &str = "SELECT tool, budget, bucket, window_start_ms, window_end_ms, count, \
     units FROM budget_usage WHERE tool = $1 AND window_end_ms > $2";
/// The budget counts of windows that ended at or before the cutoff (a window's end is
/// exclusive), from `budget_usage_by_window_end`.
const PURGE_BUDGET_USAGE: &str = "DELETE FROM budget_usage WHERE window_end_ms <= $1";

fn corrupt(column: &str, message: impl std::fmt::Display) -> Failure {
    Failure::Ledger(LedgerError::Corrupt(format!("{column}: {message}")))
}

fn unsigned(column: &str, value: i64) -> Result<u32, Failure> {
    u32::try_from(value).map_err(|_| corrupt(column, format!("{value} is out of range")))
}

fn read_intent(row: &Row) -> Result<IntentRecord, Failure> {
    let status: String = row.try_get(6)?;
    let arguments: String = row.try_get(5)?;
    let result: Option<String> = row.try_get(11)?;
    let call_count: i64 = row.try_get(14)?;
    let resend_stopped: Option<String> = row.try_get(19)?;
    Ok(IntentRecord {
        id: row.try_get(0)?,
        tenant: row.try_get(1)?,
        tool: row.try_get(2)?,
        key: row.try_get(3)?,
        fingerprint: row.try_get(4)?,
        arguments: serde_json::from_str(&arguments)
            .map_err(|error| corrupt("intents.arguments", error))?,
        status: status
            .parse()
            .map_err(|error| corrupt("intents.status", error))?,
        attempt: unsigned("intents.attempt", row.try_get(7)?)?,
        epoch: unsigned("intents.epoch", row.try_get(8)?)?,
        lease_owner: row.try_get(9)?,
        lease_expires_ms: row.try_get(10)?,
        result: result
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|error| corrupt("intents.result", error))?,
        external_id: row.try_get(12)?,
        resolved_by: row.try_get(13)?,
        call_count: u64::try_from(call_count)
            .map_err(|_| corrupt("intents.call_count", format!("{call_count} is negative")))?,
        first_seen_ms: row.try_get(15)?,
        last_seen_ms: row.try_get(16)?,
        updated_ms: row.try_get(17)?,
        last_lookup_ms: row.try_get(18)?,
        resend_stopped: resend_stopped
            .map(|text| text.parse())
            .transpose()
            .map_err(|error| corrupt("intents.resend_stopped", error))?,
    })
}

fn read_intents(rows: &[Row]) -> Result<Vec<IntentRecord>, Failure> {
    rows.iter().map(read_intent).collect()
}

/// An approval from the columns of `approval_columns!`, the first at `first`.
fn read_approval(row: &Row, first: usize) -> Result<Approval, Failure> {
    let decision: Option<String> = row.try_get(first + 8)?;
    Ok(Approval {
        intent: row.try_get(first)?,
        tenant: row.try_get(first + 1)?,
        tool: row.try_get(first + 2)?,
        requested_by: row.try_get(first + 3)?,
        requested_ms: row.try_get(first + 4)?,
        deadline_ms: row.try_get(first + 5)?,
        held_by: row.try_get(first + 6)?,
        intent_id: row.try_get(first + 7)?,
        decision: decision
            .map(|text| {
                Decision::parse(&text).ok_or_else(|| {
                    corrupt("approvals.decision", format!("unknown decision `{text}`"))
                })
            })
            .transpose()?,
        decided_by: row.try_get(first + 9)?,
        decided_ms: row.try_get(first + 10)?,
        reason: row.try_get(first + 11)?,
    })
}

/// The approval of the intent `id` (`Ledger::approval`), if it was ever held.
pub async fn approval(session: &mut Session, id: IntentId) -> Result<Option<Approval>, Failure> {
    let row = session.query_opt(APPROVAL, &[&id]).await?;
    row.as_ref().map(|row| read_approval(row, 0)).transpose()
}

/// Takes the advisory locks of the windows `charges` count `tool`'s intents in, until the
/// transaction ends ([`LOCK_BUDGETS`]).
async fn lock_budgets(
    session: &mut Session,
    tool: &str,
    charges: &[BudgetCharge],
) -> Result<(), Failure> {
    let windows: Vec<String> = charges
        .iter()
        .map(|charge| {
            format!(
                "{tool}\u{1f}{}\u{1f}{}\u{1f}{}",
                charge.budget, charge.bucket, charge.window_start_ms
            )
        })
        .collect();
    session
        .execute(LOCK_BUDGETS, &[&BUDGET_LOCK_CLASS, &windows])
        .await?;
    Ok(())
}

/// What a budget has counted in the window `charge` names (zero without a row).
async fn budget_used(
    session: &mut Session,
    tool: &str,
    charge: &BudgetCharge,
) -> Result<BudgetUsage, Failure> {
    let row = session
        .query_opt(
            BUDGET_USED,
            &[
                &tool,
                &charge.budget,
                &charge.bucket,
                &charge.window_start_ms,
            ],
        )
        .await?;
    Ok(match row {
        Some(row) => plan::budget_usage(row.try_get(0)?, row.try_get(1)?),
        None => BudgetUsage::default(),
    })
}

pub async fn get(
    session: &mut Session,
    tenant: &str,
    tool: &str,
    key: &str,
) -> Result<Option<IntentRecord>, Failure> {
    let row = session.query_opt(BY_KEY, &[&tenant, &tool, &key]).await?;
    row.as_ref().map(read_intent).transpose()
}

pub async fn get_by_id(
    session: &mut Session,
    id: IntentId,
) -> Result<Option<IntentRecord>, Failure> {
    let row = session.query_opt(BY_ID, &[&id]).await?;
    row.as_ref().map(read_intent).transpose()
}

/// Reads and locks an intent until the transaction ends.
async fn lock_by_key(
    session: &mut Session,
    request: &BeginRequest,
) -> Result<Option<IntentRecord>, Failure> {
    let parameters: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
        [&request.tenant, &request.tool, &request.key];
    let row = session.query_opt(BY_KEY_LOCKED, &parameters).await?;
    row.as_ref().map(read_intent).transpose()
}

/// Reads and locks an intent until the transaction ends; it must exist.
async fn lock_by_id(session: &mut Session, id: IntentId) -> Result<IntentRecord, Failure> {
    match session.query_opt(BY_ID_LOCKED, &[&id]).await? {
        Some(row) => read_intent(&row),
        None => Err(Failure::Ledger(LedgerError::NotFound(id))),
    }
}

pub async fn stale(
    session: &mut Session,
    status: IntentStatus,
    now_ms: i64,
    limit: u32,
    skip_tools: &[String],
) -> Result<Vec<IntentRecord>, Failure> {
    let rows = session
        .query(
            STALE,
            &[&status.as_str(), &now_ms, &i64::from(limit), &skip_tools],
        )
        .await?;
    read_intents(&rows)
}

pub async fn list(
    session: &mut Session,
    after_id: IntentId,
    limit: u32,
) -> Result<Vec<IntentRecord>, Failure> {
    let rows = session.query(LIST, &[&after_id, &i64::from(limit)]).await?;
    read_intents(&rows)
}

pub async fn events(session: &mut Session, id: IntentId) -> Result<Vec<Event>, Failure> {
    let rows = session.query(EVENTS, &[&id]).await?;
    rows.iter()
        .map(|row| {
            let attempt: Option<i64> = row.try_get(8)?;
            Ok(Event {
                id: row.try_get(0)?,
                intent_id: row.try_get(1)?,
                tenant: row.try_get(2)?,
                tool: row.try_get(3)?,
                at_ms: row.try_get(4)?,
                kind: row.try_get(5)?,
                from_status: row.try_get(6)?,
                to_status: row.try_get(7)?,
                attempt: attempt
                    .map(|attempt| unsigned("events.attempt", attempt))
                    .transpose()?,
                actor: row.try_get(9)?,
                detail: row.try_get(10)?,
            })
        })
        .collect()
}

/// One statement of [`commit`]'s pipeline: its rows affected.
type Sent<'a> = Pin<Box<dyn Future<Output = Result<u64, tokio_postgres::Error>> + Send + 'a>>;

/// Sends the open transaction's writes, then the notification of `notify` (channel and
/// intent) if any, then `COMMIT`, all at once: one round trip. PostgreSQL runs them in
/// order; if one fails, the rest fail too and the `COMMIT` rolls back.
pub async fn commit(
    session: &mut Session,
    writes: &[Write],
    notify: Option<(&str, IntentId)>,
) -> Result<(), Attempt> {
    if !session.in_transaction && writes.is_empty() && notify.is_none() {
        // The operation committed what it wrote itself (a new intent's `begin`).
        return Ok(());
    }
    let statements = CommitStatements::prepare(session, writes).await?;
    let begin = session.take_pending_begin();
    let client = &session.client;
    let mut sent: Vec<Sent<'_>> = Vec::with_capacity(writes.len() + 3);
    if let Some(begin) = begin {
        sent.push(Box::pin(async move {
            client.batch_execute(begin).await.map(|()| 0)
        }));
    }
    for write in writes {
        sent.push(statements.send(client, write));
    }
    if let Some((channel, id)) = notify {
        let statement = &statements.notify;
        sent.push(Box::pin(async move {
            let id = id.to_string();
            client.execute(statement, &[&channel, &id]).await
        }));
    }
    sent.push(Box::pin(async move {
        client.batch_execute("COMMIT").await.map(|()| 0)
    }));

    // tokio-postgres sends a statement when it is first polled, and pipelines what is
    // polled together. `join_all` polls its futures in the order given (a plan's handful of
    // statements is far below its cut-over to `FuturesOrdered`, whose queue also runs new
    // futures in order), so the statements leave in order, in one round trip.
    let answers = join_all(sent).await;
    committed(session, writes, answers, usize::from(begin.is_some()))?;
    session.transaction_ended();
    Ok(())
}

/// The statements of [`commit`]'s pipeline, prepared before anything is sent (from the
/// session's cache, after the first time), so that nothing in the pipeline waits for a
/// round trip and the statements leave in order.
struct CommitStatements {
    update_counts: Statement,
    update_intent: Statement,
    insert_event: Statement,
    notify: Statement,
    /// Only the plans of held intents and budgets write these: a tool without policies
    /// prepares nothing more.
    upsert_approval: Option<Statement>,
    count_budget: Option<Statement>,
}

impl CommitStatements {
    async fn prepare(session: &mut Session, writes: &[Write]) -> Result<CommitStatements, Attempt> {
        let update_counts = session.statement(UPDATE_COUNTS).await?;
        let update_intent = session.statement(UPDATE_INTENT).await?;
        let insert_event = session.statement(INSERT_EVENT).await?;
        let notify = session.statement(NOTIFY).await?;
        let upsert_approval = match writes
            .iter()
            .any(|write| matches!(write, Write::Approval(_)))
        {
            true => Some(session.statement(UPSERT_APPROVAL).await?),
            false => None,
        };
        let count_budget = match writes.iter().any(|write| matches!(write, Write::Budget(_))) {
            true => Some(session.statement(COUNT_BUDGET).await?),
            false => None,
        };
        Ok(CommitStatements {
            update_counts,
            update_intent,
            insert_event,
            notify,
            upsert_approval,
            count_budget,
        })
    }

    /// The statement of one write, sent when first polled.
    fn send<'a>(&'a self, client: &'a Client, write: &'a Write) -> Sent<'a> {
        match write {
            Write::Counts(intent) => {
                let statement = &self.update_counts;
                Box::pin(async move {
                    let call_count = intent.call_count as i64;
                    let parameters: [&(dyn ToSql + Sync); 3] =
                        [&intent.id, &call_count, &intent.last_seen_ms];
                    client.execute(statement, &parameters).await
                })
            }
            Write::Intent(stored) => {
                let statement = &self.update_intent;
                Box::pin(async move {
                    let intent = &stored.intent;
                    let (status, attempt, epoch, call_count) = (
                        intent.status.as_str(),
                        i64::from(intent.attempt),
                        i64::from(intent.epoch),
                        intent.call_count as i64,
                    );
                    let resend_stopped = intent.resend_stopped.map(ResendStop::as_str);
                    let parameters: [&(dyn ToSql + Sync); 14] = [
                        &intent.id,
                        &status,
                        &attempt,
                        &epoch,
                        &intent.lease_owner,
                        &intent.lease_expires_ms,
                        &stored.result,
                        &intent.external_id,
                        &intent.resolved_by,
                        &call_count,
                        &intent.last_seen_ms,
                        &intent.updated_ms,
                        &intent.last_lookup_ms,
                        &resend_stopped,
                    ];
                    client.execute(statement, &parameters).await
                })
            }
            Write::Event(event) => {
                let statement = &self.insert_event;
                Box::pin(async move {
                    let columns = EventColumns::of(event);
                    let mut parameters: Vec<&(dyn ToSql + Sync)> = vec![&event.intent_id];
                    parameters.extend(columns.parameters());
                    client.execute(statement, &parameters).await
                })
            }
            Write::Approval(approval) => {
                let statement = self
                    .upsert_approval
                    .as_ref()
                    .expect("prepared for approvals");
                Box::pin(async move {
                    let decision = approval.decision.map(Decision::as_str);
                    let parameters: [&(dyn ToSql + Sync); 12] = [
                        &approval.intent,
                        &approval.tenant,
                        &approval.tool,
                        &approval.requested_by,
                        &approval.requested_ms,
                        &approval.deadline_ms,
                        &approval.held_by,
                        &approval.intent_id,
                        &decision,
                        &approval.decided_by,
                        &approval.decided_ms,
                        &approval.reason,
                    ];
                    client.execute(statement, &parameters).await
                })
            }
            Write::Budget(count) => {
                let statement = self.count_budget.as_ref().expect("prepared for budgets");
                Box::pin(async move {
                    let parameters: [&(dyn ToSql + Sync); 6] = [
                        &count.tool,
                        &count.budget,
                        &count.bucket,
                        &count.window_start_ms,
                        &count.window_end_ms,
                        &count.units,
                    ];
                    client.execute(statement, &parameters).await
                })
            }
        }
    }
}

/// Reads the pipeline's answers, the writes' from `writes_offset` on (after the `BEGIN`'s,
/// when it was sent): a lost connection is an attempt that may have committed, a refused
/// statement one that rolled back; an intent written while locked must have been there to
/// write.
fn committed(
    session: &mut Session,
    writes: &[Write],
    answers: Vec<Result<u64, tokio_postgres::Error>>,
    writes_offset: usize,
) -> Result<(), Attempt> {
    let lost = answers.iter().position(|answer| {
        answer
            .as_ref()
            .is_err_and(|error| is_connection_lost(error, session))
    });
    let refused = answers.iter().position(Result::is_err);
    if let Some(index) = lost.or(refused) {
        let error = answers
            .into_iter()
            .nth(index)
            .and_then(Result::err)
            .expect("the failed answer");
        if lost.is_some() {
            // The COMMIT may or may not have reached the server.
            return Err(Attempt {
                failure: error.into(),
                committing: true,
            });
        }
        // The server refused a statement: the COMMIT rolled the transaction back.
        session.transaction_ended();
        return Err(error.into());
    }
    for (write, answer) in writes.iter().zip(&answers[writes_offset..]) {
        if let (Write::Counts(intent) | Write::Intent(StoredIntent { intent, .. }), Ok(changed)) =
            (write, answer)
        {
            assert_eq!(*changed, 1, "intent {} vanished while locked", intent.id);
        }
    }
    Ok(())
}

/// An event's columns after `intent_id`, as every statement that inserts events binds them.
struct EventColumns<'a> {
    event: &'a NewEvent,
    from: Option<&'static str>,
    to: Option<&'static str>,
    attempt: Option<i64>,
}

impl EventColumns<'_> {
    fn of(event: &NewEvent) -> EventColumns<'_> {
        EventColumns {
            event,
            from: event.from_status.map(IntentStatus::as_str),
            to: event.to_status.map(IntentStatus::as_str),
            attempt: event.attempt.map(i64::from),
        }
    }

    /// Tenant, tool, time, kind, from and to status, attempt, actor, detail.
    fn parameters(&self) -> [&(dyn ToSql + Sync); 9] {
        let event = self.event;
        [
            &event.tenant,
            &event.tool,
            &event.at_ms,
            &event.kind,
            &self.from,
            &self.to,
            &self.attempt,
            &event.actor,
            &event.detail,
        ]
    }
}

/// One statement of [`insert_fresh`]'s pipeline: the row it returned, if any.
type Answered<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// What [`insert_fresh`] did.
// One answer per insert, matched at once: a box would save nothing.
#[allow(clippy::large_enum_variant)]
enum Inserted {
    /// The new row, by id and version.
    Row(IntentId, i64),
    /// The key exists (committed by another transaction, which the insert waited for):
    /// nothing was written. The intent that holds it, when the key's read was asked for and
    /// found it (an erasure may delete it in between).
    Taken(Option<IntentRecord>),
}

/// Sends `begin` (the transaction's pending `BEGIN`), the insert of a new intent's row, its
/// events and `COMMIT` at once, and, when `read_taken`, the read of the intent that holds
/// the key if the insert found it taken ([`BY_KEY_TAKEN`]): one round trip. Either way the
/// transaction is over.
async fn insert_fresh(
    session: &mut Session,
    fresh: &plan::Fresh,
    begin: Option<&'static str>,
    read_taken: bool,
) -> Result<Inserted, Failure> {
    assert!(
        fresh.events_only(),
        "only a call without policies inserts first"
    );
    // Prepared before anything is sent, so that the statements leave in order.
    let insert = session.statement(INSERT_FRESH).await?;
    let by_key_taken = match read_taken {
        true => Some(session.statement(BY_KEY_TAKEN).await?),
        false => None,
    };
    let intent = &fresh.row.intent;
    let (attempt, epoch, call_count) = (
        i64::from(intent.attempt),
        i64::from(intent.epoch),
        intent.call_count as i64,
    );
    let status = intent.status.as_str();
    let events: Vec<&NewEvent> = fresh.events().iter().collect();
    let events = EventArrays::of(&events);
    let client = &session.client;
    let mut sent: Vec<Answered<'_>> = Vec::with_capacity(4);
    if let Some(begin) = begin {
        sent.push(Box::pin(async move {
            client.batch_execute(begin).await.map(|()| None)
        }));
    }
    let (statement, arguments, status) = (&insert, &fresh.row.arguments, &status);
    let (attempt, epoch, call_count, events) = (&attempt, &epoch, &call_count, &events);
    sent.push(Box::pin(async move {
        let parameters: [&(dyn ToSql + Sync); 23] = [
            &intent.tenant,
            &intent.tool,
            &intent.key,
            &intent.fingerprint,
            arguments,
            status,
            attempt,
            epoch,
            &intent.lease_owner,
            &intent.lease_expires_ms,
            call_count,
            &intent.first_seen_ms,
            &intent.last_seen_ms,
            &intent.updated_ms,
            &events.tenants,
            &events.tools,
            &events.at_ms,
            &events.kinds,
            &events.from,
            &events.to,
            &events.attempts,
            &events.actors,
            &events.details,
        ];
        client.query_opt(statement, &parameters).await
    }));
    sent.push(Box::pin(async move {
        client.batch_execute("COMMIT").await.map(|()| None)
    }));
    if let Some(statement) = &by_key_taken {
        sent.push(Box::pin(async move {
            let parameters: [&(dyn ToSql + Sync); 3] = [&intent.tenant, &intent.tool, &intent.key];
            client.query_opt(statement, &parameters).await
        }));
    }
    // Sent in order, in one round trip, as in `commit`.
    let answers = join_all(sent).await;
    session.transaction_ended();
    let inserted_at = usize::from(begin.is_some());
    let taken_at = answers.len() - 1;
    let (mut inserted, mut taken) = (None, None);
    for (index, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(row) if index == inserted_at => inserted = row,
            Ok(row) if read_taken && index == taken_at => taken = row,
            Ok(_) => {}
            Err(error) if is_connection_lost(&error, session) => {
                // The COMMIT may have reached the server: not an operation to run again.
                return Err(Failure::Ledger(LedgerError::Storage(format!(
                    "lost the connection to PostgreSQL while committing a new intent ({}); \
                     whether the commit took effect is unknown (the intent is then in flight \
                     and resolved by its lookup); check that the server is up and reachable",
                    super::describe(&error)
                ))));
            }
            // The server refused a statement: the COMMIT rolled everything back.
            Err(error) => return Err(error.into()),
        }
    }
    match inserted {
        Some(row) => {
            let (id, version) = inserted_row(&row)?;
            Ok(Inserted::Row(id, version))
        }
        None => Ok(Inserted::Taken(
            taken.as_ref().map(read_intent).transpose()?,
        )),
    }
}

/// The id and version of a row [`INSERT_INTENT`] inserted.
fn inserted_row(row: &Row) -> Result<(IntentId, i64), Failure> {
    Ok((row.try_get(0)?, row.try_get(1)?))
}

/// Inserts a new intent's row (a [`plan::Fresh`] row); its id and version, or `None` when
/// the key exists (committed by another transaction meanwhile).
async fn insert(
    session: &mut Session,
    row: &NewIntent,
) -> Result<Option<(IntentId, i64)>, Failure> {
    let intent = &row.intent;
    let (attempt, epoch, call_count) = (
        i64::from(intent.attempt),
        i64::from(intent.epoch),
        intent.call_count as i64,
    );
    let inserted = session
        .query_opt(
            INSERT_INTENT,
            &[
                &intent.tenant,
                &intent.tool,
                &intent.key,
                &intent.fingerprint,
                &row.arguments,
                &intent.status.as_str(),
                &attempt,
                &epoch,
                &intent.lease_owner,
                &intent.lease_expires_ms,
                &call_count,
                &intent.first_seen_ms,
                &intent.last_seen_ms,
                &intent.updated_ms,
            ],
        )
        .await?;
    inserted.as_ref().map(inserted_row).transpose()
}

/// `begin` on an intent that existed, locked: reads the process of its live lease's owner
/// first, if it has one, and its approval, when the plan asks for it.
async fn begin_existing(
    session: &mut Session,
    intent: IntentRecord,
    request: &BeginRequest,
) -> Result<Plan<Begin>, Failure> {
    let owner = match plan::owner_to_check(&intent, request.now_ms) {
        Some(instance) => process(session, instance).await?,
        None => None,
    };
    let approval = if plan::approval_to_read(&intent, request) {
        approval(session, intent.id).await?
    } else {
        None
    };
    Ok(plan::begin_existing(
        intent,
        request,
        owner.as_ref(),
        approval,
    )?)
}

/// `begin` on a key found with no intent, for a tool with policies: takes its budgets'
/// windows in turn ([`lock_budgets`]), reads what they counted and decides; a new intent is
/// inserted as the plan says, unless a budget refuses it (then nothing is written). A key
/// inserted by another replica meanwhile is locked and decided as an existing intent.
async fn begin_new_with_policies(
    session: &mut Session,
    request: &BeginRequest,
) -> Result<Plan<Begun>, Failure> {
    let charges = plan::charges(request);
    if !charges.is_empty() {
        lock_budgets(session, &request.tool, charges).await?;
    }
    let mut used = Vec::with_capacity(charges.len());
    for charge in charges {
        used.push(budget_used(session, &request.tool, charge).await?);
    }
    begin_new_counted(session, request, &used).await
}

/// `begin` on a key found with no intent, for a tool with policies, once its budgets'
/// windows are locked and `used` holds what each counted: refused, or inserted as the plan
/// says. A key inserted by another replica meanwhile is locked and decided as an existing
/// intent.
async fn begin_new_counted(
    session: &mut Session,
    request: &BeginRequest,
    used: &[BudgetUsage],
) -> Result<Plan<Begun>, Failure> {
    match plan::begin_new_call(request, used)? {
        NewCall::Refused(outcome) => Ok(Plan::outcome(Begun::unversioned(outcome))),
        NewCall::Insert(fresh) => match insert(session, &fresh.row).await? {
            // The rest of the plan writes other tables: the row stays at this version.
            Some((id, version)) => Ok(Begun::versioned(fresh.inserted(id), version)),
            None => {
                let intent = lock_by_key(session, request).await?.ok_or_else(|| {
                    Failure::Ledger(LedgerError::Storage(
                        "the intent was created and deleted by others during this call; try \
                         again"
                            .to_owned(),
                    ))
                })?;
                Ok(Begun::unversioned_plan(
                    begin_existing(session, intent, request).await?,
                ))
            }
        },
    }
}

/// The reads of a call with budgets whose key the caller found no intent for
/// (`expect_new`), sent at once with the transaction's pending `BEGIN`: the key's intent,
/// locked, the advisory locks of the budgets' windows ([`LOCK_BUDGETS`]) and what each
/// window counted, in one round trip instead of two plus one per budget. The windows are
/// locked even when the key turns out to exist (a replica inserted it meanwhile): they are
/// held until this short transaction ends, and taken in the same order as always.
async fn read_new_call(
    session: &mut Session,
    request: &BeginRequest,
    charges: &[BudgetCharge],
) -> Result<(Option<IntentRecord>, Vec<BudgetUsage>), Failure> {
    let by_key = session.statement(BY_KEY_LOCKED).await?;
    let lock = session.statement(LOCK_BUDGETS).await?;
    let used = session.statement(BUDGET_USED).await?;
    let windows: Vec<String> = charges
        .iter()
        .map(|charge| {
            format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{}",
                request.tool, charge.budget, charge.bucket, charge.window_start_ms
            )
        })
        .collect();
    let begin = session.take_pending_begin();
    let client = &session.client;
    let mut sent: Vec<Answered<'_>> = Vec::with_capacity(charges.len() + 3);
    if let Some(begin) = begin {
        sent.push(Box::pin(async move {
            client.batch_execute(begin).await.map(|()| None)
        }));
    }
    let (by_key, lock, used, windows) = (&by_key, &lock, &used, &windows);
    sent.push(Box::pin(async move {
        let parameters: [&(dyn ToSql + Sync); 3] = [&request.tenant, &request.tool, &request.key];
        client.query_opt(by_key, &parameters).await
    }));
    sent.push(Box::pin(async move {
        let parameters: [&(dyn ToSql + Sync); 2] = [&BUDGET_LOCK_CLASS, windows];
        client.execute(lock, &parameters).await.map(|_| None)
    }));
    for charge in charges {
        sent.push(Box::pin(async move {
            let parameters: [&(dyn ToSql + Sync); 4] = [
                &request.tool,
                &charge.budget,
                &charge.bucket,
                &charge.window_start_ms,
            ];
            client.query_opt(used, &parameters).await
        }));
    }
    // Sent in order, in one round trip, as in `commit`.
    let answers = join_all(sent).await;
    let mut rows = Vec::with_capacity(answers.len());
    for answer in answers {
        // The transaction stays open: `run` rolls it back on an error.
        rows.push(answer?);
    }
    let first = usize::from(begin.is_some());
    let intent = rows[first].as_ref().map(read_intent).transpose()?;
    let counted = rows[first + 2..]
        .iter()
        .map(|row| match row {
            Some(row) => Ok(plan::budget_usage(row.try_get(0)?, row.try_get(1)?)),
            None => Ok(BudgetUsage::default()),
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    Ok((intent, counted))
}

/// Locks the key's intent and decides from it; a key not found is inserted as begun. When
/// the caller's read found no intent just before (`expect_new`), the insert goes first:
/// one round trip less for a new intent. A call with policies always reads first: a new
/// intent is decided from its budgets' counts before anything is inserted; with budgets,
/// the key and the budgets are read together ([`read_new_call`]).
pub async fn begin(session: &mut Session, request: &BeginRequest) -> Result<Plan<Begun>, Failure> {
    plan::check_begin(request)?;
    let charges = plan::charges(request);
    if request.expect_new && !charges.is_empty() {
        let (found, used) = read_new_call(session, request, charges).await?;
        return match found {
            Some(intent) => Ok(Begun::unversioned_plan(
                begin_existing(session, intent, request).await?,
            )),
            None => begin_new_counted(session, request, &used).await,
        };
    }
    let insert_first = request.expect_new && request.policies.is_none();
    if !insert_first && let Some(intent) = lock_by_key(session, request).await? {
        return Ok(Begun::unversioned_plan(
            begin_existing(session, intent, request).await?,
        ));
    }
    if request.policies.is_some() {
        return begin_new_with_policies(session, request).await;
    }
    let fresh = plan::begin_fresh(request)?;
    if insert_first {
        let begin = session.take_pending_begin();
        if let Inserted::Row(id, version) = insert_fresh(session, &fresh, begin, false).await? {
            let Plan { outcome, .. } = fresh.inserted(id);
            // Committed with its events: nothing is left to write.
            return Ok(Plan::new(
                Vec::new(),
                Begun {
                    outcome,
                    version: Some(version),
                },
            ));
        }
        // That transaction wrote nothing and is over: decide in another.
        session.begin_with_next_statement(begin.unwrap_or("BEGIN"));
    } else if let Some((id, version)) = insert(session, &fresh.row).await? {
        return Ok(Begun::versioned(fresh.inserted(id), version));
    }
    // Another replica inserted it after our read, and has committed (the insert waited
    // for it): lock its row and decide from what it wrote.
    let intent = lock_by_key(session, request).await?.ok_or_else(|| {
        Failure::Ledger(LedgerError::Storage(
            "the intent was created and deleted by others during this call; try again".to_owned(),
        ))
    })?;
    Ok(Begun::unversioned_plan(
        begin_existing(session, intent, request).await?,
    ))
}

/// What [`create`] did: as [`crate::Created`], with the version of a row it inserted.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Create {
    Begun(Begun),
    Found(IntentRecord),
}

/// [`Ledger::create`](crate::Ledger::create) of a call without policies: the insert of a new
/// intent with its events and the `COMMIT`, and the read of the key's intent should the key
/// be taken, sent together ([`insert_fresh`]): one round trip, whether the key was new or
/// not. A key found taken whose intent is gone by the read (erased in between) is begun in
/// a transaction of its own, as `begin` would.
pub async fn create(
    session: &mut Session,
    request: &BeginRequest,
) -> Result<Plan<Create>, Failure> {
    plan::check_begin(request)?;
    assert!(
        request.policies.is_none(),
        "a call with policies reads before it creates"
    );
    let fresh = plan::begin_fresh(request)?;
    let pending = session.take_pending_begin();
    match insert_fresh(session, &fresh, pending, true).await? {
        Inserted::Row(id, version) => {
            let Plan { outcome, .. } = fresh.inserted(id);
            // Committed with its events: nothing is left to write.
            Ok(Plan::outcome(Create::Begun(Begun {
                outcome,
                version: Some(version),
            })))
        }
        Inserted::Taken(Some(intent)) => Ok(Plan::outcome(Create::Found(intent))),
        Inserted::Taken(None) => {
            session.begin_with_next_statement(pending.unwrap_or("BEGIN"));
            let Plan {
                writes,
                outcome,
                watched,
            } = begin(session, request).await?;
            Ok(Plan {
                writes,
                outcome: Create::Begun(outcome),
                watched,
            })
        }
    }
}

/// What `begin` answers, and the version of the intent's row it left when it inserted the
/// row (and wrote nothing more to it), so that its finish may skip the read
/// ([`super::known`]).
#[derive(Debug)]
pub struct Begun {
    pub outcome: Begin,
    pub version: Option<i64>,
}

impl Begun {
    fn unversioned(outcome: Begin) -> Begun {
        Begun {
            outcome,
            version: None,
        }
    }

    fn unversioned_plan(plan: Plan<Begin>) -> Plan<Begun> {
        Plan {
            writes: plan.writes,
            outcome: Begun::unversioned(plan.outcome),
            watched: plan.watched,
        }
    }

    fn versioned(plan: Plan<Begin>, version: i64) -> Plan<Begun> {
        Plan {
            writes: plan.writes,
            outcome: Begun {
                outcome: plan.outcome,
                version: Some(version),
            },
            watched: plan.watched,
        }
    }
}

fn read_process(row: &Row) -> Result<ProcessRecord, Failure> {
    let ended: Option<String> = row.try_get(7)?;
    Ok(ProcessRecord {
        instance: row.try_get(0)?,
        host: row.try_get(1)?,
        pid_scope: row.try_get(2)?,
        pid: unsigned("processes.pid", row.try_get(3)?)?,
        started_ms: row.try_get(4)?,
        heartbeat_ms: row.try_get(5)?,
        silent_after_ms: row.try_get(6)?,
        ended: ended
            .map(|text| text.parse::<ProcessEnd>())
            .transpose()
            .map_err(|error| corrupt("processes.ended", error))?,
        ended_ms: row.try_get(8)?,
    })
}

pub async fn process(
    session: &mut Session,
    instance: &str,
) -> Result<Option<ProcessRecord>, Failure> {
    let row = session.query_opt(PROCESS, &[&instance]).await?;
    row.as_ref().map(read_process).transpose()
}

pub async fn register_process(
    session: &mut Session,
    registration: &ProcessRegistration,
) -> Result<Plan<ProcessRecord>, Failure> {
    let row = plan::registration(registration)?;
    let pid = i64::from(row.pid);
    session
        .execute(
            REGISTER_PROCESS,
            &[
                &row.instance,
                &row.host,
                &row.pid_scope,
                &pid,
                &row.started_ms,
                &row.silent_after_ms,
            ],
        )
        .await?;
    Ok(Plan::outcome(row))
}

pub async fn heartbeat_process(
    session: &mut Session,
    instance: &str,
    now_ms: i64,
) -> Result<Plan<bool>, Failure> {
    let changed = session
        .execute(HEARTBEAT_PROCESS, &[&instance, &now_ms])
        .await?;
    Ok(Plan::outcome(changed == 1))
}

pub async fn end_process(
    session: &mut Session,
    instance: &str,
    end: ProcessEnd,
    now_ms: i64,
) -> Result<Plan<bool>, Failure> {
    let changed = session
        .execute(END_PROCESS, &[&instance, &end.as_str(), &now_ms])
        .await?;
    Ok(Plan::outcome(changed == 1))
}

pub async fn finish(session: &mut Session, finish: &Finish) -> Result<Plan<Finished>, Failure> {
    plan::check_finish(finish)?;
    let intent = lock_by_id(session, finish.id).await?;
    Ok(plan::finish(intent, finish)?)
}

/// A finish decided from the intent as this ledger last wrote it ([`super::known`]) instead
/// of a locked read, ready for [`write_known`].
pub struct KnownFinish {
    plan: Plan<Finished>,
    /// The version of the row the plan was decided from.
    version: i64,
    id: IntentId,
}

impl KnownFinish {
    /// Decides `finish` from `known`; `None` when the known record can't decide alone: a
    /// refused or superseded finish, or one that writes nothing (the row as it stands may
    /// say otherwise), or a plan that writes more than the intent and its events. The
    /// caller then reads, locks and decides as [`finish`] does.
    pub fn decide(known: Known, finish: &Finish) -> Option<KnownFinish> {
        let id = known.intent.id;
        let plan = plan::finish(known.intent, finish).ok()?;
        Guarded::of(&plan.writes, id, known.version)?;
        Some(KnownFinish {
            plan,
            version: known.version,
            id,
        })
    }
}

/// `finish` decided from the known intent (`Ledger::finish` of an intent this ledger just
/// began): [`write_known`] of that one finish. `None` when it was not decided or not written
/// (the row had changed): then the caller reads, locks and decides as [`finish`] does.
pub async fn finish_known(
    session: &mut Session,
    known: &Known,
    finish: &Finish,
    notify: &str,
) -> Result<Plan<Option<Finished>>, Failure> {
    plan::check_finish(finish)?;
    let Some(decided) = KnownFinish::decide(known.clone(), finish) else {
        // Nothing was sent: there is no transaction to end on the server.
        session.transaction_ended();
        let mut plan = Plan::outcome(None);
        plan.watched = false;
        return Ok(plan);
    };
    let Plan { outcome, .. } = write_known(session, std::slice::from_ref(&decided), notify).await?;
    let mut plan = Plan::outcome(outcome.and_then(|mut outcome| outcome.pop().flatten()));
    plan.watched = false;
    Ok(plan)
}

/// Writes `finishes` in the open transaction and commits it: the transaction's pending
/// `BEGIN`, each one's guarded write of its intent and events ([`UPDATE_INTENT_GUARDED`]),
/// the notifications on channel `notify` of those whose plan is watched, and `COMMIT`, all at
/// once: one round trip, however many finishes. Answers each one's outcome, or `None` for a
/// row that had changed since it was known (nothing of it was written). A statement the
/// server refused rolls back every finish of the group: then the answer is `None`, and each
/// finish is to be run alone, which tells its own error. The transaction is over either way.
pub async fn write_known(
    session: &mut Session,
    finishes: &[KnownFinish],
    notify: &str,
) -> Result<Plan<Option<Vec<Option<Finished>>>>, Failure> {
    let statement = session.statement(UPDATE_INTENT_GUARDED).await?;
    let notify_statement = session.statement(NOTIFY).await?;
    let guarded: Vec<Guarded<'_>> = finishes
        .iter()
        .map(|finish| {
            Guarded::of(&finish.plan.writes, finish.id, finish.version)
                .expect("a known finish writes its intent and events")
        })
        .collect();
    let parameters: Vec<[&(dyn ToSql + Sync); 24]> =
        guarded.iter().map(Guarded::parameters).collect();
    let ids: Vec<String> = finishes
        .iter()
        .map(|finish| finish.id.to_string())
        .collect();
    let begin = session.take_pending_begin();
    let client = &session.client;
    let mut sent: Vec<Answered<'_>> = Vec::with_capacity(2 * finishes.len() + 2);
    if let Some(begin) = begin {
        sent.push(Box::pin(async move {
            client.batch_execute(begin).await.map(|()| None)
        }));
    }
    for parameters in &parameters {
        let statement = &statement;
        sent.push(Box::pin(async move {
            client.query_opt(statement, parameters).await
        }));
    }
    for (finish, id) in finishes.iter().zip(&ids) {
        if finish.plan.watched {
            let statement = &notify_statement;
            sent.push(Box::pin(async move {
                let parameters: [&(dyn ToSql + Sync); 2] = [&notify, id];
                client.execute(statement, &parameters).await.map(|_| None)
            }));
        }
    }
    sent.push(Box::pin(async move {
        client.batch_execute("COMMIT").await.map(|()| None)
    }));
    // Sent in order, in one round trip, as in `commit`.
    let answers = join_all(sent).await;
    session.transaction_ended();
    let first = usize::from(begin.is_some());
    let mut applied = Vec::with_capacity(finishes.len());
    for (index, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(row) if (first..first + finishes.len()).contains(&index) => {
                applied.push(row.is_some())
            }
            Ok(_) => {}
            Err(error) if is_connection_lost(&error, session) => {
                return Err(Failure::Ledger(LedgerError::Storage(format!(
                    "lost the connection to PostgreSQL while committing {} finish(es) ({}); \
                     whether the commit took effect is unknown (an intent is then in flight \
                     and resolved by its lookup); check that the server is up and reachable",
                    finishes.len(),
                    super::describe(&error)
                ))));
            }
            // The server refused a statement: the COMMIT rolled everything back.
            Err(_) => {
                let mut plan = Plan::outcome(None);
                plan.watched = false;
                return Ok(plan);
            }
        }
    }
    let outcomes = finishes
        .iter()
        .zip(applied)
        .map(|(finish, applied)| applied.then(|| finish.plan.outcome.clone()))
        .collect();
    let outcomes = Some(outcomes);
    let mut plan = Plan::outcome(outcomes);
    // Sent above, or not due.
    plan.watched = false;
    Ok(plan)
}

/// The write of a [`KnownFinish`]'s plan as [`UPDATE_INTENT_GUARDED`] binds it: the plan
/// must write the known intent's row first, then only its events.
struct Guarded<'a> {
    stored: &'a StoredIntent,
    version: i64,
    status: &'static str,
    attempt: i64,
    epoch: i64,
    call_count: i64,
    resend_stopped: Option<&'static str>,
    events: EventArrays<'a>,
}

/// Events as the statements that append several bind them: a column each, in order.
struct EventArrays<'a> {
    tenants: Vec<&'a str>,
    tools: Vec<&'a str>,
    at_ms: Vec<i64>,
    kinds: Vec<&'static str>,
    from: Vec<Option<&'static str>>,
    to: Vec<Option<&'static str>>,
    attempts: Vec<Option<i64>>,
    actors: Vec<Option<&'a str>>,
    details: Vec<Option<&'a str>>,
}

impl<'a> EventArrays<'a> {
    fn of(events: &[&'a NewEvent]) -> EventArrays<'a> {
        EventArrays {
            tenants: events.iter().map(|event| event.tenant.as_str()).collect(),
            tools: events.iter().map(|event| event.tool.as_str()).collect(),
            at_ms: events.iter().map(|event| event.at_ms).collect(),
            kinds: events.iter().map(|event| event.kind).collect(),
            from: events
                .iter()
                .map(|event| event.from_status.map(IntentStatus::as_str))
                .collect(),
            to: events
                .iter()
                .map(|event| event.to_status.map(IntentStatus::as_str))
                .collect(),
            attempts: events
                .iter()
                .map(|event| event.attempt.map(i64::from))
                .collect(),
            actors: events.iter().map(|event| event.actor.as_deref()).collect(),
            details: events.iter().map(|event| event.detail.as_deref()).collect(),
        }
    }
}

impl<'a> Guarded<'a> {
    /// The plan's `writes` guarded by `version`, if they are the intent `id`'s row and then
    /// only its events.
    fn of(writes: &'a [Write], id: IntentId, version: i64) -> Option<Guarded<'a>> {
        let (Write::Intent(stored), events) = writes.split_first()? else {
            return None;
        };
        if stored.intent.id != id {
            return None;
        }
        let events: Vec<&NewEvent> = events
            .iter()
            .map(|write| match write {
                Write::Event(event) if event.intent_id == Some(id) => Some(event),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let intent = &stored.intent;
        Some(Guarded {
            stored,
            version,
            status: intent.status.as_str(),
            attempt: i64::from(intent.attempt),
            epoch: i64::from(intent.epoch),
            call_count: intent.call_count as i64,
            resend_stopped: intent.resend_stopped.map(ResendStop::as_str),
            events: EventArrays::of(&events),
        })
    }

    fn parameters(&self) -> [&(dyn ToSql + Sync); 24] {
        let intent = &self.stored.intent;
        [
            &intent.id,
            &self.status,
            &self.attempt,
            &self.epoch,
            &intent.lease_owner,
            &intent.lease_expires_ms,
            &self.stored.result,
            &intent.external_id,
            &intent.resolved_by,
            &self.call_count,
            &intent.last_seen_ms,
            &intent.updated_ms,
            &intent.last_lookup_ms,
            &self.resend_stopped,
            &self.version,
            &self.events.tenants,
            &self.events.tools,
            &self.events.at_ms,
            &self.events.kinds,
            &self.events.from,
            &self.events.to,
            &self.events.attempts,
            &self.events.actors,
            &self.events.details,
        ]
    }
}

pub async fn renew(session: &mut Session, renew: &Renew) -> Result<Plan<Renewed>, Failure> {
    let intent = lock_by_id(session, renew.id).await?;
    Ok(plan::renew(intent, renew)?)
}

/// Counts repeats, each `(id, now_ms)` as `plan::record_call` would, in one transaction:
/// each intent locked once, in id order, and its count written once
/// (`plan::record_calls`). Answers the ids of intents gone meanwhile, whose repeats count
/// for nothing.
pub async fn record_calls(
    session: &mut Session,
    calls: &[(IntentId, i64)],
) -> Result<Plan<Vec<IntentId>>, Failure> {
    let mut writes = Vec::new();
    let mut gone = Vec::new();
    for (id, calls) in plan::calls_by_intent(calls) {
        match lock_by_id(session, id).await {
            Ok(intent) => writes.extend(plan::record_calls(intent, &calls).writes),
            Err(Failure::Ledger(LedgerError::NotFound(_))) => gone.push(id),
            Err(failure) => return Err(failure),
        }
    }
    Ok(Plan::new(writes, gone))
}

pub async fn resolve(
    session: &mut Session,
    resolve: &Resolve,
) -> Result<Plan<IntentRecord>, Failure> {
    plan::check_resolve(resolve)?;
    let intent = lock_by_id(session, resolve.id).await?;
    Ok(plan::resolve(intent, resolve)?)
}

/// `Ledger::decide` on the intent (locked) and its approval. The budgets an approval counts
/// are added to without a lock: the approver has decided, whatever the window holds.
pub async fn decide(session: &mut Session, decide: &Decide) -> Result<Plan<Decided>, Failure> {
    plan::check_decide(decide)?;
    let intent = lock_by_id(session, decide.id).await?;
    let approval = approval(session, decide.id).await?;
    Ok(plan::decide(intent, approval, decide)?)
}

/// The intents whose open approval is due at `now_ms`, oldest deadline first, at most
/// `limit` (cut to [`APPROVALS_PAGE_MAX`]).
pub async fn due_approvals(
    session: &mut Session,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<IntentId>, Failure> {
    let limit = i64::from(limit.min(APPROVALS_PAGE_MAX));
    let rows = session.query(DUE_APPROVALS, &[&now_ms, &limit]).await?;
    rows.iter().map(|row| Ok(row.try_get(0)?)).collect()
}

/// Expires the approval of the intent `id` (locked) if it is still due; `None` once it was
/// decided, or the intent deleted, meanwhile.
pub async fn expire_approval(
    session: &mut Session,
    id: IntentId,
    now_ms: i64,
) -> Result<Plan<Option<HeldIntent>>, Failure> {
    let Some(row) = session.query_opt(BY_ID_LOCKED, &[&id]).await? else {
        return Ok(Plan::outcome(None));
    };
    let intent = read_intent(&row)?;
    let approval = approval(session, id).await?;
    Ok(plan::expire_approval(intent, approval, now_ms)?)
}

/// `Ledger::approvals`: one page, from [`query::approvals_query`].
pub async fn approvals(
    session: &mut Session,
    filter: &ApprovalFilter,
    before: Option<IntentId>,
    limit: u32,
) -> Result<Vec<HeldIntent>, Failure> {
    let Some(query) = query::approvals_query(
        filter,
        before,
        limit,
        intent_columns!(),
        approval_columns!(),
        Dialect::Postgres,
    ) else {
        return Ok(Vec::new());
    };
    let rows = session.query_unprepared(&query.sql, &bound(&query)).await?;
    rows.iter()
        .map(|row| {
            Ok(HeldIntent {
                intent: read_intent(row)?,
                approval: read_approval(row, INTENT_COLUMN_COUNT)?,
            })
        })
        .collect()
}

/// `Ledger::budget_usage`.
pub async fn budget_usage(
    session: &mut Session,
    tool: &str,
    now_ms: i64,
) -> Result<Vec<BudgetUsageRow>, Failure> {
    let rows = session.query(BUDGET_USAGE, &[&tool, &now_ms]).await?;
    let usage = rows
        .iter()
        .map(|row| {
            Ok(BudgetUsageRow {
                tool: row.try_get(0)?,
                budget: row.try_get(1)?,
                bucket: row.try_get(2)?,
                window_start_ms: row.try_get(3)?,
                window_end_ms: row.try_get(4)?,
                count: count(row, 5, "budget_usage.count")?,
                units: count(row, 6, "budget_usage.units")?,
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok(plan::budget_usage_rows(usage))
}

pub fn record_disabled_call(tenant: &str, tool: &str, now_ms: i64) -> Result<Plan<()>, Failure> {
    let event = plan::disabled_call(tenant, tool, now_ms)?;
    Ok(Plan::new(vec![Write::Event(event)], ()))
}

pub async fn set_tool_flag(session: &mut Session, flag: &ToolFlag) -> Result<Plan<()>, Failure> {
    let (flag, event) = plan::tool_flag(flag)?;
    session
        .execute(
            UPSERT_TOOL_FLAG,
            &[
                &flag.tool,
                &flag.enabled,
                &flag.reason,
                &flag.actor,
                &flag.updated_ms,
            ],
        )
        .await?;
    Ok(Plan::new(vec![Write::Event(event)], ()))
}

pub async fn tool_flags(session: &mut Session) -> Result<Vec<ToolFlag>, Failure> {
    let rows = session.query(TOOL_FLAGS, &[]).await?;
    rows.iter()
        .map(|row| {
            Ok(ToolFlag {
                tool: row.try_get(0)?,
                enabled: row.try_get(1)?,
                reason: row.try_get(2)?,
                actor: row.try_get(3)?,
                updated_ms: row.try_get(4)?,
            })
        })
        .collect()
}

pub async fn purge(session: &mut Session, before_ms: i64) -> Result<Plan<u64>, Failure> {
    let ids: Vec<IntentId> = session
        .query(PURGEABLE_LOCKED, &[&before_ms])
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    session.execute(DELETE_EVENTS_OF, &[&ids]).await?;
    session
        .execute(DELETE_DISABLED_CALLS, &[&before_ms])
        .await?;
    let purged = session.execute(DELETE_INTENTS, &[&ids]).await?;
    session.execute(PURGE_CALLER_KEYS, &[&before_ms]).await?;
    session.execute(PURGE_BUDGET_USAGE, &[&before_ms]).await?;
    session.execute(DELETE_RUNS, &[&before_ms]).await?;
    session.execute(DELETE_OLD_PROCESSES, &[&before_ms]).await?;
    session
        .execute(
            DELETE_ENDED_PROCESSES_BEYOND,
            &[&i64::from(PROCESSES_ENDED_KEPT_MAX)],
        )
        .await?;
    Ok(Plan::outcome(purged))
}

/// The parameters of a statement built by [`crate::plan`], as the driver takes them.
fn bound(query: &Query) -> Vec<&(dyn ToSql + Sync)> {
    query
        .parameters
        .iter()
        .map(|parameter| match parameter {
            Parameter::Integer(value) => value as &(dyn ToSql + Sync),
            Parameter::Text(text) => text as &(dyn ToSql + Sync),
        })
        .collect()
}

/// The ids a `SELECT id ...` of [`query::erase_queries`] returns.
async fn erase_ids(session: &mut Session, query: &Query) -> Result<Vec<IntentId>, Failure> {
    let rows = session.query_unprepared(&query.sql, &bound(query)).await?;
    rows.iter().map(|row| Ok(row.try_get(0)?)).collect()
}

pub async fn erase(session: &mut Session, erase: &Erase) -> Result<Plan<Erasure>, Failure> {
    let queries = query::erase_queries(erase, Dialect::Postgres)?;
    // Lock the batch first: no replica's `begin` can take one of these intents between the
    // checks below and the deletes.
    let locked = Query {
        sql: format!("{} FOR UPDATE", queries.batch.sql),
        parameters: queries.batch.parameters.clone(),
    };
    let mut batch = erase_ids(session, &locked).await?;
    let busy = erase_ids(session, &queries.busy).await?;
    let unsettled = erase_ids(session, &queries.unsettled).await?;
    if let Some(refusal) = plan::erase_refusal(busy, unsettled, erase.force) {
        return Ok(Plan::outcome(refusal));
    }
    let more = batch.len() > ERASE_BATCH_MAX as usize;
    batch.truncate(ERASE_BATCH_MAX as usize);
    let mut erased = Erased {
        more,
        ..Erased::default()
    };
    erased.events = session.execute(DELETE_EVENTS_OF, &[&batch]).await?;
    session.execute(DELETE_CALLER_KEYS_OF, &[&batch]).await?;
    erased.intents = session.execute(DELETE_INTENTS, &[&batch]).await?;
    if !more {
        let query = &queries.unbound_caller_keys;
        session
            .execute_unprepared(&query.sql, &bound(query))
            .await?;
    }
    erased.mismatches = session
        .execute_unprepared(&queries.mismatches.sql, &bound(&queries.mismatches))
        .await?;
    if let Some(query) = &queries.disabled_calls {
        erased.events += session
            .execute_unprepared(&query.sql, &bound(query))
            .await?;
    }
    let event = plan::erasure_event(erase, &erased);
    Ok(Plan::new(
        vec![Write::Event(event)],
        Erasure::Erased(erased),
    ))
}

/// A count column, which the schema keeps non-negative.
fn count(row: &Row, index: usize, column: &str) -> Result<u64, Failure> {
    let value: i64 = row.try_get(index)?;
    u64::try_from(value).map_err(|_| corrupt(column, format!("the count {value} is negative")))
}

pub async fn intents(
    session: &mut Session,
    filter: &IntentFilter,
    order: Order,
    cursor: Option<IntentId>,
    limit: u32,
) -> Result<Vec<IntentRecord>, Failure> {
    let Some(query) = query::intents_query(
        filter,
        order,
        cursor,
        limit,
        intent_columns!(),
        Dialect::Postgres,
    ) else {
        return Ok(Vec::new());
    };
    let rows = session.query_unprepared(&query.sql, &bound(&query)).await?;
    read_intents(&rows)
}

pub async fn status_counts(session: &mut Session) -> Result<Vec<StatusCount>, Failure> {
    let rows = session.query(STATUS_COUNTS, &[]).await?;
    let counts = rows
        .iter()
        .map(|row| {
            let status: String = row.try_get(1)?;
            Ok(StatusCount {
                tool: row.try_get(0)?,
                status: status
                    .parse()
                    .map_err(|error| corrupt("intents.status", error))?,
                count: count(row, 2, "count")?,
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok(plan::status_counts(counts))
}

/// Inserts a run checked by [`plan::reconciliation`] and its mismatches; returns its id.
pub async fn record_reconciliation(
    session: &mut Session,
    run: &StoredRun,
    mismatches: &[MismatchRow],
) -> Result<Plan<i64>, Failure> {
    let inserted = session
        .query_opt(
            INSERT_RUN,
            &[
                &run.run.started_ms,
                &run.run.finished_ms,
                &run.run.since_ms,
                &run.run.until_ms,
                &run.run.actor,
                &run.intents_checked,
                &run.records_checked,
                &run.mismatches,
                &run.critical,
                &run.summary,
            ],
        )
        .await?;
    let run_id: i64 = inserted
        .ok_or_else(|| corrupt("reconciliation_runs", "the insert returned no id"))?
        .try_get(0)?;
    if !mismatches.is_empty() {
        let column = |field: fn(&MismatchRow) -> Option<String>| -> Vec<Option<String>> {
            mismatches.iter().map(field).collect()
        };
        let positions: Vec<i64> = (0..mismatches.len() as i64).collect();
        let tools = column(|row| Some(row.mismatch.tool.clone()));
        let kinds = column(|row| Some(row.mismatch.kind.clone()));
        let severities = column(|row| Some(row.mismatch.severity.clone()));
        let intent_ids: Vec<Option<i64>> = mismatches
            .iter()
            .map(|row| row.mismatch.intent_id)
            .collect();
        let tenants = column(|row| row.mismatch.tenant.clone());
        let keys = column(|row| row.mismatch.intent_key.clone());
        let external_ids = column(|row| Some(row.external_ids.clone()));
        let subjects = column(|row| row.mismatch.subject.clone());
        let details = column(|row| Some(row.mismatch.detail.clone()));
        session
            .execute(
                INSERT_MISMATCHES,
                &[
                    &run_id,
                    &positions,
                    &tools,
                    &kinds,
                    &severities,
                    &intent_ids,
                    &tenants,
                    &keys,
                    &external_ids,
                    &subjects,
                    &details,
                ],
            )
            .await?;
    }
    Ok(Plan::outcome(run_id))
}

fn read_run(row: &Row) -> Result<ReconciliationRun, Failure> {
    let summary: String = row.try_get(10)?;
    Ok(ReconciliationRun {
        id: row.try_get(0)?,
        started_ms: row.try_get(1)?,
        finished_ms: row.try_get(2)?,
        since_ms: row.try_get(3)?,
        until_ms: row.try_get(4)?,
        actor: row.try_get(5)?,
        intents_checked: count(row, 6, "reconciliation_runs.intents_checked")?,
        records_checked: count(row, 7, "reconciliation_runs.records_checked")?,
        mismatches: count(row, 8, "reconciliation_runs.mismatches")?,
        critical: count(row, 9, "reconciliation_runs.critical")?,
        summary: serde_json::from_str(&summary)
            .map_err(|error| corrupt("reconciliation_runs.summary", error))?,
    })
}

pub async fn reconciliations(
    session: &mut Session,
    limit: u32,
) -> Result<Vec<ReconciliationRun>, Failure> {
    let limit = i64::from(limit.min(RECONCILIATIONS_PAGE_MAX));
    let rows = session.query(RUNS, &[&limit]).await?;
    rows.iter().map(read_run).collect()
}

pub async fn reconciliation(
    session: &mut Session,
    run_id: i64,
) -> Result<Option<ReconciliationRun>, Failure> {
    let row = session.query_opt(RUN, &[&run_id]).await?;
    row.as_ref().map(read_run).transpose()
}

pub async fn reconciliation_mismatches(
    session: &mut Session,
    run_id: i64,
    limit: u32,
) -> Result<Vec<StoredMismatch>, Failure> {
    let limit = (limit as usize).min(RECONCILIATION_MISMATCHES_STORED_MAX) as i64;
    let rows = session.query(MISMATCHES, &[&run_id, &limit]).await?;
    rows.iter()
        .map(|row| {
            let external_ids: String = row.try_get(7)?;
            Ok(StoredMismatch {
                run_id: row.try_get(0)?,
                tool: row.try_get(1)?,
                kind: row.try_get(2)?,
                severity: row.try_get(3)?,
                intent_id: row.try_get(4)?,
                tenant: row.try_get(5)?,
                intent_key: row.try_get(6)?,
                external_ids: serde_json::from_str(&external_ids)
                    .map_err(|error| corrupt("reconciliation_mismatches.external_ids", error))?,
                subject: row.try_get(8)?,
                detail: row.try_get(9)?,
            })
        })
        .collect()
}

/// `Ledger::bind_caller_key`: binds the caller key, or answers how it is bound.
pub async fn bind_caller_key(
    session: &mut Session,
    binding: &CallerKey,
) -> Result<Plan<Bound>, Failure> {
    let row = session
        .query_opt(
            BIND_CALLER_KEY,
            &[
                &binding.tenant,
                &binding.tool,
                &binding.caller_key,
                &binding.intent_key,
                &binding.fingerprint,
                &binding.bound_ms,
            ],
        )
        .await?
        .ok_or_else(|| corrupt("caller_keys", "a binding returned no row"))?;
    if row.try_get::<_, bool>(3)? {
        return Ok(Plan::outcome(Bound::New));
    }
    let stored = CallerKey {
        intent_key: row.try_get(0)?,
        fingerprint: row.try_get(1)?,
        bound_ms: row.try_get(2)?,
        ..binding.clone()
    };
    Ok(Plan::outcome(plan::bound(stored, binding)))
}

/// Keeps `traceparent` for the intent `id` (`Ledger::record_trace`), replacing an earlier
/// attempt's; nothing for an intent that no longer exists.
pub async fn record_trace(
    session: &mut Session,
    id: IntentId,
    traceparent: &str,
) -> Result<Plan<()>, Failure> {
    session
        .execute(
            "INSERT INTO intent_traces (intent_id, traceparent) \
             SELECT id, $2 FROM intents WHERE id = $1 \
             ON CONFLICT (intent_id) DO UPDATE SET traceparent = excluded.traceparent",
            &[&id, &traceparent],
        )
        .await?;
    Ok(Plan::outcome(()))
}

/// The `traceparent` kept for the intent `id` (`Ledger::trace_of`).
pub async fn trace_of(session: &mut Session, id: IntentId) -> Result<Option<String>, Failure> {
    let row = session
        .query_opt(
            "SELECT traceparent FROM intent_traces WHERE intent_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|row| row.get(0)))
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use tokio_postgres::NoTls;

    use super::*;
    use crate::postgres::{PostgresLedger, PostgresOptions};

    /// `DATABASE_URL`, or `None` (the test is skipped, and says so) where it is unset;
    /// required under `CI=true`.
    fn test_url() -> Option<String> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => Some(url),
            _ if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("DATABASE_URL is not set and CI=true: CI must run the PostgreSQL tests")
            }
            _ => {
                eprintln!("skipped: DATABASE_URL is not set; set it to a PostgreSQL URL");
                None
            }
        }
    }

    /// A connection of its own to the server at `url`.
    async fn connect(url: &str) -> tokio_postgres::Client {
        let (client, connection) = url
            .parse::<tokio_postgres::Config>()
            .unwrap()
            .connect(NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    /// The options of a ledger in a schema of its own, named `prefix`, the process and the
    /// time, so that concurrent tests and runs never share one.
    fn scratch_options(prefix: &str) -> PostgresOptions {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        PostgresOptions {
            schema: format!("{prefix}_{}_{nanos}", std::process::id()),
            ..PostgresOptions::default()
        }
    }

    /// A migration that PostgreSQL ends to break a deadlock with another session (a
    /// replica's write during a rolling upgrade) is tried again: the replica starts.
    #[tokio::test]
    async fn a_migration_ended_by_a_deadlock_is_tried_again() {
        let Some(url) = test_url() else { return };
        let options = scratch_options("deadlock");
        let schema = options.schema.clone();
        let ledger = PostgresLedger::connect(&url, options).await.unwrap();
        let (mut other, watcher, mut starting) = (
            connect(&url).await,
            connect(&url).await,
            connect(&url).await,
        );
        // Another session holds the migrations' table...
        let held = other.transaction().await.unwrap();
        held.batch_execute(&format!(
            "LOCK TABLE \"{schema}\".schema_migrations IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
        // ...while a starting replica's migration takes the advisory lock and waits for it.
        let migrating = schema.clone();
        let migration = tokio::spawn(async move {
            crate::postgres::schema::migrate(&mut starting, &migrating).await
        });
        let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = 'schema_migrations' AND NOT l.granted";
        while watcher
            .query_one(waiting, &[&schema])
            .await
            .unwrap()
            .get::<_, i64>(0)
            == 0
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // The other session now waits for the advisory lock: a deadlock, which PostgreSQL
        // breaks by ending the migration (whose wait began first).
        held.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&crate::postgres::schema::MIGRATION_LOCK_CLASS, &schema],
        )
        .await
        .unwrap();
        held.commit().await.unwrap();
        let migrated = tokio::time::timeout(std::time::Duration::from_secs(30), migration)
            .await
            .expect("the migration is tried again and ends")
            .unwrap();
        assert!(migrated.is_ok(), "{:?}", migrated.err());
        drop(ledger);
        watcher
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await
            .unwrap();
    }

    /// The read of a key found taken, sent with every new intent's insert, finds the key by
    /// its unique index, never by scanning the table.
    #[tokio::test]
    async fn a_key_found_taken_is_read_by_its_unique_index() {
        let Some(url) = test_url() else { return };
        let options = scratch_options("plan");
        let schema = options.schema.clone();
        let ledger = PostgresLedger::connect(&url, options).await.unwrap();
        let client = connect(&url).await;
        client
            .batch_execute(&format!("SET search_path TO \"{schema}\""))
            .await
            .unwrap();
        let explained = client
            .query(
                &format!("EXPLAIN {BY_KEY_TAKEN}"),
                &[&"acme", &"refund", &"order-1"],
            )
            .await;
        ledger.destroy().await.unwrap();
        let plan: Vec<String> = explained
            .unwrap()
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect();
        let plan = plan.join("\n");
        assert!(plan.contains("Index"), "{plan}");
        assert!(!plan.contains("Seq Scan"), "{plan}");
    }

    /// A lookup by key is planned once per connection for every key (the generic plan of a
    /// prepared statement), often while the table is young: before its first ANALYZE, and
    /// after an ANALYZE of a few rows. Either way the plan must read the key's own index,
    /// not every intent of the tool nor the whole table, since it is kept as the table grows.
    #[tokio::test]
    async fn a_key_lookup_is_planned_on_the_key_index_while_the_table_is_young() {
        let Some(url) = test_url() else { return };
        let options = scratch_options("young");
        let ledger = PostgresLedger::connect(&url, options.clone())
            .await
            .unwrap();
        // A connection with the ledger's own settings.
        let (config, _) = crate::postgres::connection_config(&url, &options).unwrap();
        let (client, connection) = config.connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(
                "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, status, \
                 attempt, epoch, call_count, first_seen_ms, last_seen_ms, updated_ms) \
                 SELECT 'acme', 'refund', 'order-' || n, repeat('f', 64), '{}', 'done', 1, 1, 1, \
                 n, n, n FROM generate_series(1, 3) AS n; \
                 SET plan_cache_mode = force_generic_plan",
            )
            .await
            .unwrap();
        let mut plans = Vec::new();
        for (young, analyze) in [
            ("before the first ANALYZE", false),
            ("after an ANALYZE of three rows", true),
        ] {
            if analyze {
                client.batch_execute("ANALYZE intents").await.unwrap();
            }
            for (name, sql) in [
                ("by_key", BY_KEY),
                ("by_key_locked", BY_KEY_LOCKED),
                ("by_key_taken", BY_KEY_TAKEN),
            ] {
                let explained = client
                    .simple_query(&format!(
                        "DEALLOCATE ALL; PREPARE {name} (text, text, text) AS {sql}; \
                         EXPLAIN EXECUTE {name} ('acme', 'refund', 'order-2')"
                    ))
                    .await
                    .unwrap();
                let plan: Vec<&str> = explained
                    .iter()
                    .filter_map(|message| match message {
                        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0),
                        _ => None,
                    })
                    .collect();
                plans.push((young, name, plan.join("\n")));
            }
        }
        ledger.destroy().await.unwrap();
        for (young, name, plan) in plans {
            // The key's three columns are the index's condition, not a filter of its rows.
            let on_the_key = plan.lines().any(|line| {
                line.trim_start().starts_with("Index Cond:")
                    && ["tenant", "tool", "intent_key"]
                        .iter()
                        .all(|column| line.contains(column))
            });
            assert!(
                plan.contains("Index Scan using intents_by_key on intents") && on_the_key,
                "{name}, {young}, is planned on another index than the key's:\n{plan}"
            );
        }
    }
}

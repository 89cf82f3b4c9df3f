//! The body of every ledger operation, run inside one SQLite transaction (a savepoint of a
//! grouped commit). Each reads the intent, asks [`crate::plan`] what to do (which checks
//! every status change with the core state machine) and applies the writes it returns.
//!
//! A new intent's `begin` writes only its row of `intents_begun` (schema migration 8): the
//! write that must be durable before the request leaves touches two small b-trees instead
//! of the ten of a row of `intents` and its events. The next write of the intent moves it to
//! `intents` in its own transaction ([`apply_to`]), writing the wide row once, as that write
//! leaves it; a read of one intent looks in both tables, and a read of many is made after
//! [`move_all_begun`].

use std::borrow::Cow;
use std::sync::LazyLock;

use intentgate_core::{IntentStatus, ResendStop};
use rusqlite::types::ToSqlOutput;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use intentgate_core::policy::BudgetUsage;

use crate::plan::{
    self, BudgetCount, Fresh, MismatchRow, NewCall, NewEvent, Plan, StoredIntent, StoredRun, Write,
};
use crate::process::{PROCESSES_ENDED_KEPT_MAX, ProcessEnd, ProcessRecord, ProcessRegistration};
use crate::query::{self, Dialect, Parameter, Query};
use crate::record::{
    Approval, BudgetUsageRow, Decision, Event, IntentId, IntentRecord, ReconciliationRun,
    StatusCount, StoredMismatch, ToolFlag,
};
use crate::{
    APPROVALS_PAGE_MAX, ApprovalFilter, Begin, BeginRequest, Bound, BudgetCharge, CallerKey,
    Created, Decide, Decided, ERASE_BATCH_MAX, Erase, Erased, Erasure, Finish, Finished,
    HeldIntent, IntentFilter, LedgerError, Order, RECONCILIATION_MISMATCHES_STORED_MAX,
    RECONCILIATIONS_PAGE_MAX, Renew, Renewed, Resolve,
};

const INTENT_COLUMNS: &str = "id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
     lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, first_seen_ms, last_seen_ms, \
     updated_ms, last_lookup_ms, resend_stopped";

/// A column whose value this version can't read.
fn corrupt(index: usize, message: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, message.into())
}

/// A count column, which the schema keeps non-negative.
fn count(row: &Row<'_>, index: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(index)?;
    u64::try_from(value).map_err(|_| corrupt(index, format!("the count {value} is negative")))
}

fn read_intent(row: &Row<'_>) -> rusqlite::Result<IntentRecord> {
    let status: String = row.get(6)?;
    let arguments: String = row.get(5)?;
    let result: Option<String> = row.get(11)?;
    let resend_stopped: Option<String> = row.get(19)?;
    Ok(IntentRecord {
        id: row.get(0)?,
        tenant: row.get(1)?,
        tool: row.get(2)?,
        key: row.get(3)?,
        fingerprint: row.get(4)?,
        arguments: serde_json::from_str(&arguments)
            .map_err(|error| corrupt(5, error.to_string()))?,
        status: status.parse().map_err(|message| corrupt(6, message))?,
        attempt: row.get(7)?,
        epoch: row.get(8)?,
        lease_owner: row.get(9)?,
        lease_expires_ms: row.get(10)?,
        result: result
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|error| corrupt(11, error.to_string()))?,
        external_id: row.get(12)?,
        resolved_by: row.get(13)?,
        call_count: row.get::<_, i64>(14)? as u64,
        first_seen_ms: row.get(15)?,
        last_seen_ms: row.get(16)?,
        updated_ms: row.get(17)?,
        last_lookup_ms: row.get(18)?,
        resend_stopped: resend_stopped
            .map(|text| text.parse())
            .transpose()
            .map_err(|message| corrupt(19, message))?,
    })
}

/// The columns of `intents_begun` read as an intent, in the order of [`INTENT_COLUMNS`]: a
/// begun intent has no result, external id, resolver, lookup or stop yet.
const BEGUN_COLUMNS: &str = "id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
     lease_owner, lease_expires_ms, NULL, NULL, NULL, call_count, first_seen_ms, last_seen_ms, \
     updated_ms, NULL, NULL";

/// Which table holds an intent read for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// `intents`: its wide row.
    Wide,
    /// `intents_begun`: begun and not yet moved.
    Begun,
}

/// An intent read with the table it was found in (the column after [`INTENT_COLUMNS`]).
fn read_held(row: &Row<'_>) -> rusqlite::Result<(IntentRecord, Held)> {
    let held = if row.get::<_, bool>(INTENT_COLUMN_COUNT)? {
        Held::Begun
    } else {
        Held::Wide
    };
    Ok((read_intent(row)?, held))
}

/// The intent of a key: in `intents`, else begun and not yet moved. One statement, so one
/// snapshot: a move made meanwhile by another connection can't hide the intent from both.
pub fn get(
    connection: &Connection,
    tenant: &str,
    tool: &str,
    key: &str,
) -> Result<Option<IntentRecord>, LedgerError> {
    Ok(get_held(connection, tenant, tool, key)?.map(|(intent, _)| intent))
}

/// The intent of (tenant, tool, key) as `?1`, `?2`, `?3`, then 0 when it is in `intents`, 1
/// when in `intents_begun`. Built once: a call's lookup runs it on every new call.
static BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {INTENT_COLUMNS}, 0 FROM intents WHERE tenant = ?1 AND tool = ?2 AND intent_key = ?3 \
         UNION ALL \
         SELECT {BEGUN_COLUMNS}, 1 FROM intents_begun WHERE tenant = ?1 AND tool = ?2 AND intent_key = ?3 \
         LIMIT 1"
    )
});

/// [`get`], with the table the intent was found in.
fn get_held(
    connection: &Connection,
    tenant: &str,
    tool: &str,
    key: &str,
) -> Result<Option<(IntentRecord, Held)>, LedgerError> {
    Ok(connection
        .prepare_cached(&BY_KEY)?
        .query_row(params![tenant, tool, key], read_held)
        .optional()?)
}

/// The intent `id`: in `intents`, else begun and not yet moved (one snapshot, as [`get`]).
pub fn get_by_id(
    connection: &Connection,
    id: IntentId,
) -> Result<Option<IntentRecord>, LedgerError> {
    Ok(get_by_id_held(connection, id)?.map(|(intent, _)| intent))
}

/// The intent `?1`, then 0 when it is in `intents`, 1 when in `intents_begun`. The begun
/// table first: what asks for an intent by id is mostly the finish or the settle of an
/// attempt just begun. Built once.
static BY_ID: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {BEGUN_COLUMNS}, 1 FROM intents_begun WHERE id = ?1 \
         UNION ALL SELECT {INTENT_COLUMNS}, 0 FROM intents WHERE id = ?1 LIMIT 1"
    )
});

/// [`get_by_id`], with the table the intent was found in.
fn get_by_id_held(
    connection: &Connection,
    id: IntentId,
) -> Result<Option<(IntentRecord, Held)>, LedgerError> {
    Ok(connection
        .prepare_cached(&BY_ID)?
        .query_row(params![id], read_held)
        .optional()?)
}

/// Moves the begun intents whose ids are between `?1` and `?2` to `intents`, and the events
/// of their creation to the log, in id order (each intent's events in the order logged),
/// then deletes them from `intents_begun`. Each row keeps the id it was begun with.
const MOVE_BEGUN: [&str; 3] = [
    "INSERT INTO intents (id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, \
     epoch, lease_owner, lease_expires_ms, call_count, first_seen_ms, last_seen_ms, updated_ms) \
     SELECT id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
     lease_owner, lease_expires_ms, call_count, first_seen_ms, last_seen_ms, updated_ms \
     FROM intents_begun WHERE id BETWEEN ?1 AND ?2 ORDER BY id",
    "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, \
     actor, detail) \
     SELECT begun.id, begun.tenant, begun.tool, json_extract(event.value, '$.at_ms'), \
     json_extract(event.value, '$.kind'), json_extract(event.value, '$.from_status'), \
     json_extract(event.value, '$.to_status'), json_extract(event.value, '$.attempt'), \
     json_extract(event.value, '$.actor'), json_extract(event.value, '$.detail') \
     FROM intents_begun AS begun, json_each(begun.events) AS event \
     WHERE begun.id BETWEEN ?1 AND ?2 ORDER BY begun.id, event.key",
    "DELETE FROM intents_begun WHERE id BETWEEN ?1 AND ?2",
];

/// Moves the ids `first..=last` of `intents_begun` to `intents`; returns how many.
fn move_begun_ids(
    connection: &Connection,
    first: IntentId,
    last: IntentId,
) -> Result<u64, LedgerError> {
    let [intents, events, delete] = MOVE_BEGUN;
    let moved = connection
        .prepare_cached(intents)?
        .execute(params![first, last])?;
    if moved == 0 {
        return Ok(0);
    }
    connection
        .prepare_cached(events)?
        .execute(params![first, last])?;
    let deleted = connection
        .prepare_cached(delete)?
        .execute(params![first, last])?;
    assert_eq!(moved, deleted, "every begun intent moved is deleted");
    Ok(moved as u64)
}

/// Moves every begun intent to `intents` (before a read or a write of many intents, and at
/// open: what a crash left begun); returns how many.
pub fn move_all_begun(connection: &Connection) -> Result<u64, LedgerError> {
    move_begun_ids(connection, IntentId::MIN, IntentId::MAX)
}

/// Whether any intent is begun and not yet moved to `intents`.
pub fn any_begun(connection: &Connection) -> Result<bool, LedgerError> {
    Ok(connection
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM intents_begun)")?
        .query_row([], |row| row.get(0))?)
}

/// The binding of caller key `binding.caller_key` in its tenant and tool, if there is one.
pub fn caller_key(
    connection: &Connection,
    binding: &CallerKey,
) -> Result<Option<CallerKey>, LedgerError> {
    Ok(connection
        .prepare_cached(
            "SELECT intent_key, fingerprint, bound_ms FROM caller_keys \
             WHERE tenant = ?1 AND tool = ?2 AND caller_key = ?3",
        )?
        .query_row(
            params![binding.tenant, binding.tool, binding.caller_key],
            |row| {
                Ok(CallerKey {
                    intent_key: row.get(0)?,
                    fingerprint: row.get(1)?,
                    bound_ms: row.get(2)?,
                    ..binding.clone()
                })
            },
        )
        .optional()?)
}

/// `Ledger::bind_caller_key` on the writer: the single writer reads what the insert found.
pub fn bind_caller_key(connection: &Connection, binding: &CallerKey) -> Result<Bound, LedgerError> {
    let inserted = connection
        .prepare_cached(
            "INSERT INTO caller_keys (tenant, tool, caller_key, intent_key, fingerprint, bound_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (tenant, tool, caller_key) DO NOTHING",
        )?
        .execute(params![
            binding.tenant,
            binding.tool,
            binding.caller_key,
            binding.intent_key,
            binding.fingerprint,
            binding.bound_ms
        ])?;
    if inserted == 1 {
        return Ok(Bound::New);
    }
    let stored = caller_key(connection, binding)?.ok_or_else(|| {
        LedgerError::Corrupt("a caller key refused as bound is not in caller_keys".to_owned())
    })?;
    Ok(plan::bound(stored, binding))
}

/// The intent `id` for a write, and the table it is in: a begun intent is moved by the
/// plan's first write of it ([`apply_to`]).
fn must_get(connection: &Connection, id: IntentId) -> Result<(IntentRecord, Held), LedgerError> {
    get_by_id_held(connection, id)?.ok_or(LedgerError::NotFound(id))
}

/// The columns of an approval, in the order [`read_approval`] reads them.
const APPROVAL_COLUMNS: &str = "intent, tenant, tool, requested_by, requested_ms, deadline_ms, \
     held_by, intent_id, decision, decided_by, decided_ms, reason";
/// How many columns [`INTENT_COLUMNS`] names: an approval read beside its intent starts here.
const INTENT_COLUMN_COUNT: usize = 20;

/// An approval from the columns of [`APPROVAL_COLUMNS`], the first at `first`.
fn read_approval(row: &Row<'_>, first: usize) -> rusqlite::Result<Approval> {
    let decision: Option<String> = row.get(first + 8)?;
    Ok(Approval {
        intent: row.get(first)?,
        tenant: row.get(first + 1)?,
        tool: row.get(first + 2)?,
        requested_by: row.get(first + 3)?,
        requested_ms: row.get(first + 4)?,
        deadline_ms: row.get(first + 5)?,
        held_by: row.get(first + 6)?,
        intent_id: row.get(first + 7)?,
        decision: decision
            .map(|text| {
                Decision::parse(&text)
                    .ok_or_else(|| corrupt(first + 8, format!("unknown decision `{text}`")))
            })
            .transpose()?,
        decided_by: row.get(first + 9)?,
        decided_ms: row.get(first + 10)?,
        reason: row.get(first + 11)?,
    })
}

/// The approval of the intent `id` (`Ledger::approval`), if it was ever held.
pub fn approval(connection: &Connection, id: IntentId) -> Result<Option<Approval>, LedgerError> {
    let sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE intent = ?1");
    Ok(connection
        .prepare_cached(&sql)?
        .query_row(params![id], |row| read_approval(row, 0))
        .optional()?)
}

/// Inserts an intent's approval, or replaces its earlier request.
fn upsert_approval(connection: &Connection, approval: &Approval) -> Result<(), LedgerError> {
    connection
        .prepare_cached(&format!(
            "INSERT OR REPLACE INTO approvals ({APPROVAL_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
        ))?
        .execute(params![
            approval.intent,
            approval.tenant,
            approval.tool,
            approval.requested_by,
            approval.requested_ms,
            approval.deadline_ms,
            approval.held_by,
            approval.intent_id,
            approval.decision.map(Decision::as_str),
            approval.decided_by,
            approval.decided_ms,
            approval.reason,
        ])?;
    Ok(())
}

/// Counts one more intent in a budget's window: inserts the row, or adds to it (units
/// saturating at the largest integer, which SQLite would otherwise turn into a real).
fn count_budget(connection: &Connection, count: &BudgetCount) -> Result<(), LedgerError> {
    connection
        .prepare_cached(
            "INSERT INTO budget_usage (tool, budget, bucket, window_start_ms, window_end_ms, \
             count, units) VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6) \
             ON CONFLICT (tool, budget, bucket, window_start_ms) DO UPDATE SET \
             count = count + 1, units = CASE WHEN units > 9223372036854775807 - excluded.units \
             THEN 9223372036854775807 ELSE units + excluded.units END",
        )?
        .execute(params![
            count.tool,
            count.budget,
            count.bucket,
            count.window_start_ms,
            count.window_end_ms,
            count.units,
        ])?;
    Ok(())
}

/// What a budget has counted in the window `charge` names (zero without a row).
fn budget_used(
    connection: &Connection,
    tool: &str,
    charge: &BudgetCharge,
) -> Result<BudgetUsage, LedgerError> {
    let used = connection
        .prepare_cached(
            "SELECT count, units FROM budget_usage \
             WHERE tool = ?1 AND budget = ?2 AND bucket = ?3 AND window_start_ms = ?4",
        )?
        .query_row(
            params![tool, charge.budget, charge.bucket, charge.window_start_ms],
            |row| Ok(plan::budget_usage(row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    Ok(used.unwrap_or_default())
}

pub fn stale(
    connection: &Connection,
    status: IntentStatus,
    now_ms: i64,
    limit: u32,
    skip_tools: &[String],
) -> Result<Vec<IntentRecord>, LedgerError> {
    let mut statement = connection.prepare_cached(&stale_sql(status, skip_tools.len()))?;
    let fixed: [&dyn rusqlite::ToSql; 3] = [&status.as_str(), &now_ms, &limit];
    let parameters = fixed
        .into_iter()
        .chain(skip_tools.iter().map(|tool| tool as &dyn rusqlite::ToSql));
    let rows = statement.query_map(params_from_iter(parameters), read_intent)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The statement of [`stale`]: `?1` the status, `?2` now, `?3` the limit, then one
/// placeholder per skipped tool.
fn stale_sql(status: IntentStatus, skipped_tools: usize) -> String {
    let skipped = if skipped_tools == 0 {
        String::new()
    } else {
        let placeholders: Vec<String> = (0..skipped_tools)
            .map(|index| format!("?{}", index + 4))
            .collect();
        format!("AND tool NOT IN ({}) ", placeholders.join(", "))
    };
    // The condition of the partial index `intents_by_status`, which holds the unsettled
    // intents only (a settled one has no lease, so is never stale).
    let unsettled = if status.is_settled() {
        String::new()
    } else {
        format!("AND {} ", query::UNSETTLED)
    };
    format!(
        "SELECT {INTENT_COLUMNS} FROM intents WHERE status = ?1 {unsettled}\
         AND (lease_expires_ms IS NULL OR lease_expires_ms <= ?2 OR {OWNER_GONE}) \
         {skipped}ORDER BY updated_ms, id LIMIT ?3"
    )
}

pub fn list(
    connection: &Connection,
    after_id: IntentId,
    limit: u32,
) -> Result<Vec<IntentRecord>, LedgerError> {
    let sql = format!("SELECT {INTENT_COLUMNS} FROM intents WHERE id > ?1 ORDER BY id LIMIT ?2");
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(params![after_id, limit], read_intent)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn events(connection: &Connection, id: IntentId) -> Result<Vec<Event>, LedgerError> {
    let mut statement = connection.prepare_cached(
        "SELECT id, intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, actor, detail \
         FROM events WHERE intent_id = ?1 ORDER BY id",
    )?;
    let rows = statement.query_map(params![id], |row| {
        Ok(Event {
            id: row.get(0)?,
            intent_id: row.get(1)?,
            tenant: row.get(2)?,
            tool: row.get(3)?,
            at_ms: row.get(4)?,
            kind: row.get(5)?,
            from_status: row.get(6)?,
            to_status: row.get(7)?,
            attempt: row.get(8)?,
            actor: row.get(9)?,
            detail: row.get(10)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Appends one row to the event log.
const APPEND_EVENT: &str = "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, \
     from_status, to_status, attempt, actor, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

fn append_event(connection: &Connection, event: &NewEvent) -> Result<(), LedgerError> {
    connection.prepare_cached(APPEND_EVENT)?.execute(params![
        event.intent_id,
        event.tenant,
        event.tool,
        event.at_ms,
        event.kind,
        event.from_status.map(IntentStatus::as_str),
        event.to_status.map(IntentStatus::as_str),
        event.attempt,
        event.actor,
        event.detail,
    ])?;
    Ok(())
}

/// Stores every mutable column of an intent.
fn update(connection: &Connection, stored: &StoredIntent) -> Result<(), LedgerError> {
    let mut statement = connection.prepare_cached(
        "UPDATE intents SET status = ?2, attempt = ?3, epoch = ?4, lease_owner = ?5, lease_expires_ms = ?6, \
         result = ?7, external_id = ?8, resolved_by = ?9, call_count = ?10, last_seen_ms = ?11, updated_ms = ?12, \
         last_lookup_ms = ?13, resend_stopped = ?14 WHERE id = ?1",
    )?;
    let changed = execute_mutable(&mut statement, &stored.intent, stored.result.as_deref())?;
    assert_eq!(
        changed, 1,
        "intent {} vanished inside its own transaction",
        stored.intent.id
    );
    Ok(())
}

/// Runs `statement` with the intent's id as `?1` and its mutable columns as `?2` to `?14`,
/// in the order [`update`] and [`insert_moved`] name them; `result` is the stored result's
/// JSON text.
fn execute_mutable(
    statement: &mut rusqlite::CachedStatement<'_>,
    intent: &IntentRecord,
    result: Option<&str>,
) -> rusqlite::Result<usize> {
    statement.execute(params![
        intent.id,
        intent.status.as_str(),
        intent.attempt,
        intent.epoch,
        intent.lease_owner,
        intent.lease_expires_ms,
        result,
        intent.external_id,
        intent.resolved_by,
        intent.call_count as i64,
        intent.last_seen_ms,
        intent.updated_ms,
        intent.last_lookup_ms,
        intent.resend_stopped.map(ResendStop::as_str),
    ])
}

/// Applies a plan's writes in order and returns its outcome.
fn apply<T>(connection: &Connection, plan: Plan<T>) -> Result<T, LedgerError> {
    for write in &plan.writes {
        apply_one(connection, write)?;
    }
    Ok(plan.outcome)
}

/// Applies a plan's writes to an intent found as `held`. The first write of a begun intent
/// moves it to `intents`: the events of its creation go to the log, and its wide row is
/// inserted as that write leaves it (not moved as begun and then updated, which would write
/// its row and indexes twice), in place of its begun row. A plan that writes nothing of the
/// intent leaves it begun.
fn apply_to<T>(connection: &Connection, held: Held, plan: Plan<T>) -> Result<T, LedgerError> {
    if held == Held::Wide {
        return apply(connection, plan);
    }
    let mut moved = false;
    for write in &plan.writes {
        let (id, row) = match write {
            Write::Counts(intent) => (Some(intent.id), Some((intent, None))),
            Write::Intent(stored) => (
                Some(stored.intent.id),
                Some((&stored.intent, stored.result.as_deref())),
            ),
            Write::Event(event) => (event.intent_id, None),
            Write::Approval(_) | Write::Budget(_) => (None, None),
        };
        if let (Some(id), false) = (id, moved) {
            moved = true;
            move_begun_as(connection, id, row)?;
            if row.is_some() {
                continue;
            }
        }
        apply_one(connection, write)?;
    }
    Ok(plan.outcome)
}

fn apply_one(connection: &Connection, write: &Write) -> Result<(), LedgerError> {
    match write {
        Write::Counts(intent) => {
            connection
                .prepare_cached(
                    "UPDATE intents SET call_count = ?2, last_seen_ms = ?3 WHERE id = ?1",
                )?
                .execute(params![
                    intent.id,
                    intent.call_count as i64,
                    intent.last_seen_ms
                ])?;
        }
        Write::Intent(stored) => update(connection, stored)?,
        Write::Event(event) => append_event(connection, event)?,
        Write::Approval(approval) => upsert_approval(connection, approval)?,
        Write::Budget(count) => count_budget(connection, count)?,
    }
    Ok(())
}

/// Moves the begun intent `id` to `intents`: the events of its creation to the log, then its
/// wide row, as begun or, given `row` (the intent and its result's JSON text), with that
/// row's mutable columns; then deletes its begun row.
fn move_begun_as(
    connection: &Connection,
    id: IntentId,
    row: Option<(&IntentRecord, Option<&str>)>,
) -> Result<(), LedgerError> {
    let [as_begun, _, delete] = MOVE_BEGUN;
    log_begun_events(connection, id)?;
    let inserted = match row {
        None => connection
            .prepare_cached(as_begun)?
            .execute(params![id, id])?,
        Some((intent, result)) => {
            assert_eq!(intent.id, id, "a plan writes its own intent");
            let mut statement = connection.prepare_cached(
                "INSERT INTO intents (id, status, attempt, epoch, lease_owner, lease_expires_ms, \
                 result, external_id, resolved_by, call_count, last_seen_ms, updated_ms, \
                 last_lookup_ms, resend_stopped, tenant, tool, intent_key, fingerprint, arguments, \
                 first_seen_ms) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, tenant, tool, \
                 intent_key, fingerprint, arguments, first_seen_ms FROM intents_begun WHERE id = ?1",
            )?;
            // A count write carries no result's text (a begun intent has no result yet).
            let result = match result {
                Some(text) => Some(Cow::Borrowed(text)),
                None => intent.result.as_ref().map(|value| value.to_string().into()),
            };
            execute_mutable(&mut statement, intent, result.as_deref())?
        }
    };
    let deleted = connection
        .prepare_cached(delete)?
        .execute(params![id, id])?;
    assert_eq!(
        (inserted, deleted),
        (1, 1),
        "begun intent {id} moved inside its own transaction"
    );
    Ok(())
}

/// One event of a begun intent's creation, as [`insert`] keeps it in `intents_begun.events`:
/// a JSON object of these fields. Written and read as this struct, not through
/// `serde_json::Value`, whose maps would be built and dropped for every event of every new
/// intent on the writer's thread. Text is borrowed where the JSON holds it unescaped.
#[derive(serde::Serialize, serde::Deserialize)]
struct BegunEvent<'a> {
    at_ms: i64,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    from_status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    to_status: Option<Cow<'a, str>>,
    attempt: Option<u32>,
    #[serde(borrow)]
    actor: Option<Cow<'a, str>>,
    #[serde(borrow)]
    detail: Option<Cow<'a, str>>,
}

impl<'a> From<&'a NewEvent> for BegunEvent<'a> {
    fn from(event: &'a NewEvent) -> BegunEvent<'a> {
        BegunEvent {
            at_ms: event.at_ms,
            kind: Cow::Borrowed(event.kind),
            from_status: event
                .from_status
                .map(|status| Cow::Borrowed(status.as_str())),
            to_status: event.to_status.map(|status| Cow::Borrowed(status.as_str())),
            attempt: event.attempt,
            actor: event.actor.as_deref().map(Cow::Borrowed),
            detail: event.detail.as_deref().map(Cow::Borrowed),
        }
    }
}

/// Appends the events of the begun intent `id`'s creation to the log, in the order logged
/// (what the second statement of [`MOVE_BEGUN`] does for many intents, without SQLite's JSON
/// functions, which parse the array once per field).
fn log_begun_events(connection: &Connection, id: IntentId) -> Result<(), LedgerError> {
    let (tenant, tool, events): (String, String, String) = connection
        .prepare_cached("SELECT tenant, tool, events FROM intents_begun WHERE id = ?1")?
        .query_row(params![id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    let events: Vec<BegunEvent> = serde_json::from_str(&events)
        .map_err(|error| LedgerError::Corrupt(format!("begun intent {id}'s events: {error}")))?;
    let mut statement = connection.prepare_cached(APPEND_EVENT)?;
    for event in events {
        statement.execute(params![
            id,
            tenant,
            tool,
            event.at_ms,
            event.kind,
            event.from_status,
            event.to_status,
            event.attempt,
            event.actor,
            event.detail,
        ])?;
    }
    Ok(())
}

/// Inserts a new intent's row as it stands (a [`plan::Fresh`] row: `in_flight` with its
/// lease, or `pending` when held) into `intents_begun`, with the events of its creation as
/// JSON; returns the id it was given: one more than the greatest of both tables (so never
/// one a row of `intents` has).
fn insert(connection: &Connection, fresh: &Fresh) -> Result<IntentId, LedgerError> {
    let row = &fresh.row;
    let intent = &row.intent;
    let events: Vec<BegunEvent<'_>> = fresh.events().iter().map(BegunEvent::from).collect();
    let events = serde_json::to_string(&events).expect("events serialize to JSON");
    connection
        .prepare_cached(
            "INSERT INTO intents_begun (id, tenant, tool, intent_key, fingerprint, arguments, status, \
             attempt, epoch, lease_owner, lease_expires_ms, call_count, first_seen_ms, last_seen_ms, \
             updated_ms, events) \
             VALUES (max(coalesce((SELECT max(id) FROM intents), 0), \
             coalesce((SELECT max(id) FROM intents_begun), 0)) + 1, \
             ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        )?
        .execute(params![
            intent.tenant,
            intent.tool,
            intent.key,
            intent.fingerprint,
            row.arguments,
            intent.status.as_str(),
            intent.attempt,
            intent.epoch,
            intent.lease_owner,
            intent.lease_expires_ms,
            intent.call_count as i64,
            intent.first_seen_ms,
            intent.last_seen_ms,
            intent.updated_ms,
            events,
        ])?;
    Ok(connection.last_insert_rowid())
}

/// Gets the key's intent and decides from it (with the process of its live lease's owner
/// and its approval, when the plan asks for them); a key not found is decided from its
/// budgets' counts and inserted as begun, unless a budget refuses it.
pub fn begin(connection: &Connection, request: &BeginRequest) -> Result<Begin, LedgerError> {
    plan::check_begin(request)?;
    let (held, plan) = match get_held(connection, &request.tenant, &request.tool, &request.key)? {
        Some((intent, held)) => {
            let owner = match plan::owner_to_check(&intent, request.now_ms) {
                Some(instance) => process(connection, instance)?,
                None => None,
            };
            let approval = if plan::approval_to_read(&intent, request) {
                approval(connection, intent.id)?
            } else {
                None
            };
            (
                held,
                plan::begin_existing(intent, request, owner.as_ref(), approval)?,
            )
        }
        None => return begin_new(connection, request),
    };
    apply_to(connection, held, plan)
}

/// [`begin`] of a key found without an intent: decided from its budgets' counts and
/// inserted as begun, unless a budget refuses it.
fn begin_new(connection: &Connection, request: &BeginRequest) -> Result<Begin, LedgerError> {
    let used = plan::charges(request)
        .iter()
        .map(|charge| budget_used(connection, &request.tool, charge))
        .collect::<Result<Vec<_>, _>>()?;
    let plan = match plan::begin_new_call(request, &used)? {
        NewCall::Refused(outcome) => Plan::outcome(outcome),
        NewCall::Insert(fresh) => {
            let id = insert(connection, &fresh)?;
            let mut plan = fresh.inserted(id);
            // Logged from the begun row when it is moved to `intents`.
            plan.writes
                .retain(|write| !matches!(write, Write::Event(_)));
            plan
        }
    };
    apply(connection, plan)
}

/// `Ledger::create`: the key's intent as found, deciding and writing nothing, or, for a key
/// without one, [`begin`]'s new intent, in the same transaction (the key read once).
pub fn create(connection: &Connection, request: &BeginRequest) -> Result<Created, LedgerError> {
    plan::check_begin(request)?;
    match get(connection, &request.tenant, &request.tool, &request.key)? {
        Some(intent) => Ok(Created::Found(intent)),
        None => begin_new(connection, request).map(Created::Begun),
    }
}

/// `Ledger::decide` on the intent and its approval.
pub fn decide(connection: &Connection, decide: &Decide) -> Result<Decided, LedgerError> {
    plan::check_decide(decide)?;
    let (intent, held) = must_get(connection, decide.id)?;
    let approval = approval(connection, decide.id)?;
    apply_to(connection, held, plan::decide(intent, approval, decide)?)
}

/// The open approvals due at `now_ms`, oldest deadline first, from
/// `approvals_by_decision_deadline` (the intent id is the rowid, so ties go in id order).
const DUE_APPROVALS: &str = "SELECT intent FROM approvals WHERE decision IS NULL \
     AND deadline_ms <= ?1 ORDER BY deadline_ms, intent LIMIT ?2";

/// `Ledger::expire_approvals`: each due approval settled in this one transaction.
pub fn expire_approvals(
    connection: &Connection,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<HeldIntent>, LedgerError> {
    let due: Vec<IntentId> = connection
        .prepare_cached(DUE_APPROVALS)?
        .query_map(params![now_ms, limit.min(APPROVALS_PAGE_MAX)], |row| {
            row.get(0)
        })?
        .collect::<Result<_, _>>()?;
    let mut expired = Vec::with_capacity(due.len());
    for id in due {
        let (intent, held) = must_get(connection, id)?;
        let approval = approval(connection, id)?;
        expired.extend(apply_to(
            connection,
            held,
            plan::expire_approval(intent, approval, now_ms)?,
        )?);
    }
    Ok(expired)
}

/// `Ledger::approvals`: one page, from [`query::approvals_query`].
pub fn approvals(
    connection: &Connection,
    filter: &ApprovalFilter,
    before: Option<IntentId>,
    limit: u32,
) -> Result<Vec<HeldIntent>, LedgerError> {
    let Some(query) = query::approvals_query(
        filter,
        before,
        limit,
        INTENT_COLUMNS,
        APPROVAL_COLUMNS,
        Dialect::Sqlite,
    ) else {
        return Ok(Vec::new());
    };
    let mut statement = connection.prepare_cached(&query.sql)?;
    let rows = statement.query_map(params_from_iter(&query.parameters), |row| {
        Ok(HeldIntent {
            intent: read_intent(row)?,
            approval: read_approval(row, INTENT_COLUMN_COUNT)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// A tool's budget rows whose window has not ended at `?2`, along the primary key.
const BUDGET_USAGE: &str = "SELECT tool, budget, bucket, window_start_ms, window_end_ms, count, \
     units FROM budget_usage WHERE tool = ?1 AND window_end_ms > ?2";

/// `Ledger::budget_usage`.
pub fn budget_usage(
    connection: &Connection,
    tool: &str,
    now_ms: i64,
) -> Result<Vec<BudgetUsageRow>, LedgerError> {
    let mut statement = connection.prepare_cached(BUDGET_USAGE)?;
    let rows = statement.query_map(params![tool, now_ms], |row| {
        Ok(BudgetUsageRow {
            tool: row.get(0)?,
            budget: row.get(1)?,
            bucket: row.get(2)?,
            window_start_ms: row.get(3)?,
            window_end_ms: row.get(4)?,
            count: count(row, 5)?,
            units: count(row, 6)?,
        })
    })?;
    Ok(plan::budget_usage_rows(rows.collect::<Result<_, _>>()?))
}

pub fn finish(connection: &Connection, finish: &Finish) -> Result<Finished, LedgerError> {
    plan::check_finish(finish)?;
    let (intent, held) = must_get(connection, finish.id)?;
    apply_to(connection, held, plan::finish(intent, finish)?)
}

pub fn renew(connection: &Connection, renew: &Renew) -> Result<Renewed, LedgerError> {
    let (intent, held) = must_get(connection, renew.id)?;
    apply_to(connection, held, plan::renew(intent, renew)?)
}

/// Counts repeats, each `(id, now_ms)` as `plan::record_call` would: each intent read once
/// and its count written once (`plan::record_calls`). Answers the ids of intents gone
/// meanwhile, whose repeats count for nothing.
pub fn record_calls(
    connection: &Connection,
    calls: &[(IntentId, i64)],
) -> Result<Vec<IntentId>, LedgerError> {
    let mut gone = Vec::new();
    for (id, calls) in plan::calls_by_intent(calls) {
        match must_get(connection, id) {
            Ok((intent, held)) => apply_to(connection, held, plan::record_calls(intent, &calls))?,
            Err(LedgerError::NotFound(_)) => gone.push(id),
            Err(error) => return Err(error),
        }
    }
    Ok(gone)
}

pub fn resolve(connection: &Connection, resolve: &Resolve) -> Result<IntentRecord, LedgerError> {
    plan::check_resolve(resolve)?;
    let (intent, held) = must_get(connection, resolve.id)?;
    apply_to(connection, held, plan::resolve(intent, resolve)?)
}

pub fn record_disabled_call(
    connection: &Connection,
    tenant: &str,
    tool: &str,
    now_ms: i64,
) -> Result<(), LedgerError> {
    append_event(connection, &plan::disabled_call(tenant, tool, now_ms)?)
}

pub fn set_tool_flag(connection: &Connection, flag: &ToolFlag) -> Result<(), LedgerError> {
    let (flag, event) = plan::tool_flag(flag)?;
    connection
        .prepare_cached(
            "INSERT INTO tool_flags (tool, enabled, reason, actor, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (tool) DO UPDATE SET enabled = ?2, reason = ?3, actor = ?4, updated_ms = ?5",
        )?
        .execute(params![flag.tool, flag.enabled, flag.reason, flag.actor, flag.updated_ms])?;
    append_event(connection, &event)
}

pub fn tool_flags(connection: &Connection) -> Result<Vec<ToolFlag>, LedgerError> {
    let mut statement = connection.prepare_cached(
        "SELECT tool, enabled, reason, actor, updated_ms FROM tool_flags ORDER BY tool",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(ToolFlag {
            tool: row.get(0)?,
            enabled: row.get(1)?,
            reason: row.get(2)?,
            actor: row.get(3)?,
            updated_ms: row.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn purge(connection: &Connection, before_ms: i64) -> Result<u64, LedgerError> {
    // A caller key is kept while its intent is in `intents`.
    move_all_begun(connection)?;
    connection.execute(
        "DELETE FROM reconciliation_mismatches WHERE run_id IN \
         (SELECT id FROM reconciliation_runs WHERE finished_ms < ?1)",
        params![before_ms],
    )?;
    connection.execute(
        "DELETE FROM reconciliation_runs WHERE finished_ms < ?1",
        params![before_ms],
    )?;
    connection.execute(
        &format!("DELETE FROM events WHERE intent_id IN (SELECT id FROM intents WHERE {SETTLED})"),
        params![before_ms],
    )?;
    // Refused calls of a switched-off tool can pile up; switch changes are kept (audit).
    connection.execute(
        "DELETE FROM events WHERE intent_id IS NULL AND kind = 'disabled_call' AND at_ms < ?1",
        params![before_ms],
    )?;
    purge_processes(connection, before_ms)?;
    connection.execute(
        &format!(
            "DELETE FROM intent_traces WHERE intent_id IN (SELECT id FROM intents WHERE {SETTLED})"
        ),
        params![before_ms],
    )?;
    connection.execute(
        &format!("DELETE FROM approvals WHERE intent IN (SELECT id FROM intents WHERE {SETTLED})"),
        params![before_ms],
    )?;
    connection.execute(PURGE_BUDGET_USAGE, params![before_ms])?;
    let purged = connection.execute(
        &format!("DELETE FROM intents WHERE {SETTLED}"),
        params![before_ms],
    )? as u64;
    connection.execute(PURGE_CALLER_KEYS, params![before_ms])?;
    Ok(purged)
}

/// The intents the purge deletes: settled, and last seen before the cutoff (`?1`).
const SETTLED: &str = "status IN ('done', 'rejected', 'not_executed') AND last_seen_ms < ?1";

/// The budget counts of windows that ended at or before the cutoff (`?1`; a window's end is
/// exclusive), from `budget_usage_by_window_end`.
const PURGE_BUDGET_USAGE: &str = "DELETE FROM budget_usage WHERE window_end_ms <= ?1";

/// The caller keys bound before the cutoff (`?1`) whose intent is gone: those of the intents
/// a purge deleted (bound at a call of the intent, so no later than it was last seen), and
/// those whose intent was never recorded (its call failed after the binding).
const PURGE_CALLER_KEYS: &str = "DELETE FROM caller_keys WHERE bound_ms < ?1 AND NOT EXISTS \
     (SELECT 1 FROM intents WHERE intents.tenant = caller_keys.tenant \
      AND intents.tool = caller_keys.tool AND intents.intent_key = caller_keys.intent_key)";

/// The condition `stale` adds for an intent whose lease owner's process is gone: registered
/// under the owner's instance (the owner up to its first `/`) and ended, or silent for longer
/// than it registered (`plan::owner_gone`, as SQL; `?2` is `now_ms`).
const OWNER_GONE: &str = "EXISTS (SELECT 1 FROM processes \
     WHERE processes.instance = substr(intents.lease_owner, 1, instr(intents.lease_owner, '/') - 1) \
     AND (processes.ended IS NOT NULL OR ?2 - processes.heartbeat_ms > processes.silent_after_ms))";

const PROCESS_COLUMNS: &str =
    "instance, host, pid_scope, pid, started_ms, heartbeat_ms, silent_after_ms, ended, ended_ms";

fn read_process(row: &Row<'_>) -> rusqlite::Result<ProcessRecord> {
    let ended: Option<String> = row.get(7)?;
    Ok(ProcessRecord {
        instance: row.get(0)?,
        host: row.get(1)?,
        pid_scope: row.get(2)?,
        pid: row.get(3)?,
        started_ms: row.get(4)?,
        heartbeat_ms: row.get(5)?,
        silent_after_ms: row.get(6)?,
        ended: ended
            .map(|text| text.parse::<ProcessEnd>())
            .transpose()
            .map_err(|message| corrupt(7, message))?,
        ended_ms: row.get(8)?,
    })
}

pub fn process(
    connection: &Connection,
    instance: &str,
) -> Result<Option<ProcessRecord>, LedgerError> {
    let sql = format!("SELECT {PROCESS_COLUMNS} FROM processes WHERE instance = ?1");
    Ok(connection
        .prepare_cached(&sql)?
        .query_row(params![instance], read_process)
        .optional()?)
}

pub fn register_process(
    connection: &Connection,
    registration: &ProcessRegistration,
) -> Result<ProcessRecord, LedgerError> {
    let row = plan::registration(registration)?;
    connection
        .prepare_cached(
            "INSERT INTO processes (instance, host, pid_scope, pid, started_ms, heartbeat_ms, \
             silent_after_ms, ended, ended_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, NULL, NULL) \
             ON CONFLICT (instance) DO UPDATE SET host = ?2, pid_scope = ?3, pid = ?4, \
             started_ms = ?5, heartbeat_ms = ?5, silent_after_ms = ?6, ended = NULL, ended_ms = NULL",
        )?
        .execute(params![
            row.instance,
            row.host,
            row.pid_scope,
            row.pid,
            row.started_ms,
            row.silent_after_ms
        ])?;
    Ok(row)
}

pub fn heartbeat_process(
    connection: &Connection,
    instance: &str,
    now_ms: i64,
) -> Result<bool, LedgerError> {
    let changed = connection
        .prepare_cached(
            "UPDATE processes SET heartbeat_ms = max(heartbeat_ms, ?2) \
             WHERE instance = ?1 AND ended IS NULL",
        )?
        .execute(params![instance, now_ms])?;
    Ok(changed == 1)
}

pub fn end_process(
    connection: &Connection,
    instance: &str,
    end: ProcessEnd,
    now_ms: i64,
) -> Result<bool, LedgerError> {
    let changed = connection
        .prepare_cached(
            "UPDATE processes SET ended = ?2, ended_ms = ?3 WHERE instance = ?1 AND ended IS NULL",
        )?
        .execute(params![instance, end.as_str(), now_ms])?;
    Ok(changed == 1)
}

/// The processes part of `purge`: those that ended or last heartbeaten before `before_ms`,
/// and the ended ones beyond the latest [`PROCESSES_ENDED_KEPT_MAX`].
fn purge_processes(connection: &Connection, before_ms: i64) -> Result<(), LedgerError> {
    connection.execute(
        "DELETE FROM processes WHERE ended_ms < ?1 OR heartbeat_ms < ?1",
        params![before_ms],
    )?;
    connection.execute(
        "DELETE FROM processes WHERE ended_ms IS NOT NULL AND instance NOT IN \
         (SELECT instance FROM processes WHERE ended_ms IS NOT NULL \
          ORDER BY ended_ms DESC LIMIT ?1)",
        params![PROCESSES_ENDED_KEPT_MAX],
    )?;
    Ok(())
}

/// The ids a `SELECT id ...` of [`query::erase_queries`] returns.
fn erase_ids(connection: &Connection, query: &Query) -> Result<Vec<IntentId>, LedgerError> {
    let mut statement = connection.prepare(&query.sql)?;
    let rows = statement.query_map(params_from_iter(&query.parameters), |row| row.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Runs a `DELETE` of [`query::erase_queries`]; answers how many rows it deleted.
fn erase_rows(connection: &Connection, query: &Query) -> Result<u64, LedgerError> {
    Ok(connection.execute(&query.sql, params_from_iter(&query.parameters))? as u64)
}

pub fn erase(connection: &Connection, erase: &Erase) -> Result<Erasure, LedgerError> {
    let queries = query::erase_queries(erase, Dialect::Sqlite)?;
    // The queries find intents in `intents` only.
    move_all_begun(connection)?;
    // The single writer runs this whole: nothing changes between the checks and the deletes.
    let busy = erase_ids(connection, &queries.busy)?;
    let unsettled = erase_ids(connection, &queries.unsettled)?;
    if let Some(refusal) = plan::erase_refusal(busy, unsettled, erase.force) {
        return Ok(refusal);
    }
    let mut batch = erase_ids(connection, &queries.batch)?;
    let more = batch.len() > ERASE_BATCH_MAX as usize;
    batch.truncate(ERASE_BATCH_MAX as usize);
    let mut erased = Erased {
        more,
        ..Erased::default()
    };
    let mut events = connection.prepare_cached("DELETE FROM events WHERE intent_id = ?1")?;
    let mut intents = connection.prepare_cached("DELETE FROM intents WHERE id = ?1")?;
    let mut traces = connection.prepare_cached("DELETE FROM intent_traces WHERE intent_id = ?1")?;
    let mut approvals = connection.prepare_cached("DELETE FROM approvals WHERE intent = ?1")?;
    let mut caller_keys = connection.prepare_cached(
        "DELETE FROM caller_keys WHERE (tenant, tool, intent_key) = \
         (SELECT tenant, tool, intent_key FROM intents WHERE id = ?1)",
    )?;
    for id in &batch {
        traces.execute(params![id])?;
        approvals.execute(params![id])?;
        caller_keys.execute(params![id])?;
        erased.events += events.execute(params![id])? as u64;
        erased.intents += intents.execute(params![id])? as u64;
    }
    if !more {
        erase_rows(connection, &queries.unbound_caller_keys)?;
    }
    erased.mismatches = erase_rows(connection, &queries.mismatches)?;
    if let Some(query) = &queries.disabled_calls {
        erased.events += erase_rows(connection, query)?;
    }
    append_event(connection, &plan::erasure_event(erase, &erased))?;
    Ok(Erasure::Erased(erased))
}

impl rusqlite::ToSql for Parameter {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Parameter::Integer(value) => ToSqlOutput::from(*value),
            Parameter::Text(text) => ToSqlOutput::from(text.as_str()),
        })
    }
}

pub fn intents(
    connection: &Connection,
    filter: &IntentFilter,
    order: Order,
    cursor: Option<IntentId>,
    limit: u32,
) -> Result<Vec<IntentRecord>, LedgerError> {
    let Some(query) = query::intents_query(
        filter,
        order,
        cursor,
        limit,
        INTENT_COLUMNS,
        Dialect::Sqlite,
    ) else {
        return Ok(Vec::new());
    };
    let mut statement = connection.prepare_cached(&query.sql)?;
    let rows = statement.query_map(params_from_iter(&query.parameters), read_intent)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Counted from `intents_by_tool_status` alone, in its order (no row is read, nothing sorted).
const STATUS_COUNTS: &str = "SELECT tool, status, count(*) FROM intents GROUP BY tool, status";

pub fn status_counts(connection: &Connection) -> Result<Vec<StatusCount>, LedgerError> {
    let mut statement = connection.prepare_cached(STATUS_COUNTS)?;
    let rows = statement.query_map([], |row| {
        let status: String = row.get(1)?;
        Ok(StatusCount {
            tool: row.get(0)?,
            status: status.parse().map_err(|message| corrupt(1, message))?,
            count: count(row, 2)?,
        })
    })?;
    Ok(plan::status_counts(rows.collect::<Result<_, _>>()?))
}

/// Inserts a run checked by [`plan::reconciliation`] and its mismatches; returns its id.
pub fn record_reconciliation(
    connection: &Connection,
    run: &StoredRun,
    mismatches: &[MismatchRow],
) -> Result<i64, LedgerError> {
    connection
        .prepare_cached(
            "INSERT INTO reconciliation_runs (started_ms, finished_ms, since_ms, until_ms, actor, \
             intents_checked, records_checked, mismatches, critical, summary) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            run.run.started_ms,
            run.run.finished_ms,
            run.run.since_ms,
            run.run.until_ms,
            run.run.actor,
            run.intents_checked,
            run.records_checked,
            run.mismatches,
            run.critical,
            run.summary,
        ])?;
    let run_id = connection.last_insert_rowid();
    let mut insert = connection.prepare_cached(
        "INSERT INTO reconciliation_mismatches (run_id, position, tool, kind, severity, intent_id, \
         tenant, intent_key, external_ids, subject, detail) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?;
    for (position, row) in mismatches.iter().enumerate() {
        let mismatch = &row.mismatch;
        insert.execute(params![
            run_id,
            position as i64,
            mismatch.tool,
            mismatch.kind,
            mismatch.severity,
            mismatch.intent_id,
            mismatch.tenant,
            mismatch.intent_key,
            row.external_ids,
            mismatch.subject,
            mismatch.detail,
        ])?;
    }
    Ok(run_id)
}

const RUN_COLUMNS: &str = "id, started_ms, finished_ms, since_ms, until_ms, actor, intents_checked, \
     records_checked, mismatches, critical, summary";

fn read_run(row: &Row<'_>) -> rusqlite::Result<ReconciliationRun> {
    let summary: String = row.get(10)?;
    Ok(ReconciliationRun {
        id: row.get(0)?,
        started_ms: row.get(1)?,
        finished_ms: row.get(2)?,
        since_ms: row.get(3)?,
        until_ms: row.get(4)?,
        actor: row.get(5)?,
        intents_checked: count(row, 6)?,
        records_checked: count(row, 7)?,
        mismatches: count(row, 8)?,
        critical: count(row, 9)?,
        summary: serde_json::from_str(&summary).map_err(|error| corrupt(10, error.to_string()))?,
    })
}

pub fn reconciliations(
    connection: &Connection,
    limit: u32,
) -> Result<Vec<ReconciliationRun>, LedgerError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM reconciliation_runs ORDER BY id DESC LIMIT ?1");
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(params![limit.min(RECONCILIATIONS_PAGE_MAX)], read_run)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn reconciliation(
    connection: &Connection,
    run_id: i64,
) -> Result<Option<ReconciliationRun>, LedgerError> {
    let sql = format!("SELECT {RUN_COLUMNS} FROM reconciliation_runs WHERE id = ?1");
    Ok(connection
        .prepare_cached(&sql)?
        .query_row(params![run_id], read_run)
        .optional()?)
}

pub fn reconciliation_mismatches(
    connection: &Connection,
    run_id: i64,
    limit: u32,
) -> Result<Vec<StoredMismatch>, LedgerError> {
    let limit = (limit as usize).min(RECONCILIATION_MISMATCHES_STORED_MAX) as i64;
    let mut statement = connection.prepare_cached(
        "SELECT run_id, tool, kind, severity, intent_id, tenant, intent_key, external_ids, \
         subject, detail FROM reconciliation_mismatches WHERE run_id = ?1 ORDER BY position \
         LIMIT ?2",
    )?;
    let rows = statement.query_map(params![run_id, limit], |row| {
        let external_ids: String = row.get(7)?;
        Ok(StoredMismatch {
            run_id: row.get(0)?,
            tool: row.get(1)?,
            kind: row.get(2)?,
            severity: row.get(3)?,
            intent_id: row.get(4)?,
            tenant: row.get(5)?,
            intent_key: row.get(6)?,
            external_ids: serde_json::from_str(&external_ids)
                .map_err(|error| corrupt(7, error.to_string()))?,
            subject: row.get(8)?,
            detail: row.get(9)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Inserts `intents` as given, each checked by [`plan::bulk_intent`] first, with one
/// prepared statement; the first refused one rolls them all back (the caller's savepoint).
///
/// Into a ledger smaller than the batch, the secondary indexes are dropped first and built
/// again afterwards, in the same transaction: SQLite builds an index from sorted entries
/// far faster than it inserts them one by one (a million intents: about 13 s instead of
/// 17 s on a slow machine). The indexes are read back from the schema, so they come back
/// exactly as the migrations made them; the key's unique index stays, so a duplicate key is
/// refused as it is inserted.
pub fn bulk_insert(
    connection: &Connection,
    intents: Vec<IntentRecord>,
) -> Result<u64, LedgerError> {
    // The ids given below follow those of `intents`, which must hold every begun one.
    move_all_begun(connection)?;
    // The greatest id bounds the rows (a purge only lowers their count); cheap to read.
    let rows: i64 =
        connection.query_row("SELECT coalesce(max(id), 0) FROM intents", [], |row| {
            row.get(0)
        })?;
    let rebuilt: Vec<(String, String)> = if (rows as u64) < intents.len() as u64 {
        let mut statement = connection.prepare(
            "SELECT name, sql FROM sqlite_master \
             WHERE type = 'index' AND tbl_name = 'intents' AND sql IS NOT NULL \
             AND name NOT IN (SELECT name FROM pragma_index_list('intents') WHERE \"unique\") \
             ORDER BY name",
        )?;
        let indexes = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<Result<Vec<(String, String)>, _>>()?;
        for (name, _) in &indexes {
            connection.execute_batch(&format!("DROP INDEX \"{name}\""))?;
        }
        indexes
    } else {
        Vec::new()
    };
    let mut insert = connection.prepare_cached(
        "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, status, attempt, \
         epoch, lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, \
         first_seen_ms, last_seen_ms, updated_ms, last_lookup_ms, resend_stopped) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
    )?;
    let mut inserted = 0;
    for intent in intents {
        let bulk = plan::bulk_intent(intent)?;
        let intent = &bulk.intent;
        insert.execute(params![
            intent.tenant,
            intent.tool,
            intent.key,
            intent.fingerprint,
            bulk.arguments,
            intent.status.as_str(),
            intent.attempt,
            intent.epoch,
            intent.lease_owner,
            intent.lease_expires_ms,
            bulk.result,
            intent.external_id,
            intent.resolved_by,
            intent.call_count as i64,
            intent.first_seen_ms,
            intent.last_seen_ms,
            intent.updated_ms,
            intent.last_lookup_ms,
            intent.resend_stopped.map(ResendStop::as_str),
        ])?;
        inserted += 1;
    }
    for (_, sql) in &rebuilt {
        connection.execute_batch(sql)?;
    }
    Ok(inserted)
}

/// Keeps `traceparent` for the intent `id` (`Ledger::record_trace`), replacing an earlier
/// attempt's; nothing for an intent that no longer exists.
pub fn record_trace(
    connection: &Connection,
    id: IntentId,
    traceparent: &str,
) -> Result<(), LedgerError> {
    // A begun intent stays begun: its trace needs no wide row.
    connection
        .prepare_cached(
            "INSERT INTO intent_traces (intent_id, traceparent) \
             SELECT id, ?2 FROM intents WHERE id = ?1 \
             UNION ALL SELECT id, ?2 FROM intents_begun WHERE id = ?1 \
             ON CONFLICT (intent_id) DO UPDATE SET traceparent = excluded.traceparent",
        )?
        .execute(params![id, traceparent])?;
    Ok(())
}

/// The `traceparent` kept for the intent `id` (`Ledger::trace_of`).
pub fn trace_of(connection: &Connection, id: IntentId) -> Result<Option<String>, LedgerError> {
    Ok(connection
        .prepare_cached("SELECT traceparent FROM intent_traces WHERE intent_id = ?1")?
        .query_row(params![id], |row| row.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    /// The plan SQLite chooses for `sql`, one step a line.
    fn plan_of(connection: &Connection, sql: &str, parameters: &[Parameter]) -> String {
        let mut statement = connection
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap();
        let steps = statement
            .query_map(params_from_iter(parameters), |row| row.get::<_, String>(3))
            .unwrap();
        steps.collect::<Result<Vec<_>, _>>().unwrap().join("\n")
    }

    fn migrated() -> Connection {
        let mut connection = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut connection).unwrap();
        connection
    }

    /// A begun intent's events are kept as JSON objects with the fields the ledger always
    /// wrote (rows a crash left begun by an earlier build, whose fields came in another
    /// order, must still move), and text that JSON escapes reads back whole.
    #[test]
    fn begun_events_keep_their_json_form_and_escaped_text() {
        let event = NewEvent {
            intent_id: None,
            tenant: "acme".into(),
            tool: "refund_order".into(),
            at_ms: 7,
            kind: "attempt",
            from_status: Some(IntentStatus::Pending),
            to_status: Some(IntentStatus::InFlight),
            attempt: Some(1),
            actor: None,
            detail: Some("a \"quoted\" line\nand a tab\t".into()),
        };
        let json = serde_json::to_string(&[BegunEvent::from(&event)]).unwrap();
        assert_eq!(
            json,
            r#"[{"at_ms":7,"kind":"attempt","from_status":"pending","to_status":"in_flight","attempt":1,"actor":null,"detail":"a \"quoted\" line\nand a tab\t"}]"#
        );
        let read: Vec<BegunEvent<'_>> = serde_json::from_str(&json).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].detail.as_deref(), event.detail.as_deref());
        assert_eq!(read[0].to_status.as_deref(), Some("in_flight"));
        assert_eq!(read[0].actor, None);
        let earlier = r#"[{"actor":"sweeper","at_ms":5,"attempt":null,"detail":null,"from_status":null,"kind":"created","to_status":"pending"}]"#;
        let read: Vec<BegunEvent<'_>> = serde_json::from_str(earlier).unwrap();
        assert_eq!(
            (
                read[0].kind.as_ref(),
                read[0].actor.as_deref(),
                read[0].attempt
            ),
            ("created", Some("sweeper"), None)
        );
    }

    fn page_plan(
        connection: &Connection,
        filter: &IntentFilter,
        order: Order,
        cursor: Option<IntentId>,
    ) -> String {
        let query = query::intents_query(
            filter,
            order,
            cursor,
            10_000,
            INTENT_COLUMNS,
            Dialect::Sqlite,
        )
        .expect("a query");
        plan_of(connection, &query.sql, &query.parameters)
    }

    /// Reconciliation pages through one tool's window in id order: every page must walk
    /// `intents_by_tool` from where it starts, and none may sort (a sort would take the whole
    /// rest of the window, every page).
    #[test]
    fn a_tool_window_is_paged_along_the_tool_index_without_sorting() {
        let connection = migrated();
        let window = IntentFilter {
            tool: Some("refund".into()),
            first_seen_from_ms: Some(1_000),
            first_seen_until_ms: Some(2_000),
            ..IntentFilter::default()
        };
        for order in [Order::Oldest, Order::Newest] {
            let first = page_plan(&connection, &window, order, None);
            assert!(!first.contains("TEMP B-TREE"), "{order:?}:\n{first}");
            let walk = first.lines().next().unwrap_or_default();
            assert!(
                walk.contains("USING INDEX intents_by_tool (tool=? AND id>? AND id<?)"),
                "the first page walks the tool's ids between the window's least and greatest, \
                 {order:?}:\n{first}"
            );
            let bounds = first
                .lines()
                .filter(|step| step.contains("USING COVERING INDEX intents_by_tool_first_seen (tool=? AND first_seen_ms>? AND first_seen_ms<?)"))
                .count();
            assert_eq!(
                bounds, 2,
                "both bounds from the window's index entries:\n{first}"
            );

            let next = page_plan(&connection, &window, order, Some(1_234));
            let walk = match order {
                Order::Oldest => "USING INDEX intents_by_tool (tool=? AND id>?)",
                Order::Newest => "USING INDEX intents_by_tool (tool=? AND id<?)",
            };
            assert!(next.contains(walk), "{order:?}:\n{next}");
            assert!(!next.contains("TEMP B-TREE"), "{order:?}:\n{next}");
        }
    }

    /// A call's key is read from the one unique index of keys (which starts with the tool,
    /// so it also serves a key across tenants), and a tenant's erasure walks the tenant's
    /// intents in id order without sorting.
    #[test]
    fn a_key_is_read_from_its_unique_index_and_a_tenant_is_erased_along_its_own() {
        let connection = migrated();
        let key = Parameter::Text("order-1".into());
        let (tenant, tool) = (
            Parameter::Text("acme".into()),
            Parameter::Text("refund".into()),
        );
        let lookup = plan_of(&connection, &BY_KEY, &[tenant, tool, key]);
        assert!(
            lookup.contains(
                "SEARCH intents USING INDEX intents_by_key (tool=? AND intent_key=? AND tenant=?)"
            ),
            "{lookup}"
        );
        let erase = Erase {
            tenant: "acme".into(),
            tool: None,
            key: None,
            force: true,
            actor: "ops".into(),
            reason: "the customer asked".into(),
            now_ms: 1,
        };
        let batch = query::erase_queries(&erase, Dialect::Sqlite).unwrap().batch;
        let plan = plan_of(&connection, &batch.sql, &batch.parameters);
        assert!(
            plan.contains("USING COVERING INDEX intents_by_tenant (tenant=?)"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    /// The sweeper reads the intents of an unsettled status from `intents_by_status`, which
    /// holds those only (migration 11), in its order (nothing sorted); the purge of settled
    /// intents walks `intents_by_last_seen`.
    #[test]
    fn stale_intents_are_read_from_the_partial_index_of_the_unsettled_ones() {
        let connection = migrated();
        for status in [
            IntentStatus::Pending,
            IntentStatus::InFlight,
            IntentStatus::Unknown,
        ] {
            for skipped in [0, 2] {
                let parameters: Vec<Parameter> = [
                    Parameter::Text(status.as_str().into()),
                    Parameter::Integer(1),
                    Parameter::Integer(10),
                ]
                .into_iter()
                .chain((0..skipped).map(|tool| Parameter::Text(format!("tool-{tool}"))))
                .collect();
                let plan = plan_of(&connection, &stale_sql(status, skipped), &parameters);
                assert!(
                    plan.contains("SEARCH intents USING INDEX intents_by_status (status=?)"),
                    "{status}: {plan}"
                );
                assert!(!plan.contains("TEMP B-TREE"), "{status}: {plan}");
            }
        }
        let purge = plan_of(
            &connection,
            &format!("SELECT id FROM intents WHERE {SETTLED}"),
            &[Parameter::Integer(1)],
        );
        assert!(
            purge.contains("USING INDEX intents_by_last_seen (last_seen_ms<?)"),
            "{purge}"
        );
    }

    /// Reconciliation looks a provider record's key up across tenants: a few rows (one per
    /// tenant at most), sorted into id order.
    #[test]
    fn a_key_of_one_tool_is_found_from_an_index_across_tenants() {
        let connection = migrated();
        let key = IntentFilter {
            tool: Some("refund".into()),
            key: Some("order-1".into()),
            ..IntentFilter::default()
        };
        let plan = page_plan(&connection, &key, Order::Oldest, None);
        assert!(
            plan.contains("USING INDEX intents_by_key (tool=? AND intent_key=?)"),
            "{plan}"
        );
    }

    /// Every page of approvals walks an index in the page's order, newest intent first,
    /// whatever the filter: the one its filter names, and never sorts.
    #[test]
    fn a_page_of_approvals_walks_the_index_of_its_filter_without_sorting() {
        use crate::ApprovalState::{Approved, Closed, Open};
        let connection = migrated();
        // The indexes a page may walk: either, for a filter of a tenant and a tool.
        let by_key: &[&str] = &["a USING INTEGER PRIMARY KEY", "SCAN a"];
        let tenant_or_tool: &[&str] = &["approvals_by_tenant ", "approvals_by_tool "];
        let decision_of_either: &[&str] = &[
            "approvals_by_tenant_decision ",
            "approvals_by_tool_decision ",
        ];
        let cases: [(Option<&str>, Option<&str>, _, &[&str]); 13] = [
            (None, None, None, by_key),
            (Some("acme"), None, None, &["approvals_by_tenant "]),
            (Some("acme"), Some("refund"), None, tenant_or_tool),
            (None, Some("refund"), None, &["approvals_by_tool "]),
            (None, None, Some(Open), &["approvals_by_decision "]),
            (None, None, Some(Approved), &["approvals_by_decision "]),
            (None, None, Some(Closed), by_key),
            (
                Some("acme"),
                None,
                Some(Open),
                &["approvals_by_tenant_decision "],
            ),
            (Some("acme"), Some("refund"), Some(Open), decision_of_either),
            (
                Some("acme"),
                None,
                Some(Approved),
                &["approvals_by_tenant_decision "],
            ),
            (Some("acme"), None, Some(Closed), &["approvals_by_tenant "]),
            (
                None,
                Some("refund"),
                Some(Open),
                &["approvals_by_tool_decision "],
            ),
            (None, Some("refund"), Some(Closed), &["approvals_by_tool "]),
        ];
        for (tenant, tool, state, walks) in cases {
            let filter = ApprovalFilter {
                tenant: tenant.map(str::to_owned),
                tool: tool.map(str::to_owned),
                state,
            };
            for before in [None, Some(1_234)] {
                let query = query::approvals_query(
                    &filter,
                    before,
                    100,
                    INTENT_COLUMNS,
                    APPROVAL_COLUMNS,
                    Dialect::Sqlite,
                )
                .expect("a query");
                let plan = plan_of(&connection, &query.sql, &query.parameters);
                assert!(!plan.contains("TEMP B-TREE"), "{filter:?}:\n{plan}");
                let walk = plan.lines().next().unwrap_or_default();
                assert!(
                    walks.iter().any(|index| walk.contains(index)),
                    "{filter:?}, {walks:?}:\n{plan}"
                );
                assert!(
                    plan.contains("SEARCH i USING INTEGER PRIMARY KEY (rowid=?)"),
                    "{filter:?}:\n{plan}"
                );
            }
        }
    }

    /// The expiry sweep reads the open approvals due from their index, in deadline order.
    #[test]
    fn due_approvals_are_read_from_the_open_ones_by_deadline() {
        let connection = migrated();
        let plan = plan_of(
            &connection,
            DUE_APPROVALS,
            &[Parameter::Integer(1), Parameter::Integer(10)],
        );
        assert_eq!(
            plan,
            "SEARCH approvals USING COVERING INDEX approvals_by_decision_deadline \
             (decision=? AND deadline_ms<?)"
        );
    }

    /// A tool's budget rows come from the primary key; a purge finds ended windows by theirs.
    #[test]
    fn budget_usage_is_read_by_tool_and_purged_by_window_end() {
        let connection = migrated();
        let plan = plan_of(
            &connection,
            BUDGET_USAGE,
            &[Parameter::Text("refund".into()), Parameter::Integer(1)],
        );
        assert!(
            plan.starts_with("SEARCH budget_usage USING PRIMARY KEY (tool=?)"),
            "{plan}"
        );
        let plan = plan_of(&connection, PURGE_BUDGET_USAGE, &[Parameter::Integer(1)]);
        assert!(
            plan.contains("USING INDEX budget_usage_by_window_end (window_end_ms<?)"),
            "{plan}"
        );
    }

    /// An approval read beside its intent starts after the intent's columns.
    #[test]
    fn the_intent_columns_are_counted_right() {
        assert_eq!(INTENT_COLUMNS.split(',').count(), INTENT_COLUMN_COUNT);
    }

    /// The gauges count from an index, in its order, without reading a row.
    #[test]
    fn status_counts_read_only_the_tool_status_index() {
        let connection = migrated();
        let plan = plan_of(&connection, STATUS_COUNTS, &[]);
        assert_eq!(
            plan,
            "SCAN intents USING COVERING INDEX intents_by_tool_status"
        );
    }
}

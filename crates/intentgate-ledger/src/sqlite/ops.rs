//! The body of every ledger operation, run inside one SQLite transaction (a savepoint of a
//! grouped commit). Each reads the intent, asks [`crate::plan`] what to do (which checks
//! every status change with the core state machine) and applies the writes it returns.

use intentgate_core::IntentStatus;
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::plan::{self, NewEvent, NewIntent, Plan, StoredIntent, Write};
use crate::record::{Event, IntentId, IntentRecord, ToolFlag};
use crate::{Begin, BeginRequest, Finish, Finished, LedgerError, Resolve};

const INTENT_COLUMNS: &str = "id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
     lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, first_seen_ms, last_seen_ms, \
     updated_ms, last_lookup_ms";

fn read_intent(row: &Row<'_>) -> rusqlite::Result<IntentRecord> {
    let corrupt = |index, message: String| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            message.into(),
        )
    };
    let status: String = row.get(6)?;
    let arguments: String = row.get(5)?;
    let result: Option<String> = row.get(11)?;
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
    })
}

pub fn get(
    connection: &Connection,
    tenant: &str,
    tool: &str,
    key: &str,
) -> Result<Option<IntentRecord>, LedgerError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM intents WHERE tenant = ?1 AND tool = ?2 AND intent_key = ?3"
    );
    Ok(connection
        .prepare_cached(&sql)?
        .query_row(params![tenant, tool, key], read_intent)
        .optional()?)
}

pub fn get_by_id(
    connection: &Connection,
    id: IntentId,
) -> Result<Option<IntentRecord>, LedgerError> {
    let sql = format!("SELECT {INTENT_COLUMNS} FROM intents WHERE id = ?1");
    Ok(connection
        .prepare_cached(&sql)?
        .query_row(params![id], read_intent)
        .optional()?)
}

fn must_get(connection: &Connection, id: IntentId) -> Result<IntentRecord, LedgerError> {
    get_by_id(connection, id)?.ok_or(LedgerError::NotFound(id))
}

pub fn stale(
    connection: &Connection,
    status: IntentStatus,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<IntentRecord>, LedgerError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM intents WHERE status = ?1 \
         AND (lease_expires_ms IS NULL OR lease_expires_ms <= ?2) ORDER BY updated_ms, id LIMIT ?3"
    );
    let mut statement = connection.prepare_cached(&sql)?;
    let rows = statement.query_map(params![status.as_str(), now_ms, limit], read_intent)?;
    Ok(rows.collect::<Result<_, _>>()?)
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

fn append_event(connection: &Connection, event: &NewEvent) -> Result<(), LedgerError> {
    connection
        .prepare_cached(
            "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, actor, detail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
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
    let intent = &stored.intent;
    let changed = connection
        .prepare_cached(
            "UPDATE intents SET status = ?2, attempt = ?3, epoch = ?4, lease_owner = ?5, lease_expires_ms = ?6, \
             result = ?7, external_id = ?8, resolved_by = ?9, call_count = ?10, last_seen_ms = ?11, updated_ms = ?12, \
             last_lookup_ms = ?13 WHERE id = ?1",
        )?
        .execute(params![
            intent.id,
            intent.status.as_str(),
            intent.attempt,
            intent.epoch,
            intent.lease_owner,
            intent.lease_expires_ms,
            stored.result,
            intent.external_id,
            intent.resolved_by,
            intent.call_count as i64,
            intent.last_seen_ms,
            intent.updated_ms,
            intent.last_lookup_ms,
        ])?;
    assert_eq!(
        changed, 1,
        "intent {} vanished inside its own transaction",
        intent.id
    );
    Ok(())
}

/// Applies a plan's writes in order and returns its outcome.
fn apply<T>(connection: &Connection, plan: Plan<T>) -> Result<T, LedgerError> {
    for write in &plan.writes {
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
        }
    }
    Ok(plan.outcome)
}

/// Inserts a new intent and logs its creation; returns it with its id.
fn insert(connection: &Connection, new: NewIntent) -> Result<IntentRecord, LedgerError> {
    let NewIntent {
        mut intent,
        arguments,
    } = new;
    connection
        .prepare_cached(
            "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
             call_count, first_seen_ms, last_seen_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 1, ?7, ?8, ?8, ?8)",
        )?
        .execute(params![
            intent.tenant,
            intent.tool,
            intent.key,
            intent.fingerprint,
            arguments,
            intent.status.as_str(),
            intent.call_count as i64,
            intent.first_seen_ms
        ])?;
    intent.id = connection.last_insert_rowid();
    append_event(connection, &plan::created(&intent, intent.first_seen_ms))?;
    Ok(intent)
}

pub fn begin(connection: &Connection, request: &BeginRequest) -> Result<Begin, LedgerError> {
    plan::check_begin(request)?;
    let plan = match get(connection, &request.tenant, &request.tool, &request.key)? {
        Some(intent) => plan::begin_existing(intent, request)?,
        None => {
            let intent = insert(connection, plan::new_intent(request)?)?;
            plan::begin_new(intent, request)?
        }
    };
    apply(connection, plan)
}

pub fn finish(connection: &Connection, finish: &Finish) -> Result<Finished, LedgerError> {
    plan::check_finish(finish)?;
    let intent = must_get(connection, finish.id)?;
    apply(connection, plan::finish(intent, finish)?)
}

pub fn record_call(connection: &Connection, id: IntentId, now_ms: i64) -> Result<(), LedgerError> {
    let intent = must_get(connection, id)?;
    apply(connection, plan::record_call(intent, now_ms))
}

pub fn resolve(connection: &Connection, resolve: &Resolve) -> Result<IntentRecord, LedgerError> {
    plan::check_resolve(resolve)?;
    let intent = must_get(connection, resolve.id)?;
    apply(connection, plan::resolve(intent, resolve)?)
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
    const SETTLED: &str = "status IN ('done', 'rejected', 'not_executed') AND last_seen_ms < ?1";
    connection.execute(
        &format!("DELETE FROM events WHERE intent_id IN (SELECT id FROM intents WHERE {SETTLED})"),
        params![before_ms],
    )?;
    // Refused calls of a switched-off tool can pile up; switch changes are kept (audit).
    connection.execute(
        "DELETE FROM events WHERE intent_id IS NULL AND kind = 'disabled_call' AND at_ms < ?1",
        params![before_ms],
    )?;
    Ok(connection.execute(
        &format!("DELETE FROM intents WHERE {SETTLED}"),
        params![before_ms],
    )? as u64)
}

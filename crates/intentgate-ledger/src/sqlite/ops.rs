//! The body of every ledger operation, run inside one SQLite transaction (a savepoint of a
//! grouped commit). Each checks the status it reads before it writes, and each status
//! change goes through the core state machine.

use intentgate_core::IntentStatus;
use intentgate_core::limits::{
    ACTOR_LENGTH_MAX, ARGUMENTS_BYTES_MAX, EVENT_DETAIL_LENGTH_MAX, EXTERNAL_ID_LENGTH_MAX,
    INTENT_KEY_LENGTH_MAX, LEASE_OWNER_LENGTH_MAX, RESULT_BYTES_MAX, TENANT_LENGTH_MAX,
    TOOL_NAME_LENGTH_MAX,
};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;

use crate::record::{Event, IntentId, IntentRecord, ToolFlag};
use crate::{Begin, BeginRequest, Finish, Finished, LedgerError, Resolve};

const INTENT_COLUMNS: &str = "id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
     lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, first_seen_ms, last_seen_ms, \
     updated_ms, last_lookup_ms";

pub fn check_length(field: &'static str, text: &str, limit: usize) -> Result<(), LedgerError> {
    if text.len() > limit {
        return Err(LedgerError::TooLarge {
            field,
            length: text.len(),
            limit,
        });
    }
    Ok(())
}

/// Cuts free text to the event log's limit, at a character boundary.
fn bounded(text: &str) -> &str {
    if text.len() <= EVENT_DETAIL_LENGTH_MAX {
        return text;
    }
    let mut end = EVENT_DETAIL_LENGTH_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn json_text(field: &'static str, value: &Value, limit: usize) -> Result<String, LedgerError> {
    let text = value.to_string();
    check_length(field, &text, limit)?;
    Ok(text)
}

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

/// The fields of one event row.
struct NewEvent<'a> {
    intent: &'a IntentRecord,
    at_ms: i64,
    kind: &'static str,
    from: Option<IntentStatus>,
    to: Option<IntentStatus>,
    actor: Option<&'a str>,
    detail: &'a str,
}

fn append_event(connection: &Connection, event: NewEvent<'_>) -> Result<(), LedgerError> {
    connection
        .prepare_cached(
            "INSERT INTO events (intent_id, tenant, tool, at_ms, kind, from_status, to_status, attempt, actor, detail) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            event.intent.id,
            event.intent.tenant,
            event.intent.tool,
            event.at_ms,
            event.kind,
            event.from.map(IntentStatus::as_str),
            event.to.map(IntentStatus::as_str),
            event.intent.attempt,
            event.actor,
            bounded(event.detail),
        ])?;
    Ok(())
}

/// Writes a checked status change with its event.
fn write_transition(
    connection: &Connection,
    before: &IntentRecord,
    after: &IntentRecord,
    at_ms: i64,
    actor: Option<&str>,
    detail: &str,
) -> Result<(), LedgerError> {
    if before.status != after.status {
        before.status.transition(after.status)?;
    }
    assert_eq!(before.id, after.id, "a transition keeps the intent");
    update(connection, after)?;
    let kind = if before.status == after.status {
        "lease"
    } else {
        "transition"
    };
    append_event(
        connection,
        NewEvent {
            intent: after,
            at_ms,
            kind,
            from: Some(before.status),
            to: Some(after.status),
            actor,
            detail,
        },
    )
}

/// Stores every mutable column of `intent`.
fn update(connection: &Connection, intent: &IntentRecord) -> Result<(), LedgerError> {
    let result = intent
        .result
        .as_ref()
        .map(|value| json_text("result", value, RESULT_BYTES_MAX))
        .transpose()?;
    if let Some(id) = &intent.external_id {
        check_length("external_id", id, EXTERNAL_ID_LENGTH_MAX)?;
    }
    if let Some(by) = &intent.resolved_by {
        check_length("resolved_by", by, ACTOR_LENGTH_MAX)?;
    }
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
            result,
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

fn insert(connection: &Connection, request: &BeginRequest) -> Result<IntentRecord, LedgerError> {
    check_length("tenant", &request.tenant, TENANT_LENGTH_MAX)?;
    check_length("tool", &request.tool, TOOL_NAME_LENGTH_MAX)?;
    check_length("key", &request.key, INTENT_KEY_LENGTH_MAX)?;
    check_length("lease_owner", &request.lease_owner, LEASE_OWNER_LENGTH_MAX)?;
    let arguments = json_text("arguments", &request.arguments, ARGUMENTS_BYTES_MAX)?;
    let mut intent = IntentRecord {
        id: 0,
        tenant: request.tenant.clone(),
        tool: request.tool.clone(),
        key: request.key.clone(),
        fingerprint: request.fingerprint.clone(),
        arguments: request.arguments.clone(),
        status: IntentStatus::Pending,
        attempt: 0,
        epoch: 1,
        lease_owner: None,
        lease_expires_ms: None,
        result: None,
        external_id: None,
        resolved_by: None,
        call_count: u64::from(request.count_call),
        first_seen_ms: request.now_ms,
        last_seen_ms: request.now_ms,
        updated_ms: request.now_ms,
        last_lookup_ms: None,
    };
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
            request.now_ms
        ])?;
    intent.id = connection.last_insert_rowid();
    append_event(
        connection,
        NewEvent {
            intent: &intent,
            at_ms: request.now_ms,
            kind: "created",
            from: None,
            to: Some(IntentStatus::Pending),
            actor: None,
            detail: "",
        },
    )?;
    Ok(intent)
}

/// Takes the lease and moves the intent to `in_flight` as a new attempt.
fn start_attempt(
    connection: &Connection,
    intent: IntentRecord,
    request: &BeginRequest,
    new_epoch: bool,
) -> Result<Begin, LedgerError> {
    let mut next = intent.clone();
    next.status = IntentStatus::InFlight;
    // A new attempt starts clean: a retried rejection must not carry the old refusal.
    next.result = None;
    next.external_id = None;
    next.resolved_by = None;
    next.attempt += 1;
    next.epoch += u32::from(new_epoch);
    next.lease_owner = Some(request.lease_owner.clone());
    next.lease_expires_ms = Some(request.lease_expires_ms);
    next.updated_ms = request.now_ms;
    let detail = format!(
        "attempt {} (provider key epoch {})",
        next.attempt, next.epoch
    );
    write_transition(connection, &intent, &next, request.now_ms, None, &detail)?;
    Ok(Begin::Execute(next))
}

pub fn begin(connection: &Connection, request: &BeginRequest) -> Result<Begin, LedgerError> {
    check_length("lease_owner", &request.lease_owner, LEASE_OWNER_LENGTH_MAX)?;
    let Some(mut intent) = get(connection, &request.tenant, &request.tool, &request.key)? else {
        let intent = insert(connection, request)?;
        return start_attempt(connection, intent, request, false);
    };
    if request.count_call {
        intent.call_count += 1;
        intent.last_seen_ms = intent.last_seen_ms.max(request.now_ms);
        connection
            .prepare_cached("UPDATE intents SET call_count = ?2, last_seen_ms = ?3 WHERE id = ?1")?
            .execute(params![
                intent.id,
                intent.call_count as i64,
                intent.last_seen_ms
            ])?;
        let detail = format!("repeat call {}", intent.call_count);
        append_event(
            connection,
            NewEvent {
                intent: &intent,
                at_ms: request.now_ms,
                kind: "call",
                from: None,
                to: None,
                actor: None,
                detail: &detail,
            },
        )?;
    }
    if intent.fingerprint != request.fingerprint {
        append_event(
            connection,
            NewEvent {
                intent: &intent,
                at_ms: request.now_ms,
                kind: "conflict",
                from: None,
                to: None,
                actor: None,
                detail: "same key, other arguments",
            },
        )?;
        return Ok(Begin::Conflict(intent));
    }
    if intent.status == IntentStatus::InFlight && !intent.lease_live(request.now_ms) {
        // The holder crashed or overran its lease: whatever it did is unknown now.
        let mut next = intent.clone();
        next.status = IntentStatus::Unknown;
        next.lease_owner = None;
        next.lease_expires_ms = None;
        next.updated_ms = request.now_ms;
        write_transition(
            connection,
            &intent,
            &next,
            request.now_ms,
            None,
            "lease expired while in flight",
        )?;
        intent = next;
    }
    match intent.status {
        IntentStatus::InFlight => Ok(Begin::Busy(intent)),
        IntentStatus::Pending if intent.lease_live(request.now_ms) => Ok(Begin::Busy(intent)),
        IntentStatus::Pending | IntentStatus::NotExecuted => {
            start_attempt(connection, intent, request, false)
        }
        IntentStatus::Rejected if request.retry_rejected => {
            start_attempt(connection, intent, request, true)
        }
        IntentStatus::Done | IntentStatus::Rejected => Ok(Begin::Settled(intent)),
        IntentStatus::Unknown => {
            let lookup_due = intent.last_lookup_ms.is_none_or(|last| {
                request.now_ms.saturating_sub(last) >= request.lookup_interval_ms
            });
            if intent.lease_live(request.now_ms) || !lookup_due {
                return Ok(Begin::Settled(intent));
            }
            let mut next = intent.clone();
            next.lease_owner = Some(request.lease_owner.clone());
            next.lease_expires_ms = Some(request.lease_expires_ms);
            next.last_lookup_ms = Some(request.now_ms);
            next.updated_ms = request.now_ms;
            write_transition(
                connection,
                &intent,
                &next,
                request.now_ms,
                None,
                "lease taken for a lookup",
            )?;
            Ok(Begin::Lookup(next))
        }
    }
}

pub fn finish(connection: &Connection, finish: &Finish) -> Result<Finished, LedgerError> {
    if matches!(
        finish.status,
        IntentStatus::InFlight | IntentStatus::Pending
    ) {
        debug_assert!(false, "finish records an outcome, not {}", finish.status);
        return Err(IntentStatus::InFlight
            .transition(finish.status)
            .unwrap_err()
            .into());
    }
    let intent = must_get(connection, finish.id)?;
    let holds_lease = intent.lease_owner.as_deref() == Some(finish.lease_owner.as_str());
    let current = intent.attempt == finish.attempt
        && match intent.status {
            IntentStatus::InFlight => holds_lease,
            // Our lease expired and the intent went unknown, or we hold the lookup lease:
            // what this attempt learned still settles it.
            IntentStatus::Unknown => true,
            _ => false,
        };
    if !current {
        return Ok(Finished::Superseded(intent));
    }
    let mut next = intent.clone();
    next.status = finish.status;
    if holds_lease || finish.status != IntentStatus::Unknown {
        next.lease_owner = None;
        next.lease_expires_ms = None;
    }
    next.updated_ms = finish.now_ms;
    if finish.looked_up {
        next.last_lookup_ms = Some(finish.now_ms);
    }
    if matches!(finish.status, IntentStatus::Done | IntentStatus::Rejected) {
        next.result = finish.result.clone();
        next.external_id = finish.external_id.clone();
        next.resolved_by = Some(finish.resolved_by.to_owned());
    }
    if next == intent {
        return Ok(Finished::Recorded(intent));
    }
    write_transition(
        connection,
        &intent,
        &next,
        finish.now_ms,
        Some(finish.resolved_by),
        &finish.detail,
    )?;
    Ok(Finished::Recorded(next))
}

pub fn record_call(connection: &Connection, id: IntentId, now_ms: i64) -> Result<(), LedgerError> {
    let mut intent = must_get(connection, id)?;
    intent.call_count += 1;
    intent.last_seen_ms = intent.last_seen_ms.max(now_ms);
    connection
        .prepare_cached("UPDATE intents SET call_count = ?2, last_seen_ms = ?3 WHERE id = ?1")?
        .execute(params![
            intent.id,
            intent.call_count as i64,
            intent.last_seen_ms
        ])?;
    let detail = format!(
        "repeat call {}, answered from the ledger",
        intent.call_count
    );
    append_event(
        connection,
        NewEvent {
            intent: &intent,
            at_ms: now_ms,
            kind: "call",
            from: None,
            to: None,
            actor: None,
            detail: &detail,
        },
    )
}

pub fn resolve(connection: &Connection, resolve: &Resolve) -> Result<IntentRecord, LedgerError> {
    check_length("actor", &resolve.actor, ACTOR_LENGTH_MAX)?;
    let intent = must_get(connection, resolve.id)?;
    let mut next = intent.clone();
    next.status = intent.status.transition(resolve.status)?;
    next.lease_owner = None;
    next.lease_expires_ms = None;
    next.updated_ms = resolve.now_ms;
    next.resolved_by = Some(resolve.actor.clone());
    if resolve.external_id.is_some() {
        next.external_id = resolve.external_id.clone();
    }
    if resolve.result.is_some() {
        next.result = resolve.result.clone();
    }
    update(connection, &next)?;
    append_event(
        connection,
        NewEvent {
            intent: &next,
            at_ms: resolve.now_ms,
            kind: "resolve",
            from: Some(intent.status),
            to: Some(next.status),
            actor: Some(&resolve.actor),
            detail: &resolve.reason,
        },
    )?;
    Ok(next)
}

pub fn record_disabled_call(
    connection: &Connection,
    tenant: &str,
    tool: &str,
    now_ms: i64,
) -> Result<(), LedgerError> {
    check_length("tenant", tenant, TENANT_LENGTH_MAX)?;
    check_length("tool", tool, TOOL_NAME_LENGTH_MAX)?;
    connection
        .prepare_cached("INSERT INTO events (tenant, tool, at_ms, kind, detail) VALUES (?1, ?2, ?3, 'disabled_call', ?4)")?
        .execute(params![tenant, tool, now_ms, "the tool is switched off; nothing executed"])?;
    Ok(())
}

pub fn set_tool_flag(connection: &Connection, flag: &ToolFlag) -> Result<(), LedgerError> {
    check_length("tool", &flag.tool, TOOL_NAME_LENGTH_MAX)?;
    check_length("actor", &flag.actor, ACTOR_LENGTH_MAX)?;
    connection
        .prepare_cached(
            "INSERT INTO tool_flags (tool, enabled, reason, actor, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (tool) DO UPDATE SET enabled = ?2, reason = ?3, actor = ?4, updated_ms = ?5",
        )?
        .execute(params![flag.tool, flag.enabled, bounded(&flag.reason), flag.actor, flag.updated_ms])?;
    let kind = if flag.enabled {
        "'tool_enabled'"
    } else {
        "'tool_disabled'"
    };
    connection
        .prepare_cached(&format!(
            "INSERT INTO events (tenant, tool, at_ms, kind, actor, detail) VALUES ('*', ?1, ?2, {kind}, ?3, ?4)"
        ))?
        .execute(params![flag.tool, flag.updated_ms, flag.actor, bounded(&flag.reason)])?;
    Ok(())
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

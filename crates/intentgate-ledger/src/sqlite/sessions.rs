//! Console sessions and the notices' history on SQLite (`crate::console`): every function
//! runs on the connection it is given, inside the write or read the ledger opened for it.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::console::{ConsoleSession, StoredAlert};
use crate::{ALERTS_KEPT_MAX, ALERTS_PAGE_MAX, CONSOLE_SESSIONS_MAX, Erase, LedgerError};

const SESSION_COLUMNS: &str = "token_digest, actor, csrf, approver_subject, approver_tenant, \
     credentials, created_ms, last_used_ms, idle_ms, expires_ms";
const ALERT_COLUMNS: &str =
    "id, at_ms, kind, tool, owner, severity, tenant, intent_key, summary, details";

fn read_session(row: &Row<'_>) -> rusqlite::Result<ConsoleSession> {
    Ok(ConsoleSession {
        token_digest: row.get(0)?,
        actor: row.get(1)?,
        csrf: row.get(2)?,
        approver_subject: row.get(3)?,
        approver_tenant: row.get(4)?,
        credentials: row.get(5)?,
        created_ms: row.get(6)?,
        last_used_ms: row.get(7)?,
        idle_ms: row.get(8)?,
        expires_ms: row.get(9)?,
    })
}

fn read_alert(row: &Row<'_>) -> rusqlite::Result<StoredAlert> {
    Ok(StoredAlert {
        id: row.get(0)?,
        at_ms: row.get(1)?,
        kind: row.get(2)?,
        tool: row.get(3)?,
        owner: row.get(4)?,
        severity: row.get(5)?,
        tenant: row.get(6)?,
        intent_key: row.get(7)?,
        summary: row.get(8)?,
        details: row.get(9)?,
    })
}

/// Deletes the sessions ended at `now_ms`, then the idlest ones while the table is full, and
/// stores `session`.
pub fn create_session(
    connection: &Connection,
    session: &ConsoleSession,
) -> Result<(), LedgerError> {
    let now_ms = session.created_ms;
    connection.execute(
        "DELETE FROM console_sessions WHERE ?1 - last_used_ms >= idle_ms OR ?1 >= expires_ms",
        params![now_ms],
    )?;
    connection.execute(
        "DELETE FROM console_sessions WHERE token_digest IN (SELECT token_digest FROM \
         console_sessions ORDER BY last_used_ms ASC, created_ms ASC LIMIT \
         max(0, (SELECT count(*) FROM console_sessions) - ?1 + 1))",
        params![CONSOLE_SESSIONS_MAX],
    )?;
    connection.execute(
        &format!("INSERT INTO console_sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        params![
            session.token_digest,
            session.actor,
            session.csrf,
            session.approver_subject,
            session.approver_tenant,
            session.credentials,
            session.created_ms,
            session.last_used_ms,
            session.idle_ms,
            session.expires_ms,
        ],
    )?;
    Ok(())
}

/// The live session of `token_digest`, marked used at `now_ms`; an ended one is deleted.
pub fn use_session(
    connection: &Connection,
    token_digest: &str,
    now_ms: i64,
) -> Result<Option<ConsoleSession>, LedgerError> {
    let live = connection
        .query_row(
            &format!(
                "UPDATE console_sessions SET last_used_ms = max(last_used_ms, ?2) \
                 WHERE token_digest = ?1 AND ?2 - last_used_ms < idle_ms AND ?2 < expires_ms \
                 RETURNING {SESSION_COLUMNS}"
            ),
            params![token_digest, now_ms],
            read_session,
        )
        .optional()?;
    if live.is_none() {
        connection.execute(
            "DELETE FROM console_sessions WHERE token_digest = ?1",
            params![token_digest],
        )?;
    }
    Ok(live)
}

/// Deletes the session of `token_digest`; true when there was one.
pub fn end_session(connection: &Connection, token_digest: &str) -> Result<bool, LedgerError> {
    let deleted = connection.execute(
        "DELETE FROM console_sessions WHERE token_digest = ?1",
        params![token_digest],
    )?;
    Ok(deleted > 0)
}

/// Stores `alert` and deletes the oldest beyond [`ALERTS_KEPT_MAX`]; its id.
pub fn record_alert(connection: &Connection, alert: &StoredAlert) -> Result<i64, LedgerError> {
    let id = connection.query_row(
        "INSERT INTO alerts (at_ms, kind, tool, owner, severity, tenant, intent_key, summary, \
         details) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id",
        params![
            alert.at_ms,
            alert.kind,
            alert.tool,
            alert.owner,
            alert.severity,
            alert.tenant,
            alert.intent_key,
            alert.summary,
            alert.details,
        ],
        |row| row.get(0),
    )?;
    connection.execute(
        "DELETE FROM alerts WHERE id <= (SELECT id FROM alerts ORDER BY id DESC LIMIT 1 OFFSET ?1)",
        params![ALERTS_KEPT_MAX],
    )?;
    Ok(id)
}

/// The latest notices, newest first.
pub fn alerts(connection: &Connection, limit: u32) -> Result<Vec<StoredAlert>, LedgerError> {
    let mut statement = connection.prepare_cached(&format!(
        "SELECT {ALERT_COLUMNS} FROM alerts ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = statement.query_map(params![limit.min(ALERTS_PAGE_MAX)], read_alert)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The retention's part: sessions ended before `before_ms`, notices sent before it.
pub fn purge(connection: &Connection, before_ms: i64) -> Result<(), LedgerError> {
    connection.execute(
        "DELETE FROM console_sessions WHERE last_used_ms + idle_ms < ?1 OR expires_ms < ?1",
        params![before_ms],
    )?;
    connection.execute("DELETE FROM alerts WHERE at_ms < ?1", params![before_ms])?;
    Ok(())
}

/// The erasure's part: the notices about the erased tenant, tool or intent.
pub fn erase(connection: &Connection, erase: &Erase) -> Result<(), LedgerError> {
    connection.execute(
        "DELETE FROM alerts WHERE tenant = ?1 AND (?2 IS NULL OR tool = ?2) \
         AND (?3 IS NULL OR intent_key = ?3)",
        params![erase.tenant, erase.tool, erase.key],
    )?;
    Ok(())
}

//! Console sessions and the notices' history on PostgreSQL (`crate::console`): every
//! function runs on the session it is given, inside the transaction (for a write) the
//! ledger opened for it.

use tokio_postgres::Row;

use super::Failure;
use super::pool::Session;
use crate::console::{ConsoleSession, StoredAlert};
use crate::plan::Plan;
use crate::{ALERTS_KEPT_MAX, ALERTS_PAGE_MAX, CONSOLE_SESSIONS_MAX, Erase};

macro_rules! session_columns {
    () => {
        "token_digest, actor, csrf, approver_subject, approver_tenant, credentials, created_ms, \
         last_used_ms, idle_ms, expires_ms"
    };
}
macro_rules! alert_columns {
    () => {
        "id, at_ms, kind, tool, owner, severity, tenant, intent_key, summary, details"
    };
}

const DELETE_ENDED: &str =
    "DELETE FROM console_sessions WHERE $1 - last_used_ms >= idle_ms OR $1 >= expires_ms";
const DELETE_IDLEST: &str = "DELETE FROM console_sessions WHERE token_digest IN (SELECT \
     token_digest FROM console_sessions ORDER BY last_used_ms ASC, created_ms ASC LIMIT \
     GREATEST(0, (SELECT count(*) FROM console_sessions) - $1 + 1))";
const INSERT_SESSION: &str = concat!(
    "INSERT INTO console_sessions (",
    session_columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
);
const USE_SESSION: &str = concat!(
    "UPDATE console_sessions SET last_used_ms = GREATEST(last_used_ms, $2) \
     WHERE token_digest = $1 AND $2 - last_used_ms < idle_ms AND $2 < expires_ms RETURNING ",
    session_columns!()
);
const DELETE_SESSION: &str = "DELETE FROM console_sessions WHERE token_digest = $1";
const INSERT_ALERT: &str = "INSERT INTO alerts (at_ms, kind, tool, owner, severity, tenant, \
     intent_key, summary, details) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id";
const TRIM_ALERTS: &str = "DELETE FROM alerts WHERE id <= (SELECT id FROM alerts ORDER BY id \
     DESC LIMIT 1 OFFSET $1)";
const ALERTS: &str = concat!(
    "SELECT ",
    alert_columns!(),
    " FROM alerts ORDER BY id DESC LIMIT $1"
);
const PURGE_SESSIONS: &str =
    "DELETE FROM console_sessions WHERE last_used_ms + idle_ms < $1 OR expires_ms < $1";
const PURGE_ALERTS: &str = "DELETE FROM alerts WHERE at_ms < $1";
const ERASE_ALERTS: &str = "DELETE FROM alerts WHERE tenant = $1 AND ($2::text IS NULL OR \
     tool = $2) AND ($3::text IS NULL OR intent_key = $3)";

fn read_session(row: &Row) -> Result<ConsoleSession, tokio_postgres::Error> {
    Ok(ConsoleSession {
        token_digest: row.try_get(0)?,
        actor: row.try_get(1)?,
        csrf: row.try_get(2)?,
        approver_subject: row.try_get(3)?,
        approver_tenant: row.try_get(4)?,
        credentials: row.try_get(5)?,
        created_ms: row.try_get(6)?,
        last_used_ms: row.try_get(7)?,
        idle_ms: row.try_get(8)?,
        expires_ms: row.try_get(9)?,
    })
}

fn read_alert(row: &Row) -> Result<StoredAlert, tokio_postgres::Error> {
    Ok(StoredAlert {
        id: row.try_get(0)?,
        at_ms: row.try_get(1)?,
        kind: row.try_get(2)?,
        tool: row.try_get(3)?,
        owner: row.try_get(4)?,
        severity: row.try_get(5)?,
        tenant: row.try_get(6)?,
        intent_key: row.try_get(7)?,
        summary: row.try_get(8)?,
        details: row.try_get(9)?,
    })
}

/// Deletes the sessions ended at its start, then the idlest ones while the table is full,
/// and stores `session`.
pub async fn create_session(
    session: &mut Session,
    stored: &ConsoleSession,
) -> Result<Plan<()>, Failure> {
    let now_ms = stored.created_ms;
    session.execute(DELETE_ENDED, &[&now_ms]).await?;
    session
        .execute(DELETE_IDLEST, &[&i64::from(CONSOLE_SESSIONS_MAX)])
        .await?;
    session
        .execute(
            INSERT_SESSION,
            &[
                &stored.token_digest,
                &stored.actor,
                &stored.csrf,
                &stored.approver_subject,
                &stored.approver_tenant,
                &stored.credentials,
                &stored.created_ms,
                &stored.last_used_ms,
                &stored.idle_ms,
                &stored.expires_ms,
            ],
        )
        .await?;
    Ok(Plan::outcome(()))
}

/// The live session of `token_digest`, marked used at `now_ms`; an ended one is deleted.
pub async fn use_session(
    session: &mut Session,
    token_digest: &str,
    now_ms: i64,
) -> Result<Plan<Option<ConsoleSession>>, Failure> {
    let row = session
        .query_opt(USE_SESSION, &[&token_digest, &now_ms])
        .await?;
    let live = row.as_ref().map(read_session).transpose()?;
    if live.is_none() {
        session.execute(DELETE_SESSION, &[&token_digest]).await?;
    }
    Ok(Plan::outcome(live))
}

/// Deletes the session of `token_digest`; true when there was one.
pub async fn end_session(session: &mut Session, token_digest: &str) -> Result<Plan<bool>, Failure> {
    let deleted = session.execute(DELETE_SESSION, &[&token_digest]).await?;
    Ok(Plan::outcome(deleted > 0))
}

/// Stores `alert` and deletes the oldest beyond [`ALERTS_KEPT_MAX`]; its id.
pub async fn record_alert(
    session: &mut Session,
    alert: &StoredAlert,
) -> Result<Plan<i64>, Failure> {
    let row = session
        .query_opt(
            INSERT_ALERT,
            &[
                &alert.at_ms,
                &alert.kind,
                &alert.tool,
                &alert.owner,
                &alert.severity,
                &alert.tenant,
                &alert.intent_key,
                &alert.summary,
                &alert.details,
            ],
        )
        .await?;
    let id: i64 = match row {
        Some(row) => row.try_get(0)?,
        None => {
            return Err(Failure::Ledger(crate::LedgerError::Storage(
                "the insert of a notice returned no id".to_owned(),
            )));
        }
    };
    session
        .execute(TRIM_ALERTS, &[&i64::from(ALERTS_KEPT_MAX)])
        .await?;
    Ok(Plan::outcome(id))
}

/// The latest notices, newest first.
pub async fn alerts(session: &mut Session, limit: u32) -> Result<Vec<StoredAlert>, Failure> {
    let limit = i64::from(limit.min(ALERTS_PAGE_MAX));
    let rows = session.query(ALERTS, &[&limit]).await?;
    Ok(rows.iter().map(read_alert).collect::<Result<_, _>>()?)
}

/// The retention's part: sessions ended before `before_ms`, notices sent before it.
pub async fn purge(session: &mut Session, before_ms: i64) -> Result<(), Failure> {
    session.execute(PURGE_SESSIONS, &[&before_ms]).await?;
    session.execute(PURGE_ALERTS, &[&before_ms]).await?;
    Ok(())
}

/// The erasure's part: the notices about the erased tenant, tool or intent.
pub async fn erase(session: &mut Session, erase: &Erase) -> Result<(), Failure> {
    session
        .execute(ERASE_ALERTS, &[&erase.tenant, &erase.tool, &erase.key])
        .await?;
    Ok(())
}

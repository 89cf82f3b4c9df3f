//! What the operator console and the owners' notices keep in the ledger, so that every
//! replica on one ledger shares it and a restart keeps it: console sessions
//! ([`ConsoleSession`]) and the history of the notices sent to tools' owners
//! ([`StoredAlert`]).
//!
//! A session row holds the SHA-256 of the session's token (the browser's cookie), never the
//! token: a copy of the ledger signs nobody in. Expiry is enforced by the store on every
//! read ([`Ledger::console_session`](crate::Ledger::console_session)), so a replica whose
//! clock is right can't be handed a session another replica should have ended. Both tables
//! are bounded ([`CONSOLE_SESSIONS_MAX`], [`ALERTS_KEPT_MAX`]) whatever the callers do.

use serde::Serialize;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::LedgerError;

/// Most console sessions kept at once, across every replica. A handful of operators sign
/// in; 256 leaves room for many browsers each and bounds the table (a few hundred bytes a
/// row) however often someone signs in. When full, a new sign-in ends the session that has
/// been idle longest.
pub const CONSOLE_SESSIONS_MAX: u32 = 256;
/// Notices kept in the history, newest first: a storm fires at most one alert per rule,
/// intent and window, so a few hundred cover the last incident. Each is at most
/// [`ALERT_DETAILS_BYTES_MAX`] of details plus its summary, so the table stays under about
/// 40 MiB at worst; older ones are deleted as new ones come.
pub const ALERTS_KEPT_MAX: u32 = 500;
/// Most notices one read of the history returns.
pub const ALERTS_PAGE_MAX: u32 = ALERTS_KEPT_MAX;
/// Longest details of a stored notice, as JSON text. A reconciliation notice lists its
/// mismatches and may be longer: the caller keeps a shorter form of it.
pub const ALERT_DETAILS_BYTES_MAX: usize = 65_536;
/// Longest summary of a stored notice.
pub const ALERT_SUMMARY_LENGTH_MAX: usize = 4_096;
/// Longest kind of a notice (`duplicate_calls`, `reconciliation`...).
pub const ALERT_KIND_LENGTH_MAX: usize = 64;
/// Longest owner name of a notice.
pub const ALERT_OWNER_LENGTH_MAX: usize = 128;
/// The severities a stored notice may have.
pub const ALERT_SEVERITIES: [&str; 3] = ["info", "warning", "critical"];
/// Length of a digest as stored: SHA-256 as lowercase hex.
pub const DIGEST_HEX_LENGTH: usize = 64;
/// Longest actor of a session (`console:<subject>`).
pub const SESSION_ACTOR_LENGTH_MAX: usize = 256;
/// Longest CSRF token of a session.
pub const SESSION_CSRF_LENGTH_MAX: usize = 128;

/// A console session as stored. The store never sees the token, only its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsoleSession {
    /// SHA-256 of the session's token, as [`DIGEST_HEX_LENGTH`] lowercase hex digits.
    pub token_digest: String,
    /// Who signed in, as changes are recorded (`console:<subject>`).
    pub actor: String,
    /// The token every change made with the session must carry.
    pub csrf: String,
    /// The subject and tenant the session decides on held intents as, if any.
    pub approver_subject: Option<String>,
    pub approver_tenant: Option<String>,
    /// A digest of the credentials the gateway accepted when the session was made (lowercase
    /// hex): a gateway that accepts other credentials (a key revoked, the admin token
    /// rotated) refuses the session.
    pub credentials: String,
    pub created_ms: i64,
    /// The last request made with the session (moved forward by each read).
    pub last_used_ms: i64,
    /// How long the session may go unused before it ends.
    pub idle_ms: i64,
    /// When the session ends however active it is.
    pub expires_ms: i64,
}

impl ConsoleSession {
    /// True while the session may be used at `now_ms`: not idle for `idle_ms`, not past
    /// `expires_ms`.
    pub fn live_at(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_used_ms) < self.idle_ms && now_ms < self.expires_ms
    }
}

/// A notice sent to a tool's owner, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredAlert {
    /// Given by the store (ignored when storing); increases with each stored notice.
    pub id: i64,
    pub at_ms: i64,
    /// `duplicate_calls`, `reconciliation`, `upstream_misconfigured`...
    pub kind: String,
    pub tool: String,
    pub owner: String,
    /// One of [`ALERT_SEVERITIES`].
    pub severity: String,
    /// The tenant the notice is about, when it is about one tenant's intent: an erasure of
    /// the tenant deletes it.
    pub tenant: Option<String>,
    /// The intent the notice is about (with `tenant`), if one: an erasure of the intent
    /// deletes the notice.
    pub intent_key: Option<String>,
    pub summary: String,
    /// The structured details, as JSON text (at most [`ALERT_DETAILS_BYTES_MAX`]).
    pub details: String,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn too_large(field: &'static str, length: usize, limit: usize) -> LedgerError {
    LedgerError::TooLarge {
        field,
        length,
        limit,
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn check_text(
    field: &'static str,
    value: &str,
    limit: usize,
    empty_ok: bool,
) -> Result<(), LedgerError> {
    if value.len() > limit {
        return Err(too_large(field, value.len(), limit));
    }
    if !empty_ok && value.is_empty() {
        return Err(LedgerError::Invalid {
            field,
            reason: "must not be empty".to_owned(),
        });
    }
    Ok(())
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn check_digest(field: &'static str, value: &str) -> Result<(), LedgerError> {
    let hex = value.len() == DIGEST_HEX_LENGTH
        && value
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if hex {
        Ok(())
    } else {
        Err(LedgerError::Invalid {
            field,
            reason: format!("must be {DIGEST_HEX_LENGTH} lowercase hex digits (a SHA-256)"),
        })
    }
}

/// Refuses a session the stores would not keep as given.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_session(session: &ConsoleSession) -> Result<(), LedgerError> {
    use intentgate_core::limits::{ACTOR_LENGTH_MAX, TENANT_LENGTH_MAX};
    check_digest("session token digest", &session.token_digest)?;
    check_digest("session credentials digest", &session.credentials)?;
    check_text(
        "session actor",
        &session.actor,
        SESSION_ACTOR_LENGTH_MAX,
        false,
    )?;
    check_text(
        "session csrf",
        &session.csrf,
        SESSION_CSRF_LENGTH_MAX,
        false,
    )?;
    if session.approver_subject.is_some() != session.approver_tenant.is_some() {
        return Err(LedgerError::Invalid {
            field: "session approver",
            reason: "needs both a subject and a tenant, or neither".to_owned(),
        });
    }
    if let Some(subject) = &session.approver_subject {
        check_text("session approver subject", subject, ACTOR_LENGTH_MAX, false)?;
    }
    if let Some(tenant) = &session.approver_tenant {
        check_text("session approver tenant", tenant, TENANT_LENGTH_MAX, false)?;
    }
    if session.idle_ms <= 0 || session.expires_ms <= session.created_ms {
        return Err(LedgerError::Invalid {
            field: "session expiry",
            reason: "needs a positive idle time and an end after its start".to_owned(),
        });
    }
    Ok(())
}

/// Refuses a digest that is not one (a lookup by anything else finds nothing anyway, but
/// says so plainly).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_token_digest(digest: &str) -> Result<(), LedgerError> {
    check_digest("session token digest", digest)
}

/// Refuses a notice the stores would not keep as given.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_alert(alert: &StoredAlert) -> Result<(), LedgerError> {
    use intentgate_core::limits::{INTENT_KEY_LENGTH_MAX, TENANT_LENGTH_MAX, TOOL_NAME_LENGTH_MAX};
    check_text("alert kind", &alert.kind, ALERT_KIND_LENGTH_MAX, false)?;
    check_text("alert tool", &alert.tool, TOOL_NAME_LENGTH_MAX, true)?;
    check_text("alert owner", &alert.owner, ALERT_OWNER_LENGTH_MAX, false)?;
    check_text(
        "alert summary",
        &alert.summary,
        ALERT_SUMMARY_LENGTH_MAX,
        true,
    )?;
    check_text(
        "alert details",
        &alert.details,
        ALERT_DETAILS_BYTES_MAX,
        false,
    )?;
    if let Some(tenant) = &alert.tenant {
        check_text("alert tenant", tenant, TENANT_LENGTH_MAX, false)?;
    }
    if let Some(key) = &alert.intent_key {
        check_text("alert intent key", key, INTENT_KEY_LENGTH_MAX, false)?;
    }
    if !ALERT_SEVERITIES.contains(&alert.severity.as_str()) {
        return Err(LedgerError::Invalid {
            field: "alert severity",
            reason: format!("must be one of {}", ALERT_SEVERITIES.join(", ")),
        });
    }
    Ok(())
}

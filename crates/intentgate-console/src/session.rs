//! Console sessions, kept in the ledger: the SHA-256 of a random token (the cookie's value)
//! maps to who signed in, a CSRF token, and two expiries.
//!
//! The browser holds only the token, in a `Secure`, `HttpOnly`, `SameSite=Strict` cookie;
//! the ledger holds the SHA-256 of each token, so a copy of the ledger (a backup, a
//! replica's disk) holds no usable cookie, and a lookup's timing says nothing about how much
//! of a guessed token was right. A session ends at sign-out, after [`SESSION_IDLE_MAX`]
//! without a request, or [`SESSION_LIFETIME_MAX`] after sign-in, whichever comes first; the
//! ledger checks both on every read. Every replica on one ledger shares the sessions: a
//! sign-in on one is honoured by all, a sign-out on one is refused by all from the next
//! request, and a restart signs nobody out. The ledger bounds them
//! ([`intentgate_ledger::CONSOLE_SESSIONS_MAX`]): when full, a new sign-in ends the session
//! idle longest.
//!
//! A session is bound to the credentials the gateway accepted when it was made: each row
//! holds a digest of the session's token and of a description of every admin credential
//! the gateway accepts (the admin token and the `auth:` section). A gateway whose
//! credentials differ (a key revoked, the admin token rotated) finds a different digest and
//! ends the session, so no stored session outlives the credential it was made with. The
//! digest mixes in the session's token, which the ledger never holds, so the stored value
//! gives no way to test guesses of the admin token.

use std::sync::Arc;
use std::time::Duration;

use intentgate_admin::Approver;
use intentgate_core::hex::lower_hex;
use intentgate_ledger::{ConsoleSession, Ledger, LedgerError};
use sha2::{Digest, Sha256};

/// A session unused this long ends: a laptop left open stops being signed in.
pub const SESSION_IDLE_MAX: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after sign-in, however active: a shift.
pub const SESSION_LIFETIME_MAX: Duration = Duration::from_secs(12 * 60 * 60);
/// Random bytes of a session token and of a CSRF token: 256 bits, beyond guessing.
const SECRET_BYTES: usize = 32;

/// A live session, as the console and the admin API see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who signed in, as changes are recorded (`console:<subject>`).
    pub actor: String,
    /// The token every change must carry in the `X-Intentgate-Csrf` header.
    pub csrf: String,
    /// Who decides on held intents in this session: the subject and tenant of the
    /// credential it signed in with, when that had the `approve` scope.
    pub approver: Option<Approver>,
}

/// The console's sessions, in the ledger.
pub struct Sessions {
    ledger: Arc<dyn Ledger>,
    /// SHA-256 of the description of the credentials this gateway accepts.
    credentials: [u8; 32],
}

/// Why no session could be made or read.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no random bytes for a session token: {0}")]
    NoRandomness(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl Sessions {
    /// The sessions kept in `ledger`, valid where the gateway accepts the admin credentials
    /// that `credentials` describes (any text that changes when one of them does).
    pub fn new(ledger: Arc<dyn Ledger>, credentials: &[u8]) -> Sessions {
        Sessions {
            ledger,
            credentials: Sha256::digest(credentials).into(),
        }
    }

    /// Starts a session for `actor` (who decides as `approver`, if anyone) at `now_ms`;
    /// returns its token (the cookie's value, shown once) and the session.
    pub async fn create(
        &self,
        actor: String,
        approver: Option<Approver>,
        now_ms: i64,
    ) -> Result<(String, Session), SessionError> {
        let token = secret()?;
        let session = Session {
            actor,
            csrf: secret()?,
            approver,
        };
        let stored = ConsoleSession {
            token_digest: lower_hex(&digest(&token)),
            actor: session.actor.clone(),
            csrf: session.csrf.clone(),
            approver_subject: session.approver.as_ref().map(|a| a.subject.clone()),
            approver_tenant: session.approver.as_ref().map(|a| a.tenant.clone()),
            credentials: lower_hex(&self.binding(&token)),
            created_ms: now_ms,
            last_used_ms: now_ms,
            idle_ms: millis(SESSION_IDLE_MAX),
            expires_ms: now_ms.saturating_add(millis(SESSION_LIFETIME_MAX)),
        };
        self.ledger.create_console_session(&stored).await?;
        Ok((token, session))
    }

    /// The live session of `token`, marked used at `now_ms`; `None` for an unknown or ended
    /// one, or one made under credentials this gateway no longer accepts (which is ended).
    pub async fn find(&self, token: &str, now_ms: i64) -> Result<Option<Session>, LedgerError> {
        let token_digest = lower_hex(&digest(token));
        let Some(stored) = self.ledger.console_session(&token_digest, now_ms).await? else {
            return Ok(None);
        };
        if !same_secret(&stored.credentials, &lower_hex(&self.binding(token))) {
            tracing::info!(
                actor = %stored.actor,
                "console session ended: it was made under admin credentials this gateway no longer accepts"
            );
            self.ledger.end_console_session(&token_digest).await?;
            return Ok(None);
        }
        let approver = match (stored.approver_subject, stored.approver_tenant) {
            (Some(subject), Some(tenant)) => Some(Approver { subject, tenant }),
            _ => None,
        };
        Ok(Some(Session {
            actor: stored.actor,
            csrf: stored.csrf,
            approver,
        }))
    }

    /// Ends the session of `token`, if there is one, on every replica.
    pub async fn remove(&self, token: &str) -> Result<(), LedgerError> {
        self.ledger
            .end_console_session(&lower_hex(&digest(token)))
            .await
            .map(|_| ())
    }

    /// What binds a session to this gateway's credentials: the digest of its token and of
    /// their description.
    fn binding(&self, token: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(b"intentgate console session binding\n");
        hasher.update(token.as_bytes());
        hasher.update(b"\n");
        hasher.update(self.credentials);
        hasher.finalize().into()
    }
}

/// Milliseconds since the Unix epoch, by the system clock.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// [`SECRET_BYTES`] random bytes from the operating system, as lowercase hex.
fn secret() -> Result<String, SessionError> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|error| SessionError::NoRandomness(error.to_string()))?;
    Ok(lower_hex(&bytes))
}

/// True when the two texts are equal, comparing every byte whatever the first difference
/// (for CSRF tokens, which an attacker may try byte by byte).
pub fn same_secret(left: &str, right: &str) -> bool {
    let (left, right): ([u8; 32], [u8; 32]) = (digest(left), digest(right));
    let difference = left
        .iter()
        .zip(right.iter())
        .fold(0u8, |difference, (a, b)| difference | (a ^ b));
    std::hint::black_box(difference) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", ""));
    }
}

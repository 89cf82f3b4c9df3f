//! Console sessions, kept on the server: a random id (the cookie's value) maps to who signed
//! in, a CSRF token, and two expiries.
//!
//! The browser holds only the id, in a `Secure`, `HttpOnly`, `SameSite=Strict` cookie; the
//! table holds the SHA-256 of each id, so a lookup's timing says nothing about how much of a
//! guessed id was right, and a memory dump holds no usable cookie. A session ends at sign-out,
//! after [`SESSION_IDLE_MAX`] without a request, or [`SESSION_LIFETIME_MAX`] after sign-in,
//! whichever comes first. The table is bounded ([`SESSIONS_MAX`]); when full, a new sign-in
//! pushes out the session that has been idle longest. Sessions live in the memory of one
//! process: a restart signs everyone out, and behind a load balancer each replica knows only
//! the sessions signed in on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use intentgate_admin::Approver;
use sha2::{Digest, Sha256};

/// Most sessions at once. A handful of operators sign in; 256 leaves room for many browsers
/// each, and bounds the table (about 300 bytes a session) however often someone signs in.
pub const SESSIONS_MAX: usize = 256;
/// A session unused this long ends: a laptop left open stops being signed in.
pub const SESSION_IDLE_MAX: Duration = Duration::from_secs(60 * 60);
/// A session ends this long after sign-in, however active: a shift.
pub const SESSION_LIFETIME_MAX: Duration = Duration::from_secs(12 * 60 * 60);
/// Random bytes of a session id and of a CSRF token: 256 bits, beyond guessing.
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

struct Entry {
    session: Session,
    created: Instant,
    last_used: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_used) < SESSION_IDLE_MAX
            && now.saturating_duration_since(self.created) < SESSION_LIFETIME_MAX
    }
}

/// The table of live sessions.
#[derive(Default)]
pub struct Sessions {
    entries: Mutex<HashMap<[u8; 32], Entry>>,
}

/// Why no session could be made.
#[derive(Debug, thiserror::Error)]
#[error("no random bytes for a session id: {0}")]
pub struct NoRandomness(String);

impl Sessions {
    pub fn new() -> Sessions {
        Sessions::default()
    }

    /// Starts a session for `actor` (who decides as `approver`, if anyone); returns its id
    /// (the cookie's value, shown once) and the session.
    pub fn create(
        &self,
        actor: String,
        approver: Option<Approver>,
        now: Instant,
    ) -> Result<(String, Session), NoRandomness> {
        let id = secret()?;
        let session = Session {
            actor,
            csrf: secret()?,
            approver,
        };
        let mut entries = self.lock();
        entries.retain(|_, entry| entry.live(now));
        if entries.len() >= SESSIONS_MAX
            && let Some(idlest) = entries
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(digest, _)| *digest)
        {
            entries.remove(&idlest);
        }
        entries.insert(
            digest(&id),
            Entry {
                session: session.clone(),
                created: now,
                last_used: now,
            },
        );
        Ok((id, session))
    }

    /// The live session of `id`, marked used at `now`; `None` for an unknown or ended one
    /// (which is forgotten).
    pub fn find(&self, id: &str, now: Instant) -> Option<Session> {
        let key = digest(id);
        let mut entries = self.lock();
        let entry = entries.get_mut(&key)?;
        if !entry.live(now) {
            entries.remove(&key);
            return None;
        }
        entry.last_used = now;
        Some(entry.session.clone())
    }

    /// Ends the session of `id`, if there is one.
    pub fn remove(&self, id: &str) {
        self.lock().remove(&digest(id));
    }

    /// Sessions in the table (live or not yet swept).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        // A panic while holding the lock leaves a consistent map (every change is one call).
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// [`SECRET_BYTES`] random bytes from the operating system, as lowercase hex.
fn secret() -> Result<String, NoRandomness> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(|error| NoRandomness(error.to_string()))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
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
    fn a_session_is_found_by_its_id_only_and_ends_at_sign_out() {
        let sessions = Sessions::new();
        let now = Instant::now();
        let (id, session) = sessions
            .create("console:ops".to_owned(), None, now)
            .unwrap();
        assert_eq!(id.len(), 64);
        assert_eq!(session.csrf.len(), 64);
        assert_ne!(id, session.csrf);
        assert_eq!(sessions.find(&id, now), Some(session));
        assert_eq!(sessions.find(&session_like(&id), now), None);
        sessions.remove(&id);
        assert_eq!(sessions.find(&id, now), None);
    }

    /// The id with its last character changed.
    fn session_like(id: &str) -> String {
        let mut other = id[..id.len() - 1].to_owned();
        other.push(if id.ends_with('0') { '1' } else { '0' });
        other
    }

    #[test]
    fn a_session_ends_when_idle_and_after_its_lifetime_however_active() {
        let sessions = Sessions::new();
        let start = Instant::now();
        let (idle, _) = sessions.create("a".to_owned(), None, start).unwrap();
        assert!(sessions.find(&idle, start + SESSION_IDLE_MAX).is_none());
        let (busy, _) = sessions.create("b".to_owned(), None, start).unwrap();
        let step = SESSION_IDLE_MAX / 2;
        let mut now = start;
        while now + step < start + SESSION_LIFETIME_MAX {
            now += step;
            assert!(sessions.find(&busy, now).is_some());
        }
        assert!(sessions.find(&busy, start + SESSION_LIFETIME_MAX).is_none());
    }

    #[test]
    fn a_full_table_pushes_out_the_idlest_session() {
        let sessions = Sessions::new();
        let start = Instant::now();
        let (first, _) = sessions.create("first".to_owned(), None, start).unwrap();
        let mut ids = Vec::new();
        for index in 1..SESSIONS_MAX {
            let at = start + Duration::from_millis(index as u64);
            ids.push(sessions.create(format!("s{index}"), None, at).unwrap().0);
        }
        let later = start + Duration::from_secs(1);
        // Used again: now the second session is the idlest.
        assert!(sessions.find(&first, later).is_some());
        let (newest, _) = sessions.create("newest".to_owned(), None, later).unwrap();
        assert_eq!(sessions.len(), SESSIONS_MAX);
        assert!(sessions.find(&first, later).is_some());
        assert!(sessions.find(&newest, later).is_some());
        assert!(sessions.find(&ids[0], later).is_none());
    }

    #[test]
    fn secrets_compare_equal_only_when_equal() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", ""));
    }
}

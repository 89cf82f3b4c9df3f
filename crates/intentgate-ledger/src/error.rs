//! Ledger errors: operating errors a caller handles (a full disk, a closed store) and the
//! few that report a bug (an illegal transition), kept apart by variant.

use intentgate_core::IllegalTransition;

use crate::record::IntentId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The store failed to read or write (disk full, I/O error, database locked too long).
    /// Nothing of the failed operation was written.
    #[error("ledger storage error: {0}")]
    Storage(String),
    /// The ledger could not be opened; says which file and what to do.
    #[error("can't open the ledger at {path}: {reason}")]
    Open { path: String, reason: String },
    /// A value is over its limit; nothing was written.
    #[error("{field} is {length} bytes long; the limit is {limit}")]
    TooLarge {
        field: &'static str,
        length: usize,
        limit: usize,
    },
    /// The store has shut down.
    #[error("the ledger is closed")]
    Closed,
    /// A row the store can't read back (edited by hand, or written by a newer version).
    #[error("corrupt ledger row: {0}")]
    Corrupt(String),
    /// The ledger's schema is newer than this program knows (a downgrade after a newer
    /// release migrated it): nothing was read or written; says both versions.
    #[error("{0}")]
    NewerSchema(String),
    /// A migration this program must run is refused while processes of an older release
    /// that would go wrong on the migrated schema still run on the ledger: nothing was
    /// written; says which processes and what to do.
    #[error("{0}")]
    MigrationRefused(String),
    /// A value the ledger can't store as given (an inconsistent record, a value outside its
    /// set, an empty name); says which and why. Nothing was written.
    #[error("{field} {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("no intent with id {0}")]
    NotFound(IntentId),
    /// A status change the state machine does not allow.
    #[error(transparent)]
    Transition(#[from] IllegalTransition),
    /// A resolution asked for while a caller or a sweeper holds the intent's lease: it is
    /// being executed, re-sent or looked up right now, and what that attempt learns must not
    /// be overwritten. Nothing was written; the lease ends by `expires_ms` at the latest.
    #[error(
        "intent {id} is leased to {owner} until {expires_ms} (ms since the Unix epoch); nothing was changed"
    )]
    LeaseHeld {
        id: IntentId,
        owner: String,
        expires_ms: i64,
    },
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for LedgerError {
    fn from(error: rusqlite::Error) -> LedgerError {
        match io_failure(&error) {
            Some(what) => LedgerError::Storage(format!("{error}: {what}")),
            None => LedgerError::Storage(error.to_string()),
        }
    }
}

/// What the operating system refused, for SQLite's I/O errors, whose message alone ("disk
/// I/O error") does not say whether a read, a write or a sync failed, nor where to look.
#[cfg(feature = "sqlite")]
fn io_failure(error: &rusqlite::Error) -> Option<&'static str> {
    use rusqlite::ffi;
    let rusqlite::Error::SqliteFailure(failure, _) = error else {
        return None;
    };
    match failure.extended_code {
        ffi::SQLITE_IOERR_FSYNC | ffi::SQLITE_IOERR_DIR_FSYNC => Some(
            "the ledger's file could not be synced to disk (fsync failed, SQLITE_IOERR_FSYNC); \
             what was being committed is not recorded; check the disk and the kernel log \
             (dmesg)",
        ),
        ffi::SQLITE_IOERR_WRITE => Some(
            "writing the ledger's file failed (SQLITE_IOERR_WRITE); check the disk and the \
             kernel log (dmesg)",
        ),
        ffi::SQLITE_IOERR_READ | ffi::SQLITE_IOERR_SHORT_READ => Some(
            "reading the ledger's file failed (SQLITE_IOERR_READ); check the disk and the \
             kernel log (dmesg)",
        ),
        _ => None,
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::LedgerError;
    use rusqlite::ffi;

    #[test]
    fn a_failed_fsync_is_named_as_such_with_where_to_look() {
        let failed = rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_IOERR_FSYNC), None);
        let message = LedgerError::from(failed).to_string();
        assert!(message.contains("disk I/O error"), "{message}");
        assert!(message.contains("fsync failed"), "{message}");
        assert!(message.contains("dmesg"), "{message}");
    }

    #[test]
    fn an_error_that_is_not_about_io_keeps_sqlites_message_alone() {
        let busy = rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_BUSY), None);
        let sqlites = busy.to_string();
        assert!(sqlites.contains("database is locked"), "{sqlites}");
        assert_eq!(
            LedgerError::from(busy).to_string(),
            format!("ledger storage error: {sqlites}")
        );
    }
}

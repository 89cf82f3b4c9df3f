//! A SQLite ledger in a temporary folder that lives as long as the value, relaxed durability:
//! a test needs the real store, not its fsyncs.

use std::path::PathBuf;
use std::sync::Arc;

use intentgate_ledger::{Durability, SqliteLedger, SqliteOptions};

pub struct TempLedger {
    /// The folder holding the file; deleted when dropped, so it is kept beside the ledger.
    pub dir: tempfile::TempDir,
    /// The ledger's file, for tests that open it again or read it with SQLite.
    pub path: PathBuf,
    pub ledger: Arc<SqliteLedger>,
}

impl TempLedger {
    /// A ledger with its writer thread, as a gateway runs it.
    pub fn new() -> TempLedger {
        TempLedger::with_options(SqliteOptions {
            durability: Durability::Relaxed,
            inline: false,
        })
    }

    /// A ledger that writes on the calling thread: deterministic, and usable under tokio's
    /// paused clock.
    pub fn inline() -> TempLedger {
        TempLedger::with_options(SqliteOptions::inline(Durability::Relaxed))
    }

    pub fn with_options(options: SqliteOptions) -> TempLedger {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let ledger = Arc::new(SqliteLedger::open(&path, options).unwrap());
        TempLedger { dir, path, ledger }
    }
}

impl Default for TempLedger {
    fn default() -> TempLedger {
        TempLedger::new()
    }
}

//! The SQLite schema, as embedded, append-only migrations.
//!
//! Never edit a migration that has shipped: add a new one. Every text column has a length
//! check matching `intentgate_core::limits`, so no input can grow a row without bound even
//! if a caller skips the checks in Rust.

use rusqlite::{Connection, params};

use crate::{LedgerError, migrations};

/// Migrations in order; the ledger records the highest applied in `schema_migrations`.
const MIGRATIONS: &[&str] = &[
    // 1: intents, the event log and tool flags.
    r#"
    CREATE TABLE intents (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        intent_key TEXT NOT NULL CHECK (length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (length(fingerprint) = 64),
        arguments TEXT NOT NULL CHECK (length(arguments) <= 65536),
        status TEXT NOT NULL CHECK (status IN
            ('pending', 'in_flight', 'done', 'rejected', 'not_executed', 'unknown')),
        attempt INTEGER NOT NULL CHECK (attempt >= 0),
        epoch INTEGER NOT NULL CHECK (epoch >= 1),
        lease_owner TEXT CHECK (length(lease_owner) <= 128),
        lease_expires_ms INTEGER,
        result TEXT CHECK (length(result) <= 65536),
        external_id TEXT CHECK (length(external_id) <= 256),
        resolved_by TEXT CHECK (length(resolved_by) <= 256),
        call_count INTEGER NOT NULL CHECK (call_count >= 0),
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        last_lookup_ms INTEGER,
        UNIQUE (tenant, tool, intent_key)
    ) STRICT;
    CREATE INDEX intents_by_status ON intents (status, updated_ms);
    CREATE INDEX intents_by_last_seen ON intents (last_seen_ms);

    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        intent_id INTEGER,
        tenant TEXT NOT NULL CHECK (length(tenant) <= 128),
        tool TEXT NOT NULL CHECK (length(tool) <= 128),
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (length(kind) <= 32),
        from_status TEXT CHECK (length(from_status) <= 16),
        to_status TEXT CHECK (length(to_status) <= 16),
        attempt INTEGER,
        actor TEXT CHECK (length(actor) <= 256),
        detail TEXT CHECK (length(detail) <= 4096)
    ) STRICT;
    CREATE INDEX events_by_intent ON events (intent_id, id);
    CREATE TRIGGER events_append_only BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;

    CREATE TABLE tool_flags (
        tool TEXT PRIMARY KEY CHECK (length(tool) BETWEEN 1 AND 128),
        enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
        reason TEXT NOT NULL CHECK (length(reason) <= 4096),
        actor TEXT NOT NULL CHECK (length(actor) <= 256),
        updated_ms INTEGER NOT NULL
    ) STRICT;
    "#,
    // 2: filtered paging over intents, status counts, reconciliation runs and mismatches.
    //
    // Paging one tool's intents in id order walks intents_by_tool (the id is the rowid, so
    // the index is ordered by it; first_seen_ms lets the window be checked without the row).
    // intents_by_tool_first_seen (tool, first_seen_ms, rowid) gives a window's least and
    // greatest id without the rows; intents_by_tool_key finds a key across tenants, in id
    // order; intents_by_tool_status counts without the rows. The intent's tool, key, id and
    // first-seen time never change, so only the status index moves on a write.
    r#"
    CREATE INDEX intents_by_tool ON intents (tool, id, first_seen_ms);
    CREATE INDEX intents_by_tool_first_seen ON intents (tool, first_seen_ms);
    CREATE INDEX intents_by_tool_key ON intents (tool, intent_key);
    CREATE INDEX intents_by_tool_status ON intents (tool, status);

    -- AUTOINCREMENT: a run's id is never reused, also once the latest runs are purged.
    CREATE TABLE reconciliation_runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_ms INTEGER NOT NULL,
        finished_ms INTEGER NOT NULL,
        since_ms INTEGER NOT NULL,
        until_ms INTEGER NOT NULL,
        actor TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 256),
        intents_checked INTEGER NOT NULL CHECK (intents_checked >= 0),
        records_checked INTEGER NOT NULL CHECK (records_checked >= 0),
        mismatches INTEGER NOT NULL CHECK (mismatches >= 0),
        critical INTEGER NOT NULL CHECK (critical >= 0),
        summary TEXT NOT NULL CHECK (length(summary) <= 65536)
    ) STRICT;
    CREATE INDEX reconciliation_runs_by_finished ON reconciliation_runs (finished_ms);

    -- Kept in the order stored (position), clustered by run. The single writer deletes a
    -- run's mismatches with the run, in one transaction.
    CREATE TABLE reconciliation_mismatches (
        run_id INTEGER NOT NULL,
        position INTEGER NOT NULL CHECK (position >= 0),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        kind TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 32),
        severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
        intent_id INTEGER,
        tenant TEXT CHECK (length(tenant) <= 128),
        intent_key TEXT CHECK (length(intent_key) <= 512),
        external_ids TEXT NOT NULL CHECK (length(external_ids) <= 16384),
        subject TEXT CHECK (length(subject) <= 256),
        detail TEXT NOT NULL CHECK (length(detail) <= 4096),
        PRIMARY KEY (run_id, position)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 3: the gateway processes that hold leases, registered and heartbeating, so that a
    // lease whose owner is gone is taken over at once (`process.rs`). `ended` is null while
    // the process runs; the purge keeps the latest ended ones (processes_by_ended).
    r#"
    CREATE TABLE processes (
        instance TEXT PRIMARY KEY CHECK (length(instance) BETWEEN 1 AND 64),
        host TEXT NOT NULL CHECK (length(host) <= 255),
        pid_scope TEXT NOT NULL CHECK (length(pid_scope) <= 128),
        pid INTEGER NOT NULL CHECK (pid BETWEEN 0 AND 4294967295),
        started_ms INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        silent_after_ms INTEGER NOT NULL CHECK (silent_after_ms > 0),
        ended TEXT CHECK (ended IN ('stopped', 'dead')),
        ended_ms INTEGER,
        CHECK ((ended IS NULL) = (ended_ms IS NULL))
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX processes_by_ended ON processes (ended_ms) WHERE ended_ms IS NOT NULL;
    "#,
    // 4: the W3C traceparent of the span that executed each intent's latest attempt, kept
    // only while traces are on, so a repeat's trace links to the call that executed it.
    r#"
    CREATE TABLE intent_traces (
        intent_id INTEGER PRIMARY KEY,
        traceparent TEXT NOT NULL CHECK (length(traceparent) = 55)
    ) STRICT;
    "#,
    // 5: the keys callers chose for their operations (the HTTP API's Idempotency-Key),
    // each bound to the intent its first call named (key and fingerprint), per tenant and
    // tool. A caller key is never an intent key: it tells a repeat of the operation from
    // another payload under the same key. It goes with its intent: caller_keys_by_intent
    // finds an intent's keys for an erasure, caller_keys_by_bound the old ones for a purge.
    r#"
    CREATE TABLE caller_keys (
        tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        caller_key TEXT NOT NULL CHECK (length(caller_key) BETWEEN 1 AND 512),
        intent_key TEXT NOT NULL CHECK (length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (length(fingerprint) = 64),
        bound_ms INTEGER NOT NULL,
        PRIMARY KEY (tenant, tool, caller_key)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX caller_keys_by_intent ON caller_keys (tenant, tool, intent_key);
    CREATE INDEX caller_keys_by_bound ON caller_keys (bound_ms);
    "#,
    // 6: why an intent's same-key re-sends stopped for good (the provider answers its key
    // the same way every time: a replayed stored 5xx, a key first used with other
    // parameters); null while they may go on. Only lookups move such an intent on.
    r#"
    ALTER TABLE intents ADD COLUMN resend_stopped TEXT
        CHECK (length(resend_stopped) BETWEEN 1 AND 32);
    "#,
    // 7: approval and budgets (docs/design.md section 13).
    //
    // approvals: one row per held intent, its latest request for approval (holding it again
    // replaces the row; the event log keeps every request and decision); `decision` is null
    // while open. The intent id is the rowid, so every index is ordered by it within its
    // columns: a page of a tenant's, a tool's or a state's approvals walks one of them newest
    // first without sorting (`query::approvals_query`), and the expiry sweep walks the open
    // ones (a null decision) by deadline. Deleted with their intent (purge, erase).
    //
    // budget_usage: what each budget counted per bucket and fixed window (intents, and units
    // of their amounts, saturating at the largest integer); the purge deletes ended windows
    // by budget_usage_by_window_end.
    r#"
    CREATE TABLE approvals (
        intent INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        requested_by TEXT NOT NULL CHECK (length(requested_by) <= 256),
        requested_ms INTEGER NOT NULL,
        deadline_ms INTEGER NOT NULL,
        held_by TEXT NOT NULL CHECK (length(held_by) <= 1024),
        intent_id TEXT CHECK (length(intent_id) <= 256),
        decision TEXT CHECK (decision IN ('approved', 'denied', 'expired')),
        decided_by TEXT CHECK (length(decided_by) BETWEEN 1 AND 256),
        decided_ms INTEGER,
        reason TEXT CHECK (length(reason) <= 4096),
        CHECK ((decision IS NULL) = (decided_ms IS NULL))
    ) STRICT;
    CREATE INDEX approvals_by_decision_deadline ON approvals (decision, deadline_ms);
    CREATE INDEX approvals_by_tenant ON approvals (tenant);
    CREATE INDEX approvals_by_tenant_decision ON approvals (tenant, decision);
    CREATE INDEX approvals_by_tool ON approvals (tool);
    CREATE INDEX approvals_by_tool_decision ON approvals (tool, decision);
    CREATE INDEX approvals_by_decision ON approvals (decision);

    CREATE TABLE budget_usage (
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        budget TEXT NOT NULL CHECK (length(budget) BETWEEN 1 AND 128),
        bucket TEXT NOT NULL CHECK (length(bucket) BETWEEN 1 AND 1024),
        window_start_ms INTEGER NOT NULL,
        window_end_ms INTEGER NOT NULL CHECK (window_end_ms > window_start_ms),
        count INTEGER NOT NULL CHECK (count >= 0),
        units INTEGER NOT NULL CHECK (units >= 0),
        PRIMARY KEY (tool, budget, bucket, window_start_ms)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX budget_usage_by_window_end ON budget_usage (window_end_ms);
    "#,
    // 8: the record a new intent's `begin` writes, and nothing else (docs/design.md
    // section 7: only the `in_flight` record must be on disk before the request leaves).
    //
    // A row of `intents` costs a page in each of its eight b-trees, and its events two more:
    // about ten WAL frames, all fsynced under strict durability before the request leaves.
    // A new intent is written here instead, in two small b-trees (the table, kept to the
    // intents begun and not yet moved, and its key): the intent's columns, the id it was
    // given (beyond every id of both tables) and the events of its creation, as a JSON
    // array. The writer moves it to `intents` and `events` later, in the transaction of
    // the next write of that intent (its finish, usually: a call that settles fast has its
    // wide row written once, already settled) or of a read of many intents, which moves
    // every one; opening the ledger moves what a crash left here. Readers of one intent
    // look here after `intents`.
    r#"
    CREATE TABLE intents_begun (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        intent_key TEXT NOT NULL CHECK (length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (length(fingerprint) = 64),
        arguments TEXT NOT NULL CHECK (length(arguments) <= 65536),
        status TEXT NOT NULL CHECK (status IN ('pending', 'in_flight')),
        attempt INTEGER NOT NULL CHECK (attempt >= 0),
        epoch INTEGER NOT NULL CHECK (epoch >= 1),
        lease_owner TEXT CHECK (length(lease_owner) <= 128),
        lease_expires_ms INTEGER,
        call_count INTEGER NOT NULL CHECK (call_count >= 0),
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        events TEXT NOT NULL CHECK (json_valid(events) AND length(events) <= 16384),
        UNIQUE (tenant, tool, intent_key)
    ) STRICT;
    "#,
    // 9: console sessions and the history of owners' notices, shared by every process on the
    // ledger (`crate::console`).
    //
    // console_sessions: one row per signed-in browser, keyed by the SHA-256 of its token
    // (never the token); ended ones are deleted when read, at the next sign-in and by the
    // purge (console_sessions_by_last_used finds the idlest when the table is full).
    //
    // alerts: the notices sent to tools' owners, oldest deleted past a cap; the purge deletes
    // by alerts_by_at, an erasure by alerts_by_tenant. AUTOINCREMENT: an id is never reused,
    // even when the purge empties the table.
    r#"
    CREATE TABLE console_sessions (
        token_digest TEXT PRIMARY KEY CHECK (length(token_digest) = 64),
        actor TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 256),
        csrf TEXT NOT NULL CHECK (length(csrf) BETWEEN 1 AND 128),
        approver_subject TEXT CHECK (length(approver_subject) BETWEEN 1 AND 256),
        approver_tenant TEXT CHECK (length(approver_tenant) BETWEEN 1 AND 128),
        credentials TEXT NOT NULL CHECK (length(credentials) = 64),
        created_ms INTEGER NOT NULL,
        last_used_ms INTEGER NOT NULL,
        idle_ms INTEGER NOT NULL CHECK (idle_ms > 0),
        expires_ms INTEGER NOT NULL CHECK (expires_ms > created_ms),
        CHECK ((approver_subject IS NULL) = (approver_tenant IS NULL))
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX console_sessions_by_last_used ON console_sessions (last_used_ms);

    CREATE TABLE alerts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
        tool TEXT NOT NULL CHECK (length(tool) <= 128),
        owner TEXT NOT NULL CHECK (length(owner) BETWEEN 1 AND 128),
        severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
        tenant TEXT CHECK (length(tenant) BETWEEN 1 AND 128),
        intent_key TEXT CHECK (length(intent_key) BETWEEN 1 AND 512),
        summary TEXT NOT NULL CHECK (length(summary) <= 4096),
        details TEXT NOT NULL CHECK (length(details) BETWEEN 1 AND 65536)
    ) STRICT;
    CREATE INDEX alerts_by_at ON alerts (at_ms);
    CREATE INDEX alerts_by_tenant ON alerts (tenant, tool, intent_key);
    "#,
    // 10: one index of the key instead of two. A key's place in an index is as good as
    // random, so each new intent dirtied a page of both `UNIQUE (tenant, tool, intent_key)`
    // and `intents_by_tool_key` (tool, intent_key) in its commit: of the 5.3 WAL frames a new
    // intent cost at 64 concurrent callers, 3.2 were those two indexes' (docs/internals.md,
    // "Where a new intent's frames go"). The key's unique index now starts with the tool
    // (`intents_by_key`, tool, intent_key, tenant), so it also finds a key across tenants;
    // erasing a tenant's intents walks `intents_by_tenant` (its rows in id order), which a
    // ledger's few tenants append to rather than scatter. A UNIQUE constraint can't be
    // dropped in SQLite: the table is made again with its rows (ids kept), and the unique
    // index built after the copy, from sorted entries.
    r#"
    CREATE TABLE intents_keyed (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
        intent_key TEXT NOT NULL CHECK (length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (length(fingerprint) = 64),
        arguments TEXT NOT NULL CHECK (length(arguments) <= 65536),
        status TEXT NOT NULL CHECK (status IN
            ('pending', 'in_flight', 'done', 'rejected', 'not_executed', 'unknown')),
        attempt INTEGER NOT NULL CHECK (attempt >= 0),
        epoch INTEGER NOT NULL CHECK (epoch >= 1),
        lease_owner TEXT CHECK (length(lease_owner) <= 128),
        lease_expires_ms INTEGER,
        result TEXT CHECK (length(result) <= 65536),
        external_id TEXT CHECK (length(external_id) <= 256),
        resolved_by TEXT CHECK (length(resolved_by) <= 256),
        call_count INTEGER NOT NULL CHECK (call_count >= 0),
        first_seen_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        last_lookup_ms INTEGER,
        resend_stopped TEXT CHECK (length(resend_stopped) BETWEEN 1 AND 32)
    ) STRICT;
    INSERT INTO intents_keyed (id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, first_seen_ms, last_seen_ms, updated_ms, last_lookup_ms, resend_stopped)
        SELECT id, tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, lease_owner, lease_expires_ms, result, external_id, resolved_by, call_count, first_seen_ms, last_seen_ms, updated_ms, last_lookup_ms, resend_stopped FROM intents;
    DROP TABLE intents;
    ALTER TABLE intents_keyed RENAME TO intents;
    CREATE UNIQUE INDEX intents_by_key ON intents (tool, intent_key, tenant);
    CREATE INDEX intents_by_tenant ON intents (tenant);
    CREATE INDEX intents_by_status ON intents (status, updated_ms);
    CREATE INDEX intents_by_last_seen ON intents (last_seen_ms);
    CREATE INDEX intents_by_tool ON intents (tool, id, first_seen_ms);
    CREATE INDEX intents_by_tool_first_seen ON intents (tool, first_seen_ms);
    CREATE INDEX intents_by_tool_status ON intents (tool, status);
    "#,
    // 11: `intents_by_status` holds the unsettled intents only. The sweeper and recovery
    // read it for intents `pending`, `in_flight` or `unknown` (`ops::stale`); nothing reads it
    // for a settled status (the purge walks `intents_by_last_seen`). A settled intent, most of
    // the ledger, now costs its row's insert no entry here: of the 14.8 WAL frames a new
    // intent wrote when made one at a time, 1.2 were this index's (bench/frames/frames.py).
    // A query uses a partial index only when its WHERE holds the index's condition as it is
    // written here (`query::UNSETTLED`).
    r#"
    DROP INDEX intents_by_status;
    CREATE INDEX intents_by_status ON intents (status, updated_ms)
        WHERE status IN ('pending', 'in_flight', 'unknown');
    "#,
];

/// The migration that made the process registry (`processes`): a process of a release
/// before it never registers.
const PROCESS_REGISTRY: i64 = 3;
/// The narrow begin: from this migration on a new intent's row is in `intents_begun` until
/// it is moved, and a release before it looks for a key in `intents` only. Such a process,
/// still running on a ledger migrated past it, would find no intent for a key a newer
/// process has begun and begin a second one (and send its request again).
const NARROW_BEGIN: i64 = 8;
/// Most processes a refused migration names.
const REFUSAL_NAMES_MAX: i64 = 5;

/// Refuses to migrate a ledger at `applied` past [`NARROW_BEGIN`] while a registered process
/// still runs on it (not ended, heartbeating within its silence): on a ledger that has not
/// reached that migration, every such process is of a release before it. Processes of
/// releases before [`PROCESS_REGISTRY`] can't be seen; nothing else is refused.
fn refuse_under_older_processes(
    transaction: &rusqlite::Transaction<'_>,
    applied: i64,
) -> Result<(), LedgerError> {
    if !(PROCESS_REGISTRY..NARROW_BEGIN).contains(&applied) {
        return Ok(());
    }
    let mut statement = transaction.prepare(
        "SELECT instance, pid, host FROM processes \
         WHERE ended IS NULL \
           AND CAST(unixepoch('subsec') * 1000 AS INTEGER) - heartbeat_ms <= silent_after_ms \
         ORDER BY started_ms LIMIT ?1",
    )?;
    let running: Vec<String> = statement
        .query_map(params![REFUSAL_NAMES_MAX], |row| {
            Ok(format!(
                "{} (pid {} on {})",
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, String>(2)?
            ))
        })?
        .collect::<Result<_, _>>()?;
    if running.is_empty() {
        return Ok(());
    }
    Err(LedgerError::MigrationRefused(format!(
        "the ledger has schema version {applied} and processes of an older intentgate still \
         run on it: {}; migrating it to version {NARROW_BEGIN} (a new intent's begin in its own \
         table) while they run would let them begin a second intent for a key this one has \
         begun: stop them (or wait until their heartbeats are older than their silence), then \
         start this intentgate again",
        running.join(", ")
    )))
}

/// Applies the migrations this file lacks ([`migrations::pending`]), in one transaction;
/// refuses the narrow begin's while older processes run on the ledger
/// ([`refuse_under_older_processes`]).
pub fn migrate(connection: &mut Connection) -> Result<(), LedgerError> {
    let transaction =
        connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    transaction.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL) STRICT;",
    )?;
    let applied: i64 = transaction.query_row(migrations::APPLIED, [], |row| row.get(0))?;
    refuse_under_older_processes(&transaction, applied)?;
    for (version, sql) in migrations::pending(MIGRATIONS, applied, "the ledger has schema")? {
        transaction.execute_batch(sql)?;
        transaction.execute(
            "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
            params![version],
        )?;
    }
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ledger at schema `version`, as a release that knew up to it left it.
    fn ledger_at(version: usize) -> Connection {
        let connection = Connection::open_in_memory().unwrap();
        connection
            .execute_batch(
                "CREATE TABLE schema_migrations (
                     version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL) STRICT;",
            )
            .unwrap();
        for (index, sql) in MIGRATIONS[..version].iter().enumerate() {
            connection.execute_batch(sql).unwrap();
            connection
                .execute(
                    "INSERT INTO schema_migrations (version, applied_ms) VALUES (?1, 0)",
                    params![index as i64 + 1],
                )
                .unwrap();
        }
        connection
    }

    /// Registers `instance` as a process whose last heartbeat was `silent_ms` ago, silent
    /// after 30 s, ended as `ended` when given.
    fn register(connection: &Connection, instance: &str, silent_ms: i64, ended: Option<&str>) {
        connection
            .execute(
                "INSERT INTO processes (instance, host, pid_scope, pid, started_ms, heartbeat_ms, \
                 silent_after_ms, ended, ended_ms) VALUES (?1, 'host-a', '', 4242, 0, \
                 CAST(unixepoch('subsec') * 1000 AS INTEGER) - ?2, 30000, ?3, \
                 CASE WHEN ?3 IS NULL THEN NULL ELSE 0 END)",
                params![instance, silent_ms, ended],
            )
            .unwrap();
    }

    fn applied(connection: &Connection) -> i64 {
        connection
            .query_row(migrations::APPLIED, [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn the_narrow_begin_is_not_migrated_to_while_an_older_process_runs_on_the_ledger() {
        let mut connection = ledger_at(7);
        register(&connection, "old-replica", 1_000, None);
        let Err(LedgerError::MigrationRefused(reason)) = migrate(&mut connection) else {
            panic!("the narrow begin was migrated to under a running older process");
        };
        assert!(
            reason.contains("old-replica (pid 4242 on host-a)") && reason.contains("version 7"),
            "the refusal does not name the process and the version: {reason}"
        );
        assert_eq!(
            applied(&connection),
            7,
            "a refused migration wrote something"
        );

        // Once it has stopped, the migration runs.
        connection
            .execute(
                "UPDATE processes SET ended = 'stopped', ended_ms = 1 WHERE instance = 'old-replica'",
                [],
            )
            .unwrap();
        migrate(&mut connection).unwrap();
        assert_eq!(applied(&connection), MIGRATIONS.len() as i64);
    }

    #[test]
    fn a_silent_or_ended_older_process_does_not_hold_the_migration_back() {
        let mut connection = ledger_at(7);
        register(&connection, "crashed", 60_000, None);
        register(&connection, "stopped", 0, Some("stopped"));
        migrate(&mut connection).unwrap();
        assert_eq!(applied(&connection), MIGRATIONS.len() as i64);
    }

    #[test]
    fn processes_on_a_ledger_past_the_narrow_begin_do_not_hold_later_migrations_back() {
        let mut connection = ledger_at(NARROW_BEGIN as usize);
        register(&connection, "replica-at-8", 1_000, None);
        migrate(&mut connection).unwrap();
        assert_eq!(applied(&connection), MIGRATIONS.len() as i64);
    }

    /// Migration 11 leaves `intents_by_status` holding the unsettled intents of a ledger made
    /// before it, and nothing settled, old or new.
    #[test]
    fn the_status_index_keeps_the_unsettled_intents_only() {
        let mut connection = ledger_at(10);
        let insert = |connection: &Connection, key: &str, status: &str| {
            connection
                .execute(
                    "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, \
                     status, attempt, epoch, call_count, first_seen_ms, last_seen_ms, updated_ms) \
                     VALUES ('acme', 'refund', ?1, printf('%064d', 0), '{}', ?2, 1, 1, 1, 1, 1, 1)",
                    params![key, status],
                )
                .unwrap();
        };
        for (key, status) in [
            ("a", "done"),
            ("b", "unknown"),
            ("c", "in_flight"),
            ("d", "rejected"),
        ] {
            insert(&connection, key, status);
        }
        migrate(&mut connection).unwrap();
        insert(&connection, "e", "not_executed");
        insert(&connection, "f", "pending");
        let indexed: Vec<String> = connection
            .prepare(
                "SELECT intent_key FROM intents INDEXED BY intents_by_status \
                 WHERE status IN ('pending', 'in_flight', 'unknown') ORDER BY intent_key",
            )
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(indexed, ["b", "c", "f"]);
        let definition: String = connection
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'intents_by_status'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert!(
            definition.ends_with("WHERE status IN ('pending', 'in_flight', 'unknown')"),
            "{definition}"
        );
    }
}

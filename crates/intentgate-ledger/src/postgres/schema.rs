//! The PostgreSQL schema, as embedded, append-only migrations.
//!
//! Never edit a migration that has shipped: add a new one. Every table lives in the
//! ledger's own schema (`PostgresOptions::schema`), which the connection's `search_path`
//! names, so the SQL here is unqualified. Every text column has a length check matching
//! `intentgate_core::limits` (in bytes, as the checks in Rust count), so no input can grow a
//! row without bound even if a caller skips the checks in Rust.
//!
//! Several replicas may start at once against one database: the migrations run in one
//! transaction under a transaction-level advisory lock keyed by the schema's name, so one
//! replica migrates and the others then find the work done.

use std::time::Duration;

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use super::Failure;
use crate::migrations;

/// Migrations in order; the ledger records the highest applied in `schema_migrations`.
const MIGRATIONS: &[&str] = &[
    // 1: intents, the event log and tool flags.
    r#"
    CREATE TABLE intents (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant TEXT NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (octet_length(tool) BETWEEN 1 AND 128),
        intent_key TEXT NOT NULL CHECK (octet_length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (octet_length(fingerprint) = 64),
        arguments TEXT NOT NULL CHECK (octet_length(arguments) <= 65536),
        status TEXT NOT NULL CHECK (status IN
            ('pending', 'in_flight', 'done', 'rejected', 'not_executed', 'unknown')),
        attempt BIGINT NOT NULL CHECK (attempt BETWEEN 0 AND 4294967295),
        epoch BIGINT NOT NULL CHECK (epoch BETWEEN 1 AND 4294967295),
        lease_owner TEXT CHECK (octet_length(lease_owner) <= 128),
        lease_expires_ms BIGINT,
        result TEXT CHECK (octet_length(result) <= 65536),
        external_id TEXT CHECK (octet_length(external_id) <= 256),
        resolved_by TEXT CHECK (octet_length(resolved_by) <= 256),
        call_count BIGINT NOT NULL CHECK (call_count >= 0),
        first_seen_ms BIGINT NOT NULL,
        last_seen_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        last_lookup_ms BIGINT,
        UNIQUE (tenant, tool, intent_key)
    );
    CREATE INDEX intents_by_status ON intents (status, updated_ms);
    CREATE INDEX intents_by_last_seen ON intents (last_seen_ms);

    CREATE TABLE events (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        intent_id BIGINT,
        tenant TEXT NOT NULL CHECK (octet_length(tenant) <= 128),
        tool TEXT NOT NULL CHECK (octet_length(tool) <= 128),
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL CHECK (octet_length(kind) <= 32),
        from_status TEXT CHECK (octet_length(from_status) <= 16),
        to_status TEXT CHECK (octet_length(to_status) <= 16),
        attempt BIGINT CHECK (attempt BETWEEN 0 AND 4294967295),
        actor TEXT CHECK (octet_length(actor) <= 256),
        detail TEXT CHECK (octet_length(detail) <= 4096)
    );
    CREATE INDEX events_by_intent ON events (intent_id, id);
    CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the event log is append-only';
    END
    $$;
    CREATE TRIGGER events_append_only BEFORE UPDATE ON events
        FOR EACH ROW EXECUTE FUNCTION events_append_only();

    CREATE TABLE tool_flags (
        tool TEXT PRIMARY KEY CHECK (octet_length(tool) BETWEEN 1 AND 128),
        enabled BOOLEAN NOT NULL,
        reason TEXT NOT NULL CHECK (octet_length(reason) <= 4096),
        actor TEXT NOT NULL CHECK (octet_length(actor) <= 256),
        updated_ms BIGINT NOT NULL
    );
    "#,
    // 2: filtered paging over intents, status counts, reconciliation runs and mismatches.
    //
    // Paging one tool's intents in id order walks intents_by_tool; intents_by_tool_first_seen
    // gives a window's least and greatest id from the index alone; intents_by_tool_key finds
    // a key across tenants, in id order; intents_by_tool_status counts from the index. The
    // intent's tool, key, id and first-seen time never change, so only the status index
    // moves on a write.
    r#"
    CREATE INDEX intents_by_tool ON intents (tool, id, first_seen_ms);
    CREATE INDEX intents_by_tool_first_seen ON intents (tool, first_seen_ms, id);
    CREATE INDEX intents_by_tool_key ON intents (tool, intent_key, id);
    CREATE INDEX intents_by_tool_status ON intents (tool, status);

    CREATE TABLE reconciliation_runs (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        started_ms BIGINT NOT NULL,
        finished_ms BIGINT NOT NULL,
        since_ms BIGINT NOT NULL,
        until_ms BIGINT NOT NULL,
        actor TEXT NOT NULL CHECK (octet_length(actor) BETWEEN 1 AND 256),
        intents_checked BIGINT NOT NULL CHECK (intents_checked >= 0),
        records_checked BIGINT NOT NULL CHECK (records_checked >= 0),
        mismatches BIGINT NOT NULL CHECK (mismatches >= 0),
        critical BIGINT NOT NULL CHECK (critical >= 0),
        summary TEXT NOT NULL CHECK (octet_length(summary) <= 65536)
    );
    CREATE INDEX reconciliation_runs_by_finished ON reconciliation_runs (finished_ms);

    -- Kept in the order stored (position). Deleting a run deletes its mismatches in the
    -- same statement, so a purge never leaves mismatches of a run committed meanwhile.
    CREATE TABLE reconciliation_mismatches (
        run_id BIGINT NOT NULL REFERENCES reconciliation_runs (id) ON DELETE CASCADE,
        position BIGINT NOT NULL CHECK (position >= 0),
        tool TEXT NOT NULL CHECK (octet_length(tool) BETWEEN 1 AND 128),
        kind TEXT NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 32),
        severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
        intent_id BIGINT,
        tenant TEXT CHECK (octet_length(tenant) <= 128),
        intent_key TEXT CHECK (octet_length(intent_key) <= 512),
        external_ids TEXT NOT NULL CHECK (octet_length(external_ids) <= 16384),
        subject TEXT CHECK (octet_length(subject) <= 256),
        detail TEXT NOT NULL CHECK (octet_length(detail) <= 4096),
        PRIMARY KEY (run_id, position)
    );
    "#,
    // 3: the gateway processes that hold leases, registered and heartbeating, so that a
    // lease whose owner is gone is taken over at once (`process.rs`). `ended` is null while
    // the process runs; the purge keeps the latest ended ones (processes_by_ended).
    r#"
    CREATE TABLE processes (
        instance TEXT PRIMARY KEY CHECK (octet_length(instance) BETWEEN 1 AND 64),
        host TEXT NOT NULL CHECK (octet_length(host) <= 255),
        pid_scope TEXT NOT NULL CHECK (octet_length(pid_scope) <= 128),
        pid BIGINT NOT NULL CHECK (pid BETWEEN 0 AND 4294967295),
        started_ms BIGINT NOT NULL,
        heartbeat_ms BIGINT NOT NULL,
        silent_after_ms BIGINT NOT NULL CHECK (silent_after_ms > 0),
        ended TEXT CHECK (ended IN ('stopped', 'dead')),
        ended_ms BIGINT,
        CHECK ((ended IS NULL) = (ended_ms IS NULL))
    );
    CREATE INDEX processes_by_ended ON processes (ended_ms) WHERE ended_ms IS NOT NULL;
    "#,
    // 4: the W3C traceparent of the span that executed each intent's latest attempt, kept
    // only while traces are on, so a repeat's trace links to the call that executed it.
    r#"
    CREATE TABLE intent_traces (
        intent_id BIGINT PRIMARY KEY REFERENCES intents (id) ON DELETE CASCADE,
        traceparent TEXT NOT NULL CHECK (octet_length(traceparent) = 55)
    );
    "#,
    // 5: the keys callers chose for their operations (the HTTP API's Idempotency-Key),
    // each bound to the intent its first call named (key and fingerprint), per tenant and
    // tool. A caller key is never an intent key: it tells a repeat of the operation from
    // another payload under the same key. No foreign key: a key is bound before its intent's
    // first `begin` inserts the row. It goes with its intent: caller_keys_by_intent finds an
    // intent's keys for an erasure, caller_keys_by_bound the old ones for a purge.
    r#"
    CREATE TABLE caller_keys (
        tenant TEXT NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (octet_length(tool) BETWEEN 1 AND 128),
        caller_key TEXT NOT NULL CHECK (octet_length(caller_key) BETWEEN 1 AND 512),
        intent_key TEXT NOT NULL CHECK (octet_length(intent_key) BETWEEN 1 AND 512),
        fingerprint TEXT NOT NULL CHECK (octet_length(fingerprint) = 64),
        bound_ms BIGINT NOT NULL,
        PRIMARY KEY (tenant, tool, caller_key)
    );
    CREATE INDEX caller_keys_by_intent ON caller_keys (tenant, tool, intent_key);
    CREATE INDEX caller_keys_by_bound ON caller_keys (bound_ms);
    "#,
    // 6: why an intent's same-key re-sends stopped for good (the provider answers its key
    // the same way every time: a replayed stored 5xx, a key first used with other
    // parameters); null while they may go on. Only lookups move such an intent on. A
    // nullable column without a default: added without rewriting the table.
    r#"
    ALTER TABLE intents ADD COLUMN resend_stopped TEXT
        CHECK (octet_length(resend_stopped) BETWEEN 1 AND 32);
    "#,
    // 7: approval and budgets (docs/design.md section 13).
    //
    // approvals: one row per held intent, its latest request for approval (holding it again
    // replaces the row; the event log keeps every request and decision); `decision` is null
    // while open. It goes with its intent (ON DELETE CASCADE: purge, erase). A page of a
    // tenant's, a tool's or a state's approvals walks one of the indexes ending in the
    // intent id newest first, without sorting (`query::approvals_query`); the expiry sweep
    // walks the open ones (a null decision) by deadline.
    //
    // budget_usage: what each budget counted per bucket and fixed window (intents, and units
    // of their amounts, saturating at the largest bigint); the purge deletes ended windows
    // by budget_usage_by_window_end. Replicas deciding on one window take turns on it with a
    // transaction-level advisory lock (`ops.rs`), so no row is written to lock it.
    r#"
    CREATE TABLE approvals (
        intent BIGINT PRIMARY KEY REFERENCES intents (id) ON DELETE CASCADE,
        tenant TEXT NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 128),
        tool TEXT NOT NULL CHECK (octet_length(tool) BETWEEN 1 AND 128),
        requested_by TEXT NOT NULL CHECK (octet_length(requested_by) <= 256),
        requested_ms BIGINT NOT NULL,
        deadline_ms BIGINT NOT NULL,
        held_by TEXT NOT NULL CHECK (octet_length(held_by) <= 1024),
        intent_id TEXT CHECK (octet_length(intent_id) <= 256),
        decision TEXT CHECK (decision IN ('approved', 'denied', 'expired')),
        decided_by TEXT CHECK (octet_length(decided_by) BETWEEN 1 AND 256),
        decided_ms BIGINT,
        reason TEXT CHECK (octet_length(reason) <= 4096),
        CHECK ((decision IS NULL) = (decided_ms IS NULL))
    );
    CREATE INDEX approvals_by_decision_deadline ON approvals (decision, deadline_ms, intent);
    CREATE INDEX approvals_by_tenant ON approvals (tenant, intent);
    CREATE INDEX approvals_by_tenant_decision ON approvals (tenant, decision, intent);
    CREATE INDEX approvals_by_tool ON approvals (tool, intent);
    CREATE INDEX approvals_by_tool_decision ON approvals (tool, decision, intent);
    CREATE INDEX approvals_by_decision ON approvals (decision, intent);

    CREATE TABLE budget_usage (
        tool TEXT NOT NULL CHECK (octet_length(tool) BETWEEN 1 AND 128),
        budget TEXT NOT NULL CHECK (octet_length(budget) BETWEEN 1 AND 128),
        bucket TEXT NOT NULL CHECK (octet_length(bucket) BETWEEN 1 AND 1024),
        window_start_ms BIGINT NOT NULL,
        window_end_ms BIGINT NOT NULL CHECK (window_end_ms > window_start_ms),
        count BIGINT NOT NULL CHECK (count >= 0),
        units BIGINT NOT NULL CHECK (units >= 0),
        PRIMARY KEY (tool, budget, bucket, window_start_ms)
    );
    CREATE INDEX budget_usage_by_window_end ON budget_usage (window_end_ms);
    "#,
    // 8: console sessions and the history of owners' notices, shared by every replica
    // (`crate::console`). console_sessions: one row per signed-in browser, keyed by the
    // SHA-256 of its token (never the token); ended ones are deleted when read, at the next
    // sign-in and by the purge. alerts: the notices sent to tools' owners, oldest deleted
    // past a cap; the purge deletes by alerts_by_at, an erasure by alerts_by_tenant.
    r#"
    CREATE TABLE console_sessions (
        token_digest TEXT PRIMARY KEY CHECK (length(token_digest) = 64),
        actor TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 256),
        csrf TEXT NOT NULL CHECK (length(csrf) BETWEEN 1 AND 128),
        approver_subject TEXT CHECK (length(approver_subject) BETWEEN 1 AND 256),
        approver_tenant TEXT CHECK (length(approver_tenant) BETWEEN 1 AND 128),
        credentials TEXT NOT NULL CHECK (length(credentials) = 64),
        created_ms BIGINT NOT NULL,
        last_used_ms BIGINT NOT NULL,
        idle_ms BIGINT NOT NULL CHECK (idle_ms > 0),
        expires_ms BIGINT NOT NULL CHECK (expires_ms > created_ms),
        CHECK ((approver_subject IS NULL) = (approver_tenant IS NULL))
    );
    CREATE INDEX console_sessions_by_last_used ON console_sessions (last_used_ms);

    CREATE TABLE alerts (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 64),
        tool TEXT NOT NULL CHECK (length(tool) <= 128),
        owner TEXT NOT NULL CHECK (length(owner) BETWEEN 1 AND 128),
        severity TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
        tenant TEXT CHECK (length(tenant) BETWEEN 1 AND 128),
        intent_key TEXT CHECK (length(intent_key) BETWEEN 1 AND 512),
        summary TEXT NOT NULL CHECK (length(summary) <= 4096),
        details TEXT NOT NULL CHECK (length(details) BETWEEN 1 AND 65536)
    );
    CREATE INDEX alerts_by_at ON alerts (at_ms);
    CREATE INDEX alerts_by_tenant ON alerts (tenant, tool, intent_key);
    "#,
    // 9: what lets a replica answer repeats of settled intents from memory
    // (`listener.rs`): every change to a settled intent (done or rejected) other than a
    // repeat's count, and every deletion of one, notifies the channel `<schema>_settled`,
    // whichever process or statement makes it (an older intentgate, the CLI, SQL typed by
    // hand). The payload is empty, so a purge deleting many settled intents in one
    // transaction sends one notification (PostgreSQL delivers identical ones once). A new
    // column the answer to a repeat is built from belongs in the update trigger's condition.
    r#"
    CREATE FUNCTION intents_settled_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_settled', '');
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER intents_settled_updated AFTER UPDATE ON intents
        FOR EACH ROW WHEN (OLD.status IN ('done', 'rejected') AND (
            NEW.status IS DISTINCT FROM OLD.status
            OR NEW.result IS DISTINCT FROM OLD.result
            OR NEW.external_id IS DISTINCT FROM OLD.external_id
            OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
            OR NEW.arguments IS DISTINCT FROM OLD.arguments
            OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint
            OR NEW.intent_key IS DISTINCT FROM OLD.intent_key
            OR NEW.tenant IS DISTINCT FROM OLD.tenant
            OR NEW.tool IS DISTINCT FROM OLD.tool
            OR NEW.attempt IS DISTINCT FROM OLD.attempt
            OR NEW.epoch IS DISTINCT FROM OLD.epoch
            OR NEW.lease_owner IS DISTINCT FROM OLD.lease_owner
            OR NEW.lease_expires_ms IS DISTINCT FROM OLD.lease_expires_ms
            OR NEW.resend_stopped IS DISTINCT FROM OLD.resend_stopped))
        EXECUTE FUNCTION intents_settled_changed();
    CREATE TRIGGER intents_settled_deleted AFTER DELETE ON intents
        FOR EACH ROW WHEN (OLD.status IN ('done', 'rejected'))
        EXECUTE FUNCTION intents_settled_changed();
    CREATE TRIGGER intents_truncated AFTER TRUNCATE ON intents
        FOR EACH STATEMENT EXECUTE FUNCTION intents_settled_changed();
    "#,
    // 10: the key's unique index made again, after every other index of `intents`.
    //
    // The ledger's statements are prepared, and PostgreSQL plans a prepared statement once
    // for every key (its generic plan, from the sixth execution on a connection) with the
    // table as it is then. Before the table's first ANALYZE, a lookup by key finds every
    // index that starts with `tool` as cheap as the key's own, and of equally cheap indexes
    // the planner keeps the one made last: it was `intents_by_tool_status`, which reads every
    // intent of the tool on each lookup, and goes on doing so as the table grows, until an
    // ANALYZE makes the plan again. Made last, the key's index is the one kept (checked by
    // `a_key_lookup_is_planned_on_the_key_index_while_the_table_is_young`). Same columns,
    // so `ON CONFLICT (tenant, tool, intent_key)` finds it as it found the constraint, in
    // this release and in older ones.
    //
    // Older replicas may be writing meanwhile. The index's build would hold a lock that
    // stops their writes and then ask for the stronger one of the constraint's removal,
    // while a writer that has read `intents` in its transaction waits for the first and
    // holds what the second waits for: a deadlock. So the tables this migration and the
    // next change are locked first, once, in the order every writer takes them.
    r#"
    LOCK TABLE intents, events IN ACCESS EXCLUSIVE MODE;
    CREATE UNIQUE INDEX intents_by_key ON intents (tenant, tool, intent_key);
    ALTER TABLE intents DROP CONSTRAINT intents_tenant_tool_intent_key_key;
    "#,
    // 11: each table's column limits in one CHECK, a call of a function, instead of one CHECK
    // per column.
    //
    // PostgreSQL reads a table's CHECK constraints from their stored text again for every
    // statement that writes the table, and plans them: with fourteen on `intents` and eight
    // on `events`, about a quarter of the server's time per new intent went there (a
    // profile of `bench ledger`), and a bare insert into such a table ran at half the rate
    // of one without them (pgbench). One call's text is short, and the function's body is
    // compiled once per connection. The limits are the same ones, in bytes, and a null
    // passes as it did. The constraints are added `NOT VALID`: every row already passed the
    // checks they replace. Nothing else changes: a release before this one writes the same
    // columns, with the same types.
    r#"
    CREATE FUNCTION intent_bounded(tenant TEXT, tool TEXT, intent_key TEXT, fingerprint TEXT,
        arguments TEXT, status TEXT, attempt BIGINT, epoch BIGINT, lease_owner TEXT,
        result TEXT, external_id TEXT, resolved_by TEXT, call_count BIGINT,
        resend_stopped TEXT) RETURNS BOOLEAN LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RETURN octet_length(tenant) BETWEEN 1 AND 128
            AND octet_length(tool) BETWEEN 1 AND 128
            AND octet_length(intent_key) BETWEEN 1 AND 512
            AND octet_length(fingerprint) = 64
            AND octet_length(arguments) <= 65536
            AND status IN ('pending', 'in_flight', 'done', 'rejected', 'not_executed', 'unknown')
            AND attempt BETWEEN 0 AND 4294967295
            AND epoch BETWEEN 1 AND 4294967295
            AND (lease_owner IS NULL OR octet_length(lease_owner) <= 128)
            AND (result IS NULL OR octet_length(result) <= 65536)
            AND (external_id IS NULL OR octet_length(external_id) <= 256)
            AND (resolved_by IS NULL OR octet_length(resolved_by) <= 256)
            AND call_count >= 0
            AND (resend_stopped IS NULL OR octet_length(resend_stopped) BETWEEN 1 AND 32);
    END
    $$;
    CREATE FUNCTION event_bounded(tenant TEXT, tool TEXT, kind TEXT, from_status TEXT,
        to_status TEXT, attempt BIGINT, actor TEXT, detail TEXT)
        RETURNS BOOLEAN LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RETURN octet_length(tenant) <= 128
            AND octet_length(tool) <= 128
            AND octet_length(kind) <= 32
            AND (from_status IS NULL OR octet_length(from_status) <= 16)
            AND (to_status IS NULL OR octet_length(to_status) <= 16)
            AND (attempt IS NULL OR attempt BETWEEN 0 AND 4294967295)
            AND (actor IS NULL OR octet_length(actor) <= 256)
            AND (detail IS NULL OR octet_length(detail) <= 4096);
    END
    $$;
    ALTER TABLE intents
        ADD CONSTRAINT intents_bounded CHECK (intent_bounded(tenant, tool, intent_key,
            fingerprint, arguments, status, attempt, epoch, lease_owner, result, external_id,
            resolved_by, call_count, resend_stopped)) NOT VALID,
        DROP CONSTRAINT intents_tenant_check, DROP CONSTRAINT intents_tool_check,
        DROP CONSTRAINT intents_intent_key_check, DROP CONSTRAINT intents_fingerprint_check,
        DROP CONSTRAINT intents_arguments_check, DROP CONSTRAINT intents_status_check,
        DROP CONSTRAINT intents_attempt_check, DROP CONSTRAINT intents_epoch_check,
        DROP CONSTRAINT intents_lease_owner_check, DROP CONSTRAINT intents_result_check,
        DROP CONSTRAINT intents_external_id_check, DROP CONSTRAINT intents_resolved_by_check,
        DROP CONSTRAINT intents_call_count_check, DROP CONSTRAINT intents_resend_stopped_check;
    ALTER TABLE events
        ADD CONSTRAINT events_bounded CHECK (event_bounded(tenant, tool, kind, from_status,
            to_status, attempt, actor, detail)) NOT VALID,
        DROP CONSTRAINT events_tenant_check, DROP CONSTRAINT events_tool_check,
        DROP CONSTRAINT events_kind_check, DROP CONSTRAINT events_from_status_check,
        DROP CONSTRAINT events_to_status_check, DROP CONSTRAINT events_attempt_check,
        DROP CONSTRAINT events_actor_check, DROP CONSTRAINT events_detail_check;
    "#,
];

/// The first key of the migration's advisory lock ("ig" in ASCII), so that it does not
/// collide with another application's locks on the same database; the second key is a
/// hash of the schema's name.
pub(super) const MIGRATION_LOCK_CLASS: i32 = 0x6967;

/// Times a migration is tried when PostgreSQL ends it to break a deadlock.
const MIGRATE_ATTEMPTS: u32 = 5;

/// The pause before the second try; each further one waits as much longer.
const MIGRATE_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Creates the schema if absent and applies the migrations it lacks
/// ([`migrations::pending`]), in one transaction. `schema` has been checked to be a plain
/// identifier.
///
/// A migration takes locks on tables other replicas are writing (during a rolling upgrade
/// the replicas of the previous release still serve), and a replica's write may hold one of
/// them while it waits for another the migration holds. PostgreSQL breaks such a deadlock
/// by ending one of the two transactions; when it ends the migration's, nothing of it was
/// applied, and it is tried again, up to [`MIGRATE_ATTEMPTS`] times.
pub async fn migrate(client: &mut Client, schema: &str) -> Result<(), Failure> {
    let mut attempt = 1;
    loop {
        match migrate_once(client, schema).await {
            Err(Failure::Postgres(error))
                if attempt < MIGRATE_ATTEMPTS
                    && error.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) =>
            {
                tracing::warn!(
                    schema,
                    attempt,
                    "the ledger's migration was ended to break a deadlock with another \
                     session's write; trying it again"
                );
                tokio::time::sleep(MIGRATE_RETRY_PAUSE * attempt).await;
                attempt += 1;
            }
            done => return done,
        }
    }
}

async fn migrate_once(client: &mut Client, schema: &str) -> Result<(), Failure> {
    let transaction = client.transaction().await?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            &[&MIGRATION_LOCK_CLASS, &schema],
        )
        .await?;
    transaction
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
             SET LOCAL search_path TO \"{schema}\";
             CREATE TABLE IF NOT EXISTS schema_migrations (
                 version BIGINT PRIMARY KEY, applied_ms BIGINT NOT NULL);"
        ))
        .await?;
    let applied: i64 = transaction
        .query_one(migrations::APPLIED, &[])
        .await?
        .try_get(0)?;
    let whose_schema = format!("the ledger's schema `{schema}` has");
    for (version, sql) in migrations::pending(MIGRATIONS, applied, &whose_schema)? {
        transaction.batch_execute(sql).await?;
        transaction
            .execute(
                "INSERT INTO schema_migrations (version, applied_ms) \
                 VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)",
                &[&version],
            )
            .await?;
    }
    transaction.commit().await?;
    Ok(())
}

//! The PostgreSQL store: one database shared by every replica of the gateway.
//!
//! Every write is one transaction on a pooled connection ([`pool`]). A write on an intent
//! first locks its row (`SELECT ... FOR UPDATE`; a key seen for the first time is inserted
//! with `ON CONFLICT DO NOTHING` and then locked), so replicas that call `begin` for one key
//! at once take turns on the row and each decides from what the previous one committed:
//! exactly one of them gets the lease. The lease itself is a column with an expiry, as in
//! SQLite: no transaction is ever held open across the upstream call.
//!
//! The finish of an intent this ledger just began skips the locked read: it is decided from
//! the row as `begin` wrote it ([`known`]) and written by one statement guarded by the row's
//! version, in one round trip; a row changed meanwhile refuses the guard and the finish reads
//! and locks as any other write. Queued finishes are committed in groups, one transaction
//! and one round trip per group ([`grouped`]).
//!
//! Under [`Durability::Strict`] the `in_flight` write of `begin` commits with
//! `synchronous_commit = on` (flushed before it returns); the later writes of a call commit
//! with it off, since recovery of an `in_flight` intent goes through the lookup, and the
//! next durable commit flushes them too (the WAL is written in order). PostgreSQL groups
//! the flushes of concurrent commits by itself. [`Durability::Relaxed`] turns
//! `synchronous_commit` off for the whole session.
//!
//! A caller waiting on a lease held by another replica is woken by `LISTEN`/`NOTIFY`
//! ([`listener`]), and polls every [`WAIT_POLL`] in case a notification was missed. The
//! same listener hears the schema's triggers tell of settled intents changed or gone, by
//! any process, which is what lets the gate answer repeats from memory.
//!
//! All tables live in one schema ([`PostgresOptions::schema`], created if absent), named in
//! each connection's `search_path`, so that several ledgers (or test runs) can share a
//! database without seeing each other.

mod grouped;
mod known;
mod listener;
mod ops;
mod pool;
#[cfg(test)]
mod round_trips;
mod schema;
mod sessions;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use intentgate_core::IntentStatus;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::Config;

use self::grouped::{Entry, GROUP_MAX, Grouped};
use self::known::KnownIntents;
use self::listener::{Channels, SettledEpoch};
use self::ops::KnownFinish;
use self::pool::{CONNECT_TIMEOUT, Pool, Session, Target, describe};
use crate::Result;
use crate::location::redacted;
use crate::plan::{self, Plan};
use crate::queue::Writing;
use crate::queued::Queued;
use crate::queued_finish::queued_finish;
use crate::waiters::Waiters;
use crate::{
    Approval, ApprovalFilter, Begin, BeginRequest, Bound, BudgetUsageRow, CallerKey, Created,
    Decide, Decided, Durability, Erase, Erasure, Event, Finish, Finished, HeldIntent, IntentFilter,
    IntentId, IntentRecord, Ledger, LedgerError, Order, ProcessEnd, ProcessRecord,
    ProcessRegistration, QueuedFinish, ReconciliationRun, Renew, Renewed, Resolve, StatusCount,
    StoredMismatch, ToolFlag,
};

/// The schema a ledger uses unless told otherwise.
pub const SCHEMA_DEFAULT: &str = "intentgate";
/// Longest schema name. PostgreSQL identifiers end at 63 bytes, and the notification
/// channel is the schema's name plus a suffix.
pub const SCHEMA_NAME_LENGTH_MAX: usize = 48;
/// Connections a ledger opens at most, by default. Each operation holds one for a single
/// short transaction; 16 keep 64 concurrent callers busy, and ten replicas stay well under
/// PostgreSQL's default `max_connections` (100).
pub const POOL_SIZE_DEFAULT: usize = 16;
/// Most connections one ledger may be configured to open.
pub const POOL_SIZE_MAX: usize = 256;
/// Longest wait for a change before a waiting caller reads again, as in SQLite. Bounds the
/// cost of a missed notification.
pub const WAIT_POLL: Duration = crate::waiters::WAIT_POLL;
/// Longest time one operation may take, from taking a connection to the commit. Past it
/// the connection is closed (the server rolls back what was not committed).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Server-side bound on one statement, including a wait for a row another replica has
/// locked. Those locks are held for one short transaction, so this only fires when
/// something is badly wrong.
const STATEMENT_TIMEOUT_MS: u64 = 20_000;
/// Server-side bound on a transaction left idle (a client that hung mid-transaction would
/// otherwise hold its rows' locks, and stall every replica calling for those intents).
const IDLE_IN_TRANSACTION_TIMEOUT_MS: u64 = 20_000;
/// How long `connect` waits for the notification connection to start listening.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);

/// How to open a PostgreSQL ledger.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The schema that holds the ledger's tables; created if absent. Lowercase letters,
    /// digits and `_`, at most [`SCHEMA_NAME_LENGTH_MAX`] bytes.
    pub schema: String,
    /// Most connections open at once (1 to [`POOL_SIZE_MAX`]), besides the one that
    /// listens for notifications.
    pub pool_size: usize,
    pub durability: Durability,
    /// Longest wait for a change before a waiting caller reads again. Notifications
    /// normally wake it first; this bounds the cost of a missed one.
    pub wait_poll: Duration,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            schema: SCHEMA_DEFAULT.to_owned(),
            pool_size: POOL_SIZE_DEFAULT,
            durability: Durability::Strict,
            wait_poll: WAIT_POLL,
        }
    }
}

/// Why an operation failed, before it is told to the caller.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A ledger answer (not found, too large, an illegal transition, a corrupt row).
    Ledger(LedgerError),
    /// The client or the server failed.
    Postgres(tokio_postgres::Error),
}

impl From<LedgerError> for Failure {
    fn from(error: LedgerError) -> Failure {
        Failure::Ledger(error)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Failure {
        Failure::Postgres(error)
    }
}

impl From<intentgate_core::IllegalTransition> for Failure {
    fn from(error: intentgate_core::IllegalTransition) -> Failure {
        Failure::Ledger(error.into())
    }
}

/// The body of one operation, given its connection and its input: its reads, and what it
/// decided to write (nothing, for a read).
type Work<'a, T> = Pin<Box<dyn Future<Output = Result<Plan<T>, Failure>> + Send + 'a>>;

/// How an operation runs.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Outside any transaction.
    Read,
    /// In one transaction. `durable`: the commit must be flushed before it returns (under
    /// strict durability). `notify`: wake callers waiting on this intent, here and on every
    /// replica, once committed.
    Write {
        durable: bool,
        notify: Option<IntentId>,
    },
}

/// An operation that failed, and whether it failed while committing (when the connection
/// is lost then, whether the commit took effect is unknown).
struct Attempt {
    failure: Failure,
    committing: bool,
}

impl<E: Into<Failure>> From<E> for Attempt {
    fn from(error: E) -> Attempt {
        Attempt {
            failure: error.into(),
            committing: false,
        }
    }
}

/// The PostgreSQL [`Ledger`].
pub struct PostgresLedger {
    shared: Arc<Shared>,
    listener: JoinHandle<()>,
}

/// What a ledger's operations need, shared with the tasks that commit queued finishes.
pub struct Shared {
    pool: Pool,
    schema: String,
    /// The notification channel of this schema.
    channel: String,
    durability: Durability,
    wait_poll: Duration,
    waiters: Arc<Waiters>,
    /// What [`Ledger::settled_epoch`] answers ([`listener`]).
    settled: Arc<SettledEpoch>,
    /// Finishes queued by `finish_queued` and not yet committed, which reads wait for.
    queued: Arc<Queued>,
    /// The intents this ledger just began, as it wrote them, for their finish.
    known: KnownIntents,
    /// Queued finishes waiting for their group's commit.
    grouped: Grouped,
}

impl std::ops::Deref for PostgresLedger {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl PostgresLedger {
    /// Connects to the database at `url` (`postgres://user@host:port/database`), creates
    /// the schema if absent, applies any missing migrations and starts listening for
    /// changes. Errors name the host and port, never the password.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresLedger> {
        let (config, target) = connection_config(url, &options)?;
        let schema = options.schema;
        let first = open_schema(&config, &target, &schema).await?;
        let pool = Pool::new(config.clone(), options.pool_size);
        pool.put(first);

        let waiters = Arc::new(Waiters::default());
        let settled = Arc::new(SettledEpoch::default());
        let channels = Channels {
            changes: format!("{schema}_changes"),
            settled: format!("{schema}_settled"),
        };
        let channel = channels.changes.clone();
        let listener = listen(config, channels, &target, &waiters, &settled).await?;
        Ok(PostgresLedger {
            shared: Arc::new(Shared {
                pool,
                schema,
                channel,
                durability: options.durability,
                wait_poll: options.wait_poll,
                waiters,
                settled,
                queued: Arc::default(),
                known: KnownIntents::default(),
                grouped: Grouped::default(),
            }),
            listener,
        })
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The schema that holds this ledger's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Where this ledger lives, for messages: host, port, database and schema.
    pub fn location(&self) -> String {
        format!("{} (schema {})", self.pool.target, self.schema)
    }

    /// Drops the ledger's schema with every table and row in it, once the finishes queued
    /// so far have committed (which would fail on a dropped schema). For benchmarks and tests
    /// that made a schema of their own; the ledger can't be used afterwards.
    pub async fn destroy(&self) -> Result<()> {
        self.queued.drain().await;
        let statement = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema);
        let mut checkout = self.pool.checkout().await?;
        checkout
            .session()
            .client
            .batch_execute(&statement)
            .await
            .map_err(|error| self.server_error(&error))?;
        // Its prepared statements name tables that are gone: close it.
        drop(checkout);
        Ok(())
    }

    /// Reads one intent with `read`, after its queued finish when the intent read is one.
    /// What a `begin` answers; an intent it inserted and wrote nothing more to is
    /// remembered, so that its finish may skip the read ([`known`]).
    fn began(&self, begun: ops::Begun) -> Begin {
        if let (Begin::Execute(intent), Some(version)) = (&begun.outcome, begun.version) {
            self.known.remember(intent.clone(), version);
        }
        begun.outcome
    }

    async fn read_settled<I: Sync + ?Sized>(
        &self,
        input: &I,
        read: impl for<'a> Fn(&'a mut Session, &'a I) -> Work<'a, Option<IntentRecord>> + Send + Sync,
    ) -> Result<Option<IntentRecord>> {
        let closed = self.queued.closed();
        let found = self.run(Mode::Read, input, &read).await?;
        match &found {
            Some(intent) if self.queued.stale(intent, closed) => {
                self.queued.settle(intent.id).await;
                self.run(Mode::Read, input, &read).await
            }
            _ => Ok(found),
        }
    }
}

impl Shared {
    /// Stores an attempt's outcome (`Ledger::finish`), waking whoever waits on the intent.
    /// An intent this ledger just began, still as it wrote it, is finished in one round
    /// trip ([`known`]); any other is read and locked first.
    async fn finish(&self, finish: &Finish) -> Result<Finished> {
        if let Some(known) = self.known.take(finish.id) {
            let input = (&known, finish, self.channel.as_str());
            let finished = self
                .run(
                    write(false, Some(finish.id)),
                    &input,
                    |session, &(known, finish, channel)| {
                        Box::pin(ops::finish_known(session, known, finish, channel))
                    },
                )
                .await?;
            if let Some(finished) = finished {
                return Ok(finished);
            }
        }
        self.run(write(false, Some(finish.id)), finish, |session, finish| {
            Box::pin(ops::finish(session, finish))
        })
        .await
    }

    /// Commits queued finishes, group after group, until none waits ([`grouped`]).
    async fn write_queued(self: Arc<Shared>) {
        let mut writing = Writing::new(&self.grouped);
        while let Some(group) = writing.next_group(GROUP_MAX) {
            self.finish_group(group).await;
        }
    }

    /// Commits one group of queued finishes: those of intents known as this ledger wrote
    /// them in one transaction, one round trip; the rest (a row changed meanwhile, an
    /// intent not known, a statement refused) each alone, reading and locking its row.
    async fn finish_group(&self, group: Vec<Entry>) {
        let mut decided = Vec::with_capacity(group.len());
        let mut known = Vec::with_capacity(group.len());
        let mut alone = Vec::new();
        for entry in group {
            let finish = &entry.finish;
            let checked = plan::check_finish(finish).is_ok();
            match self
                .known
                .take(finish.id)
                .filter(|_| checked)
                .and_then(|intent| KnownFinish::decide(intent, finish))
            {
                Some(finish) => {
                    decided.push(finish);
                    known.push(entry);
                }
                None => alone.push(entry),
            }
        }
        if !decided.is_empty() {
            let input = (decided, self.channel.as_str());
            let written = self
                .run(write(false, None), &input, |session, (decided, channel)| {
                    Box::pin(ops::write_known(session, decided, channel))
                })
                .await;
            match written {
                Ok(Some(outcomes)) => {
                    for (entry, outcome) in known.into_iter().zip(outcomes) {
                        match outcome {
                            Some(finished) => {
                                self.waiters.notify(entry.finish.id);
                                entry.answer(Ok(finished));
                            }
                            None => alone.push(entry),
                        }
                    }
                }
                Ok(None) => alone.extend(known),
                // Lost while committing: whether the group committed is unknown.
                Err(error) => {
                    for entry in known {
                        entry.answer(Err(error.clone()));
                    }
                }
            }
        }
        join_all(alone.into_iter().map(|entry| async move {
            let finished = self.finish(&entry.finish).await;
            entry.answer(finished);
        }))
        .await;
    }

    /// Runs `work` on a pooled connection, in a transaction for writes. A connection found
    /// broken before the commit was sent is replaced and the operation run once more
    /// (nothing of it was committed); a lost commit is reported as such.
    async fn run<I, T>(
        &self,
        mode: Mode,
        input: &I,
        work: impl for<'a> Fn(&'a mut Session, &'a I) -> Work<'a, T> + Send + Sync,
    ) -> Result<T>
    where
        I: Sync + ?Sized,
        T: Send,
    {
        let mut reconnected = false;
        loop {
            let mut checkout = self.pool.checkout().await?;
            let attempt = self.attempt(checkout.session(), mode, input, &work);
            let Attempt {
                failure,
                committing,
            } = match tokio::time::timeout(OPERATION_TIMEOUT, attempt).await {
                Ok(Ok(value)) => {
                    checkout.release();
                    if let Mode::Write {
                        notify: Some(id), ..
                    } = mode
                    {
                        self.waiters.notify(id);
                    }
                    return Ok(value);
                }
                Ok(Err(attempt)) => attempt,
                // Dropping the checkout closes the connection: the server rolls back.
                Err(_) => {
                    return Err(LedgerError::Storage(format!(
                        "PostgreSQL at {} did not finish the operation within {} s; whether a \
                         commit took effect is unknown; check the server's load and locks \
                         (pg_stat_activity)",
                        self.pool.target,
                        OPERATION_TIMEOUT.as_secs()
                    )));
                }
            };
            match failure {
                Failure::Ledger(error) => {
                    if roll_back(checkout.session()).await {
                        checkout.release();
                    }
                    return Err(error);
                }
                Failure::Postgres(error) if is_connection_lost(&error, checkout.session()) => {
                    drop(checkout);
                    if !committing && !reconnected {
                        reconnected = true;
                        continue;
                    }
                    return Err(self.lost(&error, committing));
                }
                Failure::Postgres(error) => {
                    if roll_back(checkout.session()).await {
                        checkout.release();
                    }
                    return Err(self.server_error(&error));
                }
            }
        }
    }

    async fn attempt<I, T>(
        &self,
        session: &mut Session,
        mode: Mode,
        input: &I,
        work: &(impl for<'a> Fn(&'a mut Session, &'a I) -> Work<'a, T> + Send + Sync),
    ) -> Result<T, Attempt>
    where
        I: Sync + ?Sized,
        T: Send,
    {
        let Mode::Write { durable, notify } = mode else {
            let plan = work(session, input).await?;
            assert!(plan.writes.is_empty(), "a read writes nothing");
            return Ok(plan.outcome);
        };
        // Under strict durability only the writes that must precede the upstream call
        // wait for the flush; the others are flushed by the next durable commit.
        let begin = if durable || self.durability == Durability::Relaxed {
            "BEGIN"
        } else {
            "BEGIN; SET LOCAL synchronous_commit = off"
        };
        session.begin_with_next_statement(begin);
        let plan = work(session, input).await?;
        // The callers of this process are woken in any case (`run`); other replicas only
        // when someone may be waiting.
        let notify = notify
            .filter(|_| plan.watched)
            .map(|id| (self.channel.as_str(), id));
        ops::commit(session, &plan.writes, notify).await?;
        Ok(plan.outcome)
    }

    /// The error for a connection lost during an operation.
    fn lost(&self, error: &tokio_postgres::Error, committing: bool) -> LedgerError {
        let unknown = if committing {
            "whether the commit took effect is unknown (an in-flight intent is then resolved \
             by its lookup); "
        } else {
            "nothing was committed; "
        };
        LedgerError::Storage(format!(
            "lost the connection to PostgreSQL at {} ({}); {unknown}check that the server is up \
             and reachable (pg_isready -h {} -p {})",
            self.pool.target,
            describe(error),
            self.pool.target.host,
            self.pool.target.port
        ))
    }

    /// The error for a statement the server refused; nothing was committed.
    fn server_error(&self, error: &tokio_postgres::Error) -> LedgerError {
        let code = error.code().map(|code| code.code()).unwrap_or_default();
        let hint = match code {
            "57014" => {
                "a statement waited too long, most likely for a row another replica has \
                        locked; look for long transactions in pg_stat_activity"
            }
            "53300" => {
                "the server has no connection left; lower the pool size of the replicas \
                        or raise max_connections"
            }
            "42P01" | "3F000" => "the ledger's tables are missing: was its schema dropped?",
            "23514" => "a value broke a limit of the ledger's schema",
            "25P03" => "a transaction stayed idle too long; is this process starved of CPU?",
            _ => "check the server's log",
        };
        LedgerError::Storage(format!(
            "PostgreSQL at {} refused the operation (schema {}): {}; {hint}; nothing was committed",
            self.pool.target,
            self.schema,
            describe(error)
        ))
    }
}

impl Drop for PostgresLedger {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Ends the open transaction, if any. False when the connection can't be reused.
async fn roll_back(session: &mut Session) -> bool {
    if !session.in_transaction || session.begin_pending() {
        // Nothing was sent, or the server has ended the transaction.
        session.transaction_ended();
        return !session.client.is_closed();
    }
    match session.client.batch_execute("ROLLBACK").await {
        Ok(()) => {
            session.transaction_ended();
            true
        }
        Err(_) => false,
    }
}

/// The error of a ledger that could not be opened at `target`.
fn open_error(target: &Target, reason: String) -> LedgerError {
    LedgerError::Open {
        path: format!("PostgreSQL at {target}"),
        reason,
    }
}

/// The connection settings of `url` with the ledger's own: its schema as the search path,
/// the durability's `synchronous_commit`, the statement and idle timeouts, a connect
/// timeout and an application name where the URL gives none. Refuses a bad URL, schema
/// name or pool size.
fn connection_config(url: &str, options: &PostgresOptions) -> Result<(Config, Target)> {
    let mut config: Config = url.parse().map_err(|error| LedgerError::Open {
        path: redacted(url),
        reason: format!(
            "{}; write it as postgres://user@host:port/database",
            describe(&error)
        ),
    })?;
    let target = Target::of(&config);
    let schema = &options.schema;
    check_schema_name(schema).map_err(|reason| open_error(&target, reason))?;
    if !(1..=POOL_SIZE_MAX).contains(&options.pool_size) {
        return Err(open_error(
            &target,
            format!(
                "the pool size is {}; it must be 1 to {POOL_SIZE_MAX}",
                options.pool_size
            ),
        ));
    }
    let synchronous_commit = match options.durability {
        Durability::Strict => "on",
        Durability::Relaxed => "off",
    };
    // Session settings, sent with the startup message (no extra round trip).
    //
    // Sequential scans are off: on a table analyzed while small one is the cheapest plan of
    // a lookup by key, and a prepared statement's generic plan made then keeps it as the
    // table grows, reading every row on each call until the next ANALYZE. Every statement
    // of the ledger is meant to use an index (migration 10 of `schema.rs`, the plan tests);
    // where none serves, the planner still scans.
    let settings = format!(
        "-c search_path={schema} -c synchronous_commit={synchronous_commit} \
         -c statement_timeout={STATEMENT_TIMEOUT_MS} \
         -c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS} \
         -c enable_seqscan=off"
    );
    let settings = match config.get_options() {
        Some(given) if !given.trim().is_empty() => format!("{given} {settings}"),
        _ => settings,
    };
    config.options(settings);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        // Says which ledger a connection serves, in pg_stat_activity.
        config.application_name(format!("intentgate:{schema}"));
    }
    Ok((config, target))
}

/// The first connection, with the schema created and migrated on it: the pool's first.
async fn open_schema(config: &Config, target: &Target, schema: &str) -> Result<Session> {
    let unreachable = |reason: String| {
        open_error(
            target,
            format!(
                "{reason}; check that the server is running and reachable (pg_isready -h {} -p {})",
                target.host, target.port
            ),
        )
    };
    let mut first = tokio::time::timeout(2 * CONNECT_TIMEOUT, Session::connect(config))
        .await
        .map_err(|_| unreachable(format!("no answer in {} s", 2 * CONNECT_TIMEOUT.as_secs())))?
        .map_err(|error| unreachable(describe(&error)))?;
    schema::migrate(&mut first.client, schema)
        .await
        .map_err(|failure| match failure {
            Failure::Ledger(error) => error,
            Failure::Postgres(error) => open_error(
                target,
                format!(
                    "can't set up the schema `{schema}`: {}; check that the user may create \
                     schemas and tables in this database",
                    describe(&error)
                ),
            ),
        })?;
    Ok(first)
}

/// Starts the listener of `channels`, which wakes `waiters` and moves `settled`, and waits
/// until it listens.
async fn listen(
    config: Config,
    channels: Channels,
    target: &Target,
    waiters: &Arc<Waiters>,
    settled: &Arc<SettledEpoch>,
) -> Result<JoinHandle<()>> {
    let (listening, listened) = oneshot::channel();
    let channel = channels.changes.clone();
    let listener = listener::spawn(
        config,
        channels,
        target.clone(),
        waiters.clone(),
        settled.clone(),
        listening,
    );
    let listened = tokio::time::timeout(LISTEN_TIMEOUT, listened).await;
    let refused = match listened {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(reason))) => Some(reason),
        Ok(Err(_)) => Some("the listener stopped".to_owned()),
        Err(_) => Some(format!("no answer in {} s", LISTEN_TIMEOUT.as_secs())),
    };
    if let Some(reason) = refused {
        listener.abort();
        return Err(open_error(
            target,
            format!("can't listen for notifications on channel {channel}: {reason}"),
        ));
    }
    Ok(listener)
}

/// True when `error` means the connection is gone (closed, reset, or ended by the server),
/// rather than a statement refused on a live connection.
fn is_connection_lost(error: &tokio_postgres::Error, session: &Session) -> bool {
    if error.is_closed() || session.client.is_closed() {
        return true;
    }
    match error.as_db_error() {
        // FATAL ends the session; class 57P is an operator's shutdown or termination,
        // class 08 a connection exception.
        Some(database) => {
            let code = database.code().code();
            database.severity() == "FATAL"
                || database.severity() == "PANIC"
                || code.starts_with("57P")
                || code.starts_with("08")
        }
        // Not an answer from the server: an I/O error on the socket.
        None => std::error::Error::source(error)
            .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some()),
    }
}

/// Checks that a schema name is a plain lowercase identifier (it is written into SQL and
/// into the connection's settings).
fn check_schema_name(schema: &str) -> Result<(), String> {
    let plain = schema
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    let starts_well = schema
        .bytes()
        .next()
        .is_some_and(|byte| byte.is_ascii_lowercase() || byte == b'_');
    if !plain || !starts_well || schema.len() > SCHEMA_NAME_LENGTH_MAX {
        return Err(format!(
            "the schema name `{schema}` must be lowercase letters, digits and _, start with a \
             letter or _, and be at most {SCHEMA_NAME_LENGTH_MAX} bytes long"
        ));
    }
    if schema.starts_with("pg_") {
        return Err(format!(
            "the schema name `{schema}` starts with pg_, which PostgreSQL reserves"
        ));
    }
    Ok(())
}

/// A write's mode: `durable` commits are flushed before they return (strict durability);
/// `notify` wakes the callers waiting on that intent, on every replica.
fn write(durable: bool, notify: Option<IntentId>) -> Mode {
    Mode::Write { durable, notify }
}

#[async_trait]
impl Ledger for PostgresLedger {
    async fn begin(&self, request: BeginRequest) -> Result<Begin> {
        let begun = self
            .run(write(true, None), &request, |session, request| {
                Box::pin(ops::begin(session, request))
            })
            .await?;
        Ok(self.began(begun))
    }

    async fn create(&self, request: BeginRequest) -> Result<Created> {
        if request.policies.is_some() {
            return crate::read_then_begin(self, request).await;
        }
        let closed = self.queued.closed();
        let created = self
            .run(write(true, None), &request, |session, request| {
                Box::pin(ops::create(session, request))
            })
            .await?;
        match created {
            ops::Create::Begun(begun) => Ok(Created::Begun(self.began(begun))),
            // Found in flight while a finish of it queued here has not committed: read
            // again once it has, as `get` does.
            ops::Create::Found(intent) if self.queued.stale(&intent, closed) => {
                self.queued.settle(intent.id).await;
                crate::read_then_begin(self, request).await
            }
            ops::Create::Found(intent) => Ok(Created::Found(intent)),
        }
    }

    async fn creates_in_one_round_trip(&self) -> bool {
        true
    }

    async fn finish(&self, finish: Finish) -> Result<Finished> {
        self.shared.finish(&finish).await
    }

    async fn finish_queued(&self, finish: Finish) -> Result<QueuedFinish> {
        let ticket = self.queued.open(finish.id);
        let (answer, answered) = queued_finish();
        let entry = Entry {
            finish,
            answer,
            ticket,
        };
        // Committed with the other finishes queued meanwhile, by a task of its own: the
        // caller answers meanwhile.
        if self.grouped.push(entry) {
            tokio::spawn(self.shared.clone().write_queued());
        }
        Ok(answered)
    }

    async fn drain_queued(&self) {
        self.queued.drain().await;
    }

    async fn renew(&self, renew: Renew) -> Result<Renewed> {
        self.run(write(false, None), &renew, |session, renew| {
            Box::pin(ops::renew(session, renew))
        })
        .await
    }

    async fn record_calls(&self, calls: Vec<(IntentId, i64)>) -> Result<Vec<IntentId>> {
        self.run(write(false, None), &calls, |session, calls| {
            Box::pin(ops::record_calls(session, calls))
        })
        .await
    }

    async fn record_trace(&self, id: IntentId, traceparent: String) -> Result<()> {
        crate::check_traceparent(&traceparent)?;
        let input = (id, traceparent);
        self.run(write(false, None), &input, |session, (id, traceparent)| {
            Box::pin(ops::record_trace(session, *id, traceparent))
        })
        .await
    }

    async fn trace_of(&self, id: IntentId) -> Result<Option<String>> {
        self.run(Mode::Read, &id, |session, id| {
            Box::pin(async move { Ok(Plan::outcome(ops::trace_of(session, *id).await?)) })
        })
        .await
    }

    async fn bind_caller_key(&self, binding: &CallerKey) -> Result<Bound> {
        plan::check_caller_key(binding)?;
        // Not durable: the `begin` that follows it is, and its commit flushes this one too.
        self.run(write(false, None), binding, |session, binding| {
            Box::pin(ops::bind_caller_key(session, binding))
        })
        .await
    }

    async fn settled_epoch(&self) -> Option<u64> {
        // Another process's change arrives as a notification (`listener.rs`); this ledger's
        // own move the epoch once committed, below.
        self.settled.current()
    }

    async fn get(&self, tenant: &str, tool: &str, key: &str) -> Result<Option<IntentRecord>> {
        let input = (tenant, tool, key);
        self.read_settled(&input, |session, (tenant, tool, key)| {
            Box::pin(async move { Ok(Plan::outcome(ops::get(session, tenant, tool, key).await?)) })
        })
        .await
    }

    async fn get_by_id(&self, id: IntentId) -> Result<Option<IntentRecord>> {
        self.read_settled(&id, |session, &id| {
            Box::pin(async move { Ok(Plan::outcome(ops::get_by_id(session, id).await?)) })
        })
        .await
    }

    async fn stale(
        &self,
        status: IntentStatus,
        now_ms: i64,
        limit: u32,
        skip_tools: &[String],
    ) -> Result<Vec<IntentRecord>> {
        let input = (status, now_ms, limit, skip_tools);
        self.run(
            Mode::Read,
            &input,
            |session, &(status, now_ms, limit, skip_tools)| {
                Box::pin(async move {
                    Ok(Plan::outcome(
                        ops::stale(session, status, now_ms, limit, skip_tools).await?,
                    ))
                })
            },
        )
        .await
    }

    async fn list(&self, after_id: IntentId, limit: u32) -> Result<Vec<IntentRecord>> {
        self.queued.drain().await;
        self.run(
            Mode::Read,
            &(after_id, limit),
            |session, &(after_id, limit)| {
                Box::pin(
                    async move { Ok(Plan::outcome(ops::list(session, after_id, limit).await?)) },
                )
            },
        )
        .await
    }

    async fn events(&self, id: IntentId) -> Result<Vec<Event>> {
        self.queued.settle(id).await;
        self.run(Mode::Read, &id, |session, &id| {
            Box::pin(async move { Ok(Plan::outcome(ops::events(session, id).await?)) })
        })
        .await
    }

    async fn resolve(&self, resolve: Resolve) -> Result<IntentRecord> {
        // After a finish of the intent still queued, as the single writer orders SQLite's.
        self.queued.settle(resolve.id).await;
        let resolved = self
            .run(
                write(true, Some(resolve.id)),
                &resolve,
                |session, resolve| Box::pin(ops::resolve(session, resolve)),
            )
            .await;
        // At once here; the trigger's notification tells the other processes.
        self.settled.changed();
        resolved
    }

    async fn record_disabled_call(&self, tenant: &str, tool: &str, now_ms: i64) -> Result<()> {
        let input = (tenant, tool, now_ms);
        self.run(write(false, None), &input, |_, &(tenant, tool, now_ms)| {
            Box::pin(async move { ops::record_disabled_call(tenant, tool, now_ms) })
        })
        .await
    }

    async fn set_tool_flag(&self, flag: ToolFlag) -> Result<()> {
        self.run(write(true, None), &flag, |session, flag| {
            Box::pin(ops::set_tool_flag(session, flag))
        })
        .await
    }

    async fn tool_flags(&self) -> Result<Vec<ToolFlag>> {
        self.run(Mode::Read, &(), |session, ()| {
            Box::pin(async move { Ok(Plan::outcome(ops::tool_flags(session).await?)) })
        })
        .await
    }

    async fn decide(&self, decide: Decide) -> Result<Decided> {
        // A person's decision is durable before it is answered, and wakes the callers
        // waiting on the intent, on every replica.
        self.run(write(true, Some(decide.id)), &decide, |session, decide| {
            Box::pin(ops::decide(session, decide))
        })
        .await
    }

    async fn approval(&self, id: IntentId) -> Result<Option<Approval>> {
        self.run(Mode::Read, &id, |session, &id| {
            Box::pin(async move { Ok(Plan::outcome(ops::approval(session, id).await?)) })
        })
        .await
    }

    async fn approvals(
        &self,
        filter: &ApprovalFilter,
        before: Option<IntentId>,
        limit: u32,
    ) -> Result<Vec<HeldIntent>> {
        self.queued.drain().await;
        let input = (filter, before, limit);
        self.run(Mode::Read, &input, |session, &(filter, before, limit)| {
            Box::pin(async move {
                Ok(Plan::outcome(
                    ops::approvals(session, filter, before, limit).await?,
                ))
            })
        })
        .await
    }

    async fn expire_approvals(&self, now_ms: i64, limit: u32) -> Result<Vec<HeldIntent>> {
        let due = self
            .run(Mode::Read, &(now_ms, limit), |session, &(now_ms, limit)| {
                Box::pin(async move {
                    Ok(Plan::outcome(
                        ops::due_approvals(session, now_ms, limit).await?,
                    ))
                })
            })
            .await?;
        // One short transaction each, which locks only its intent, and wakes its waiters.
        let mut expired = Vec::with_capacity(due.len());
        for id in due {
            let held = self
                .run(
                    write(false, Some(id)),
                    &(id, now_ms),
                    |session, &(id, now_ms)| Box::pin(ops::expire_approval(session, id, now_ms)),
                )
                .await?;
            expired.extend(held);
        }
        Ok(expired)
    }

    async fn budget_usage(&self, tool: &str, now_ms: i64) -> Result<Vec<BudgetUsageRow>> {
        self.run(Mode::Read, &(tool, now_ms), |session, &(tool, now_ms)| {
            Box::pin(async move {
                Ok(Plan::outcome(
                    ops::budget_usage(session, tool, now_ms).await?,
                ))
            })
        })
        .await
    }

    async fn purge(&self, before_ms: i64) -> Result<u64> {
        self.queued.drain().await;
        let purged = self
            .run(write(false, None), &before_ms, |session, &before_ms| {
                Box::pin(async move {
                    let purged = ops::purge(session, before_ms).await?;
                    sessions::purge(session, before_ms).await?;
                    Ok(purged)
                })
            })
            .await;
        self.settled.changed();
        purged
    }

    async fn erase(&self, erase: &Erase) -> Result<Erasure> {
        self.queued.drain().await;
        let erasure = self
            .run(write(true, None), erase, |session, erase| {
                Box::pin(async move {
                    let erasure = ops::erase(session, erase).await?;
                    if let Erasure::Erased(_) = &erasure.outcome {
                        sessions::erase(session, erase).await?;
                    }
                    Ok(erasure)
                })
            })
            .await;
        self.settled.changed();
        erasure
    }

    async fn intents(
        &self,
        filter: &IntentFilter,
        order: Order,
        cursor: Option<IntentId>,
        limit: u32,
    ) -> Result<Vec<IntentRecord>> {
        self.queued.drain().await;
        let input = (filter, order, cursor, limit);
        self.run(
            Mode::Read,
            &input,
            |session, &(filter, order, cursor, limit)| {
                Box::pin(async move {
                    Ok(Plan::outcome(
                        ops::intents(session, filter, order, cursor, limit).await?,
                    ))
                })
            },
        )
        .await
    }

    async fn status_counts(&self) -> Result<Vec<StatusCount>> {
        self.queued.drain().await;
        self.run(Mode::Read, &(), |session, ()| {
            Box::pin(async move { Ok(Plan::outcome(ops::status_counts(session).await?)) })
        })
        .await
    }

    async fn record_reconciliation(
        &self,
        run: &ReconciliationRun,
        mismatches: &[StoredMismatch],
    ) -> Result<i64> {
        let stored = plan::reconciliation(run, mismatches)?;
        self.run(write(false, None), &stored, |session, (run, mismatches)| {
            Box::pin(ops::record_reconciliation(session, run, mismatches))
        })
        .await
    }

    async fn reconciliations(&self, limit: u32) -> Result<Vec<ReconciliationRun>> {
        self.run(Mode::Read, &limit, |session, &limit| {
            Box::pin(async move { Ok(Plan::outcome(ops::reconciliations(session, limit).await?)) })
        })
        .await
    }

    async fn reconciliation(&self, run_id: i64) -> Result<Option<ReconciliationRun>> {
        self.run(Mode::Read, &run_id, |session, &run_id| {
            Box::pin(async move { Ok(Plan::outcome(ops::reconciliation(session, run_id).await?)) })
        })
        .await
    }

    async fn reconciliation_mismatches(
        &self,
        run_id: i64,
        limit: u32,
    ) -> Result<Vec<StoredMismatch>> {
        self.run(Mode::Read, &(run_id, limit), |session, &(run_id, limit)| {
            Box::pin(async move {
                Ok(Plan::outcome(
                    ops::reconciliation_mismatches(session, run_id, limit).await?,
                ))
            })
        })
        .await
    }

    async fn register_process(&self, registration: ProcessRegistration) -> Result<ProcessRecord> {
        self.run(
            write(false, None),
            &registration,
            |session, registration| Box::pin(ops::register_process(session, registration)),
        )
        .await
    }

    async fn heartbeat_process(&self, instance: &str, now_ms: i64) -> Result<bool> {
        let input = (instance, now_ms);
        self.run(
            write(false, None),
            &input,
            |session, &(instance, now_ms)| {
                Box::pin(ops::heartbeat_process(session, instance, now_ms))
            },
        )
        .await
    }

    async fn end_process(&self, instance: &str, end: ProcessEnd, now_ms: i64) -> Result<bool> {
        let input = (instance, end, now_ms);
        self.run(
            write(false, None),
            &input,
            |session, &(instance, end, now_ms)| {
                Box::pin(ops::end_process(session, instance, end, now_ms))
            },
        )
        .await
    }

    async fn process(&self, instance: &str) -> Result<Option<ProcessRecord>> {
        self.run(Mode::Read, instance, |session, instance| {
            Box::pin(async move { Ok(Plan::outcome(ops::process(session, instance).await?)) })
        })
        .await
    }

    async fn create_console_session(&self, stored: &crate::ConsoleSession) -> Result<()> {
        crate::console::check_session(stored)?;
        self.run(write(true, None), stored, |session, stored| {
            Box::pin(sessions::create_session(session, stored))
        })
        .await
    }

    async fn console_session(
        &self,
        token_digest: &str,
        now_ms: i64,
    ) -> Result<Option<crate::ConsoleSession>> {
        crate::console::check_token_digest(token_digest)?;
        let input = (token_digest, now_ms);
        self.run(
            write(false, None),
            &input,
            |session, &(token_digest, now_ms)| {
                Box::pin(sessions::use_session(session, token_digest, now_ms))
            },
        )
        .await
    }

    async fn end_console_session(&self, token_digest: &str) -> Result<bool> {
        crate::console::check_token_digest(token_digest)?;
        self.run(write(true, None), token_digest, |session, token_digest| {
            Box::pin(sessions::end_session(session, token_digest))
        })
        .await
    }

    async fn record_alert(&self, alert: &crate::StoredAlert) -> Result<i64> {
        crate::console::check_alert(alert)?;
        self.run(write(false, None), alert, |session, alert| {
            Box::pin(sessions::record_alert(session, alert))
        })
        .await
    }

    async fn alerts(&self, limit: u32) -> Result<Vec<crate::StoredAlert>> {
        self.run(Mode::Read, &limit, |session, &limit| {
            Box::pin(async move { Ok(Plan::outcome(sessions::alerts(session, limit).await?)) })
        })
        .await
    }

    async fn wait_for_change(&self, id: IntentId, timeout: Duration) {
        self.waiters.wait(id, timeout.min(self.wait_poll)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for good in ["intentgate", "_x", "test_123_abc"] {
            assert_eq!(check_schema_name(good), Ok(()), "{good}");
        }
        let longest = "s".repeat(SCHEMA_NAME_LENGTH_MAX);
        assert_eq!(check_schema_name(&longest), Ok(()));
        let too_long = "s".repeat(SCHEMA_NAME_LENGTH_MAX + 1);
        for bad in [
            "",
            "Intentgate",
            "1abc",
            "a-b",
            "a b",
            "a\"b",
            "pg_temp",
            &too_long,
        ] {
            assert!(check_schema_name(bad).is_err(), "{bad}");
        }
    }
}

//! A small pool of PostgreSQL connections: at most `pool_size` open at once, behind a
//! semaphore, each with its own cache of prepared statements.
//!
//! Connections are opened on demand and kept for reuse. One that the server or the network
//! closed is dropped when it is next taken from the pool, or as soon as an operation on it
//! fails, and a new one is opened in its place. A connection is returned to the pool only
//! after an operation ended cleanly (committed or rolled back): one left mid-transaction by
//! an error or a cancelled caller is closed, which makes the server roll it back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use crate::LedgerError;

/// Longest wait for a free connection. Operations hold a connection for one short
/// transaction, so a longer wait means the pool is far too small or the server is stuck.
pub const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a new connection (TCP and the startup handshake), unless the URL sets
/// `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most prepared statements kept per connection. The store uses about thirty (a filtered
/// page of intents is not kept); the bound only guards against a bug that would prepare
/// without end.
const STATEMENTS_MAX: usize = 64;

/// Where the pool connects, for messages: host and port and database, never the user's
/// password.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub database: String,
}

impl Target {
    pub fn of(config: &Config) -> Target {
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
            None => "localhost".to_owned(),
        };
        Target {
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            database: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("postgres")
                .to_owned(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}/{}", self.host, self.port, self.database)
    }
}

/// One open connection and what the store keeps with it.
pub struct Session {
    pub client: Client,
    statements: HashMap<&'static str, Statement>,
    /// A transaction is open on this connection.
    pub in_transaction: bool,
    /// The statement that opens the transaction, sent together with the next statement
    /// (one round trip instead of two).
    pending_begin: Option<&'static str>,
}

impl Session {
    /// Opens a connection and spawns the task that drives it.
    pub async fn connect(config: &Config) -> Result<Session, tokio_postgres::Error> {
        let (client, connection) = config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %describe(&error), "a PostgreSQL ledger connection closed");
            }
        });
        Ok(Session {
            client,
            statements: HashMap::new(),
            in_transaction: false,
            pending_begin: None,
        })
    }

    /// Opens a transaction with `begin` (`BEGIN`, possibly followed by `SET LOCAL`s), sent
    /// with the next statement.
    pub fn begin_with_next_statement(&mut self, begin: &'static str) {
        self.pending_begin = Some(begin);
        self.in_transaction = true;
    }

    /// The pending `BEGIN`, for a caller that sends it itself (in a pipeline).
    pub fn take_pending_begin(&mut self) -> Option<&'static str> {
        self.pending_begin.take()
    }

    /// True when a `BEGIN` is waiting for the next statement: nothing was sent yet.
    pub fn begin_pending(&self) -> bool {
        self.pending_begin.is_some()
    }

    /// Forgets a transaction that was never sent, or that the server has ended.
    pub fn transaction_ended(&mut self) {
        self.pending_begin = None;
        self.in_transaction = false;
    }

    /// The prepared statement for `sql`, prepared on first use.
    pub async fn statement(
        &mut self,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        if self.statements.len() >= STATEMENTS_MAX {
            self.statements.clear();
        }
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    pub async fn query(
        &mut self,
        sql: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        let begin = self.pending_begin.take();
        after_begin(
            &self.client,
            begin,
            self.client.query(&statement, parameters),
        )
        .await
    }

    pub async fn query_opt(
        &mut self,
        sql: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        let begin = self.pending_begin.take();
        after_begin(
            &self.client,
            begin,
            self.client.query_opt(&statement, parameters),
        )
        .await
    }

    /// Runs `sql` without keeping its prepared statement: for statements built per call
    /// (a filter's conditions), whose shapes are too many to keep. The server plans each
    /// with the values of its parameters (an unnamed statement), at one more round trip.
    pub async fn query_unprepared(
        &mut self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let begin = self.pending_begin.take();
        after_begin(&self.client, begin, self.client.query(sql, parameters)).await
    }

    /// [`Session::query_unprepared`] for a statement that returns no rows; answers how many
    /// it changed.
    pub async fn execute_unprepared(
        &mut self,
        sql: &str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let begin = self.pending_begin.take();
        after_begin(&self.client, begin, self.client.execute(sql, parameters)).await
    }

    pub async fn execute(
        &mut self,
        sql: &'static str,
        parameters: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql).await?;
        let begin = self.pending_begin.take();
        after_begin(
            &self.client,
            begin,
            self.client.execute(&statement, parameters),
        )
        .await
    }
}

/// The pool.
pub struct Pool {
    config: Config,
    pub target: Target,
    idle: Mutex<Vec<Session>>,
    permits: Semaphore,
    size: usize,
}

impl Pool {
    pub fn new(config: Config, size: usize) -> Pool {
        Pool {
            target: Target::of(&config),
            config,
            idle: Mutex::new(Vec::with_capacity(size)),
            permits: Semaphore::new(size),
            size,
        }
    }

    /// Puts a connection opened elsewhere (the one that ran the migrations) in the pool.
    pub fn put(&self, session: Session) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < self.size
            && !session.client.is_closed()
            && !session.in_transaction
            && session.pending_begin.is_none()
        {
            idle.push(session);
        }
    }

    /// Takes a connection, opening one if none is idle. Waits at most [`CHECKOUT_TIMEOUT`].
    pub async fn checkout(&self) -> Result<Checkout<'_>, LedgerError> {
        let permit = tokio::time::timeout(CHECKOUT_TIMEOUT, self.permits.acquire())
            .await
            .map_err(|_| {
                LedgerError::Storage(format!(
                    "all {} connections to PostgreSQL at {} stayed busy for {} s; look for slow \
                     queries or held locks on the server (pg_stat_activity), or raise the pool size",
                    self.size,
                    self.target,
                    CHECKOUT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|_| LedgerError::Closed)?;
        let reused = loop {
            let Some(session) = self.idle.lock().expect("pool lock").pop() else {
                break None;
            };
            // Closed by the server (a restart, an idle timeout) while it waited here.
            if !session.client.is_closed() {
                break Some(session);
            }
        };
        let session = match reused {
            Some(session) => session,
            None => {
                let limit = connect_limit(&self.config);
                tokio::time::timeout(limit, Session::connect(&self.config))
                    .await
                    .map_err(|_| {
                        LedgerError::Storage(format!(
                            "PostgreSQL at {} did not complete a new connection within {} ms \
                             (no answer to the connection or to its startup); check that the \
                             server is up and that the network to it passes packets \
                             (pg_isready -h {} -p {})",
                            self.target,
                            limit.as_millis(),
                            self.target.host,
                            self.target.port
                        ))
                    })?
                    .map_err(|error| {
                        LedgerError::Storage(format!(
                            "can't connect to PostgreSQL at {}: {}; check that the server is \
                             running and reachable (pg_isready -h {} -p {})",
                            self.target,
                            describe(&error),
                            self.target.host,
                            self.target.port
                        ))
                    })?
            }
        };
        Ok(Checkout {
            pool: self,
            session: Some(session),
            _permit: permit,
            clean: false,
        })
    }
}

/// A connection taken from the pool. Dropped, it goes back to the pool only if it was
/// marked clean (see [`Checkout::release`]); otherwise it is closed.
pub struct Checkout<'a> {
    pool: &'a Pool,
    session: Option<Session>,
    _permit: SemaphorePermit<'a>,
    clean: bool,
}

impl Checkout<'_> {
    pub fn session(&mut self) -> &mut Session {
        self.session.as_mut().expect("a checkout holds its session")
    }

    /// The operation ended cleanly: the connection may serve the next one.
    pub fn release(mut self) {
        self.clean = true;
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && self.clean
        {
            self.pool.put(session);
        }
    }
}

/// Longest wait for a new connection: the TCP connect, which `connect_timeout` bounds, and
/// then the startup handshake, which it does not. Without this bound a server that accepted
/// the connection and then went silent (a network partition, a hung server) held the
/// caller, and its permit of the pool, for as long as the silence lasted.
fn connect_limit(config: &Config) -> Duration {
    2 * config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT)
}

/// Runs `statement`, after `begin` if there is one, in one round trip.
async fn after_begin<T>(
    client: &Client,
    begin: Option<&'static str>,
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let Some(begin) = begin else {
        return statement.await;
    };
    // Polled in this order, so BEGIN is sent first.
    let (begun, result) = tokio::join!(client.batch_execute(begin), statement);
    begun?;
    result
}

/// An error of the PostgreSQL client with its causes, which its `Display` leaves out.
pub fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(database) = error.as_db_error() {
        return format!(
            "{}: {} (SQLSTATE {})",
            database.severity(),
            database.message(),
            database.code().code()
        );
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a new connection to a server that completes the TCP connect and then
    /// never answers (a partition that began after the connect, a hung server) waited for
    /// as long as the silence lasted, since `connect_timeout` only bounds the TCP connect;
    /// a call on a gateway cut off from its database hung with it. It now fails within
    /// twice the connect timeout.
    #[tokio::test]
    async fn a_new_connection_to_a_silent_server_fails_within_its_limit() {
        // The kernel completes connections to a listening socket nobody accepts from, and
        // nothing is ever sent back.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let mut config: Config = format!("postgres://postgres@127.0.0.1:{port}/test")
            .parse()
            .unwrap();
        config.connect_timeout(Duration::from_millis(100));
        let pool = Pool::new(config, 1);
        let checkout = tokio::time::timeout(Duration::from_secs(10), pool.checkout())
            .await
            .expect("the checkout ends by itself");
        let Err(LedgerError::Storage(message)) = checkout else {
            panic!("a silent server gives no connection");
        };
        assert!(
            message.contains("did not complete a new connection within 200 ms"),
            "{message}"
        );
        drop(silent);
    }
}

//! Wake-ups across replicas: one dedicated connection per ledger `LISTEN`s on the schema's
//! channels. Every transaction that settles or releases an intent `pg_notify`s its id on
//! `<schema>_changes` (delivered at commit, never for a rollback); the listener wakes the
//! local [`Waiters`] of that id, so a caller waiting on a lease held by another replica
//! reads the intent again at once instead of at its next poll.
//!
//! The same connection hears `<schema>_settled`, which the schema's triggers notify when a
//! settled intent changes or goes (migration 9 in `schema.rs`), from any process: each one
//! moves the [`SettledEpoch`], under which the gate keeps the settled intents it answers
//! repeats from, so an erasure, purge or resolution elsewhere reaches this replica with
//! the notification.
//!
//! A notification can still be missed (while the listener reconnects); waits stay short, so
//! that costs one poll interval, never a wrong answer. After every reconnect the listener
//! wakes every waiter, since what it missed is unknown, and while it is not listening the
//! settled epoch is unknown too, so every repeat reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Config, NoTls};

use super::pool::{Target, describe};
use crate::waiters::Waiters;

/// First wait before the listener reconnects; doubles after each failure.
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);
/// Longest wait between two reconnection attempts, so a restarted server is found soon.
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(10);

/// The epoch of [`Ledger::settled_epoch`](crate::Ledger::settled_epoch) on PostgreSQL:
/// moved by each notification on the settled channel, by this ledger's own erasures, purges
/// and resolutions once committed, and whenever the listener stops or starts listening.
///
/// One number holds both the epoch and whether it can be trusted: it moves in steps of
/// two, and is odd while the listener is not listening (a change may then go unheard).
#[derive(Debug)]
pub struct SettledEpoch(AtomicU64);

impl Default for SettledEpoch {
    /// Not listening yet.
    fn default() -> SettledEpoch {
        SettledEpoch(AtomicU64::new(1))
    }
}

impl SettledEpoch {
    /// The epoch now; `None` while the listener is not listening.
    pub fn current(&self) -> Option<u64> {
        let value = self.0.load(Ordering::SeqCst);
        value.is_multiple_of(2).then_some(value)
    }

    /// A settled intent may have changed or gone.
    pub fn changed(&self) {
        self.0.fetch_add(2, Ordering::SeqCst);
    }

    /// The listener listens on the settled channel again: what it missed is unknown, so
    /// this is a new epoch (odd to even).
    fn heard(&self) {
        let value = self.0.load(Ordering::SeqCst);
        if !value.is_multiple_of(2) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The listener stopped listening (even to odd, and a new number).
    fn deaf(&self) {
        let value = self.0.load(Ordering::SeqCst);
        if value.is_multiple_of(2) {
            self.0.fetch_add(3, Ordering::SeqCst);
        }
    }
}

/// The channels one listener hears.
#[derive(Clone)]
pub struct Channels {
    /// Ids of intents settled or released, for waiters.
    pub changes: String,
    /// Settled intents changed or gone, for the settled epoch.
    pub settled: String,
}

/// Starts the listener. `listening` is answered once the first `LISTEN` has succeeded or
/// failed.
pub fn spawn(
    config: Config,
    channels: Channels,
    target: Target,
    waiters: Arc<Waiters>,
    settled: Arc<SettledEpoch>,
    listening: oneshot::Sender<Result<(), String>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut listening = Some(listening);
        let mut delay = RECONNECT_DELAY_MIN;
        loop {
            let outcome = listen(&config, &channels, &waiters, &settled, &mut listening).await;
            settled.deaf();
            if let Some(listening) = listening.take() {
                // The first connection failed: `connect` reports it and drops the ledger.
                let _ = listening.send(outcome.map_err(|error| describe(&error)));
                return;
            }
            match outcome {
                Ok(()) => {
                    tracing::warn!(target = %target, "the PostgreSQL ledger's notification connection closed; reconnecting");
                    delay = RECONNECT_DELAY_MIN;
                }
                Err(error) => tracing::warn!(
                    target = %target,
                    error = %describe(&error),
                    retry_in_ms = delay.as_millis() as u64,
                    "the PostgreSQL ledger's notification connection failed; waiting callers fall back to polling"
                ),
            }
            waiters.notify_all();
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(RECONNECT_DELAY_MAX);
        }
    })
}

/// Connects, listens, and wakes waiters until the connection ends.
async fn listen(
    config: &Config,
    channels: &Channels,
    waiters: &Waiters,
    settled: &SettledEpoch,
    listening: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let statement = format!(
        "LISTEN \"{}\"; LISTEN \"{}\"",
        channels.changes, channels.settled
    );
    let listen = client.batch_execute(&statement);
    tokio::pin!(listen);
    let mut listened = false;
    loop {
        tokio::select! {
            result = &mut listen, if !listened => {
                result?;
                listened = true;
                settled.heard();
                if let Some(listening) = listening.take() {
                    let _ = listening.send(Ok(()));
                }
                // Changes made while this connection was being set up were not heard.
                waiters.notify_all();
            }
            message = std::future::poll_fn(|context| connection.poll_message(context)) => {
                match message {
                    Some(Ok(AsyncMessage::Notification(notification)))
                        if notification.channel() == channels.settled =>
                    {
                        settled.changed();
                    }
                    Some(Ok(AsyncMessage::Notification(notification))) => {
                        match notification.payload().parse() {
                            Ok(id) => waiters.notify(id),
                            Err(_) => tracing::warn!(
                                payload = notification.payload(),
                                "ignored a notification that names no intent"
                            ),
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(error),
                    None => return Ok(()),
                }
            }
        }
    }
}

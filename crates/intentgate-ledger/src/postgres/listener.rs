//! Wake-ups across replicas: one dedicated connection per ledger `LISTEN`s on the schema's
//! channel, and every transaction that settles or releases an intent `pg_notify`s its id
//! there (delivered at commit, never for a rollback). The listener wakes the local
//! [`Waiters`] of that id, so a caller waiting on a lease held by another replica reads the
//! intent again at once instead of at its next poll.
//!
//! A notification can still be missed (while the listener reconnects); waits stay short, so
//! that costs one poll interval, never a wrong answer. After every reconnect the listener
//! wakes every waiter, since what it missed is unknown.

use std::sync::Arc;
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

/// Starts the listener. `listening` is answered once the first `LISTEN` has succeeded or
/// failed.
pub fn spawn(
    config: Config,
    channel: String,
    target: Target,
    waiters: Arc<Waiters>,
    listening: oneshot::Sender<Result<(), String>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut listening = Some(listening);
        let mut delay = RECONNECT_DELAY_MIN;
        loop {
            let outcome = listen(&config, &channel, &waiters, &mut listening).await;
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
    channel: &str,
    waiters: &Waiters,
    listening: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let statement = format!("LISTEN \"{channel}\"");
    let listen = client.batch_execute(&statement);
    tokio::pin!(listen);
    let mut listened = false;
    loop {
        tokio::select! {
            result = &mut listen, if !listened => {
                result?;
                listened = true;
                if let Some(listening) = listening.take() {
                    let _ = listening.send(Ok(()));
                }
                // Changes made while this connection was being set up were not heard.
                waiters.notify_all();
            }
            message = std::future::poll_fn(|context| connection.poll_message(context)) => {
                match message {
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

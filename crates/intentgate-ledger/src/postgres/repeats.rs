//! Repeats answered from memory, counted in groups.
//!
//! A repeat of a settled intent answered without a read still counts the call: the intent's
//! count and last-seen time, and a `call` event. Alone, each count is a transaction of two
//! round trips (lock the row, then write), which at thousands of repeats a second costs the
//! server and this process more than answering them did. So counts wait here for up to
//! [`REPEATS_LINGER`] and are committed together, one transaction per group, each intent
//! locked once however often it was repeated. Counting is bookkeeping: the answer never
//! waits for it, and the count it wrote is not durable on its own either way.

use std::time::Duration;

use tokio::sync::oneshot;

use crate::{IntentId, Result};

/// How long a count waits for others to share its transaction. Long enough for a steady
/// stream of repeats to share one commit among dozens, short next to anything that reads
/// counts (the console, alerts' history, an audit).
pub const REPEATS_LINGER: Duration = Duration::from_millis(5);
/// Most repeats counted in one transaction: bounds one pipeline and its row locks.
pub const REPEATS_GROUP_MAX: usize = 1_024;

/// One repeat to count, and where to answer once its group committed.
pub struct Repeat {
    pub id: IntentId,
    pub now_ms: i64,
    pub answer: oneshot::Sender<Result<()>>,
}

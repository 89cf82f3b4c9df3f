//! The gate's clock, injected so that simulations control time.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, as the ledger stores them.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that follows tokio's time, from a fixed epoch: with a paused runtime
/// (`start_paused`) time only moves when every task waits, so a run is repeatable.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch_ms: i64,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(epoch_ms: i64) -> TokioClock {
        TokioClock {
            epoch_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        self.epoch_ms + self.start.elapsed().as_millis() as i64
    }
}

//! Waiting in a test for what another task, thread or process does: a condition polled
//! until it holds, within a deadline, in place of a fixed sleep that hopes it has happened
//! by then (too short on a loaded machine, too long everywhere else).

use std::future::Future;
use std::time::Duration;

/// Pause between two looks at a condition: short beside every deadline the tests give.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `condition` every [`POLL`] until it holds (`true`) or `deadline` has passed
/// (`false`, after a last look). Measured on tokio's clock, so a test with paused time
/// waits no wall-clock time.
pub async fn wait_until<F, Checked>(deadline: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Checked,
    Checked: Future<Output = bool>,
{
    let started = tokio::time::Instant::now();
    loop {
        if condition().await {
            return true;
        }
        if started.elapsed() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

//! When things are due: how long a lease lasts, whether an `unknown` intent may be re-sent
//! now, and the least time between two steps of its resolution (docs/design.md section 5;
//! the schedule is explained in the `resolve` module). Shared by the call path, which asks
//! `begin` with these bounds, and the drivers of `unknown` intents.

use std::time::Duration;

use intentgate_core::{Executor, ToolDefinition};
use intentgate_ledger::IntentRecord;

use crate::gate::Gate;
use crate::options::LEASE_MARGIN;
use crate::resolution::{Driver, SWEEP_LOOKUP_AGE_FRACTION, SWEEP_LOOKUP_INTERVAL_MAX, millis};

impl Gate {
    /// A lease covers every attempt of one call: each timeout, each capped pause, a margin.
    /// The caller's own code makes one attempt per lease (and renews it): its timeout and
    /// the margin.
    pub(crate) fn lease_duration(&self, tool: &ToolDefinition) -> Duration {
        if tool.executor == Executor::Client {
            return tool.timeout + LEASE_MARGIN;
        }
        let attempts = tool.retry_budget + 1;
        tool.timeout * attempts + self.options.retry_after_cap * tool.retry_budget + LEASE_MARGIN
    }

    /// True when `driver` could re-send `record` at `now_ms`, as far as the tool and the
    /// intent decide: never once its re-sends stopped (the provider answers its key the same
    /// way every time: [`IntentRecord::resend_stopped`]), else inside the key window for a
    /// whole attempt, and for the sweeper only without sensitive arguments (it holds their
    /// hashes, not their values).
    pub(crate) fn resend_possible(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        now_ms: i64,
        driver: Driver,
    ) -> bool {
        if record.resend_stopped.is_some() {
            return false;
        }
        let attempt = self.lease_duration(tool);
        let first_seen_ms = record.first_seen_ms;
        match driver {
            Driver::Caller => tool.within_resend_window(first_seen_ms, now_ms, attempt),
            Driver::Sweeper => tool.may_resend(first_seen_ms, now_ms, attempt),
        }
    }

    /// The least time between two steps of `record` for `driver` (see the module
    /// documentation): the re-send backoff inside the key window, else the lookup interval.
    pub(crate) fn step_interval_ms(
        &self,
        tool: &ToolDefinition,
        record: &IntentRecord,
        now_ms: i64,
        driver: Driver,
    ) -> i64 {
        let resolution = &self.options.resolution;
        if resolution.resends_per_second > 0 && self.resend_possible(tool, record, now_ms, driver) {
            return millis(resolution.backoff(record.attempt));
        }
        let floor_ms = millis(self.options.lookup_interval);
        match driver {
            Driver::Caller => floor_ms,
            Driver::Sweeper => {
                let ceiling_ms = millis(SWEEP_LOOKUP_INTERVAL_MAX).max(floor_ms);
                let age_ms = now_ms.saturating_sub(record.first_seen_ms).max(0);
                (age_ms / i64::from(SWEEP_LOOKUP_AGE_FRACTION)).clamp(floor_ms, ceiling_ms)
            }
        }
    }
}

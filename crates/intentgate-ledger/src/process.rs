//! The gateway processes that hold leases, as the ledger keeps them.
//!
//! Every lease owner is written `"{instance}/..."`, where the instance names the gateway
//! process that took the lease. A process registers its instance ([`Ledger::register_process`])
//! when it opens the ledger and then heartbeats ([`Ledger::heartbeat_process`]) from a task of
//! its own, apart from its calls, so a slow call never looks like a dead process. When it
//! stops cleanly it says so ([`Ledger::stop_process`]); when another process finds it gone (on
//! the same machine its pid no longer runs) that one says so ([`Ledger::mark_process_dead`]).
//!
//! `begin` then treats (the rule is `plan::owner_gone`) a live lease whose owner is registered and has ended, or has not
//! heartbeaten for longer than the silence it registered with, as an expired lease: the
//! intent goes `unknown` (never executed again blindly) and is taken over at once, rather
//! than when the lease runs out tens of seconds later. A lease whose owner is not registered
//! (an embedded gate that never registered, rows older than the table) keeps the expiry as its
//! only rule.
//!
//! [`Ledger::register_process`]: crate::Ledger::register_process
//! [`Ledger::heartbeat_process`]: crate::Ledger::heartbeat_process
//! [`Ledger::stop_process`]: crate::Ledger::stop_process
//! [`Ledger::mark_process_dead`]: crate::Ledger::mark_process_dead

use serde::Serialize;

/// Longest instance name. Every lease owner starts with it, and owners are bounded by
/// `LEASE_OWNER_LENGTH_MAX` (128): this leaves room for the rest of the owner.
pub const INSTANCE_LENGTH_MAX: usize = 64;
/// Longest host name kept (a DNS name is at most 253 bytes).
pub const HOST_LENGTH_MAX: usize = 255;
/// Longest pid scope kept (a boot id and a pid namespace are about 60 bytes).
pub const PID_SCOPE_LENGTH_MAX: usize = 128;
/// Most ended (stopped or dead) processes the purge keeps, the latest ones: enough to say
/// who held an old lease, and a bound on the table however many short-lived stdio gateways
/// come and go within the retention period.
pub const PROCESSES_ENDED_KEPT_MAX: u32 = 10_000;

/// What a process registers: who it is, where it runs, and how long a silence means it is
/// gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessRegistration {
    /// The `GateOptions::instance` of its gate, which begins every lease owner it writes;
    /// unique among the processes sharing a ledger, without `/`.
    pub instance: String,
    /// The machine's host name, for operators.
    pub host: String,
    /// What makes `pid` meaningful to another process: on Linux the boot id and the pid
    /// namespace, so that only a process that sees the same pids probes them. Empty where
    /// there is none: then only the heartbeat says whether the process lives.
    pub pid_scope: String,
    pub pid: u32,
    pub now_ms: i64,
    /// How long without a heartbeat before the process counts as gone: a few of its
    /// heartbeat intervals, so one late heartbeat never robs a live process.
    pub silent_after_ms: i64,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessEnd {
    /// It stopped cleanly, after its calls ended (or its grace period did).
    Stopped,
    /// Another process found it gone (its pid no longer runs).
    Dead,
}

impl ProcessEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessEnd::Stopped => "stopped",
            ProcessEnd::Dead => "dead",
        }
    }
}

impl std::str::FromStr for ProcessEnd {
    type Err = String;

    fn from_str(text: &str) -> Result<ProcessEnd, String> {
        match text {
            "stopped" => Ok(ProcessEnd::Stopped),
            "dead" => Ok(ProcessEnd::Dead),
            other => Err(format!("unknown process end `{other}`")),
        }
    }
}

/// A registered gateway process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessRecord {
    pub instance: String,
    pub host: String,
    pub pid_scope: String,
    pub pid: u32,
    pub started_ms: i64,
    /// Its latest heartbeat (its registration, before the first).
    pub heartbeat_ms: i64,
    pub silent_after_ms: i64,
    /// How and when it ended; `None` while it runs (or died unnoticed).
    pub ended: Option<ProcessEnd>,
    pub ended_ms: Option<i64>,
}

/// The instance that wrote `lease_owner`: the text before its first `/`, or `None` for an
/// owner without one (which no registered process can have written).
pub fn instance_of(lease_owner: &str) -> Option<&str> {
    lease_owner
        .split_once('/')
        .map(|(instance, _)| instance)
        .filter(|instance| !instance.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instance_is_the_owner_before_its_first_slash() {
        assert_eq!(instance_of("p1/42"), Some("p1"));
        assert_eq!(instance_of("p1/sweeper/3"), Some("p1"));
        assert_eq!(instance_of("p1"), None);
        assert_eq!(instance_of("/3"), None);
    }
}

//! This gateway process as the ledger registers it, and whether another registered process
//! on the same machine still runs.
//!
//! A lease belongs to the process that took it (its owner begins with the process's
//! instance). Every process heartbeats in the ledger, so a dead one is noticed by its
//! silence, after a few heartbeat intervals, from any machine. On the same machine a waiting
//! caller can tell sooner: a process whose pid no longer runs is gone. That is only sound
//! where both see the same pids, so a process registers a pid scope (on Linux the boot id and
//! the pid namespace) and is probed only by processes with the same scope; elsewhere the
//! scope is empty and only the heartbeat speaks. A pid that runs may have been reused by
//! another program: then the probe says nothing, and the heartbeat decides.

use std::sync::OnceLock;

use intentgate_ledger::{ProcessRecord, ProcessRegistration};

/// Where this process runs, as it registers in the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThisProcess {
    /// The machine's host name, for operators (`unknown` when it can't be read).
    pub host: String,
    /// What makes this process's pids comparable with another's: empty where there is none
    /// (not Linux, or `/proc` unreadable).
    pub pid_scope: String,
    pub pid: u32,
}

impl ThisProcess {
    /// The registration of this process under `instance` at `now_ms`.
    pub fn registration(
        &self,
        instance: &str,
        now_ms: i64,
        silent_after_ms: i64,
    ) -> ProcessRegistration {
        ProcessRegistration {
            instance: instance.to_owned(),
            host: self.host.clone(),
            pid_scope: self.pid_scope.clone(),
            pid: self.pid,
            now_ms,
            silent_after_ms,
        }
    }
}

/// This process, read once.
pub fn this_process() -> &'static ThisProcess {
    static THIS: OnceLock<ThisProcess> = OnceLock::new();
    THIS.get_or_init(|| ThisProcess {
        host: host_name(),
        pid_scope: pid_scope(),
        pid: std::process::id(),
    })
}

/// True when `process` is registered on this machine, in this pid scope, and its pid no
/// longer runs (or is a zombie waiting to be reaped): it is certainly gone. False when it may
/// live, or this process can't tell (another machine or scope, no scope, an unreadable
/// `/proc`).
pub fn runs_no_longer(process: &ProcessRecord) -> bool {
    let this = this_process();
    if this.pid_scope.is_empty() || process.pid_scope != this.pid_scope || process.pid == this.pid {
        return false;
    }
    pid_gone(process.pid)
}

#[cfg(target_os = "linux")]
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(not(target_os = "linux"))]
fn host_name() -> String {
    ["HOSTNAME", "COMPUTERNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The boot id and the pid namespace: two processes with the same see the same pids.
#[cfg(target_os = "linux")]
fn pid_scope() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id");
    let namespace = std::fs::read_link("/proc/self/ns/pid");
    match (boot, namespace) {
        (Ok(boot), Ok(namespace)) if !boot.trim().is_empty() => {
            format!("{}/{}", boot.trim(), namespace.display())
        }
        _ => String::new(),
    }
}

#[cfg(not(target_os = "linux"))]
fn pid_scope() -> String {
    String::new()
}

/// Whether `pid` no longer runs: no `/proc/<pid>`, or a zombie (`Z`) or dead (`X`) one. A
/// process that can't be read for another reason (permissions) counts as running.
#[cfg(target_os = "linux")]
fn pid_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(error) => error.kind() == std::io::ErrorKind::NotFound,
        // `pid (command) S ...`: the command may hold anything, the state follows its last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

#[cfg(not(target_os = "linux"))]
fn pid_gone(_pid: u32) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn registered(this: &ThisProcess, pid: u32, pid_scope: &str) -> ProcessRecord {
        ProcessRecord {
            instance: "other".to_owned(),
            host: this.host.clone(),
            pid_scope: pid_scope.to_owned(),
            pid,
            started_ms: 0,
            heartbeat_ms: 0,
            silent_after_ms: 3_000,
            ended: None,
            ended_ms: None,
        }
    }

    #[test]
    fn a_process_of_this_machine_is_gone_once_its_pid_has_exited_and_been_reaped_or_not() {
        let this = this_process();
        assert!(!this.pid_scope.is_empty(), "Linux has a pid scope");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let running = registered(this, child.id(), &this.pid_scope);
        assert!(!runs_no_longer(&running));
        child.kill().unwrap();
        // Killed but not reaped yet: a zombie, gone all the same.
        let zombie_seen = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            runs_no_longer(&running)
        });
        assert!(
            zombie_seen,
            "a killed child counts as gone before it is reaped"
        );
        child.wait().unwrap();
        assert!(runs_no_longer(&running));
    }

    #[test]
    fn a_process_of_another_scope_or_this_one_is_never_probed() {
        let this = this_process();
        // A pid that certainly does not run here (above the kernel's pid_max).
        let absent = 4_194_304 + 1;
        assert!(runs_no_longer(&registered(this, absent, &this.pid_scope)));
        assert!(!runs_no_longer(&registered(
            this,
            absent,
            "other-boot/pid:[1]"
        )));
        assert!(!runs_no_longer(&registered(this, absent, "")));
        assert!(!runs_no_longer(&registered(
            this,
            this.pid,
            &this.pid_scope
        )));
    }
}

//! The gateway's background work: the process heartbeat, the retention purge, the sweeper,
//! the duplicate-call alerts, the owner notices of upstream errors that are the operator's and
//! the reconciliation schedule, each a loop that runs until its task is stopped.
//!
//! A failed round is logged and tried again at the next tick: none of these loops ends on an
//! error, since each round starts from what the ledger holds.

use std::sync::Arc;
use std::time::Duration;

use intentgate_config::{LoadedConfig, ReconcileConfig};
use intentgate_gate::{Clock, Gate, SystemClock};
use intentgate_ledger::{Ledger, ProcessEnd};
use intentgate_ops::{
    AlertEngine, HeldNotices, KeyReuseNotices, MismatchNotices, Notifier, Reconciler,
    UpstreamNotices,
};
use tokio::task::JoinHandle;

/// How often the retention purge runs.
pub const PURGE_EVERY: Duration = Duration::from_secs(60 * 60);
/// Longest pause between two sweeps. Short enough that a crashed call's intent is settled
/// seconds after its lease expires, before a user asks again; long enough that an idle
/// gateway costs one indexed read per status each time. Each intent's steps are scheduled on
/// their own, so sweeping often does not mean asking the provider often.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Shortest pause between two sweeps, when an intent's next step falls due sooner than
/// [`SWEEP_EVERY`] (a re-send backoff of a second).
pub const SWEEP_PAUSE_MIN: Duration = Duration::from_millis(250);
/// Most intents of each status (expired in flight, unknown) one sweep takes; it steps a few
/// at a time (`SWEEP_CONCURRENCY`), so this bounds how long it runs. The rest wait for the
/// next.
const SWEEP_LIMIT: u32 = 100;

/// How often a gateway process heartbeats in the ledger. Its leases are taken over once it
/// has been silent for [`SILENT_AFTER`]; a heartbeat is one small write.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long a gateway process may go without a heartbeat before its leases are taken over:
/// three heartbeats, so that one late write (a busy disk, a slow database) never robs a live
/// process. The heartbeat runs in a task of its own, so a slow upstream call never delays it.
pub const SILENT_AFTER: Duration = Duration::from_secs(3);

/// Background tasks that stop when this is dropped: they live as long as the server they
/// serve, also inside a process that goes on after it.
#[derive(Default)]
pub(crate) struct Background(Vec<JoinHandle<()>>);

impl Background {
    pub(crate) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.0.push(tokio::spawn(task));
    }

    pub(crate) fn add(&mut self, task: Option<JoinHandle<()>>) {
        self.0.extend(task);
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Registers this gateway process under `instance` (its gate's, which begins every lease
/// owner it writes) as running now, silent after [`SILENT_AFTER`].
pub async fn register(ledger: &dyn Ledger, instance: &str) -> intentgate_ledger::Result<()> {
    let registration = intentgate_gate::process::this_process().registration(
        instance,
        SystemClock.now_ms(),
        SILENT_AFTER.as_millis() as i64,
    );
    ledger.register_process(registration).await.map(|_| ())
}

/// Heartbeats `instance` every [`HEARTBEAT_EVERY`]. A failed heartbeat is logged and the
/// next one tried (after [`SILENT_AFTER`] of them the process's leases are taken over, which
/// is safe: an intent taken over is only looked up). A process found ended (another marked it
/// dead, or it was purged) registers again: it plainly runs.
pub async fn heartbeat_forever(ledger: Arc<dyn Ledger>, instance: String) {
    let mut ticks = tokio::time::interval(HEARTBEAT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Past the silence a heartbeat is late anyway: bounded, the next one is tried.
        let beat = tokio::time::timeout(
            SILENT_AFTER,
            ledger.heartbeat_process(&instance, SystemClock.now_ms()),
        )
        .await;
        match beat {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                tracing::warn!(
                    instance,
                    "this gateway process is marked ended in the ledger (found gone by another, \
                     or purged); its leases were taken over; registering again"
                );
                match tokio::time::timeout(SILENT_AFTER, register(ledger.as_ref(), &instance)).await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(
                        %error,
                        "could not register this gateway process again; will try again"
                    ),
                    Err(_) => tracing::warn!(
                        "registering this gateway process again took longer than {} s; will \
                         try again",
                        SILENT_AFTER.as_secs()
                    ),
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "heartbeat failed; will try again")
            }
            Err(_) => tracing::warn!(
                "heartbeat took longer than {} s; will try again",
                SILENT_AFTER.as_secs()
            ),
        }
    }
}

/// Marks this gateway process stopped, on its clean shutdown (its background tasks, the
/// heartbeat among them, already stopped), once the outcomes its calls queued and the
/// counts of the repeats it answered have committed: its leases are freed only then.
/// Logged, not fatal: unmarked, its silence frees its leases a few seconds later.
pub async fn stop(gate: &Gate) {
    let ledger = gate.ledger().as_ref();
    let instance = gate.options().instance.as_str();
    let stopped = tokio::time::timeout(SILENT_AFTER, async {
        gate.drain_repeat_counts().await;
        ledger.drain_queued().await;
        ledger
            .end_process(instance, ProcessEnd::Stopped, SystemClock.now_ms())
            .await
    })
    .await;
    match stopped {
        // On the startup target, shown at the default level: an operator sees the process
        // end as plainly as it started.
        Ok(Ok(_)) => tracing::info!(
            target: "intentgate::startup",
            "stopped: every call answered and its outcome committed"
        ),
        Ok(Err(error)) => {
            tracing::warn!(%error, "could not mark this gateway process stopped in the ledger")
        }
        Err(_) => tracing::warn!(
            "marking this gateway process stopped took longer than {} s; gave up",
            SILENT_AFTER.as_secs()
        ),
    }
}

/// Deletes settled intents older than `retention_days` every [`PURGE_EVERY`].
pub async fn purge_forever(ledger: Arc<dyn Ledger>, retention_days: u32) {
    let retention_ms = i64::from(retention_days) * 24 * 60 * 60 * 1000;
    let mut ticks = tokio::time::interval(PURGE_EVERY);
    loop {
        ticks.tick().await;
        let cutoff_ms = SystemClock.now_ms() - retention_ms;
        match ledger.purge(cutoff_ms).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(
                purged,
                retention_days,
                "purged settled intents past retention"
            ),
            Err(error) => tracing::warn!(%error, "retention purge failed; will try again"),
        }
    }
}

/// Sweeps until stopped, a sweep at a time: again when the earliest intent it saw falls
/// due, between [`SWEEP_PAUSE_MIN`] and [`SWEEP_EVERY`] later. What the sweeps did is logged
/// at most once per [`SWEEP_EVERY`], added up, and only when they did something: a recovery
/// that steps hundreds of intents writes a line every 10 s, not one per sweep.
pub async fn sweep_forever(gate: Arc<Gate>) {
    let mut done = intentgate_gate::SweepReport::default();
    let mut sweeps = 0u32;
    let mut logged = tokio::time::Instant::now();
    loop {
        let pause = match gate.sweep(SWEEP_LIMIT).await {
            Ok(report) => {
                sweeps += 1;
                done.add(&report);
                next_sweep_in(&report, SystemClock.now_ms())
            }
            Err(error) => {
                tracing::warn!(%error, "sweep failed; will try again");
                SWEEP_EVERY
            }
        };
        if logged.elapsed() >= SWEEP_EVERY {
            if done.acted() || done.errors > 0 {
                tracing::info!(
                    sweeps,
                    examined = done.examined,
                    resolved_done = done.resolved_done,
                    resent = done.resent,
                    resends_deferred = done.resends_deferred,
                    looked_up = done.looked_up,
                    lookup_failed = done.lookup_failed,
                    settled_otherwise = done.settled_otherwise,
                    errors = done.errors,
                    "swept intents left in flight or unknown"
                );
            }
            done = intentgate_gate::SweepReport::default();
            sweeps = 0;
            logged = tokio::time::Instant::now();
        }
        tokio::time::sleep(pause).await;
    }
}

/// The pause before the sweep after `report`: until its earliest due step, or at once (after
/// the least pause) when it left work behind (a listing cut while it acted, a re-send
/// deferred), at most [`SWEEP_EVERY`]. A cut listing of intents none of which was due waits
/// for the earliest of them, so a ledger holding many long-unknown intents is not re-read
/// in a loop.
fn next_sweep_in(report: &intentgate_gate::SweepReport, now_ms: i64) -> Duration {
    let until_due = report.next_due_ms.map(|due_ms| {
        Duration::from_millis(u64::try_from(due_ms.saturating_sub(now_ms)).unwrap_or(0))
    });
    let pause = if (report.truncated && report.acted()) || report.resends_deferred > 0 {
        Duration::ZERO
    } else {
        until_due.unwrap_or(SWEEP_EVERY)
    };
    pause.clamp(SWEEP_PAUSE_MIN, SWEEP_EVERY)
}

/// Starts the duplicate-call alert rules of `loaded`'s tools over `gate`'s repeated calls;
/// `None` when no tool has a rule.
pub fn start_alerts(
    loaded: &LoadedConfig,
    gate: &Arc<Gate>,
    notifier: &Arc<Notifier>,
) -> Option<JoinHandle<()>> {
    let engine = AlertEngine::new(loaded);
    if engine.is_empty() {
        return None;
    }
    Some(tokio::spawn(engine.run(
        gate.repeated_calls(),
        notifier.clone(),
        gate.ledger().clone(),
        gate.metrics().clone(),
    )))
}

/// Starts the owner notices of `gate`'s upstream errors that are the operator's (a wrong
/// credential, a route that does not exist, an upstream it can't reach), at most one per tool
/// and kind every `intentgate_ops::upstream_errors::NOTICE_EVERY`.
pub fn start_upstream_notices(
    loaded: &LoadedConfig,
    gate: &Arc<Gate>,
    notifier: &Arc<Notifier>,
) -> JoinHandle<()> {
    tokio::spawn(UpstreamNotices::new(loaded).run(gate.upstream_errors(), notifier.clone()))
}

/// Starts the owner notices of `gate`'s lookup mismatches (a record half an intent's: nothing
/// settled, somebody must look), at most one per intent every
/// `intentgate_ops::lookup_mismatches::NOTICE_EVERY`.
pub fn start_lookup_notices(
    loaded: &LoadedConfig,
    gate: &Arc<Gate>,
    notifier: &Arc<Notifier>,
) -> JoinHandle<()> {
    tokio::spawn(MismatchNotices::new(loaded).run(gate.lookup_mismatches(), notifier.clone()))
}

/// Starts the owner notices of `gate`'s reused idempotency keys (the provider refused an
/// attempt because its key was first used with other parameters: the intent stays unknown
/// and is never re-sent), at most one per intent every
/// `intentgate_ops::key_reuses::NOTICE_EVERY`.
pub fn start_key_reuse_notices(
    loaded: &LoadedConfig,
    gate: &Arc<Gate>,
    notifier: &Arc<Notifier>,
) -> JoinHandle<()> {
    tokio::spawn(KeyReuseNotices::new(loaded).run(gate.key_reuses(), notifier.clone()))
}

/// Starts the owner notices of the calls `gate` holds for approval, each with the link to
/// its console page (from [`intentgate_ops::held::PUBLIC_URL_ENV`], when set).
pub fn start_held_notices(
    loaded: &LoadedConfig,
    gate: &Arc<Gate>,
    notifier: &Arc<Notifier>,
) -> JoinHandle<()> {
    let public_url = std::env::var(intentgate_ops::held::PUBLIC_URL_ENV).ok();
    tokio::spawn(HeldNotices::new(loaded, public_url).run(gate.held_intents(), notifier.clone()))
}

/// Reconciles every `every_seconds` over the last `window_seconds`. Replicas sharing a
/// ledger each run this loop; a replica skips its turn when the ledger shows a run by
/// `serve` that started less than half an interval ago, so one deployment makes about one
/// run (and one set of notices) per interval.
pub async fn reconcile_forever(
    reconciler: Arc<Reconciler>,
    ledger: Arc<dyn Ledger>,
    settings: ReconcileConfig,
) {
    let every = Duration::from_secs(settings.every_seconds.into());
    let window = Duration::from_secs(settings.window_seconds.into());
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now_ms = SystemClock.now_ms();
        let recent = match ledger.reconciliations(RECENT_RUNS_READ).await {
            Ok(runs) => runs.into_iter().any(|run| {
                run.actor == RECONCILE_ACTOR
                    && now_ms - run.started_ms < every.as_millis() as i64 / 2
            }),
            Err(error) => {
                tracing::warn!(%error, "could not read recent reconciliation runs; reconciling anyway");
                false
            }
        };
        if recent {
            tracing::debug!("another replica reconciled less than half an interval ago; skipping");
            continue;
        }
        let report = reconciler.run(window, now_ms, RECONCILE_ACTOR).await;
        let fields = (
            report.run_id.unwrap_or(0),
            report.mismatches_total,
            report.critical,
        );
        if report.critical > 0 || report.has_errors() {
            tracing::error!(
                run = fields.0,
                mismatches = fields.1,
                critical = fields.2,
                errors = report.has_errors(),
                "reconciliation found critical mismatches or could not complete; the owners were told"
            );
        } else {
            tracing::info!(
                run = fields.0,
                mismatches = fields.1,
                "reconciliation finished"
            );
        }
    }
}

/// The actor of the runs `serve` makes.
const RECONCILE_ACTOR: &str = "serve";
/// Latest runs read to decide whether another replica just reconciled.
const RECENT_RUNS_READ: u32 = 5;

/// Reconciliation for the admin API (`POST /v1/admin/reconcile`).
pub(crate) struct AdminReconciler(pub(crate) Arc<Reconciler>);

#[async_trait::async_trait]
impl intentgate_admin::Reconciler for AdminReconciler {
    async fn reconcile(&self, since: Duration, actor: &str) -> Result<serde_json::Value, String> {
        let report = self.0.run(since, SystemClock.now_ms(), actor).await;
        serde_json::to_value(&report).map_err(|error| error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intentgate_gate::SweepReport;

    #[test]
    fn the_next_sweep_comes_when_the_earliest_step_falls_due_within_bounds() {
        let now_ms = 1_000_000;
        let idle = SweepReport::default();
        assert_eq!(next_sweep_in(&idle, now_ms), SWEEP_EVERY);
        let due_soon = SweepReport {
            next_due_ms: Some(now_ms + 1_500),
            ..SweepReport::default()
        };
        assert_eq!(
            next_sweep_in(&due_soon, now_ms),
            Duration::from_millis(1_500)
        );
        let overdue = SweepReport {
            next_due_ms: Some(now_ms - 10),
            ..SweepReport::default()
        };
        assert_eq!(next_sweep_in(&overdue, now_ms), SWEEP_PAUSE_MIN);
        let far = SweepReport {
            next_due_ms: Some(now_ms + 3_600_000),
            ..SweepReport::default()
        };
        assert_eq!(next_sweep_in(&far, now_ms), SWEEP_EVERY);
        let deferred = SweepReport {
            resends_deferred: 1,
            next_due_ms: Some(now_ms + 5_000),
            ..SweepReport::default()
        };
        assert_eq!(next_sweep_in(&deferred, now_ms), SWEEP_PAUSE_MIN);
        // A cut listing of intents none of which was due is not re-read in a loop.
        let cut_idle = SweepReport {
            truncated: true,
            not_due: 100,
            next_due_ms: Some(now_ms + 4_000),
            ..SweepReport::default()
        };
        assert_eq!(
            next_sweep_in(&cut_idle, now_ms),
            Duration::from_millis(4_000)
        );
    }
}

//! Duplicate-call alerts (docs/design.md section 8): the incident this product comes from was caught
//! by a dashboard after 14 minutes; a rule here fires on the repeated call that crosses its
//! threshold.
//!
//! The [`AlertEngine`] reads the gate's repeated-call events (`Gate::repeated_calls`) and
//! keeps, per rule, the times of the repeats within the rule's window: per intent
//! (`per: intent`, one refund asked for again and again) or across the tool (`per: tool`,
//! a retry storm). When a window holds `threshold` repeats the rule fires: a notice to the
//! tool's owner (log line and webhook), `intentgate_alerts_fired_total`, and, where the
//! rule says `disable_tool`, the tool's kill switch. A rule fires at most once per window
//! per intent (or per tool).
//!
//! A storm repeats many intents at once, and a per-intent rule then fires for each of them:
//! every alert still gets its webhook and its count in the metric, but the log gets one line
//! per rule and window, not one per intent (`AlertLog`). The first alert of a rule is
//! written at once, as it fires; those that follow within the rule's window (at most
//! [`SUMMARY_EVERY_MAX`]) are counted, and one line when that time is up says how many there
//! were, naming a few of their intent keys ([`SUMMARY_EXAMPLES_MAX`]).
//!
//! Each gateway process counts the repeats it serves. Behind a load balancer that spreads
//! one intent's repeats over N replicas, a per-intent threshold sees about 1/N of them: set
//! thresholds with that in mind, or alert on the sum of `intentgate_repeated_calls_total`
//! across replicas in Prometheus.
//!
//! **Bounded:** per rule, at most `threshold` times per window and at most
//! [`TRACKED_INTENTS_MAX`] intents; windows that went quiet are dropped first. The log keeps
//! per rule one open window with at most [`SUMMARY_EXAMPLES_MAX`] keys.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use intentgate_config::{AlertRule, AlertScope, LoadedConfig};
use intentgate_gate::{Metrics, RepeatedCall};
use intentgate_ledger::{Ledger, ToolFlag};
use serde::Serialize;
use serde_json::json;
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::Severity;
use crate::notify::{Notice, Notifier};

/// Intents one per-intent rule tracks at once. Each costs its key and up to `threshold`
/// timestamps; a hundred thousand intents repeating within one window is already an outage.
pub const TRACKED_INTENTS_MAX: usize = 100_000;
/// Actor recorded on a flag set by an alert rule.
pub const ALERT_ACTOR: &str = "alert";
/// Intent keys a summary line names: enough to start looking, few enough that a storm of
/// thousands of intents is still one short line (keys are at most 512 bytes).
pub const SUMMARY_EXAMPLES_MAX: usize = 5;
/// Longest a rule's later alerts wait to be summed up in the log: a rule's window may be a
/// day long, and an operator reading the log should not wait that long for the count.
pub const SUMMARY_EVERY_MAX: Duration = Duration::from_secs(60);
/// How long the engine rests after taking the repeated calls that wait, before it takes
/// more. Rules are judged by each call's own time, so nothing fires differently; the rest
/// only spares a stream of repeats a wake-up of this task per repeat.
pub const REPEATS_TAKEN_EVERY: Duration = Duration::from_millis(5);

/// A rule that fired.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    pub tool: String,
    pub rule: String,
    pub per: AlertScope,
    /// Repeated calls within the window when it fired.
    pub repeats: u32,
    pub window_seconds: u32,
    /// The intent, for a per-intent rule.
    pub tenant: Option<String>,
    pub intent_key: Option<String>,
    pub intent_id: Option<i64>,
    /// The intent's call count as the gate knew it (per-intent rules).
    pub call_count: Option<u64>,
    pub at_ms: i64,
    /// The rule switches the tool off.
    pub disable_tool: bool,
}

/// The repeats of one window, and when it last fired.
#[derive(Default)]
struct Window {
    times_ms: VecDeque<i64>,
    fired_ms: Option<i64>,
}

impl Window {
    /// Adds a repeat at `at_ms`; true when the rule fires with it.
    fn observe(&mut self, at_ms: i64, rule: &AlertRule) -> bool {
        let window_ms = i64::from(rule.window_seconds) * 1000;
        while self
            .times_ms
            .front()
            .is_some_and(|first| at_ms - first >= window_ms)
        {
            self.times_ms.pop_front();
        }
        self.times_ms.push_back(at_ms);
        // Only the newest `threshold` matter.
        while self.times_ms.len() > rule.threshold as usize {
            self.times_ms.pop_front();
        }
        let reached = self.times_ms.len() >= rule.threshold as usize;
        let quiet = self.fired_ms.is_none_or(|fired| at_ms - fired >= window_ms);
        if reached && quiet {
            self.fired_ms = Some(at_ms);
            true
        } else {
            false
        }
    }

    fn quiet_since(&self, now_ms: i64, window_ms: i64) -> bool {
        self.times_ms
            .back()
            .is_none_or(|last| now_ms - last >= window_ms)
            && self
                .fired_ms
                .is_none_or(|fired| now_ms - fired >= window_ms)
    }
}

struct RuleState {
    rule: AlertRule,
    name: String,
    tool: Window,
    intents: HashMap<(String, String), Window>,
    /// Logged once when [`TRACKED_INTENTS_MAX`] is reached, until it is not.
    full_logged: bool,
}

struct ToolRules {
    owner: Option<String>,
    rules: Vec<RuleState>,
}

/// Evaluates the alert rules of every tool over repeated-call events.
pub struct AlertEngine {
    tools: HashMap<String, ToolRules>,
}

impl AlertEngine {
    /// The rules of `loaded`'s tools (the config fills in the defaults of side-effecting
    /// tools that name none).
    pub fn new(loaded: &LoadedConfig) -> AlertEngine {
        let tools = loaded
            .config
            .tools
            .iter()
            .filter(|tool| !tool.alerts.is_empty())
            .map(|tool| {
                let rules = tool
                    .alerts
                    .iter()
                    .map(|rule| RuleState {
                        name: rule.name(),
                        rule: rule.clone(),
                        tool: Window::default(),
                        intents: HashMap::new(),
                        full_logged: false,
                    })
                    .collect();
                (
                    tool.name.clone(),
                    ToolRules {
                        owner: tool.owner.clone(),
                        rules,
                    },
                )
            })
            .collect();
        AlertEngine { tools }
    }

    /// True when no tool has a rule.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Counts one repeated call; returns the alerts it fires.
    pub fn observe(&mut self, call: &RepeatedCall) -> Vec<Alert> {
        let Some(tool) = self.tools.get_mut(&call.tool) else {
            return Vec::new();
        };
        let mut fired = Vec::new();
        for state in &mut tool.rules {
            let rule = &state.rule;
            let window = match rule.per {
                AlertScope::Tool => &mut state.tool,
                AlertScope::Intent => {
                    let id = (call.tenant.clone(), call.key.clone());
                    if !state.intents.contains_key(&id)
                        && state.intents.len() >= TRACKED_INTENTS_MAX
                    {
                        let window_ms = i64::from(rule.window_seconds) * 1000;
                        state
                            .intents
                            .retain(|_, window| !window.quiet_since(call.at_ms, window_ms));
                        if state.intents.len() >= TRACKED_INTENTS_MAX {
                            if !state.full_logged {
                                state.full_logged = true;
                                tracing::error!(
                                    tool = %call.tool, rule = %state.name,
                                    "{TRACKED_INTENTS_MAX} intents repeating at once; new ones are not tracked by this rule until some go quiet"
                                );
                            }
                            continue;
                        }
                        state.full_logged = false;
                    }
                    state.intents.entry(id).or_default()
                }
            };
            if window.observe(call.at_ms, rule) {
                let per_intent = rule.per == AlertScope::Intent;
                fired.push(Alert {
                    tool: call.tool.clone(),
                    rule: state.name.clone(),
                    per: rule.per,
                    repeats: rule.threshold,
                    window_seconds: rule.window_seconds,
                    tenant: per_intent.then(|| call.tenant.clone()),
                    intent_key: per_intent.then(|| call.key.clone()),
                    intent_id: per_intent.then_some(call.intent_id),
                    call_count: per_intent.then_some(call.call_count),
                    at_ms: call.at_ms,
                    disable_tool: rule.disable_tool,
                });
            }
        }
        fired
    }

    /// The owner of `tool`'s alerts.
    fn owner(&self, tool: &str) -> Option<&str> {
        self.tools
            .get(tool)
            .and_then(|rules| rules.owner.as_deref())
    }

    /// Reads repeated calls until the gate is gone, firing alerts as rules say, and writes
    /// the log's summary lines as they fall due (the ones still open when the gate is gone
    /// or this task is stopped, at once).
    pub async fn run(
        mut self,
        mut repeats: broadcast::Receiver<RepeatedCall>,
        notifier: Arc<Notifier>,
        ledger: Arc<dyn Ledger>,
        metrics: Arc<Metrics>,
    ) {
        let mut kept = WrittenWhenDropped {
            log: AlertLog::default(),
            notifier: notifier.clone(),
        };
        let log = &mut kept.log;
        loop {
            let due = log.next_due();
            let received = tokio::select! {
                received = repeats.recv() => received,
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    log.write_due(Instant::now(), &notifier);
                    continue;
                }
            };
            if !self.take(received, log, &notifier, &ledger, &metrics).await {
                return;
            }
            // The calls that came meanwhile, then a rest (`REPEATS_TAKEN_EVERY`).
            while let Some(received) = waiting(repeats.try_recv()) {
                if !self.take(received, log, &notifier, &ledger, &metrics).await {
                    return;
                }
            }
            tokio::time::sleep(REPEATS_TAKEN_EVERY).await;
        }
    }

    /// Observes one received repeated call, firing what it fires; false once the gate is
    /// gone.
    async fn take(
        &mut self,
        received: Result<RepeatedCall, broadcast::error::RecvError>,
        log: &mut AlertLog,
        notifier: &Arc<Notifier>,
        ledger: &Arc<dyn Ledger>,
        metrics: &Arc<Metrics>,
    ) -> bool {
        let call = match received {
            Ok(call) => call,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "the alert engine fell behind and missed repeated calls; thresholds may fire late"
                );
                return true;
            }
            Err(broadcast::error::RecvError::Closed) => return false,
        };
        for alert in self.observe(&call) {
            let owner = self.owner(&alert.tool);
            let notice = fire(&alert, ledger, metrics).await;
            notifier.post(owner, &notice);
            let now = Instant::now();
            // A window that ended while calls kept this loop busy is written first.
            log.write_due(now, notifier);
            if log.opens_window(&alert, owner, now) {
                notifier.log(owner, &notice);
            }
        }
        true
    }
}

/// What `try_recv` answered, as `recv` would have; `None` when nothing waits.
fn waiting(
    received: Result<RepeatedCall, broadcast::error::TryRecvError>,
) -> Option<Result<RepeatedCall, broadcast::error::RecvError>> {
    use broadcast::error::{RecvError, TryRecvError};
    match received {
        Ok(call) => Some(Ok(call)),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Lagged(missed)) => Some(Err(RecvError::Lagged(missed))),
        Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
    }
}

/// Counts the alert and switches the tool off where the rule says so; returns the notice
/// for the tool's owner.
async fn fire(alert: &Alert, ledger: &Arc<dyn Ledger>, metrics: &Metrics) -> Notice {
    metrics.alert_fired(&alert.tool, &alert.rule);
    let about = match &alert.intent_key {
        Some(key) => format!("intent {key} was called {} more times", alert.repeats),
        None => format!("{} repeated calls", alert.repeats),
    };
    let mut summary = format!(
        "duplicate-call alert `{}` on {}: {about} within {} s",
        alert.rule, alert.tool, alert.window_seconds
    );
    if alert.disable_tool {
        let flag = ToolFlag {
            tool: alert.tool.clone(),
            enabled: false,
            reason: format!("switched off by alert rule `{}`: {about}", alert.rule),
            actor: format!("{ALERT_ACTOR}:{}", alert.rule),
            updated_ms: alert.at_ms,
        };
        match ledger.set_tool_flag(flag).await {
            Ok(()) => summary.push_str(
                "; the tool is now switched off (calls return `disabled`); switch it back on with `intentgate flags enable`",
            ),
            Err(error) => {
                tracing::error!(tool = %alert.tool, %error, "the alert could not switch the tool off");
                summary.push_str("; switching the tool off FAILED: use `intentgate flags disable`");
            }
        }
    }
    let severity = severity(alert.disable_tool);
    Notice {
        kind: DUPLICATE_CALLS,
        tool: alert.tool.clone(),
        severity,
        summary,
        details: json!(alert),
    }
}

/// The kind of a duplicate-call notice, in its webhook and its log line.
const DUPLICATE_CALLS: &str = "duplicate_calls";

/// The severity of a rule's notices: critical when it switches the tool off.
fn severity(disable_tool: bool) -> Severity {
    if disable_tool {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// The log side of fired alerts: a line for the first alert of a rule, then the rule's
/// later alerts counted, until its window (at most [`SUMMARY_EVERY_MAX`]) is up and one
/// summary line says how many there were.
#[derive(Default)]
struct AlertLog {
    /// Per tool and rule name, the window that its first alert opened.
    open: HashMap<(String, String), LogWindow>,
}

/// The alerts of one rule since its last line was written.
struct LogWindow {
    /// When the summary is due.
    due: Instant,
    owner: Option<String>,
    per: AlertScope,
    repeats: u32,
    window_seconds: u32,
    disable_tool: bool,
    /// Alerts after the first: the summary's count.
    more: u64,
    /// The first [`SUMMARY_EXAMPLES_MAX`] intent keys of those (per-intent rules).
    examples: Vec<String>,
}

impl AlertLog {
    /// True when `alert` opens a window for its rule, so its own line is to be written
    /// now; false when it was counted into the open window's summary.
    fn opens_window(&mut self, alert: &Alert, owner: Option<&str>, now: Instant) -> bool {
        let id = (alert.tool.clone(), alert.rule.clone());
        if let Some(window) = self.open.get_mut(&id) {
            window.more += 1;
            if let Some(key) = &alert.intent_key
                && window.examples.len() < SUMMARY_EXAMPLES_MAX
            {
                window.examples.push(key.clone());
            }
            return false;
        }
        let lasts = Duration::from_secs(u64::from(alert.window_seconds)).min(SUMMARY_EVERY_MAX);
        self.open.insert(
            id,
            LogWindow {
                due: now + lasts,
                owner: owner.map(str::to_owned),
                per: alert.per,
                repeats: alert.repeats,
                window_seconds: alert.window_seconds,
                disable_tool: alert.disable_tool,
                more: 0,
                examples: Vec::new(),
            },
        );
        true
    }

    /// When the next summary is due, if a window is open.
    fn next_due(&self) -> Option<Instant> {
        self.open.values().map(|window| window.due).min()
    }

    /// Closes the windows due by `now`; the summaries of those that counted alerts.
    fn take_due(&mut self, now: Instant) -> Vec<(Option<String>, Notice)> {
        let due: Vec<(String, String)> = self
            .open
            .iter()
            .filter(|(_, window)| window.due <= now)
            .map(|(id, _)| id.clone())
            .collect();
        due.into_iter()
            .filter_map(|id| {
                let window = self.open.remove(&id)?;
                summary(&id.0, &id.1, window)
            })
            .collect()
    }

    /// Closes every window; the summaries of those that counted alerts.
    fn take_all(&mut self) -> Vec<(Option<String>, Notice)> {
        self.open
            .drain()
            .filter_map(|((tool, rule), window)| summary(&tool, &rule, window))
            .collect()
    }

    fn write_due(&mut self, now: Instant, notifier: &Notifier) {
        for (owner, notice) in self.take_due(now) {
            notifier.log(owner.as_deref(), &notice);
        }
    }
}

/// An [`AlertLog`] that writes the summaries of its open windows when dropped: the engine's
/// task is aborted when the gateway stops, and the counts it holds would be lost.
struct WrittenWhenDropped {
    log: AlertLog,
    notifier: Arc<Notifier>,
}

impl Drop for WrittenWhenDropped {
    fn drop(&mut self) {
        for (owner, notice) in self.log.take_all() {
            self.notifier.log(owner.as_deref(), &notice);
        }
    }
}

/// The summary line of `tool`'s rule `rule` for `window`, with its owner; None when no
/// alert followed the first.
fn summary(tool: &str, rule: &str, window: LogWindow) -> Option<(Option<String>, Notice)> {
    if window.more == 0 {
        return None;
    }
    let (more, repeats, within) = (window.more, window.repeats, window.window_seconds);
    let text = match window.per {
        AlertScope::Intent => {
            let intents = if more == 1 {
                "intent was"
            } else {
                "intents were"
            };
            let mut text = format!(
                "duplicate-call alert `{rule}` on {tool}: {more} more {intents} each called {repeats} more times within {within} s, for example {}",
                window.examples.join(", ")
            );
            let others = more - window.examples.len() as u64;
            if others > 0 {
                text.push_str(&format!(" and {others} others"));
            }
            text
        }
        AlertScope::Tool => {
            let alerts = if more == 1 { "alert" } else { "alerts" };
            format!(
                "duplicate-call alert `{rule}` on {tool}: {more} more {alerts}, each for {repeats} repeated calls within {within} s"
            )
        }
    };
    let notice = Notice {
        kind: DUPLICATE_CALLS,
        tool: tool.to_owned(),
        severity: severity(window.disable_tool),
        summary: text,
        details: json!({
            "rule": rule,
            "per": window.per,
            "alerts": window.more,
            "examples": window.examples,
        }),
    };
    Some((window.owner, notice))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(per: AlertScope, threshold: u32, window_seconds: u32) -> AlertRule {
        AlertRule {
            name: None,
            per,
            threshold,
            window_seconds,
            disable_tool: false,
        }
    }

    fn engine(rules: Vec<AlertRule>) -> AlertEngine {
        let states = rules
            .into_iter()
            .map(|rule| RuleState {
                name: rule.name(),
                rule,
                tool: Window::default(),
                intents: HashMap::new(),
                full_logged: false,
            })
            .collect();
        AlertEngine {
            tools: HashMap::from([(
                "refund_order".to_owned(),
                ToolRules {
                    owner: None,
                    rules: states,
                },
            )]),
        }
    }

    fn repeat(key: &str, at_ms: i64) -> RepeatedCall {
        RepeatedCall {
            tenant: "default".to_owned(),
            tool: "refund_order".to_owned(),
            key: key.to_owned(),
            intent_id: 1,
            call_count: 2,
            at_ms,
        }
    }

    #[test]
    fn a_per_intent_rule_fires_once_per_window_at_its_threshold() {
        let mut engine = engine(vec![rule(AlertScope::Intent, 3, 10)]);
        assert!(engine.observe(&repeat("refund:1", 0)).is_empty());
        assert!(engine.observe(&repeat("refund:1", 1_000)).is_empty());
        let fired = engine.observe(&repeat("refund:1", 2_000));
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].intent_key.as_deref(), Some("refund:1"));
        assert_eq!(fired[0].rule, "repeats-per-intent");
        // The storm goes on: no second alert within the window.
        for at_ms in 3_000..3_010 {
            assert!(engine.observe(&repeat("refund:1", at_ms)).is_empty());
        }
        // Another intent has its own window.
        assert!(engine.observe(&repeat("refund:2", 3_000)).is_empty());
        // A window after the alert, the storm still running fires again.
        assert_eq!(engine.observe(&repeat("refund:1", 12_000)).len(), 1);
    }

    #[test]
    fn repeats_spread_wider_than_the_window_never_fire() {
        let mut engine = engine(vec![rule(AlertScope::Intent, 3, 10)]);
        for at_ms in [0, 6_000, 12_000, 18_000, 24_000] {
            assert!(engine.observe(&repeat("refund:1", at_ms)).is_empty());
        }
    }

    #[test]
    fn a_per_tool_rule_counts_every_intent_together() {
        let mut engine = engine(vec![rule(AlertScope::Tool, 4, 60)]);
        let fired: Vec<Alert> = (0..4)
            .flat_map(|n| engine.observe(&repeat(&format!("refund:{n}"), n * 10)))
            .collect();
        assert_eq!(fired.len(), 1);
        assert_eq!(fired[0].per, AlertScope::Tool);
        assert_eq!(fired[0].intent_key, None);
    }

    /// The alert `rule` fires for `key` when its threshold is reached.
    fn alert(rule: AlertRule, key: &str) -> Alert {
        let threshold = rule.threshold;
        let mut engine = engine(vec![rule]);
        let fired: Vec<Alert> = (0..threshold)
            .flat_map(|n| engine.observe(&repeat(key, i64::from(n))))
            .collect();
        assert_eq!(fired.len(), 1);
        fired.into_iter().next().unwrap()
    }

    /// A storm of 300 intents fired a per-intent rule 300 times, and the log had a warning
    /// for each: now the first is logged at once, the rest are one summary line when the
    /// window is up.
    #[test]
    fn a_rule_firing_for_many_intents_is_one_line_then_one_summary_per_window() {
        let per_intent = rule(AlertScope::Intent, 5, 60);
        let mut log = AlertLog::default();
        let start = Instant::now();
        assert!(log.opens_window(
            &alert(per_intent.clone(), "refund:0"),
            Some("payments"),
            start
        ));
        for n in 1..300 {
            let at = start + Duration::from_millis(n);
            assert!(!log.opens_window(
                &alert(per_intent.clone(), &format!("refund:{n}")),
                Some("payments"),
                at
            ));
        }
        assert_eq!(log.next_due(), Some(start + Duration::from_secs(60)));
        assert!(log.take_due(start + Duration::from_secs(59)).is_empty());
        let summaries = log.take_due(start + Duration::from_secs(60));
        assert_eq!(summaries.len(), 1);
        let (owner, notice) = &summaries[0];
        assert_eq!(owner.as_deref(), Some("payments"));
        assert_eq!(notice.kind, "duplicate_calls");
        assert_eq!(notice.severity, Severity::Warning);
        assert_eq!(
            notice.summary,
            "duplicate-call alert `repeats-per-intent` on refund_order: 299 more intents were \
             each called 5 more times within 60 s, for example refund:1, refund:2, refund:3, \
             refund:4, refund:5 and 294 others"
        );
        assert_eq!(notice.details["alerts"], 299);
        assert_eq!(log.next_due(), None, "the window is closed");
        // The storm goes on: the next alert opens a window of its own, logged at once.
        let later = start + Duration::from_secs(61);
        assert!(log.opens_window(&alert(per_intent, "refund:300"), None, later));
    }

    #[test]
    fn a_window_with_one_alert_has_no_summary_and_rules_have_their_own_windows() {
        let mut log = AlertLog::default();
        let start = Instant::now();
        let per_intent = rule(AlertScope::Intent, 5, 10);
        let mut per_tool = rule(AlertScope::Tool, 50, 60);
        per_tool.disable_tool = true;
        assert!(log.opens_window(&alert(per_intent.clone(), "refund:1"), None, start));
        assert!(log.opens_window(&alert(per_tool.clone(), "refund:1"), None, start));
        assert!(!log.opens_window(&alert(per_tool, "refund:2"), None, start));
        // The per-intent window is 10 s; the per-tool one 60 s.
        assert!(log.take_due(start + Duration::from_secs(10)).is_empty());
        assert!(log.opens_window(
            &alert(per_intent, "refund:2"),
            None,
            start + Duration::from_secs(11)
        ));
        let summaries = log.take_all();
        assert_eq!(
            summaries.len(),
            1,
            "only the per-tool window counted alerts"
        );
        let (_, notice) = &summaries[0];
        assert_eq!(notice.severity, Severity::Critical);
        assert_eq!(
            notice.summary,
            "duplicate-call alert `repeats-per-tool` on refund_order: 1 more alert, each for 50 \
             repeated calls within 60 s"
        );
        assert_eq!(log.next_due(), None);
    }

    #[test]
    fn a_long_window_is_summed_up_after_at_most_a_minute() {
        let mut log = AlertLog::default();
        let start = Instant::now();
        let daily = rule(AlertScope::Intent, 5, 86_400);
        assert!(log.opens_window(&alert(daily, "refund:1"), None, start));
        assert_eq!(log.next_due(), Some(start + SUMMARY_EVERY_MAX));
    }

    #[test]
    fn other_tools_are_not_counted() {
        let mut engine = engine(vec![rule(AlertScope::Tool, 1, 60)]);
        let mut call = repeat("email:1", 0);
        call.tool = "send_email".to_owned();
        assert!(engine.observe(&call).is_empty());
    }
}

//! Duplicate-call alerts (SPEC section 8): the incident this product comes from was caught
//! by a dashboard after 14 minutes; a rule here fires on the repeated call that crosses its
//! threshold.
//!
//! The [`AlertEngine`] reads the gate's repeated-call events (`Gate::repeated_calls`) and
//! keeps, per rule, the times of the repeats within the rule's window: per intent
//! (`per: intent`, one refund asked for again and again) or across the tool (`per: tool`,
//! a retry storm). When a window holds `threshold` repeats the rule fires: a notice to the
//! tool's owner (log line and webhook), `intentgate_alerts_fired_total`, and, where the
//! rule says `disable_tool`, the tool's kill switch. A rule fires at most once per window
//! per intent (or per tool), so a storm is one alert, not thousands.
//!
//! Each gateway process counts the repeats it serves. Behind a load balancer that spreads
//! one intent's repeats over N replicas, a per-intent threshold sees about 1/N of them: set
//! thresholds with that in mind, or alert on the sum of `intentgate_repeated_calls_total`
//! across replicas in Prometheus.
//!
//! **Bounded:** per rule, at most `threshold` times per window and at most
//! [`TRACKED_INTENTS_MAX`] intents; windows that went quiet are dropped first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use intentgate_config::{AlertRule, AlertScope, LoadedConfig};
use intentgate_gate::{Metrics, RepeatedCall};
use intentgate_ledger::{Ledger, ToolFlag};
use serde::Serialize;
use serde_json::json;
use tokio::sync::broadcast;

use crate::Severity;
use crate::notify::{Notice, Notifier};

/// Intents one per-intent rule tracks at once. Each costs its key and up to `threshold`
/// timestamps; a hundred thousand intents repeating within one window is already an outage.
pub const TRACKED_INTENTS_MAX: usize = 100_000;
/// Actor recorded on a flag set by an alert rule.
pub const ALERT_ACTOR: &str = "alert";

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

    /// Reads repeated calls until the gate is gone, firing alerts as rules say.
    pub async fn run(
        mut self,
        mut repeats: broadcast::Receiver<RepeatedCall>,
        notifier: Arc<Notifier>,
        ledger: Arc<dyn Ledger>,
        metrics: Arc<Metrics>,
    ) {
        loop {
            let call = match repeats.recv().await {
                Ok(call) => call,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "the alert engine fell behind and missed repeated calls; thresholds may fire late"
                    );
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            for alert in self.observe(&call) {
                fire(
                    &alert,
                    self.owner(&alert.tool),
                    &notifier,
                    &ledger,
                    &metrics,
                )
                .await;
            }
        }
    }
}

/// Tells the owner, counts the alert, and switches the tool off where the rule says so.
pub async fn fire(
    alert: &Alert,
    owner: Option<&str>,
    notifier: &Notifier,
    ledger: &Arc<dyn Ledger>,
    metrics: &Metrics,
) {
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
    let severity = if alert.disable_tool {
        Severity::Critical
    } else {
        Severity::Warning
    };
    notifier.notify(
        owner,
        &Notice {
            kind: "duplicate_calls",
            tool: alert.tool.clone(),
            severity,
            summary,
            details: json!(alert),
        },
    );
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

    #[test]
    fn other_tools_are_not_counted() {
        let mut engine = engine(vec![rule(AlertScope::Tool, 1, 60)]);
        let mut call = repeat("email:1", 0);
        call.tool = "send_email".to_owned();
        assert!(engine.observe(&call).is_empty());
    }
}

//! A side-effecting tool's policies: when a call needs a person's approval, and the budgets
//! that bound how much a tool may do per window (docs/design.md section 13, "Approval and
//! budgets").
//!
//! This module decides; it stores and counts nothing. What a budget has used in its window
//! is counted by the ledger (so every replica sees the same totals) in whole *units*: an
//! amount is counted in units of its budget's smallest place (`5000.00` counts cents), rounded
//! up, so a budget can only be reached early, never passed by rounding. A budget names the
//! bucket an intent counts in ([`Budget::bucket`]): the tool, the tenant, or a subject
//! rendered from the arguments (an order, a customer).

use serde_json::Value;

use crate::condition::Condition;
use crate::decimal::Decimal;
use crate::key::{KeyError, KeyTemplate};

/// The longest a held intent may wait for a decision: past a week the person who asked has
/// moved on, and the provider has long forgotten any key.
pub const APPROVAL_DEADLINE_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// The longest budget window: a budget is a rate guard, not an accounting period.
pub const BUDGET_WINDOW_MS_MAX: u64 = 31 * 24 * 60 * 60 * 1000;
/// Most budgets one tool may have.
pub const BUDGETS_PER_TOOL_MAX: usize = 16;
/// How long a held intent waits for a decision when its config names no deadline.
pub const APPROVAL_DEADLINE_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;

/// A side-effecting tool's policies. A tool without any has `None` on its definition, and
/// its call path neither reads nor writes anything for them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolPolicies {
    pub approval: Option<ApprovalPolicy>,
    pub budgets: Vec<Budget>,
}

/// When a call of the tool needs a person's approval before anything is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPolicy {
    /// `None`: every call.
    pub when: Option<Condition>,
    /// `None`: every tenant's calls; otherwise only these tenants'.
    pub tenants: Option<Vec<String>>,
    /// How long a held intent waits for a decision before it is settled `not_executed`.
    pub deadline_ms: u64,
}

impl ToolPolicies {
    /// No policy at all: the definition carries `None` instead.
    pub fn is_empty(&self) -> bool {
        self.approval.is_none() && self.budgets.is_empty()
    }
}

impl ApprovalPolicy {
    /// Whether a call of `tenant` with these (validated) arguments must be approved.
    pub fn requires(&self, tenant: &str, arguments: &Value) -> bool {
        let tenant_applies = self
            .tenants
            .as_ref()
            .is_none_or(|tenants| tenants.iter().any(|name| name == tenant));
        tenant_applies
            && self
                .when
                .as_ref()
                .is_none_or(|condition| condition.holds(arguments))
    }
}

/// What a budget is counted per.
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetScope {
    /// Every call of the tool, whoever makes it.
    Tool,
    /// Each tenant's calls of the tool.
    Tenant,
    /// Each subject's calls within a tenant: the subject rendered from the arguments
    /// (`{order_id}`, `{customer.id}`).
    Subject(KeyTemplate),
}

/// What a call beyond a budget gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeyondBudget {
    /// `over_budget`: refused, nothing executed.
    Refuse,
    /// Held for a person's approval, like a call its approval policy catches, for at most
    /// `deadline_ms`.
    Approval { deadline_ms: u64 },
}

/// A limit on how many intents, or how much, a tool may start per window.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Named in answers, events and metrics (`per-order`, `tenant-hourly`).
    pub name: String,
    pub scope: BudgetScope,
    pub window_ms: u64,
    /// At most this many intents per window (a repeat of an intent is not a new one).
    pub count_max: Option<u64>,
    /// At most this much, summed over the window's intents, read from `amount_argument`.
    pub amount_max: Option<Decimal>,
    /// The argument whose value is the amount (required with `amount_max`).
    pub amount_argument: Option<String>,
    /// The places amounts are counted in: those `amount_max` is written with (`5000.00`
    /// counts cents), since its normalised value has forgotten them.
    pub amount_places: u32,
    pub beyond: BeyondBudget,
}

/// What a budget has used in its current window, as the ledger counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetUsage {
    pub count: u64,
    /// The window's amounts in [`Budget::units`].
    pub units: u64,
}

/// Why a budget could not be applied to a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budget `{budget}`: the subject can't be rendered: {source}")]
    Subject { budget: String, source: KeyError },
    #[error("budget `{budget}`: argument `{argument}` is not an exact amount ({reason})")]
    Amount {
        budget: String,
        argument: String,
        reason: String,
    },
}

impl Budget {
    /// The bucket this call counts in, unique within the tool: `tool`, `tenant:<tenant>` or
    /// `subject:<tenant>:<subject>`.
    pub fn bucket(&self, tenant: &str, arguments: &Value) -> Result<String, BudgetError> {
        Ok(match &self.scope {
            BudgetScope::Tool => "tool".to_owned(),
            BudgetScope::Tenant => format!("tenant:{tenant}"),
            BudgetScope::Subject(template) => {
                let subject =
                    template
                        .render(arguments, None)
                        .map_err(|source| BudgetError::Subject {
                            budget: self.name.clone(),
                            source,
                        })?;
                format!("subject:{tenant}:{subject}")
            }
        })
    }

    /// The call's amount in units of this budget, rounded up; 0 for a budget without an
    /// amount limit, and for a negative amount (which can't make room in a budget).
    pub fn units(&self, arguments: &Value) -> Result<u64, BudgetError> {
        let (Some(_), Some(argument)) = (&self.amount_max, &self.amount_argument) else {
            return Ok(0);
        };
        let refuse = |reason: String| BudgetError::Amount {
            budget: self.name.clone(),
            argument: argument.clone(),
            reason,
        };
        let value = arguments
            .get(argument)
            .ok_or_else(|| refuse("the call has none".to_owned()))?;
        let amount = Decimal::from_json(value).map_err(|error| refuse(error.to_string()))?;
        Ok(amount
            .units_rounded_up(self.amount_places)
            .unwrap_or(u64::MAX))
    }

    /// The start of the window `now_ms` falls in. Windows are fixed periods counted from
    /// the Unix epoch (an hour's budget starts again on the hour, UTC), so every replica
    /// counts into the same one.
    pub fn window_start_ms(&self, now_ms: i64) -> i64 {
        let window = self.window_ms.max(1) as i64;
        now_ms.div_euclid(window) * window
    }

    /// `amount_max` in this budget's units; `None` without an amount limit.
    pub fn units_max(&self) -> Option<u64> {
        self.amount_max
            .as_ref()
            .map(|max| max.units_rounded_up(self.amount_places).unwrap_or(u64::MAX))
    }

    /// Whether one more intent of `units` fits what the window has `used`.
    pub fn admits(&self, used: BudgetUsage, units: u64) -> bool {
        admits(used, units, self.count_max, self.units_max())
    }
}

/// Whether one more intent of `units` fits `used` under at most `count_max` intents and
/// `units_max` units (`None`: no such limit). The ledger decides with this inside the
/// transaction that counts the intent.
pub fn admits(
    used: BudgetUsage,
    units: u64,
    count_max: Option<u64>,
    units_max: Option<u64>,
) -> bool {
    let count_fits = count_max.is_none_or(|max| used.count.saturating_add(1) <= max);
    let amount_fits = units_max.is_none_or(|max| used.units.saturating_add(units) <= max);
    count_fits && amount_fits
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn budget(scope: BudgetScope, count_max: Option<u64>, amount_max: Option<&str>) -> Budget {
        Budget {
            name: "test".to_owned(),
            scope,
            window_ms: 3_600_000,
            count_max,
            amount_max: amount_max.map(|max| Decimal::parse(max).unwrap()),
            amount_argument: amount_max.map(|_| "amount".to_owned()),
            amount_places: amount_max.map_or(0, |max| {
                max.split_once('.')
                    .map_or(0, |(_, places)| places.len() as u32)
            }),
            beyond: BeyondBudget::Refuse,
        }
    }

    #[test]
    fn approval_applies_by_condition_and_tenant() {
        let policy = ApprovalPolicy {
            when: Some(Condition::parse("amount > 100.00").unwrap()),
            tenants: Some(vec!["acme".to_owned()]),
            deadline_ms: 60_000,
        };
        assert!(policy.requires("acme", &json!({"amount": "100.01"})));
        assert!(!policy.requires("acme", &json!({"amount": 100})));
        assert!(!policy.requires("globex", &json!({"amount": 5000})));
        let always = ApprovalPolicy {
            when: None,
            tenants: None,
            deadline_ms: 60_000,
        };
        assert!(always.requires("anyone", &json!({})));
    }

    #[test]
    fn buckets_name_the_tool_the_tenant_or_the_subject() {
        let arguments = json!({"order_id": "8812", "amount": 49});
        assert_eq!(
            budget(BudgetScope::Tool, Some(1), None).bucket("acme", &arguments),
            Ok("tool".to_owned())
        );
        assert_eq!(
            budget(BudgetScope::Tenant, Some(1), None).bucket("acme", &arguments),
            Ok("tenant:acme".to_owned())
        );
        let per_order = budget(
            BudgetScope::Subject(KeyTemplate::parse("{order_id}").unwrap()),
            Some(2),
            None,
        );
        assert_eq!(
            per_order.bucket("acme", &arguments),
            Ok("subject:acme:8812".to_owned())
        );
        assert!(matches!(
            per_order.bucket("acme", &json!({"amount": 1})),
            Err(BudgetError::Subject { .. })
        ));
    }

    #[test]
    fn counts_and_amounts_are_admitted_up_to_the_limit_and_not_past_it() {
        let count = budget(BudgetScope::Tool, Some(2), None);
        assert!(count.admits(BudgetUsage { count: 1, units: 0 }, 0));
        assert!(!count.admits(BudgetUsage { count: 2, units: 0 }, 0));

        let amount = budget(BudgetScope::Tenant, None, Some("5000.00"));
        assert_eq!(amount.amount_places, 2);
        let units = amount.units(&json!({"amount": "49.00"})).unwrap();
        assert_eq!(units, 4_900);
        assert!(amount.admits(
            BudgetUsage {
                count: 9,
                units: 495_100
            },
            units
        ));
        assert!(!amount.admits(
            BudgetUsage {
                count: 9,
                units: 495_101
            },
            units
        ));
    }

    #[test]
    fn an_amount_is_counted_exactly_and_rounded_up_never_down() {
        let amount = budget(BudgetScope::Tool, None, Some("100.00"));
        // A float would make this 100.00 and let it through.
        let arguments: Value =
            serde_json::from_str(r#"{"amount": 100.000000000000000001}"#).unwrap();
        assert_eq!(amount.units(&arguments), Ok(10_001));
        assert!(!amount.admits(BudgetUsage::default(), 10_001));
        assert_eq!(amount.units(&json!({"amount": 49})), Ok(4_900));
        assert_eq!(amount.units(&json!({"amount": "-5"})), Ok(0));
        assert!(matches!(
            amount.units(&json!({"amount": "lots"})),
            Err(BudgetError::Amount { .. })
        ));
        assert!(matches!(
            amount.units(&json!({})),
            Err(BudgetError::Amount { .. })
        ));
        // Beyond what a counter holds: counted as the whole budget and more.
        assert_eq!(amount.units(&json!({"amount": "1e30"})), Ok(u64::MAX));
        assert!(!amount.admits(BudgetUsage::default(), u64::MAX));
    }
}

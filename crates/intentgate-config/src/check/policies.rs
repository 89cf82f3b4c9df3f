//! The checks of a side-effecting tool's `approval` and `budgets` (docs/design.md section
//! 13, "Approval and budgets"), and the core's [`ToolPolicies`] they build.
//!
//! Each field is checked for what a person can get wrong, at its line, with a fix: a
//! condition that does not parse or reads an argument the input schema lacks (or compares
//! one with a number when the schema does not make it one), tenant names, deadlines and
//! windows out of range, budgets without a limit or with a limit that is not an exact
//! positive decimal, an amount without the argument it adds up (or the other way round), a
//! subject template that names what the tool does not have. A policy that would silently do
//! nothing (an empty `approval:`, an empty tenant list) is refused too: the operator meant
//! something by writing it.
//!
//! Reads and idempotent tools record no intent, so there is nothing to hold for approval and
//! nothing a budget could count once: either key on such a tool is refused, saying so.

use std::collections::HashSet;

use intentgate_config_file::at;
use intentgate_config_file::file::{ApprovalFile, BeyondName, BudgetFile, BudgetPer};
use intentgate_config_file::source_map::Segment;
use intentgate_core::duration::{parse_duration_ms, write_duration};
use intentgate_core::fingerprint::canonical_arguments;
use intentgate_core::policy::{
    APPROVAL_DEADLINE_MS_DEFAULT, APPROVAL_DEADLINE_MS_MAX, BUDGET_WINDOW_MS_MAX,
    BUDGETS_PER_TOOL_MAX,
};
use intentgate_core::{
    ApprovalPolicy, ArgumentPath, BeyondBudget, Budget, BudgetScope, Condition, Decimal, Effect,
    KeyError, KeyTemplate, Tenant, ToolPolicies,
};
use serde_json::Value;

use super::{Checker, names};

/// Longest budget name: it is written into answers, events and metric labels.
const BUDGET_NAME_LENGTH_MAX: usize = 64;

/// The condition form, shown with every condition that does not parse.
const CONDITION_FORM: &str = "a condition compares an argument with a literal and joins \
     comparisons with `and`, `or` and `not`: `amount > 100.00`, `currency in [\"USD\", \"EUR\"]`, \
     `reason == \"fraudulent\" or amount >= 500` (operators ==, !=, <, <=, >, >=, in, not in; \
     literals are numbers, quoted strings, true and false)";

/// What the checks of one tool's policies need to know about the tool.
pub(super) struct PolicyContext<'t> {
    pub index: usize,
    pub label: &'t str,
    pub effect: Option<Effect>,
    pub input_schema: &'t Value,
    /// The input schema's top-level property names.
    pub arguments: &'t [String],
    /// The tool's sensitive arguments, when its definition could be built.
    pub sensitive: Option<&'t [ArgumentPath]>,
}

impl Checker<'_, '_> {
    /// Checks `approval` and `budgets` and builds the tool's policies: `None` when it has
    /// neither (never an empty [`ToolPolicies`]), and whenever anything was reported.
    pub(super) fn policies(
        &mut self,
        tool: &PolicyContext<'_>,
        approval: Option<ApprovalFile>,
        budgets: Vec<BudgetFile>,
    ) -> Option<ToolPolicies> {
        let index = tool.index;
        let label = tool.label;
        let approval_written = self.map.has_key(&at!["tools", index, "approval"]);
        if let Some(effect @ (Effect::Read | Effect::Idempotent)) = tool.effect {
            let effect = effect.as_str();
            let refused = [
                (
                    approval_written,
                    "approval",
                    "there is no intent to hold while a person decides",
                ),
                (
                    !budgets.is_empty(),
                    "budgets",
                    "there is no intent for a budget to count",
                ),
            ];
            for (present, field, why) in refused {
                if present {
                    self.push_at_key(
                        &at!["tools", index, field],
                        format!(
                            "{label} has `{field}`, but it is `effect: {effect}`, and only \
                             side-effecting tools record intents: {why}"
                        ),
                        format!(
                            "remove `{field}:` from this tool, or set `effect: side_effect` if \
                             calling it twice would act twice"
                        ),
                    );
                }
            }
            return None;
        }
        let reported = self.errors.len();
        if approval_written && approval.is_none() {
            self.push_at_key(
                &at!["tools", index, "approval"],
                format!("{label}: `approval:` is empty, so it holds no call for approval"),
                "write `approval: {}` to hold every call for a person's approval, or give it \
                 `when: amount > 100.00` to hold some; remove the line to hold none",
            );
        }
        let approval = approval.map(|approval| self.approval(tool, approval));
        let budgets = self.budgets(tool, budgets);
        if self.errors.len() > reported {
            return None;
        }
        let policies = ToolPolicies {
            approval: approval.flatten(),
            budgets,
        };
        (!policies.is_empty()).then_some(policies)
    }

    /// Reports at the key of `path` (`approval` in `approval: ...`), not at its value.
    fn push_at_key(
        &mut self,
        path: &[Segment<'_>],
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        let at = self.map.key(path);
        self.errors.push(at, message, fix);
    }

    /// The approval policy, or `None` when anything in it was reported.
    fn approval(
        &mut self,
        tool: &PolicyContext<'_>,
        approval: ApprovalFile,
    ) -> Option<ApprovalPolicy> {
        let index = tool.index;
        let label = tool.label;
        let reported = self.errors.len();
        let when = approval
            .when
            .as_deref()
            .and_then(|text| self.condition(tool, &at!["tools", index, "approval", "when"], text));
        if let Some(tenants) = &approval.tenants {
            if tenants.is_empty() {
                self.push(
                    &at!["tools", index, "approval", "tenants"],
                    format!("{label}: `approval.tenants` is empty, so no call would be held"),
                    "list the tenants whose calls need approval (`tenants: [acme]`), or remove \
                     `tenants:` to hold every tenant's",
                );
            }
            for (at_index, tenant) in tenants.iter().enumerate() {
                if let Err(error) = Tenant::parse(tenant) {
                    self.push(
                        &at!["tools", index, "approval", "tenants", at_index],
                        format!("{label}: `approval.tenants`: {error}"),
                        "list tenant names as callers' credentials name them, e.g. \
                         `tenants: [acme, globex]`",
                    );
                }
            }
        }
        let deadline_ms = match &approval.deadline {
            Some(text) => self.deadline(
                &at!["tools", index, "approval", "deadline"],
                &format!("{label}: `approval.deadline`"),
                text,
            ),
            None => Some(APPROVAL_DEADLINE_MS_DEFAULT),
        };
        if self.errors.len() > reported {
            return None;
        }
        Some(ApprovalPolicy {
            when,
            tenants: approval.tenants,
            deadline_ms: deadline_ms?,
        })
    }

    /// A condition, parsed and compared with the input schema.
    fn condition(
        &mut self,
        tool: &PolicyContext<'_>,
        path: &[Segment<'_>],
        text: &str,
    ) -> Option<Condition> {
        let label = tool.label;
        let condition = match Condition::parse(text) {
            Ok(condition) => condition,
            Err(error) => {
                self.push(
                    path,
                    format!(
                        "{label}: `approval.when` is not a condition: {} (at character {} of \
                         `{text}`)",
                        error.message, error.offset
                    ),
                    format!("{}; {CONDITION_FORM}", error.fix),
                );
                return None;
            }
        };
        // Without an object schema every argument would look undeclared (reported there).
        if !self.arguments_known {
            return Some(condition);
        }
        let reported = self.errors.len();
        let numeric = condition.numeric_arguments();
        for argument in condition.arguments() {
            let dotted = argument.join(".");
            if !declares(tool.input_schema, tool.arguments, &argument) {
                self.push(
                    path,
                    format!(
                        "{label}: `approval.when` reads `{dotted}`, which is not an argument of \
                         the tool"
                    ),
                    format!(
                        "use the tool's arguments ({}), or add `{}` to input_schema.properties",
                        available(tool.arguments),
                        argument[0]
                    ),
                );
            } else if numeric.contains(&argument) && !declares_decimal(tool.input_schema, &argument)
            {
                self.push(
                    path,
                    format!(
                        "{label}: `approval.when` compares `{dotted}` with a number, but the \
                         input schema declares it {}, not as a number, so calls may send it as \
                         anything",
                        declared_kind(tool.input_schema, &argument)
                    ),
                    format!(
                        "declare `{dotted}` a number (`type: number`) or a decimal string \
                         (`type: [string, number]`, `format: decimal`), or compare it with a \
                         quoted string: `{dotted} == \"...\"`"
                    ),
                );
            }
        }
        (self.errors.len() == reported).then_some(condition)
    }

    /// An approval's deadline in milliseconds (`deadline: 4h`), at most
    /// [`APPROVAL_DEADLINE_MS_MAX`].
    fn deadline(&mut self, path: &[Segment<'_>], field: &str, text: &str) -> Option<u64> {
        self.duration(
            path,
            field,
            text,
            APPROVAL_DEADLINE_MS_MAX,
            "a held call waits for a person's decision at most a week, by which the caller has \
             moved on",
            "deadline: 4h",
        )
    }

    /// A duration field (`window`, `deadline`) in milliseconds, positive and at most `max_ms`.
    fn duration(
        &mut self,
        path: &[Segment<'_>],
        field: &str,
        text: &str,
        max_ms: u64,
        why_max: &str,
        example: &str,
    ) -> Option<u64> {
        let max = write_duration(max_ms);
        match parse_duration_ms(text) {
            Ok(ms) if ms <= max_ms => Some(ms),
            Ok(_) => {
                self.push(
                    path,
                    format!("{field} is `{text}`, longer than the {max} it may be: {why_max}"),
                    format!("write at most `{max}`, e.g. `{example}`"),
                );
                None
            }
            Err(reason) => {
                self.push(
                    path,
                    format!("{field}: {reason}"),
                    format!("write a whole number and a unit, e.g. `{example}`, at most `{max}`"),
                );
                None
            }
        }
    }

    /// The budgets that passed their checks, in file order.
    fn budgets(&mut self, tool: &PolicyContext<'_>, budgets: Vec<BudgetFile>) -> Vec<Budget> {
        let index = tool.index;
        let label = tool.label;
        if budgets.len() > BUDGETS_PER_TOOL_MAX {
            self.push(
                &at!["tools", index, "budgets", BUDGETS_PER_TOOL_MAX],
                format!(
                    "{label} has {} budgets; the limit is {BUDGETS_PER_TOOL_MAX}",
                    budgets.len()
                ),
                "keep the few limits that matter (a count per subject, an amount per tenant); \
                 every budget is counted on every call",
            );
        }
        let mut seen = HashSet::new();
        let mut checked = Vec::with_capacity(budgets.len());
        for (at_index, budget) in budgets.into_iter().enumerate() {
            let base = at!["tools", index, "budgets", at_index];
            let budget_label = match &budget.name {
                Some(name) => format!("{label}, budget `{name}`"),
                None => format!("{label}, budget {}", at_index + 1),
            };
            let reported = self.errors.len();
            self.budget_name(index, at_index, label, &budget_label, &budget, &mut seen);
            let scope = self.budget_scope(tool, at_index, &budget_label, &budget);
            let window_ms = match &budget.window {
                None => {
                    self.push(
                        &base,
                        format!("{budget_label} has no `window`"),
                        "add `window: 1h` (or `24h`, `7d`): a budget counts per fixed window, \
                         which starts again on the hour or the day (UTC)",
                    );
                    None
                }
                Some(text) => self.duration(
                    &at!["tools", index, "budgets", at_index, "window"],
                    &format!("{budget_label}: `window`"),
                    text,
                    BUDGET_WINDOW_MS_MAX,
                    "a budget is a rate guard, not an accounting period",
                    "window: 24h",
                ),
            };
            if budget.count == Some(0) {
                self.push(
                    &at!["tools", index, "budgets", at_index, "count"],
                    format!("{budget_label}: `count` is 0, so every call would be beyond it"),
                    "set `count` to at least 1; to stop the tool altogether, turn it off with \
                     its kill switch (`intentgate flags`)",
                );
            }
            let amount = self.budget_amount(tool, at_index, &budget_label, &budget);
            let beyond = self.beyond(index, at_index, &budget_label, &budget);
            if self.errors.len() > reported {
                continue;
            }
            let (
                Some(name),
                Some(scope),
                Some(window_ms),
                Some((amount_max, amount_places)),
                Some(beyond),
            ) = (budget.name, scope, window_ms, amount, beyond)
            else {
                continue;
            };
            checked.push(Budget {
                name,
                scope,
                window_ms,
                count_max: budget.count,
                amount_max,
                amount_argument: budget.amount_argument,
                amount_places,
                beyond,
            });
        }
        checked
    }

    /// A budget's `name`: there, an identifier, and unique within the tool (`seen` holds the
    /// names of its earlier budgets).
    fn budget_name(
        &mut self,
        index: usize,
        at_index: usize,
        label: &str,
        budget_label: &str,
        budget: &BudgetFile,
        seen: &mut HashSet<String>,
    ) {
        let base = at!["tools", index, "budgets", at_index];
        match &budget.name {
            None => self.push(
                &base,
                format!("{budget_label} has no `name`"),
                "add `name: per-order` (1 to 64 lowercase letters, digits, `_` or `-`): \
                 answers, events and metrics name the budget by it",
            ),
            Some(name) if !is_budget_name(name) => self.push(
                &at!["tools", index, "budgets", at_index, "name"],
                format!(
                    "{label}: budget name `{name}` is not 1 to {BUDGET_NAME_LENGTH_MAX} \
                     lowercase letters, digits, `_` or `-`"
                ),
                "name the budget with a short identifier, e.g. `name: per-order`",
            ),
            Some(name) if !seen.insert(name.clone()) => self.push(
                &at!["tools", index, "budgets", at_index, "name"],
                format!("{label} has two budgets named `{name}`"),
                "give each budget its own `name:`: answers and metrics tell them apart by it",
            ),
            Some(_) => {}
        }
    }

    /// What the budget counts per: `per`, and the subject template for `per: subject`.
    fn budget_scope(
        &mut self,
        tool: &PolicyContext<'_>,
        at_index: usize,
        budget_label: &str,
        budget: &BudgetFile,
    ) -> Option<BudgetScope> {
        let index = tool.index;
        let subject_at = at!["tools", index, "budgets", at_index, "subject"];
        let Some(per) = budget.per else {
            self.push(
                &at!["tools", index, "budgets", at_index],
                format!("{budget_label} has no `per`"),
                "add `per: tool` (every call of the tool), `per: tenant` (each tenant's calls) \
                 or `per: subject` with `subject: \"{order_id}\"` (each order's calls)",
            );
            return None;
        };
        match (per, &budget.subject) {
            (BudgetPer::Tool, None) => Some(BudgetScope::Tool),
            (BudgetPer::Tenant, None) => Some(BudgetScope::Tenant),
            (BudgetPer::Tool | BudgetPer::Tenant, Some(_)) => {
                self.push(
                    &subject_at,
                    format!(
                        "{budget_label} has a `subject`, but it is `per: {}`: only `per: \
                         subject` counts per subject",
                        per.as_str()
                    ),
                    "remove `subject:`, or write `per: subject` to count each subject's calls \
                     apart",
                );
                None
            }
            (BudgetPer::Subject, None) => {
                self.push(
                    &at!["tools", index, "budgets", at_index],
                    format!("{budget_label} is `per: subject` but has no `subject`"),
                    "add `subject: \"{order_id}\"`: the arguments that name what the budget \
                     counts per (an order, `{customer.id}`)",
                );
                None
            }
            (BudgetPer::Subject, Some(text)) => self
                .subject(tool, &subject_at, budget_label, text)
                .map(BudgetScope::Subject),
        }
    }

    /// A budget's subject template, checked as a key template is: the tool's arguments only,
    /// none that changes per attempt, and, since the ledger keeps the subject in the clear,
    /// no sensitive argument.
    fn subject(
        &mut self,
        tool: &PolicyContext<'_>,
        path: &[Segment<'_>],
        budget_label: &str,
        text: &str,
    ) -> Option<KeyTemplate> {
        let names: Vec<&str> = tool.arguments.iter().map(String::as_str).collect();
        let checked = KeyTemplate::parse(text).and_then(|template| {
            if self.arguments_known {
                template.check_arguments(&names)?;
            }
            Ok(template)
        });
        let template = match checked {
            Ok(template) => template,
            Err(error) => {
                let (message, fix) = subject_error(budget_label, tool.arguments, &error);
                self.push(path, message, fix);
                return None;
            }
        };
        if template.uses_intent_id() {
            self.push(
                path,
                format!(
                    "{budget_label}: the subject uses `{{intent_id}}`, which is new for every \
                     intent, so no two intents would share the budget"
                ),
                "name the arguments the budget is per, e.g. `subject: \"{order_id}\"`",
            );
            return None;
        }
        if let Some(sensitive) = tool.sensitive {
            let mut marked = template.clone();
            marked.mark_sensitive(sensitive);
            if let Some(name) = marked.sensitive_names().next() {
                self.push(
                    path,
                    format!(
                        "{budget_label}: the subject uses sensitive argument `{name}`, and the \
                         ledger would keep it in the clear in the budget's counts"
                    ),
                    "count per an argument that is not sensitive (an order, a customer id)",
                );
                return None;
            }
        }
        Some(template)
    }

    /// A budget's amount limit and its places (`Some((None, 0))` without one), with
    /// `amount_argument` checked against the input schema.
    fn budget_amount(
        &mut self,
        tool: &PolicyContext<'_>,
        at_index: usize,
        budget_label: &str,
        budget: &BudgetFile,
    ) -> Option<(Option<Decimal>, u32)> {
        let index = tool.index;
        let amount_at = at!["tools", index, "budgets", at_index, "amount"];
        let argument_at = at!["tools", index, "budgets", at_index, "amount_argument"];
        let reported = self.errors.len();
        let limit = match &budget.amount {
            None => None,
            Some(text) => match amount_limit(text) {
                Ok(limit) => Some(limit),
                Err(reason) => {
                    self.push(
                        &amount_at,
                        format!("{budget_label}: `amount` {reason}"),
                        "write the most the window may add up to as an exact decimal with the \
                         places it is counted in, e.g. `amount: \"5000.00\"` (counted in cents)",
                    );
                    None
                }
            },
        };
        match (&budget.amount, &budget.amount_argument) {
            (None, None) if budget.count.is_none() => self.push(
                &at!["tools", index, "budgets", at_index],
                format!("{budget_label} limits nothing: it has neither `count` nor `amount`"),
                "add `count: 10` (intents per window), or `amount: \"5000.00\"` with \
                 `amount_argument: amount` (the sum of an argument per window), or both",
            ),
            (Some(_), None) => self.push(
                &amount_at,
                format!(
                    "{budget_label} has an `amount` but no `amount_argument`, so there is \
                     nothing to add up"
                ),
                "add `amount_argument: amount`: the argument that holds each call's amount",
            ),
            (None, Some(_)) => self.push(
                &argument_at,
                format!("{budget_label} has an `amount_argument` but no `amount` to limit it to"),
                "add `amount: \"5000.00\"` (the most the window may add up to), or remove \
                 `amount_argument:`",
            ),
            (Some(_), Some(argument)) => {
                self.amount_argument(tool, &argument_at, budget_label, argument)
            }
            (None, None) => {}
        }
        if self.errors.len() > reported {
            return None;
        }
        Some(match limit {
            Some((max, places)) => (Some(max), places),
            None => (None, 0),
        })
    }

    /// `amount_argument`: a top-level argument that the input schema makes a number.
    fn amount_argument(
        &mut self,
        tool: &PolicyContext<'_>,
        path: &[Segment<'_>],
        budget_label: &str,
        argument: &str,
    ) {
        if !self.arguments_known {
            return;
        }
        if !tool.arguments.iter().any(|name| name == argument) {
            let nested = argument.contains('.');
            self.push(
                path,
                if nested {
                    format!(
                        "{budget_label}: `amount_argument` is `{argument}`, but an amount is \
                         read from a top-level argument"
                    )
                } else {
                    format!(
                        "{budget_label}: `amount_argument` is `{argument}`, which is not an \
                         argument of the tool"
                    )
                },
                format!(
                    "name one of the tool's arguments ({}), or add `{argument}` to \
                     input_schema.properties as a number",
                    available(tool.arguments)
                ),
            );
            return;
        }
        let path_of = [argument.to_owned()];
        if !declares_decimal(tool.input_schema, &path_of) {
            self.push(
                path,
                format!(
                    "{budget_label}: `amount_argument` `{argument}` is declared {} in the input \
                     schema, not as a number, so a call could send a value that is no amount",
                    declared_kind(tool.input_schema, &path_of)
                ),
                format!(
                    "declare `{argument}` a number (`type: number`) or a decimal string \
                     (`type: [string, number]`, `format: decimal`), or name the argument that \
                     holds the amount"
                ),
            );
        }
    }

    /// What a call beyond the budget gets, with its deadline when it is held.
    fn beyond(
        &mut self,
        index: usize,
        at_index: usize,
        budget_label: &str,
        budget: &BudgetFile,
    ) -> Option<BeyondBudget> {
        let deadline_at = at!["tools", index, "budgets", at_index, "deadline"];
        match (budget.beyond, &budget.deadline) {
            (BeyondName::Refuse, None) => Some(BeyondBudget::Refuse),
            (BeyondName::Refuse, Some(_)) => {
                self.push(
                    &deadline_at,
                    format!(
                        "{budget_label} has a `deadline`, but a call beyond it is refused \
                         (`beyond: refuse`, the default), so nothing waits for a decision"
                    ),
                    "remove `deadline:`, or write `beyond: approval` to hold such calls for a \
                     person's approval",
                );
                None
            }
            (BeyondName::Approval, None) => Some(BeyondBudget::Approval {
                deadline_ms: APPROVAL_DEADLINE_MS_DEFAULT,
            }),
            (BeyondName::Approval, Some(text)) => self
                .deadline(&deadline_at, &format!("{budget_label}: `deadline`"), text)
                .map(|deadline_ms| BeyondBudget::Approval { deadline_ms }),
        }
    }
}

/// 1 to 64 lowercase ASCII letters, digits, `_` or `-`.
fn is_budget_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= BUDGET_NAME_LENGTH_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

/// A budget's `amount` as written (`"5000.00"`, or the text of an unquoted `5000.00`): the
/// limit and the places it is counted in, or why it is not a usable limit (a sentence that
/// quotes the text). Plain digits with an optional point only: the places are those written,
/// which a sign, an exponent or a bare point would leave unclear.
fn amount_limit(text: &str) -> Result<(Decimal, u32), String> {
    let decimal = Decimal::parse(text).map_err(|error| error.to_string())?;
    if text.trim_start().starts_with('-') {
        return Err(format!("is `{text}`; a budget's amount must be above 0"));
    }
    let (whole, places) = text.split_once('.').unwrap_or((text, ""));
    let plain = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && (!text.contains('.') || !places.is_empty())
        && places.bytes().all(|b| b.is_ascii_digit());
    if !plain {
        return Err(format!(
            "is `{text}`; write it as plain digits with an optional point (`5000.00`), without \
             a sign, spaces or an exponent, so that its places say what it is counted in"
        ));
    }
    let places = places.len() as u32;
    match decimal.units_rounded_up(places) {
        Some(0) => Err(format!("is `{text}`; a budget's amount must be above 0")),
        Some(_) => Ok((decimal, places)),
        None => Err(format!(
            "`{text}` is too large to count: in units of its last place it passes what a \
             counter holds ({})",
            u64::MAX
        )),
    }
}

/// Whether the input schema declares the argument at `path`: its first name is a top-level
/// property, and each member below it is one its parent lists, or may be (a parent that
/// lists no properties, or does not close itself with `additionalProperties: false`).
fn declares(input_schema: &Value, arguments: &[String], path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    if !arguments.contains(first) {
        return false;
    }
    let mut node = &input_schema["properties"][first];
    for member in rest {
        let typed = schema_types(node);
        if !typed.is_empty() && !typed.iter().any(|kind| kind == "object") {
            return false;
        }
        match node
            .get("properties")
            .and_then(|properties| properties.get(member))
        {
            Some(schema) => node = schema,
            None if node.get("additionalProperties") == Some(&Value::Bool(false)) => {
                return false;
            }
            // Open: the member may be there, and nothing below it can be checked.
            None => return true,
        }
    }
    true
}

/// Whether the input schema makes the argument at `path` a number, or a string the
/// fingerprint reads as one (`type: [string, number]`, an `anyOf` with a number branch,
/// `format: decimal`, a decimal `pattern`). Asked of the fingerprint's own reading
/// ([`canonical_arguments`]), so the check and the gate agree on what a decimal is.
fn declares_decimal(input_schema: &Value, path: &[String]) -> bool {
    let probe = path
        .iter()
        .rev()
        .fold(Value::String("1.5".to_owned()), |inner, name| {
            let mut object = serde_json::Map::new();
            object.insert(name.clone(), inner);
            Value::Object(object)
        });
    let canonical = canonical_arguments(input_schema, &probe);
    let pointer: String = path.iter().map(|name| format!("/{name}")).collect();
    canonical
        .pointer(&pointer)
        .is_some_and(|value| value.is_number())
}

/// How the schema declares the argument at `path`, for messages: "as string", "without a
/// type".
fn declared_kind(input_schema: &Value, path: &[String]) -> String {
    let node = path.iter().try_fold(input_schema, |schema, name| {
        schema.get("properties")?.get(name)
    });
    let types = node.map(schema_types).unwrap_or_default();
    if types.is_empty() {
        "without a type".to_owned()
    } else {
        format!("as {}", types.join(" or "))
    }
}

/// The types a schema node declares (`type: string`, `type: [string, null]`).
fn schema_types(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.clone()],
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// "its arguments are `a`, `b`", for fixes.
fn available(arguments: &[String]) -> String {
    if arguments.is_empty() {
        "the tool has no arguments yet".to_owned()
    } else {
        format!("its arguments are {}", names(arguments))
    }
}

/// The message and fix for a subject template the core refused.
fn subject_error(budget_label: &str, arguments: &[String], error: &KeyError) -> (String, String) {
    match error {
        KeyError::Syntax {
            position, reason, ..
        } => (
            format!(
                "{budget_label}: the subject is not a template: {reason} at character {position}"
            ),
            "write placeholders like `{order_id}` or `{customer.id}`, and `{{` or `}}` for a \
             literal brace"
                .to_owned(),
        ),
        KeyError::Constant(_) => (
            format!(
                "{budget_label}: the subject has no placeholder, so every call would be one \
                 subject"
            ),
            "name the arguments the budget counts per, e.g. `subject: \"{order_id}\"`, or \
             count per tenant with `per: tenant`"
                .to_owned(),
        ),
        KeyError::NotAnArgument { name } => (
            format!(
                "{budget_label}: the subject uses `{{{name}}}`, which is not an argument of the \
                 tool"
            ),
            format!(
                "use only the tool's arguments ({}), or add `{name}` to input_schema.properties",
                available(arguments)
            ),
        ),
        KeyError::PerAttempt { name } => (
            format!(
                "{budget_label}: the subject uses `{{{name}}}`, which changes on every attempt, \
                 so every call would be a subject of its own and the budget would never fill"
            ),
            "count per the business fields the budget is about, e.g. `subject: \"{order_id}\"`"
                .to_owned(),
        ),
        other => (
            format!("{budget_label}: the subject can't be used: {other}"),
            "write the subject as a template of the tool's arguments, e.g. \
             `subject: \"{order_id}\"`"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn amounts_are_read_with_the_places_they_are_written_with() {
        let (max, places) = amount_limit("5000.00").unwrap();
        assert_eq!(max, Decimal::parse("5000").unwrap());
        assert_eq!(places, 2);
        assert_eq!(amount_limit("5000").unwrap().1, 0);
        assert_eq!(amount_limit("0.5").unwrap().1, 1);
        for refused in ["0", "0.00", "-5", "5e3", ".5", "5.", "+5", "lots", " 5", ""] {
            assert!(amount_limit(refused).is_err(), "{refused:?}");
        }
        assert!(
            amount_limit("99999999999999999999.00")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn decimals_are_whatever_the_fingerprint_reads_as_one() {
        let schema = json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "price": {"type": ["string", "number"]},
                "total": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                "order_id": {"type": "string"},
                "customer": {"type": "object", "properties": {"balance": {"type": "integer"}}}
            }
        });
        let path = |text: &str| -> Vec<String> { text.split('.').map(str::to_owned).collect() };
        for numeric in ["amount", "price", "total", "customer.balance"] {
            assert!(declares_decimal(&schema, &path(numeric)), "{numeric}");
        }
        assert!(!declares_decimal(&schema, &path("order_id")));
        assert!(!declares_decimal(&schema, &path("customer")));
    }

    #[test]
    fn nested_arguments_are_declared_unless_their_parent_is_closed_or_not_an_object() {
        let schema = json!({
            "type": "object",
            "properties": {
                "open": {"type": "object"},
                "closed": {"type": "object", "properties": {"a": {}}, "additionalProperties": false},
                "text": {"type": "string"}
            }
        });
        let arguments: Vec<String> = ["open", "closed", "text"].map(str::to_owned).to_vec();
        let declared = |text: &str| {
            let path: Vec<String> = text.split('.').map(str::to_owned).collect();
            declares(&schema, &arguments, &path)
        };
        assert!(declared("open.anything"));
        assert!(declared("closed.a"));
        assert!(!declared("closed.b"));
        assert!(!declared("text.length"));
        assert!(!declared("missing"));
    }
}

//! What each ledger operation decides from the rows it has read, apart from how a store
//! reads and writes them.
//!
//! Every store runs an operation the same way: inside one transaction it reads (and locks)
//! the intent, asks this module what to do, and applies the [`Write`]s of the returned
//! [`Plan`] in order before it commits. So the rules (who takes the lease, when a lease has
//! expired, when a lookup is due, which transition and which event) and the limits on what
//! is written are decided once, here, for every store alike. [`reconciliation`],
//! [`bulk_intent`] and [`check_erase`] check (and cut) what the other writes store; the
//! statements of the reads that take more than a key are built in `query`.
//!
//! **Invariant:** no I/O and no clock. Everything comes in as arguments, so these functions
//! are as deterministic as the state machine they call.

use std::collections::BTreeMap;

use intentgate_core::IntentStatus;
use intentgate_core::limits::{
    ACTOR_LENGTH_MAX, ARGUMENTS_BYTES_MAX, CALLER_KEY_LENGTH_MAX, EVENT_DETAIL_LENGTH_MAX,
    EXTERNAL_ID_LENGTH_MAX, INTENT_ID_LENGTH_MAX, INTENT_KEY_LENGTH_MAX, LEASE_OWNER_LENGTH_MAX,
    RESULT_BYTES_MAX, TENANT_LENGTH_MAX, TOOL_NAME_LENGTH_MAX,
};
use intentgate_core::policy::{BudgetUsage, admits};
use intentgate_core::text::cut;
use serde_json::{Value, json};

use crate::process::{
    HOST_LENGTH_MAX, INSTANCE_LENGTH_MAX, PID_SCOPE_LENGTH_MAX, ProcessEnd, ProcessRecord,
    ProcessRegistration,
};
use crate::record::{
    Approval, BudgetUsageRow, Decision, IntentId, IntentRecord, ReconciliationRun, StatusCount,
    StoredMismatch, ToolFlag,
};
use crate::{
    ApprovalRequest, BUDGET_BUCKET_LENGTH_MAX, BUDGET_NAME_LENGTH_MAX, Begin, BeginRequest, Bound,
    BudgetCharge, CallPolicies, CallerKey, DENIED_BY, Decide, Decided, Erase, Erased, Erasure,
    Finish, Finished, HELD_BY_LENGTH_MAX, HeldIntent, Hold, LedgerError,
    MISMATCH_DETAIL_LENGTH_MAX, MISMATCH_EXTERNAL_IDS_BYTES_MAX, MISMATCH_EXTERNAL_IDS_MAX,
    MISMATCH_KIND_LENGTH_MAX, MISMATCH_SEVERITIES, MISMATCH_SUBJECT_LENGTH_MAX,
    RECONCILIATION_MISMATCHES_STORED_MAX, RECONCILIATION_SUMMARY_BYTES_MAX, Renew, Renewed,
    Resolve, SUMMARY_MISMATCHES_NOT_STORED,
};

/// The writes an operation makes, in order, and what it answers once they are committed.
#[derive(Debug)]
pub struct Plan<T> {
    pub writes: Vec<Write>,
    pub outcome: T,
    /// Whether a caller other than the writer may be waiting for this change (true unless
    /// the plan knows otherwise). A store that wakes the waiters of other replicas at some
    /// cost (PostgreSQL's `NOTIFY`, which makes concurrent commits take turns) sends the
    /// wake-up only when true.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub watched: bool,
}

impl<T> Plan<T> {
    /// A plan of `writes` that answers `outcome`; watched, as any plan is unless it knows
    /// otherwise.
    pub(crate) fn new(writes: Vec<Write>, outcome: T) -> Plan<T> {
        Plan {
            writes,
            outcome,
            watched: true,
        }
    }

    /// A plan that writes nothing (more).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn outcome(outcome: T) -> Plan<T> {
        Plan::new(Vec::new(), outcome)
    }
}

/// One write of a plan.
#[derive(Debug)]
pub enum Write {
    /// Store the intent's `call_count` and `last_seen_ms`, nothing else.
    Counts(IntentRecord),
    /// Store every mutable column of the intent.
    Intent(StoredIntent),
    /// Append one row to the event log.
    Event(NewEvent),
    /// Insert the intent's approval, or replace it (one row per intent: its latest request).
    Approval(Approval),
    /// Count one more intent in a budget's window.
    Budget(BudgetCount),
}

/// One intent counted by a budget, as a store adds it to the window's row (inserted with
/// the intent's count and units, or added to them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetCount {
    pub tool: String,
    pub budget: String,
    pub bucket: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    /// The intent's units as the stores keep them ([`stored_units`]); a store adds them
    /// saturating at `i64::MAX`.
    pub units: i64,
}

/// Units as the stores keep them: a signed 64-bit column, saturating at `i64::MAX` (a budget
/// that large is never reached, so the saturation changes no decision).
pub fn stored_units(units: u64) -> i64 {
    i64::try_from(units).unwrap_or(i64::MAX)
}

/// What a stored count means to [`admits`] (a column the schema keeps non-negative).
pub fn budget_usage(count: i64, units: i64) -> BudgetUsage {
    BudgetUsage {
        count: u64::try_from(count).unwrap_or(0),
        units: u64::try_from(units).unwrap_or(0),
    }
}

fn budget_count(tool: &str, charge: &BudgetCharge) -> Write {
    Write::Budget(BudgetCount {
        tool: tool.to_owned(),
        budget: charge.budget.clone(),
        bucket: charge.bucket.clone(),
        window_start_ms: charge.window_start_ms,
        window_end_ms: charge.window_end_ms,
        units: stored_units(charge.units),
    })
}

/// An intent checked against the limits, with its result serialised once.
#[derive(Debug)]
pub struct StoredIntent {
    pub intent: IntentRecord,
    /// `intent.result` as JSON text.
    pub result: Option<String>,
}

/// An intent that does not exist yet, checked against the limits.
#[derive(Debug)]
pub struct NewIntent {
    /// The row to insert (`id` is 0 until the store has inserted it).
    pub intent: IntentRecord,
    /// `intent.arguments` as JSON text.
    pub arguments: String,
}

/// One row of the event log, as it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub intent_id: Option<IntentId>,
    pub tenant: String,
    pub tool: String,
    pub at_ms: i64,
    pub kind: &'static str,
    pub from_status: Option<IntentStatus>,
    pub to_status: Option<IntentStatus>,
    pub attempt: Option<u32>,
    pub actor: Option<String>,
    /// Cut to the event log's limit.
    pub detail: Option<String>,
}

impl NewEvent {
    /// An event about `intent`, at its current attempt.
    fn about(intent: &IntentRecord, at_ms: i64, kind: &'static str, detail: &str) -> NewEvent {
        NewEvent {
            intent_id: Some(intent.id),
            tenant: intent.tenant.clone(),
            tool: intent.tool.clone(),
            at_ms,
            kind,
            from_status: None,
            to_status: None,
            attempt: Some(intent.attempt),
            actor: None,
            detail: Some(bounded(detail).to_owned()),
        }
    }
}

pub fn check_length(field: &'static str, text: &str, limit: usize) -> Result<(), LedgerError> {
    if text.len() > limit {
        return Err(LedgerError::TooLarge {
            field,
            length: text.len(),
            limit,
        });
    }
    Ok(())
}

/// Cuts free text to the event log's limit, at a character boundary.
pub fn bounded(text: &str) -> &str {
    cut(text, EVENT_DETAIL_LENGTH_MAX)
}

/// Checks a name the schema requires to be non-empty and bounded.
fn check_name(field: &'static str, text: &str, limit: usize) -> Result<(), LedgerError> {
    if text.is_empty() {
        return Err(LedgerError::Invalid {
            field,
            reason: "is empty".to_owned(),
        });
    }
    check_length(field, text, limit)
}

/// A count as the stores keep it (a signed 64-bit column).
fn count_column(field: &'static str, count: u64) -> Result<i64, LedgerError> {
    i64::try_from(count).map_err(|_| LedgerError::Invalid {
        field,
        reason: format!("is {count}, over the largest storable count ({})", i64::MAX),
    })
}

fn json_text(field: &'static str, value: &Value, limit: usize) -> Result<String, LedgerError> {
    let text = value.to_string();
    check_length(field, &text, limit)?;
    Ok(text)
}

/// Checks the mutable columns of `intent` against their limits.
fn stored(intent: IntentRecord) -> Result<StoredIntent, LedgerError> {
    let result = intent
        .result
        .as_ref()
        .map(|value| json_text("result", value, RESULT_BYTES_MAX))
        .transpose()?;
    if let Some(id) = &intent.external_id {
        check_length("external_id", id, EXTERNAL_ID_LENGTH_MAX)?;
    }
    if let Some(by) = &intent.resolved_by {
        check_length("resolved_by", by, ACTOR_LENGTH_MAX)?;
    }
    Ok(StoredIntent { intent, result })
}

/// Appends a checked status change (or, with the same status, a lease change) and its event.
fn transition(
    writes: &mut Vec<Write>,
    before: &IntentRecord,
    after: IntentRecord,
    at_ms: i64,
    actor: Option<&str>,
    detail: &str,
) -> Result<IntentRecord, LedgerError> {
    if before.status != after.status {
        before.status.transition(after.status)?;
    }
    assert_eq!(before.id, after.id, "a transition keeps the intent");
    let kind = if before.status == after.status {
        "lease"
    } else {
        "transition"
    };
    let event = NewEvent {
        from_status: Some(before.status),
        to_status: Some(after.status),
        actor: actor.map(str::to_owned),
        ..NewEvent::about(&after, at_ms, kind, detail)
    };
    writes.push(Write::Intent(stored(after.clone())?));
    writes.push(Write::Event(event));
    Ok(after)
}

/// Length of a fingerprint as the ledger keeps it: a SHA-256 in hex.
const FINGERPRINT_HEX_LENGTH: usize = 64;

/// What `bind_caller_key` checks before it reads or writes anything: what the schema's
/// `caller_keys` table would refuse, said in words.
pub fn check_caller_key(binding: &CallerKey) -> Result<(), LedgerError> {
    check_name("tenant", &binding.tenant, TENANT_LENGTH_MAX)?;
    check_name("tool", &binding.tool, TOOL_NAME_LENGTH_MAX)?;
    check_name("caller_key", &binding.caller_key, CALLER_KEY_LENGTH_MAX)?;
    check_name("intent_key", &binding.intent_key, INTENT_KEY_LENGTH_MAX)?;
    if binding.fingerprint.len() != FINGERPRINT_HEX_LENGTH
        || !binding
            .fingerprint
            .bytes()
            .all(|byte| byte.is_ascii_hexdigit())
    {
        return Err(LedgerError::Invalid {
            field: "fingerprint",
            reason: format!(
                "must be {FINGERPRINT_HEX_LENGTH} hex digits (a SHA-256 of the arguments)"
            ),
        });
    }
    Ok(())
}

/// What a caller key found `stored` (bound in the same tenant and tool) means for the
/// binding `asked`: the same intent when both the key and the fingerprint match, else another.
pub fn bound(stored: CallerKey, asked: &CallerKey) -> Bound {
    if stored.intent_key == asked.intent_key && stored.fingerprint == asked.fingerprint {
        Bound::Same
    } else {
        Bound::Other(stored)
    }
}

/// What `begin` checks before it reads anything: the lease owner, and what its policies
/// would store (who asked, the application's intent id, the budgets' names and windows).
pub fn check_begin(request: &BeginRequest) -> Result<(), LedgerError> {
    check_length("lease_owner", &request.lease_owner, LEASE_OWNER_LENGTH_MAX)?;
    if let Some(policies) = &request.policies {
        check_length("requested_by", &policies.requested_by, ACTOR_LENGTH_MAX)?;
        if let Some(id) = &policies.intent_id {
            check_length("intent_id", id, INTENT_ID_LENGTH_MAX)?;
        }
        check_charges(&policies.budgets)?;
    }
    Ok(())
}

/// Checks what a budget's row would store: a name and a bucket within their limits, and a
/// window that ends after it starts.
fn check_charges(charges: &[BudgetCharge]) -> Result<(), LedgerError> {
    for charge in charges {
        check_name("budget", &charge.budget, BUDGET_NAME_LENGTH_MAX)?;
        check_name("bucket", &charge.bucket, BUDGET_BUCKET_LENGTH_MAX)?;
        if charge.window_end_ms <= charge.window_start_ms {
            return Err(LedgerError::Invalid {
                field: "window_end_ms",
                reason: format!(
                    "is {}, not after the window's start {} (budget {})",
                    charge.window_end_ms, charge.window_start_ms, charge.budget
                ),
            });
        }
    }
    Ok(())
}

/// The row a registration stores (a running process, its host name cut to its limit), or
/// why it is refused: an instance that is empty, over its limit or holds a `/` (lease owners
/// are read back to their instance up to the first `/`), a pid scope over its limit, or a
/// silence that is not positive. Those are bugs of the caller.
pub fn registration(registration: &ProcessRegistration) -> Result<ProcessRecord, LedgerError> {
    check_name("instance", &registration.instance, INSTANCE_LENGTH_MAX)?;
    if registration.instance.contains('/') {
        return Err(LedgerError::Invalid {
            field: "instance",
            reason: format!(
                "`{}` holds a `/`, which ends the instance in a lease owner",
                registration.instance
            ),
        });
    }
    check_length("pid_scope", &registration.pid_scope, PID_SCOPE_LENGTH_MAX)?;
    if registration.silent_after_ms <= 0 {
        return Err(LedgerError::Invalid {
            field: "silent_after_ms",
            reason: format!("is {}; it must be positive", registration.silent_after_ms),
        });
    }
    Ok(ProcessRecord {
        instance: registration.instance.clone(),
        host: cut(&registration.host, HOST_LENGTH_MAX).to_owned(),
        pid_scope: registration.pid_scope.clone(),
        pid: registration.pid,
        started_ms: registration.now_ms,
        heartbeat_ms: registration.now_ms,
        silent_after_ms: registration.silent_after_ms,
        ended: None,
        ended_ms: None,
    })
}

/// The row of an intent seen for the first time, checked against the limits. The store
/// inserts it, sets its id, logs [`created`] and goes on with [`begin_new`].
pub fn new_intent(request: &BeginRequest) -> Result<NewIntent, LedgerError> {
    check_length("tenant", &request.tenant, TENANT_LENGTH_MAX)?;
    check_length("tool", &request.tool, TOOL_NAME_LENGTH_MAX)?;
    check_length("key", &request.key, INTENT_KEY_LENGTH_MAX)?;
    check_length("lease_owner", &request.lease_owner, LEASE_OWNER_LENGTH_MAX)?;
    let arguments = json_text("arguments", &request.arguments, ARGUMENTS_BYTES_MAX)?;
    let intent = IntentRecord {
        id: 0,
        tenant: request.tenant.clone(),
        tool: request.tool.clone(),
        key: request.key.clone(),
        fingerprint: request.fingerprint.clone(),
        arguments: request.arguments.clone(),
        status: IntentStatus::Pending,
        attempt: 0,
        epoch: 1,
        lease_owner: None,
        lease_expires_ms: None,
        result: None,
        external_id: None,
        resolved_by: None,
        call_count: u64::from(request.count_call),
        first_seen_ms: request.now_ms,
        last_seen_ms: request.now_ms,
        updated_ms: request.now_ms,
        last_lookup_ms: None,
        resend_stopped: None,
    };
    Ok(NewIntent { intent, arguments })
}

/// The event of a newly inserted intent.
pub fn created(intent: &IntentRecord, at_ms: i64) -> NewEvent {
    assert_ne!(intent.id, 0, "an intent is logged once it has an id");
    NewEvent {
        to_status: Some(IntentStatus::Pending),
        ..NewEvent::about(intent, at_ms, "created", "")
    }
}

/// A new intent's first `begin` as one insert: the row as [`begin_new`] leaves it
/// (`in_flight`, attempt 1, this caller's lease) and the events of its creation and first
/// attempt, or, for an intent its policies hold, the row `pending` with its request for
/// approval. The store inserts the row, which gives it its id ([`Fresh::inserted`]), and
/// appends the rest: no row is written twice, and on PostgreSQL the insert needs no read of
/// the key before it.
#[derive(Debug)]
pub struct Fresh {
    /// The row to insert; `id` is a placeholder until [`Fresh::inserted`].
    pub row: NewIntent,
    events: Vec<NewEvent>,
    /// A held intent's request for approval (its `intent` set once inserted).
    approval: Option<Approval>,
    /// The budgets that count an executed intent ([`Write::Budget`]).
    budgets: Vec<Write>,
}

impl Fresh {
    /// The events to log with the row, in order; their `intent_id` is the row's, once it
    /// is inserted.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn events(&self) -> &[NewEvent] {
        &self.events
    }

    /// Whether the row and its events are all there is to write (no approval, no budget),
    /// so that a store may send them in one go.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn events_only(&self) -> bool {
        self.approval.is_none() && self.budgets.is_empty()
    }

    /// The plan once the row is inserted with `id`: its events, its approval or its budget
    /// counts, and the intent to execute (or held).
    pub fn inserted(self, id: IntentId) -> Plan<Begin> {
        let Fresh {
            row,
            events,
            approval,
            budgets,
        } = self;
        let mut writes: Vec<Write> = events
            .into_iter()
            .map(|event| {
                Write::Event(NewEvent {
                    intent_id: Some(id),
                    ..event
                })
            })
            .collect();
        let intent = IntentRecord { id, ..row.intent };
        let outcome = match approval {
            Some(approval) => {
                let approval = Approval {
                    intent: id,
                    ..approval
                };
                writes.push(Write::Approval(approval.clone()));
                Begin::Held(intent, approval, ApprovalRequest::Made)
            }
            None => Begin::Execute(intent),
        };
        writes.extend(budgets);
        Plan::new(writes, outcome)
    }
}

/// The budgets whose rows `begin` reads before it decides on a key it found no intent for:
/// those of its policies, in order (none without policies).
pub fn charges(request: &BeginRequest) -> &[BudgetCharge] {
    request
        .policies
        .as_ref()
        .map_or(&[], |policies| policies.budgets.as_slice())
}

/// What `begin` does with a key it found no intent for.
#[derive(Debug)]
pub enum NewCall {
    /// Beyond a budget that refuses: answer this ([`Begin::OverBudget`]), writing nothing.
    Refused(Begin),
    /// Insert the row and apply the rest once it has its id ([`Fresh::inserted`]).
    Insert(Fresh),
}

/// `begin` on a key with no intent, given what each budget of [`charges`] has `used` in its
/// window (in the same order; zero for a window with no row). Without policies, as
/// [`begin_fresh`]. With them (the rules of [`CallPolicies`]): beyond a refusing budget,
/// refused; held by the approval policy or by full holding budgets, inserted `pending` with
/// one request for approval (every reason named in `held_by`, the earliest deadline) and
/// counted by no budget; else counted by every budget, and executed.
pub fn begin_new_call(
    request: &BeginRequest,
    used: &[BudgetUsage],
) -> Result<NewCall, LedgerError> {
    let Some(policies) = &request.policies else {
        return Ok(NewCall::Insert(begin_fresh(request)?));
    };
    assert_eq!(
        used.len(),
        policies.budgets.len(),
        "one usage read per budget"
    );
    let NewIntent {
        mut intent,
        arguments,
    } = new_intent(request)?;
    let mut held: Vec<(String, i64)> = policies
        .hold
        .iter()
        .map(|hold| (hold.held_by.clone(), hold.deadline_ms))
        .collect();
    for (charge, used) in policies.budgets.iter().zip(used) {
        if admits(*used, charge.units, charge.count_max, charge.units_max) {
            continue;
        }
        match charge.hold_deadline_ms {
            None => {
                return Ok(NewCall::Refused(Begin::OverBudget {
                    budget: charge.budget.clone(),
                }));
            }
            Some(deadline_ms) => held.push((format!("budget {}", charge.budget), deadline_ms)),
        }
    }
    let Some(deadline_ms) = held.iter().map(|(_, deadline_ms)| *deadline_ms).min() else {
        let mut fresh = begin_fresh(request)?;
        fresh.budgets = policies
            .budgets
            .iter()
            .map(|charge| budget_count(&request.tool, charge))
            .collect();
        return Ok(NewCall::Insert(fresh));
    };
    let held_by: Vec<&str> = held.iter().map(|(held_by, _)| held_by.as_str()).collect();
    // Any id: the events and the approval get the store's once the row is inserted.
    intent.id = IntentId::MAX;
    let approval = approval_request(
        &intent,
        policies,
        &held_by.join("; "),
        deadline_ms,
        request.now_ms,
    );
    let events = vec![
        created(&intent, request.now_ms),
        held_event(&intent, None, &approval, request.now_ms),
    ];
    Ok(NewCall::Insert(Fresh {
        row: NewIntent { intent, arguments },
        events,
        approval: Some(approval),
        budgets: Vec::new(),
    }))
}

/// A request for approval of `intent`, open, made at `now_ms`.
fn approval_request(
    intent: &IntentRecord,
    policies: &CallPolicies,
    held_by: &str,
    deadline_ms: i64,
    now_ms: i64,
) -> Approval {
    Approval {
        intent: intent.id,
        tenant: intent.tenant.clone(),
        tool: intent.tool.clone(),
        requested_by: policies.requested_by.clone(),
        requested_ms: now_ms,
        deadline_ms,
        held_by: cut(held_by, HELD_BY_LENGTH_MAX).to_owned(),
        intent_id: policies.intent_id.clone(),
        decision: None,
        decided_by: None,
        decided_ms: None,
        reason: None,
    }
}

/// The `approval` event of an intent held (from `from`, `None` for a new one), in the name
/// of who asked.
fn held_event(
    intent: &IntentRecord,
    from: Option<IntentStatus>,
    approval: &Approval,
    at_ms: i64,
) -> NewEvent {
    let detail = format!("held for approval: {}", approval.held_by);
    NewEvent {
        from_status: from,
        to_status: Some(intent.status),
        actor: Some(approval.requested_by.clone()).filter(|by| !by.is_empty()),
        ..NewEvent::about(intent, at_ms, "approval", &detail)
    }
}

/// Appends a change of a held intent (or of its approval: with the same status) and its
/// `approval` event, checked by the state machine.
fn approval_change(
    writes: &mut Vec<Write>,
    before: &IntentRecord,
    after: IntentRecord,
    at_ms: i64,
    actor: Option<&str>,
    detail: &str,
) -> Result<IntentRecord, LedgerError> {
    if before.status != after.status {
        before.status.transition(after.status)?;
    }
    assert_eq!(before.id, after.id, "a change keeps the intent");
    let event = NewEvent {
        from_status: Some(before.status),
        to_status: Some(after.status),
        actor: actor.map(str::to_owned),
        ..NewEvent::about(&after, at_ms, "approval", detail)
    };
    writes.push(Write::Intent(stored(after.clone())?));
    writes.push(Write::Event(event));
    Ok(after)
}

/// Settles a held intent whose deadline has passed: `not_executed`, its approval `expired`.
fn expire(
    writes: &mut Vec<Write>,
    intent: IntentRecord,
    mut approval: Approval,
    now_ms: i64,
) -> Result<(IntentRecord, Approval), LedgerError> {
    let mut next = intent.clone();
    next.status = IntentStatus::NotExecuted;
    next.lease_owner = None;
    next.lease_expires_ms = None;
    next.updated_ms = now_ms;
    approval.decision = Some(Decision::Expired);
    approval.decided_by = None;
    approval.decided_ms = Some(now_ms);
    let detail = format!("expired: nobody decided by {}", approval.deadline_ms);
    let next = approval_change(writes, &intent, next, now_ms, None, &detail)?;
    writes.push(Write::Approval(approval.clone()));
    Ok((next, approval))
}

/// Holds a `not_executed` intent again, with a new request for approval.
fn hold_again(
    mut writes: Vec<Write>,
    intent: IntentRecord,
    request: &BeginRequest,
    policies: &CallPolicies,
    hold: &Hold,
) -> Result<Plan<Begin>, LedgerError> {
    let mut next = intent.clone();
    next.status = IntentStatus::Pending;
    next.lease_owner = None;
    next.lease_expires_ms = None;
    next.updated_ms = request.now_ms;
    let approval = approval_request(
        &next,
        policies,
        &hold.held_by,
        hold.deadline_ms,
        request.now_ms,
    );
    intent.status.transition(next.status)?;
    writes.push(Write::Intent(stored(next.clone())?));
    writes.push(Write::Event(held_event(
        &next,
        Some(intent.status),
        &approval,
        request.now_ms,
    )));
    writes.push(Write::Approval(approval.clone()));
    Ok(Plan::new(
        writes,
        Begin::Held(next, approval, ApprovalRequest::Made),
    ))
}

/// Whether `begin` must read the approval of `intent` before it decides: a `pending` intent
/// may be held (whatever the tool's policies say now: a request once made stays until it is
/// decided or lapses), and a `not_executed` one is held again unless it was approved. Any
/// other intent, and every intent of a tool without an approval policy that is not
/// `pending`, costs no read.
pub fn approval_to_read(intent: &IntentRecord, request: &BeginRequest) -> bool {
    match intent.status {
        IntentStatus::Pending => true,
        IntentStatus::NotExecuted => request
            .policies
            .as_ref()
            .is_some_and(|policies| policies.hold.is_some()),
        _ => false,
    }
}

/// `begin` on a `not_executed` intent: held again when its tool's approval policy holds
/// the call and it has no approval of its own, else a new attempt.
fn begin_not_executed(
    writes: Vec<Write>,
    intent: IntentRecord,
    request: &BeginRequest,
    approval: Option<&Approval>,
) -> Result<Plan<Begin>, LedgerError> {
    let approved = approval.is_some_and(|approval| approval.decision == Some(Decision::Approved));
    match &request.policies {
        Some(policies) if !approved => match &policies.hold {
            Some(hold) => hold_again(writes, intent, request, policies, hold),
            None => start_attempt(writes, intent, request, false),
        },
        _ => start_attempt(writes, intent, request, false),
    }
}

/// The row and events of a key seen for the first time, whose first `begin` executes it.
pub fn begin_fresh(request: &BeginRequest) -> Result<Fresh, LedgerError> {
    let NewIntent {
        mut intent,
        arguments,
    } = new_intent(request)?;
    // Any id: the events and the row get the store's once the row is inserted.
    intent.id = IntentId::MAX;
    let created = created(&intent, request.now_ms);
    let Plan {
        writes, outcome, ..
    } = begin_new(intent, request)?;
    let Begin::Execute(intent) = outcome else {
        unreachable!("a new intent's first begin executes it")
    };
    let mut events = vec![created];
    for write in writes {
        match write {
            Write::Event(event) => events.push(event),
            // Its columns are the row's: inserted as they are.
            Write::Intent(_) => {}
            Write::Counts(_) | Write::Approval(_) | Write::Budget(_) => {
                unreachable!("a new intent's first attempt only logs and inserts")
            }
        }
    }
    Ok(Fresh {
        row: NewIntent { intent, arguments },
        events,
        approval: None,
        budgets: Vec::new(),
    })
}

/// Takes the lease and moves the intent to `in_flight` as a new attempt.
fn start_attempt(
    mut writes: Vec<Write>,
    intent: IntentRecord,
    request: &BeginRequest,
    new_epoch: bool,
) -> Result<Plan<Begin>, LedgerError> {
    let mut next = intent.clone();
    next.status = IntentStatus::InFlight;
    // A new attempt starts clean: a retried rejection must not carry the old refusal.
    next.result = None;
    next.external_id = None;
    next.resolved_by = None;
    next.attempt += 1;
    next.epoch += u32::from(new_epoch);
    if new_epoch {
        // A new provider key: the old key's stored answer is not this one's.
        next.resend_stopped = None;
    }
    next.lease_owner = Some(request.lease_owner.clone());
    next.lease_expires_ms = Some(request.lease_expires_ms);
    next.updated_ms = request.now_ms;
    let detail = if intent.status == IntentStatus::Unknown {
        format!(
            "attempt {} re-sends unknown attempt {} with the same provider key (epoch {})",
            next.attempt, intent.attempt, next.epoch
        )
    } else {
        format!(
            "attempt {} (provider key epoch {})",
            next.attempt, next.epoch
        )
    };
    let next = transition(&mut writes, &intent, next, request.now_ms, None, &detail)?;
    Ok(Plan::new(writes, Begin::Execute(next)))
}

/// `begin` on an intent the store has just inserted (see [`new_intent`]).
pub fn begin_new(intent: IntentRecord, request: &BeginRequest) -> Result<Plan<Begin>, LedgerError> {
    assert_eq!(
        intent.status,
        IntentStatus::Pending,
        "a new intent is pending"
    );
    start_attempt(Vec::new(), intent, request, false)
}

/// The instance whose process `begin` must read before it decides on `intent`: the owner of
/// a lease that is live at `now_ms` (an expired lease needs no owner to be taken). `None`
/// when there is no such lease, or its owner names no instance.
pub fn owner_to_check(intent: &IntentRecord, now_ms: i64) -> Option<&str> {
    if !intent.lease_live(now_ms) {
        return None;
    }
    intent
        .lease_owner
        .as_deref()
        .and_then(crate::process::instance_of)
}

/// Why a registered lease owner no longer holds its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerGone {
    /// It ended: stopped cleanly or found dead.
    Ended(ProcessEnd),
    /// It has not heartbeaten for this long, longer than it registered as silent.
    Silent { silent_ms: i64 },
}

/// Whether `owner`, the registered process of a live lease's owner, is gone at `now_ms`:
/// ended, or silent for longer than its `silent_after_ms`. `None` while it lives, and for an
/// owner that is not registered (`None`), whose lease only expires.
pub fn owner_gone(owner: Option<&ProcessRecord>, now_ms: i64) -> Option<OwnerGone> {
    let owner = owner?;
    if let Some(end) = owner.ended {
        return Some(OwnerGone::Ended(end));
    }
    let silent_ms = now_ms.saturating_sub(owner.heartbeat_ms);
    (silent_ms > owner.silent_after_ms).then_some(OwnerGone::Silent { silent_ms })
}

/// What the event log says of a lease taken from a gone owner: who it was and why.
fn owner_gone_detail(owner: &ProcessRecord, gone: OwnerGone) -> String {
    let who = format!(
        "lease owner process {} (pid {} on {})",
        owner.instance, owner.pid, owner.host
    );
    match gone {
        OwnerGone::Ended(ProcessEnd::Stopped) => format!("{who} stopped"),
        OwnerGone::Ended(ProcessEnd::Dead) => format!("{who} is gone"),
        OwnerGone::Silent { silent_ms } => format!(
            "{who} stopped heartbeating {silent_ms} ms ago (silent after {} ms)",
            owner.silent_after_ms
        ),
    }
}

/// `begin` on an intent that existed, as read (and locked) in the operation's transaction.
/// `owner` is the registered process of its live lease's owner, as the store read it for
/// [`owner_to_check`] (`None`: not asked, or not registered). A lease whose owner is gone
/// ([`owner_gone`]) is treated exactly like an expired one. `approval` is the intent's, as
/// the store read it when [`approval_to_read`] asked (`None` otherwise): an open one holds
/// the intent until it is decided or its deadline passes (then the intent is settled
/// `not_executed` first, and decided as such).
pub fn begin_existing(
    mut intent: IntentRecord,
    request: &BeginRequest,
    owner: Option<&ProcessRecord>,
    approval: Option<Approval>,
) -> Result<Plan<Begin>, LedgerError> {
    let mut writes = Vec::new();
    if request.count_call {
        count_repeat_call(&mut writes, &mut intent, request.now_ms);
    }
    if intent.fingerprint != request.fingerprint {
        writes.push(Write::Event(NewEvent::about(
            &intent,
            request.now_ms,
            "conflict",
            "same key, other arguments",
        )));
        return Ok(Plan::new(writes, Begin::Conflict(intent)));
    }
    // The owner must be the one holding this lease: a stale read of another's is ignored.
    let owner = owner
        .filter(|owner| owner_to_check(&intent, request.now_ms) == Some(owner.instance.as_str()));
    let gone = owner_gone(owner, request.now_ms);
    let lease_live = intent.lease_live(request.now_ms) && gone.is_none();
    // A re-send follows a lookup of an intent that was unknown. One whose in-flight lease
    // has only just expired gets its own lookup first: its attempt may have committed.
    // Never one whose re-sends stopped: the provider answers its key the same way every time.
    let may_resend = request.resend_unknown
        && intent.status == IntentStatus::Unknown
        && intent.resend_stopped.is_none();
    let intent = release_dead_lease(&mut writes, intent, request.now_ms, lease_live, owner, gone)?;
    match intent.status {
        IntentStatus::InFlight => Ok(Plan::new(writes, Begin::Busy(intent))),
        IntentStatus::Pending if lease_live => Ok(Plan::new(writes, Begin::Busy(intent))),
        IntentStatus::Pending => begin_pending(writes, intent, request, approval),
        IntentStatus::NotExecuted => begin_not_executed(writes, intent, request, approval.as_ref()),
        // Denied by a person: settled for good, whatever the tool does with rejections.
        IntentStatus::Rejected if intent.resolved_by.as_deref() == Some(DENIED_BY) => {
            Ok(Plan::new(writes, Begin::Settled(intent)))
        }
        IntentStatus::Rejected if request.retry_rejected => {
            start_attempt(writes, intent, request, true)
        }
        IntentStatus::Done | IntentStatus::Rejected => {
            Ok(Plan::new(writes, Begin::Settled(intent)))
        }
        // Another caller or a sweeper is running a step (a lookup, or a re-send about to
        // start): wait for what it learns, as for an attempt in flight.
        IntentStatus::Unknown if lease_live => Ok(Plan::new(writes, Begin::Busy(intent))),
        // The same request with the same provider key (the epoch does not move): a provider
        // that honours keys replays the first attempt's answer if that one committed.
        IntentStatus::Unknown if may_resend => start_attempt(writes, intent, request, false),
        IntentStatus::Unknown => begin_lookup(writes, intent, request),
    }
}

/// A repeat call of an existing intent: counted, with its event.
fn count_repeat_call(writes: &mut Vec<Write>, intent: &mut IntentRecord, now_ms: i64) {
    intent.call_count += 1;
    intent.last_seen_ms = intent.last_seen_ms.max(now_ms);
    let detail = format!("repeat call {}", intent.call_count);
    writes.push(Write::Counts(intent.clone()));
    writes.push(Write::Event(NewEvent::about(
        intent, now_ms, "call", &detail,
    )));
}

/// Frees a lease that is no longer held: an in-flight intent whose lease is not live (its
/// holder crashed, overran it, or its process is `gone`) becomes unknown; any other lease of
/// a gone `owner` is released, so that every later reader, the sweeper's `stale` among
/// them, sees it free without asking again. Otherwise the intent as it is.
fn release_dead_lease(
    writes: &mut Vec<Write>,
    intent: IntentRecord,
    now_ms: i64,
    lease_live: bool,
    owner: Option<&ProcessRecord>,
    gone: Option<OwnerGone>,
) -> Result<IntentRecord, LedgerError> {
    if intent.status == IntentStatus::InFlight && !lease_live {
        // The holder crashed, overran its lease, or its process is gone: whatever it did is
        // unknown now.
        let detail = match (owner, gone) {
            (Some(owner), Some(gone)) => {
                format!("{} while in flight", owner_gone_detail(owner, gone))
            }
            _ => "lease expired while in flight".to_owned(),
        };
        let mut next = intent.clone();
        next.status = IntentStatus::Unknown;
        next.lease_owner = None;
        next.lease_expires_ms = None;
        next.updated_ms = now_ms;
        transition(writes, &intent, next, now_ms, None, &detail)
    } else if let (Some(owner), Some(gone)) = (owner, gone) {
        // A lookup lease (or a pending one) of a gone owner.
        let mut next = intent.clone();
        next.lease_owner = None;
        next.lease_expires_ms = None;
        next.updated_ms = now_ms;
        let detail = format!("{}; its lease is released", owner_gone_detail(owner, gone));
        transition(writes, &intent, next, now_ms, None, &detail)
    } else {
        Ok(intent)
    }
}

/// `begin` on a pending intent with no live lease: held while its open `approval` awaits a
/// decision, settled `not_executed` once its deadline passed; approved or never held, its
/// first attempt.
fn begin_pending(
    mut writes: Vec<Write>,
    intent: IntentRecord,
    request: &BeginRequest,
    approval: Option<Approval>,
) -> Result<Plan<Begin>, LedgerError> {
    match approval {
        Some(approval) if approval.decision.is_none() => {
            if approval.awaiting(request.now_ms) {
                return Ok(Plan::new(
                    writes,
                    Begin::Held(intent, approval, ApprovalRequest::Open),
                ));
            }
            let (intent, approval) = expire(&mut writes, intent, approval, request.now_ms)?;
            begin_not_executed(writes, intent, request, Some(&approval))
        }
        // Approved, or never held: its first attempt.
        _ => start_attempt(writes, intent, request, false),
    }
}

/// `begin` on an unknown intent nobody leases and that is not re-sent: a lease for a
/// lookup once `lookup_interval_ms` has passed since the last one, else its state as it is.
fn begin_lookup(
    mut writes: Vec<Write>,
    intent: IntentRecord,
    request: &BeginRequest,
) -> Result<Plan<Begin>, LedgerError> {
    let lookup_due = intent
        .last_lookup_ms
        .is_none_or(|last| request.now_ms.saturating_sub(last) >= request.lookup_interval_ms);
    if !lookup_due {
        return Ok(Plan::new(writes, Begin::Settled(intent)));
    }
    let mut next = intent.clone();
    next.lease_owner = Some(request.lease_owner.clone());
    next.lease_expires_ms = Some(request.lease_expires_ms);
    next.last_lookup_ms = Some(request.now_ms);
    next.updated_ms = request.now_ms;
    let next = transition(
        &mut writes,
        &intent,
        next,
        request.now_ms,
        None,
        "lease taken for a lookup",
    )?;
    Ok(Plan::new(writes, Begin::Lookup(next)))
}

/// What `finish` checks before it reads anything: it records an outcome, never a start.
pub fn check_finish(finish: &Finish) -> Result<(), LedgerError> {
    if matches!(
        finish.status,
        IntentStatus::InFlight | IntentStatus::Pending
    ) {
        debug_assert!(false, "finish records an outcome, not {}", finish.status);
        return Err(IntentStatus::InFlight
            .transition(finish.status)
            .unwrap_err()
            .into());
    }
    Ok(())
}

/// `finish` on the intent as read (and locked) in the operation's transaction.
pub fn finish(intent: IntentRecord, finish: &Finish) -> Result<Plan<Finished>, LedgerError> {
    let holds_lease = intent.lease_owner.as_deref() == Some(finish.lease_owner.as_str());
    // The intent API's settle proves nothing but its lease: held, live and of this attempt.
    let lease_ok = !finish.lease_required || (holds_lease && intent.lease_live(finish.now_ms));
    let current = lease_ok
        && intent.attempt == finish.attempt
        && match intent.status {
            IntentStatus::InFlight => holds_lease,
            // Our lease expired and the intent went unknown, or we hold the lookup lease:
            // what this attempt learned still settles it.
            IntentStatus::Unknown => true,
            _ => false,
        };
    if !current {
        return Ok(Plan::new(Vec::new(), Finished::Superseded(intent)));
    }
    let mut next = intent.clone();
    next.status = finish.status;
    if holds_lease || finish.status != IntentStatus::Unknown {
        next.lease_owner = None;
        next.lease_expires_ms = None;
    }
    next.updated_ms = finish.now_ms;
    if finish.looked_up {
        next.last_lookup_ms = Some(finish.now_ms);
    }
    if finish.resend_stopped.is_some() && next.resend_stopped.is_none() {
        next.resend_stopped = finish.resend_stopped;
    }
    if matches!(finish.status, IntentStatus::Done | IntentStatus::Rejected) {
        next.result = finish.result.clone();
        next.external_id = finish.external_id.clone();
        next.resolved_by = Some(finish.resolved_by.to_owned());
    }
    if next == intent {
        return Ok(Plan::new(Vec::new(), Finished::Recorded(intent)));
    }
    // Whoever waits for an attempt asked `begin` first, which counted the call: with no
    // call but the one that executes, nobody waits.
    let watched = intent.call_count > 1;
    let mut writes = Vec::new();
    let next = transition(
        &mut writes,
        &intent,
        next,
        finish.now_ms,
        Some(finish.resolved_by),
        &finish.detail,
    )?;
    Ok(Plan {
        watched,
        ..Plan::new(writes, Finished::Recorded(next))
    })
}

/// `renew` on the intent as read (and locked) in the operation's transaction: the lease is
/// extended only while `renew.lease_owner` holds it, live at `renew.now_ms`, for
/// `renew.attempt`. The change is logged as a `lease` event, as every lease change is.
pub fn renew(intent: IntentRecord, renew: &Renew) -> Result<Plan<Renewed>, LedgerError> {
    let held = intent.lease_owner.as_deref() == Some(renew.lease_owner.as_str())
        && intent.lease_live(renew.now_ms)
        && intent.attempt == renew.attempt
        && matches!(
            intent.status,
            IntentStatus::InFlight | IntentStatus::Unknown
        );
    if !held {
        return Ok(Plan::new(Vec::new(), Renewed::Lost(intent)));
    }
    let current_ms = intent.lease_expires_ms.unwrap_or(renew.now_ms);
    if renew.lease_expires_ms <= current_ms {
        return Ok(Plan::new(Vec::new(), Renewed::Renewed(intent)));
    }
    let mut next = intent.clone();
    next.lease_expires_ms = Some(renew.lease_expires_ms);
    next.updated_ms = renew.now_ms;
    let detail = format!(
        "lease renewed from {current_ms} to {} ms",
        renew.lease_expires_ms
    );
    let mut writes = Vec::new();
    let next = transition(&mut writes, &intent, next, renew.now_ms, None, &detail)?;
    Ok(Plan::new(writes, Renewed::Renewed(next)))
}

/// One repeated call of `intent` at `now_ms` (`Ledger::record_calls`), on the intent as
/// read (and locked) in the operation's transaction.
pub fn record_call(mut intent: IntentRecord, now_ms: i64) -> Plan<()> {
    intent.call_count += 1;
    intent.last_seen_ms = intent.last_seen_ms.max(now_ms);
    let detail = format!(
        "repeat call {}, answered from the ledger",
        intent.call_count
    );
    let event = NewEvent::about(&intent, now_ms, "call", &detail);
    Plan::new(vec![Write::Counts(intent), Write::Event(event)], ())
}

/// `calls` (`(intent, now_ms)`) by intent, in id order (the order every writer locks them
/// in), each intent's in the order made.
pub fn calls_by_intent(calls: &[(IntentId, i64)]) -> BTreeMap<IntentId, Vec<i64>> {
    let mut by_intent: BTreeMap<IntentId, Vec<i64>> = BTreeMap::new();
    for &(id, now_ms) in calls {
        by_intent.entry(id).or_default().push(now_ms);
    }
    by_intent
}

/// [`record_call`] for each of an intent's repeats, at each `now_ms` in order, as one plan:
/// the count they leave, written once, then the event of each repeat, as one by one.
pub fn record_calls(intent: IntentRecord, calls: &[i64]) -> Plan<()> {
    let mut counted = intent;
    let mut events = Vec::with_capacity(calls.len());
    for &now_ms in calls {
        let mut next = None;
        for write in record_call(counted, now_ms).writes {
            match write {
                Write::Counts(intent) => next = Some(intent),
                event => events.push(event),
            }
        }
        counted = next.expect("record_call writes the intent's counts");
    }
    let mut writes = Vec::with_capacity(events.len() + 1);
    writes.push(Write::Counts(counted));
    writes.extend(events);
    Plan::new(writes, ())
}

/// What `resolve` checks before it reads anything.
pub fn check_resolve(resolve: &Resolve) -> Result<(), LedgerError> {
    check_length("actor", &resolve.actor, ACTOR_LENGTH_MAX)
}

/// `resolve` on the intent as read (and locked) in the operation's transaction.
///
/// From `rejected` to `not_executed` it is a reopening (event kind `reopen`): the stored
/// refusal is dropped, and the provider key moves to a new epoch, as a `retry_rejected` tool's
/// next attempt does, because the refused attempt is known to have done nothing and a provider
/// that stored its refusal under the old key would replay it to the next call.
///
/// Never while a lease lives ([`LedgerError::LeaseHeld`]): a caller or a sweeper is running
/// an attempt or a lookup of the intent, and a resolution that took its lease away would let
/// a re-send land at the provider after a person declared the intent not executed. The
/// check is here, inside the transaction, because a lease taken between an operator's read
/// and this write is as live as one taken before it.
pub fn resolve(intent: IntentRecord, resolve: &Resolve) -> Result<Plan<IntentRecord>, LedgerError> {
    if intent.lease_live(resolve.now_ms) {
        return Err(LedgerError::LeaseHeld {
            id: intent.id,
            owner: intent.lease_owner.clone().unwrap_or_default(),
            expires_ms: intent.lease_expires_ms.unwrap_or(resolve.now_ms),
        });
    }
    let mut next = intent.clone();
    next.status = intent.status.transition(resolve.status)?;
    next.lease_owner = None;
    next.lease_expires_ms = None;
    next.updated_ms = resolve.now_ms;
    next.resolved_by = Some(resolve.actor.clone());
    let reopen = intent.status == IntentStatus::Rejected;
    if reopen {
        next.result = None;
        next.external_id = None;
        next.epoch += 1;
        next.resend_stopped = None;
    }
    if resolve.external_id.is_some() {
        next.external_id = resolve.external_id.clone();
    }
    if resolve.result.is_some() {
        next.result = resolve.result.clone();
    }
    let kind = if reopen { "reopen" } else { "resolve" };
    let event = NewEvent {
        from_status: Some(intent.status),
        to_status: Some(next.status),
        actor: Some(resolve.actor.clone()),
        ..NewEvent::about(&next, resolve.now_ms, kind, &resolve.reason)
    };
    let writes = vec![Write::Intent(stored(next.clone())?), Write::Event(event)];
    Ok(Plan::new(writes, next))
}

/// What `decide` checks before it reads anything: an actor (the event log names who
/// decided), a reason for a denial (the model reads it), texts within their limits, and the
/// budgets an approval counts.
pub fn check_decide(decide: &Decide) -> Result<(), LedgerError> {
    check_name("actor", &decide.actor, ACTOR_LENGTH_MAX)?;
    if !decide.approve && decide.reason.trim().is_empty() {
        return Err(LedgerError::Invalid {
            field: "reason",
            reason: "is empty: a denial says why (the model reads it)".to_owned(),
        });
    }
    check_length("reason", &decide.reason, EVENT_DETAIL_LENGTH_MAX)?;
    check_charges(&decide.budgets)
}

/// `decide` on the intent as read (and locked) in the operation's transaction, with its
/// approval (see [`Decided`]). Nothing is written for an intent that is not awaiting a
/// decision, nor for the subject that asked; a decision past the deadline expires the
/// request instead.
pub fn decide(
    intent: IntentRecord,
    approval: Option<Approval>,
    decide: &Decide,
) -> Result<Plan<Decided>, LedgerError> {
    let mut approval = match approval {
        Some(approval) if approval.decision.is_none() && intent.status == IntentStatus::Pending => {
            approval
        }
        approval => {
            return Ok(Plan::new(
                Vec::new(),
                Decided::NotAwaiting(intent, approval),
            ));
        }
    };
    if decide.actor == approval.requested_by {
        return Ok(Plan::new(Vec::new(), Decided::OwnRequest(intent, approval)));
    }
    let now_ms = decide.now_ms;
    let mut writes = Vec::new();
    if !approval.awaiting(now_ms) {
        let (intent, approval) = expire(&mut writes, intent, approval, now_ms)?;
        return Ok(Plan::new(writes, Decided::Expired(intent, approval)));
    }
    let reason = decide.reason.as_str();
    approval.decided_by = Some(decide.actor.clone());
    approval.decided_ms = Some(now_ms);
    approval.reason = Some(reason.to_owned()).filter(|reason| !reason.is_empty());
    let mut next = intent.clone();
    next.updated_ms = now_ms;
    let actor = Some(decide.actor.as_str());
    if decide.approve {
        approval.decision = Some(Decision::Approved);
        let detail = if reason.is_empty() {
            "approved".to_owned()
        } else {
            format!("approved: {reason}")
        };
        let next = approval_change(&mut writes, &intent, next, now_ms, actor, &detail)?;
        writes.push(Write::Approval(approval.clone()));
        writes.extend(
            decide
                .budgets
                .iter()
                .map(|charge| budget_count(&next.tool, charge)),
        );
        return Ok(Plan::new(writes, Decided::Approved(next, approval)));
    }
    approval.decision = Some(Decision::Denied);
    next.status = IntentStatus::Rejected;
    next.lease_owner = None;
    next.lease_expires_ms = None;
    next.result = Some(json!({ "denied": reason, "by": decide.actor }));
    next.resolved_by = Some(DENIED_BY.to_owned());
    let detail = format!("denied: {reason}");
    let next = approval_change(&mut writes, &intent, next, now_ms, actor, &detail)?;
    writes.push(Write::Approval(approval.clone()));
    Ok(Plan::new(writes, Decided::Denied(next, approval)))
}

/// `expire_approvals` on one intent found due, as read (and locked) in its transaction:
/// settled `not_executed` with its approval `expired` while it is still held and its
/// deadline has passed at `now_ms`; nothing (`None`) once it was decided meanwhile.
pub fn expire_approval(
    intent: IntentRecord,
    approval: Option<Approval>,
    now_ms: i64,
) -> Result<Plan<Option<HeldIntent>>, LedgerError> {
    match approval {
        Some(approval)
            if approval.decision.is_none()
                && intent.status == IntentStatus::Pending
                && !approval.awaiting(now_ms) =>
        {
            let mut writes = Vec::new();
            let (intent, approval) = expire(&mut writes, intent, approval, now_ms)?;
            Ok(Plan::new(writes, Some(HeldIntent { approval, intent })))
        }
        _ => Ok(Plan::new(Vec::new(), None)),
    }
}

/// What `budget_usage` answers, whatever order the store read in: by budget, bucket and
/// window start, in byte order on every store.
pub fn budget_usage_rows(mut rows: Vec<BudgetUsageRow>) -> Vec<BudgetUsageRow> {
    rows.sort_by(|a, b| {
        (&a.budget, &a.bucket, a.window_start_ms).cmp(&(&b.budget, &b.bucket, b.window_start_ms))
    });
    rows
}

/// The event of a call refused because its tool is switched off.
pub fn disabled_call(tenant: &str, tool: &str, now_ms: i64) -> Result<NewEvent, LedgerError> {
    check_length("tenant", tenant, TENANT_LENGTH_MAX)?;
    check_length("tool", tool, TOOL_NAME_LENGTH_MAX)?;
    Ok(NewEvent {
        intent_id: None,
        tenant: tenant.to_owned(),
        tool: tool.to_owned(),
        at_ms: now_ms,
        kind: "disabled_call",
        from_status: None,
        to_status: None,
        attempt: None,
        actor: None,
        detail: Some("the tool is switched off; nothing executed".to_owned()),
    })
}

/// A tool flag as stored (its reason cut to the limit), and the event of the switch.
pub fn tool_flag(flag: &ToolFlag) -> Result<(ToolFlag, NewEvent), LedgerError> {
    check_length("tool", &flag.tool, TOOL_NAME_LENGTH_MAX)?;
    check_length("actor", &flag.actor, ACTOR_LENGTH_MAX)?;
    let stored = ToolFlag {
        reason: bounded(&flag.reason).to_owned(),
        ..flag.clone()
    };
    let event = NewEvent {
        intent_id: None,
        // The switch is for every tenant.
        tenant: "*".to_owned(),
        tool: flag.tool.clone(),
        at_ms: flag.updated_ms,
        kind: if flag.enabled {
            "tool_enabled"
        } else {
            "tool_disabled"
        },
        from_status: None,
        to_status: None,
        attempt: None,
        actor: Some(flag.actor.clone()),
        detail: Some(stored.reason.clone()),
    };
    Ok((stored, event))
}

/// What `erase` checks before it reads anything: names within their limits, a key only
/// with its tool, an actor and a reason (the event log keeps both).
pub fn check_erase(erase: &Erase) -> Result<(), LedgerError> {
    check_name("tenant", &erase.tenant, TENANT_LENGTH_MAX)?;
    if let Some(tool) = &erase.tool {
        check_name("tool", tool, TOOL_NAME_LENGTH_MAX)?;
    }
    if let Some(key) = &erase.key {
        if erase.tool.is_none() {
            return Err(LedgerError::Invalid {
                field: "key",
                reason: "needs a tool: keys are unique per tenant and tool".to_owned(),
            });
        }
        check_name("key", key, INTENT_KEY_LENGTH_MAX)?;
    }
    check_name("actor", &erase.actor, ACTOR_LENGTH_MAX)?;
    if erase.reason.trim().is_empty() {
        return Err(LedgerError::Invalid {
            field: "reason",
            reason: "is empty: say why the data is erased (it is kept in the event log)".to_owned(),
        });
    }
    Ok(())
}

/// Whether an erasure must be refused, from the ids its `busy` and `unsettled` statements
/// found: a call is running (always), or intents are not settled (unless `force`).
pub fn erase_refusal(
    busy: Vec<IntentId>,
    unsettled: Vec<IntentId>,
    force: bool,
) -> Option<Erasure> {
    if !busy.is_empty() {
        return Some(Erasure::Busy { ids: busy });
    }
    if !unsettled.is_empty() && !force {
        return Some(Erasure::Unsettled { ids: unsettled });
    }
    None
}

/// The event log's record of an erasure: who, why and how much, nothing of what was erased
/// (not even the key, which holds business values).
pub fn erasure_event(erase: &Erase, erased: &Erased) -> NewEvent {
    let scope = if erase.key.is_some() {
        "one intent"
    } else if erase.tool.is_some() {
        "the tool's intents"
    } else {
        "the tenant's intents"
    };
    let detail = format!(
        "erased {scope}: {} intents, {} events, {} reconciliation mismatches{}{}; reason: {}",
        erased.intents,
        erased.events,
        erased.mismatches,
        if erase.force { "; forced" } else { "" },
        if erased.more { "; more to erase" } else { "" },
        erase.reason
    );
    NewEvent {
        intent_id: None,
        tenant: erase.tenant.clone(),
        tool: erase.tool.clone().unwrap_or_else(|| "*".to_owned()),
        at_ms: erase.now_ms,
        kind: "erased",
        from_status: None,
        to_status: None,
        attempt: None,
        actor: Some(erase.actor.clone()),
        detail: Some(bounded(&detail).to_owned()),
    }
}

/// What `status_counts` answers, whatever order the store counted in: by tool (byte order,
/// the same on every store, whatever the database's collation), then status in the state
/// machine's order.
pub fn status_counts(mut counts: Vec<StatusCount>) -> Vec<StatusCount> {
    counts.retain(|count| count.count > 0);
    counts.sort_by(|a, b| (&a.tool, a.status).cmp(&(&b.tool, b.status)));
    counts
}

/// A reconciliation run checked against the limits, with its summary completed and
/// serialised once.
#[derive(Debug)]
pub struct StoredRun {
    /// The run as stored (its `id` is 0 until the store has inserted it).
    pub run: ReconciliationRun,
    /// `run.summary` as JSON text.
    pub summary: String,
    /// The counts, as the stores keep them.
    pub intents_checked: i64,
    pub records_checked: i64,
    pub mismatches: i64,
    pub critical: i64,
}

/// A mismatch cut to the limits, with its external ids serialised once.
#[derive(Debug)]
pub struct MismatchRow {
    /// The mismatch as stored (`run_id` is 0 until the store knows it).
    pub mismatch: StoredMismatch,
    /// `mismatch.external_ids` as a JSON array.
    pub external_ids: String,
}

/// `record_reconciliation`: the run and the first [`RECONCILIATION_MISMATCHES_STORED_MAX`]
/// mismatches as they are stored, or why they are refused (see
/// [`crate::Ledger::record_reconciliation`]). The store writes them all in one transaction.
pub fn reconciliation(
    run: &ReconciliationRun,
    mismatches: &[StoredMismatch],
) -> Result<(StoredRun, Vec<MismatchRow>), LedgerError> {
    check_name("actor", &run.actor, ACTOR_LENGTH_MAX)?;
    let given = mismatches.len() as u64;
    if run.mismatches < given {
        return Err(LedgerError::Invalid {
            field: "mismatches",
            reason: format!(
                "counts {} mismatches, but {given} were given: the count includes every one",
                run.mismatches
            ),
        });
    }
    let kept = &mismatches[..mismatches.len().min(RECONCILIATION_MISMATCHES_STORED_MAX)];
    let rows = kept
        .iter()
        .map(mismatch_row)
        .collect::<Result<Vec<_>, _>>()?;
    let mut summary = match &run.summary {
        Value::Object(summary) => summary.clone(),
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(LedgerError::Invalid {
                field: "summary",
                reason: format!("must be a JSON object, not {other}"),
            });
        }
    };
    let not_stored = run.mismatches - kept.len() as u64;
    summary.insert(SUMMARY_MISMATCHES_NOT_STORED.to_owned(), not_stored.into());
    let summary = Value::Object(summary);
    let summary_text = json_text("summary", &summary, RECONCILIATION_SUMMARY_BYTES_MAX)?;
    let stored = StoredRun {
        intents_checked: count_column("intents_checked", run.intents_checked)?,
        records_checked: count_column("records_checked", run.records_checked)?,
        mismatches: count_column("mismatches", run.mismatches)?,
        critical: count_column("critical", run.critical)?,
        run: ReconciliationRun {
            id: 0,
            summary,
            ..run.clone()
        },
        summary: summary_text,
    };
    Ok((stored, rows))
}

/// One mismatch as stored: names checked, provider text cut to its limit.
fn mismatch_row(mismatch: &StoredMismatch) -> Result<MismatchRow, LedgerError> {
    check_name("tool", &mismatch.tool, TOOL_NAME_LENGTH_MAX)?;
    check_name("kind", &mismatch.kind, MISMATCH_KIND_LENGTH_MAX)?;
    if !MISMATCH_SEVERITIES.contains(&mismatch.severity.as_str()) {
        return Err(LedgerError::Invalid {
            field: "severity",
            reason: format!(
                "is `{}`; it must be one of {}",
                mismatch.severity,
                MISMATCH_SEVERITIES.join(", ")
            ),
        });
    }
    // The ids that fit, in order: `[` and `]`, and a comma before each but the first.
    let mut external_ids = Vec::new();
    let mut json_length = 2;
    for id in &mismatch.external_ids {
        let id = cut(id, EXTERNAL_ID_LENGTH_MAX);
        let length = Value::from(id).to_string().len() + usize::from(!external_ids.is_empty());
        if external_ids.len() == MISMATCH_EXTERNAL_IDS_MAX
            || json_length + length > MISMATCH_EXTERNAL_IDS_BYTES_MAX
        {
            break;
        }
        json_length += length;
        external_ids.push(id.to_owned());
    }
    let left_out = mismatch.external_ids.len() - external_ids.len();
    let detail = if left_out == 0 {
        cut(&mismatch.detail, MISMATCH_DETAIL_LENGTH_MAX).to_owned()
    } else {
        let note = format!(" ({left_out} more external ids not stored)");
        let room = MISMATCH_DETAIL_LENGTH_MAX - note.len();
        format!("{}{note}", cut(&mismatch.detail, room))
    };
    let external_ids_text = Value::from(external_ids.clone()).to_string();
    debug_assert_eq!(external_ids_text.len(), json_length);
    let cut_option =
        |text: &Option<String>, limit| text.as_deref().map(|text| cut(text, limit).to_owned());
    Ok(MismatchRow {
        mismatch: StoredMismatch {
            run_id: 0,
            tool: mismatch.tool.clone(),
            kind: mismatch.kind.clone(),
            severity: mismatch.severity.clone(),
            intent_id: mismatch.intent_id,
            tenant: cut_option(&mismatch.tenant, TENANT_LENGTH_MAX),
            intent_key: cut_option(&mismatch.intent_key, INTENT_KEY_LENGTH_MAX),
            external_ids,
            subject: cut_option(&mismatch.subject, MISMATCH_SUBJECT_LENGTH_MAX),
            detail,
        },
        external_ids: external_ids_text,
    })
}

/// An intent given to `bulk_insert`, checked as the normal writes check theirs, with its
/// JSON serialised once.
#[derive(Debug)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub struct BulkIntent {
    pub intent: IntentRecord,
    /// `intent.arguments` as JSON text.
    pub arguments: String,
    /// `intent.result` as JSON text.
    pub result: Option<String>,
}

/// Checks an intent that `bulk_insert` writes as given: every text within its limit (and
/// the names not empty), a fingerprint of 64 hex digits, and a status that agrees with the
/// rest of the row as the state machine leaves it (an in-flight intent holds a lease, a
/// settled one holds none, a lease has an owner and an expiry or neither).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub fn bulk_intent(intent: IntentRecord) -> Result<BulkIntent, LedgerError> {
    check_name("tenant", &intent.tenant, TENANT_LENGTH_MAX)?;
    check_name("tool", &intent.tool, TOOL_NAME_LENGTH_MAX)?;
    check_name("key", &intent.key, INTENT_KEY_LENGTH_MAX)?;
    let invalid = |field, reason: String| Err(LedgerError::Invalid { field, reason });
    if intent.fingerprint.len() != 64 || !intent.fingerprint.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return invalid(
            "fingerprint",
            format!("is `{}`, not 64 hex digits", cut(&intent.fingerprint, 80)),
        );
    }
    let arguments = json_text("arguments", &intent.arguments, ARGUMENTS_BYTES_MAX)?;
    if let Some(owner) = &intent.lease_owner {
        check_length("lease_owner", owner, LEASE_OWNER_LENGTH_MAX)?;
    }
    if intent.epoch == 0 {
        return invalid("epoch", "is 0; provider-key epochs start at 1".to_owned());
    }
    count_column("call_count", intent.call_count)?;
    if intent.last_seen_ms < intent.first_seen_ms {
        return invalid(
            "last_seen_ms",
            format!(
                "is {}, before first_seen_ms {}",
                intent.last_seen_ms, intent.first_seen_ms
            ),
        );
    }
    let leased = intent.lease_owner.is_some();
    if leased != intent.lease_expires_ms.is_some() {
        return invalid(
            "lease_owner",
            "and lease_expires_ms must be set together".to_owned(),
        );
    }
    if intent.status == IntentStatus::InFlight && !leased {
        return invalid("status", "is in_flight without a lease".to_owned());
    }
    if intent.status.is_settled() && leased {
        return invalid(
            "status",
            format!("is {} and settled, but a lease is held", intent.status),
        );
    }
    let StoredIntent { intent, result } = stored(intent)?;
    Ok(BulkIntent {
        intent,
        arguments,
        result,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_760_000_000_000;

    fn hold(deadline_ms: i64) -> Option<Hold> {
        Some(Hold {
            held_by: "approval policy".to_owned(),
            deadline_ms,
        })
    }

    fn charge(budget: &str, count_max: u64, hold_deadline_ms: Option<i64>) -> BudgetCharge {
        BudgetCharge {
            budget: budget.to_owned(),
            bucket: "tool".to_owned(),
            window_start_ms: 0,
            window_end_ms: NOW * 2,
            units: 0,
            count_max: Some(count_max),
            units_max: None,
            hold_deadline_ms,
        }
    }

    fn request(hold: Option<Hold>, budgets: Vec<BudgetCharge>) -> BeginRequest {
        BeginRequest {
            tenant: "acme".to_owned(),
            tool: "refund".to_owned(),
            key: "order-1".to_owned(),
            fingerprint: "f".repeat(64),
            arguments: json!({}),
            lease_owner: "owner".to_owned(),
            lease_expires_ms: NOW + 1_000,
            now_ms: NOW,
            count_call: true,
            retry_rejected: true,
            lookup_interval_ms: 1_000,
            resend_unknown: false,
            expect_new: false,
            policies: Some(CallPolicies {
                hold,
                requested_by: "alice".to_owned(),
                intent_id: None,
                budgets,
            }),
        }
    }

    fn used(count: u64) -> BudgetUsage {
        BudgetUsage { count, units: 0 }
    }

    /// The outcome of inserting a new call's row as id 7.
    fn inserted(call: NewCall) -> Plan<Begin> {
        match call {
            NewCall::Insert(fresh) => fresh.inserted(7),
            NewCall::Refused(outcome) => panic!("refused: {outcome:?}"),
        }
    }

    fn budget_writes(plan: &Plan<Begin>) -> usize {
        plan.writes
            .iter()
            .filter(|write| matches!(write, Write::Budget(_)))
            .count()
    }

    #[test]
    fn a_new_intent_beyond_a_refusing_budget_is_refused_even_when_another_would_hold_it() {
        let asked = request(
            hold(NOW + 10),
            vec![
                charge("holds", 1, Some(NOW + 5)),
                charge("refuses", 1, None),
            ],
        );
        let Ok(NewCall::Refused(Begin::OverBudget { budget })) =
            begin_new_call(&asked, &[used(1), used(1)])
        else {
            panic!("not refused");
        };
        assert_eq!(budget, "refuses");
    }

    #[test]
    fn a_new_intent_that_fits_every_budget_is_counted_by_each_and_executed() {
        let asked = request(None, vec![charge("a", 2, None), charge("b", 5, Some(NOW))]);
        let plan = inserted(begin_new_call(&asked, &[used(1), used(4)]).unwrap());
        assert!(matches!(plan.outcome, Begin::Execute(_)));
        assert_eq!(budget_writes(&plan), 2);
    }

    #[test]
    fn a_held_new_intent_is_counted_by_no_budget_and_names_every_reason_with_the_earliest_deadline()
    {
        let asked = request(hold(NOW + 10), vec![charge("full", 1, Some(NOW + 5))]);
        let plan = inserted(begin_new_call(&asked, &[used(1)]).unwrap());
        let Begin::Held(intent, approval, ApprovalRequest::Made) = &plan.outcome else {
            panic!("not held: {:?}", plan.outcome);
        };
        assert_eq!((intent.id, intent.status), (7, IntentStatus::Pending));
        assert_eq!(intent.lease_owner, None);
        assert_eq!(approval.intent, 7);
        assert_eq!(approval.held_by, "approval policy; budget full");
        assert_eq!(approval.deadline_ms, NOW + 5);
        assert_eq!(budget_writes(&plan), 0);
    }

    #[test]
    fn units_beyond_the_largest_storable_saturate() {
        assert_eq!(stored_units(u64::MAX), i64::MAX);
        assert_eq!(stored_units(5), 5);
        assert_eq!(budget_usage(-1, 3), BudgetUsage { count: 0, units: 3 });
    }

    fn held_intent(status: IntentStatus) -> IntentRecord {
        let mut intent = new_intent(&request(None, Vec::new())).unwrap().intent;
        intent.id = 7;
        intent.status = status;
        intent
    }

    fn open_approval(deadline_ms: i64) -> Approval {
        let intent = held_intent(IntentStatus::Pending);
        let policies = request(None, Vec::new()).policies.unwrap();
        approval_request(&intent, &policies, "approval policy", deadline_ms, NOW - 1)
    }

    #[test]
    fn a_pending_intent_with_an_open_approval_is_held_until_its_deadline() {
        let asked = BeginRequest {
            policies: None,
            ..request(None, Vec::new())
        };
        let intent = held_intent(IntentStatus::Pending);
        let plan =
            begin_existing(intent.clone(), &asked, None, Some(open_approval(NOW + 1))).unwrap();
        assert!(matches!(plan.outcome, Begin::Held(..)));
        // Past it: settled, then (no approval policy now) a new attempt.
        let plan = begin_existing(intent, &asked, None, Some(open_approval(NOW))).unwrap();
        let Begin::Execute(executing) = plan.outcome else {
            panic!("not executed: {:?}", plan.outcome);
        };
        assert_eq!(executing.attempt, 1);
        assert!(plan.writes.iter().any(|write| matches!(
            write,
            Write::Approval(Approval {
                decision: Some(Decision::Expired),
                ..
            })
        )));
    }

    #[test]
    fn an_expired_intent_asked_for_with_the_policy_is_held_again() {
        let asked = request(hold(NOW + 10), Vec::new());
        let intent = held_intent(IntentStatus::Pending);
        let plan = begin_existing(intent, &asked, None, Some(open_approval(NOW))).unwrap();
        let Begin::Held(again, approval, ApprovalRequest::Made) = plan.outcome else {
            panic!("not held: {:?}", plan.outcome);
        };
        assert_eq!(again.status, IntentStatus::Pending);
        assert_eq!(
            (approval.requested_ms, approval.deadline_ms),
            (NOW, NOW + 10)
        );
        assert_eq!(approval.decision, None);
    }

    #[test]
    fn a_denied_intent_is_settled_for_a_tool_that_retries_rejections() {
        let mut intent = held_intent(IntentStatus::Rejected);
        intent.resolved_by = Some(DENIED_BY.to_owned());
        let asked = request(None, Vec::new());
        assert!(asked.retry_rejected);
        let plan = begin_existing(intent.clone(), &asked, None, None).unwrap();
        assert!(matches!(plan.outcome, Begin::Settled(_)));
        intent.resolved_by = Some("upstream".to_owned());
        let plan = begin_existing(intent, &asked, None, None).unwrap();
        assert!(matches!(plan.outcome, Begin::Execute(_)));
    }

    #[test]
    fn only_a_held_or_re_holdable_intent_costs_an_approval_read() {
        let plain = BeginRequest {
            policies: None,
            ..request(None, Vec::new())
        };
        let holding = request(hold(NOW), Vec::new());
        for status in IntentStatus::ALL {
            let intent = held_intent(status);
            assert_eq!(
                approval_to_read(&intent, &plain),
                status == IntentStatus::Pending,
                "{status}"
            );
            assert_eq!(
                approval_to_read(&intent, &holding),
                matches!(status, IntentStatus::Pending | IntentStatus::NotExecuted),
                "{status}"
            );
        }
    }

    fn decision(approve: bool, actor: &str, now_ms: i64) -> Decide {
        Decide {
            id: 7,
            approve,
            actor: actor.to_owned(),
            reason: "why".to_owned(),
            now_ms,
            budgets: vec![charge("a", 1, None)],
        }
    }

    #[test]
    fn a_decision_on_ones_own_request_or_on_nothing_open_writes_nothing() {
        let intent = held_intent(IntentStatus::Pending);
        let own = super::decide(
            intent.clone(),
            Some(open_approval(NOW + 1)),
            &decision(true, "alice", NOW),
        )
        .unwrap();
        assert!(own.writes.is_empty());
        assert!(matches!(own.outcome, Decided::OwnRequest(..)));
        let none = super::decide(intent, None, &decision(true, "bob", NOW)).unwrap();
        assert!(none.writes.is_empty());
        assert!(matches!(none.outcome, Decided::NotAwaiting(_, None)));
    }

    #[test]
    fn an_approval_counts_its_budgets_and_a_late_decision_expires_the_request() {
        let intent = held_intent(IntentStatus::Pending);
        let approved = super::decide(
            intent.clone(),
            Some(open_approval(NOW + 1)),
            &decision(true, "bob", NOW),
        )
        .unwrap();
        assert!(matches!(approved.outcome, Decided::Approved(..)));
        assert_eq!(
            approved
                .writes
                .iter()
                .filter(|write| matches!(write, Write::Budget(_)))
                .count(),
            1
        );
        let late = super::decide(
            intent,
            Some(open_approval(NOW)),
            &decision(true, "bob", NOW),
        )
        .unwrap();
        let Decided::Expired(settled, approval) = late.outcome else {
            panic!("not expired: {:?}", late.outcome);
        };
        assert_eq!(settled.status, IntentStatus::NotExecuted);
        assert_eq!(approval.decision, Some(Decision::Expired));
    }

    #[test]
    fn a_decision_without_an_actor_or_a_denial_without_a_reason_is_refused() {
        assert!(check_decide(&decision(true, "", NOW)).is_err());
        let silent = Decide {
            reason: " ".to_owned(),
            ..decision(false, "bob", NOW)
        };
        assert!(check_decide(&silent).is_err());
        let approved_silently = Decide {
            reason: String::new(),
            ..decision(true, "bob", NOW)
        };
        assert!(check_decide(&approved_silently).is_ok());
    }
}

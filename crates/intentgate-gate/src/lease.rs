//! The lease: the rule the product rests on, as a type (docs/design.md section 5, steps 5 to
//! 8): nothing is sent without a durable `in_flight` record and a held lease.
//!
//! A [`Lease`] is made in one place only, from what the ledger's `begin` answered
//! ([`begin`]): `Begin::Execute` (the intent is durably `in_flight` under this caller's
//! owner id, its attempt started, whether the intent was new, settled for a new attempt,
//! `unknown` and re-sent, or taken over from a holder that died) or `Begin::Lookup` (the
//! lookup lease of an `unknown` intent). Its constructor is private and it is not `Clone`,
//! so holding one proves that the ledger granted it. The call path's send
//! (`Gate::send_attempt`) takes the lease by reference and, before the request leaves,
//! asserts that the request is this intent's and that the intent is `in_flight`
//! ([`Lease::check_send`]); a lease that ran out by the gate's clock meanwhile
//! ([`Lease::live_at`], a stalled process) sends nothing. Every status the
//! lease's holder writes goes through [`Lease::finish`], which asserts the state machine's
//! edge ([`check_transition`]).
//!
//! These are assertions, not errors: a failing one is a bug in the gate, and going on would
//! be the double effect the gateway exists to prevent.

use intentgate_core::IntentStatus;
use intentgate_core::key::provider_key;
use intentgate_ledger::{
    Approval, ApprovalRequest, Begin, BeginRequest, Created, Finish, IntentRecord, Ledger,
    LedgerError,
};
use serde_json::Value;

use crate::upstream::UpstreamCall;

/// An intent's lease, held by this caller: granted by the ledger's `begin`, never made
/// otherwise. Not `Clone`: one holder, one lease.
#[derive(Debug)]
pub(crate) struct Lease {
    /// The intent as `begin` left it: `in_flight` for an attempt, `unknown` for a lookup
    /// lease, its lease owner this caller's and its expiry set.
    intent: IntentRecord,
    /// The provider idempotency key of the intent's epoch: what every request under this
    /// lease carries, and what its lookup proves a record by.
    provider_key: String,
}

impl Lease {
    /// The lease `begin` granted `owner` on `intent`, which it left `status`. Checks the
    /// intent as read back, since everything sent under the lease relies on it.
    fn taken(intent: IntentRecord, owner: &str, status: IntentStatus) -> Lease {
        assert_eq!(
            intent.status, status,
            "begin granted a lease on intent {} in status {}, not {}",
            intent.id, intent.status, status
        );
        assert_eq!(
            intent.lease_owner.as_deref(),
            Some(owner),
            "begin granted a lease on intent {} that another owner holds",
            intent.id
        );
        assert!(
            intent.lease_expires_ms.is_some(),
            "begin granted a lease on intent {} without an expiry",
            intent.id
        );
        let provider_key = provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch);
        Lease {
            intent,
            provider_key,
        }
    }

    /// The intent as `begin` left it.
    pub(crate) fn intent(&self) -> &IntentRecord {
        &self.intent
    }

    /// The lease owner id this caller holds the lease as.
    pub(crate) fn owner(&self) -> &str {
        self.intent
            .lease_owner
            .as_deref()
            .expect("a lease has an owner (checked when taken)")
    }

    /// When the lease runs out (clock milliseconds).
    pub(crate) fn expires_ms(&self) -> i64 {
        self.intent
            .lease_expires_ms
            .expect("a lease has an expiry (checked when taken)")
    }

    /// The request for this intent's attempt (or its lookup), with its provider key.
    /// `arguments` are the call's (the ledger's copy for the sweeper); `intent_id` is the
    /// application's intent id, for upstream templates that use it.
    pub(crate) fn upstream_call<'a>(
        &'a self,
        tool: &'a intentgate_core::ToolDefinition,
        arguments: &'a Value,
        intent_id: Option<&'a str>,
    ) -> UpstreamCall<'a> {
        UpstreamCall::for_intent(
            tool,
            arguments,
            &self.intent.key,
            Some(&self.provider_key),
            intent_id,
            self.intent.attempt,
        )
    }

    /// Asserts, where a request leaves, that it may: `call` is this intent's attempt with its
    /// provider key, and the intent is durably `in_flight`. Whether the lease is still live is
    /// not asserted but asked ([`Lease::live_at`]): a process that stalled for longer than a
    /// lease is an operating condition, not a programmer's error.
    pub(crate) fn check_send(&self, call: &UpstreamCall<'_>) {
        self.check_request(call);
        assert_eq!(
            call.attempt, self.intent.attempt,
            "a request of attempt {} was about to be sent under the lease of attempt {} of intent {}",
            call.attempt, self.intent.attempt, self.intent.id
        );
        assert_eq!(
            self.intent.status,
            IntentStatus::InFlight,
            "a request of intent {} was about to be sent while it is {}, not durably in_flight",
            self.intent.id,
            self.intent.status
        );
    }

    /// True while the lease has not run out at `now_ms`, the gate's clock. A lease covers the
    /// whole call with a margin, so it runs out before a request leaves only when the process
    /// stalled; by then another replica may have taken the intent over, so nothing is sent.
    pub(crate) fn live_at(&self, now_ms: i64) -> bool {
        now_ms < self.expires_ms()
    }

    /// Asserts that `call` (a request or a lookup) is this intent's, with its provider key.
    pub(crate) fn check_request(&self, call: &UpstreamCall<'_>) {
        assert_eq!(
            call.tool.name, self.intent.tool,
            "a request of tool `{}` was about to go out under a lease of tool `{}`",
            call.tool.name, self.intent.tool
        );
        assert_eq!(
            call.intent_key,
            Some(self.intent.key.as_str()),
            "a request was about to go out under the lease of another intent ({})",
            self.intent.id
        );
        assert_eq!(
            call.idempotency_key,
            Some(self.provider_key.as_str()),
            "a request of intent {} was about to go out without its provider key",
            self.intent.id
        );
    }

    /// What this holder records about its attempt or lookup at `now_ms`: `status` and why,
    /// learned by `resolved_by`, with no result and no lookup made (the caller adds what it
    /// has). Asserts that the intent may become `status` from the one `begin` left it in.
    pub(crate) fn finish(
        &self,
        now_ms: i64,
        status: IntentStatus,
        resolved_by: &'static str,
        detail: String,
    ) -> Finish {
        finish_of(
            &self.intent,
            self.owner(),
            now_ms,
            status,
            resolved_by,
            detail,
        )
    }
}

/// What `begin` answered, with the lease it granted, if it granted one: the ledger's
/// [`Begin`], its `Execute` and `Lookup` holding a [`Lease`].
#[derive(Debug)]
pub(crate) enum Begun {
    /// This caller holds the lease and the intent is durably `in_flight`: execute it.
    Execute(Lease),
    /// This caller holds the lookup lease of an `unknown` intent: look it up.
    Lookup(Lease),
    /// Another caller holds the lease.
    Busy(IntentRecord),
    /// Nothing to do here: answer from the record.
    Settled(IntentRecord),
    /// The key exists with another fingerprint: nothing executes.
    Conflict(IntentRecord),
    /// The intent is `pending`, waiting for an approver; whether this `begin` asked.
    Held(IntentRecord, Approval, ApprovalRequest),
    /// A new intent beyond the budget named here: nothing was written.
    OverBudget { budget: String },
}

impl Begun {
    /// The ledger's answer to a `begin` that `owner` asked, a granted lease made a [`Lease`].
    fn from_ledger(begin: Begin, owner: &str) -> Begun {
        match begin {
            Begin::Execute(intent) => {
                Begun::Execute(Lease::taken(intent, owner, IntentStatus::InFlight))
            }
            Begin::Lookup(intent) => {
                Begun::Lookup(Lease::taken(intent, owner, IntentStatus::Unknown))
            }
            Begin::Busy(intent) => Begun::Busy(intent),
            Begin::Settled(intent) => Begun::Settled(intent),
            Begin::Conflict(intent) => Begun::Conflict(intent),
            Begin::Held(intent, approval, request) => Begun::Held(intent, approval, request),
            Begin::OverBudget { budget } => Begun::OverBudget { budget },
        }
    }

    /// The intent as `begin` left it, whatever it decided.
    pub(crate) fn intent(&self) -> Option<&IntentRecord> {
        match self {
            Begun::Execute(lease) | Begun::Lookup(lease) => Some(lease.intent()),
            Begun::Busy(intent)
            | Begun::Settled(intent)
            | Begun::Conflict(intent)
            | Begun::Held(intent, ..) => Some(intent),
            Begun::OverBudget { .. } => None,
        }
    }

    /// What the gateway decided, as its exported span names it.
    pub(crate) fn decision(&self) -> &'static str {
        match self {
            Begun::Execute(_) => "execute",
            Begun::Lookup(_) => "look_up",
            Begun::Settled(_) => "answer_from_ledger",
            Begun::Conflict(_) => "conflict",
            Begun::Busy(_) => "busy",
            Begun::Held(..) => "held",
            Begun::OverBudget { .. } => "over_budget",
        }
    }
}

/// [`Ledger::begin`]: one of the two ways a [`Lease`] is made.
pub(crate) async fn begin(
    ledger: &dyn Ledger,
    request: BeginRequest,
) -> Result<Begun, LedgerError> {
    let owner = request.lease_owner.clone();
    let begin = ledger.begin(request).await?;
    Ok(Begun::from_ledger(begin, &owner))
}

/// What [`create`] answered: as the ledger's [`Created`], a granted lease made a [`Lease`].
// One answer per call, matched at once: a box would save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Create {
    Begun(Begun),
    /// The key's intent, as found: nothing was decided.
    Found(IntentRecord),
}

/// [`Ledger::create`]: the other way a [`Lease`] is made, for a key not read first.
pub(crate) async fn create(
    ledger: &dyn Ledger,
    request: BeginRequest,
) -> Result<Create, LedgerError> {
    let owner = request.lease_owner.clone();
    Ok(match ledger.create(request).await? {
        Created::Begun(begin) => Create::Begun(Begun::from_ledger(begin, &owner)),
        Created::Found(intent) => Create::Found(intent),
    })
}

/// What `owner` records about its attempt or lookup of `intent` at `now_ms` (see
/// [`Lease::finish`]). The intent API's settle uses it directly: there the lease is held by
/// the caller's own code, proven by its token, and the ledger records only while it is.
pub(crate) fn finish_of(
    intent: &IntentRecord,
    owner: &str,
    now_ms: i64,
    status: IntentStatus,
    resolved_by: &'static str,
    detail: String,
) -> Finish {
    check_transition(intent, status);
    Finish {
        id: intent.id,
        lease_owner: owner.to_owned(),
        attempt: intent.attempt,
        now_ms,
        status,
        result: None,
        external_id: None,
        resolved_by,
        looked_up: false,
        detail,
        lease_required: false,
        resend_stopped: None,
    }
}

/// Asserts that a lease holder may write `to` over `intent` as its lease found it: an
/// outcome (`done`, `rejected`, `not_executed`, `unknown`) that the state machine allows from
/// there, or `unknown` again, which only gives back a lookup lease.
pub(crate) fn check_transition(intent: &IntentRecord, to: IntentStatus) {
    let from = intent.status;
    assert!(
        matches!(from, IntentStatus::InFlight | IntentStatus::Unknown),
        "intent {} was to become {to} under a lease while it is {from}: only an attempt or a \
         lookup holds a lease",
        intent.id
    );
    assert!(
        matches!(
            to,
            IntentStatus::Done
                | IntentStatus::Rejected
                | IntentStatus::NotExecuted
                | IntentStatus::Unknown
        ) && (from.can_become(to) || (from, to) == (IntentStatus::Unknown, IntentStatus::Unknown)),
        "intent {} can't become {to} from {from}",
        intent.id
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use intentgate_core::{Effect, ToolDefinition};
    use serde_json::json;

    use super::*;

    const OWNER: &str = "4242-ab12/7";
    const EXPIRES_MS: i64 = 1_000_000;

    fn intent(status: IntentStatus) -> IntentRecord {
        IntentRecord {
            id: 9,
            tenant: "default".to_owned(),
            tool: "refund".to_owned(),
            key: "refund:8812".to_owned(),
            fingerprint: "f".to_owned(),
            arguments: json!({"order_id": "8812"}),
            status,
            attempt: 1,
            epoch: 1,
            lease_owner: Some(OWNER.to_owned()),
            lease_expires_ms: Some(EXPIRES_MS),
            result: None,
            external_id: None,
            resolved_by: None,
            call_count: 1,
            first_seen_ms: 0,
            last_seen_ms: 0,
            updated_ms: 0,
            last_lookup_ms: None,
            resend_stopped: None,
        }
    }

    fn tool() -> ToolDefinition {
        let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}});
        ToolDefinition::new(
            "refund",
            "Refund an order.",
            Effect::SideEffect,
            schema,
            Some("refund:{order_id}"),
            Duration::from_secs(1),
            0,
        )
        .expect("a valid definition")
    }

    #[test]
    fn a_lease_sends_its_own_intent_in_flight() {
        let lease = Lease::taken(
            intent(IntentStatus::InFlight),
            OWNER,
            IntentStatus::InFlight,
        );
        let tool = tool();
        let arguments = json!({});
        let call = lease.upstream_call(&tool, &arguments, None);
        lease.check_send(&call);
        assert!(lease.live_at(EXPIRES_MS - 1));
        let finish = lease.finish(0, IntentStatus::Done, "upstream", String::new());
        assert_eq!(finish.lease_owner, OWNER);
    }

    #[test]
    #[should_panic(expected = "that another owner holds")]
    fn a_lease_of_another_owner_is_refused() {
        Lease::taken(
            intent(IntentStatus::InFlight),
            "4242-ab12/8",
            IntentStatus::InFlight,
        );
    }

    #[test]
    #[should_panic(expected = "not durably in_flight")]
    fn nothing_is_sent_under_a_lookup_lease() {
        let lease = Lease::taken(intent(IntentStatus::Unknown), OWNER, IntentStatus::Unknown);
        let tool = tool();
        let arguments = json!({});
        lease.check_send(&lease.upstream_call(&tool, &arguments, None));
    }

    #[test]
    fn a_lease_is_not_live_from_its_expiry_on() {
        let lease = Lease::taken(
            intent(IntentStatus::InFlight),
            OWNER,
            IntentStatus::InFlight,
        );
        assert!(lease.live_at(EXPIRES_MS - 1));
        assert!(!lease.live_at(EXPIRES_MS));
        assert!(!lease.live_at(EXPIRES_MS + 60_000));
    }

    #[test]
    #[should_panic(expected = "under the lease of another intent")]
    fn another_intents_request_is_not_sent_under_a_lease() {
        let lease = Lease::taken(
            intent(IntentStatus::InFlight),
            OWNER,
            IntentStatus::InFlight,
        );
        let tool = tool();
        let arguments = json!({});
        let provider_key = lease.provider_key.clone();
        let call = UpstreamCall::for_intent(
            &tool,
            &arguments,
            "refund:9999",
            Some(&provider_key),
            None,
            1,
        );
        lease.check_send(&call);
    }

    #[test]
    #[should_panic(expected = "can't become in_flight from in_flight")]
    fn a_holder_never_writes_in_flight() {
        let lease = Lease::taken(
            intent(IntentStatus::InFlight),
            OWNER,
            IntentStatus::InFlight,
        );
        lease.finish(0, IntentStatus::InFlight, "upstream", String::new());
    }

    #[test]
    #[should_panic(expected = "only an attempt or a lookup holds a lease")]
    fn a_settled_intent_is_not_written_under_a_lease() {
        finish_of(
            &intent(IntentStatus::Done),
            OWNER,
            0,
            IntentStatus::Unknown,
            "lookup",
            String::new(),
        );
    }
}

//! The behavioural suite of the `Ledger` trait.
//!
//! The gateway's guarantees (one execution per intent, a stored answer for every repeat, no
//! blind retry of an unknown outcome) rest on what a ledger promises, so every store must
//! keep the same promises. Each behaviour is written once below, as an `async fn` that takes
//! a `&dyn Ledger` and knows nothing of the store behind it, and `behaviours!` makes a test
//! of each in every store's module. `mod sqlite` runs each one on a fresh SQLite ledger in a
//! temporary folder, in both write modes: grouped commits on the writer thread and inline
//! writes. `mod postgres` runs each one on a fresh schema of the database at `DATABASE_URL`
//! (skipped without it, except under `CI=true`, where it fails), and adds what only a
//! shared store has: two ledgers on one database, as two replicas. A store's module is
//! built with the store's cargo feature.
//!
//! The clock is passed in (`now_ms`) and the ledger never reads it, so leases expire and
//! lookups fall due by choosing `now_ms`, never by sleeping. What only a file store has
//! (reopening, open errors, the append-only trigger seen from outside) is tested in each
//! store's module.
// A build with no store has no ledger to test.
#![cfg(any(feature = "sqlite", feature = "postgres"))]

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use intentgate_core::limits::{
    ARGUMENTS_BYTES_MAX, CALLER_KEY_LENGTH_MAX, EXTERNAL_ID_LENGTH_MAX, INTENT_KEY_LENGTH_MAX,
    TENANT_LENGTH_MAX,
};
use intentgate_core::{IllegalTransition, IntentStatus, ResendStop, fingerprint};
use intentgate_ledger::{
    APPROVALS_PAGE_MAX, Approval, ApprovalFilter, ApprovalRequest, ApprovalState,
    BUDGET_BUCKET_LENGTH_MAX, Begin, BeginRequest, Bound, BudgetCharge, BudgetUsageRow,
    CallPolicies, CallerKey, Created, DENIED_BY, Decide, Decided, Decision, Erase, Erased, Erasure,
    Event, Finish, Finished, HeldIntent, Hold, INSTANCE_LENGTH_MAX, IntentFilter, IntentId,
    IntentRecord, Ledger, LedgerError, MISMATCH_DETAIL_LENGTH_MAX, MISMATCH_EXTERNAL_IDS_MAX,
    MISMATCH_SUBJECT_LENGTH_MAX, Order, PROCESSES_ENDED_KEPT_MAX, ProcessEnd, ProcessRecord,
    ProcessRegistration, RECONCILIATION_MISMATCHES_STORED_MAX, ReconciliationRun, Renew, Renewed,
    Resolve, SUMMARY_MISMATCHES_NOT_STORED, StatusCount, StoredMismatch, ToolFlag,
};
use serde_json::{Value, json};

#[path = "ledger/console.rs"]
mod console;
use console::*;

const TENANT: &str = "acme";
const TOOL: &str = "refund";
/// A second tenant and tool, for filters to tell apart.
const OTHER_TENANT: &str = "globex";
const OTHER_TOOL: &str = "charge";
/// A plausible wall-clock time, so that no test leans on times near zero.
const T0: i64 = 1_760_000_000_000;
/// How long a caller's lease lasts in these tests.
const LEASE_MS: i64 = 30_000;
/// Least time between two lookups of one unknown intent; longer than a lease, so a lookup
/// lease can expire before the next lookup is due.
const LOOKUP_INTERVAL_MS: i64 = 60_000;

/// Unwraps one variant of `Begin` or `Finished`, or fails showing what came instead.
macro_rules! expect {
    ($variant:path, $value:expr) => {
        match $value {
            $variant(record) => record,
            other => panic!("expected {}, got {other:?}", stringify!($variant)),
        }
    };
}

/// A first call for `key` by `lease_owner` at `now_ms`, with the defaults of a plain tool:
/// counted, a lease of `LEASE_MS`, rejections not retried.
fn request(key: &str, lease_owner: &str, now_ms: i64) -> BeginRequest {
    with_arguments(
        BeginRequest {
            tenant: TENANT.into(),
            tool: TOOL.into(),
            key: key.into(),
            fingerprint: String::new(),
            arguments: Value::Null,
            lease_owner: lease_owner.into(),
            lease_expires_ms: now_ms + LEASE_MS,
            now_ms,
            count_call: true,
            retry_rejected: false,
            lookup_interval_ms: LOOKUP_INTERVAL_MS,
            resend_unknown: false,
            expect_new: false,
            policies: None,
        },
        json!({ "order": key, "amount": "49.00" }),
    )
}

/// `request` with other arguments, and the fingerprint that goes with them.
fn with_arguments(request: BeginRequest, arguments: Value) -> BeginRequest {
    BeginRequest {
        fingerprint: fingerprint(&arguments).as_str().to_owned(),
        arguments,
        ..request
    }
}

/// What `lease_owner` learned about its attempt on `intent`: no result, from the upstream.
fn finish(intent: &IntentRecord, lease_owner: &str, status: IntentStatus, now_ms: i64) -> Finish {
    Finish {
        id: intent.id,
        lease_owner: lease_owner.into(),
        attempt: intent.attempt,
        now_ms,
        status,
        result: None,
        external_id: None,
        resolved_by: "upstream",
        looked_up: false,
        detail: format!("{lease_owner} learned {status}"),
        lease_required: false,
        resend_stopped: None,
    }
}

/// Starts a new intent for `key` and returns it in flight under `lease_owner`.
async fn started(ledger: &dyn Ledger, key: &str, lease_owner: &str, now_ms: i64) -> IntentRecord {
    let begun = ledger.begin(request(key, lease_owner, now_ms)).await;
    expect!(Begin::Execute, begun.expect("begin"))
}

/// Starts a new intent for `key` and settles it with `status` at once.
async fn settled(
    ledger: &dyn Ledger,
    key: &str,
    status: IntentStatus,
    now_ms: i64,
) -> IntentRecord {
    let intent = started(ledger, key, "owner-settle", now_ms).await;
    let finished = ledger
        .finish(finish(&intent, "owner-settle", status, now_ms))
        .await;
    expect!(Finished::Recorded, finished.expect("finish"))
}

async fn read(ledger: &dyn Ledger, intent: &IntentRecord) -> IntentRecord {
    let read = ledger.get_by_id(intent.id).await.expect("get_by_id");
    read.unwrap_or_else(|| panic!("intent {} is gone", intent.id))
}

async fn events(ledger: &dyn Ledger, intent: &IntentRecord) -> Vec<Event> {
    ledger.events(intent.id).await.expect("events")
}

async fn all_intents(ledger: &dyn Ledger) -> Vec<IntentRecord> {
    ledger.list(0, 100_000).await.expect("list")
}

// ---------------------------------------------------------------------------------------
// The behaviours, store-independent.
// ---------------------------------------------------------------------------------------

async fn a_new_key_starts_its_first_attempt_in_flight(ledger: &dyn Ledger) {
    let asked = request("order-1", "owner-a", T0);
    let intent = expect!(Begin::Execute, ledger.begin(asked.clone()).await.unwrap());

    assert_eq!(intent.status, IntentStatus::InFlight);
    assert_eq!((intent.attempt, intent.epoch), (1, 1));
    assert_eq!(intent.lease_owner.as_deref(), Some("owner-a"));
    assert_eq!(intent.lease_expires_ms, Some(T0 + LEASE_MS));
    assert_eq!(intent.call_count, 1);
    assert_eq!(
        (&intent.tenant, &intent.tool, &intent.key),
        (&asked.tenant, &asked.tool, &asked.key)
    );
    assert_eq!(intent.fingerprint, asked.fingerprint);
    assert_eq!(intent.arguments, asked.arguments);
    assert_eq!((intent.first_seen_ms, intent.last_seen_ms), (T0, T0));
    assert_eq!(intent.result, None);
    assert_eq!(intent.external_id, None);
    assert_eq!(intent.resolved_by, None);
    assert_eq!(intent.last_lookup_ms, None);

    let by_key = ledger.get(TENANT, TOOL, "order-1").await.unwrap();
    assert_eq!(by_key.as_ref(), Some(&intent));
    assert_eq!(ledger.get_by_id(intent.id).await.unwrap(), Some(intent));
    assert_eq!(ledger.get(TENANT, TOOL, "order-2").await.unwrap(), None);
}

/// `expect_new` is a hint (a store may insert before it reads): a new key starts as any
/// first call does, and a key that exists, in flight or settled, is decided exactly as
/// without it, one intent throughout.
async fn a_begin_expecting_a_new_key_decides_the_same_when_the_key_exists(ledger: &dyn Ledger) {
    let expecting = |lease_owner: &str, now_ms| BeginRequest {
        expect_new: true,
        ..request("order-1", lease_owner, now_ms)
    };
    let intent = expect!(
        Begin::Execute,
        ledger.begin(expecting("owner-a", T0)).await.unwrap()
    );
    assert_eq!(
        (intent.status, intent.attempt, intent.call_count),
        (IntentStatus::InFlight, 1, 1)
    );
    assert_eq!(read(ledger, &intent).await, intent);
    let kinds: Vec<_> = events(ledger, &intent)
        .await
        .into_iter()
        .map(|event| (event.kind, event.to_status, event.attempt))
        .collect();
    assert_eq!(
        kinds,
        [
            ("created".to_owned(), Some("pending".to_owned()), Some(0)),
            (
                "transition".to_owned(),
                Some("in_flight".to_owned()),
                Some(1)
            ),
        ]
    );

    let busy = expect!(
        Begin::Busy,
        ledger.begin(expecting("owner-b", T0 + 1)).await.unwrap()
    );
    assert_eq!((busy.id, busy.call_count), (intent.id, 2));
    assert_eq!(busy.lease_owner.as_deref(), Some("owner-a"));

    let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 2);
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    let repeat = expect!(
        Begin::Settled,
        ledger.begin(expecting("owner-c", T0 + 3)).await.unwrap()
    );
    assert_eq!((repeat.id, repeat.call_count), (intent.id, 3));
    assert_eq!(all_intents(ledger).await.len(), 1);
    // A begin that found the key taken logged nothing of its own: no events under the ids a
    // store may have drawn for its insert and not used.
    for drawn in 1..=2 {
        assert_eq!(ledger.events(intent.id + drawn).await.unwrap(), []);
    }
}

/// `create` begins a key that has no intent, as `begin` does, and finds one that has:
/// answered as it is stored, with nothing decided or written (no call counted, no event, no
/// lease taken), in flight or settled, under this tenant and tool only.
async fn create_begins_a_new_key_and_finds_a_taken_one_writing_nothing(ledger: &dyn Ledger) {
    let intent = match ledger
        .create(request("order-1", "owner-a", T0))
        .await
        .unwrap()
    {
        Created::Begun(begun) => expect!(Begin::Execute, begun),
        found => panic!("a new key is begun, got {found:?}"),
    };
    assert_eq!(
        (intent.status, intent.attempt, intent.call_count),
        (IntentStatus::InFlight, 1, 1)
    );
    assert_eq!(intent.lease_owner.as_deref(), Some("owner-a"));
    assert_eq!(read(ledger, &intent).await, intent);
    let logged = events(ledger, &intent).await.len();
    assert_eq!(logged, 2, "created, then in flight");

    let in_flight = expect!(
        Created::Found,
        ledger
            .create(request("order-1", "owner-b", T0 + 1))
            .await
            .unwrap()
    );
    assert_eq!(
        in_flight, intent,
        "found as stored: not counted, not leased"
    );
    assert_eq!(read(ledger, &intent).await, intent);

    let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 2);
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    let settled = read(ledger, &intent).await;
    let found = expect!(
        Created::Found,
        ledger
            .create(request("order-1", "owner-c", T0 + 3))
            .await
            .unwrap()
    );
    assert_eq!(found, settled);
    assert_eq!(read(ledger, &intent).await, settled);
    assert_eq!(
        events(ledger, &intent).await.len(),
        logged + 1,
        "only the finish"
    );

    // The same key under another tenant is another intent, created.
    let other = match ledger
        .create(BeginRequest {
            tenant: OTHER_TENANT.into(),
            ..request("order-1", "owner-d", T0 + 4)
        })
        .await
        .unwrap()
    {
        Created::Begun(begun) => expect!(Begin::Execute, begun),
        found => panic!("another tenant's key is new, got {found:?}"),
    };
    assert_ne!(other.id, intent.id);
    assert_eq!(other.tenant, OTHER_TENANT);
    assert_eq!(all_intents(ledger).await.len(), 2);
}

async fn a_second_caller_is_busy_while_the_lease_lives(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let last_live_ms = T0 + LEASE_MS - 1;

    let busy = expect!(
        Begin::Busy,
        ledger
            .begin(request("order-1", "owner-b", last_live_ms))
            .await
            .unwrap()
    );
    assert_eq!(busy.status, IntentStatus::InFlight);
    assert_eq!(busy.lease_owner.as_deref(), Some("owner-a"));
    assert_eq!(busy.lease_expires_ms, Some(T0 + LEASE_MS));
    assert_eq!(busy.attempt, 1);
    assert_eq!(busy.call_count, 2, "a new call is counted");
    assert_eq!(read(ledger, &intent).await, busy);

    // The same call asking again after waiting is not a new call.
    let again = BeginRequest {
        count_call: false,
        ..request("order-1", "owner-b", last_live_ms)
    };
    let busy_again = expect!(Begin::Busy, ledger.begin(again).await.unwrap());
    assert_eq!(busy_again.call_count, 2);
    assert_eq!(read(ledger, &intent).await, busy_again);
}

async fn the_lease_holder_settles_the_intent_and_later_calls_get_it(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let result = json!({ "refund": "re_123", "amount": "49.00" });

    let done = Finish {
        result: Some(result.clone()),
        external_id: Some("re_123".into()),
        ..finish(&intent, "owner-a", IntentStatus::Done, T0 + 10)
    };
    let done = expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    assert_eq!(done.status, IntentStatus::Done);
    assert_eq!(done.result, Some(result));
    assert_eq!(done.external_id.as_deref(), Some("re_123"));
    assert_eq!(done.resolved_by.as_deref(), Some("upstream"));
    assert_eq!(
        (done.lease_owner.as_ref(), done.lease_expires_ms),
        (None, None)
    );
    assert_eq!(done.updated_ms, T0 + 10);
    assert_eq!((done.attempt, done.epoch), (1, 1));
    assert_eq!(read(ledger, &intent).await, done);

    let later = ledger
        .begin(request("order-1", "owner-b", T0 + 20))
        .await
        .unwrap();
    let answered = expect!(Begin::Settled, later);
    assert_eq!(
        answered,
        IntentRecord {
            call_count: 2,
            last_seen_ms: T0 + 20,
            ..done
        }
    );
    assert_eq!(read(ledger, &intent).await, answered);
}

async fn a_finish_without_the_lease_or_from_an_old_attempt_writes_nothing(ledger: &dyn Ledger) {
    // A caller that does not hold the lease.
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let logged = events(ledger, &intent).await;
    let stranger = finish(&intent, "owner-b", IntentStatus::Done, T0 + 10);
    let refused = expect!(Finished::Superseded, ledger.finish(stranger).await.unwrap());
    assert_eq!(refused, intent);
    assert_eq!(read(ledger, &intent).await, intent);
    assert_eq!(events(ledger, &intent).await, logged);

    // Attempt 1 learns its outcome only after its lease expired, the intent went unknown,
    // a lookup found it not executed and attempt 2 started and went unknown in turn. The
    // owner is not checked on an unknown intent, so only the attempt number stops it.
    let one = started(ledger, "order-2", "owner-1", T0).await;
    let lookup_ms = T0 + LEASE_MS;
    let looking = ledger
        .begin(request("order-2", "owner-l", lookup_ms))
        .await
        .unwrap();
    let looking = expect!(Begin::Lookup, looking);
    let not_executed = Finish {
        resolved_by: "lookup",
        looked_up: true,
        ..finish(
            &looking,
            "owner-l",
            IntentStatus::NotExecuted,
            lookup_ms + 1,
        )
    };
    expect!(
        Finished::Recorded,
        ledger.finish(not_executed).await.unwrap()
    );
    let two = ledger
        .begin(request("order-2", "owner-2", lookup_ms + 2))
        .await
        .unwrap();
    let two = expect!(Begin::Execute, two);
    assert_eq!(two.attempt, 2);
    let gave_up = finish(&two, "owner-2", IntentStatus::Unknown, lookup_ms + 3);
    let unknown = expect!(Finished::Recorded, ledger.finish(gave_up).await.unwrap());
    assert_eq!(unknown.status, IntentStatus::Unknown);

    let logged = events(ledger, &unknown).await;
    let late = finish(&one, "owner-1", IntentStatus::Done, lookup_ms + 4);
    let refused = expect!(Finished::Superseded, ledger.finish(late).await.unwrap());
    assert_eq!(refused, unknown);
    assert_eq!(read(ledger, &unknown).await, unknown);
    assert_eq!(events(ledger, &unknown).await, logged);

    // Nothing at all may change a done intent through `finish`.
    let done = settled(ledger, "order-3", IntentStatus::Done, T0).await;
    let logged = events(ledger, &done).await;
    for status in [IntentStatus::Unknown, IntentStatus::NotExecuted] {
        let again = finish(&done, "owner-settle", status, T0 + 10);
        let refused = expect!(Finished::Superseded, ledger.finish(again).await.unwrap());
        assert_eq!(refused, done);
    }
    assert_eq!(read(ledger, &done).await, done);
    assert_eq!(events(ledger, &done).await, logged);
}

async fn the_same_key_with_other_arguments_is_a_conflict(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let other = with_arguments(
        request("order-1", "owner-b", T0 + 5),
        json!({ "order": "order-1", "amount": "4900.00" }),
    );
    assert_ne!(other.fingerprint, intent.fingerprint);

    // Conflict wins over Busy: the lease of the first caller is live.
    let conflict = expect!(Begin::Conflict, ledger.begin(other.clone()).await.unwrap());
    let expected = IntentRecord {
        call_count: 2,
        last_seen_ms: T0 + 5,
        ..intent.clone()
    };
    assert_eq!(conflict, expected);
    assert_eq!(read(ledger, &intent).await, expected);

    // Not counted: nothing changes at all.
    let uncounted = BeginRequest {
        count_call: false,
        now_ms: T0 + 6,
        ..other
    };
    let conflict = expect!(Begin::Conflict, ledger.begin(uncounted).await.unwrap());
    assert_eq!(conflict, expected);
    assert_eq!(read(ledger, &intent).await, expected);
    assert_eq!(all_intents(ledger).await.len(), 1);
}

async fn the_same_key_under_another_tenant_or_tool_is_another_intent(ledger: &dyn Ledger) {
    let first = started(ledger, "order-1", "owner-a", T0).await;
    let other_tenant = BeginRequest {
        tenant: "globex".into(),
        ..request("order-1", "owner-b", T0 + 1)
    };
    let other_tenant = expect!(Begin::Execute, ledger.begin(other_tenant).await.unwrap());
    let other_tool = BeginRequest {
        tool: "charge".into(),
        ..request("order-1", "owner-c", T0 + 2)
    };
    let other_tool = expect!(Begin::Execute, ledger.begin(other_tool).await.unwrap());

    let ids: HashSet<_> = [first.id, other_tenant.id, other_tool.id].into();
    assert_eq!(ids.len(), 3, "three intents");
    for intent in [&first, &other_tenant, &other_tool] {
        assert_eq!((intent.attempt, intent.call_count), (1, 1));
    }

    // Settling one leaves the others as they were.
    let done = ledger
        .finish(finish(&first, "owner-a", IntentStatus::Done, T0 + 3))
        .await;
    expect!(Finished::Recorded, done.unwrap());
    let tenant_copy = ledger.get("globex", TOOL, "order-1").await.unwrap();
    assert_eq!(tenant_copy, Some(other_tenant));
    let tool_copy = ledger.get(TENANT, "charge", "order-1").await.unwrap();
    assert_eq!(tool_copy, Some(other_tool));
    let original = ledger.get(TENANT, TOOL, "order-1").await.unwrap().unwrap();
    assert_eq!(original.status, IntentStatus::Done);
}

async fn an_expired_lease_makes_the_intent_unknown_and_one_caller_looks_it_up(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;

    // At the expiry the lease is over: the next caller turns the intent unknown and gets
    // the lookup lease. The attempt and the provider key stay those of the lost attempt.
    let lookup_ms = T0 + LEASE_MS;
    let lookup = ledger
        .begin(request("order-1", "owner-b", lookup_ms))
        .await
        .unwrap();
    let lookup = expect!(Begin::Lookup, lookup);
    assert_eq!(lookup.status, IntentStatus::Unknown);
    assert_eq!(lookup.lease_owner.as_deref(), Some("owner-b"));
    assert_eq!(lookup.lease_expires_ms, Some(lookup_ms + LEASE_MS));
    assert_eq!(lookup.last_lookup_ms, Some(lookup_ms));
    assert_eq!((lookup.attempt, lookup.epoch), (1, 1));
    assert_eq!(read(ledger, &intent).await, lookup);

    // Another caller meanwhile waits for what the lookup learns.
    let meanwhile = ledger
        .begin(request("order-1", "owner-c", lookup_ms + 1))
        .await
        .unwrap();
    let meanwhile = expect!(Begin::Busy, meanwhile);
    assert_eq!(meanwhile.status, IntentStatus::Unknown);
    assert_eq!(meanwhile.lease_owner.as_deref(), Some("owner-b"));

    // The lookup found nothing: the lease is released and the next lookup is due one
    // interval after this one, not after the lookup lease was taken.
    let nothing_ms = lookup_ms + 5_000;
    let nothing = Finish {
        resolved_by: "lookup",
        looked_up: true,
        ..finish(&lookup, "owner-b", IntentStatus::Unknown, nothing_ms)
    };
    let nothing = expect!(Finished::Recorded, ledger.finish(nothing).await.unwrap());
    assert_eq!(nothing.status, IntentStatus::Unknown);
    assert_eq!(nothing.lease_owner, None);
    assert_eq!(nothing.last_lookup_ms, Some(nothing_ms));

    let early = ledger
        .begin(request(
            "order-1",
            "owner-d",
            lookup_ms + LOOKUP_INTERVAL_MS,
        ))
        .await
        .unwrap();
    let early = expect!(Begin::Settled, early);
    assert_eq!(early.status, IntentStatus::Unknown);
    assert_eq!(early.lease_owner, None);

    let due_ms = nothing_ms + LOOKUP_INTERVAL_MS;
    let due = ledger
        .begin(request("order-1", "owner-e", due_ms))
        .await
        .unwrap();
    let due = expect!(Begin::Lookup, due);
    assert_eq!(due.lease_owner.as_deref(), Some("owner-e"));
    assert_eq!(due.last_lookup_ms, Some(due_ms));

    // This lookup finds the effect: the intent is done.
    let found = Finish {
        result: Some(json!({ "refund": "re_123" })),
        external_id: Some("re_123".into()),
        resolved_by: "lookup",
        looked_up: true,
        ..finish(&due, "owner-e", IntentStatus::Done, due_ms + 10)
    };
    let found = expect!(Finished::Recorded, ledger.finish(found).await.unwrap());
    assert_eq!(found.status, IntentStatus::Done);
    assert_eq!(found.resolved_by.as_deref(), Some("lookup"));
    assert_eq!(found.external_id.as_deref(), Some("re_123"));
    assert_eq!(found.lease_owner, None);

    let after = ledger
        .begin(request("order-1", "owner-f", due_ms + 20))
        .await
        .unwrap();
    assert_eq!(expect!(Begin::Settled, after).status, IntentStatus::Done);
}

async fn lookups_of_an_unknown_intent_are_one_at_a_time_and_rate_limited(ledger: &dyn Ledger) {
    started(ledger, "order-1", "owner-a", T0).await;
    let lookup_ms = T0 + LEASE_MS;
    let lookup = ledger
        .begin(request("order-1", "owner-b", lookup_ms))
        .await
        .unwrap();
    expect!(Begin::Lookup, lookup);

    // A live lookup lease is never taken over, even by a caller whose tool has a shorter
    // lookup interval than the lease.
    let impatient = BeginRequest {
        lookup_interval_ms: 1_000,
        ..request("order-1", "owner-i", lookup_ms + 2_000)
    };
    let impatient = expect!(Begin::Busy, ledger.begin(impatient).await.unwrap());
    assert_eq!(impatient.lease_owner.as_deref(), Some("owner-b"));
    assert_eq!(impatient.last_lookup_ms, Some(lookup_ms));

    // The lookup holder vanished; its lease is over but the next lookup is not due yet.
    let lapsed_ms = lookup_ms + LEASE_MS + 1;
    assert!(lapsed_ms < lookup_ms + LOOKUP_INTERVAL_MS);
    let lapsed = ledger
        .begin(request("order-1", "owner-c", lapsed_ms))
        .await
        .unwrap();
    assert_eq!(
        expect!(Begin::Settled, lapsed).status,
        IntentStatus::Unknown
    );

    let due_ms = lookup_ms + LOOKUP_INTERVAL_MS;
    let due = ledger
        .begin(request("order-1", "owner-d", due_ms))
        .await
        .unwrap();
    let due = expect!(Begin::Lookup, due);
    assert_eq!(due.lease_owner.as_deref(), Some("owner-d"));
    assert_eq!(due.attempt, 1, "a lookup is not a new attempt");
}

/// An attempt whose answer the provider gives every request with its key (a stored 5xx
/// replayed) stops the intent's same-key re-sends: the reason is kept with the intent, read
/// back by every read, not undone by a later finish that says nothing of it, honoured by
/// `begin` (a re-send is asked for, a lookup is what it gets), and dropped only when the
/// provider key changes (a reopened rejection's new epoch).
async fn stopped_re_sends_are_kept_honoured_and_dropped_with_the_provider_key(ledger: &dyn Ledger) {
    let resend = |lease_owner: &str, now_ms| BeginRequest {
        count_call: false,
        resend_unknown: true,
        expect_new: false,
        ..request("order-r", lease_owner, now_ms)
    };
    let intent = started(ledger, "order-r", "owner-a", T0).await;
    assert_eq!(intent.resend_stopped, None, "a new intent may be re-sent");
    let replayed = Finish {
        looked_up: true,
        resend_stopped: Some(ResendStop::ReplayedServerError),
        detail: "server error replayed for this key; the lookup found nothing yet; same-key \
                 re-sends stopped for good"
            .into(),
        ..finish(&intent, "owner-a", IntentStatus::Unknown, T0 + 1)
    };
    let stopped = expect!(Finished::Recorded, ledger.finish(replayed).await.unwrap());
    assert_eq!(
        (stopped.status, stopped.resend_stopped),
        (IntentStatus::Unknown, Some(ResendStop::ReplayedServerError))
    );
    assert_eq!(read(ledger, &intent).await, stopped);
    let log = events(ledger, &intent).await;
    assert!(
        log.last()
            .and_then(|event| event.detail.as_deref())
            .is_some_and(|detail| detail.contains("re-sends stopped")),
        "{log:#?}"
    );

    // Asked for a re-send once a step is due, `begin` gives a lookup lease instead.
    let due_ms = T0 + 1 + LOOKUP_INTERVAL_MS;
    let lookup = expect!(
        Begin::Lookup,
        ledger.begin(resend("owner-b", due_ms)).await.unwrap()
    );
    assert_eq!((lookup.attempt, lookup.epoch), (1, 1));
    // A lookup's finish says nothing of re-sends: the stop stays.
    let nothing = Finish {
        resolved_by: "lookup",
        looked_up: true,
        ..finish(&lookup, "owner-b", IntentStatus::Unknown, due_ms + 1)
    };
    let still = expect!(Finished::Recorded, ledger.finish(nothing).await.unwrap());
    assert_eq!(still.resend_stopped, Some(ResendStop::ReplayedServerError));
    // Nor does a second reason replace the first.
    let again = expect!(
        Begin::Lookup,
        ledger
            .begin(resend("owner-c", due_ms + 1 + LOOKUP_INTERVAL_MS))
            .await
            .unwrap()
    );
    let key_reused = Finish {
        looked_up: true,
        resend_stopped: Some(ResendStop::KeyReused),
        ..finish(
            &again,
            "owner-c",
            IntentStatus::Unknown,
            due_ms + 2 + LOOKUP_INTERVAL_MS,
        )
    };
    let kept = expect!(Finished::Recorded, ledger.finish(key_reused).await.unwrap());
    assert_eq!(kept.resend_stopped, Some(ResendStop::ReplayedServerError));

    // An operator settles it rejected, then reopens it: a new provider key, re-sends again.
    let resolve = |status, now_ms| Resolve {
        id: intent.id,
        status,
        external_id: None,
        result: None,
        actor: "operator:alice".into(),
        reason: "checked at the provider".into(),
        now_ms,
    };
    let later_ms = due_ms + 10 * LOOKUP_INTERVAL_MS;
    let rejected = ledger
        .resolve(resolve(IntentStatus::Rejected, later_ms))
        .await
        .unwrap();
    assert_eq!(
        rejected.resend_stopped,
        Some(ResendStop::ReplayedServerError)
    );
    let reopened = ledger
        .resolve(resolve(IntentStatus::NotExecuted, later_ms + 1))
        .await
        .unwrap();
    assert_eq!((reopened.epoch, reopened.resend_stopped), (2, None));
    assert_eq!(read(ledger, &intent).await, reopened);
}

async fn an_unknown_intent_is_re_sent_with_the_same_provider_key_only_when_asked(
    ledger: &dyn Ledger,
) {
    let resend = |lease_owner: &str, now_ms| BeginRequest {
        count_call: false,
        resend_unknown: true,
        expect_new: false,
        ..request("order-1", lease_owner, now_ms)
    };
    let intent = started(ledger, "order-1", "owner-a", T0).await;

    // An in-flight attempt whose lease has just expired is looked up first, even by a
    // caller that asks for a re-send: that attempt may have committed.
    let lookup_ms = T0 + LEASE_MS;
    let lookup = expect!(
        Begin::Lookup,
        ledger.begin(resend("owner-b", lookup_ms)).await.unwrap()
    );
    assert_eq!(
        (lookup.status, lookup.attempt, lookup.epoch),
        (IntentStatus::Unknown, 1, 1)
    );

    // Nor is a live lookup lease taken over by a re-send.
    let during = expect!(
        Begin::Busy,
        ledger
            .begin(resend("owner-s", lookup_ms + 1))
            .await
            .unwrap()
    );
    assert_eq!(during.lease_owner.as_deref(), Some("owner-b"));

    // The lookup found nothing.
    let nothing_ms = lookup_ms + 1_000;
    let nothing = Finish {
        resolved_by: "lookup",
        looked_up: true,
        ..finish(&lookup, "owner-b", IntentStatus::Unknown, nothing_ms)
    };
    expect!(Finished::Recorded, ledger.finish(nothing).await.unwrap());

    // Without the flag an unknown intent never starts an attempt: it is answered from the
    // ledger, or looked up when a lookup is due, and stays at attempt 1.
    let plain = expect!(
        Begin::Settled,
        ledger
            .begin(request("order-1", "owner-c", nothing_ms + 1))
            .await
            .unwrap()
    );
    assert_eq!((plain.status, plain.attempt), (IntentStatus::Unknown, 1));
    let due_ms = nothing_ms + LOOKUP_INTERVAL_MS;
    let due = expect!(
        Begin::Lookup,
        ledger
            .begin(request("order-1", "owner-d", due_ms))
            .await
            .unwrap()
    );
    assert_eq!(
        (due.status, due.attempt, due.epoch),
        (IntentStatus::Unknown, 1, 1)
    );
    let nothing_again = Finish {
        resolved_by: "lookup",
        looked_up: true,
        ..finish(&due, "owner-d", IntentStatus::Unknown, due_ms + 1)
    };
    expect!(
        Finished::Recorded,
        ledger.finish(nothing_again).await.unwrap()
    );

    // With it, the free unknown intent starts attempt 2 in flight, with the same epoch: the
    // provider gets the same idempotency key.
    let resend_ms = due_ms + 2;
    let resent = expect!(
        Begin::Execute,
        ledger.begin(resend("sweeper/1", resend_ms)).await.unwrap()
    );
    assert_eq!(resent.status, IntentStatus::InFlight);
    assert_eq!((resent.attempt, resent.epoch), (2, 1));
    assert_eq!(resent.lease_owner.as_deref(), Some("sweeper/1"));
    assert_eq!(resent.lease_expires_ms, Some(resend_ms + LEASE_MS));
    assert_eq!(resent.call_count, due.call_count, "a re-send is not a call");
    assert_eq!(read(ledger, &intent).await, resent);
    let last = events(ledger, &intent).await.pop().unwrap();
    assert_eq!(
        (
            last.kind.as_str(),
            last.from_status.as_deref(),
            last.to_status.as_deref(),
            last.attempt
        ),
        ("transition", Some("unknown"), Some("in_flight"), Some(2))
    );

    // One re-send at a time: the next caller waits for its lease.
    let busy = expect!(
        Begin::Busy,
        ledger
            .begin(resend("sweeper/2", resend_ms + 1))
            .await
            .unwrap()
    );
    assert_eq!(busy.lease_owner.as_deref(), Some("sweeper/1"));

    // The provider replayed the first attempt's success: done, and never sent again.
    let done = finish(&resent, "sweeper/1", IntentStatus::Done, resend_ms + 10);
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    let after = expect!(
        Begin::Settled,
        ledger
            .begin(resend("sweeper/3", resend_ms + 20))
            .await
            .unwrap()
    );
    assert_eq!(
        (after.status, after.attempt, after.epoch),
        (IntentStatus::Done, 2, 1)
    );
}

async fn a_not_executed_intent_starts_a_new_attempt_with_the_same_provider_key(
    ledger: &dyn Ledger,
) {
    let first = settled(ledger, "order-1", IntentStatus::NotExecuted, T0).await;
    assert_eq!(first.status, IntentStatus::NotExecuted);
    assert_eq!(first.lease_owner, None);

    let again = ledger
        .begin(request("order-1", "owner-b", T0 + 100))
        .await
        .unwrap();
    let again = expect!(Begin::Execute, again);
    assert_eq!(again.id, first.id);
    assert_eq!(again.status, IntentStatus::InFlight);
    assert_eq!((again.attempt, again.epoch), (2, 1));
    assert_eq!(again.lease_owner.as_deref(), Some("owner-b"));
    assert_eq!(again.call_count, 2);
    assert_eq!(read(ledger, &first).await, again);
}

async fn a_rejected_intent_is_settled_unless_the_tool_retries_rejections(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let refusal = json!({ "error": "card_declined" });
    let rejected = Finish {
        result: Some(refusal.clone()),
        ..finish(&intent, "owner-a", IntentStatus::Rejected, T0 + 10)
    };
    let rejected = expect!(Finished::Recorded, ledger.finish(rejected).await.unwrap());
    assert_eq!(rejected.status, IntentStatus::Rejected);
    assert_eq!(rejected.result, Some(refusal.clone()));

    let replayed = ledger
        .begin(request("order-1", "owner-b", T0 + 20))
        .await
        .unwrap();
    let replayed = expect!(Begin::Settled, replayed);
    assert_eq!(replayed.status, IntentStatus::Rejected);
    assert_eq!(replayed.result, Some(refusal));
    assert_eq!((replayed.attempt, replayed.epoch), (1, 1));

    // A new attempt under a new provider key, so the provider can't replay its refusal.
    let retried = BeginRequest {
        retry_rejected: true,
        ..request("order-1", "owner-c", T0 + 30)
    };
    let retried = expect!(Begin::Execute, ledger.begin(retried).await.unwrap());
    assert_eq!(retried.status, IntentStatus::InFlight);
    assert_eq!((retried.attempt, retried.epoch), (2, 2));
    assert_eq!(retried.lease_owner.as_deref(), Some("owner-c"));
    assert_eq!(read(ledger, &intent).await, retried);
}

async fn every_call_and_transition_is_logged_oldest_first(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-1", "owner-a", T0).await;
    let busy = ledger.begin(request("order-1", "owner-b", T0 + 1)).await;
    expect!(Begin::Busy, busy.unwrap());
    let conflicting = with_arguments(
        request("order-1", "owner-c", T0 + 2),
        json!({ "order": "order-1", "amount": "1.00" }),
    );
    expect!(Begin::Conflict, ledger.begin(conflicting).await.unwrap());
    let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 3);
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    let repeat = ledger.begin(request("order-1", "owner-d", T0 + 4)).await;
    expect!(Begin::Settled, repeat.unwrap());
    let counted = ledger.record_calls(vec![(intent.id, T0 + 5)]).await;
    assert_eq!(counted, Ok(vec![]));

    let log = events(ledger, &intent).await;
    let summary: Vec<_> = log
        .iter()
        .map(|event| {
            (
                event.kind.as_str(),
                event.from_status.as_deref(),
                event.to_status.as_deref(),
                event.at_ms - T0,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("created", None, Some("pending"), 0),
            ("transition", Some("pending"), Some("in_flight"), 0),
            ("call", None, None, 1),
            ("call", None, None, 2),
            ("conflict", None, None, 2),
            ("transition", Some("in_flight"), Some("done"), 3),
            ("call", None, None, 4),
            ("call", None, None, 5),
        ]
    );
    assert!(
        log.windows(2).all(|pair| pair[0].id < pair[1].id),
        "oldest first: {log:?}"
    );
    for event in &log {
        assert_eq!(event.intent_id, Some(intent.id));
        assert_eq!((event.tenant.as_str(), event.tool.as_str()), (TENANT, TOOL));
    }
    let settling = &log[5];
    assert_eq!(settling.actor.as_deref(), Some("upstream"));
    assert_eq!(settling.attempt, Some(1));
    assert_eq!(settling.detail.as_deref(), Some("owner-a learned done"));

    assert_eq!(ledger.events(intent.id + 1_000).await.unwrap(), []);
    let missing = intent.id + 1_000;
    let counted = ledger
        .record_calls(vec![(missing, T0 + 6), (intent.id, T0 + 6)])
        .await;
    assert_eq!(
        counted,
        Ok(vec![missing]),
        "the gone intent answered, the other counted"
    );
    assert_eq!(
        ledger
            .get_by_id(intent.id)
            .await
            .unwrap()
            .unwrap()
            .call_count,
        6
    );
}

async fn an_operator_resolves_an_unknown_intent_and_illegal_resolutions_are_refused(
    ledger: &dyn Ledger,
) {
    let unknown = settled(ledger, "order-1", IntentStatus::Unknown, T0).await;
    assert_eq!(unknown.status, IntentStatus::Unknown);

    let result = json!({ "refund": "re_9" });
    let resolved = ledger
        .resolve(Resolve {
            id: unknown.id,
            status: IntentStatus::Done,
            external_id: Some("re_9".into()),
            result: Some(result.clone()),
            actor: "operator:alice".into(),
            reason: "seen in the provider's dashboard".into(),
            now_ms: T0 + 100,
        })
        .await
        .unwrap();
    assert_eq!(resolved.status, IntentStatus::Done);
    assert_eq!(resolved.external_id.as_deref(), Some("re_9"));
    assert_eq!(resolved.result, Some(result));
    assert_eq!(resolved.resolved_by.as_deref(), Some("operator:alice"));
    assert_eq!(
        (resolved.lease_owner.as_ref(), resolved.lease_expires_ms),
        (None, None)
    );
    assert_eq!(resolved.updated_ms, T0 + 100);
    assert_eq!(read(ledger, &unknown).await, resolved);

    let log = events(ledger, &unknown).await;
    let last = log.last().expect("a resolve event");
    assert_eq!(last.kind, "resolve");
    assert_eq!(last.from_status.as_deref(), Some("unknown"));
    assert_eq!(last.to_status.as_deref(), Some("done"));
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
    assert_eq!(
        last.detail.as_deref(),
        Some("seen in the provider's dashboard")
    );
    assert_eq!(last.at_ms, T0 + 100);

    // A done intent is final.
    let illegal = ledger
        .resolve(Resolve {
            id: unknown.id,
            status: IntentStatus::NotExecuted,
            external_id: None,
            result: None,
            actor: "operator:mallory".into(),
            reason: "undo".into(),
            now_ms: T0 + 200,
        })
        .await;
    assert_eq!(
        illegal,
        Err(LedgerError::Transition(IllegalTransition {
            from: IntentStatus::Done,
            to: IntentStatus::NotExecuted,
        }))
    );
    assert_eq!(read(ledger, &unknown).await, resolved);
    assert_eq!(events(ledger, &unknown).await, log);

    let missing = ledger
        .resolve(Resolve {
            id: unknown.id + 1_000,
            status: IntentStatus::Done,
            external_id: None,
            result: None,
            actor: "operator:alice".into(),
            reason: "typo".into(),
            now_ms: T0 + 300,
        })
        .await;
    assert_eq!(missing, Err(LedgerError::NotFound(unknown.id + 1_000)));
}

/// A resolution never takes a live lease away: the sweeper's lookup (or a re-send) of an
/// unknown intent, or a call in flight, is refused with who holds it and until when, and
/// nothing is written. The admin API checked the lease on its own read only, so a lease
/// taken between that read and the write was overwritten, and a re-send could land at the
/// provider after a person had declared the intent not executed.
async fn a_resolution_is_refused_while_a_lease_lives(ledger: &dyn Ledger) {
    started(ledger, "order-1", "owner-a", T0).await;
    let lookup_ms = T0 + LEASE_MS;
    let lookup = ledger
        .begin(request("order-1", "host-1/sweeper/7", lookup_ms))
        .await
        .unwrap();
    let leased = expect!(Begin::Lookup, lookup);
    let before = events(ledger, &leased).await;
    let resolve = |status, external_id: Option<&str>, now_ms| Resolve {
        id: leased.id,
        status,
        external_id: external_id.map(str::to_owned),
        result: None,
        actor: "operator:alice".into(),
        reason: "not in the provider's dashboard".into(),
        now_ms,
    };
    for (status, external_id) in [
        (IntentStatus::NotExecuted, None),
        (IntentStatus::Done, Some("re_1")),
    ] {
        let refused = ledger
            .resolve(resolve(status, external_id, lookup_ms + 1))
            .await;
        assert_eq!(
            refused,
            Err(LedgerError::LeaseHeld {
                id: leased.id,
                owner: "host-1/sweeper/7".into(),
                expires_ms: lookup_ms + LEASE_MS,
            })
        );
    }
    assert_eq!(read(ledger, &leased).await, leased);
    assert_eq!(events(ledger, &leased).await, before);

    // Once the lease is over, the same resolution goes through.
    let resolved = ledger
        .resolve(resolve(
            IntentStatus::NotExecuted,
            None,
            lookup_ms + LEASE_MS,
        ))
        .await
        .unwrap();
    assert_eq!(resolved.status, IntentStatus::NotExecuted);

    // A call in flight holds its lease too.
    let running = started(ledger, "order-2", "owner-b", T0).await;
    let refused = ledger
        .resolve(Resolve {
            id: running.id,
            ..resolve(IntentStatus::Done, Some("re_2"), T0 + 1)
        })
        .await;
    assert!(
        matches!(refused, Err(LedgerError::LeaseHeld { ref owner, .. }) if owner == "owner-b"),
        "{refused:?}"
    );
    assert_eq!(read(ledger, &running).await, running);
}

async fn values_over_their_limit_are_refused_and_nothing_is_written(ledger: &dyn Ledger) {
    let long_key = "k".repeat(INTENT_KEY_LENGTH_MAX + 1);
    let refused = ledger.begin(request(&long_key, "owner-a", T0)).await;
    assert_eq!(
        refused,
        Err(LedgerError::TooLarge {
            field: "key",
            length: INTENT_KEY_LENGTH_MAX + 1,
            limit: INTENT_KEY_LENGTH_MAX,
        })
    );

    let long_tenant = "t".repeat(TENANT_LENGTH_MAX + 1);
    let refused = ledger
        .begin(BeginRequest {
            tenant: long_tenant.clone(),
            ..request("order-1", "owner-a", T0)
        })
        .await;
    assert_eq!(
        refused,
        Err(LedgerError::TooLarge {
            field: "tenant",
            length: TENANT_LENGTH_MAX + 1,
            limit: TENANT_LENGTH_MAX,
        })
    );

    let big = json!({ "note": "x".repeat(ARGUMENTS_BYTES_MAX) });
    let refused = ledger
        .begin(with_arguments(
            request("order-2", "owner-a", T0),
            big.clone(),
        ))
        .await;
    match refused {
        Err(LedgerError::TooLarge {
            field: "arguments",
            length,
            limit: ARGUMENTS_BYTES_MAX,
        }) => assert!(length > ARGUMENTS_BYTES_MAX),
        other => panic!("expected arguments to be too large, got {other:?}"),
    }

    assert_eq!(all_intents(ledger).await, []);
    assert_eq!(ledger.get(TENANT, TOOL, &long_key).await.unwrap(), None);
    assert_eq!(
        ledger.get(&long_tenant, TOOL, "order-1").await.unwrap(),
        None
    );
    assert_eq!(ledger.get(TENANT, TOOL, "order-2").await.unwrap(), None);

    // The limits themselves are allowed.
    let longest_key = "k".repeat(INTENT_KEY_LENGTH_MAX);
    started(ledger, &longest_key, "owner-a", T0).await;
    let longest_tenant = BeginRequest {
        tenant: "t".repeat(TENANT_LENGTH_MAX),
        ..request("order-1", "owner-a", T0)
    };
    expect!(Begin::Execute, ledger.begin(longest_tenant).await.unwrap());
    assert_eq!(all_intents(ledger).await.len(), 2);
}

async fn a_tool_flag_is_stored_once_per_tool_and_updated_in_place(ledger: &dyn Ledger) {
    assert_eq!(ledger.tool_flags().await.unwrap(), []);
    let off = ToolFlag {
        tool: TOOL.into(),
        enabled: false,
        reason: "refunds double-paid on 2 May".into(),
        actor: "operator:alice".into(),
        updated_ms: T0,
    };
    ledger.set_tool_flag(off.clone()).await.unwrap();
    assert_eq!(ledger.tool_flags().await.unwrap(), [off]);

    let on = ToolFlag {
        tool: TOOL.into(),
        enabled: true,
        reason: "fixed upstream".into(),
        actor: "operator:bob".into(),
        updated_ms: T0 + 1_000,
    };
    ledger.set_tool_flag(on.clone()).await.unwrap();
    assert_eq!(
        ledger.tool_flags().await.unwrap(),
        std::slice::from_ref(&on)
    );

    let other = ToolFlag {
        tool: "charge".into(),
        enabled: false,
        reason: "maintenance".into(),
        actor: "operator:bob".into(),
        updated_ms: T0 + 2_000,
    };
    ledger.set_tool_flag(other.clone()).await.unwrap();
    let mut flags = ledger.tool_flags().await.unwrap();
    flags.sort_by(|a, b| a.tool.cmp(&b.tool));
    assert_eq!(flags, [other, on]);
}

async fn purge_deletes_old_settled_intents_and_keeps_unresolved_ones(ledger: &dyn Ledger) {
    let cutoff_ms = T0 + 1_000;
    let old_done = settled(ledger, "old-done", IntentStatus::Done, T0).await;
    let old_rejected = settled(ledger, "old-rejected", IntentStatus::Rejected, T0).await;
    let old_not_executed = settled(ledger, "old-not-executed", IntentStatus::NotExecuted, T0).await;
    let old_unknown = settled(ledger, "old-unknown", IntentStatus::Unknown, T0).await;
    let old_in_flight = started(ledger, "old-in-flight", "owner-a", T0).await;
    // Created long ago, but called again after the cutoff.
    let seen_again = settled(ledger, "seen-again", IntentStatus::Done, T0).await;
    let repeat = ledger
        .begin(request("seen-again", "owner-b", cutoff_ms + 1))
        .await;
    expect!(Begin::Settled, repeat.unwrap());
    let recent = settled(ledger, "recent-done", IntentStatus::Done, cutoff_ms).await;

    let kept = [&old_unknown, &old_in_flight, &seen_again, &recent];
    let mut kept_before = Vec::new();
    for intent in kept {
        kept_before.push((read(ledger, intent).await, events(ledger, intent).await));
    }

    assert_eq!(ledger.purge(cutoff_ms).await.unwrap(), 3);

    for gone in [&old_done, &old_rejected, &old_not_executed] {
        assert_eq!(
            ledger.get_by_id(gone.id).await.unwrap(),
            None,
            "{}",
            gone.key
        );
        assert_eq!(events(ledger, gone).await, [], "{}", gone.key);
    }
    for (intent, (record, log)) in kept.into_iter().zip(kept_before) {
        assert_eq!(read(ledger, intent).await, record, "{}", intent.key);
        assert_eq!(events(ledger, intent).await, log, "{}", intent.key);
    }
    assert_eq!(all_intents(ledger).await.len(), kept.len());

    // However old, unknown and in-flight intents wait for their resolution.
    assert_eq!(ledger.purge(T0 + 1_000_000_000).await.unwrap(), 2);
    let left: HashSet<_> = all_intents(ledger)
        .await
        .into_iter()
        .map(|intent| intent.id)
        .collect();
    assert_eq!(left, [old_unknown.id, old_in_flight.id].into());
}

async fn stale_lists_in_flight_intents_whose_lease_has_expired(ledger: &dyn Ledger) {
    let expired = started(ledger, "expired", "owner-a", T0).await;
    let expired_later = started(ledger, "expired-later", "owner-b", T0 + 1).await;
    let live = started(ledger, "live", "owner-c", T0 + 10_000).await;
    settled(ledger, "done", IntentStatus::Done, T0).await;

    // At its expiry a lease is over, as `begin` sees it too.
    let now_ms = T0 + LEASE_MS + 1;
    assert!(!expired_later.lease_live(now_ms) && live.lease_live(now_ms));
    let stale = ledger
        .stale(IntentStatus::InFlight, now_ms, 10, &[])
        .await
        .unwrap();
    let ids: Vec<_> = stale.iter().map(|intent| intent.id).collect();
    assert_eq!(ids, [expired.id, expired_later.id], "oldest first");

    let first = ledger
        .stale(IntentStatus::InFlight, now_ms, 1, &[])
        .await
        .unwrap();
    assert_eq!(first, std::slice::from_ref(&expired));

    let before_any_expiry = ledger
        .stale(IntentStatus::InFlight, T0 + LEASE_MS - 1, 10, &[])
        .await
        .unwrap();
    assert_eq!(before_any_expiry, []);
}

/// The intents of skipped tools are left out of the listing and take no place in its limit,
/// so tools the sweeper can't step never hold the others back.
async fn stale_leaves_out_the_tools_it_is_told_to_skip(ledger: &dyn Ledger) {
    let skipped = started(ledger, "skipped", "owner-a", T0).await;
    let other_tool = BeginRequest {
        tool: OTHER_TOOL.into(),
        ..request("kept", "owner-b", T0 + 1)
    };
    let kept = expect!(Begin::Execute, ledger.begin(other_tool).await.unwrap());
    let now_ms = T0 + LEASE_MS + 2;
    let all = ledger
        .stale(IntentStatus::InFlight, now_ms, 10, &[])
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    for skip in [
        vec![TOOL.to_owned()],
        vec![TOOL.to_owned(), "third".to_owned()],
    ] {
        let listed = ledger
            .stale(IntentStatus::InFlight, now_ms, 1, &skip)
            .await
            .unwrap();
        assert_eq!(listed, std::slice::from_ref(&kept), "skipping {skip:?}");
    }
    let only_skipped = ledger
        .stale(IntentStatus::InFlight, now_ms, 10, &[OTHER_TOOL.to_owned()])
        .await
        .unwrap();
    assert_eq!(only_skipped, std::slice::from_ref(&skipped));
}

/// How long a registered test process may go without a heartbeat before it counts as gone.
const SILENT_AFTER_MS: i64 = 3_000;

/// `instance`, registered at `now_ms` as a process on this test's host.
async fn registered(ledger: &dyn Ledger, instance: &str, now_ms: i64) -> ProcessRecord {
    ledger
        .register_process(registration(instance, now_ms))
        .await
        .expect("register_process")
}

fn registration(instance: &str, now_ms: i64) -> ProcessRegistration {
    ProcessRegistration {
        instance: instance.into(),
        host: "test-host".into(),
        pid_scope: "boot-1/pid:[1]".into(),
        pid: 4242,
        now_ms,
        silent_after_ms: SILENT_AFTER_MS,
    }
}

/// The detail of the transition of `intent` out of `in_flight`.
async fn left_in_flight_because(ledger: &dyn Ledger, intent: &IntentRecord) -> String {
    let events = events(ledger, intent).await;
    let left = events
        .iter()
        .find(|event| {
            event.from_status.as_deref() == Some("in_flight")
                && event.to_status.as_deref() == Some("unknown")
        })
        .unwrap_or_else(|| panic!("no in_flight -> unknown event in {events:?}"));
    left.detail.clone().unwrap_or_default()
}

async fn a_registered_owner_that_ended_loses_its_live_leases_at_once(ledger: &dyn Ledger) {
    for (instance, end, said) in [
        ("gw-dead", ProcessEnd::Dead, "is gone"),
        ("gw-stopped", ProcessEnd::Stopped, "stopped"),
    ] {
        registered(ledger, instance, T0).await;
        let owner = format!("{instance}/1");
        let intent = started(ledger, instance, &owner, T0).await;
        // While it runs, its lease holds.
        expect!(
            Begin::Busy,
            ledger
                .begin(request(instance, "gw-other/1", T0 + 100))
                .await
                .unwrap()
        );
        assert!(ledger.end_process(instance, end, T0 + 200).await.unwrap());
        assert!(
            !ledger.end_process(instance, end, T0 + 201).await.unwrap(),
            "a process ends once"
        );

        // Long before its lease would expire, the intent is stale and the next caller takes
        // it as if the lease had expired: unknown, and looked up, never executed again.
        let now_ms = T0 + 300;
        let stale = ledger
            .stale(IntentStatus::InFlight, now_ms, 10, &[])
            .await
            .unwrap();
        assert_eq!(stale, [read(ledger, &intent).await], "{instance}");
        let lookup = expect!(
            Begin::Lookup,
            ledger
                .begin(request(instance, "gw-other/2", now_ms))
                .await
                .unwrap()
        );
        assert_eq!(lookup.status, IntentStatus::Unknown);
        assert_eq!(lookup.lease_owner.as_deref(), Some("gw-other/2"));
        assert_eq!((lookup.attempt, lookup.epoch), (1, 1));
        let detail = left_in_flight_because(ledger, &intent).await;
        assert!(
            detail.contains(&format!(
                "process {instance} (pid 4242 on test-host) {said}"
            )),
            "{detail}"
        );

        // What the ended owner learns afterwards still settles its attempt.
        let done = ledger
            .finish(finish(&intent, &owner, IntentStatus::Done, now_ms + 1))
            .await
            .unwrap();
        assert_eq!(expect!(Finished::Recorded, done).status, IntentStatus::Done);
    }
}

async fn a_lookup_lease_of_an_ended_owner_is_released_by_the_next_begin(ledger: &dyn Ledger) {
    let intent = settled(ledger, "order-1", IntentStatus::Unknown, T0).await;
    let due_ms = T0 + LOOKUP_INTERVAL_MS;
    registered(ledger, "gw-a", due_ms).await;
    let lookup = expect!(
        Begin::Lookup,
        ledger
            .begin(request("order-1", "gw-a/7", due_ms))
            .await
            .unwrap()
    );
    assert!(lookup.lease_live(due_ms + 1));
    assert_eq!(
        ledger
            .stale(IntentStatus::Unknown, due_ms + 1, 10, &[])
            .await
            .unwrap(),
        []
    );
    assert!(
        ledger
            .end_process("gw-a", ProcessEnd::Dead, due_ms + 1)
            .await
            .unwrap()
    );
    // The sweeper sees the intent at once; the next lookup is still due only one interval
    // after the last, as after an expired lookup lease.
    let stale = ledger
        .stale(IntentStatus::Unknown, due_ms + 2, 10, &[])
        .await
        .unwrap();
    assert_eq!(stale.iter().map(|i| i.id).collect::<Vec<_>>(), [intent.id]);
    let early = expect!(
        Begin::Settled,
        ledger
            .begin(request("order-1", "gw-b/1", due_ms + 2))
            .await
            .unwrap()
    );
    assert_eq!(early.status, IntentStatus::Unknown);
    assert_eq!(
        early.lease_owner, None,
        "the gone owner's lease is released"
    );
    let events = events(ledger, &intent).await;
    let released = events.last().unwrap();
    assert_eq!(released.kind, "lease");
    assert!(
        released
            .detail
            .as_deref()
            .is_some_and(|detail| detail.contains("process gw-a") && detail.contains("released")),
        "{released:?}"
    );
    expect!(
        Begin::Lookup,
        ledger
            .begin(request("order-1", "gw-b/2", due_ms + LOOKUP_INTERVAL_MS))
            .await
            .unwrap()
    );
}

async fn a_silent_owner_loses_its_live_lease_once_its_silence_is_over(ledger: &dyn Ledger) {
    registered(ledger, "gw-a", T0).await;
    let intent = started(ledger, "order-1", "gw-a/1", T0).await;
    let last_heartbeat_ms = T0 + 1_000;
    assert!(
        ledger
            .heartbeat_process("gw-a", last_heartbeat_ms)
            .await
            .unwrap()
    );
    // A heartbeat never moves back.
    assert!(ledger.heartbeat_process("gw-a", T0).await.unwrap());
    let process = ledger.process("gw-a").await.unwrap().unwrap();
    assert_eq!(process.heartbeat_ms, last_heartbeat_ms);

    // Silent for exactly its threshold: still alive.
    let at_threshold_ms = last_heartbeat_ms + SILENT_AFTER_MS;
    assert_eq!(
        ledger
            .stale(IntentStatus::InFlight, at_threshold_ms, 10, &[])
            .await
            .unwrap(),
        []
    );
    expect!(
        Begin::Busy,
        ledger
            .begin(request("order-1", "gw-b/1", at_threshold_ms))
            .await
            .unwrap()
    );
    // One millisecond more and the lease is taken, the lease itself still far from expiry.
    let silent_ms = at_threshold_ms + 1;
    assert!(intent.lease_live(silent_ms));
    assert_eq!(
        ledger
            .stale(IntentStatus::InFlight, silent_ms, 10, &[])
            .await
            .unwrap()
            .len(),
        1
    );
    let lookup = expect!(
        Begin::Lookup,
        ledger
            .begin(request("order-1", "gw-b/2", silent_ms))
            .await
            .unwrap()
    );
    assert_eq!(lookup.status, IntentStatus::Unknown);
    let detail = left_in_flight_because(ledger, &intent).await;
    assert!(
        detail.contains("process gw-a")
            && detail.contains(&format!(
                "stopped heartbeating {} ms ago",
                SILENT_AFTER_MS + 1
            )),
        "{detail}"
    );
}

async fn a_heartbeating_owner_keeps_its_lease_however_long_its_call(ledger: &dyn Ledger) {
    registered(ledger, "gw-a", T0).await;
    let intent = started(ledger, "order-1", "gw-a/1", T0).await;
    // A slow call: the process heartbeats every second while it lasts, and every other
    // caller waits, right up to the lease's expiry.
    let mut now_ms = T0;
    while now_ms < T0 + LEASE_MS - 1_000 {
        now_ms += 1_000;
        assert!(ledger.heartbeat_process("gw-a", now_ms).await.unwrap());
        let probe_ms = now_ms + 999;
        let busy = expect!(
            Begin::Busy,
            ledger
                .begin(BeginRequest {
                    count_call: false,
                    ..request("order-1", "gw-b/1", probe_ms)
                })
                .await
                .unwrap()
        );
        assert_eq!(busy.lease_owner.as_deref(), Some("gw-a/1"));
        assert_eq!(
            ledger
                .stale(IntentStatus::InFlight, probe_ms, 10, &[])
                .await
                .unwrap(),
            []
        );
    }
    // Its lease still expires like any other.
    let expired_ms = T0 + LEASE_MS;
    assert!(ledger.heartbeat_process("gw-a", expired_ms).await.unwrap());
    expect!(
        Begin::Lookup,
        ledger
            .begin(request("order-1", "gw-b/2", expired_ms))
            .await
            .unwrap()
    );
    assert_eq!(
        left_in_flight_because(ledger, &intent).await,
        "lease expired while in flight"
    );
}

async fn an_unregistered_owner_loses_its_lease_only_on_expiry(ledger: &dyn Ledger) {
    // Ended processes whose instances look like the owners' but are not theirs.
    for instance in ["gw", "gw-a-b", "owner"] {
        registered(ledger, instance, T0).await;
        ledger
            .end_process(instance, ProcessEnd::Dead, T0)
            .await
            .unwrap();
    }
    for owner in ["gw-a/1", "owner-a", "gw-a-b-c/1"] {
        let intent = started(ledger, owner, owner, T0).await;
        let last_live_ms = T0 + LEASE_MS - 1;
        assert_eq!(
            ledger
                .stale(IntentStatus::InFlight, last_live_ms, 10, &[])
                .await
                .unwrap(),
            [],
            "{owner}"
        );
        expect!(
            Begin::Busy,
            ledger
                .begin(request(owner, "gw-b/1", last_live_ms))
                .await
                .unwrap()
        );
        expect!(
            Begin::Lookup,
            ledger
                .begin(request(owner, "gw-b/2", T0 + LEASE_MS))
                .await
                .unwrap()
        );
        assert_eq!(
            left_in_flight_because(ledger, &intent).await,
            "lease expired while in flight"
        );
    }
}

async fn a_process_registers_heartbeats_ends_and_registers_again(ledger: &dyn Ledger) {
    assert_eq!(ledger.process("gw-a").await.unwrap(), None);
    assert!(!ledger.heartbeat_process("gw-a", T0).await.unwrap());
    assert!(
        !ledger
            .end_process("gw-a", ProcessEnd::Stopped, T0)
            .await
            .unwrap()
    );

    let long_host = "h".repeat(300);
    let stored = ledger
        .register_process(ProcessRegistration {
            host: long_host.clone(),
            ..registration("gw-a", T0)
        })
        .await
        .unwrap();
    let expected = ProcessRecord {
        instance: "gw-a".into(),
        host: long_host[..255].into(),
        pid_scope: "boot-1/pid:[1]".into(),
        pid: 4242,
        started_ms: T0,
        heartbeat_ms: T0,
        silent_after_ms: SILENT_AFTER_MS,
        ended: None,
        ended_ms: None,
    };
    assert_eq!(stored, expected);
    assert_eq!(
        ledger.process("gw-a").await.unwrap(),
        Some(expected.clone())
    );

    assert!(ledger.heartbeat_process("gw-a", T0 + 1_000).await.unwrap());
    assert!(
        ledger
            .end_process("gw-a", ProcessEnd::Dead, T0 + 2_000)
            .await
            .unwrap()
    );
    let dead = ledger.process("gw-a").await.unwrap().unwrap();
    assert_eq!(
        (dead.heartbeat_ms, dead.ended, dead.ended_ms),
        (T0 + 1_000, Some(ProcessEnd::Dead), Some(T0 + 2_000))
    );
    // An ended process's heartbeat is refused: it registers again, and runs anew.
    assert!(!ledger.heartbeat_process("gw-a", T0 + 3_000).await.unwrap());
    let again = registered(ledger, "gw-a", T0 + 3_000).await;
    assert_eq!((again.ended, again.started_ms), (None, T0 + 3_000));
    assert_eq!(ledger.process("gw-a").await.unwrap(), Some(again));
    assert!(ledger.heartbeat_process("gw-a", T0 + 4_000).await.unwrap());
}

async fn a_registration_with_a_bad_instance_or_silence_is_refused(ledger: &dyn Ledger) {
    let too_long = "i".repeat(INSTANCE_LENGTH_MAX + 1);
    for (instance, silent_after_ms, field) in [
        ("", SILENT_AFTER_MS, "instance"),
        ("gw/a", SILENT_AFTER_MS, "instance"),
        (too_long.as_str(), SILENT_AFTER_MS, "instance"),
        ("gw-a", 0, "silent_after_ms"),
    ] {
        let refused = ledger
            .register_process(ProcessRegistration {
                silent_after_ms,
                ..registration(instance, T0)
            })
            .await;
        match refused {
            Err(
                LedgerError::Invalid { field: named, .. }
                | LedgerError::TooLarge { field: named, .. },
            ) => {
                assert_eq!(named, field, "{instance:?}")
            }
            other => panic!("{instance:?}, {silent_after_ms}: {other:?}"),
        }
    }
    let longest = "i".repeat(INSTANCE_LENGTH_MAX);
    registered(ledger, &longest, T0).await;
    assert_eq!(ledger.process("gw-a").await.unwrap(), None);
}

async fn purge_deletes_processes_that_ended_or_went_silent_before_the_cutoff(ledger: &dyn Ledger) {
    let cutoff_ms = T0 + 10_000;
    registered(ledger, "ended-early", T0).await;
    ledger
        .end_process("ended-early", ProcessEnd::Stopped, T0 + 1)
        .await
        .unwrap();
    registered(ledger, "silent-early", T0).await;
    registered(ledger, "ended-late", T0).await;
    ledger
        .heartbeat_process("ended-late", cutoff_ms)
        .await
        .unwrap();
    ledger
        .end_process("ended-late", ProcessEnd::Dead, cutoff_ms)
        .await
        .unwrap();
    registered(ledger, "running", T0).await;
    ledger
        .heartbeat_process("running", cutoff_ms)
        .await
        .unwrap();

    ledger.purge(cutoff_ms).await.unwrap();
    for (instance, kept) in [
        ("ended-early", false),
        ("silent-early", false),
        ("ended-late", true),
        ("running", true),
    ] {
        assert_eq!(
            ledger.process(instance).await.unwrap().is_some(),
            kept,
            "{instance}"
        );
    }

    // However recent, no more ended processes are kept than the cap: the latest.
    let beyond = 5;
    for n in 0..PROCESSES_ENDED_KEPT_MAX as i64 + beyond {
        let instance = format!("short-lived-{n}");
        registered(ledger, &instance, cutoff_ms + n).await;
        ledger
            .end_process(&instance, ProcessEnd::Stopped, cutoff_ms + n)
            .await
            .unwrap();
    }
    ledger.purge(cutoff_ms).await.unwrap();
    for n in [0, beyond - 1] {
        let instance = format!("short-lived-{n}");
        assert_eq!(ledger.process(&instance).await.unwrap(), None, "{instance}");
    }
    assert!(ledger.process("short-lived-5").await.unwrap().is_some());
    assert!(ledger.process("running").await.unwrap().is_some());
    // ended-late ended before every short-lived one: beyond the cap now.
    assert_eq!(ledger.process("ended-late").await.unwrap(), None);
}

async fn concurrent_begins_on_distinct_keys_all_commit(ledger: Arc<dyn Ledger>) {
    const TASKS: usize = 64;
    const BEGINS_PER_TASK: usize = 50;
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let ledger = ledger.clone();
        tasks.spawn(async move {
            for begin in 0..BEGINS_PER_TASK {
                let key = format!("task-{task}-begin-{begin}");
                let owner = format!("owner-{task}-{begin}");
                let now_ms = T0 + begin as i64;
                let begun = ledger.begin(request(&key, &owner, now_ms)).await;
                let intent = expect!(Begin::Execute, begun.expect("begin"));
                assert_eq!(intent.key, key);
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("a task failed");
    }

    // Read back page by page, as `list` is meant to be used.
    let mut intents = Vec::new();
    loop {
        let after_id = intents.last().map_or(0, |intent: &IntentRecord| intent.id);
        let page = ledger.list(after_id, 500).await.unwrap();
        if page.is_empty() {
            break;
        }
        intents.extend(page);
    }
    assert_eq!(intents.len(), TASKS * BEGINS_PER_TASK);
    let ids: HashSet<_> = intents.iter().map(|intent| intent.id).collect();
    assert_eq!(ids.len(), TASKS * BEGINS_PER_TASK, "distinct ids");
    let keys: HashSet<_> = intents.iter().map(|intent| intent.key.as_str()).collect();
    assert_eq!(keys.len(), TASKS * BEGINS_PER_TASK, "distinct keys");
    assert!(
        intents
            .iter()
            .all(|intent| intent.status == IntentStatus::InFlight && intent.attempt == 1)
    );
}

/// `wait_for_change` may wake up early (a store may poll), so this bounds what a waiting
/// caller observes, as the gateway uses it: wait, read again, repeat.
async fn a_waiter_sees_the_lease_holder_finish_promptly(ledger: Arc<dyn Ledger>) {
    /// What a waiting caller is given; far beyond the bound the test checks.
    const WAIT: Duration = Duration::from_secs(5);
    /// The bound on the wake-up: generous, so a loaded machine does not fail it.
    const PROMPTLY: Duration = Duration::from_secs(2);

    let intent = started(&*ledger, "order-1", "owner-a", T0).await;
    let id = intent.id;
    let waiter = tokio::spawn({
        let ledger = ledger.clone();
        async move {
            // As a busy caller does: wait, read again, until the intent has moved on.
            let started = Instant::now();
            loop {
                ledger.wait_for_change(id, WAIT).await;
                let current = ledger.get_by_id(id).await.unwrap().unwrap();
                if current.status != IntentStatus::InFlight {
                    return (Instant::now(), current.status);
                }
                assert!(
                    started.elapsed() < 2 * WAIT,
                    "the waiter never saw a change"
                );
            }
        }
    });
    // Let the waiter get to its wait before the holder finishes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());

    let finished_at = Instant::now();
    let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 10);
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    let (seen_at, status) = tokio::time::timeout(WAIT, waiter)
        .await
        .expect("the waiter is still waiting")
        .expect("the waiter failed");
    assert_eq!(status, IntentStatus::Done);
    let delay = seen_at.saturating_duration_since(finished_at);
    assert!(
        delay < PROMPTLY,
        "the waiter saw the finish after {delay:?}"
    );
}

/// A finish queued with `finish_queued` returns before it commits, and every read made
/// through the ledger after it returns sees it: a read of the intent (by key, by id, its
/// events, the intent `create` finds) and a read of many (a filtered page, the status
/// counts). Each round reads right after queueing, racing the commit.
async fn a_queued_finish_is_seen_by_every_read_made_after_it(ledger: Arc<dyn Ledger>) {
    const ROUNDS: usize = 30;
    for round in 0..ROUNDS {
        let key = format!("order-{round}");
        let intent = started(&*ledger, &key, "owner-a", T0).await;
        let id = intent.id;
        let queued = ledger
            .finish_queued(finish(&intent, "owner-a", IntentStatus::Done, T0 + 10))
            .await
            .expect("queued");
        let seen = match round % 6 {
            0 => {
                ledger
                    .get(TENANT, TOOL, &key)
                    .await
                    .unwrap()
                    .unwrap()
                    .status
            }
            1 => ledger.get_by_id(id).await.unwrap().unwrap().status,
            2 => {
                let events = ledger.events(id).await.unwrap();
                let last = events.last().expect("the intent's events");
                assert_eq!(last.kind, "transition", "{events:?}");
                last.to_status.as_deref().unwrap().parse().unwrap()
            }
            3 => {
                let page = ledger
                    .intents(&IntentFilter::default(), Order::Newest, None, 10)
                    .await
                    .unwrap();
                page.iter().find(|found| found.id == id).unwrap().status
            }
            4 => {
                let created = ledger
                    .create(request(&key, "owner-b", T0 + 11))
                    .await
                    .unwrap();
                expect!(Created::Found, created).status
            }
            _ => {
                let counts = ledger.status_counts().await.unwrap();
                assert!(
                    !counts
                        .iter()
                        .any(|count| count.status == IntentStatus::InFlight),
                    "{counts:?}"
                );
                IntentStatus::Done
            }
        };
        assert_eq!(seen, IntentStatus::Done, "round {round}");
        let recorded = expect!(Finished::Recorded, queued.await.unwrap());
        assert_eq!(recorded.status, IntentStatus::Done);
    }
    // Nothing left to wait for: returns at once.
    tokio::time::timeout(Duration::from_secs(5), ledger.drain_queued())
        .await
        .expect("drained");
}

// ---------------------------------------------------------------------------------------
// Filtered pages, status counts and reconciliation runs, store-independent.
// ---------------------------------------------------------------------------------------

/// Creates the intent (tenant, tool, key), first seen at `now_ms`, and leaves it in
/// `status`: in flight under its lease, or settled by its upstream at once.
async fn intent_in(
    ledger: &dyn Ledger,
    tenant: &str,
    tool: &str,
    key: &str,
    status: IntentStatus,
    now_ms: i64,
) -> IntentRecord {
    let asked = BeginRequest {
        tenant: tenant.into(),
        tool: tool.into(),
        ..request(key, "owner-fixture", now_ms)
    };
    let intent = expect!(Begin::Execute, ledger.begin(asked).await.expect("begin"));
    if status == IntentStatus::InFlight {
        return intent;
    }
    let finished = ledger
        .finish(finish(&intent, "owner-fixture", status, now_ms))
        .await;
    expect!(Finished::Recorded, finished.expect("finish"))
}

fn ids(intents: &[IntentRecord]) -> Vec<IntentId> {
    intents.iter().map(|intent| intent.id).collect()
}

/// Every page of `filter` in `order`, `limit` at a time, read as callers are told to: the
/// last id of a page is the next cursor, and a short page is the last. Each id must come
/// strictly after the one before it (and the cursor) in `order`, so a page that repeats an
/// intent fails here instead of paging for ever.
async fn every_page(
    ledger: &dyn Ledger,
    filter: &IntentFilter,
    order: Order,
    limit: u32,
) -> Vec<IntentRecord> {
    let mut intents: Vec<IntentRecord> = Vec::new();
    let mut cursor = None;
    loop {
        let page = ledger
            .intents(filter, order, cursor, limit)
            .await
            .expect("intents");
        assert!(
            page.len() <= limit as usize,
            "a page of {} over {limit}",
            page.len()
        );
        let mut previous = intents.last().map(|intent| intent.id);
        for intent in &page {
            if let Some(previous) = previous {
                let after = match order {
                    Order::Oldest => intent.id > previous,
                    Order::Newest => intent.id < previous,
                };
                assert!(after, "{order:?}: id {} came after {previous}", intent.id);
            }
            previous = Some(intent.id);
        }
        let last_page = page.len() < limit as usize;
        cursor = page.last().map(|intent| intent.id).or(cursor);
        intents.extend(page);
        if last_page {
            return intents;
        }
    }
}

/// Twelve intents that differ in every field a filter looks at, first seen a second apart
/// in id order, then the key "shared" under two tenants of one tool and under another tool.
async fn mixed_intents(ledger: &dyn Ledger) -> Vec<IntentRecord> {
    use IntentStatus::{Done, InFlight, Rejected, Unknown};
    let statuses = [InFlight, Done, Unknown, Rejected];
    let mut intents = Vec::new();
    for n in 0..12 {
        let tenant = if n % 2 == 0 { TENANT } else { OTHER_TENANT };
        let tool = if n % 3 == 0 { OTHER_TOOL } else { TOOL };
        let key = format!("order-{n}");
        let now_ms = T0 + n as i64 * 1_000;
        intents.push(intent_in(ledger, tenant, tool, &key, statuses[n % 4], now_ms).await);
    }
    let shared = [(TENANT, TOOL), (OTHER_TENANT, TOOL), (TENANT, OTHER_TOOL)];
    for (n, (tenant, tool)) in shared.into_iter().enumerate() {
        let now_ms = T0 + (12 + n as i64) * 1_000;
        intents.push(intent_in(ledger, tenant, tool, "shared", Done, now_ms).await);
    }
    intents
}

async fn intents_are_filtered_by_every_field_alone_and_together(ledger: &dyn Ledger) {
    let intents = mixed_intents(ledger).await;
    let all = ids(&intents);
    let matching = |keep: &dyn Fn(&IntentRecord) -> bool| -> Vec<IntentId> {
        intents
            .iter()
            .filter(|intent| keep(intent))
            .map(|intent| intent.id)
            .collect()
    };
    let (from_ms, until_ms) = (T0 + 3_000, T0 + 9_000);
    let filter = IntentFilter::default;
    let cases = [
        ("nothing", filter(), all.clone()),
        (
            "tenant",
            IntentFilter {
                tenant: Some(OTHER_TENANT.into()),
                ..filter()
            },
            matching(&|intent| intent.tenant == OTHER_TENANT),
        ),
        (
            "tool",
            IntentFilter {
                tool: Some(OTHER_TOOL.into()),
                ..filter()
            },
            matching(&|intent| intent.tool == OTHER_TOOL),
        ),
        (
            "key",
            IntentFilter {
                key: Some("shared".into()),
                ..filter()
            },
            matching(&|intent| intent.key == "shared"),
        ),
        (
            "status",
            IntentFilter {
                status: Some(IntentStatus::Unknown),
                ..filter()
            },
            matching(&|intent| intent.status == IntentStatus::Unknown),
        ),
        (
            "first seen from",
            IntentFilter {
                first_seen_from_ms: Some(from_ms),
                ..filter()
            },
            matching(&|intent| intent.first_seen_ms >= from_ms),
        ),
        (
            "first seen until",
            IntentFilter {
                first_seen_until_ms: Some(until_ms),
                ..filter()
            },
            matching(&|intent| intent.first_seen_ms < until_ms),
        ),
        (
            "window",
            IntentFilter {
                first_seen_from_ms: Some(from_ms),
                first_seen_until_ms: Some(until_ms),
                ..filter()
            },
            matching(&|intent| (from_ms..until_ms).contains(&intent.first_seen_ms)),
        ),
        (
            "tool and window",
            IntentFilter {
                tool: Some(TOOL.into()),
                first_seen_from_ms: Some(from_ms),
                first_seen_until_ms: Some(until_ms),
                ..filter()
            },
            matching(&|intent| {
                intent.tool == TOOL && (from_ms..until_ms).contains(&intent.first_seen_ms)
            }),
        ),
        (
            "tool and key, across tenants",
            IntentFilter {
                tool: Some(TOOL.into()),
                key: Some("shared".into()),
                ..filter()
            },
            matching(&|intent| intent.tool == TOOL && intent.key == "shared"),
        ),
        (
            "tenant and status",
            IntentFilter {
                tenant: Some(TENANT.into()),
                status: Some(IntentStatus::Done),
                ..filter()
            },
            matching(&|intent| intent.tenant == TENANT && intent.status == IntentStatus::Done),
        ),
        (
            "every field",
            IntentFilter {
                tenant: Some(TENANT.into()),
                tool: Some(TOOL.into()),
                key: Some("order-4".into()),
                status: Some(IntentStatus::InFlight),
                first_seen_from_ms: Some(from_ms),
                first_seen_until_ms: Some(until_ms),
            },
            vec![intents[4].id],
        ),
    ];
    for (name, filter, expected) in &cases {
        assert!(!expected.is_empty(), "{name}: the case tests nothing");
        if *name != "nothing" {
            assert!(
                expected.len() < all.len(),
                "{name}: the filter narrows nothing"
            );
        }
        let oldest = ledger
            .intents(filter, Order::Oldest, None, 100)
            .await
            .unwrap();
        assert_eq!(&ids(&oldest), expected, "{name}, oldest first");
        let newest = ledger
            .intents(filter, Order::Newest, None, 100)
            .await
            .unwrap();
        let reversed: Vec<_> = expected.iter().rev().copied().collect();
        assert_eq!(ids(&newest), reversed, "{name}, newest first");
        for intent in &oldest {
            assert_eq!(intent, &read(ledger, intent).await, "{name}: whole records");
        }
    }
    let shared = &cases[9].2;
    assert_eq!(
        shared.len(),
        2,
        "the shared key of one tool, under both tenants"
    );
    assert_eq!(cases[11].2, [intents[4].id]);

    // Filters nothing can match.
    let nothing = [
        IntentFilter {
            status: Some(IntentStatus::NotExecuted),
            ..filter()
        },
        IntentFilter {
            tool: Some("no-such-tool".into()),
            ..filter()
        },
        IntentFilter {
            key: Some("order-4".into()),
            tenant: Some(OTHER_TENANT.into()),
            ..filter()
        },
        // An empty window, and one turned around.
        IntentFilter {
            tool: Some(TOOL.into()),
            first_seen_from_ms: Some(from_ms),
            first_seen_until_ms: Some(from_ms),
            ..filter()
        },
        IntentFilter {
            first_seen_from_ms: Some(until_ms),
            first_seen_until_ms: Some(from_ms),
            ..filter()
        },
        // A window of the tool before its first intent.
        IntentFilter {
            tool: Some(TOOL.into()),
            first_seen_from_ms: Some(T0 - 10_000),
            first_seen_until_ms: Some(T0),
            ..filter()
        },
    ];
    for filter in nothing {
        for order in [Order::Oldest, Order::Newest] {
            let page = ledger.intents(&filter, order, None, 100).await.unwrap();
            assert_eq!(page, [], "{filter:?}, {order:?}");
        }
    }
}

async fn intents_page_in_both_orders_without_duplicates_or_gaps(ledger: &dyn Ledger) {
    // First seen a second apart, except two whose clocks were off: order-2 was created
    // early and first seen inside the window below, order-20 was created inside it and
    // first seen after it. So the window is not a range of ids.
    let mut intents = Vec::new();
    for n in 0..30 {
        let tool = if n % 3 == 0 { OTHER_TOOL } else { TOOL };
        let now_ms = match n {
            2 => T0 + 12_500,
            20 => T0 + 30_500,
            n => T0 + n * 1_000,
        };
        let key = format!("order-{n}");
        intents.push(intent_in(ledger, TENANT, tool, &key, IntentStatus::Done, now_ms).await);
    }
    let (from_ms, until_ms) = (T0 + 4_000, T0 + 24_000);
    let window = IntentFilter {
        tool: Some(TOOL.into()),
        first_seen_from_ms: Some(from_ms),
        first_seen_until_ms: Some(until_ms),
        ..IntentFilter::default()
    };
    let in_window: Vec<IntentId> = intents
        .iter()
        .filter(|intent| intent.tool == TOOL && (from_ms..until_ms).contains(&intent.first_seen_ms))
        .map(|intent| intent.id)
        .collect();
    assert_eq!(in_window.len(), 14);
    assert_eq!(
        in_window[0], intents[2].id,
        "the window's least id is first seen late"
    );
    assert!(!in_window.contains(&intents[20].id));

    for (name, filter, expected) in [
        ("every intent", IntentFilter::default(), ids(&intents)),
        ("one tool's window", window, in_window),
    ] {
        let reversed: Vec<_> = expected.iter().rev().copied().collect();
        for limit in [1, 4, 7, 14, 100] {
            let oldest = every_page(ledger, &filter, Order::Oldest, limit).await;
            assert_eq!(
                ids(&oldest),
                expected,
                "{name}, oldest first, {limit} a page"
            );
            let newest = every_page(ledger, &filter, Order::Newest, limit).await;
            assert_eq!(
                ids(&newest),
                reversed,
                "{name}, newest first, {limit} a page"
            );
        }
        // Strictly after the cursor, in the page's order.
        let middle = expected.len() / 2;
        let after = ledger
            .intents(&filter, Order::Oldest, Some(expected[middle]), 100)
            .await
            .unwrap();
        assert_eq!(
            ids(&after),
            expected[middle + 1..],
            "{name}, after a cursor"
        );
        let before = ledger
            .intents(&filter, Order::Newest, Some(expected[middle]), 100)
            .await
            .unwrap();
        let mut expected_before = expected[..middle].to_vec();
        expected_before.reverse();
        assert_eq!(ids(&before), expected_before, "{name}, before a cursor");
        // Past either end, and no room at all.
        let last = *expected.last().unwrap();
        let past = ledger
            .intents(&filter, Order::Oldest, Some(last), 100)
            .await;
        assert_eq!(past.unwrap(), [], "{name}");
        let past = ledger
            .intents(&filter, Order::Newest, Some(expected[0]), 100)
            .await;
        assert_eq!(past.unwrap(), [], "{name}");
        let none = ledger.intents(&filter, Order::Oldest, None, 0).await;
        assert_eq!(none.unwrap(), [], "{name}: a limit of 0");
    }
}

async fn status_counts_count_each_tool_in_each_status(ledger: &dyn Ledger) {
    use IntentStatus::{Done, InFlight, Rejected, Unknown};
    assert_eq!(ledger.status_counts().await.unwrap(), []);
    let intents = mixed_intents(ledger).await;
    let count = |tool: &str, status, count| StatusCount {
        tool: tool.into(),
        status,
        count,
    };
    // By tool, then in the state machine's order; no row for a status without intents.
    assert_eq!(
        ledger.status_counts().await.unwrap(),
        [
            count(OTHER_TOOL, InFlight, 1),
            count(OTHER_TOOL, Done, 2),
            count(OTHER_TOOL, Rejected, 1),
            count(OTHER_TOOL, Unknown, 1),
            count(TOOL, InFlight, 2),
            count(TOOL, Done, 4),
            count(TOOL, Rejected, 2),
            count(TOOL, Unknown, 2),
        ]
    );

    // A resolution moves one intent from one count to the other.
    let unknown = &intents[2];
    assert_eq!((unknown.tool.as_str(), unknown.status), (TOOL, Unknown));
    let resolve = Resolve {
        id: unknown.id,
        status: Done,
        external_id: None,
        result: None,
        actor: "operator".into(),
        reason: "found at the provider".into(),
        now_ms: T0 + 100_000,
    };
    ledger.resolve(resolve).await.unwrap();
    let counts = ledger.status_counts().await.unwrap();
    assert!(counts.contains(&count(TOOL, Done, 5)), "{counts:?}");
    assert!(counts.contains(&count(TOOL, Unknown, 1)), "{counts:?}");
    let total: u64 = counts.iter().map(|count| count.count).sum();
    assert_eq!(total, intents.len() as u64);
}

/// A run of the hourly job that finished at `finished_ms` and found `mismatches`.
fn run_at(finished_ms: i64, mismatches: u64) -> ReconciliationRun {
    ReconciliationRun {
        id: 0,
        started_ms: finished_ms - 5_000,
        finished_ms,
        since_ms: finished_ms - 3_660_000,
        until_ms: finished_ms - 60_000,
        actor: "serve".into(),
        intents_checked: 120,
        records_checked: 118,
        mismatches,
        critical: 1,
        summary: json!({ "duplicate": 1, "no_intent": 2 }),
    }
}

/// The `n`th mismatch of a run: a provider record without an intent.
fn mismatch(n: usize) -> StoredMismatch {
    StoredMismatch {
        run_id: 0,
        tool: TOOL.into(),
        kind: "no_intent".into(),
        severity: "warning".into(),
        intent_id: None,
        tenant: None,
        intent_key: Some(format!("order-{n}")),
        external_ids: vec![format!("re_{n}")],
        subject: Some(format!("cus_{n}")),
        detail: format!("the provider's record re_{n} has no intent"),
    }
}

/// What the ledger gives back for `mismatches` stored by run `run_id`.
fn stored_as(run_id: i64, mismatches: &[StoredMismatch]) -> Vec<StoredMismatch> {
    mismatches
        .iter()
        .map(|mismatch| StoredMismatch {
            run_id,
            ..mismatch.clone()
        })
        .collect()
}

async fn reconciliation_runs_are_read_back_newest_first_with_their_mismatches_in_order(
    ledger: &dyn Ledger,
) {
    assert_eq!(ledger.reconciliations(10).await.unwrap(), []);
    let found = vec![
        mismatch(0),
        StoredMismatch {
            kind: "duplicate".into(),
            severity: "critical".into(),
            intent_id: Some(7),
            tenant: Some(TENANT.into()),
            external_ids: vec!["re_1".into(), "re_1b".into()],
            ..mismatch(1)
        },
        StoredMismatch {
            kind: "missing_record".into(),
            severity: "info".into(),
            external_ids: Vec::new(),
            subject: None,
            intent_key: None,
            ..mismatch(2)
        },
    ];
    let first = ledger
        .record_reconciliation(&run_at(T0, 3), &found)
        .await
        .unwrap();
    let quiet = ReconciliationRun {
        actor: "operator:alice".into(),
        summary: Value::Null,
        critical: 0,
        ..run_at(T0 + 3_600_000, 0)
    };
    let second = ledger.record_reconciliation(&quiet, &[]).await.unwrap();
    assert!(second > first, "ids grow: {first}, then {second}");

    let first_run = ReconciliationRun {
        id: first,
        summary: json!({ "duplicate": 1, "no_intent": 2, SUMMARY_MISMATCHES_NOT_STORED: 0 }),
        ..run_at(T0, 3)
    };
    let second_run = ReconciliationRun {
        id: second,
        summary: json!({ SUMMARY_MISMATCHES_NOT_STORED: 0 }),
        ..quiet
    };
    assert_eq!(
        ledger.reconciliations(10).await.unwrap(),
        [second_run.clone(), first_run.clone()]
    );
    assert_eq!(
        ledger.reconciliations(1).await.unwrap(),
        std::slice::from_ref(&second_run)
    );
    assert_eq!(ledger.reconciliations(0).await.unwrap(), []);
    assert_eq!(ledger.reconciliation(first).await.unwrap(), Some(first_run));
    assert_eq!(
        ledger.reconciliation(second).await.unwrap(),
        Some(second_run)
    );
    assert_eq!(ledger.reconciliation(second + 1_000).await.unwrap(), None);

    let stored = ledger.reconciliation_mismatches(first, 100).await.unwrap();
    assert_eq!(stored, stored_as(first, &found), "as given, in order");
    let two = ledger.reconciliation_mismatches(first, 2).await.unwrap();
    assert_eq!(two, stored_as(first, &found[..2]));
    assert_eq!(
        ledger.reconciliation_mismatches(second, 100).await.unwrap(),
        []
    );
    let none = ledger.reconciliation_mismatches(second + 1_000, 100).await;
    assert_eq!(none.unwrap(), []);
}

async fn a_run_keeps_the_first_mismatches_up_to_the_cap_and_says_how_many_it_left_out(
    ledger: &dyn Ledger,
) {
    let given: Vec<StoredMismatch> = (0..RECONCILIATION_MISMATCHES_STORED_MAX + 5)
        .map(mismatch)
        .collect();
    // The run counted two more than it passed on.
    let counted = given.len() as u64 + 2;
    let id = ledger
        .record_reconciliation(&run_at(T0, counted), &given)
        .await
        .unwrap();

    let run = ledger.reconciliation(id).await.unwrap().expect("the run");
    assert_eq!(run.mismatches, counted);
    assert_eq!(run.summary[SUMMARY_MISMATCHES_NOT_STORED], json!(7));
    assert_eq!(
        run.summary["no_intent"],
        json!(2),
        "the rest of the summary is kept"
    );

    let stored = ledger
        .reconciliation_mismatches(id, u32::MAX)
        .await
        .unwrap();
    assert_eq!(stored.len(), RECONCILIATION_MISMATCHES_STORED_MAX);
    assert_eq!(
        stored,
        stored_as(id, &given[..RECONCILIATION_MISMATCHES_STORED_MAX]),
        "the first ones, in order"
    );
}

async fn reconciliation_text_is_cut_to_its_limits_and_bad_names_are_refused(ledger: &dyn Ledger) {
    // Text from the provider is cut, at a character boundary.
    let long_id = "x".repeat(EXTERNAL_ID_LENGTH_MAX + 44);
    let mut external_ids: Vec<String> = (0..MISMATCH_EXTERNAL_IDS_MAX + 8)
        .map(|n| format!("re_{n}"))
        .collect();
    external_ids[3] = long_id.clone();
    let odd = StoredMismatch {
        tenant: Some("t".repeat(TENANT_LENGTH_MAX + 72)),
        intent_key: Some("k".repeat(INTENT_KEY_LENGTH_MAX + 1)),
        external_ids: external_ids.clone(),
        subject: Some("s".repeat(MISMATCH_SUBJECT_LENGTH_MAX * 2)),
        detail: "é".repeat(MISMATCH_DETAIL_LENGTH_MAX),
        ..mismatch(0)
    };
    let id = ledger
        .record_reconciliation(&run_at(T0, 1), std::slice::from_ref(&odd))
        .await
        .unwrap();
    let stored = ledger.reconciliation_mismatches(id, 10).await.unwrap();
    let [stored] = stored.as_slice() else {
        panic!("expected one mismatch, got {stored:?}")
    };
    assert_eq!(stored.tenant, Some("t".repeat(TENANT_LENGTH_MAX)));
    assert_eq!(stored.intent_key, Some("k".repeat(INTENT_KEY_LENGTH_MAX)));
    assert_eq!(
        stored.subject,
        Some("s".repeat(MISMATCH_SUBJECT_LENGTH_MAX))
    );
    let mut kept_ids = external_ids[..MISMATCH_EXTERNAL_IDS_MAX].to_vec();
    kept_ids[3] = long_id[..EXTERNAL_ID_LENGTH_MAX].to_owned();
    assert_eq!(stored.external_ids, kept_ids);
    let note = " (8 more external ids not stored)";
    assert!(
        stored.detail.ends_with(note),
        "{} bytes",
        stored.detail.len()
    );
    let kept_detail = &stored.detail[..stored.detail.len() - note.len()];
    assert!(kept_detail.chars().all(|c| c == 'é'));
    assert!(stored.detail.len() <= MISMATCH_DETAIL_LENGTH_MAX);
    assert!(stored.detail.len() > MISMATCH_DETAIL_LENGTH_MAX - note.len() - 2);
    assert_eq!(
        (&stored.tool, &stored.kind, &stored.severity),
        (&odd.tool, &odd.kind, &odd.severity)
    );

    // Names of the program's own are refused, and so is a run that contradicts itself. Each
    // run below counts the two mismatches it passes on, except the one about that count.
    let refusals: Vec<(ReconciliationRun, StoredMismatch, &str)> = vec![
        (
            run_at(T0, 2),
            StoredMismatch {
                tool: "x".repeat(129),
                ..mismatch(1)
            },
            "tool",
        ),
        (
            run_at(T0, 2),
            StoredMismatch {
                kind: String::new(),
                ..mismatch(1)
            },
            "kind",
        ),
        (
            run_at(T0, 2),
            StoredMismatch {
                kind: "k".repeat(33),
                ..mismatch(1)
            },
            "kind",
        ),
        (
            run_at(T0, 2),
            StoredMismatch {
                severity: "fatal".into(),
                ..mismatch(1)
            },
            "severity",
        ),
        (run_at(T0, 1), mismatch(1), "mismatches"),
        (
            ReconciliationRun {
                summary: json!(["not", "an", "object"]),
                ..run_at(T0, 2)
            },
            mismatch(1),
            "summary",
        ),
        (
            ReconciliationRun {
                summary: json!({ "note": "x".repeat(64 * 1024) }),
                ..run_at(T0, 2)
            },
            mismatch(1),
            "summary",
        ),
        (
            ReconciliationRun {
                actor: String::new(),
                ..run_at(T0, 2)
            },
            mismatch(1),
            "actor",
        ),
        (
            ReconciliationRun {
                records_checked: u64::MAX,
                ..run_at(T0, 2)
            },
            mismatch(1),
            "records_checked",
        ),
    ];
    for (run, refused, field) in refusals {
        let error = ledger
            .record_reconciliation(&run, &[mismatch(0), refused])
            .await
            .expect_err(field);
        match error {
            LedgerError::TooLarge { field: named, .. }
            | LedgerError::Invalid { field: named, .. } => {
                assert_eq!(named, field, "{error}")
            }
            other => panic!("{field}: expected a refusal, got {other:?}"),
        }
    }
    let runs = ledger.reconciliations(100).await.unwrap();
    assert_eq!(
        ids_of_runs(&runs),
        [id],
        "nothing of a refused run was written"
    );
}

fn ids_of_runs(runs: &[ReconciliationRun]) -> Vec<i64> {
    runs.iter().map(|run| run.id).collect()
}

async fn purge_deletes_reconciliation_runs_finished_before_the_cutoff(ledger: &dyn Ledger) {
    let old = ledger
        .record_reconciliation(&run_at(T0, 1), &[mismatch(0)])
        .await
        .unwrap();
    let recent = ledger
        .record_reconciliation(&run_at(T0 + 10_000, 1), &[mismatch(1)])
        .await
        .unwrap();
    let intent = settled(ledger, "order-1", IntentStatus::Done, T0).await;

    // Finished exactly at the cutoff: kept.
    assert_eq!(ledger.purge(T0 + 10_000).await.unwrap(), 1, "one intent");
    assert_eq!(ledger.get_by_id(intent.id).await.unwrap(), None);
    let runs = ledger.reconciliations(10).await.unwrap();
    assert_eq!(ids_of_runs(&runs), [recent]);
    assert_eq!(ledger.reconciliation(old).await.unwrap(), None);
    assert_eq!(ledger.reconciliation_mismatches(old, 10).await.unwrap(), []);
    let kept = ledger.reconciliation_mismatches(recent, 10).await.unwrap();
    assert_eq!(kept, stored_as(recent, &[mismatch(1)]));

    // Once every run is gone, a new one still gets a new id: a report naming a purged run
    // never points at another.
    assert_eq!(ledger.purge(T0 + 1_000_000).await.unwrap(), 0);
    assert_eq!(ledger.reconciliations(10).await.unwrap(), []);
    assert_eq!(
        ledger.reconciliation_mismatches(recent, 10).await.unwrap(),
        []
    );
    let next = ledger
        .record_reconciliation(&run_at(T0 + 2_000_000, 0), &[])
        .await
        .unwrap();
    assert!(next > recent, "run id {next} reused (after {recent})");
}

// ---------------------------------------------------------------------------------------
// Regressions, each named after what broke, store-independent.
// ---------------------------------------------------------------------------------------

/// A rejected intent restarted under `retry_rejected` kept the old refusal as its result, so
/// a later resolution to done without a result replayed "card declined" as the success.
async fn a_restarted_rejection_does_not_carry_the_old_refusal(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-r", "owner-a", T0).await;
    let mut rejected = finish(&intent, "owner-a", IntentStatus::Rejected, T0 + 1);
    rejected.result = Some(json!({"error": "card_declined"}));
    rejected.external_id = Some("ch_rej".into());
    expect!(Finished::Recorded, ledger.finish(rejected).await.unwrap());
    let mut again = request("order-r", "owner-b", T0 + 2);
    again.retry_rejected = true;
    let restarted = expect!(Begin::Execute, ledger.begin(again).await.unwrap());
    assert_eq!((restarted.attempt, restarted.epoch), (2, 2));
    assert_eq!(
        (
            restarted.result,
            restarted.external_id,
            restarted.resolved_by
        ),
        (None, None, None)
    );
}

/// An operator reopens a refusal that was stored wrongly: it becomes `not_executed` without
/// the old refusal, its provider key moves to a new epoch, the event log says who and why, and
/// the next call starts a new attempt with that key. A done intent can't be reopened.
async fn an_operator_reopens_a_rejected_intent_and_the_next_call_executes_it(ledger: &dyn Ledger) {
    let intent = started(ledger, "order-o", "owner-a", T0).await;
    let mut rejected = finish(&intent, "owner-a", IntentStatus::Rejected, T0 + 1);
    rejected.result = Some(json!({"error": {"message": "Invalid API key provided"}}));
    let rejected = expect!(Finished::Recorded, ledger.finish(rejected).await.unwrap());
    assert_eq!(
        (rejected.status, rejected.epoch),
        (IntentStatus::Rejected, 1)
    );
    // Without reopening, a call is answered from the stored refusal.
    expect!(
        Begin::Settled,
        ledger
            .begin(request("order-o", "owner-b", T0 + 2))
            .await
            .unwrap()
    );

    let reopened = ledger
        .resolve(Resolve {
            id: intent.id,
            status: IntentStatus::NotExecuted,
            external_id: None,
            result: None,
            actor: "operator:alice".into(),
            reason: "the 401 was our wrong API key, fixed in the config".into(),
            now_ms: T0 + 3,
        })
        .await
        .unwrap();
    assert_eq!(reopened.status, IntentStatus::NotExecuted);
    assert_eq!((reopened.result.as_ref(), reopened.epoch), (None, 2));
    assert_eq!(reopened.resolved_by.as_deref(), Some("operator:alice"));
    assert_eq!(read(ledger, &intent).await, reopened);
    let log = events(ledger, &intent).await;
    let last = log.last().expect("a reopen event");
    assert_eq!(last.kind, "reopen");
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_deref()),
        (Some("rejected"), Some("not_executed"))
    );
    assert_eq!(last.actor.as_deref(), Some("operator:alice"));
    assert_eq!(
        last.detail.as_deref(),
        Some("the 401 was our wrong API key, fixed in the config")
    );

    let next = expect!(
        Begin::Execute,
        ledger
            .begin(request("order-o", "owner-c", T0 + 4))
            .await
            .unwrap()
    );
    assert_eq!(
        (next.status, next.attempt, next.epoch),
        (IntentStatus::InFlight, 2, 2)
    );
    assert_eq!(next.resolved_by, None);

    let done = settled(ledger, "order-d", IntentStatus::Done, T0 + 5).await;
    let refused = ledger
        .resolve(Resolve {
            id: done.id,
            status: IntentStatus::NotExecuted,
            external_id: None,
            result: None,
            actor: "operator:mallory".into(),
            reason: "undo".into(),
            now_ms: T0 + 6,
        })
        .await;
    assert!(
        matches!(refused, Err(LedgerError::Transition(_))),
        "{refused:?}"
    );
}

/// An over-long lease owner on an existing intent surfaced as a storage failure (the
/// schema's CHECK) instead of a refused value.
async fn an_over_long_lease_owner_is_refused_as_too_large_on_every_path(ledger: &dyn Ledger) {
    settled(ledger, "order-l", IntentStatus::NotExecuted, T0).await;
    let owner = "o".repeat(129);
    let error = ledger
        .begin(request("order-l", &owner, T0 + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            LedgerError::TooLarge {
                field: "lease_owner",
                ..
            }
        ),
        "{error:?}"
    );
}

/// An erasure of `tenant` (and `tool`, `key`) at `now_ms`, by an operator with a reason.
fn erasure(tenant: &str, tool: Option<&str>, key: Option<&str>, now_ms: i64) -> Erase {
    Erase {
        tenant: tenant.into(),
        tool: tool.map(Into::into),
        key: key.map(Into::into),
        force: false,
        actor: "dpo@example.com".into(),
        reason: "erasure request 77".into(),
        now_ms,
    }
}

/// The binding of `caller_key` (an `Idempotency-Key`) in the suite's tenant and tool to the
/// intent `intent_key` with the arguments `request` gives it, at `now_ms`.
fn caller_key(caller_key: &str, intent_key: &str, now_ms: i64) -> CallerKey {
    CallerKey {
        tenant: TENANT.into(),
        tool: TOOL.into(),
        caller_key: caller_key.into(),
        intent_key: intent_key.into(),
        fingerprint: request(intent_key, "binder", now_ms).fingerprint,
        bound_ms: now_ms,
    }
}

async fn bind(ledger: &dyn Ledger, binding: &CallerKey) -> Bound {
    ledger
        .bind_caller_key(binding)
        .await
        .expect("bind_caller_key")
}

/// The regression of an `Idempotency-Key` that became the intent key: a caller key is bound
/// to the intent its first call named and never changes; the same key naming another intent
/// (another key, or the same key with other arguments) finds the first binding; a second
/// key may name the same intent; and one key value is separate in each tenant and tool.
async fn a_caller_key_stays_bound_to_its_first_intent_within_its_tenant_and_tool(
    ledger: &dyn Ledger,
) {
    let first = caller_key("op-1", "refund:o1:5.00", T0);
    assert_eq!(bind(ledger, &first).await, Bound::New);
    let repeat = CallerKey {
        bound_ms: T0 + 10,
        ..first.clone()
    };
    assert_eq!(bind(ledger, &repeat).await, Bound::Same);

    // Another business key under the key: the first binding, unchanged.
    let other_key = caller_key("op-1", "refund:o1:6.00", T0 + 20);
    assert_eq!(bind(ledger, &other_key).await, Bound::Other(first.clone()));
    // The same business key with other arguments.
    let other_arguments = CallerKey {
        fingerprint: fingerprint(&json!({"order": "o1", "amount": "6.00"}))
            .as_str()
            .to_owned(),
        ..caller_key("op-1", "refund:o1:5.00", T0 + 30)
    };
    assert_eq!(
        bind(ledger, &other_arguments).await,
        Bound::Other(first.clone())
    );

    // A second key for the same intent is bound to it too.
    assert_eq!(
        bind(ledger, &caller_key("op-2", "refund:o1:5.00", T0 + 40)).await,
        Bound::New
    );
    // The same key value elsewhere is another key.
    let elsewhere = [
        CallerKey {
            tenant: OTHER_TENANT.into(),
            ..other_key.clone()
        },
        CallerKey {
            tool: OTHER_TOOL.into(),
            ..other_key.clone()
        },
    ];
    for binding in &elsewhere {
        assert_eq!(bind(ledger, binding).await, Bound::New, "{binding:?}");
        assert_eq!(bind(ledger, binding).await, Bound::Same, "{binding:?}");
    }
    assert_eq!(bind(ledger, &first).await, Bound::Same);
}

/// Of callers binding one key at once to different intents, one binds it and every other
/// finds that binding.
async fn callers_binding_one_key_at_once_find_one_binding(ledger: Arc<dyn Ledger>) {
    const CALLERS: usize = 16;
    let mut tasks = tokio::task::JoinSet::new();
    for amount in 0..CALLERS {
        let ledger = ledger.clone();
        tasks.spawn(async move {
            let binding = caller_key("race-1", &format!("refund:o1:{amount}.00"), T0);
            let bound = ledger.bind_caller_key(&binding).await.expect("bind");
            (binding, bound)
        });
    }
    let mut answers = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        answers.push(joined.expect("a task failed"));
    }
    let winners: Vec<&CallerKey> = answers
        .iter()
        .filter(|(_, bound)| *bound == Bound::New)
        .map(|(binding, _)| binding)
        .collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    let winner = winners[0].clone();
    for (binding, bound) in &answers {
        if *binding != winner {
            assert_eq!(*bound, Bound::Other(winner.clone()), "{binding:?}");
        }
    }
}

async fn a_caller_key_the_schema_cannot_store_is_refused_and_nothing_is_bound(ledger: &dyn Ledger) {
    let good = caller_key("op-limits", "refund:o1:5.00", T0);
    let cases = [
        (
            CallerKey {
                caller_key: String::new(),
                ..good.clone()
            },
            "caller_key is empty",
        ),
        (
            CallerKey {
                caller_key: "k".repeat(CALLER_KEY_LENGTH_MAX + 1),
                ..good.clone()
            },
            "caller_key is 513 bytes long; the limit is 512",
        ),
        (
            CallerKey {
                intent_key: "k".repeat(INTENT_KEY_LENGTH_MAX + 1),
                ..good.clone()
            },
            "intent_key is 513 bytes long",
        ),
        (
            CallerKey {
                tenant: "t".repeat(TENANT_LENGTH_MAX + 1),
                ..good.clone()
            },
            "tenant is 129 bytes long",
        ),
        (
            CallerKey {
                fingerprint: "not a sha-256".into(),
                ..good.clone()
            },
            "fingerprint must be 64 hex digits",
        ),
    ];
    for (binding, says) in cases {
        let refused = ledger.bind_caller_key(&binding).await.unwrap_err();
        assert!(refused.to_string().contains(says), "{refused}");
    }
    // The longest key is stored, and nothing of the refusals was.
    let longest = CallerKey {
        caller_key: "k".repeat(CALLER_KEY_LENGTH_MAX),
        ..good.clone()
    };
    assert_eq!(bind(ledger, &longest).await, Bound::New);
    assert_eq!(bind(ledger, &good).await, Bound::New);
}

/// A caller key goes with its intent: the purge deletes the keys of the intents it deletes,
/// and old keys whose intent was never recorded, and keeps the keys of the intents it keeps;
/// an erasure deletes the keys of the intents it erases and, once it has erased the last
/// one, the selection's keys of no intent, never another tenant's.
async fn caller_keys_are_purged_and_erased_with_their_intents(ledger: &dyn Ledger) {
    let cutoff_ms = T0 + 1_000;
    settled(ledger, "old-done", IntentStatus::Done, T0).await;
    settled(ledger, "old-unknown", IntentStatus::Unknown, T0).await;
    settled(ledger, "recent-done", IntentStatus::Done, cutoff_ms).await;
    let bindings = [
        caller_key("k-old-done", "old-done", T0),
        caller_key("k-old-unknown", "old-unknown", T0),
        caller_key("k-recent-done", "recent-done", cutoff_ms),
        // Bound by calls that recorded no intent: one long ago, one just now.
        caller_key("k-old-orphan", "never-begun", T0),
        caller_key("k-new-orphan", "never-begun", cutoff_ms),
    ];
    for binding in &bindings {
        assert_eq!(bind(ledger, binding).await, Bound::New);
    }
    // Whether a key is still bound: one that was deleted is free for another intent.
    let still_bound = |binding: &CallerKey| {
        let probe = CallerKey {
            intent_key: "probe".into(),
            bound_ms: cutoff_ms + 1,
            ..binding.clone()
        };
        async move {
            matches!(
                ledger.bind_caller_key(&probe).await.unwrap(),
                Bound::Other(_)
            )
        }
    };

    assert_eq!(ledger.purge(cutoff_ms).await.unwrap(), 1);
    let mut kept = Vec::new();
    for binding in &bindings {
        kept.push(still_bound(binding).await);
    }
    assert_eq!(kept, [false, true, true, false, true]);

    // An erasure of one key takes that intent's keys only; of the whole tenant, the rest of
    // its keys, bound to an intent or not, and nothing of another tenant.
    let erased_one = settled(ledger, "erase-me", IntentStatus::Done, cutoff_ms).await;
    settled_as(ledger, OTHER_TENANT, TOOL, "erase-me", cutoff_ms).await;
    let of_erased = caller_key("k-erase-me", "erase-me", cutoff_ms);
    let orphan = caller_key("k-orphan", "never-begun-either", cutoff_ms);
    let other_tenant = CallerKey {
        tenant: OTHER_TENANT.into(),
        ..of_erased.clone()
    };
    for binding in [&of_erased, &orphan, &other_tenant] {
        assert_eq!(bind(ledger, binding).await, Bound::New);
    }
    let erased = ledger
        .erase(&erasure(
            TENANT,
            Some(TOOL),
            Some("erase-me"),
            cutoff_ms + 2,
        ))
        .await
        .unwrap();
    assert!(
        matches!(erased, Erasure::Erased(Erased { intents: 1, .. })),
        "{erased:?}"
    );
    assert_eq!(ledger.get_by_id(erased_one.id).await.unwrap(), None);
    assert!(!still_bound(&of_erased).await);
    assert!(still_bound(&orphan).await, "not the erased key's");
    let forced = Erase {
        force: true,
        ..erasure(TENANT, None, None, cutoff_ms + 3)
    };
    assert!(matches!(
        ledger.erase(&forced).await.unwrap(),
        Erasure::Erased(Erased { more: false, .. })
    ));
    for gone in [&orphan, &bindings[1], &bindings[2], &bindings[4]] {
        assert!(!still_bound(gone).await, "{gone:?}");
    }
    assert!(still_bound(&other_tenant).await);
    assert_eq!(bind(ledger, &other_tenant).await, Bound::Same);
}

/// A settled intent of another tenant or tool than the suite's.
async fn settled_as(
    ledger: &dyn Ledger,
    tenant: &str,
    tool: &str,
    key: &str,
    now_ms: i64,
) -> IntentRecord {
    let begun = ledger
        .begin(BeginRequest {
            tenant: tenant.into(),
            tool: tool.into(),
            ..request(key, "owner-other", now_ms)
        })
        .await
        .unwrap();
    let intent = expect!(Begin::Execute, begun);
    let finished = ledger
        .finish(finish(&intent, "owner-other", IntentStatus::Done, now_ms))
        .await
        .unwrap();
    expect!(Finished::Recorded, finished)
}

/// A reconciliation mismatch that names an intent of `tenant`.
fn mismatch_of(intent: &IntentRecord) -> StoredMismatch {
    StoredMismatch {
        kind: "missing_record".into(),
        intent_id: Some(intent.id),
        tenant: Some(intent.tenant.clone()),
        tool: intent.tool.clone(),
        intent_key: Some(intent.key.clone()),
        ..mismatch(0)
    }
}

/// Before erasure, nothing could delete one customer's intents, events and the
/// reconciliation mismatches naming them; an erasure takes exactly those, by key, tool or
/// tenant, and leaves everyone else's.
async fn the_executing_calls_trace_is_kept_replaced_and_erased_with_its_intent(
    ledger: &dyn Ledger,
) {
    let first = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let intent = settled(ledger, "traced-1", IntentStatus::Done, T0).await;
    assert_eq!(ledger.trace_of(intent.id).await.unwrap(), None);
    ledger
        .record_trace(intent.id, first.to_owned())
        .await
        .unwrap();
    assert_eq!(
        ledger.trace_of(intent.id).await.unwrap().as_deref(),
        Some(first)
    );
    // A later attempt's call replaces it.
    ledger
        .record_trace(intent.id, second.to_owned())
        .await
        .unwrap();
    assert_eq!(
        ledger.trace_of(intent.id).await.unwrap().as_deref(),
        Some(second)
    );
    // Only a version-00 traceparent's length is kept; nothing for an intent that is gone.
    assert!(
        ledger
            .record_trace(intent.id, "00-short".to_owned())
            .await
            .is_err()
    );
    assert_eq!(
        ledger.trace_of(intent.id).await.unwrap().as_deref(),
        Some(second)
    );
    ledger
        .record_trace(intent.id + 1_000, first.to_owned())
        .await
        .unwrap();
    assert_eq!(ledger.trace_of(intent.id + 1_000).await.unwrap(), None);
    // Erased with its intent.
    ledger
        .erase(&erasure(TENANT, Some(TOOL), Some("traced-1"), T0 + 2_000))
        .await
        .unwrap();
    assert_eq!(ledger.trace_of(intent.id).await.unwrap(), None);
}

async fn erase_deletes_a_tenants_intents_events_and_mismatches_and_nothing_else(
    ledger: &dyn Ledger,
) {
    let one = settled(ledger, "erase-1", IntentStatus::Done, T0).await;
    let two = settled(ledger, "erase-2", IntentStatus::Rejected, T0).await;
    let other_tool = settled_as(ledger, TENANT, OTHER_TOOL, "erase-1", T0).await;
    let other_tenant = settled_as(ledger, OTHER_TENANT, TOOL, "erase-1", T0).await;
    ledger.record_disabled_call(TENANT, TOOL, T0).await.unwrap();
    let bypass = mismatch(9);
    let run = ledger
        .record_reconciliation(
            &run_at(T0 + 1_000, 3),
            &[
                mismatch_of(&one),
                mismatch_of(&other_tenant),
                bypass.clone(),
            ],
        )
        .await
        .unwrap();
    let events_of = |intents: &[&IntentRecord]| {
        let intents: Vec<IntentRecord> = intents.iter().map(|intent| (*intent).clone()).collect();
        async move {
            let mut count = 0;
            for intent in &intents {
                count += events(ledger, intent).await.len() as u64;
            }
            count
        }
    };
    let kept_log = events(ledger, &other_tenant).await;

    // One key.
    let expected_events = events_of(&[&one]).await;
    let erased = ledger
        .erase(&erasure(TENANT, Some(TOOL), Some("erase-1"), T0 + 2_000))
        .await
        .unwrap();
    assert_eq!(
        erased,
        Erasure::Erased(Erased {
            intents: 1,
            events: expected_events,
            mismatches: 1,
            more: false,
        })
    );
    assert_eq!(ledger.get_by_id(one.id).await.unwrap(), None);
    assert_eq!(events(ledger, &one).await, []);
    assert_eq!(read(ledger, &two).await, two);

    // The rest of the tenant, every tool, and its refused calls.
    let expected_events = events_of(&[&two, &other_tool]).await + 1;
    let erased = ledger
        .erase(&erasure(TENANT, None, None, T0 + 3_000))
        .await
        .unwrap();
    assert_eq!(
        erased,
        Erasure::Erased(Erased {
            intents: 2,
            events: expected_events,
            mismatches: 0,
            more: false,
        })
    );
    for gone in [&two, &other_tool] {
        assert_eq!(
            ledger.get_by_id(gone.id).await.unwrap(),
            None,
            "{}",
            gone.key
        );
        assert_eq!(events(ledger, gone).await, []);
    }

    // Another tenant's intent with the same tool and key, and the mismatches that name no
    // erased intent, are still there.
    assert_eq!(read(ledger, &other_tenant).await, other_tenant);
    assert_eq!(events(ledger, &other_tenant).await, kept_log);
    let left = ledger.reconciliation_mismatches(run, 10).await.unwrap();
    assert_eq!(left, stored_as(run, &[mismatch_of(&other_tenant), bypass]));
    // Nothing left to erase is not an error.
    let again = ledger
        .erase(&erasure(TENANT, None, None, T0 + 4_000))
        .await
        .unwrap();
    assert_eq!(again, Erasure::Erased(Erased::default()));
}

/// An erased intent that may have had an effect is forgotten: a repeat of its call would
/// execute again. So unsettled intents are erased only when forced, and an intent a call
/// holds right now never.
async fn erase_refuses_unsettled_intents_unless_forced_and_a_running_call_always(
    ledger: &dyn Ledger,
) {
    let done = settled(ledger, "e-done", IntentStatus::Done, T0).await;
    let unknown = settled(ledger, "e-unknown", IntentStatus::Unknown, T0).await;
    let running = started(ledger, "e-running", "owner-a", T0).await;
    let forced = |now_ms| Erase {
        force: true,
        ..erasure(TENANT, None, None, now_ms)
    };

    // While the call's lease lives, even a forced erasure is refused.
    for erase in [erasure(TENANT, None, None, T0 + 1), forced(T0 + 1)] {
        let refused = ledger.erase(&erase).await.unwrap();
        assert_eq!(
            refused,
            Erasure::Busy {
                ids: vec![running.id]
            }
        );
    }
    let after_lease = T0 + LEASE_MS + 1;
    let refused = ledger
        .erase(&erasure(TENANT, None, None, after_lease))
        .await
        .unwrap();
    assert_eq!(
        refused,
        Erasure::Unsettled {
            ids: vec![unknown.id, running.id]
        }
    );
    for intent in [&done, &unknown, &running] {
        assert_eq!(
            read(ledger, intent).await,
            *intent,
            "refused: nothing erased"
        );
    }
    // A settled one alone may go without force.
    let one = ledger
        .erase(&erasure(TENANT, Some(TOOL), Some("e-done"), after_lease))
        .await
        .unwrap();
    assert!(
        matches!(one, Erasure::Erased(Erased { intents: 1, .. })),
        "{one:?}"
    );
    let erased = ledger.erase(&forced(after_lease)).await.unwrap();
    assert!(
        matches!(erased, Erasure::Erased(Erased { intents: 2, .. })),
        "{erased:?}"
    );
    assert_eq!(all_intents(ledger).await, []);
}

async fn an_erasure_without_a_reason_or_a_key_without_a_tool_is_refused(ledger: &dyn Ledger) {
    let intent = settled(ledger, "e-1", IntentStatus::Done, T0).await;
    let no_reason = Erase {
        reason: "  ".into(),
        ..erasure(TENANT, None, None, T0 + 1)
    };
    for (erase, field) in [
        (no_reason, "reason"),
        (erasure(TENANT, None, Some("e-1"), T0 + 1), "key"),
        (erasure("", None, None, T0 + 1), "tenant"),
    ] {
        let error = ledger.erase(&erase).await.unwrap_err();
        assert!(
            matches!(error, LedgerError::Invalid { field: refused, .. } if refused == field),
            "{error:?}"
        );
    }
    assert_eq!(read(ledger, &intent).await, intent);
}

// ---------------------------------------------------------------------------------------
// What the stores' own tests share.
// ---------------------------------------------------------------------------------------

/// What a ledger holds: every intent with its events, and the tool flags.
type Snapshot = (Vec<IntentRecord>, Vec<Vec<Event>>, Vec<ToolFlag>);

async fn snapshot(ledger: &dyn Ledger) -> Snapshot {
    let intents = all_intents(ledger).await;
    let mut logs = Vec::new();
    for intent in &intents {
        logs.push(events(ledger, intent).await);
    }
    (intents, logs, ledger.tool_flags().await.unwrap())
}

/// Writes an intent done with a result (`order-1`), one in flight, one unknown and a tool
/// flag, and returns the snapshot that a store opened again must give back.
async fn write_a_little(ledger: &dyn Ledger) -> Snapshot {
    let flag = ToolFlag {
        tool: "charge".into(),
        enabled: false,
        reason: "maintenance".into(),
        actor: "operator:alice".into(),
        updated_ms: T0,
    };
    let done = Finish {
        result: Some(json!({ "refund": "re_1" })),
        external_id: Some("re_1".into()),
        ..finish(
            &started(ledger, "order-1", "owner-a", T0).await,
            "owner-a",
            IntentStatus::Done,
            T0 + 1,
        )
    };
    expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
    started(ledger, "order-2", "owner-b", T0 + 2).await;
    settled(ledger, "order-3", IntentStatus::Unknown, T0 + 3).await;
    ledger.set_tool_flag(flag.clone()).await.unwrap();
    let written = snapshot(ledger).await;
    assert_eq!(written.0.len(), 3);
    assert_eq!(written.2, [flag]);
    written
}

/// A ledger opened again on what [`write_a_little`] wrote goes on from where it was: a
/// repeat is answered from the stored result, and a new intent gets an id of its own.
async fn goes_on_from(ledger: &dyn Ledger, written: &Snapshot) {
    let repeat = ledger.begin(request("order-1", "owner-c", T0 + 10)).await;
    let repeat = expect!(Begin::Settled, repeat.unwrap());
    assert_eq!(repeat.external_id.as_deref(), Some("re_1"));
    let next = started(ledger, "order-4", "owner-d", T0 + 11).await;
    assert!(written.0.iter().all(|intent| intent.id != next.id));
}

/// Switches the suite's tool off, records a refused call and purges both as old: the
/// switch's event must stay, the refused call's go.
async fn switch_off_and_purge_old_calls(ledger: &dyn Ledger) {
    let flag = ToolFlag {
        tool: TOOL.into(),
        enabled: false,
        reason: "incident".into(),
        actor: "ops".into(),
        updated_ms: 0,
    };
    ledger.set_tool_flag(flag).await.unwrap();
    ledger.record_disabled_call(TENANT, TOOL, 0).await.unwrap();
    assert_eq!(ledger.purge(T0).await.unwrap(), 0);
}

/// Erases one settled intent (key `order-8812`), then purges as long after as retention
/// may: the erasure's own event must be all that is left.
async fn erase_one_intent_and_purge(ledger: &dyn Ledger) {
    settled(ledger, "order-8812", IntentStatus::Done, T0).await;
    ledger
        .erase(&erasure(TENANT, Some(TOOL), Some("order-8812"), T0 + 1))
        .await
        .unwrap();
    // Retention keeps it.
    ledger.purge(T0 + 1_000_000_000).await.unwrap();
}

/// A renewal by `lease_owner` of its lease on `intent` until `lease_expires_ms`, at `now_ms`.
fn renewal(intent: &IntentRecord, lease_owner: &str, lease_expires_ms: i64, now_ms: i64) -> Renew {
    Renew {
        id: intent.id,
        lease_owner: lease_owner.into(),
        attempt: intent.attempt,
        lease_expires_ms,
        now_ms,
    }
}

/// A renewal moves a live lease's expiry later (so its holder keeps it past the first
/// expiry and still settles), and never earlier.
async fn renew_extends_a_live_lease_and_never_shortens_it(ledger: &dyn Ledger) {
    let intent = started(ledger, "renewed", "owner-a", T0).await;
    let first_expiry = intent.lease_expires_ms.unwrap();
    let later = first_expiry + LEASE_MS;
    let renewed = ledger
        .renew(renewal(&intent, "owner-a", later, T0 + 10))
        .await
        .unwrap();
    let renewed = expect!(Renewed::Renewed, renewed);
    assert_eq!(renewed.lease_expires_ms, Some(later));
    assert_eq!(read(ledger, &intent).await.lease_expires_ms, Some(later));
    // An earlier expiry leaves the lease as it is.
    let kept = ledger
        .renew(renewal(&intent, "owner-a", T0 + 20, T0 + 20))
        .await
        .unwrap();
    assert_eq!(
        expect!(Renewed::Renewed, kept).lease_expires_ms,
        Some(later)
    );
    // Past the first expiry another caller finds it busy, and the holder still settles it.
    let other = ledger
        .begin(request("renewed", "owner-b", first_expiry + 1))
        .await
        .unwrap();
    expect!(Begin::Busy, other);
    let settle = Finish {
        lease_required: true,
        ..finish(&intent, "owner-a", IntentStatus::Done, first_expiry + 2)
    };
    let done = expect!(Finished::Recorded, ledger.finish(settle).await.unwrap());
    assert_eq!(done.status, IntentStatus::Done);
    assert_eq!(done.lease_owner, None);
}

/// A renewal by anyone but the live holder of that attempt's lease is `Lost` and writes
/// nothing: another owner, an expired lease, a settled intent.
async fn renew_without_the_live_lease_is_lost_and_changes_nothing(ledger: &dyn Ledger) {
    let intent = started(ledger, "lost", "owner-a", T0).await;
    let events = ledger.events(intent.id).await.unwrap().len();
    let expiry = intent.lease_expires_ms.unwrap();
    for (owner, now_ms) in [
        ("owner-b", T0 + 1),
        ("owner-a", expiry),
        ("owner-a", expiry + 1),
    ] {
        let lost = ledger
            .renew(renewal(&intent, owner, now_ms + LEASE_MS, now_ms))
            .await
            .unwrap();
        assert_eq!(expect!(Renewed::Lost, lost), intent, "{owner} at {now_ms}");
    }
    // Another attempt's number is another lease.
    let old_attempt = Renew {
        attempt: intent.attempt + 1,
        ..renewal(&intent, "owner-a", T0 + 2 * LEASE_MS, T0 + 1)
    };
    expect!(Renewed::Lost, ledger.renew(old_attempt).await.unwrap());
    assert_eq!(read(ledger, &intent).await, intent);
    assert_eq!(ledger.events(intent.id).await.unwrap().len(), events);

    let settled = settled(ledger, "lost-settled", IntentStatus::Done, T0).await;
    let lost = ledger
        .renew(renewal(&settled, "owner-settle", T0 + LEASE_MS, T0 + 1))
        .await
        .unwrap();
    assert_eq!(expect!(Renewed::Lost, lost), settled);
    assert_eq!(read(ledger, &settled).await, settled);
}

/// A finish that requires the lease (the intent API's settle) records nothing once the lease
/// has expired, even where the call path's finish would still record: the intent may be
/// another caller's to look up by then.
async fn a_finish_that_requires_the_lease_is_superseded_once_it_expired(ledger: &dyn Ledger) {
    let intent = started(ledger, "expired-settle", "owner-a", T0).await;
    let expiry = intent.lease_expires_ms.unwrap();
    let events = ledger.events(intent.id).await.unwrap().len();
    let late = Finish {
        lease_required: true,
        ..finish(&intent, "owner-a", IntentStatus::Done, expiry)
    };
    let superseded = expect!(Finished::Superseded, ledger.finish(late).await.unwrap());
    assert_eq!(superseded, intent);
    // Another owner's, too, while the lease lives.
    let stranger = Finish {
        lease_required: true,
        ..finish(&intent, "owner-b", IntentStatus::Done, T0 + 1)
    };
    expect!(Finished::Superseded, ledger.finish(stranger).await.unwrap());
    assert_eq!(read(ledger, &intent).await, intent);
    assert_eq!(ledger.events(intent.id).await.unwrap().len(), events);
    // Once the next caller turned it unknown, the late settle still records nothing.
    let lookup = ledger
        .begin(request("expired-settle", "owner-b", expiry + 1))
        .await
        .unwrap();
    let lookup = expect!(Begin::Lookup, lookup);
    let late = Finish {
        lease_required: true,
        ..finish(&intent, "owner-a", IntentStatus::Done, expiry + 2)
    };
    let superseded = expect!(Finished::Superseded, ledger.finish(late).await.unwrap());
    assert_eq!(superseded, lookup);
    assert_eq!(read(ledger, &intent).await.status, IntentStatus::Unknown);
}

// ---------------------------------------------------------------------------------------
// Every store runs every behaviour.
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Approval and budgets (docs/design.md section 13).
// ---------------------------------------------------------------------------------------

/// The subject whose calls are held, and who may never approve them.
const SUBJECT: &str = "alice";
/// A person who may decide.
const APPROVER: &str = "bob";
/// How long a held call waits for a decision in these tests.
const DEADLINE_MS: i64 = 3_600_000;
/// The budgets' window in these tests.
const HOUR_MS: i64 = 3_600_000;
/// What held the calls of these tests.
const HELD_BY: &str = "approval policy (amount > 100.00)";

/// The policies of a call by `SUBJECT`: held by `hold` if any, counted by `budgets`.
fn policies(hold: Option<Hold>, budgets: Vec<BudgetCharge>) -> CallPolicies {
    CallPolicies {
        hold,
        requested_by: SUBJECT.into(),
        intent_id: Some("app-intent-1".into()),
        budgets,
    }
}

/// The approval policy's hold of a call at `now_ms`.
fn hold_at(now_ms: i64) -> Option<Hold> {
    Some(Hold {
        held_by: HELD_BY.into(),
        deadline_ms: now_ms + DEADLINE_MS,
    })
}

/// `request` for a tool with `policies`.
fn governed(request: BeginRequest, policies: CallPolicies) -> BeginRequest {
    BeginRequest {
        policies: Some(policies),
        ..request
    }
}

/// A first call for `key` at `now_ms` that the approval policy holds.
fn held_request(key: &str, now_ms: i64) -> BeginRequest {
    governed(
        request(key, "owner-held", now_ms),
        policies(hold_at(now_ms), Vec::new()),
    )
}

/// The window of `now_ms` of a budget named `budget` over the whole tool, refusing.
fn charge(
    budget: &str,
    count_max: Option<u64>,
    units_max: Option<u64>,
    units: u64,
    now_ms: i64,
) -> BudgetCharge {
    let start = now_ms.div_euclid(HOUR_MS) * HOUR_MS;
    BudgetCharge {
        budget: budget.into(),
        bucket: "tool".into(),
        window_start_ms: start,
        window_end_ms: start + HOUR_MS,
        units,
        count_max,
        units_max,
        hold_deadline_ms: None,
    }
}

/// A call for `key` at `now_ms` counted by `budgets` alone.
fn budgeted(key: &str, budgets: Vec<BudgetCharge>, now_ms: i64) -> BeginRequest {
    governed(
        request(key, &format!("owner-{key}"), now_ms),
        policies(None, budgets),
    )
}

/// Unwraps [`Begin::Held`], or fails showing what came instead.
fn held(begun: Result<Begin, LedgerError>) -> (IntentRecord, Approval) {
    let (intent, approval, _) = held_asking(begun);
    (intent, approval)
}

/// Unwraps [`Begin::Held`] with whether that `begin` made the request, or fails showing
/// what came instead.
fn held_asking(begun: Result<Begin, LedgerError>) -> (IntentRecord, Approval, ApprovalRequest) {
    match begun.expect("begin") {
        Begin::Held(intent, approval, request) => (intent, approval, request),
        other => panic!("expected Held, got {other:?}"),
    }
}

/// The budget a call was refused by, or a failure showing what came instead.
fn over_budget(begun: Result<Begin, LedgerError>) -> String {
    match begun.expect("begin") {
        Begin::OverBudget { budget } => budget,
        other => panic!("expected OverBudget, got {other:?}"),
    }
}

/// `actor`'s decision on `intent` at `now_ms`, counting no budget.
fn decision(
    intent: &IntentRecord,
    approve: bool,
    actor: &str,
    reason: &str,
    now_ms: i64,
) -> Decide {
    Decide {
        id: intent.id,
        approve,
        actor: actor.into(),
        reason: reason.into(),
        now_ms,
        budgets: Vec::new(),
    }
}

/// What `tool`'s budgets count in windows open at `now_ms`, as (budget, count, units).
async fn usage(ledger: &dyn Ledger, now_ms: i64) -> Vec<(String, u64, u64)> {
    let rows: Vec<BudgetUsageRow> = ledger.budget_usage(TOOL, now_ms).await.unwrap();
    rows.into_iter()
        .map(|row| (row.budget, row.count, row.units))
        .collect()
}

/// The kind and detail of every `approval` event of `intent`, oldest first.
async fn approval_events(ledger: &dyn Ledger, intent: &IntentRecord) -> Vec<Event> {
    let all = events(ledger, intent).await;
    all.into_iter()
        .filter(|event| event.kind == "approval")
        .collect()
}

async fn a_held_call_waits_pending_and_every_repeat_is_held_with_nothing_executed(
    ledger: &dyn Ledger,
) {
    let (intent, approval) = held(ledger.begin(held_request("order-1", T0)).await);
    assert_eq!(intent.status, IntentStatus::Pending);
    assert_eq!((intent.attempt, intent.epoch, intent.call_count), (0, 1, 1));
    assert_eq!(intent.lease_owner, None);
    assert_eq!(
        approval,
        Approval {
            intent: intent.id,
            tenant: TENANT.into(),
            tool: TOOL.into(),
            requested_by: SUBJECT.into(),
            requested_ms: T0,
            deadline_ms: T0 + DEADLINE_MS,
            held_by: HELD_BY.into(),
            intent_id: Some("app-intent-1".into()),
            decision: None,
            decided_by: None,
            decided_ms: None,
            reason: None,
        }
    );
    assert_eq!(
        ledger.approval(intent.id).await.unwrap(),
        Some(approval.clone())
    );
    assert_eq!(read(ledger, &intent).await, intent);

    // A repeat keeps the request as it was made, also one whose tool has no policy now.
    let (again, kept) = held(ledger.begin(held_request("order-1", T0 + 1_000)).await);
    assert_eq!((again.status, again.call_count), (IntentStatus::Pending, 2));
    assert_eq!(kept, approval);
    let (again, kept) = held(
        ledger
            .begin(request("order-1", "owner-b", T0 + 2_000))
            .await,
    );
    assert_eq!(
        (again.status, again.attempt, again.call_count),
        (IntentStatus::Pending, 0, 3)
    );
    assert_eq!(kept, approval);

    let logged: Vec<_> = events(ledger, &intent)
        .await
        .into_iter()
        .map(|event| (event.kind, event.actor, event.detail))
        .collect();
    assert_eq!(
        logged,
        [
            ("created".to_owned(), None, Some(String::new())),
            (
                "approval".to_owned(),
                Some(SUBJECT.to_owned()),
                Some(format!("held for approval: {HELD_BY}"))
            ),
            ("call".to_owned(), None, Some("repeat call 2".to_owned())),
            ("call".to_owned(), None, Some("repeat call 3".to_owned())),
        ]
    );

    // Neither the sweeper nor retention touches a held intent.
    let later = T0 + 10 * DEADLINE_MS;
    for status in [IntentStatus::InFlight, IntentStatus::Unknown] {
        assert!(
            ledger
                .stale(status, later, 100, &[])
                .await
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(ledger.purge(later).await.unwrap(), 0);
    assert_eq!(read(ledger, &intent).await.status, IntentStatus::Pending);
}

async fn an_approved_intent_starts_its_first_attempt_at_its_next_begin(ledger: &dyn Ledger) {
    let (intent, _) = held(ledger.begin(held_request("order-1", T0)).await);
    let decided = ledger
        .decide(decision(&intent, true, APPROVER, "", T0 + 10))
        .await
        .unwrap();
    let Decided::Approved(approved, approval) = decided else {
        panic!("expected Approved, got {decided:?}");
    };
    assert_eq!(
        (approved.status, approved.updated_ms),
        (IntentStatus::Pending, T0 + 10)
    );
    assert_eq!(approval.decision, Some(Decision::Approved));
    assert_eq!(approval.decided_by.as_deref(), Some(APPROVER));
    assert_eq!(
        (approval.decided_ms, approval.reason.as_deref()),
        (Some(T0 + 10), None)
    );
    assert_eq!(
        ledger.approval(intent.id).await.unwrap(),
        Some(approval.clone())
    );
    let logged = approval_events(ledger, &intent).await;
    let last = logged.last().expect("the decision is logged");
    assert_eq!(
        (last.actor.as_deref(), last.detail.as_deref()),
        (Some(APPROVER), Some("approved"))
    );
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_deref()),
        (Some("pending"), Some("pending"))
    );

    // Listed as approved while its attempt has not started.
    let approved_ones = ledger
        .approvals(
            &ApprovalFilter {
                state: Some(ApprovalState::Approved),
                ..ApprovalFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        approved_ones,
        [HeldIntent {
            approval: approval.clone(),
            intent: approved.clone()
        }]
    );

    let executing = expect!(
        Begin::Execute,
        ledger
            .begin(held_request("order-1", T0 + 20))
            .await
            .unwrap()
    );
    assert_eq!(executing.status, IntentStatus::InFlight);
    assert_eq!((executing.attempt, executing.epoch), (1, 1));
    assert_eq!(executing.lease_owner.as_deref(), Some("owner-held"));

    // Decided already: another decision writes nothing.
    let again = ledger
        .decide(decision(
            &intent,
            false,
            APPROVER,
            "changed my mind",
            T0 + 30,
        ))
        .await
        .unwrap();
    assert_eq!(
        again,
        Decided::NotAwaiting(executing.clone(), Some(approval))
    );

    // An approved intent whose attempt did nothing is not held again.
    ledger
        .finish(finish(
            &executing,
            "owner-held",
            IntentStatus::NotExecuted,
            T0 + 40,
        ))
        .await
        .unwrap();
    let retried = expect!(
        Begin::Execute,
        ledger
            .begin(held_request("order-1", T0 + 50))
            .await
            .unwrap()
    );
    assert_eq!(retried.attempt, 2);
}

async fn a_denied_intent_is_rejected_with_the_reason_even_for_a_tool_that_retries(
    ledger: &dyn Ledger,
) {
    let (intent, _) = held(ledger.begin(held_request("order-1", T0)).await);
    let before = events(ledger, &intent).await;
    for (actor, reason) in [(APPROVER, ""), (APPROVER, "  "), ("", "no")] {
        let refused = ledger
            .decide(decision(&intent, false, actor, reason, T0 + 10))
            .await;
        assert!(
            matches!(refused, Err(LedgerError::Invalid { .. })),
            "{actor:?} {reason:?}: {refused:?}"
        );
    }
    let long_reason = "r".repeat(intentgate_core::limits::EVENT_DETAIL_LENGTH_MAX + 1);
    let refused = ledger
        .decide(decision(&intent, false, APPROVER, &long_reason, T0 + 10))
        .await;
    assert!(
        matches!(refused, Err(LedgerError::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(events(ledger, &intent).await, before);

    let decided = ledger
        .decide(decision(
            &intent,
            false,
            APPROVER,
            "too large a refund",
            T0 + 10,
        ))
        .await
        .unwrap();
    let Decided::Denied(denied, approval) = decided else {
        panic!("expected Denied, got {decided:?}");
    };
    assert_eq!(denied.status, IntentStatus::Rejected);
    assert_eq!(
        denied.result,
        Some(json!({ "denied": "too large a refund", "by": APPROVER }))
    );
    assert_eq!(denied.resolved_by.as_deref(), Some(DENIED_BY));
    assert_eq!(approval.decision, Some(Decision::Denied));
    assert_eq!(approval.reason.as_deref(), Some("too large a refund"));
    let last = approval_events(ledger, &intent).await.pop().unwrap();
    assert_eq!(last.detail.as_deref(), Some("denied: too large a refund"));
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_deref()),
        (Some("pending"), Some("rejected"))
    );

    for asked in [
        held_request("order-1", T0 + 20),
        request("order-1", "owner-b", T0 + 20),
    ] {
        let retrying = BeginRequest {
            retry_rejected: true,
            ..asked
        };
        let settled = expect!(Begin::Settled, ledger.begin(retrying).await.unwrap());
        assert_eq!(
            (settled.status, settled.attempt),
            (IntentStatus::Rejected, 0)
        );
    }
}

async fn the_subject_that_asked_may_not_decide_its_own_request(ledger: &dyn Ledger) {
    let (intent, approval) = held(ledger.begin(held_request("order-1", T0)).await);
    let before = events(ledger, &intent).await;
    for approve in [true, false] {
        let decided = ledger
            .decide(decision(&intent, approve, SUBJECT, "mine", T0 + 10))
            .await
            .unwrap();
        assert_eq!(
            decided,
            Decided::OwnRequest(intent.clone(), approval.clone())
        );
    }
    assert_eq!(ledger.approval(intent.id).await.unwrap(), Some(approval));
    assert_eq!(read(ledger, &intent).await, intent);
    assert_eq!(events(ledger, &intent).await, before);

    // Never held: nothing to decide.
    let plain = started(ledger, "order-2", "owner-a", T0).await;
    let decided = ledger
        .decide(decision(&plain, true, APPROVER, "", T0 + 10))
        .await
        .unwrap();
    assert_eq!(decided, Decided::NotAwaiting(plain, None));
}

/// Only the `begin` that made a request says so: a repeat finds it open, even one in the same
/// millisecond from the same subject, which the request's own fields can't tell apart. (The
/// gate announces and counts a held intent once, on the call that made its request.)
async fn only_the_begin_that_made_an_approval_request_says_it_asked(ledger: &dyn Ledger) {
    let (first, _, asked) = held_asking(ledger.begin(held_request("order-1", T0)).await);
    assert_eq!(asked, ApprovalRequest::Made);
    let (again, _, asked) = held_asking(ledger.begin(held_request("order-1", T0)).await);
    assert_eq!((again.id, again.call_count), (first.id, 2));
    assert_eq!(
        asked,
        ApprovalRequest::Open,
        "a repeat in the same millisecond"
    );
    let (_, _, asked) = held_asking(
        ledger
            .begin(held_request("order-1", T0 + DEADLINE_MS))
            .await,
    );
    assert_eq!(
        asked,
        ApprovalRequest::Made,
        "held again after its request lapsed"
    );
}

async fn a_held_intent_past_its_deadline_is_settled_not_executed_and_held_again_when_asked(
    ledger: &dyn Ledger,
) {
    let past = T0 + DEADLINE_MS;
    // Asked again with the approval policy: a new request.
    let (first, request_1) = held(ledger.begin(held_request("order-1", T0)).await);
    let (again, request_2) = held(ledger.begin(held_request("order-1", past)).await);
    assert_eq!((again.id, again.status), (first.id, IntentStatus::Pending));
    assert_eq!(
        (request_2.requested_ms, request_2.deadline_ms),
        (past, past + DEADLINE_MS)
    );
    assert_eq!(request_2.decision, None);
    assert_ne!(request_2, request_1);
    let logged: Vec<_> = approval_events(ledger, &first)
        .await
        .into_iter()
        .map(|event| (event.from_status, event.to_status, event.detail))
        .collect();
    assert_eq!(
        logged,
        [
            (
                None,
                Some("pending".to_owned()),
                Some(format!("held for approval: {HELD_BY}"))
            ),
            (
                Some("pending".to_owned()),
                Some("not_executed".to_owned()),
                Some(format!("expired: nobody decided by {}", T0 + DEADLINE_MS))
            ),
            (
                Some("not_executed".to_owned()),
                Some("pending".to_owned()),
                Some(format!("held for approval: {HELD_BY}"))
            ),
        ]
    );

    // Asked again for a tool without the policy now: it starts as any not-executed intent.
    let (second, _) = held(ledger.begin(held_request("order-2", T0)).await);
    let executing = expect!(
        Begin::Execute,
        ledger
            .begin(request("order-2", "owner-b", past))
            .await
            .unwrap()
    );
    assert_eq!((executing.id, executing.attempt), (second.id, 1));
    let expired = ledger.approval(second.id).await.unwrap().unwrap();
    assert_eq!(
        (expired.decision, expired.decided_ms),
        (Some(Decision::Expired), Some(past))
    );

    // A decision past the deadline expires the request instead.
    let (third, _) = held(ledger.begin(held_request("order-3", T0)).await);
    let decided = ledger
        .decide(decision(&third, true, APPROVER, "", past))
        .await
        .unwrap();
    let Decided::Expired(settled, approval) = decided else {
        panic!("expected Expired, got {decided:?}");
    };
    assert_eq!(settled.status, IntentStatus::NotExecuted);
    assert_eq!(approval.decision, Some(Decision::Expired));
    assert_eq!(approval.decided_by, None);
}

async fn expire_approvals_settles_the_held_intents_past_their_deadline_oldest_first(
    ledger: &dyn Ledger,
) {
    let mut ids = Vec::new();
    for (key, deadline_ms) in [
        ("order-1", T0 + 1_000),
        ("order-2", T0 + 3_000),
        ("order-3", T0 + 2_000),
        ("order-4", T0 + 10_000),
    ] {
        let hold = Hold {
            held_by: HELD_BY.into(),
            deadline_ms,
        };
        let asked = governed(
            request(key, "owner-a", T0),
            policies(Some(hold), Vec::new()),
        );
        ids.push(held(ledger.begin(asked).await).0.id);
    }
    assert!(
        ledger
            .expire_approvals(T0 + 999, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let first = ledger.expire_approvals(T0 + 3_000, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].intent.id, ids[0]);
    let rest = ledger.expire_approvals(T0 + 3_000, 10).await.unwrap();
    let expired: Vec<IntentId> = rest.iter().map(|held| held.intent.id).collect();
    assert_eq!(expired, [ids[2], ids[1]], "oldest deadline first");
    for held in first.iter().chain(&rest) {
        assert_eq!(held.intent.status, IntentStatus::NotExecuted);
        assert_eq!(held.approval.decision, Some(Decision::Expired));
        assert_eq!(held.approval.decided_ms, Some(T0 + 3_000));
        assert_eq!(read(ledger, &held.intent).await, held.intent);
        let last = approval_events(ledger, &held.intent).await.pop().unwrap();
        assert!(
            last.detail
                .unwrap()
                .starts_with("expired: nobody decided by")
        );
    }
    assert!(
        ledger
            .expire_approvals(T0 + 3_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let open = ledger.approval(ids[3]).await.unwrap().unwrap();
    assert_eq!(open.decision, None);
}

async fn a_count_budget_refuses_new_intents_beyond_it_and_a_repeat_never_counts_twice(
    ledger: &dyn Ledger,
) {
    let budgets = || vec![charge("per-hour", Some(2), None, 0, T0)];
    let first = expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-1", budgets(), T0))
            .await
            .unwrap()
    );
    assert_eq!((first.status, first.attempt), (IntentStatus::InFlight, 1));
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-2", budgets(), T0))
            .await
            .unwrap()
    );
    assert_eq!(usage(ledger, T0).await, [("per-hour".to_owned(), 2, 0)]);

    for asked in [
        budgeted("order-3", budgets(), T0 + 1),
        BeginRequest {
            expect_new: true,
            ..budgeted("order-3", budgets(), T0 + 1)
        },
    ] {
        assert_eq!(over_budget(ledger.begin(asked).await), "per-hour");
    }
    assert_eq!(ledger.get(TENANT, TOOL, "order-3").await.unwrap(), None);
    assert_eq!(all_intents(ledger).await.len(), 2);

    // Repeats of a counted intent, in flight and settled, are not new intents.
    expect!(
        Begin::Busy,
        ledger
            .begin(budgeted("order-1", budgets(), T0 + 2))
            .await
            .unwrap()
    );
    ledger
        .finish(finish(&first, "owner-order-1", IntentStatus::Done, T0 + 3))
        .await
        .unwrap();
    expect!(
        Begin::Settled,
        ledger
            .begin(budgeted("order-1", budgets(), T0 + 4))
            .await
            .unwrap()
    );
    assert_eq!(usage(ledger, T0).await, [("per-hour".to_owned(), 2, 0)]);
}

async fn an_amount_budget_counts_units_and_refuses_the_intent_that_would_pass_it(
    ledger: &dyn Ledger,
) {
    let cents = |units| vec![charge("amount", None, Some(10_000), units, T0)];
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-1", cents(6_000), T0))
            .await
            .unwrap()
    );
    assert_eq!(
        over_budget(ledger.begin(budgeted("order-2", cents(5_000), T0)).await),
        "amount"
    );
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-3", cents(4_000), T0))
            .await
            .unwrap()
    );
    assert_eq!(usage(ledger, T0).await, [("amount".to_owned(), 2, 10_000)]);
    assert_eq!(
        over_budget(ledger.begin(budgeted("order-4", cents(1), T0)).await),
        "amount"
    );

    // Units the store can't hold saturate at the largest it can.
    let unbounded = |key: &str| budgeted(key, vec![charge("sum", None, None, u64::MAX, T0)], T0);
    expect!(
        Begin::Execute,
        ledger.begin(unbounded("order-5")).await.unwrap()
    );
    expect!(
        Begin::Execute,
        ledger.begin(unbounded("order-6")).await.unwrap()
    );
    let counted = usage(ledger, T0).await;
    assert_eq!(counted[1], ("sum".to_owned(), 2, i64::MAX as u64));
}

async fn a_budget_that_holds_holds_the_intent_beyond_it_and_an_approval_counts_it(
    ledger: &dyn Ledger,
) {
    let holding = || {
        vec![BudgetCharge {
            hold_deadline_ms: Some(T0 + 5_000),
            ..charge("per-hour", Some(1), None, 0, T0)
        }]
    };
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-1", holding(), T0))
            .await
            .unwrap()
    );
    let (intent, approval) = held(ledger.begin(budgeted("order-2", holding(), T0)).await);
    assert_eq!(intent.status, IntentStatus::Pending);
    assert_eq!(approval.held_by, "budget per-hour");
    assert_eq!(approval.deadline_ms, T0 + 5_000);
    assert_eq!(
        usage(ledger, T0).await,
        [("per-hour".to_owned(), 1, 0)],
        "held, not counted"
    );

    // Held by the policy and the budget: both named, the earlier deadline.
    let both = governed(
        request("order-3", "owner-a", T0),
        policies(hold_at(T0), holding()),
    );
    let (_, approval) = held(ledger.begin(both).await);
    assert_eq!(approval.held_by, format!("{HELD_BY}; budget per-hour"));
    assert_eq!(approval.deadline_ms, T0 + 5_000);

    // The approver has decided: the intent counts, beyond the limit.
    let approve = Decide {
        budgets: holding(),
        ..decision(&intent, true, APPROVER, "one more is fine", T0 + 10)
    };
    assert!(matches!(
        ledger.decide(approve).await.unwrap(),
        Decided::Approved(..)
    ));
    assert_eq!(usage(ledger, T0).await, [("per-hour".to_owned(), 2, 0)]);
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-2", holding(), T0 + 20))
            .await
            .unwrap()
    );
    assert_eq!(usage(ledger, T0).await, [("per-hour".to_owned(), 2, 0)]);
}

async fn a_new_window_counts_from_zero(ledger: &dyn Ledger) {
    let budgets = |now_ms| vec![charge("per-hour", Some(1), None, 0, now_ms)];
    let next = T0 + HOUR_MS;
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-1", budgets(T0), T0))
            .await
            .unwrap()
    );
    assert_eq!(
        over_budget(ledger.begin(budgeted("order-2", budgets(T0), T0)).await),
        "per-hour"
    );
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted("order-2", budgets(next), next))
            .await
            .unwrap()
    );
    let rows = ledger.budget_usage(TOOL, next).await.unwrap();
    assert_eq!(rows.len(), 1, "the ended window is left out: {rows:?}");
    assert_eq!(rows[0].window_start_ms, next.div_euclid(HOUR_MS) * HOUR_MS);
    assert_eq!((rows[0].count, rows[0].units), (1, 0));
}

async fn approvals_are_paged_newest_first_by_tenant_tool_and_state(ledger: &dyn Ledger) {
    let hold = |key: &str, tenant: &str, tool: &str| BeginRequest {
        tenant: tenant.into(),
        tool: tool.into(),
        ..held_request(key, T0)
    };
    let mut intents = Vec::new();
    for (key, tenant, tool) in [
        ("order-1", TENANT, TOOL),
        ("order-2", TENANT, TOOL),
        ("order-3", TENANT, TOOL),
        ("order-4", OTHER_TENANT, TOOL),
        ("order-5", TENANT, OTHER_TOOL),
        ("order-6", TENANT, TOOL),
    ] {
        intents.push(held(ledger.begin(hold(key, tenant, tool)).await).0);
    }
    let id = |index: usize| intents[index].id;
    ledger
        .decide(decision(&intents[1], true, APPROVER, "", T0 + 1))
        .await
        .unwrap();
    ledger
        .decide(decision(&intents[2], false, APPROVER, "no", T0 + 1))
        .await
        .unwrap();
    // Approved and executing: closed.
    ledger
        .decide(decision(&intents[5], true, APPROVER, "", T0 + 1))
        .await
        .unwrap();
    expect!(
        Begin::Execute,
        ledger.begin(hold("order-6", TENANT, TOOL)).await.unwrap()
    );

    let page = async |tenant: Option<&str>, tool: Option<&str>, state, before, limit| {
        let filter = ApprovalFilter {
            tenant: tenant.map(str::to_owned),
            tool: tool.map(str::to_owned),
            state,
        };
        let page = ledger.approvals(&filter, before, limit).await.unwrap();
        for held in &page {
            assert_eq!(held.approval.intent, held.intent.id);
            assert_eq!(
                Some(&held.intent),
                all_intents(ledger)
                    .await
                    .iter()
                    .find(|i| i.id == held.intent.id)
            );
        }
        page.iter().map(|held| held.intent.id).collect::<Vec<_>>()
    };
    use ApprovalState::{Approved, Closed, Open};
    assert_eq!(
        page(None, None, None, None, 100).await,
        [id(5), id(4), id(3), id(2), id(1), id(0)]
    );
    assert_eq!(
        page(Some(TENANT), None, None, None, 100).await,
        [id(5), id(4), id(2), id(1), id(0)]
    );
    assert_eq!(page(None, Some(OTHER_TOOL), None, None, 100).await, [id(4)]);
    assert_eq!(
        page(Some(TENANT), Some(TOOL), None, None, 100).await,
        [id(5), id(2), id(1), id(0)]
    );
    assert_eq!(
        page(None, None, Some(Open), None, 100).await,
        [id(4), id(3), id(0)]
    );
    assert_eq!(
        page(Some(TENANT), None, Some(Open), None, 100).await,
        [id(4), id(0)]
    );
    assert_eq!(
        page(None, Some(TOOL), Some(Open), None, 100).await,
        [id(3), id(0)]
    );
    assert_eq!(page(None, None, Some(Approved), None, 100).await, [id(1)]);
    assert_eq!(
        page(Some(TENANT), Some(TOOL), Some(Approved), None, 100).await,
        [id(1)]
    );
    assert_eq!(
        page(None, None, Some(Closed), None, 100).await,
        [id(5), id(2)]
    );
    assert!(
        page(Some(OTHER_TENANT), None, Some(Closed), None, 100)
            .await
            .is_empty()
    );

    // Page by page: each starts strictly before the last of the previous one.
    assert_eq!(
        page(None, None, None, None, 4).await,
        [id(5), id(4), id(3), id(2)]
    );
    assert_eq!(page(None, None, None, Some(id(2)), 4).await, [id(1), id(0)]);
    assert_eq!(
        page(Some(TENANT), None, Some(Open), Some(id(4)), 1).await,
        [id(0)]
    );
    assert!(page(None, None, None, None, 0).await.is_empty());
    assert_eq!(
        page(None, None, None, None, APPROVALS_PAGE_MAX + 1)
            .await
            .len(),
        6
    );
}

async fn purge_deletes_ended_budget_windows_and_the_approvals_of_purged_intents(
    ledger: &dyn Ledger,
) {
    let (denied, _) = held(ledger.begin(held_request("order-1", T0)).await);
    ledger
        .decide(decision(&denied, false, APPROVER, "no", T0))
        .await
        .unwrap();
    let (open, approval) = held(ledger.begin(held_request("order-2", T0)).await);
    expect!(
        Begin::Execute,
        ledger
            .begin(budgeted(
                "order-3",
                vec![charge("per-hour", Some(5), None, 0, T0)],
                T0
            ))
            .await
            .unwrap()
    );
    let window_end = T0.div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;

    // Before the window ends its count stays; the denied intent goes, with its approval.
    assert_eq!(
        ledger.purge(window_end - 1).await.unwrap(),
        1,
        "the denied intent"
    );
    assert_eq!(usage(ledger, T0).await, [("per-hour".to_owned(), 1, 0)]);
    assert_eq!(ledger.purge(window_end).await.unwrap(), 0);
    assert!(usage(ledger, T0).await.is_empty());
    assert_eq!(ledger.get_by_id(denied.id).await.unwrap(), None);
    assert_eq!(ledger.approval(denied.id).await.unwrap(), None);
    assert_eq!(ledger.approval(open.id).await.unwrap(), Some(approval));
    assert_eq!(read(ledger, &open).await.status, IntentStatus::Pending);
}

async fn erase_deletes_the_approvals_of_the_erased_intents(ledger: &dyn Ledger) {
    let (intent, _) = held(ledger.begin(held_request("order-1", T0)).await);
    let (kept, approval) = held(
        ledger
            .begin(BeginRequest {
                tenant: OTHER_TENANT.into(),
                ..held_request("order-1", T0)
            })
            .await,
    );
    let refused = ledger
        .erase(&erasure(TENANT, None, None, T0 + 1))
        .await
        .unwrap();
    assert_eq!(
        refused,
        Erasure::Unsettled {
            ids: vec![intent.id]
        }
    );
    let erase = Erase {
        force: true,
        ..erasure(TENANT, None, None, T0 + 1)
    };
    assert!(matches!(
        ledger.erase(&erase).await.unwrap(),
        Erasure::Erased(_)
    ));
    assert_eq!(ledger.approval(intent.id).await.unwrap(), None);
    assert_eq!(ledger.approval(kept.id).await.unwrap(), Some(approval));
    let open = ApprovalFilter {
        state: Some(ApprovalState::Open),
        ..ApprovalFilter::default()
    };
    let listed = ledger.approvals(&open, None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].intent.id, kept.id);
}

async fn policies_the_schema_cannot_store_are_refused_and_nothing_is_written(ledger: &dyn Ledger) {
    let budget = || charge("per-hour", Some(5), None, 0, T0);
    let bad = [
        policies(
            None,
            vec![BudgetCharge {
                bucket: "b".repeat(BUDGET_BUCKET_LENGTH_MAX + 1),
                ..budget()
            }],
        ),
        policies(
            None,
            vec![BudgetCharge {
                budget: String::new(),
                ..budget()
            }],
        ),
        policies(
            None,
            vec![BudgetCharge {
                window_end_ms: budget().window_start_ms,
                ..budget()
            }],
        ),
        CallPolicies {
            requested_by: "s".repeat(intentgate_core::limits::ACTOR_LENGTH_MAX + 1),
            ..policies(hold_at(T0), Vec::new())
        },
        CallPolicies {
            intent_id: Some("i".repeat(intentgate_core::limits::INTENT_ID_LENGTH_MAX + 1)),
            ..policies(hold_at(T0), Vec::new())
        },
    ];
    for policies in bad {
        let refused = ledger
            .begin(governed(
                request("order-1", "owner-a", T0),
                policies.clone(),
            ))
            .await;
        assert!(
            matches!(
                refused,
                Err(LedgerError::Invalid { .. } | LedgerError::TooLarge { .. })
            ),
            "{policies:?}: {refused:?}"
        );
    }
    assert!(all_intents(ledger).await.is_empty());
    assert!(usage(ledger, T0).await.is_empty());
}

/// Many callers begin distinct new intents against one count budget at once: exactly as
/// many as it admits execute, whatever the interleaving.
async fn concurrent_new_intents_against_a_count_budget_execute_only_as_many_as_it_admits(
    ledger: Arc<dyn Ledger>,
) {
    budget_race(&[ledger.clone(), ledger]).await;
}

/// The callers of [`budget_race`], and the budget's count limit.
const RACING_CALLERS: usize = 24;
const RACING_COUNT_MAX: u64 = 7;

/// Begins `RACING_CALLERS` distinct new intents at once, spread over `ledgers` (replicas
/// of one ledger), against a budget of `RACING_COUNT_MAX`: exactly that many execute.
async fn budget_race(ledgers: &[Arc<dyn Ledger>]) {
    let start = Arc::new(tokio::sync::Barrier::new(RACING_CALLERS));
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..RACING_CALLERS {
        let ledger = ledgers[caller % ledgers.len()].clone();
        let start = start.clone();
        callers.spawn(async move {
            let budgets = vec![charge("per-hour", Some(RACING_COUNT_MAX), None, 0, T0)];
            let asked = BeginRequest {
                expect_new: caller % 2 == 0,
                ..budgeted(&format!("order-{caller}"), budgets, T0)
            };
            start.wait().await;
            ledger.begin(asked).await.unwrap()
        });
    }
    let (mut executed, mut refused) = (0, 0);
    while let Some(begun) = callers.join_next().await {
        match begun.unwrap() {
            Begin::Execute(_) => executed += 1,
            Begin::OverBudget { budget } => {
                assert_eq!(budget, "per-hour");
                refused += 1;
            }
            other => panic!("expected Execute or OverBudget, got {other:?}"),
        }
    }
    assert_eq!(executed, RACING_COUNT_MAX as usize);
    assert_eq!(refused, RACING_CALLERS - RACING_COUNT_MAX as usize);
    assert_eq!(all_intents(&*ledgers[0]).await.len(), executed);
    assert_eq!(
        usage(&*ledgers[0], T0).await,
        [("per-hour".to_owned(), RACING_COUNT_MAX, 0)]
    );
}

/// Spawns `waiting` after polling it once, so that it has begun (a waiter on an intent has
/// registered) before the test goes on, whenever the runtime gets to the task: a wait for a
/// change begins with no other await before it registers.
fn spawn_begun<T: Send + 'static>(
    waiting: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let mut waiting = Box::pin(waiting);
    match waiting
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => tokio::spawn(async move { output }),
        Poll::Pending => tokio::spawn(waiting),
    }
}

/// A caller waiting on a held intent is woken by the decision.
async fn a_waiter_on_a_held_intent_is_woken_by_the_decision(ledger: Arc<dyn Ledger>) {
    let (intent, _) = held(ledger.begin(held_request("order-1", T0)).await);
    // The waiter registers before the decision.
    let waiting = spawn_begun({
        let ledger = ledger.clone();
        async move {
            let started = Instant::now();
            ledger
                .wait_for_change(intent.id, Duration::from_secs(5))
                .await;
            started.elapsed()
        }
    });
    let decided = ledger
        .decide(decision(&intent, true, APPROVER, "", T0 + 1))
        .await
        .unwrap();
    assert!(matches!(decided, Decided::Approved(..)));
    let waited = waiting.await.unwrap();
    assert!(waited < Duration::from_secs(1), "waited {waited:?}");
}

/// Generates, inside a store's module, one `#[tokio::test]` per behaviour above, each named
/// like its behaviour: `$fresh` runs a behaviour that takes a `&dyn Ledger` on a fresh
/// ledger of the store (in each of its modes), `$shared` one that takes an `Arc<dyn Ledger>`
/// and calls it from several tasks. A store joins the suite with one line,
/// `behaviours!(on_fresh_ledger, on_shared_ledger);`, and a new behaviour is one name here.
macro_rules! behaviours {
    ($fresh:ident, $shared:ident) => {
        behaviours!(@each $fresh, #[tokio::test],
            a_restarted_rejection_does_not_carry_the_old_refusal,
            an_operator_reopens_a_rejected_intent_and_the_next_call_executes_it,
            an_over_long_lease_owner_is_refused_as_too_large_on_every_path,
            erase_deletes_a_tenants_intents_events_and_mismatches_and_nothing_else,
            erase_refuses_unsettled_intents_unless_forced_and_a_running_call_always,
            an_erasure_without_a_reason_or_a_key_without_a_tool_is_refused,
            a_new_key_starts_its_first_attempt_in_flight,
            a_begin_expecting_a_new_key_decides_the_same_when_the_key_exists,
            create_begins_a_new_key_and_finds_a_taken_one_writing_nothing,
            a_second_caller_is_busy_while_the_lease_lives,
            the_lease_holder_settles_the_intent_and_later_calls_get_it,
            a_finish_without_the_lease_or_from_an_old_attempt_writes_nothing,
            renew_extends_a_live_lease_and_never_shortens_it,
            renew_without_the_live_lease_is_lost_and_changes_nothing,
            a_finish_that_requires_the_lease_is_superseded_once_it_expired,
            the_same_key_with_other_arguments_is_a_conflict,
            the_same_key_under_another_tenant_or_tool_is_another_intent,
            an_expired_lease_makes_the_intent_unknown_and_one_caller_looks_it_up,
            lookups_of_an_unknown_intent_are_one_at_a_time_and_rate_limited,
            an_unknown_intent_is_re_sent_with_the_same_provider_key_only_when_asked,
            stopped_re_sends_are_kept_honoured_and_dropped_with_the_provider_key,
            a_not_executed_intent_starts_a_new_attempt_with_the_same_provider_key,
            a_rejected_intent_is_settled_unless_the_tool_retries_rejections,
            every_call_and_transition_is_logged_oldest_first,
            an_operator_resolves_an_unknown_intent_and_illegal_resolutions_are_refused,
            a_resolution_is_refused_while_a_lease_lives,
            values_over_their_limit_are_refused_and_nothing_is_written,
            a_tool_flag_is_stored_once_per_tool_and_updated_in_place,
            purge_deletes_old_settled_intents_and_keeps_unresolved_ones,
            stale_lists_in_flight_intents_whose_lease_has_expired,
            stale_leaves_out_the_tools_it_is_told_to_skip,
            intents_are_filtered_by_every_field_alone_and_together,
            intents_page_in_both_orders_without_duplicates_or_gaps,
            status_counts_count_each_tool_in_each_status,
            reconciliation_runs_are_read_back_newest_first_with_their_mismatches_in_order,
            a_run_keeps_the_first_mismatches_up_to_the_cap_and_says_how_many_it_left_out,
            reconciliation_text_is_cut_to_its_limits_and_bad_names_are_refused,
            purge_deletes_reconciliation_runs_finished_before_the_cutoff,
            a_registered_owner_that_ended_loses_its_live_leases_at_once,
            a_lookup_lease_of_an_ended_owner_is_released_by_the_next_begin,
            a_silent_owner_loses_its_live_lease_once_its_silence_is_over,
            a_heartbeating_owner_keeps_its_lease_however_long_its_call,
            an_unregistered_owner_loses_its_lease_only_on_expiry,
            a_process_registers_heartbeats_ends_and_registers_again,
            a_registration_with_a_bad_instance_or_silence_is_refused,
            purge_deletes_processes_that_ended_or_went_silent_before_the_cutoff,
            the_executing_calls_trace_is_kept_replaced_and_erased_with_its_intent,
            a_caller_key_stays_bound_to_its_first_intent_within_its_tenant_and_tool,
            a_caller_key_the_schema_cannot_store_is_refused_and_nothing_is_bound,
            caller_keys_are_purged_and_erased_with_their_intents,
            a_held_call_waits_pending_and_every_repeat_is_held_with_nothing_executed,
            an_approved_intent_starts_its_first_attempt_at_its_next_begin,
            a_denied_intent_is_rejected_with_the_reason_even_for_a_tool_that_retries,
            the_subject_that_asked_may_not_decide_its_own_request,
            a_held_intent_past_its_deadline_is_settled_not_executed_and_held_again_when_asked,
            only_the_begin_that_made_an_approval_request_says_it_asked,
            expire_approvals_settles_the_held_intents_past_their_deadline_oldest_first,
            a_count_budget_refuses_new_intents_beyond_it_and_a_repeat_never_counts_twice,
            an_amount_budget_counts_units_and_refuses_the_intent_that_would_pass_it,
            a_budget_that_holds_holds_the_intent_beyond_it_and_an_approval_counts_it,
            a_new_window_counts_from_zero,
            approvals_are_paged_newest_first_by_tenant_tool_and_state,
            purge_deletes_ended_budget_windows_and_the_approvals_of_purged_intents,
            erase_deletes_the_approvals_of_the_erased_intents,
            policies_the_schema_cannot_store_are_refused_and_nothing_is_written,
            a_console_session_is_found_by_its_digest_and_ended_at_sign_out,
            a_console_session_ends_when_idle_and_past_its_end_however_active,
            a_full_session_table_ends_the_idlest_session,
            sessions_and_alerts_the_schema_cannot_store_are_refused,
            alerts_are_listed_newest_first_and_the_oldest_go_past_the_cap,
            purge_deletes_ended_sessions_and_old_alerts,
            erase_deletes_the_alerts_about_the_erased_tenant_tool_or_intent,
        );
        behaviours!(@each $shared, #[tokio::test(flavor = "multi_thread", worker_threads = 8)],
            concurrent_begins_on_distinct_keys_all_commit,
            callers_binding_one_key_at_once_find_one_binding,
            concurrent_new_intents_against_a_count_budget_execute_only_as_many_as_it_admits,
        );
        behaviours!(@each $shared, #[tokio::test(flavor = "multi_thread", worker_threads = 2)],
            a_waiter_sees_the_lease_holder_finish_promptly,
            a_queued_finish_is_seen_by_every_read_made_after_it,
            a_waiter_on_a_held_intent_is_woken_by_the_decision,
        );
    };
    (@each $runner:ident, #[$test:meta], $($behaviour:ident),* $(,)?) => {
        $(
            #[$test]
            async fn $behaviour() {
                $runner(super::$behaviour).await;
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------
// The SQLite store.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::path::Path;

    use intentgate_ledger::{
        Durability, ERASE_BATCH_MAX, INTENTS_PAGE_MAX, SqliteLedger, SqliteOptions,
    };

    use super::*;

    /// Grouped commits on the writer thread, the serving mode.
    const GROUPED: SqliteOptions = SqliteOptions {
        durability: Durability::Strict,
        inline: false,
    };
    /// Every write on the calling thread, the simulation's mode.
    const INLINE: SqliteOptions = SqliteOptions {
        durability: Durability::Strict,
        inline: true,
    };

    fn open(path: &Path, options: SqliteOptions) -> SqliteLedger {
        SqliteLedger::open(path, options)
            .unwrap_or_else(|error| panic!("can't open {}: {error}", path.display()))
    }

    /// Runs `behaviour` on a fresh ledger in each write mode.
    async fn on_each_mode(behaviour: impl AsyncFn(&dyn Ledger)) {
        for (mode, options) in [("grouped", GROUPED), ("inline", INLINE)] {
            let folder = tempfile::tempdir().unwrap();
            let ledger = open(&folder.path().join("ledger.db"), options);
            // Printed with the output of a failing test, to say which mode failed.
            eprintln!("sqlite ledger, {mode} writes");
            behaviour(&ledger).await;
        }
    }

    /// Runs `behaviour` on a fresh, shared ledger with grouped commits.
    async fn on_grouped(behaviour: impl AsyncFn(Arc<dyn Ledger>)) {
        let folder = tempfile::tempdir().unwrap();
        let ledger = open(&folder.path().join("ledger.db"), GROUPED);
        behaviour(Arc::new(ledger)).await;
    }

    behaviours!(on_each_mode, on_grouped);

    /// How many rows `table` of the file holds, read by a connection of its own.
    fn rows_in(path: &Path, table: &str) -> i64 {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }

    /// A new intent's begin writes only its narrow row, which a crash (the ledger dropped
    /// with the call in flight, nothing else written) leaves as the one record of it; the
    /// next open moves it to the wide row with the events of its creation, so the console,
    /// the counts and the sweeper see it as they saw an intent begun before.
    #[tokio::test]
    async fn an_intent_begun_before_a_crash_is_whole_after_the_next_open() {
        for options in [GROUPED, INLINE] {
            let folder = tempfile::tempdir().unwrap();
            let path = folder.path().join("ledger.db");
            let ledger = open(&path, options);
            let intent = started(&ledger, "order-1", "owner-a", T0).await;
            // Read back as written, before it was moved.
            assert_eq!(read(&ledger, &intent).await, intent);
            drop(ledger);
            assert_eq!(rows_in(&path, "intents_begun"), 1, "{options:?}");
            assert_eq!(rows_in(&path, "intents"), 0, "{options:?}");
            assert_eq!(rows_in(&path, "events"), 0, "{options:?}");

            let reopened = open(&path, options);
            assert_eq!(rows_in(&path, "intents_begun"), 0, "{options:?}");
            assert_eq!(all_intents(&reopened).await, std::slice::from_ref(&intent));
            let log = events(&reopened, &intent).await;
            let kinds: Vec<(&str, Option<&str>)> = log
                .iter()
                .map(|event| (event.kind.as_str(), event.to_status.as_deref()))
                .collect();
            assert_eq!(
                kinds,
                [
                    ("created", Some("pending")),
                    ("transition", Some("in_flight"))
                ],
                "{log:?}"
            );
            assert!(log.iter().all(|event| event.intent_id == Some(intent.id)));
            let stale = reopened
                .stale(IntentStatus::InFlight, T0 + LEASE_MS + 1, 10, &[])
                .await
                .unwrap();
            assert_eq!(ids(&stale), [intent.id], "{options:?}");
            // Ids go on after it.
            let next = started(&reopened, "order-2", "owner-a", T0 + 1).await;
            assert!(next.id > intent.id, "{} after {}", next.id, intent.id);
        }
    }

    /// The trace of a call still in flight is kept without writing its intent's wide row,
    /// and goes with the intent when it is erased.
    #[tokio::test]
    async fn a_begun_intents_trace_is_kept_while_it_stays_begun() {
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        let intent = started(&ledger, "traced-1", "owner-a", T0).await;
        ledger
            .record_trace(intent.id, trace.to_owned())
            .await
            .unwrap();
        assert_eq!(
            ledger.trace_of(intent.id).await.unwrap().as_deref(),
            Some(trace)
        );
        assert_eq!(rows_in(&path, "intents_begun"), 1, "still begun");
        assert_eq!(rows_in(&path, "intents"), 0);
    }

    /// Another process on the same file (the CLI beside the gateway) sees an intent begun
    /// and not yet moved: by its key, by its id and in a list; and the begin's own process
    /// settles it after the other moved it.
    #[tokio::test]
    async fn another_process_sees_an_intent_begun_and_not_yet_moved() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let gateway = open(&path, GROUPED);
        let intent = started(&gateway, "order-1", "owner-a", T0).await;
        let beside = open(&path, GROUPED);
        let second = started(&gateway, "order-2", "owner-a", T0 + 1).await;
        assert_eq!(rows_in(&path, "intents_begun"), 1, "the second is begun");
        let by_key = beside.get(TENANT, TOOL, "order-2").await.unwrap();
        assert_eq!(by_key, Some(second.clone()));
        assert_eq!(read(&beside, &second).await, second);
        let busy = beside.begin(request("order-2", "owner-b", T0 + 2)).await;
        expect!(Begin::Busy, busy.unwrap());
        assert_eq!(
            ids(&all_intents(&beside).await),
            [intent.id, second.id],
            "listed"
        );
        let finished = gateway
            .finish(finish(&second, "owner-a", IntentStatus::Done, T0 + 3))
            .await
            .unwrap();
        assert_eq!(
            expect!(Finished::Recorded, finished).status,
            IntentStatus::Done
        );
        assert_eq!(read(&beside, &second).await.status, IntentStatus::Done);
    }

    /// The ledger holds every call's arguments and results, and its file, WAL and shared
    /// memory were created with mode 0644: every user of the machine could read them.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_new_ledger_and_its_wal_and_shared_memory_are_readable_by_the_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        for (mode, options) in [("grouped", GROUPED), ("inline", INLINE)] {
            let folder = tempfile::tempdir().unwrap();
            let path = folder.path().join("ledger.db");
            let ledger = open(&path, options);
            expect!(
                Begin::Execute,
                ledger
                    .begin(request("refund:1", "caller", T0))
                    .await
                    .unwrap()
            );
            for suffix in ["", "-wal", "-shm"] {
                let file = format!("{}{suffix}", path.display());
                let found = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
                assert_eq!(found, 0o600, "{mode} writes: {file} has mode {found:o}");
            }
        }
    }

    /// A finish queued just before its ledger is dropped neither holds up the drop (the
    /// writer thread stops) nor is lost: on this one-thread runtime its task can only run
    /// after the drop, and commits it then on the connection it kept.
    #[tokio::test]
    async fn a_finish_queued_just_before_the_ledger_is_dropped_still_commits() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        let intent = started(&ledger, "order-1", "owner-a", T0).await;
        let queued = ledger
            .finish_queued(finish(&intent, "owner-a", IntentStatus::Done, T0 + 10))
            .await
            .unwrap();
        drop(ledger);
        let recorded = tokio::time::timeout(Duration::from_secs(5), queued)
            .await
            .expect("the queued finish is answered")
            .unwrap();
        assert_eq!(
            expect!(Finished::Recorded, recorded).status,
            IntentStatus::Done
        );
        let reopened = open(&path, GROUPED);
        let stored = reopened.get_by_id(intent.id).await.unwrap().unwrap();
        assert_eq!(stored.status, IntentStatus::Done);
    }

    /// Purging old intents also erased the kill-switch audit trail (the events without an
    /// intent), which the trait does not promise to delete.
    #[tokio::test]
    async fn purge_keeps_the_kill_switch_history() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        switch_off_and_purge_old_calls(&ledger).await;
        let outside = rusqlite::Connection::open(&path).unwrap();
        let kinds: Vec<String> = outside
            .prepare("SELECT kind FROM events ORDER BY id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            kinds,
            ["tool_disabled"],
            "switch changes stay; old refused calls go"
        );
    }

    /// Deleted rows used to stay readable in free pages of the file and in the WAL: an
    /// erased customer's values must be gone from both.
    #[tokio::test]
    async fn erased_values_are_gone_from_the_file_and_the_wal() {
        const MARK: &str = "erase-me-4711@example.com";
        for options in [GROUPED, INLINE] {
            let folder = tempfile::tempdir().unwrap();
            let path = folder.path().join("ledger.db");
            let ledger = open(&path, options);
            let begun = ledger
                .begin(with_arguments(
                    request("order-m", "owner-m", T0),
                    json!({"to": MARK}),
                ))
                .await
                .unwrap();
            let intent = expect!(Begin::Execute, begun);
            ledger
                .finish(Finish {
                    result: Some(json!({"to": MARK})),
                    ..finish(&intent, "owner-m", IntentStatus::Done, T0)
                })
                .await
                .unwrap();
            // Others' writes around it, as in a running gateway.
            settled(&ledger, "order-n", IntentStatus::Done, T0).await;
            let files = || -> Vec<u8> {
                let mut bytes = Vec::new();
                for entry in std::fs::read_dir(folder.path()).unwrap() {
                    bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
                }
                bytes
            };
            let holds = |bytes: &[u8]| bytes.windows(MARK.len()).any(|w| w == MARK.as_bytes());
            assert!(holds(&files()), "the value is in the files before");
            let erased = ledger
                .erase(&erasure(TENANT, Some(TOOL), Some("order-m"), T0 + 1))
                .await
                .unwrap();
            assert!(matches!(erased, Erasure::Erased(Erased { intents: 1, .. })));
            assert!(
                !holds(&files()),
                "an erased value is still in the ledger's files"
            );
            // The ledger goes on after its WAL was truncated.
            let next = settled(&ledger, "order-o", IntentStatus::Done, T0).await;
            assert_eq!(read(&ledger, &next).await, next);
        }
    }

    /// More than a batch: each call erases one batch and says that there is more.
    #[tokio::test]
    async fn a_large_erasure_goes_in_batches() {
        let folder = tempfile::tempdir().unwrap();
        let ledger = open(&folder.path().join("ledger.db"), GROUPED);
        let total = ERASE_BATCH_MAX as usize + 5;
        let intents: Vec<IntentRecord> = (0..total).map(|n| done_intent(n, TOOL, T0)).collect();
        ledger.bulk_insert(intents).await.unwrap();
        let first = ledger
            .erase(&erasure(TENANT, None, None, T0 + 1))
            .await
            .unwrap();
        assert_eq!(
            first,
            Erasure::Erased(Erased {
                intents: u64::from(ERASE_BATCH_MAX),
                more: true,
                ..Erased::default()
            })
        );
        let rest = ledger
            .erase(&erasure(TENANT, None, None, T0 + 2))
            .await
            .unwrap();
        assert_eq!(
            rest,
            Erasure::Erased(Erased {
                intents: 5,
                ..Erased::default()
            })
        );
        assert_eq!(all_intents(&ledger).await, []);
    }

    /// The erasure is in the event log for an auditor: who, why and how many, and none of
    /// what was erased (the key holds business values).
    #[tokio::test]
    async fn an_erasure_is_logged_with_who_why_and_how_many_only() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        erase_one_intent_and_purge(&ledger).await;
        let outside = rusqlite::Connection::open(&path).unwrap();
        let logged: Vec<(Option<i64>, String, String, String, String, String)> = outside
            .prepare("SELECT intent_id, tenant, tool, kind, actor, detail FROM events")
            .unwrap()
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(logged.len(), 1, "{logged:?}");
        let (intent_id, tenant, tool, kind, actor, detail) = &logged[0];
        assert_eq!(
            (
                intent_id,
                tenant.as_str(),
                tool.as_str(),
                kind.as_str(),
                actor.as_str()
            ),
            (&None, TENANT, TOOL, "erased", "dpo@example.com")
        );
        assert!(
            detail.contains("1 intents") && detail.contains("erasure request 77"),
            "{detail}"
        );
        assert!(!detail.contains("8812"), "{detail}");
    }

    /// Intent `n` as a fixture writes it: done by its upstream, first seen at
    /// `first_seen_ms`. Its fingerprint is `n` in hex (cheap, and 64 hex digits like a real one).
    fn done_intent(n: usize, tool: &str, first_seen_ms: i64) -> IntentRecord {
        IntentRecord {
            id: 0,
            tenant: TENANT.into(),
            tool: tool.into(),
            key: format!("order-{n}"),
            fingerprint: format!("{n:064x}"),
            arguments: json!({ "order": format!("order-{n}"), "amount": "49.00" }),
            status: IntentStatus::Done,
            attempt: 1,
            epoch: 1,
            lease_owner: None,
            lease_expires_ms: None,
            result: Some(json!({ "refund": format!("re_{n}") })),
            external_id: Some(format!("re_{n}")),
            resolved_by: Some("upstream".into()),
            call_count: 1,
            first_seen_ms,
            last_seen_ms: first_seen_ms,
            updated_ms: first_seen_ms,
            last_lookup_ms: None,
            resend_stopped: None,
        }
    }

    #[tokio::test]
    async fn bulk_insert_stores_intents_as_given_without_events() {
        for options in [GROUPED, INLINE] {
            let folder = tempfile::tempdir().unwrap();
            let ledger = open(&folder.path().join("ledger.db"), options);
            let given = vec![
                done_intent(0, TOOL, T0),
                IntentRecord {
                    status: IntentStatus::InFlight,
                    lease_owner: Some("owner-x".into()),
                    lease_expires_ms: Some(T0 + LEASE_MS),
                    result: None,
                    external_id: None,
                    resolved_by: None,
                    ..done_intent(1, TOOL, T0 + 1)
                },
                IntentRecord {
                    tenant: OTHER_TENANT.into(),
                    status: IntentStatus::Unknown,
                    attempt: 2,
                    epoch: 2,
                    result: None,
                    external_id: None,
                    resolved_by: None,
                    call_count: 3,
                    last_seen_ms: T0 + 7,
                    updated_ms: T0 + 8,
                    last_lookup_ms: Some(T0 + 5),
                    ..done_intent(2, TOOL, T0 + 2)
                },
                IntentRecord {
                    status: IntentStatus::Pending,
                    attempt: 0,
                    result: None,
                    external_id: None,
                    resolved_by: None,
                    ..done_intent(3, TOOL, T0 + 3)
                },
                IntentRecord {
                    status: IntentStatus::Rejected,
                    result: Some(json!({ "error": "card_declined" })),
                    external_id: None,
                    ..done_intent(4, TOOL, T0 + 4)
                },
                IntentRecord {
                    status: IntentStatus::NotExecuted,
                    result: None,
                    external_id: None,
                    ..done_intent(5, OTHER_TOOL, T0 + 5)
                },
            ];
            // Fingerprinted as `begin` fingerprints, so that later calls are repeats.
            let given: Vec<IntentRecord> = given
                .into_iter()
                .map(|intent| IntentRecord {
                    fingerprint: fingerprint(&intent.arguments).as_str().to_owned(),
                    ..intent
                })
                .collect();
            let inserted = ledger.bulk_insert(given.clone()).await.unwrap();
            assert_eq!(inserted, given.len() as u64);

            let stored = all_intents(&ledger).await;
            assert_eq!(stored.len(), given.len());
            for (stored, given) in stored.iter().zip(&given) {
                let expected = IntentRecord {
                    id: stored.id,
                    ..given.clone()
                };
                assert_eq!(stored, &expected, "stored exactly as given, but the id");
                assert_eq!(events(&ledger, stored).await, [], "no event-log entries");
            }
            assert!(
                stored.windows(2).all(|pair| pair[0].id < pair[1].id),
                "ids in the order given"
            );

            // The ledger goes on with them as with any intent.
            let repeat = ledger.begin(request("order-0", "owner-a", T0 + 10)).await;
            let repeat = expect!(Begin::Settled, repeat.unwrap());
            assert_eq!(repeat.external_id.as_deref(), Some("re_0"));
            let expired = ledger
                .begin(request("order-1", "owner-b", T0 + LEASE_MS + 1))
                .await;
            let lookup = expect!(Begin::Lookup, expired.unwrap());
            assert_eq!(lookup.status, IntentStatus::Unknown);
        }
    }

    /// The indexes (name and definition) of the intents table, read from the file.
    fn intent_indexes(path: &Path) -> Vec<(String, String)> {
        pairs(
            path,
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' \
             AND tbl_name = 'intents' AND sql IS NOT NULL ORDER BY name",
        )
    }

    /// The rows of a two-column `SELECT`, read from the file by a connection of its own.
    fn pairs<A: rusqlite::types::FromSql, B: rusqlite::types::FromSql>(
        path: &Path,
        sql: &str,
    ) -> Vec<(A, B)> {
        let connection = rusqlite::Connection::open(path).unwrap();
        let mut statement = connection.prepare(sql).unwrap();
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    }

    /// A batch larger than the ledger is inserted with the secondary indexes dropped and
    /// built again; they must come back as the migrations made them, and serve.
    #[tokio::test]
    async fn bulk_insert_leaves_the_indexes_as_the_migrations_made_them() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        let migrated = intent_indexes(&path);
        assert!(migrated.len() >= 6, "{migrated:?}");

        // Into an empty ledger (the indexes are built again), then a batch smaller than the
        // ledger (inserted into them).
        let first = (0..100).map(|n| done_intent(n, TOOL, T0 + n as i64));
        assert_eq!(ledger.bulk_insert(first.collect()).await.unwrap(), 100);
        assert_eq!(intent_indexes(&path), migrated);
        let second = (100..110).map(|n| done_intent(n, OTHER_TOOL, T0 + n as i64));
        assert_eq!(ledger.bulk_insert(second.collect()).await.unwrap(), 10);
        assert_eq!(intent_indexes(&path), migrated);

        // Both batches are found through the indexes.
        let window = IntentFilter {
            tool: Some(TOOL.into()),
            first_seen_from_ms: Some(T0 + 10),
            first_seen_until_ms: Some(T0 + 20),
            ..IntentFilter::default()
        };
        let page = ledger.intents(&window, Order::Oldest, None, 100).await;
        let keys: Vec<String> = page.unwrap().into_iter().map(|i| i.key).collect();
        let expected: Vec<String> = (10..20).map(|n| format!("order-{n}")).collect();
        assert_eq!(keys, expected);
        let key = IntentFilter {
            tool: Some(OTHER_TOOL.into()),
            key: Some("order-105".into()),
            ..IntentFilter::default()
        };
        let found = ledger.intents(&key, Order::Oldest, None, 10).await.unwrap();
        assert_eq!(found.len(), 1);
        let counts = ledger.status_counts().await.unwrap();
        let done = |tool: &str, count| StatusCount {
            tool: tool.into(),
            status: IntentStatus::Done,
            count,
        };
        assert_eq!(counts, [done(OTHER_TOOL, 10), done(TOOL, 100)]);
    }

    #[tokio::test]
    async fn bulk_insert_refuses_an_invalid_intent_and_writes_none_of_the_batch() {
        let folder = tempfile::tempdir().unwrap();
        let ledger = open(&folder.path().join("ledger.db"), GROUPED);
        let valid = || done_intent(0, TOOL, T0);
        let invalid = [
            (
                "status",
                IntentRecord {
                    status: IntentStatus::InFlight,
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "status",
                IntentRecord {
                    lease_owner: Some("owner-x".into()),
                    lease_expires_ms: Some(T0 + LEASE_MS),
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "lease_owner",
                IntentRecord {
                    status: IntentStatus::Unknown,
                    lease_owner: Some("owner-x".into()),
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "tenant",
                IntentRecord {
                    tenant: "t".repeat(TENANT_LENGTH_MAX + 1),
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "key",
                IntentRecord {
                    key: String::new(),
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "fingerprint",
                IntentRecord {
                    fingerprint: "not-a-fingerprint".into(),
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "epoch",
                IntentRecord {
                    epoch: 0,
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "last_seen_ms",
                IntentRecord {
                    last_seen_ms: T0 - 1,
                    ..done_intent(1, TOOL, T0)
                },
            ),
            (
                "arguments",
                IntentRecord {
                    arguments: json!({ "note": "x".repeat(ARGUMENTS_BYTES_MAX) }),
                    ..done_intent(1, TOOL, T0)
                },
            ),
        ];
        for (field, intent) in invalid {
            let refused = ledger.bulk_insert(vec![valid(), intent]).await;
            match refused {
                Err(LedgerError::Invalid { field: named, .. })
                | Err(LedgerError::TooLarge { field: named, .. }) => {
                    assert_eq!(named, field)
                }
                other => panic!("{field}: expected a refusal, got {other:?}"),
            }
            assert_eq!(all_intents(&ledger).await, [], "{field}: nothing written");
        }

        // A key that is there already refuses the whole batch too.
        assert_eq!(ledger.bulk_insert(vec![valid()]).await.unwrap(), 1);
        let again = ledger
            .bulk_insert(vec![done_intent(1, TOOL, T0), valid()])
            .await;
        assert!(matches!(again, Err(LedgerError::Storage(_))), "{again:?}");
        let left = all_intents(&ledger).await;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].key, "order-0");
    }

    #[tokio::test]
    async fn a_page_is_cut_to_the_page_limit() {
        let folder = tempfile::tempdir().unwrap();
        let ledger = open(&folder.path().join("ledger.db"), GROUPED);
        let count = INTENTS_PAGE_MAX as usize + 1;
        let intents = (0..count).map(|n| done_intent(n, TOOL, T0 + n as i64));
        ledger.bulk_insert(intents.collect()).await.unwrap();
        let filter = IntentFilter::default();
        let page = ledger
            .intents(&filter, Order::Oldest, None, u32::MAX)
            .await
            .unwrap();
        assert_eq!(page.len(), INTENTS_PAGE_MAX as usize);
        let cursor = page.last().map(|intent| intent.id);
        let rest = ledger
            .intents(&filter, Order::Oldest, cursor, u32::MAX)
            .await
            .unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].key, format!("order-{}", count - 1));
    }

    /// Reconciliation's read, at a size where a page that sorted the window, or a first page
    /// that read the tool from its start, would show. Times are printed (`--nocapture`), not
    /// asserted: timing belongs to benchmarks.
    #[tokio::test]
    async fn paging_one_tools_window_of_200_000_intents_reads_each_once_in_id_order() {
        const INTENTS: usize = 200_000;
        let folder = tempfile::tempdir().unwrap();
        let ledger = open(&folder.path().join("ledger.db"), GROUPED);
        // Ten milliseconds apart, give or take up to 60: neighbours are first seen out of
        // id order, as on replicas whose clocks differ.
        let first_seen_ms = |n: usize| T0 + n as i64 * 10 + (n as i64 * 7_919 % 13) * 5;
        let tool = |n: usize| {
            if n.is_multiple_of(2) {
                TOOL
            } else {
                OTHER_TOOL
            }
        };
        let intents: Vec<IntentRecord> = (0..INTENTS)
            .map(|n| done_intent(n, tool(n), first_seen_ms(n)))
            .collect();
        let started = Instant::now();
        assert_eq!(ledger.bulk_insert(intents).await.unwrap(), INTENTS as u64);
        eprintln!("bulk_insert of {INTENTS} intents: {:?}", started.elapsed());

        let (from_ms, until_ms) = (T0 + INTENTS as i64 * 2, T0 + INTENTS as i64 * 8);
        let expected = (0..INTENTS)
            .filter(|&n| tool(n) == TOOL && (from_ms..until_ms).contains(&first_seen_ms(n)))
            .count();
        assert!(expected > INTENTS / 4, "{expected}");
        let filter = IntentFilter {
            tool: Some(TOOL.into()),
            first_seen_from_ms: Some(from_ms),
            first_seen_until_ms: Some(until_ms),
            ..IntentFilter::default()
        };
        let started = Instant::now();
        let (mut read, mut pages, mut cursor) = (0, 0, None);
        let mut last_id = IntentId::MIN;
        // Each page's time: with no per-page sort, the last page costs what the first does.
        let mut page_times = Vec::new();
        loop {
            let page_started = Instant::now();
            let page = ledger
                .intents(&filter, Order::Oldest, cursor, INTENTS_PAGE_MAX)
                .await
                .unwrap();
            page_times.push(page_started.elapsed());
            pages += 1;
            for intent in &page {
                assert!(intent.id > last_id, "id {} after {last_id}", intent.id);
                last_id = intent.id;
                assert_eq!(intent.tool, TOOL);
                assert!((from_ms..until_ms).contains(&intent.first_seen_ms));
            }
            read += page.len();
            cursor = page.last().map(|intent| intent.id).or(cursor);
            if page.len() < INTENTS_PAGE_MAX as usize {
                break;
            }
        }
        eprintln!(
            "paged {read} intents of one tool's window in {pages} pages: {:?} (first page \
             {:?}, slowest {:?}, last {:?})",
            started.elapsed(),
            page_times[0],
            page_times.iter().max().unwrap(),
            page_times.last().unwrap(),
        );
        assert_eq!(read, expected);
    }

    #[tokio::test]
    async fn the_event_log_refuses_updates() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = open(&path, GROUPED);
        let intent = settled(&ledger, "order-1", IntentStatus::Done, T0).await;
        let log = events(&ledger, &intent).await;
        assert!(!log.is_empty());

        let outside = rusqlite::Connection::open(&path).unwrap();
        outside
            .busy_timeout(Duration::from_secs(5))
            .expect("busy timeout");
        let edited = outside.execute("UPDATE events SET detail = 'edited'", []);
        let error = edited.expect_err("the event log was edited");
        assert!(error.to_string().contains("append-only"), "{error}");
        let rewritten =
            outside.execute("UPDATE events SET kind = 'call' WHERE kind = 'created'", []);
        assert!(rewritten.is_err(), "an event's kind was rewritten");

        assert_eq!(events(&ledger, &intent).await, log);
    }

    #[tokio::test]
    async fn everything_written_survives_a_reopen() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let written = {
            let ledger = open(&path, GROUPED);
            write_a_little(&ledger).await
            // Dropped here: the writer thread stops and the file is closed.
        };
        let migrations = applied_migrations(&path);
        assert!(!migrations.is_empty());

        for options in [GROUPED, INLINE] {
            let reopened = open(&path, options);
            assert_eq!(snapshot(&reopened).await, written);
            drop(reopened);
            assert_eq!(applied_migrations(&path), migrations, "migrated again");
        }

        // The reopened ledger goes on from where it was.
        goes_on_from(&open(&path, GROUPED), &written).await;
    }

    /// A ledger made before re-sends could stop (schema version 5) gets the column on open:
    /// its intents read back as they were, none stopped, and the column is then written.
    #[tokio::test]
    async fn a_version_5_ledger_gains_the_resend_stop_column_and_keeps_its_intents() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let before = {
            let ledger = open(&path, GROUPED);
            let intent = started(&ledger, "order-m", "owner-a", T0).await;
            let unknown = Finish {
                looked_up: true,
                ..finish(&intent, "owner-a", IntentStatus::Unknown, T0 + 1)
            };
            expect!(Finished::Recorded, ledger.finish(unknown).await.unwrap())
        };
        // Back to version 5, as an older intentgate left it: migrations 10 to 6 undone (10's
        // table made again as migrations 1 and 2 made it, with its rows).
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .execute_batch(
                "CREATE TABLE intents_as_made (
                     id INTEGER PRIMARY KEY,
                     tenant TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
                     tool TEXT NOT NULL CHECK (length(tool) BETWEEN 1 AND 128),
                     intent_key TEXT NOT NULL CHECK (length(intent_key) BETWEEN 1 AND 512),
                     fingerprint TEXT NOT NULL CHECK (length(fingerprint) = 64),
                     arguments TEXT NOT NULL CHECK (length(arguments) <= 65536),
                     status TEXT NOT NULL CHECK (status IN ('pending', 'in_flight', 'done',
                         'rejected', 'not_executed', 'unknown')),
                     attempt INTEGER NOT NULL CHECK (attempt >= 0),
                     epoch INTEGER NOT NULL CHECK (epoch >= 1),
                     lease_owner TEXT CHECK (length(lease_owner) <= 128),
                     lease_expires_ms INTEGER,
                     result TEXT CHECK (length(result) <= 65536),
                     external_id TEXT CHECK (length(external_id) <= 256),
                     resolved_by TEXT CHECK (length(resolved_by) <= 256),
                     call_count INTEGER NOT NULL CHECK (call_count >= 0),
                     first_seen_ms INTEGER NOT NULL,
                     last_seen_ms INTEGER NOT NULL,
                     updated_ms INTEGER NOT NULL,
                     last_lookup_ms INTEGER,
                     UNIQUE (tenant, tool, intent_key)
                 ) STRICT;
                 INSERT INTO intents_as_made SELECT id, tenant, tool, intent_key, fingerprint,
                     arguments, status, attempt, epoch, lease_owner, lease_expires_ms, result,
                     external_id, resolved_by, call_count, first_seen_ms, last_seen_ms,
                     updated_ms, last_lookup_ms FROM intents;
                 DROP TABLE intents;
                 ALTER TABLE intents_as_made RENAME TO intents;
                 CREATE INDEX intents_by_status ON intents (status, updated_ms);
                 CREATE INDEX intents_by_last_seen ON intents (last_seen_ms);
                 CREATE INDEX intents_by_tool ON intents (tool, id, first_seen_ms);
                 CREATE INDEX intents_by_tool_first_seen ON intents (tool, first_seen_ms);
                 CREATE INDEX intents_by_tool_key ON intents (tool, intent_key);
                 CREATE INDEX intents_by_tool_status ON intents (tool, status);
                 DROP TABLE intents_begun;
                 DROP TABLE approvals;
                 DROP TABLE budget_usage;
                 DROP TABLE console_sessions;
                 DROP TABLE alerts;
                 DELETE FROM schema_migrations WHERE version >= 6;",
            )
            .unwrap();
        drop(connection);
        let versions = |path: &Path| -> Vec<i64> {
            applied_migrations(path)
                .into_iter()
                .map(|(version, _)| version)
                .collect()
        };
        assert_eq!(versions(&path), [1, 2, 3, 4, 5]);

        let ledger = open(&path, GROUPED);
        assert_eq!(versions(&path), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        let indexes: Vec<String> = intent_indexes(&path)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            indexes,
            [
                "intents_by_key",
                "intents_by_last_seen",
                "intents_by_status",
                "intents_by_tenant",
                "intents_by_tool",
                "intents_by_tool_first_seen",
                "intents_by_tool_status"
            ]
        );
        let read_back = read(&ledger, &before).await;
        assert_eq!(read_back, before);
        assert_eq!(read_back.resend_stopped, None);
        let lookup = expect!(
            Begin::Lookup,
            ledger
                .begin(request("order-m", "owner-b", T0 + 1 + LOOKUP_INTERVAL_MS))
                .await
                .unwrap()
        );
        let stop = Finish {
            looked_up: true,
            resend_stopped: Some(ResendStop::KeyReused),
            ..finish(
                &lookup,
                "owner-b",
                IntentStatus::Unknown,
                T0 + 2 + LOOKUP_INTERVAL_MS,
            )
        };
        expect!(Finished::Recorded, ledger.finish(stop).await.unwrap());
        drop(ledger);
        let stored: Vec<(i64, String)> = pairs(
            &path,
            "SELECT id, resend_stopped FROM intents WHERE resend_stopped IS NOT NULL",
        );
        assert_eq!(stored, [(before.id, "key_reused".to_owned())]);

        // The remade table still holds one intent per key.
        let duplicate = rusqlite::Connection::open(&path).unwrap().execute(
            "INSERT INTO intents (tenant, tool, intent_key, fingerprint, arguments, status, \
             attempt, epoch, call_count, first_seen_ms, last_seen_ms, updated_ms) \
             SELECT tenant, tool, intent_key, fingerprint, arguments, status, attempt, epoch, \
             call_count, first_seen_ms, last_seen_ms, updated_ms FROM intents WHERE id = ?1",
            [before.id],
        );
        let refusal = duplicate.expect_err("a second intent of a key was stored");
        assert!(
            refusal.to_string().contains("UNIQUE constraint failed"),
            "{refusal}"
        );
    }

    /// The migration versions recorded in the file, with their times.
    fn applied_migrations(path: &Path) -> Vec<(i64, i64)> {
        pairs(
            path,
            "SELECT version, applied_ms FROM schema_migrations ORDER BY version",
        )
    }

    #[tokio::test]
    async fn opening_in_a_missing_folder_says_the_folder_does_not_exist() {
        let folder = tempfile::tempdir().unwrap();
        let missing = folder.path().join("missing");
        let path = missing.join("ledger.db");
        for options in [GROUPED, INLINE] {
            match SqliteLedger::open(&path, options) {
                Err(LedgerError::Open {
                    path: named,
                    reason,
                }) => {
                    assert!(named.ends_with("ledger.db"), "{named}");
                    assert!(reason.contains("does not exist"), "{reason}");
                    assert!(reason.contains("missing"), "names the folder: {reason}");
                }
                Err(other) => panic!("expected an open error, got {other:?}"),
                Ok(_) => panic!("opened a ledger in a folder that does not exist"),
            }
        }
        assert!(!missing.exists(), "the folder was created");
    }

    #[tokio::test]
    async fn opening_a_file_that_is_not_sqlite_fails_and_leaves_it_alone() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let garbage: Vec<u8> = (0..8192u32).map(|n| (n * 31 % 251) as u8).collect();
        std::fs::write(&path, &garbage).unwrap();
        for options in [GROUPED, INLINE] {
            match SqliteLedger::open(&path, options) {
                Err(LedgerError::Open { path: named, .. }) => {
                    assert!(named.ends_with("ledger.db"), "{named}");
                }
                Err(other) => panic!("expected an open error, got {other:?}"),
                Ok(_) => panic!("opened a file of garbage as a ledger"),
            }
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            garbage,
            "the file was changed"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The PostgreSQL store.
// ---------------------------------------------------------------------------------------

/// Each runner makes a schema of its own on the database at `DATABASE_URL` and drops it at
/// the end, passed or failed, so runs (and tests within a run) never see each other. Without
/// `DATABASE_URL` the runners say they are skipped and pass, except under `CI=true`, where
/// they fail: CI must never skip the PostgreSQL suite silently. Built with the `postgres`
/// feature.
#[cfg(feature = "postgres")]
mod postgres {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};

    use intentgate_ledger::{Durability, PostgresLedger, PostgresOptions};
    use tokio_postgres::NoTls;

    use super::*;

    /// The database to run on, or `None` when the suite is skipped.
    fn database_url() -> Option<String> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => Some(url),
            _ if std::env::var("CI").as_deref() == Ok("true") => panic!(
                "DATABASE_URL is not set and CI=true: CI must run the PostgreSQL suite, not skip \
                 it; set DATABASE_URL to a PostgreSQL URL (.ci/run does)"
            ),
            _ => {
                eprintln!(
                    "skipped: DATABASE_URL is not set; set it to a PostgreSQL URL to run the \
                     PostgreSQL suite"
                );
                None
            }
        }
    }

    /// A schema that exists for one test and is dropped when this value is (also when the
    /// test panics).
    struct Scratch {
        url: String,
        schema: String,
    }

    impl Scratch {
        /// A schema name unique to this test, in this run and across concurrent runs.
        fn new(url: &str) -> Scratch {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos();
            let schema = format!(
                "test_{}_{nanos}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            Scratch {
                url: url.to_owned(),
                schema,
            }
        }

        fn options(&self) -> PostgresOptions {
            PostgresOptions {
                schema: self.schema.clone(),
                ..PostgresOptions::default()
            }
        }

        async fn connect(&self, options: PostgresOptions) -> PostgresLedger {
            PostgresLedger::connect(&self.url, options)
                .await
                .unwrap_or_else(|error| panic!("can't connect to DATABASE_URL: {error}"))
        }

        /// A second connection, outside the ledger, to look at or tamper with its tables.
        async fn outside(&self) -> tokio_postgres::Client {
            outside(&self.url).await
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            // Drop runs inside the test's runtime, which can't block on a future: drop the
            // schema from a thread with a runtime of its own.
            let (url, schema) = (self.url.clone(), self.schema.clone());
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async {
                    let client = outside(&url).await;
                    client
                        .batch_execute(&format!(
                            "SET lock_timeout = '30s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                        ))
                        .await
                })
            })
            .join();
            match dropped {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    eprintln!("can't drop the test schema {}: {error:?}", self.schema)
                }
                Err(_) => eprintln!("dropping the test schema {} panicked", self.schema),
            }
        }
    }

    async fn outside(url: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("connect to DATABASE_URL");
        tokio::spawn(connection);
        client
    }

    /// Runs `behaviour` on a fresh ledger in a schema of its own.
    async fn on_fresh_schema(behaviour: impl AsyncFn(&dyn Ledger)) {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        behaviour(&ledger).await;
    }

    /// Runs `behaviour` on a fresh, shared ledger in a schema of its own.
    async fn on_shared(behaviour: impl AsyncFn(Arc<dyn Ledger>)) {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        behaviour(Arc::new(ledger)).await;
    }

    behaviours!(on_fresh_schema, on_shared);

    /// The erasure is in the event log for an auditor: who, why and how many only.
    #[tokio::test]
    async fn an_erasure_is_logged_with_who_why_and_how_many_only() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        erase_one_intent_and_purge(&ledger).await;
        let outside = scratch.outside().await;
        let rows = outside
            .query(
                &format!(
                    "SELECT intent_id, tenant, tool, kind, actor, detail FROM \"{}\".events",
                    scratch.schema
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(row.get::<_, Option<i64>>(0), None);
        assert_eq!(row.get::<_, String>(1), TENANT);
        assert_eq!(row.get::<_, String>(2), TOOL);
        assert_eq!(row.get::<_, String>(3), "erased");
        assert_eq!(row.get::<_, String>(4), "dpo@example.com");
        let detail: String = row.get(5);
        assert!(
            detail.contains("erasure request 77") && !detail.contains("8812"),
            "{detail}"
        );
    }

    /// The event kinds of the whole log, oldest first, read from outside the ledger.
    async fn event_kinds(client: &tokio_postgres::Client, schema: &str) -> Vec<String> {
        let rows = client
            .query(
                &format!("SELECT kind FROM \"{schema}\".events ORDER BY id"),
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// Purging old intents also erased the kill-switch audit trail (the events without an
    /// intent), which the trait does not promise to delete.
    #[tokio::test]
    async fn purge_keeps_the_kill_switch_history() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        switch_off_and_purge_old_calls(&ledger).await;
        let kinds = event_kinds(&scratch.outside().await, &scratch.schema).await;
        assert_eq!(
            kinds,
            ["tool_disabled"],
            "switch changes stay; old refused calls go"
        );
    }

    #[tokio::test]
    async fn the_event_log_refuses_updates() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        let intent = settled(&ledger, "order-1", IntentStatus::Done, T0).await;
        let log = events(&ledger, &intent).await;
        assert!(!log.is_empty());

        let outside = scratch.outside().await;
        let schema = &scratch.schema;
        let edited = outside
            .execute(
                &format!("UPDATE \"{schema}\".events SET detail = 'edited'"),
                &[],
            )
            .await;
        let error = edited.expect_err("the event log was edited");
        let message = error.as_db_error().map(|error| error.message().to_owned());
        assert_eq!(message.as_deref(), Some("the event log is append-only"));
        let rewritten = outside
            .execute(
                &format!("UPDATE \"{schema}\".events SET kind = 'call' WHERE kind = 'created'"),
                &[],
            )
            .await;
        assert!(rewritten.is_err(), "an event's kind was rewritten");

        assert_eq!(events(&ledger, &intent).await, log);
    }

    /// The schema's text columns refuse over-long values even from a writer that skips the
    /// checks in Rust.
    #[tokio::test]
    async fn the_schema_bounds_every_text_column() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let _ledger = scratch.connect(scratch.options()).await;
        let outside = scratch.outside().await;
        let schema = &scratch.schema;
        let long_key = "k".repeat(INTENT_KEY_LENGTH_MAX + 1);
        let inserted = outside
            .execute(
                &format!(
                    "INSERT INTO \"{schema}\".intents (tenant, tool, intent_key, fingerprint, \
                     arguments, status, attempt, epoch, call_count, first_seen_ms, last_seen_ms, \
                     updated_ms) VALUES ('t', 'tool', $1, repeat('a', 64), '{{}}', 'pending', 0, 1, \
                     1, 0, 0, 0)"
                ),
                &[&long_key],
            )
            .await;
        let error = inserted.expect_err("an over-long key was stored");
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
        );

        let columns: i64 = outside
            // From pg_catalog, not information_schema: its privilege checks open every
            // relation of the database, and fail on one that a concurrent test is dropping.
            .query_one(
                "SELECT count(*) FROM pg_attribute a \
                 JOIN pg_class c ON c.oid = a.attrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname <> 'schema_migrations' \
                   AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'text'::regtype \
                   AND NOT EXISTS (SELECT 1 FROM pg_constraint k \
                     WHERE k.conrelid = c.oid AND k.contype = 'c' AND a.attnum = ANY (k.conkey))",
                &[schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(columns, 0, "every text column has a CHECK");

        // Each limit holds, for every column of the two tables written on every call.
        outside
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".intents (tenant, tool, intent_key, fingerprint, \
                 arguments, status, attempt, epoch, call_count, first_seen_ms, last_seen_ms, \
                 updated_ms) VALUES ('t', 'tool', 'k', repeat('a', 64), '{{}}', 'pending', 0, 1, \
                 1, 0, 0, 0)"
            ))
            .await
            .unwrap();
        let event = |columns: &str, values: &str| {
            format!(
                "INSERT INTO \"{schema}\".events (tenant, tool, at_ms, kind{columns}) \
                 VALUES ('t', 'tool', 0, 'created'{values})"
            )
        };
        let over = [
            format!("UPDATE \"{schema}\".intents SET tenant = ''"),
            format!("UPDATE \"{schema}\".intents SET tool = repeat('t', 129)"),
            format!("UPDATE \"{schema}\".intents SET fingerprint = 'short'"),
            format!("UPDATE \"{schema}\".intents SET arguments = repeat('a', 65537)"),
            format!("UPDATE \"{schema}\".intents SET status = 'maybe'"),
            format!("UPDATE \"{schema}\".intents SET attempt = -1"),
            format!("UPDATE \"{schema}\".intents SET epoch = 0"),
            format!("UPDATE \"{schema}\".intents SET lease_owner = repeat('o', 129)"),
            format!("UPDATE \"{schema}\".intents SET result = repeat('r', 65537)"),
            format!("UPDATE \"{schema}\".intents SET external_id = repeat('e', 257)"),
            format!("UPDATE \"{schema}\".intents SET resolved_by = repeat('r', 257)"),
            format!("UPDATE \"{schema}\".intents SET call_count = -1"),
            format!("UPDATE \"{schema}\".intents SET resend_stopped = ''"),
            event(", detail", ", repeat('d', 4097)"),
            event(", actor", ", repeat('a', 257)"),
            event(", from_status", ", repeat('s', 17)"),
            event(", attempt", ", 4294967296"),
            event("", "").replace("'created'", "repeat('k', 33)"),
        ];
        for statement in over {
            let refused = outside.batch_execute(&statement).await;
            assert_eq!(
                refused.err().and_then(|error| error.code().cloned()),
                Some(tokio_postgres::error::SqlState::CHECK_VIOLATION),
                "{statement}"
            );
        }
        // In one CHECK per table, a function's call: PostgreSQL reads every CHECK of a table
        // from its text again for each statement that writes it.
        let checks: i64 = outside
            .query_one(
                "SELECT count(*) FROM pg_constraint k \
                 JOIN pg_class c ON c.oid = k.conrelid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname IN ('intents', 'events') AND k.contype = 'c'",
                &[schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(checks, 2, "intents and events have one CHECK each");
    }

    #[tokio::test]
    async fn everything_written_survives_a_reconnect_and_migrations_run_once() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let written = {
            let ledger = scratch.connect(scratch.options()).await;
            write_a_little(&ledger).await
        };
        let outside = scratch.outside().await;
        let migrations = applied_migrations(&outside, &scratch.schema).await;
        assert!(!migrations.is_empty());

        for durability in [Durability::Strict, Durability::Relaxed] {
            let options = PostgresOptions {
                durability,
                ..scratch.options()
            };
            let reconnected = scratch.connect(options).await;
            assert_eq!(snapshot(&reconnected).await, written);
            drop(reconnected);
            assert_eq!(
                applied_migrations(&outside, &scratch.schema).await,
                migrations,
                "migrated again"
            );
        }

        goes_on_from(&scratch.connect(scratch.options()).await, &written).await;
    }

    /// A schema made before re-sends could stop (version 5) gets the column on connect: its
    /// intents read back as they were, none stopped, and the column is then written.
    #[tokio::test]
    async fn a_version_5_schema_gains_the_resend_stop_column_and_keeps_its_intents() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let before = {
            let ledger = scratch.connect(scratch.options()).await;
            let intent = started(&ledger, "order-m", "owner-a", T0).await;
            let unknown = Finish {
                looked_up: true,
                ..finish(&intent, "owner-a", IntentStatus::Unknown, T0 + 1)
            };
            expect!(Finished::Recorded, ledger.finish(unknown).await.unwrap())
        };
        // Back to version 5, as an older intentgate left it: migrations 11 to 6 undone.
        let outside = scratch.outside().await;
        let schema = &scratch.schema;
        outside
            .batch_execute(&format!(
                "DROP FUNCTION \"{schema}\".intent_bounded CASCADE;
                 DROP FUNCTION \"{schema}\".event_bounded CASCADE;
                 ALTER TABLE \"{schema}\".intents
                     ADD CONSTRAINT intents_tenant_check CHECK (octet_length(tenant) BETWEEN 1 AND 128),
                     ADD CONSTRAINT intents_tool_check CHECK (octet_length(tool) BETWEEN 1 AND 128),
                     ADD CONSTRAINT intents_intent_key_check
                         CHECK (octet_length(intent_key) BETWEEN 1 AND 512),
                     ADD CONSTRAINT intents_fingerprint_check CHECK (octet_length(fingerprint) = 64),
                     ADD CONSTRAINT intents_arguments_check CHECK (octet_length(arguments) <= 65536),
                     ADD CONSTRAINT intents_status_check CHECK (status IN
                         ('pending', 'in_flight', 'done', 'rejected', 'not_executed', 'unknown')),
                     ADD CONSTRAINT intents_attempt_check CHECK (attempt BETWEEN 0 AND 4294967295),
                     ADD CONSTRAINT intents_epoch_check CHECK (epoch BETWEEN 1 AND 4294967295),
                     ADD CONSTRAINT intents_lease_owner_check CHECK (octet_length(lease_owner) <= 128),
                     ADD CONSTRAINT intents_result_check CHECK (octet_length(result) <= 65536),
                     ADD CONSTRAINT intents_external_id_check CHECK (octet_length(external_id) <= 256),
                     ADD CONSTRAINT intents_resolved_by_check CHECK (octet_length(resolved_by) <= 256),
                     ADD CONSTRAINT intents_call_count_check CHECK (call_count >= 0);
                 ALTER TABLE \"{schema}\".events
                     ADD CONSTRAINT events_tenant_check CHECK (octet_length(tenant) <= 128),
                     ADD CONSTRAINT events_tool_check CHECK (octet_length(tool) <= 128),
                     ADD CONSTRAINT events_kind_check CHECK (octet_length(kind) <= 32),
                     ADD CONSTRAINT events_from_status_check CHECK (octet_length(from_status) <= 16),
                     ADD CONSTRAINT events_to_status_check CHECK (octet_length(to_status) <= 16),
                     ADD CONSTRAINT events_attempt_check CHECK (attempt BETWEEN 0 AND 4294967295),
                     ADD CONSTRAINT events_actor_check CHECK (octet_length(actor) <= 256),
                     ADD CONSTRAINT events_detail_check CHECK (octet_length(detail) <= 4096);
                 DROP INDEX \"{schema}\".intents_by_key;
                 ALTER TABLE \"{schema}\".intents ADD UNIQUE (tenant, tool, intent_key);
                 DROP FUNCTION \"{schema}\".intents_settled_changed() CASCADE;
                 DROP TABLE \"{schema}\".approvals;
                 DROP TABLE \"{schema}\".budget_usage;
                 DROP TABLE \"{schema}\".console_sessions;
                 DROP TABLE \"{schema}\".alerts;
                 ALTER TABLE \"{schema}\".intents DROP COLUMN resend_stopped;
                 DELETE FROM \"{schema}\".schema_migrations WHERE version >= 6;"
            ))
            .await
            .unwrap();
        let versions = async || -> Vec<i64> {
            applied_migrations(&outside, schema)
                .await
                .into_iter()
                .map(|(version, _)| version)
                .collect()
        };
        assert_eq!(versions().await, [1, 2, 3, 4, 5]);

        let ledger = scratch.connect(scratch.options()).await;
        assert_eq!(versions().await, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        // Migration 10 made the key's unique index again, in place of the constraint's.
        let key_indexes: Vec<String> = outside
            .query(
                "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'intents' \
                 AND indexdef LIKE 'CREATE UNIQUE INDEX % (tenant, tool, intent_key)'",
                &[schema],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(key_indexes, ["intents_by_key"]);
        let read_back = read(&ledger, &before).await;
        assert_eq!(read_back, before);
        assert_eq!(read_back.resend_stopped, None);
        let lookup = expect!(
            Begin::Lookup,
            ledger
                .begin(request("order-m", "owner-b", T0 + 1 + LOOKUP_INTERVAL_MS))
                .await
                .unwrap()
        );
        let stop = Finish {
            looked_up: true,
            resend_stopped: Some(ResendStop::KeyReused),
            ..finish(
                &lookup,
                "owner-b",
                IntentStatus::Unknown,
                T0 + 2 + LOOKUP_INTERVAL_MS,
            )
        };
        expect!(Finished::Recorded, ledger.finish(stop).await.unwrap());
        let stored: Vec<(i64, String)> = outside
            .query(
                &format!(
                    "SELECT id, resend_stopped FROM \"{schema}\".intents \
                     WHERE resend_stopped IS NOT NULL"
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(stored, [(before.id, "key_reused".to_owned())]);
    }

    /// Replicas starting at once against a new schema: one migrates, the others wait for
    /// its advisory lock and find the work done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replicas_starting_at_once_migrate_the_schema_once() {
        const REPLICAS: usize = 6;
        let Some(url) = database_url() else { return };
        let scratch = Arc::new(Scratch::new(&url));
        let mut starting = tokio::task::JoinSet::new();
        for _ in 0..REPLICAS {
            let scratch = scratch.clone();
            starting.spawn(async move {
                PostgresLedger::connect(&scratch.url, scratch.options()).await
            });
        }
        let mut replicas = Vec::new();
        while let Some(started) = starting.join_next().await {
            replicas.push(started.unwrap().expect("a replica failed to start"));
        }
        let outside = scratch.outside().await;
        let versions: Vec<i64> = applied_migrations(&outside, &scratch.schema)
            .await
            .into_iter()
            .map(|(version, _)| version)
            .collect();
        assert_eq!(versions, (1..=versions.len() as i64).collect::<Vec<_>>());
        started(&replicas[0], "order-1", "owner-a", T0).await;
        let seen = replicas[REPLICAS - 1].get(TENANT, TOOL, "order-1").await;
        assert!(seen.unwrap().is_some());
        drop(replicas);
    }

    /// Two replicas (two ledgers, two pools) call `begin` for one key at the same moment,
    /// many times over: for every key exactly one of them executes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_begins_for_one_key_from_two_replicas_execute_once() {
        const KEYS: usize = 25;
        const CALLERS_PER_REPLICA: usize = 4;
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let replicas: [Arc<dyn Ledger>; 2] = [
            Arc::new(scratch.connect(scratch.options()).await),
            Arc::new(scratch.connect(scratch.options()).await),
        ];
        for key in 0..KEYS {
            let key = format!("order-{key}");
            let start = Arc::new(tokio::sync::Barrier::new(2 * CALLERS_PER_REPLICA));
            let mut callers = tokio::task::JoinSet::new();
            for (replica, ledger) in replicas.iter().enumerate() {
                for caller in 0..CALLERS_PER_REPLICA {
                    let (ledger, start, key) = (ledger.clone(), start.clone(), key.clone());
                    callers.spawn(async move {
                        let owner = format!("replica-{replica}/{caller}");
                        // Half of them as the gateway asks after reading no intent: their
                        // inserts race, and the losers wait for the winner's commit.
                        let asked = BeginRequest {
                            expect_new: caller % 2 == 0,
                            ..request(&key, &owner, T0)
                        };
                        start.wait().await;
                        ledger.begin(asked).await.unwrap()
                    });
                }
            }
            let mut executed = Vec::new();
            while let Some(begun) = callers.join_next().await {
                match begun.unwrap() {
                    Begin::Execute(intent) => executed.push(intent),
                    Begin::Busy(intent) => assert_eq!(intent.status, IntentStatus::InFlight),
                    other => panic!("expected Execute or Busy, got {other:?}"),
                }
            }
            assert_eq!(executed.len(), 1, "{key}: {executed:?}");
            let intent = replicas[1].get(TENANT, TOOL, &key).await.unwrap().unwrap();
            assert_eq!(intent.attempt, 1);
            assert_eq!(intent.call_count, 2 * CALLERS_PER_REPLICA as u64);
            assert_eq!(intent.lease_owner, executed[0].lease_owner);
        }
        assert_eq!(all_intents(&*replicas[0]).await.len(), KEYS);
    }

    /// Two replicas (two ledgers, two pools) begin distinct new intents against one count
    /// budget at once: together they execute exactly as many as it admits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replicas_beginning_new_intents_against_one_budget_execute_only_as_many_as_it_admits() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let replicas: [Arc<dyn Ledger>; 2] = [
            Arc::new(scratch.connect(scratch.options()).await),
            Arc::new(scratch.connect(scratch.options()).await),
        ];
        budget_race(&replicas).await;
    }

    /// Two replicas: one holding `order-1` in flight under `owner-a`, and one that polls
    /// for changes only every `wait_poll`, so that only a notification wakes it sooner.
    async fn started_beside_a_slow_replica(
        scratch: &Scratch,
        wait_poll: Duration,
    ) -> (PostgresLedger, Arc<PostgresLedger>, IntentRecord) {
        let holder = scratch.connect(scratch.options()).await;
        let slow = Arc::new(
            scratch
                .connect(PostgresOptions {
                    wait_poll,
                    ..scratch.options()
                })
                .await,
        );
        let intent = started(&holder, "order-1", "owner-a", T0).await;
        (holder, slow, intent)
    }

    /// A finish that nobody but its own caller asked for sends no NOTIFY (a notification
    /// makes concurrent commits take turns): a wait on another replica that never asked
    /// `begin` is not woken by it, and sees the change at its next poll instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_finish_nobody_else_asked_for_notifies_no_other_replica() {
        const WAIT_POLL: Duration = Duration::from_secs(30);
        /// Far longer than a notification takes (the test above bounds it).
        const QUIET: Duration = Duration::from_secs(1);
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let (holder, other, intent) = started_beside_a_slow_replica(&scratch, WAIT_POLL).await;
        assert_eq!(intent.call_count, 1);
        let waiter = spawn_begun({
            let other = other.clone();
            async move { other.wait_for_change(intent.id, WAIT_POLL).await }
        });

        let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 10);
        expect!(Finished::Recorded, holder.finish(done).await.unwrap());
        tokio::time::sleep(QUIET).await;
        assert!(
            !waiter.is_finished(),
            "a NOTIFY was sent for an intent nobody else asked for"
        );
        waiter.abort();
        let seen = other.get_by_id(intent.id).await.unwrap().unwrap();
        assert_eq!(seen.status, IntentStatus::Done);
    }

    /// A caller waiting on one replica is woken by the other replica's finish through
    /// NOTIFY. Its poll interval is far longer than the bound, so only a notification can
    /// wake it in time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_notification_wakes_a_waiter_on_another_replica() {
        /// The waiting replica's poll interval: far beyond the bound the test checks.
        const WAIT_POLL: Duration = Duration::from_secs(30);
        /// The bound on the wake-up: generous, so a loaded machine does not fail it.
        const PROMPTLY: Duration = Duration::from_secs(3);
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let (holder, waiting, intent) = started_beside_a_slow_replica(&scratch, WAIT_POLL).await;
        let busy = waiting.begin(request("order-1", "owner-b", T0 + 1)).await;
        expect!(Begin::Busy, busy.unwrap());

        let waiter = spawn_begun({
            let waiting = waiting.clone();
            async move {
                waiting.wait_for_change(intent.id, WAIT_POLL).await;
                Instant::now()
            }
        });
        // Nothing changes meanwhile: a waiter woken now was woken by nothing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiter.is_finished(),
            "the waiter woke up before any change"
        );

        let finished_at = Instant::now();
        let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 10);
        expect!(Finished::Recorded, holder.finish(done).await.unwrap());
        let woken_at = tokio::time::timeout(PROMPTLY, waiter)
            .await
            .expect("the waiter was not woken by the other replica's finish")
            .unwrap();
        let delay = woken_at.saturating_duration_since(finished_at);
        assert!(delay < PROMPTLY, "woken after {delay:?}");
        let seen = waiting.get_by_id(intent.id).await.unwrap().unwrap();
        assert_eq!(seen.status, IntentStatus::Done);
    }

    #[tokio::test]
    async fn a_tool_flag_set_on_one_replica_is_seen_by_the_other() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let one = scratch.connect(scratch.options()).await;
        let other = scratch.connect(scratch.options()).await;
        let off = ToolFlag {
            tool: TOOL.into(),
            enabled: false,
            reason: "refunds double-paid".into(),
            actor: "operator:alice".into(),
            updated_ms: T0,
        };
        one.set_tool_flag(off.clone()).await.unwrap();
        assert_eq!(
            other.tool_flags().await.unwrap(),
            std::slice::from_ref(&off)
        );
        let on = ToolFlag {
            enabled: true,
            updated_ms: T0 + 1,
            ..off
        };
        other.set_tool_flag(on.clone()).await.unwrap();
        assert_eq!(one.tool_flags().await.unwrap(), [on]);
    }

    /// A connection outside the ledger listening on `channel`, and what it hears.
    async fn listening(
        url: &str,
        channel: &str,
    ) -> (
        tokio_postgres::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let (client, mut connection) = tokio_postgres::connect(url, NoTls)
            .await
            .expect("connect to DATABASE_URL");
        let (heard, hearing) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) =
                std::future::poll_fn(|context| connection.poll_message(context)).await
            {
                if let tokio_postgres::AsyncMessage::Notification(notification) = message {
                    let _ = heard.send(notification.payload().to_owned());
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN \"{channel}\""))
            .await
            .unwrap();
        (client, hearing)
    }

    /// The next payload heard, within a deadline.
    async fn heard(hearing: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(30), hearing.recv())
            .await
            .expect("a notification within 30 s")
            .expect("the listening connection is open")
    }

    /// Runs `statement` (its schema as `{schema}`) on intent `id` outside the ledger, and
    /// checks that it notified nothing: the next notification heard is a mark sent after it
    /// (notifications arrive in the order their transactions committed).
    async fn unheard(
        outside: &tokio_postgres::Client,
        scratch: &Scratch,
        statement: &str,
        id: IntentId,
        hearing: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let statement = statement.replace("{schema}", &scratch.schema);
        assert_eq!(outside.execute(&statement, &[&id]).await.unwrap(), 1);
        let channel = format!("{}_settled", scratch.schema);
        outside
            .execute("SELECT pg_notify($1, 'mark')", &[&channel])
            .await
            .unwrap();
        assert_eq!(heard(hearing).await, "mark", "{statement} notified");
    }

    /// `ledger`'s settled epoch once it is known and differs from `from`, within a deadline:
    /// another process's change arrives as a notification, a moment after its commit.
    async fn epoch_after(ledger: &PostgresLedger, from: Option<u64>) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match ledger.settled_epoch().await {
                Some(epoch) if Some(epoch) != from => return epoch,
                _ => assert!(
                    Instant::now() < deadline,
                    "the settled epoch stayed {from:?} for 30 s"
                ),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What lets a replica answer repeats from memory (`Ledger::settled_epoch`): the schema's
    /// triggers notify every change to a settled intent, and every deletion of one, by
    /// whichever process or statement makes it, and nothing else; the other replicas hear it.
    ///
    /// How it broke before: PostgreSQL had no epoch (every repeat read), and a version that
    /// notified only from its own erasures would miss the CLI of an older version and SQL
    /// typed by hand.
    #[tokio::test]
    async fn changes_to_settled_intents_are_notified_to_every_replica_and_counts_are_not() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let one = scratch.connect(scratch.options()).await;
        let other = scratch.connect(scratch.options()).await;
        let channel = format!("{}_settled", scratch.schema);
        let (outside, mut hearing) = listening(&url, &channel).await;
        let first = epoch_after(&one, None).await;

        // New intents, their finishes and the counts of repeats are not changes.
        let done = settled(&other, "order-1", IntentStatus::Done, T0).await;
        let rejected = settled(&other, "order-2", IntentStatus::Rejected, T0).await;
        let in_flight = started(&other, "order-3", "owner-c", T0).await;
        other.record_calls(vec![(done.id, T0 + 1)]).await.unwrap();
        let count = "UPDATE \"{schema}\".intents SET call_count = call_count + 1 WHERE id = $1";
        unheard(&outside, &scratch, count, rejected.id, &mut hearing).await;
        let marked = epoch_after(&one, Some(first)).await;
        assert_eq!(marked, first + 2, "one notification, the mark, moved it");

        // Another replica's erasure of a settled intent reaches this one.
        let erase = Erase {
            tenant: TENANT.into(),
            tool: Some(TOOL.into()),
            key: Some("order-1".into()),
            force: false,
            actor: "dpo@example.com".into(),
            reason: "erasure request 77".into(),
            now_ms: T0 + 2,
        };
        expect!(Erasure::Erased, other.erase(&erase).await.unwrap());
        assert_eq!(heard(&mut hearing).await, "");
        let erased = epoch_after(&one, Some(marked)).await;

        // A settled intent changed by hand, and one deleted by hand.
        for statement in [
            "UPDATE \"{schema}\".intents SET result = '{\"id\": \"re_9\"}' WHERE id = $1",
            "DELETE FROM \"{schema}\".intents WHERE id = $1",
        ] {
            let statement = statement.replace("{schema}", &scratch.schema);
            let changed = outside.execute(&statement, &[&rejected.id]).await.unwrap();
            assert_eq!(changed, 1, "{statement}");
            assert_eq!(heard(&mut hearing).await, "", "{statement}");
        }
        let by_hand = epoch_after(&one, Some(erased)).await;
        assert!(by_hand > erased);

        // Deleting an intent that never settled is no change to a settled answer either.
        let delete = "DELETE FROM \"{schema}\".intents WHERE id = $1";
        unheard(&outside, &scratch, delete, in_flight.id, &mut hearing).await;
    }

    /// A replica whose listener lost its connection can't tell what it missed: its epoch is
    /// unknown until it listens again, and then a new one, so nothing kept under the old
    /// epoch is answered again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_listener_that_reconnects_starts_a_new_settled_epoch() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        let before = epoch_after(&ledger, None).await;
        let outside = scratch.outside().await;
        let terminated: i64 = outside
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
                 WHERE application_name = $1 AND query LIKE 'LISTEN%') AS ended",
                &[&format!("intentgate:{}", scratch.schema)],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            terminated, 1,
            "the ledger's listening connection was not found"
        );
        let after = epoch_after(&ledger, Some(before)).await;
        assert_ne!(after, before);
    }

    /// The server ended every connection of the ledger (a restart, a failover, an
    /// operator): the next operations open new ones and go on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_ledger_reconnects_after_its_connections_are_terminated() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        let first = started(&ledger, "order-1", "owner-a", T0).await;
        let outside = scratch.outside().await;
        let terminated: i64 = outside
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
                 WHERE application_name = $1) AS ended",
                &[&format!("intentgate:{}", scratch.schema)],
            )
            .await
            .unwrap()
            .get(0);
        assert!(terminated >= 1, "no connection of the ledger was found");

        let read = ledger
            .get_by_id(first.id)
            .await
            .expect("read after termination");
        assert_eq!(read, Some(first.clone()));
        let done = finish(&first, "owner-a", IntentStatus::Done, T0 + 1);
        expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
        started(&ledger, "order-2", "owner-b", T0 + 2).await;
    }

    /// The server refuses one statement of a commit's pipeline (PostgreSQL text can't hold
    /// a NUL character): the whole operation rolls back, the caller gets a storage error, and
    /// the connection serves the next operation.
    #[tokio::test]
    async fn a_write_refused_at_commit_changes_nothing() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(PostgresOptions {
            pool_size: 1,
            ..scratch.options()
        });
        let ledger = ledger.await;
        let intent = started(&ledger, "order-1", "owner-a", T0).await;
        let logged = events(&ledger, &intent).await;
        let refused = Finish {
            external_id: Some("re_\u{0}1".into()),
            ..finish(&intent, "owner-a", IntentStatus::Done, T0 + 1)
        };
        let error = ledger.finish(refused).await.unwrap_err();
        assert!(matches!(error, LedgerError::Storage(_)), "{error:?}");
        assert!(
            error.to_string().contains("nothing was committed"),
            "{error}"
        );
        assert_eq!(read(&ledger, &intent).await, intent);
        assert_eq!(events(&ledger, &intent).await, logged);

        let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 2);
        let done = expect!(Finished::Recorded, ledger.finish(done).await.unwrap());
        assert_eq!(done.status, IntentStatus::Done);
    }

    /// A benchmark drops its schema as soon as its last call is answered: the finishes
    /// queued after those answers commit first, rather than fail on tables that are gone.
    #[tokio::test]
    async fn destroy_waits_for_the_finishes_queued_before_it() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        let mut queued = Vec::new();
        for order in ["order-1", "order-2", "order-3"] {
            let intent = started(&ledger, order, "owner-a", T0).await;
            let done = finish(&intent, "owner-a", IntentStatus::Done, T0 + 1);
            queued.push(ledger.finish_queued(done).await.unwrap());
        }
        ledger.destroy().await.unwrap();
        for finished in queued {
            let recorded = expect!(Finished::Recorded, finished.await.unwrap());
            assert_eq!(recorded.status, IntentStatus::Done);
        }
    }

    /// A server-side failure is a storage error that names the server and says what to
    /// check; the password of the URL appears nowhere.
    #[tokio::test]
    async fn a_dropped_schema_is_a_storage_error_that_says_what_to_check() {
        let Some(url) = database_url() else { return };
        let scratch = Scratch::new(&url);
        let ledger = scratch.connect(scratch.options()).await;
        started(&ledger, "order-1", "owner-a", T0).await;
        ledger.destroy().await.unwrap();
        let error = ledger.get(TENANT, TOOL, "order-1").await.unwrap_err();
        let LedgerError::Storage(message) = &error else {
            panic!("expected a storage error, got {error:?}");
        };
        assert!(message.contains(&scratch.schema), "{message}");
        assert!(message.contains("schema dropped"), "{message}");
        let error = ledger
            .begin(request("order-2", "owner-b", T0))
            .await
            .unwrap_err();
        assert!(matches!(error, LedgerError::Storage(_)), "{error:?}");
    }

    #[tokio::test]
    async fn connecting_to_a_server_that_is_not_there_names_host_and_port_not_the_password() {
        // Port 1 on the loopback: nothing listens there, so the connection is refused.
        let url = "postgres://alice:s3cret-password@127.0.0.1:1/ledger";
        match PostgresLedger::connect(url, PostgresOptions::default()).await {
            Err(error @ LedgerError::Open { .. }) => {
                let message = error.to_string();
                assert!(message.contains("127.0.0.1:1"), "{message}");
                assert!(message.contains("pg_isready"), "{message}");
                assert!(!message.contains("s3cret"), "{message}");
            }
            Err(other) => panic!("expected an open error, got {other:?}"),
            Ok(_) => panic!("connected to a server that is not there"),
        }
        for bad in [
            "postgres://alice:s3cret-password@127.0.0.1:notaport/ledger",
            "postgres://alice:s3cret-password@127.0.0.1:5432/ledger?sslmode=sometimes",
        ] {
            match PostgresLedger::connect(bad, PostgresOptions::default()).await {
                Err(error @ LedgerError::Open { .. }) => {
                    let message = error.to_string();
                    assert!(!message.contains("s3cret"), "{message}");
                    assert!(message.contains("postgres://"), "{message}");
                }
                Err(other) => panic!("expected an open error, got {other:?}"),
                Ok(_) => panic!("connected with a bad URL: {bad}"),
            }
        }
    }

    #[tokio::test]
    async fn options_out_of_range_are_refused_before_anything_is_created() {
        let url = "postgres://alice@127.0.0.1:1/ledger";
        for options in [
            PostgresOptions {
                schema: "Not-A-Schema".into(),
                ..PostgresOptions::default()
            },
            PostgresOptions {
                pool_size: 0,
                ..PostgresOptions::default()
            },
        ] {
            match PostgresLedger::connect(url, options.clone()).await {
                Err(LedgerError::Open { reason, .. }) => {
                    assert!(
                        reason.contains("schema name") || reason.contains("pool size"),
                        "{reason}"
                    );
                }
                Err(other) => panic!("expected an open error, got {other:?}"),
                Ok(_) => panic!("connected with {options:?}"),
            }
        }
    }

    #[tokio::test]
    async fn open_picks_the_store_by_location() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("ledger.db");
        let ledger = intentgate_ledger::open(path.to_str().unwrap(), Durability::Strict)
            .await
            .unwrap();
        started(&*ledger, "order-1", "owner-a", T0).await;
        assert!(path.exists());
        drop(ledger);

        let refused = intentgate_ledger::open(
            "postgresql://alice:s3cret@127.0.0.1:1/ledger",
            Durability::Strict,
        )
        .await;
        match refused {
            Err(error @ LedgerError::Open { .. }) => {
                assert!(error.to_string().contains("127.0.0.1:1"), "{error}")
            }
            Err(other) => panic!("expected an open error, got {other:?}"),
            Ok(_) => panic!("opened a ledger on a server that is not there"),
        }
    }

    /// The migration versions recorded in the schema, with their times.
    async fn applied_migrations(client: &tokio_postgres::Client, schema: &str) -> Vec<(i64, i64)> {
        let rows = client
            .query(
                &format!("SELECT version, applied_ms FROM \"{schema}\".schema_migrations ORDER BY version"),
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|row| (row.get(0), row.get(1))).collect()
    }
}

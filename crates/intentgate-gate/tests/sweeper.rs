//! The sweeper (`Gate::sweep`): expired `in_flight` and `unknown` intents are resolved
//! through the lookup, and re-sent only with their own provider key, only when the tool's
//! upstream replays responses per key and the key window has not passed.
//!
//! Time is tokio's paused clock ([`TokioClock`]), so leases expire and windows pass without
//! sleeping, and the ledger writes inline so that time only moves where a test says.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::key::provider_key;
use intentgate_core::{CallStatus, IntentStatus, KeyTemplate, ToolDefinition, UpstreamObservation};
use intentgate_gate::{
    CallContext, Clock, Gate, GateOptions, LookupOutcome, RESEND_BACKOFF_INITIAL, Resolution,
    SweepReport, TokioClock, Upstream, UpstreamCall,
};
use intentgate_ledger::{Begin, BeginRequest, IntentRecord, Ledger, SqliteLedger, ToolFlag};
use intentgate_mock::{FakeProvider, FaultPlan, Scripted, Shape};
use intentgate_test_support::{TempLedger, call, default_gate, refund, refund_tool};
use serde_json::json;

const KEY: &str = "refund:8812:49.00";
/// The provider key of the intent's first epoch: the only key any request for it carries.
const PROVIDER_KEY: &str = "refund_order:refund:8812:49.00";
const T0: i64 = 1_700_000_000_000;
/// The lease of the executor that dies in these tests.
const DEAD_LEASE: Duration = Duration::from_secs(30);
/// Long enough for that lease to be over.
const PAST_THE_LEASE: Duration = Duration::from_secs(31);
/// Long enough for the next lookup of a young unknown intent to be due.
const PAST_THE_LOOKUP_INTERVAL: Duration = Duration::from_secs(10);
const LIMIT: u32 = 100;

/// The fake provider behind a lookup that lags: the first `lagging` lookups answer "not
/// found" whatever the provider holds (a search index that has not caught up with a write).
/// Every request is recorded with the idempotency key and intent id it carried.
struct Lagging {
    provider: Arc<FakeProvider>,
    lagging: AtomicU32,
    sent: Mutex<Vec<(Option<String>, Option<String>)>>,
}

#[async_trait]
impl Upstream for Lagging {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        self.sent.lock().unwrap().push((
            call.idempotency_key.map(str::to_owned),
            call.intent_id.map(str::to_owned),
        ));
        self.provider.execute(call).await
    }

    async fn lookup(&self, call: UpstreamCall<'_>) -> LookupOutcome {
        let lags = self
            .lagging
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if lags {
            return LookupOutcome::NotFound;
        }
        self.provider.lookup(call).await
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    ledger: Arc<SqliteLedger>,
    provider: Arc<FakeProvider>,
    upstream: Arc<Lagging>,
    gate: Gate,
    clock: Arc<dyn Clock>,
}

impl Setup {
    fn new(tool: ToolDefinition) -> Setup {
        Setup::with_resolution(tool, Resolution::default())
    }

    fn with_resolution(tool: ToolDefinition, resolution: Resolution) -> Setup {
        let TempLedger { dir, ledger, .. } = TempLedger::inline();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(T0));
        let provider = Arc::new(FakeProvider::new(7, FaultPlan::none(), clock.clone()));
        let upstream = Arc::new(Lagging {
            provider: provider.clone(),
            lagging: AtomicU32::new(0),
            sent: Mutex::new(Vec::new()),
        });
        let options = GateOptions {
            backoff_base: Duration::from_millis(5),
            resolution,
            ..GateOptions::default()
        };
        let gate = Gate::new(
            vec![tool],
            ledger.clone(),
            upstream.clone(),
            clock.clone(),
            options,
        )
        .unwrap();
        Setup {
            _dir: dir,
            ledger,
            provider,
            upstream,
            gate,
            clock,
        }
    }

    /// An executor took the lease, wrote `in_flight` and died. With `committed`, its request
    /// reached the provider (with the intent's key) and committed before it died.
    async fn crash_mid_call(&self, committed: bool) -> IntentRecord {
        let arguments = refund("8812", json!(49));
        let now_ms = self.clock.now_ms();
        let request = BeginRequest {
            tenant: "default".into(),
            tool: "refund_order".into(),
            key: KEY.into(),
            fingerprint: intentgate_core::fingerprint(&arguments).as_str().into(),
            arguments: arguments.clone(),
            lease_owner: "dead/1".into(),
            lease_expires_ms: now_ms + DEAD_LEASE.as_millis() as i64,
            now_ms,
            count_call: true,
            retry_rejected: false,
            lookup_interval_ms: 5_000,
            resend_unknown: false,
            expect_new: false,
            policies: None,
        };
        let Begin::Execute(intent) = self.ledger.begin(request).await.unwrap() else {
            panic!("a new intent starts in flight");
        };
        if committed {
            let tool = self.gate.tool("refund_order").unwrap().clone();
            let key = provider_key(&intent.tenant, &intent.tool, &intent.key, intent.epoch);
            let call = UpstreamCall {
                tool: &tool,
                arguments: &arguments,
                idempotency_key: Some(&key),
                intent_key: Some(KEY),
                intent_id: None,
                attempt: intent.attempt,
                timeout: Duration::from_secs(1),
            };
            let answer = self.provider.execute(call).await;
            assert!(matches!(
                answer,
                UpstreamObservation::Response { status: 200, .. }
            ));
        }
        intent
    }

    async fn sweep(&self) -> SweepReport {
        let report = self.gate.sweep(LIMIT).await.unwrap();
        assert_accounted(&report);
        report
    }

    async fn intent(&self) -> IntentRecord {
        self.ledger
            .get("default", "refund_order", KEY)
            .await
            .unwrap()
            .expect("the intent is in the ledger")
    }

    /// The idempotency keys of every request the gate sent.
    fn keys_sent(&self) -> Vec<Option<String>> {
        let sent = self.upstream.sent.lock().unwrap();
        sent.iter().map(|(key, _)| key.clone()).collect()
    }

    /// The intent's attempts as the event log has them: (attempt, when it started).
    async fn attempt_starts(&self) -> Vec<(u32, i64)> {
        let intent = self.intent().await;
        let events = self.ledger.events(intent.id).await.unwrap();
        events
            .iter()
            .filter(|event| event.to_status.as_deref() == Some("in_flight"))
            .map(|event| (event.attempt.unwrap(), event.at_ms))
            .collect()
    }

    /// The provider times out (without committing) the first `n` requests of every key.
    fn first_timeouts(&self, n: u32) {
        self.provider.set_plan(FaultPlan {
            first_timeouts_per_key: n,
            ..FaultPlan::none()
        });
    }
}

/// Every examined intent is counted in exactly one of the report's outcomes.
fn assert_accounted(report: &SweepReport) {
    let outcomes = report.resolved_done
        + report.still_unknown
        + report.settled_otherwise
        + report.skipped_busy
        + report.not_due
        + report.skipped_tool
        + report.errors;
    assert_eq!(outcomes, report.examined, "{report:?}");
}

/// The refund tool, its upstream replaying responses per key for `window`.
fn with_window(window: Duration) -> ToolDefinition {
    let mut tool = refund_tool();
    tool.resend_window = Some(window);
    tool
}

/// The provider's window less an hour, as the config loader sets it for Stripe's 24 hours.
const WINDOW: Duration = Duration::from_secs(23 * 60 * 60);

fn scripted(shape: Shape, commit: bool) -> Scripted {
    Scripted { shape, commit }
}

#[tokio::test(start_paused = true)]
async fn an_expired_in_flight_intent_whose_effect_committed_is_resolved_done_without_a_request() {
    let s = Setup::new(with_window(WINDOW));
    s.crash_mid_call(true).await;
    assert_eq!(s.provider.requests(), 1);

    // While the dead executor's lease lives, the sweeper leaves the intent alone.
    assert_eq!(s.sweep().await, SweepReport::default());

    tokio::time::sleep(PAST_THE_LEASE).await;
    let report = s.sweep().await;
    assert_eq!(
        (
            report.examined,
            report.looked_up,
            report.resolved_done,
            report.resent
        ),
        (1, 1, 1, 0),
        "{report:?}"
    );
    assert_eq!(s.provider.requests(), 1, "no new request to the provider");
    assert_eq!(s.provider.effect_count(KEY), 1);
    let intent = s.intent().await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.resolved_by.as_deref(), Some("sweeper"));
    assert_eq!(intent.external_id.as_deref(), Some("re_000001"));
    assert_eq!(intent.attempt, 1);

    // A user asking again gets the stored answer; nothing is left to sweep.
    let again = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(again.status, CallStatus::AlreadyDone);
    assert_eq!(again.external_id.as_deref(), Some("re_000001"));
    let idle = s.sweep().await;
    assert_eq!(idle.examined, 0);
    assert!(idle.nothing_left(), "{idle:?}");
    assert_eq!(s.provider.requests(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_in_flight_intent_that_did_not_commit_is_re_sent_with_its_key_in_the_window() {
    let s = Setup::new(with_window(WINDOW));
    let crashed = s.crash_mid_call(false).await;
    tokio::time::sleep(PAST_THE_LEASE).await;

    let report = s.sweep().await;
    assert_eq!(
        (report.looked_up, report.resent, report.resolved_done),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(s.keys_sent(), [Some(PROVIDER_KEY.to_owned())]);
    let effects = s.provider.effects();
    assert_eq!(effects.len(), 1, "exactly one effect");
    assert_eq!(effects[0].idempotency_key.as_deref(), Some(PROVIDER_KEY));
    let intent = s.intent().await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.external_id.as_deref(), Some("re_000001"));
    assert_eq!(
        (intent.attempt, intent.epoch),
        (crashed.attempt + 1, crashed.epoch),
        "a new attempt under the same provider key"
    );
    let events = s.ledger.events(intent.id).await.unwrap();
    assert!(
        events.iter().any(|event| event
            .detail
            .as_deref()
            .is_some_and(|detail| detail.contains("with the same provider key"))),
        "{events:#?}"
    );
    assert!(s.sweep().await.nothing_left());
}

#[tokio::test(start_paused = true)]
async fn after_the_window_an_unknown_intent_stays_unknown_and_nothing_is_sent() {
    let s = Setup::new(with_window(Duration::from_secs(60 * 60)));
    s.crash_mid_call(false).await;
    tokio::time::sleep(Duration::from_secs(2 * 60 * 60)).await;

    let report = s.sweep().await;
    assert_eq!(
        (
            report.looked_up,
            report.resent,
            report.still_unknown,
            report.resolved_done
        ),
        (1, 0, 1, 0),
        "{report:?}"
    );
    assert!(report.nothing_left(), "{report:?}");
    assert_eq!(
        (s.provider.requests(), s.provider.effect_count(KEY)),
        (0, 0)
    );
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);
}

/// The window is counted from when the intent was first seen, and the whole re-send (its
/// lease: every timeout and pause of its retries) must end inside it.
#[tokio::test(start_paused = true)]
async fn a_re_send_that_could_end_after_the_window_is_not_started() {
    // The refund tool's lease is 2 s x 3 attempts + 5 s x 2 pauses + 5 s = 21 s.
    let s = Setup::new(with_window(Duration::from_secs(31 + 20)));
    s.crash_mid_call(false).await;
    tokio::time::sleep(PAST_THE_LEASE).await;
    let report = s.sweep().await;
    assert_eq!((report.resent, report.still_unknown), (0, 1), "{report:?}");
    assert_eq!(s.provider.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_tool_without_a_resend_window_leaves_an_unknown_intent_unknown() {
    let s = Setup::new(refund_tool());
    assert_eq!(refund_tool().resend_window, None, "the default");
    s.crash_mid_call(false).await;
    tokio::time::sleep(PAST_THE_LEASE).await;

    let report = s.sweep().await;
    assert_eq!(
        (report.looked_up, report.resent, report.still_unknown),
        (1, 0, 1),
        "{report:?}"
    );
    assert_eq!(s.provider.requests(), 0);
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);

    // At once again: the lookup is not due, and nothing is asked.
    let report = s.sweep().await;
    assert_eq!((report.not_due, report.looked_up), (1, 0), "{report:?}");
    assert_eq!(s.provider.lookups(), 1);

    // Later it is looked up again, and still never sent.
    tokio::time::sleep(PAST_THE_LOOKUP_INTERVAL).await;
    let report = s.sweep().await;
    assert_eq!((report.looked_up, report.resent), (1, 0), "{report:?}");
    assert_eq!((s.provider.requests(), s.provider.lookups()), (0, 2));
}

#[tokio::test(start_paused = true)]
async fn a_failed_lookup_never_leads_to_a_re_send() {
    let s = Setup::new(with_window(WINDOW));
    s.crash_mid_call(false).await;
    tokio::time::sleep(PAST_THE_LEASE).await;
    s.provider.script_lookups([false]);

    let report = s.sweep().await;
    assert_eq!(
        (
            report.looked_up,
            report.lookup_failed,
            report.resent,
            report.still_unknown
        ),
        (1, 1, 0, 1),
        "{report:?}"
    );
    assert!(
        !report.nothing_left(),
        "a failed lookup is worth asking again"
    );
    assert_eq!(s.provider.requests(), 0, "a failed lookup proves nothing");
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);

    // Once the provider answers "not found", the re-send goes out: it was only the failure.
    tokio::time::sleep(PAST_THE_LOOKUP_INTERVAL).await;
    let report = s.sweep().await;
    assert_eq!((report.resent, report.resolved_done), (1, 1), "{report:?}");
    assert_eq!(s.provider.effect_count(KEY), 1);
}

/// The provider's lookup lags behind its writes: it said "not found" while the first
/// attempt's effect existed. The re-send carries the same key, so the provider replays the
/// stored success instead of refunding again.
#[tokio::test(start_paused = true)]
async fn a_re_send_of_an_effect_the_lookup_missed_gets_the_replay_and_makes_no_second_effect() {
    let s = Setup::new(with_window(WINDOW));
    // The connection drops after the provider committed; the gate's own lookup and the
    // sweeper's both miss the effect.
    s.provider.script([scripted(Shape::Dropped, true)]);
    s.upstream.lagging.store(2, Ordering::Relaxed);
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown);
    assert_eq!(s.provider.effect_count(KEY), 1, "the effect exists");
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);

    tokio::time::sleep(PAST_THE_LOOKUP_INTERVAL).await;
    let report = s.sweep().await;
    assert_eq!(
        (report.looked_up, report.resent, report.resolved_done),
        (1, 1, 1),
        "{report:?}"
    );
    assert_eq!(s.upstream.lagging.load(Ordering::Relaxed), 0);
    assert_eq!(
        s.keys_sent(),
        [Some(PROVIDER_KEY.to_owned()), Some(PROVIDER_KEY.to_owned())]
    );
    assert_eq!(s.provider.requests(), 2);
    assert_eq!(s.provider.effect_count(KEY), 1, "exactly one effect");
    let intent = s.intent().await;
    assert_eq!(intent.status, IntentStatus::Done);
    assert_eq!(intent.external_id.as_deref(), Some("re_000001"));
}

/// A re-send the provider did not process (rate limited until the retries ran out) says
/// nothing about the attempt it repeats: the intent stays unknown, never `not_executed`
/// (which would let a later call start afresh after the provider forgot the key).
#[tokio::test(start_paused = true)]
async fn a_re_send_that_was_not_processed_leaves_the_intent_unknown() {
    let s = Setup::new(with_window(WINDOW));
    s.crash_mid_call(false).await;
    tokio::time::sleep(PAST_THE_LEASE).await;
    s.provider.script([
        scripted(Shape::RateLimited, false),
        scripted(Shape::RateLimited, false),
        scripted(Shape::RateLimited, false),
    ]);

    let report = s.sweep().await;
    assert_eq!(
        (report.resent, report.still_unknown, report.resolved_done),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(s.provider.requests(), 3, "one request and its two retries");
    let intent = s.intent().await;
    assert_eq!((intent.status, intent.attempt), (IntentStatus::Unknown, 2));
    assert_eq!(intent.lease_owner, None);

    tokio::time::sleep(PAST_THE_LOOKUP_INTERVAL).await;
    let report = s.sweep().await;
    assert_eq!((report.resent, report.resolved_done), (1, 1), "{report:?}");
    let intent = s.intent().await;
    assert_eq!(
        (intent.status, intent.attempt, intent.epoch),
        (IntentStatus::Done, 3, 1)
    );
    assert_eq!(s.provider.effect_count(KEY), 1);
    assert!(
        s.keys_sent()
            .iter()
            .all(|key| key.as_deref() == Some(PROVIDER_KEY))
    );
}

#[tokio::test(start_paused = true)]
async fn a_switched_off_tool_is_looked_up_but_never_re_sent() {
    let s = Setup::new(with_window(WINDOW));
    s.crash_mid_call(false).await;
    let flag = ToolFlag {
        tool: "refund_order".into(),
        enabled: false,
        reason: "incident".into(),
        actor: "ops".into(),
        updated_ms: T0,
    };
    s.ledger.set_tool_flag(flag).await.unwrap();
    tokio::time::sleep(PAST_THE_LEASE).await;
    let report = s.sweep().await;
    assert_eq!(
        (report.looked_up, report.resent, report.still_unknown),
        (1, 0, 1),
        "{report:?}"
    );
    assert_eq!(s.provider.requests(), 0);
}

/// The ledger keeps the key, not the application's intent id; for a tool keyed on
/// `{intent_id}` the sweeper recovers the id from the key and sends the request as the
/// first attempt did.
#[tokio::test(start_paused = true)]
async fn a_re_send_of_a_tool_keyed_on_the_intent_id_carries_the_same_intent_id() {
    let mut tool = with_window(WINDOW);
    tool.key = Some(KeyTemplate::parse("refund:{order_id}:{intent_id}").unwrap());
    let s = Setup::new(tool);
    s.provider.script([scripted(Shape::Timeout, false)]);
    let context = CallContext {
        tenant: "default".into(),
        intent_id: Some("int 7/a".into()),
        explicit_key: None,
        ..CallContext::default()
    };
    let first = s
        .gate
        .call("refund_order", refund("8812", json!(49)), &context)
        .await
        .unwrap();
    assert_eq!(first.status, CallStatus::PendingUnknown);
    let key = first.intent_key.unwrap();
    assert_eq!(key, "refund:8812:int%207%2Fa");

    tokio::time::sleep(PAST_THE_LOOKUP_INTERVAL).await;
    let report = s.sweep().await;
    assert_eq!((report.resent, report.resolved_done), (1, 1), "{report:?}");
    let sent = s.upstream.sent.lock().unwrap().clone();
    let expected_key = provider_key("default", "refund_order", &key, 1);
    assert_eq!(
        sent,
        [
            (Some(expected_key.clone()), Some("int 7/a".to_owned())),
            (Some(expected_key), Some("int 7/a".to_owned())),
        ]
    );
    assert_eq!(s.provider.effect_count(&key), 1);
}

#[tokio::test(start_paused = true)]
async fn intents_of_tools_the_gate_does_not_have_are_left_alone() {
    let s = Setup::new(with_window(WINDOW));
    s.crash_mid_call(false).await;
    // Another gate on the same ledger, without the refund tool.
    let other = default_gate(
        vec![intentgate_test_support::get_order_tool(
            Duration::from_secs(1),
        )],
        s.ledger.clone(),
        s.upstream.clone(),
        s.clock.clone(),
    );
    tokio::time::sleep(PAST_THE_LEASE).await;
    let report = other.sweep(LIMIT).await.unwrap();
    assert_accounted(&report);
    assert_eq!((report.examined, report.skipped_tool), (1, 1), "{report:?}");
    assert_eq!(s.intent().await.status, IntentStatus::InFlight);
    assert_eq!((s.provider.requests(), s.provider.lookups()), (0, 0));
}

/// The first call of an intent whose first requests time out without committing: the
/// caller is told it is being confirmed.
async fn first_call_times_out(s: &Setup) {
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_re_sends_an_unknown_intent_with_growing_pauses_until_the_provider_answers() {
    let s = Setup::new(with_window(WINDOW));
    s.first_timeouts(3);
    first_call_times_out(&s).await;

    // Step by step, a quarter second apart: each re-send waits its backoff after the lookup
    // that ended the attempt before it.
    let mut sweeps = 0;
    while s.intent().await.status != IntentStatus::Done {
        sweeps += 1;
        assert!(sweeps < 200, "not done after {sweeps} sweeps");
        s.sweep().await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let starts = s.attempt_starts().await;
    assert_eq!(
        starts
            .iter()
            .map(|(attempt, _)| *attempt)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4],
        "three timed-out attempts, then the one the provider answered"
    );
    for (n, pair) in starts.windows(2).enumerate() {
        let gap_ms = pair[1].1 - pair[0].1;
        let backoff_ms = RESEND_BACKOFF_INITIAL.as_millis() as i64 * (1 << n);
        assert!(
            gap_ms >= backoff_ms,
            "attempt {} came {gap_ms} ms after the one before",
            pair[1].0
        );
    }
    assert_eq!(
        s.keys_sent(),
        vec![Some(PROVIDER_KEY.to_owned()); 4],
        "every attempt under the intent's one provider key"
    );
    assert_eq!(s.provider.effects().len(), 1, "exactly one effect");
    assert!(s.sweep().await.nothing_left());
}

#[tokio::test(start_paused = true)]
async fn a_repeat_call_of_an_unknown_intent_runs_its_due_step_and_answers_with_the_result() {
    let s = Setup::new(with_window(WINDOW));
    s.first_timeouts(1);
    first_call_times_out(&s).await;
    let sent = s.keys_sent().len();

    // Before the backoff has passed, a repeat is answered from the ledger: nothing is sent.
    let early = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(early.status, CallStatus::PendingUnknown);
    assert_eq!(
        s.keys_sent().len(),
        sent,
        "no request before the step is due"
    );

    // Once it has, the repeat looks the intent up, re-sends it with its key and answers.
    tokio::time::sleep(RESEND_BACKOFF_INITIAL).await;
    let repeat = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert!(
        matches!(repeat.status, CallStatus::Done | CallStatus::AlreadyDone),
        "{repeat:?}"
    );
    assert_eq!(s.keys_sent(), vec![Some(PROVIDER_KEY.to_owned()); 2]);
    assert_eq!(s.provider.effects().len(), 1);
    assert_eq!(s.intent().await.status, IntentStatus::Done);
}

#[tokio::test(start_paused = true)]
async fn re_sends_beyond_a_tools_rate_wait_for_a_later_step() {
    let resolution = Resolution {
        resends_per_second: 1,
        ..Resolution::default()
    };
    let s = Setup::with_resolution(with_window(WINDOW), resolution);
    s.first_timeouts(1);
    for order in ["8812", "8813", "8814"] {
        let first = call(&s.gate, "refund_order", refund(order, json!(49))).await;
        assert_eq!(first.status, CallStatus::PendingUnknown);
    }
    tokio::time::sleep(RESEND_BACKOFF_INITIAL).await;
    let report = s.sweep().await;
    assert_eq!(
        (report.resent, report.resends_deferred),
        (1, 2),
        "{report:?}"
    );
    let mut sweeps = 0;
    while s.provider.effects().len() < 3 {
        sweeps += 1;
        assert!(sweeps < 100, "not all re-sent after {sweeps} sweeps");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let report = s.sweep().await;
        assert!(report.resent <= 1, "one re-send a second: {report:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_re_sends_turned_off_an_unknown_intent_is_only_looked_up() {
    let resolution = Resolution {
        resends_per_second: 0,
        ..Resolution::default()
    };
    let s = Setup::with_resolution(with_window(WINDOW), resolution);
    s.first_timeouts(1);
    first_call_times_out(&s).await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let report = s.sweep().await;
        assert_eq!(report.resent, 0, "{report:?}");
        let repeat = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
        assert_eq!(repeat.status, CallStatus::PendingUnknown);
    }
    assert_eq!(
        s.keys_sent().len(),
        1,
        "only the first attempt was ever sent"
    );
    assert!(s.provider.lookups() > 2, "but the intent is looked up");
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);
}

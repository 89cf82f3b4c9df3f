//! Stripe's answers, as the gate acts on them: a stored 5xx replayed for the key
//! (`Idempotent-Replayed: true`) and a 5xx the provider says not to retry stop the intent's
//! same-key re-sends for good, while lookups go on; a 400 `idempotency_error` is no
//! rejection, is never re-sent and is told to the owner; a `card_error` is a rejection with
//! Stripe's message; a 429 with `Stripe-Should-Retry: false` is not retried within the call.
//!
//! Time is tokio's paused clock ([`TokioClock`]), so a simulated day passes without sleeping,
//! and the sweeps follow the cadence of the gateway's own sweep loop.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::{
    CallStatus, IntentStatus, ProviderSignals, ResendStop, ToolDefinition, UpstreamObservation,
};
use intentgate_gate::{
    Clock, Gate, GateOptions, LookupOutcome, TokioClock, Upstream, UpstreamCall,
};
use intentgate_ledger::{IntentRecord, Ledger, SqliteLedger};
use intentgate_test_support::{TempLedger, call, refund, refund_tool};
use serde_json::{Value, json};

const KEY: &str = "refund:8812:49.00";
const T0: i64 = 1_700_000_000_000;
const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// The provider's window less an hour, as the config loader sets it for Stripe's 24 hours.
const WINDOW: Duration = Duration::from_secs(23 * 60 * 60);
/// The gateway's sweep loop (`intentgate_runtime::SWEEP_EVERY`, `SWEEP_PAUSE_MIN`): the next
/// sweep comes when the next step is due, at least this soon and at most this late.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
const SWEEP_PAUSE_MIN: Duration = Duration::from_millis(250);

/// What the provider answers a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Stripe's key layer over a failing API: the first request of a key gets a 500, which
    /// is stored; every later one gets it replayed (with `Idempotent-Replayed: true` when
    /// `headers`, as Stripe sends it; without, as a provider that says nothing would).
    StoredServerError { headers: bool },
    /// A 500 with `Stripe-Should-Retry: false`.
    ServerErrorNoRetry,
    /// 400 `idempotency_error`: the key was first used with other parameters.
    KeyReused,
    /// 402 `card_error`.
    CardDeclined,
    /// 429 with `Stripe-Should-Retry: false`.
    RateLimitedNoRetry,
}

/// A provider that answers every request with `answer` and whose lookups never find the
/// effect (the stored 500 came before anything committed). Counts what it is asked.
struct Stripe {
    answer: Answer,
    keys_seen: Mutex<HashSet<String>>,
    requests: AtomicU32,
    lookups: AtomicU32,
}

impl Stripe {
    fn new(answer: Answer) -> Arc<Stripe> {
        Arc::new(Stripe {
            answer,
            keys_seen: Mutex::new(HashSet::new()),
            requests: AtomicU32::new(0),
            lookups: AtomicU32::new(0),
        })
    }

    fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    fn lookups(&self) -> u32 {
        self.lookups.load(Ordering::Relaxed)
    }
}

fn stripe_error(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "message": message}})
}

#[async_trait]
impl Upstream for Stripe {
    async fn execute(&self, call: UpstreamCall<'_>) -> UpstreamObservation {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let key = call.idempotency_key.expect("a side effect carries its key");
        let first = self.keys_seen.lock().unwrap().insert(key.to_owned());
        let with = |status, body, signals| UpstreamObservation::Response {
            status,
            retry_after_ms: None,
            body,
            signals,
        };
        match self.answer {
            Answer::StoredServerError { headers } => with(
                500,
                stripe_error("api_error", "Sorry, something went wrong."),
                ProviderSignals {
                    replayed: !first && headers,
                    should_retry: None,
                },
            ),
            Answer::ServerErrorNoRetry => with(
                500,
                stripe_error("api_error", "Sorry, something went wrong."),
                ProviderSignals {
                    replayed: false,
                    should_retry: Some(false),
                },
            ),
            Answer::KeyReused => UpstreamObservation::response(
                400,
                stripe_error(
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters \
                     they were first used with.",
                ),
            ),
            Answer::CardDeclined => UpstreamObservation::response(
                402,
                stripe_error("card_error", "Your card was declined."),
            ),
            Answer::RateLimitedNoRetry => with(
                429,
                stripe_error("rate_limit_error", "Too many requests."),
                ProviderSignals {
                    replayed: false,
                    should_retry: Some(false),
                },
            ),
        }
    }

    async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        LookupOutcome::NotFound
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    ledger: Arc<SqliteLedger>,
    stripe: Arc<Stripe>,
    gate: Gate,
    clock: Arc<dyn Clock>,
}

impl Setup {
    fn new(answer: Answer) -> Setup {
        let TempLedger { dir, ledger, .. } = TempLedger::inline();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(T0));
        let stripe = Stripe::new(answer);
        let mut tool: ToolDefinition = refund_tool();
        tool.resend_window = Some(WINDOW);
        let options = GateOptions {
            backoff_base: Duration::from_millis(5),
            ..GateOptions::default()
        };
        let gate = Gate::new(
            vec![tool],
            ledger.clone(),
            stripe.clone(),
            clock.clone(),
            options,
        )
        .unwrap();
        Setup {
            _dir: dir,
            ledger,
            stripe,
            gate,
            clock,
        }
    }

    async fn intent(&self) -> IntentRecord {
        self.ledger
            .get("default", "refund_order", KEY)
            .await
            .unwrap()
            .expect("the intent is in the ledger")
    }

    /// Sweeps as the gateway's sweep loop does until `until_ms`, with a repeat call of the
    /// intent every `repeat_every` (a user asking "did it go through?").
    async fn run_until(&self, until_ms: i64, repeat_every: Option<Duration>) {
        let mut next_repeat_ms = repeat_every.map(|every| self.clock.now_ms() + millis(every));
        while self.clock.now_ms() < until_ms {
            let report = self.gate.sweep(100).await.unwrap();
            let now_ms = self.clock.now_ms();
            if let (Some(due_ms), Some(every)) = (next_repeat_ms, repeat_every)
                && due_ms <= now_ms
            {
                let outcome = call(&self.gate, "refund_order", refund("8812", json!(49))).await;
                assert_eq!(outcome.status, CallStatus::PendingUnknown, "{outcome:?}");
                next_repeat_ms = Some(now_ms + millis(every));
            }
            let pause_ms = report
                .next_due_ms
                .map_or(millis(SWEEP_EVERY), |due_ms| due_ms - now_ms)
                .clamp(millis(SWEEP_PAUSE_MIN), millis(SWEEP_EVERY));
            tokio::time::sleep(Duration::from_millis(pause_ms as u64)).await;
        }
    }
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis() as i64
}

/// Stripe stores a key's first 500 and replays it for the key's whole window. Before, every
/// backoff step re-sent the key (up to every 5 minutes for the window's 23 hours, about 276
/// requests a day, each getting the same replayed 500). Now the first replay stops the
/// re-sends for good: the sweeper and repeat calls only look the intent up, on the lookup
/// schedule (a tenth of its age, at most hourly).
#[tokio::test(start_paused = true)]
async fn a_replayed_500_stops_re_sends_for_good_while_lookups_go_on() {
    let s = Setup::new(Answer::StoredServerError { headers: true });
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
    assert_eq!(
        s.intent().await.resend_stopped,
        None,
        "a first 500 may pass"
    );

    // The first day: the sweeper, and the user asking every half hour.
    s.run_until(T0 + millis(DAY), Some(Duration::from_secs(30 * 60)))
        .await;
    let intent = s.intent().await;
    assert_eq!(intent.status, IntentStatus::Unknown);
    assert_eq!(intent.resend_stopped, Some(ResendStop::ReplayedServerError));
    assert_eq!(
        s.stripe.requests(),
        2,
        "the first attempt, and the one re-send that got the replay"
    );
    assert_eq!(intent.attempt, 2);
    let first_day_lookups = s.stripe.lookups();
    // Every lookup of the first day: each few seconds while the intent is young, then a
    // tenth of its age, then hourly; plus the repeats' own when due.
    assert!(
        (40..=150).contains(&first_day_lookups),
        "{first_day_lookups} lookups on the first day"
    );

    // The second day, the sweeper alone: one lookup an hour, and nothing sent.
    s.run_until(T0 + 2 * millis(DAY), None).await;
    let second_day_lookups = s.stripe.lookups() - first_day_lookups;
    assert!(
        (24..=25).contains(&second_day_lookups),
        "{second_day_lookups} lookups on the second day"
    );
    assert_eq!(s.stripe.requests(), 2, "never re-sent again");
    println!(
        "stored 500, replay header read: day 1: {} sends, {first_day_lookups} lookups \
         (repeats every 30 min); day 2: 0 sends, {second_day_lookups} lookups",
        s.stripe.requests()
    );

    // The event log says why the re-sends stopped, on the attempt that got the replay.
    let events = s.ledger.events(intent.id).await.unwrap();
    let stopped: Vec<&str> = events
        .iter()
        .filter_map(|event| event.detail.as_deref())
        .filter(|detail| detail.contains("re-sends stopped"))
        .collect();
    assert_eq!(stopped.len(), 1, "{events:#?}");
    assert!(
        stopped[0].contains("replays a stored server error"),
        "{}",
        stopped[0]
    );
    let metrics = s.gate.metrics().encode();
    assert!(
        metrics.contains(
            "intentgate_resends_stopped_total{tool=\"refund_order\",reason=\"replayed_server_error\"} 1"
        ),
        "{metrics}"
    );
}

/// The same provider without the replay header: the gateway can't tell a replay from a new
/// failure, so it re-sends on the backoff schedule for the whole window, as it did for
/// Stripe before. This is the cost the header saves.
#[tokio::test(start_paused = true)]
async fn without_the_replay_header_a_stored_500_is_re_sent_through_the_window() {
    let s = Setup::new(Answer::StoredServerError { headers: false });
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
    s.run_until(T0 + millis(DAY), None).await;
    assert_eq!(s.intent().await.resend_stopped, None);
    // Up to every 5 minutes for 23 hours (276), plus the first steps' shorter pauses; each
    // re-send looked up after its 500 and before the next: about 850 provider requests.
    let requests = s.stripe.requests();
    assert!(
        (276..=300).contains(&requests),
        "{requests} requests in a day"
    );
    let lookups = s.stripe.lookups();
    assert!(
        (2 * 276..=2 * 300).contains(&lookups),
        "{lookups} lookups in a day"
    );
    println!("stored 500, no replay header: day 1: {requests} sends, {lookups} lookups");
}

#[tokio::test(start_paused = true)]
async fn a_500_the_provider_says_not_to_retry_stops_re_sends() {
    let s = Setup::new(Answer::ServerErrorNoRetry);
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
    assert_eq!(
        s.intent().await.resend_stopped,
        Some(ResendStop::ProviderSaysNoRetry)
    );
    s.run_until(T0 + 60 * 60 * 1000, None).await;
    assert_eq!(s.stripe.requests(), 1, "never re-sent");
    assert!(s.stripe.lookups() > 1, "looked up on its schedule");
}

/// A 400 `idempotency_error` means two different requests share a key: nothing new
/// happened, but the key's first request may have acted. Not a rejection (the customer's
/// request was not refused), never re-sent, and the owner is told.
#[tokio::test(start_paused = true)]
async fn an_idempotency_error_is_no_rejection_is_never_re_sent_and_is_told() {
    let s = Setup::new(Answer::KeyReused);
    let mut reuses = s.gate.key_reuses();
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::PendingUnknown, "{first:?}");
    let intent = s.intent().await;
    assert_eq!(intent.status, IntentStatus::Unknown);
    assert_eq!(intent.resend_stopped, Some(ResendStop::KeyReused));

    let told = reuses.try_recv().expect("the owner's notice is sent");
    assert_eq!(
        (told.tool.as_str(), told.intent_key.as_str(), told.intent_id),
        ("refund_order", KEY, intent.id)
    );
    assert!(
        told.provider_message.contains("same parameters"),
        "{told:?}"
    );
    assert!(reuses.try_recv().is_err(), "told once");

    s.run_until(T0 + 2 * 60 * 60 * 1000, Some(Duration::from_secs(10 * 60)))
        .await;
    assert_eq!(s.stripe.requests(), 1, "never re-sent");
    assert_eq!(s.intent().await.status, IntentStatus::Unknown);
    let metrics = s.gate.metrics().encode();
    assert!(
        metrics.contains(
            "intentgate_resends_stopped_total{tool=\"refund_order\",reason=\"key_reused\"} 1"
        ),
        "{metrics}"
    );
}

/// A declined card is the provider's refusal: `rejected`, and the model is told Stripe's
/// reason, on the call and on every repeat.
#[tokio::test(start_paused = true)]
async fn a_card_error_is_rejected_with_stripes_message_for_the_model() {
    let s = Setup::new(Answer::CardDeclined);
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::Rejected, "{first:?}");
    assert!(
        first.message.contains("Your card was declined."),
        "{}",
        first.message
    );
    let repeat = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(repeat.status, CallStatus::Rejected, "{repeat:?}");
    assert!(
        repeat.message.contains("Your card was declined."),
        "{}",
        repeat.message
    );
    assert_eq!(s.stripe.requests(), 1);
}

/// A 429 the provider says not to retry ends the call `not_executed` at once: the tool's
/// retries within the call are not spent on it.
#[tokio::test(start_paused = true)]
async fn a_429_the_provider_says_not_to_retry_is_not_retried_within_the_call() {
    let s = Setup::new(Answer::RateLimitedNoRetry);
    let first = call(&s.gate, "refund_order", refund("8812", json!(49))).await;
    assert_eq!(first.status, CallStatus::NotExecuted, "{first:?}");
    assert_eq!(s.stripe.requests(), 1, "no retry within the call");
    assert_eq!(s.intent().await.status, IntentStatus::NotExecuted);
}

//! A gateway process killed with SIGKILL in the middle of a call leaves its intent in the
//! SQLite file as `in_flight`, which becomes `unknown` and is resolved by the lookup; it is
//! never lost and never executed again.
//!
//! The test re-runs its own binary as the child process: the child opens the ledger with
//! strict durability, calls a side-effecting tool whose upstream signals that the request
//! has left and then hangs, and the parent kills it at that moment.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use intentgate_core::{CallStatus, IntentStatus, UpstreamObservation};
use intentgate_gate::{Clock, LookupOutcome, SystemClock, Upstream, UpstreamCall};
use intentgate_ledger::{Durability, Ledger, SqliteLedger, SqliteOptions};
use intentgate_mock::{FakeProvider, FaultPlan};
use intentgate_test_support::{call, default_gate, refund, refund_tool};
use serde_json::json;

const CHILD: &str = "INTENTGATE_CRASH_CHILD_DIR";
const TEST_NAME: &str = "a_sigkill_in_the_middle_of_a_call_leaves_the_intent_in_flight_never_lost";
/// The longest the parent waits for the child to reach the upstream call.
const CHILD_START_MAX: Duration = Duration::from_secs(60);

/// An upstream that marks the moment the request has left, then never answers.
struct Hangs {
    marker: std::path::PathBuf,
}

#[async_trait]
impl Upstream for Hangs {
    async fn execute(&self, _call: UpstreamCall<'_>) -> UpstreamObservation {
        std::fs::write(&self.marker, b"sent").unwrap();
        std::future::pending().await
    }
    async fn lookup(&self, _call: UpstreamCall<'_>) -> LookupOutcome {
        LookupOutcome::Failed("the child never looks up".into())
    }
}

fn child(dir: &std::path::Path) -> ! {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ledger =
            Arc::new(SqliteLedger::open(dir.join("ledger.db"), SqliteOptions::default()).unwrap());
        assert_eq!(ledger.durability(), Durability::Strict);
        let upstream = Arc::new(Hangs {
            marker: dir.join("sent"),
        });
        let gate = default_gate(vec![refund_tool()], ledger, upstream, Arc::new(SystemClock));
        call(&gate, "refund_order", refund("8812", json!(49))).await;
    });
    unreachable!("the upstream never answers");
}

/// The wall clock, moved forward past every lease.
struct Later(i64);

impl Clock for Later {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.0
    }
}

#[test]
fn a_sigkill_in_the_middle_of_a_call_leaves_the_intent_in_flight_never_lost() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(std::path::Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !dir.path().join("sent").exists() {
        assert!(
            started.elapsed() < CHILD_START_MAX,
            "the child never reached the upstream call"
        );
        assert!(
            process.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    process.kill().unwrap(); // SIGKILL: no destructor, no flush, no goodbye.
    process.wait().unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ledger = Arc::new(
            SqliteLedger::open(dir.path().join("ledger.db"), SqliteOptions::default()).unwrap(),
        );
        let key = "refund:8812:49.00";
        let intent = ledger
            .get("default", "refund_order", key)
            .await
            .unwrap()
            .expect("the intent survived the kill");
        assert_eq!(intent.status, IntentStatus::InFlight);
        assert_eq!(intent.attempt, 1);
        assert!(intent.lease_owner.is_some() && intent.lease_expires_ms.is_some());

        // A new gate, once the lease has expired: the intent is unknown, looked up, and the
        // provider is asked to look, never to execute.
        let clock: Arc<dyn Clock> = Arc::new(Later(60 * 60 * 1000));
        let provider = Arc::new(FakeProvider::new(1, FaultPlan::none(), clock.clone()));
        let gate = default_gate(vec![refund_tool()], ledger.clone(), provider.clone(), clock);
        let outcome = call(&gate, "refund_order", refund("8812", json!(49))).await;
        assert_eq!(outcome.status, CallStatus::PendingUnknown);
        assert_eq!((provider.requests(), provider.lookups()), (0, 1));
        let intent = ledger
            .get("default", "refund_order", key)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(intent.status, IntentStatus::Unknown);
        let kinds: Vec<String> = ledger
            .events(intent.id)
            .await
            .unwrap()
            .into_iter()
            .map(|event| event.kind)
            .collect();
        assert_eq!(kinds[..2], ["created".to_owned(), "transition".to_owned()]);
    });
}

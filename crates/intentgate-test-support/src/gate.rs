//! A gate over a temporary SQLite ledger and the fake provider (`Harness`), and one call
//! through any gate with the default context (`call`).

use std::sync::Arc;
use std::time::Duration;

use intentgate_core::ToolDefinition;
use intentgate_gate::{CallContext, CallOutcome, Clock, Gate, GateOptions, SystemClock, Upstream};
use intentgate_ledger::{IntentRecord, Ledger, SqliteLedger};
use intentgate_mock::{FakeProvider, FaultPlan};
use serde_json::Value;

use crate::ledger::TempLedger;
use crate::tools::{get_order_tool, refund_tool};

/// The outcome of calling `tool` with `arguments` through `gate`, as the default tenant.
pub async fn call(gate: &Gate, tool: &str, arguments: Value) -> CallOutcome {
    gate.call(tool, arguments, &CallContext::default())
        .await
        .unwrap()
}

/// A gate of `tools` with the default options.
pub fn default_gate(
    tools: Vec<ToolDefinition>,
    ledger: Arc<dyn Ledger>,
    upstream: Arc<dyn Upstream>,
    clock: Arc<dyn Clock>,
) -> Gate {
    Gate::new(tools, ledger, upstream, clock, GateOptions::default()).unwrap()
}

/// What a [`Harness`] is built from.
pub struct HarnessOptions {
    pub tools: Vec<ToolDefinition>,
    pub plan: FaultPlan,
    /// The fake provider's seed: it draws the faults of `plan`.
    pub seed: u64,
    pub clock: Arc<dyn Clock>,
    pub gate: GateOptions,
}

impl HarnessOptions {
    /// `tools` over a provider with no faults, seed 7, the system clock and the default gate
    /// options.
    pub fn new(tools: Vec<ToolDefinition>) -> HarnessOptions {
        HarnessOptions {
            tools,
            plan: FaultPlan::none(),
            seed: 7,
            clock: Arc::new(SystemClock),
            gate: GateOptions::default(),
        }
    }
}

/// A gate with a real SQLite ledger (writer thread, relaxed durability) in a temporary folder
/// and the in-process fake provider as its upstream.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub ledger: Arc<SqliteLedger>,
    pub provider: Arc<FakeProvider>,
    pub gate: Arc<Gate>,
    pub clock: Arc<dyn Clock>,
}

impl Harness {
    /// `refund_order` and `get_order` with the provider's `plan`, on the system clock.
    pub fn new(plan: FaultPlan) -> Harness {
        Harness::with_tools(
            plan,
            vec![refund_tool(), get_order_tool(Duration::from_secs(1))],
            Arc::new(SystemClock),
        )
    }

    /// `tools` with the provider's `plan` on `clock`, retrying after 5 ms rather than the
    /// default backoff, so that tests of retries stay fast.
    pub fn with_tools(
        plan: FaultPlan,
        tools: Vec<ToolDefinition>,
        clock: Arc<dyn Clock>,
    ) -> Harness {
        Harness::build(HarnessOptions {
            plan,
            clock,
            gate: GateOptions {
                backoff_base: Duration::from_millis(5),
                ..GateOptions::default()
            },
            ..HarnessOptions::new(tools)
        })
    }

    pub fn build(options: HarnessOptions) -> Harness {
        let TempLedger { dir, ledger, .. } = TempLedger::new();
        let provider = Arc::new(FakeProvider::new(
            options.seed,
            options.plan,
            options.clock.clone(),
        ));
        let gate = Arc::new(
            Gate::new(
                options.tools,
                ledger.clone(),
                provider.clone(),
                options.clock.clone(),
                options.gate,
            )
            .unwrap(),
        );
        Harness {
            dir,
            ledger,
            provider,
            gate,
            clock: options.clock,
        }
    }

    /// The ledger's file.
    pub fn ledger_path(&self) -> std::path::PathBuf {
        self.dir.path().join("ledger.db")
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> CallOutcome {
        call(&self.gate, tool, arguments).await
    }

    /// The call of `tool` with `arguments` in a task of its own, for calls that overlap.
    pub fn spawn_call(&self, tool: &str, arguments: Value) -> tokio::task::JoinHandle<CallOutcome> {
        let gate = self.gate.clone();
        let tool = tool.to_owned();
        tokio::spawn(async move { call(&gate, &tool, arguments).await })
    }

    /// The intent once its call count has reached `calls`: repeats answered from the ledger
    /// are counted in the background, after the answer.
    pub async fn intent_after_calls(&self, key: &str, calls: u64) -> IntentRecord {
        for _ in 0..200 {
            let intent = self.intent(key).await;
            if intent.call_count >= calls {
                return intent;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.intent(key).await
    }

    /// The `refund_order` intent of the default tenant with `key`.
    pub async fn intent(&self, key: &str) -> IntentRecord {
        self.ledger
            .get("default", "refund_order", key)
            .await
            .unwrap()
            .expect("the intent is in the ledger")
    }
}

//! A gate over a real SQLite file and the fake provider, for tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use intentgate_core::{Effect, ToolDefinition};
use intentgate_gate::{CallContext, CallOutcome, Clock, Gate, GateOptions, SystemClock};
use intentgate_ledger::{Durability, Ledger, SqliteLedger, SqliteOptions};
use intentgate_mock::{FakeProvider, FaultPlan};
use serde_json::{Value, json};

pub fn refund_tool() -> ToolDefinition {
    let schema = json!({
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount": {"type": ["number", "string"]}},
        "required": ["order_id", "amount"],
        "additionalProperties": false
    });
    ToolDefinition::new(
        "refund_order",
        "Refund an order.",
        Effect::SideEffect,
        schema,
        Some("refund:{order_id}:{amount:.2}"),
        Duration::from_secs(2),
        2,
    )
    .unwrap()
}

pub fn get_order_tool() -> ToolDefinition {
    let schema = json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
    ToolDefinition::new(
        "get_order",
        "Get an order.",
        Effect::Read,
        schema,
        None,
        Duration::from_secs(1),
        2,
    )
    .unwrap()
}

pub fn refund(order: &str, amount: Value) -> Value {
    json!({"order_id": order, "amount": amount})
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub ledger: Arc<SqliteLedger>,
    pub provider: Arc<FakeProvider>,
    pub gate: Arc<Gate>,
    pub clock: Arc<dyn Clock>,
}

impl Harness {
    pub fn new(plan: FaultPlan) -> Harness {
        Harness::with_tools(
            plan,
            vec![refund_tool(), get_order_tool()],
            Arc::new(SystemClock),
        )
    }

    pub fn with_tools(
        plan: FaultPlan,
        tools: Vec<ToolDefinition>,
        clock: Arc<dyn Clock>,
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Arc::new(
            SqliteLedger::open(
                dir.path().join("ledger.db"),
                SqliteOptions {
                    durability: Durability::Relaxed,
                    inline: false,
                },
            )
            .unwrap(),
        );
        let provider = Arc::new(FakeProvider::new(7, plan, clock.clone()));
        let options = GateOptions {
            backoff_base: Duration::from_millis(5),
            ..GateOptions::default()
        };
        let gate = Arc::new(
            Gate::new(
                tools,
                ledger.clone(),
                provider.clone(),
                clock.clone(),
                options,
            )
            .unwrap(),
        );
        Harness {
            dir,
            ledger,
            provider,
            gate,
            clock,
        }
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> CallOutcome {
        self.gate
            .call(tool, arguments, &CallContext::default())
            .await
            .unwrap()
    }

    /// The intent once its call count has reached `calls`: repeats answered from the ledger
    /// are counted in the background, after the answer.
    pub async fn intent_after_calls(
        &self,
        key: &str,
        calls: u64,
    ) -> intentgate_ledger::IntentRecord {
        for _ in 0..200 {
            let intent = self.intent(key).await;
            if intent.call_count >= calls {
                return intent;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.intent(key).await
    }

    pub async fn intent(&self, key: &str) -> intentgate_ledger::IntentRecord {
        self.ledger
            .get("default", "refund_order", key)
            .await
            .unwrap()
            .expect("the intent is in the ledger")
    }
}

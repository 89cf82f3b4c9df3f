//! The customers and their support agent, with every layer that retries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use intentgate_core::CallStatus;
use intentgate_gate::{CallContext, Gate};
use intentgate_mock::Rng;
use serde_json::{Value, json};

/// Attempts of one tool call by the framework when the tool raises (LangGraph's
/// `RetryPolicy` default).
const FRAMEWORK_ATTEMPTS: usize = 3;
/// Extra tool calls the model makes after a failure ("If a tool call fails, retry once").
const MODEL_RETRIES: usize = 1;
/// Per thousand customers: come back and ask "did my refund go through?".
const ASKS_AGAIN_PER_THOUSAND: u32 = 400;
/// How long a returning customer takes to ask again (scaled).
const RETURN_AFTER: Duration = Duration::from_millis(150);
/// Customers served at once, as an agent fleet would.
pub const AGENTS_AT_ONCE: usize = 64;

/// One customer with one refund to get.
#[derive(Debug, Clone)]
pub struct Customer {
    pub index: usize,
    pub order_id: String,
    pub amount: Value,
    /// The amount in cents, as Stripe takes it.
    pub cents: u64,
    pub asks_again: bool,
}

impl Customer {
    /// The Stripe PaymentIntent this customer paid with (`pi_ord_08000`): what a refund of
    /// the Stripe example names.
    pub fn payment_intent(&self) -> String {
        format!("pi_{}", self.order_id)
    }
}

/// The same customers for a seed, whichever wrapper serves them.
pub fn customers(seed: u64, count: usize) -> Vec<Customer> {
    let mut rng = Rng::new(seed ^ 0x0C05_70E5);
    (0..count)
        .map(|index| {
            let cents = [4900, 1250, 999, 10_000, 2500][rng.below(5) as usize];
            Customer {
                index,
                order_id: format!("ord_{:05}", 8000 + index),
                amount: json!(cents as f64 / 100.0),
                cents,
                asks_again: rng.chance(ASKS_AGAIN_PER_THOUSAND),
            }
        })
        .collect()
}

/// What one tool invocation gave the agent.
#[derive(Debug, Clone)]
pub enum ToolResult {
    /// A result the model reads; `ok` when it says the refund went through.
    Answer { status: String, ok: bool },
    /// The tool raised; the framework may run it again.
    Raised { reason: String },
}

/// A refund tool as the agent sees it.
#[async_trait]
pub trait Tool: Send + Sync {
    async fn refund(&self, customer: &Customer, tool_call_id: &str) -> ToolResult;
}

/// What serving one customer took.
#[derive(Debug, Default)]
pub struct Served {
    /// Tool invocations (framework retries included).
    pub invocations: usize,
    /// What each invocation returned: a status, or the error it raised.
    pub results: Vec<String>,
}

pub struct Agent {
    customer: Customer,
    next_call: usize,
}

impl Agent {
    pub fn new(customer: Customer) -> Agent {
        Agent {
            customer,
            next_call: 0,
        }
    }

    pub async fn serve(mut self, tool: &dyn Tool) -> Served {
        let mut served = Served::default();
        let asks = 1 + usize::from(self.customer.asks_again);
        for ask in 0..asks {
            if ask > 0 {
                tokio::time::sleep(RETURN_AFTER).await;
            }
            let mut model_retries = MODEL_RETRIES;
            loop {
                // The model emits a new tool call, with a new id.
                let tool_call_id = format!("call_{}_{}", self.customer.index, self.next_call);
                self.next_call += 1;
                let mut result = ToolResult::Raised {
                    reason: "not called".into(),
                };
                for _ in 0..FRAMEWORK_ATTEMPTS {
                    result = tool.refund(&self.customer, &tool_call_id).await;
                    served.invocations += 1;
                    served.results.push(match &result {
                        ToolResult::Answer { status, .. } => status.clone(),
                        ToolResult::Raised { reason } => format!("raised: {reason}"),
                    });
                    if matches!(result, ToolResult::Answer { .. }) {
                        break;
                    }
                }
                let failed = !matches!(result, ToolResult::Answer { ok: true, .. });
                if failed && model_retries > 0 {
                    model_retries -= 1;
                    continue;
                }
                break;
            }
        }
        served
    }
}

/// The refund tool behind intentgate: one key per intent, derived from the order (or the
/// payment intent, for Stripe) and amount.
pub struct GatedRefund {
    pub gate: Arc<Gate>,
    /// The Stripe example's `refund_order`: a payment intent and an amount in dollars.
    pub stripe: bool,
}

#[async_trait]
impl Tool for GatedRefund {
    async fn refund(&self, customer: &Customer, _tool_call_id: &str) -> ToolResult {
        let arguments = if self.stripe {
            json!({"payment_intent": customer.payment_intent(), "amount": customer.amount})
        } else {
            json!({"order_id": customer.order_id, "amount": customer.amount, "reason": "requested_by_customer"})
        };
        match self
            .gate
            .call("refund_order", arguments, &CallContext::default())
            .await
        {
            Ok(outcome) => ToolResult::Answer {
                status: outcome.status.as_str().to_owned(),
                ok: matches!(outcome.status, CallStatus::Done | CallStatus::AlreadyDone),
            },
            Err(error) => ToolResult::Raised {
                reason: error.to_string(),
            },
        }
    }
}

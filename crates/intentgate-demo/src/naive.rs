//! The naive wrapper of the incident: an idempotency key built from the tool call id, and an
//! HTTP client that retries timeouts, 429 and 5xx twice under that key.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::agent::{Customer, Tool, ToolResult};

/// Attempts of one request by the HTTP client (the OpenAI and Anthropic SDKs retry twice).
const HTTP_ATTEMPTS: usize = 3;
/// The HTTP client's pause between attempts (scaled).
const HTTP_BACKOFF: Duration = Duration::from_millis(5);

pub struct NaiveRefund {
    client: reqwest::Client,
    url: String,
    /// Stripe's form body: the payment intent, the amount in cents.
    stripe: bool,
}

impl NaiveRefund {
    pub fn new(base_url: &str, timeout: Duration, stripe: bool) -> anyhow::Result<NaiveRefund> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(NaiveRefund {
            client,
            url: format!("{base_url}/v1/refunds"),
            stripe,
        })
    }
}

#[async_trait]
impl Tool for NaiveRefund {
    async fn refund(&self, customer: &Customer, tool_call_id: &str) -> ToolResult {
        let body = json!({
            "order_id": customer.order_id,
            "amount": customer.amount,
            "reason": "requested_by_customer",
            "metadata": {"tool_call_id": tool_call_id},
        });
        let mut reason = String::new();
        for attempt in 0..HTTP_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(HTTP_BACKOFF).await;
            }
            let request = self
                .client
                .post(&self.url)
                .header("Idempotency-Key", tool_call_id);
            let request = if self.stripe {
                // As Stripe's SDKs send it: a form, the amount in cents.
                let cents = customer.cents.to_string();
                let payment_intent = customer.payment_intent();
                request
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form(&[
                        ("payment_intent", payment_intent.as_str()),
                        ("amount", cents.as_str()),
                        ("reason", "requested_by_customer"),
                        ("metadata[tool_call_id]", tool_call_id),
                    ]))
            } else {
                request.json(&body)
            };
            let sent = request.send().await;
            match sent {
                Ok(response) => {
                    let status = response.status();
                    // Reading the body can fail too: the connection may be cut mid-answer.
                    let read = response.bytes().await;
                    if status.is_success() && read.is_ok() {
                        return ToolResult::Answer {
                            status: "refunded".into(),
                            ok: true,
                        };
                    }
                    reason = match read {
                        Err(_) => "connection dropped".into(),
                        Ok(_) => format!("HTTP {}", status.as_u16()),
                    };
                    let retryable =
                        status.as_u16() == 429 || status.is_server_error() || read_failed(&reason);
                    if !retryable {
                        break;
                    }
                }
                Err(error) => {
                    reason = if error.is_timeout() {
                        "timeout".into()
                    } else {
                        "connection error".into()
                    };
                }
            }
        }
        ToolResult::Raised { reason }
    }
}

fn read_failed(reason: &str) -> bool {
    reason == "connection dropped"
}

/// `name=value&...`, form-urlencoded (brackets of `metadata[...]` included).
fn form(pairs: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                    char::from(byte).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect()
    };
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_form_is_percent_encoded_brackets_included() {
        assert_eq!(
            super::form(&[("amount", "4900"), ("metadata[tool_call_id]", "call 1")]),
            "amount=4900&metadata%5Btool_call_id%5D=call%201"
        );
    }
}

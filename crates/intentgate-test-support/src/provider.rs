//! The mock provider's own API, for tests that act at the provider around the gateway.

use serde_json::{Value, json};

/// The id of a refund of `amount` on `order` made directly at the mock provider at `mock`,
/// around the gateway; with `intent_key`, carrying it in its metadata as the gateway's
/// requests do.
pub async fn refund_at_provider(
    client: &reqwest::Client,
    mock: &str,
    order: &str,
    amount: &str,
    intent_key: Option<&str>,
) -> String {
    let mut body = json!({"order_id": order, "amount": amount, "reason": "damaged"});
    if let Some(key) = intent_key {
        body["metadata"] = json!({"intent_key": key});
    }
    let response = client
        .post(format!("{mock}/v1/refunds"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{response:?}");
    let refund: Value = response.json().await.unwrap();
    refund["id"].as_str().unwrap().to_owned()
}

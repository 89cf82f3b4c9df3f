//! The mock provider's own API, for tests that act at the provider around the gateway.

use serde_json::{Value, json};

/// The id of a refund of `amount` on `order` made directly at the mock provider at `mock`,
/// around the gateway; with `intent_key`, carrying it in its metadata and the default
/// tenant's provider key of `refund_order` as its Idempotency-Key, as the gateway's requests do.
pub async fn refund_at_provider(
    client: &reqwest::Client,
    mock: &str,
    order: &str,
    amount: &str,
    intent_key: Option<&str>,
) -> String {
    let mut body = json!({"order_id": order, "amount": amount, "reason": "damaged"});
    let mut request = client.post(format!("{mock}/v1/refunds"));
    if let Some(key) = intent_key {
        body["metadata"] = json!({"intent_key": key});
        // As the gateway would have sent it for the default tenant: the provider key.
        request = request.header(
            "Idempotency-Key",
            intentgate_core::key::provider_key("default", "refund_order", key, 1),
        );
    }
    let response = request.json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "{response:?}");
    let refund: Value = response.json().await.unwrap();
    refund["id"].as_str().unwrap().to_owned()
}

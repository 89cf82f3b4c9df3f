//! Talking to a gateway's HTTP API from a test: a client, a tool call that must be
//! answered 200, and an answer read as its status, content type and body.

use std::time::Duration;

use serde_json::{Value, json};

/// A client with `timeout`, if any. reqwest is built without a default TLS provider (the
/// build stays small); plain HTTP still needs one installed.
pub fn client(timeout: Option<Duration>) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder = reqwest::Client::builder();
    let builder = match timeout {
        Some(timeout) => builder.timeout(timeout),
        None => builder,
    };
    builder.build().unwrap()
}

/// An answer's content type, empty when it has none.
pub fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// An answer's status, content type and body: JSON, or else its text as a JSON string (so a
/// test can show what a route answered that was not JSON).
pub async fn answer(response: reqwest::Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let content_type = content_type(&response);
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, content_type, body)
}

/// The outcome of `request`, a call of `tool` with `arguments` to `POST
/// {base}/v1/tools/{tool}/call` that the caller may add to (a bearer token), after checking
/// that the answer is a 200.
pub async fn call_tool_with(request: reqwest::RequestBuilder, arguments: Value) -> Value {
    let response = request
        .json(&json!({ "arguments": arguments }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}

/// The outcome of calling `tool` with `arguments` through the gateway at `base`, after
/// checking that the answer is a 200.
pub async fn call_tool(
    client: &reqwest::Client,
    base: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    call_tool_with(client.post(tool_url(base, tool)), arguments).await
}

/// Where the gateway at `base` takes calls of `tool`.
pub fn tool_url(base: &str, tool: &str) -> String {
    format!("{base}/v1/tools/{tool}/call")
}

/// The text of `GET {base}/metrics`, whatever the status.
pub async fn scrape(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

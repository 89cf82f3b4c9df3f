//! A bare forwarding proxy: the floor under the gateway's overhead in `bench gateway`.
//!
//! It takes a request on a loopback port and sends it on to the provider with the HTTP
//! client the gateway's upstream calls use (`intentgate_http::http_client`), then returns the
//! provider's answer as it came: no config, no validation, no ledger. A refund through it
//! pays what any HTTP hop in front of the provider pays (the extra round trip, a second
//! request built and parsed, the hops between tasks of one process), so the gateway's p50
//! minus the proxy's is what intentgate itself adds beyond being in the path.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::loopback::LoopbackServer;

/// The request headers forwarded: those a refund carries to the provider. Others (the
/// client's `Host`, `Connection`) belong to the hop, not the request.
const FORWARDED_HEADERS: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    HeaderName::from_static("idempotency-key"),
];

/// Where the proxy sends what it takes, and how.
struct Forward {
    client: reqwest::Client,
    /// The provider's base URL, without a trailing slash.
    provider_url: String,
}

/// Starts the proxy on a free loopback port, forwarding every request to `provider_url`
/// (its path and query appended).
pub(super) async fn start(provider_url: &str) -> anyhow::Result<LoopbackServer> {
    let client = intentgate_http::http_client()
        .map_err(|error| anyhow::anyhow!("building the proxy's HTTP client: {error}"))?;
    let forward = Arc::new(Forward {
        client,
        provider_url: provider_url.trim_end_matches('/').to_owned(),
    });
    let app = axum::Router::new()
        .fallback(forward_request)
        .with_state(forward);
    LoopbackServer::start("the forwarding proxy", app).await
}

/// Sends the request on and answers with the provider's status, content type and body; a
/// provider that can't be reached is a 502 naming why.
async fn forward_request(
    State(forward): State<Arc<Forward>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |path| path.as_str());
    let mut request = forward
        .client
        .request(method, format!("{}{path}", forward.provider_url));
    for name in FORWARDED_HEADERS {
        if let Some(value) = headers.get(&name) {
            request = request.header(name, value);
        }
    }
    let answered = async {
        let response = request.body(body).send().await?;
        let status = response.status();
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, content_type, body))
    };
    match answered.await {
        Ok((status, content_type, body)) => {
            let mut response = (status, body).into_response();
            if let Some(content_type) = content_type {
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, content_type);
            }
            response
        }
        Err(error) => (
            StatusCode::BAD_GATEWAY,
            format!("the forwarding proxy could not reach the provider: {error}"),
        )
            .into_response(),
    }
}

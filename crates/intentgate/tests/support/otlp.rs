//! A loopback OTLP/HTTP receiver: takes what a gateway exports on `/v1/traces`, decodes the
//! protobuf, and keeps the spans for the test to read; and a recording forwarder that notes
//! the `traceparent` of every request it passes on to an upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;

/// One exported span, as the test reads it.
#[derive(Debug, Clone)]
pub struct Span {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// Every attribute, its value as text.
    pub attributes: HashMap<String, String>,
    /// The (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
}

impl Span {
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes.get(name).map(String::as_str)
    }
}

/// What the receiver keeps, and how it answers.
#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    /// How long each export waits before it is answered (a slow collector).
    delay: Duration,
}

/// The receiver on a free loopback port, serving until the test ends.
pub struct Receiver {
    /// The base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    received: Arc<Received>,
}

impl Receiver {
    /// A receiver that answers every export at once.
    pub async fn start() -> Receiver {
        Receiver::start_answering_after(Duration::ZERO).await
    }

    /// A receiver that holds every export for `delay` before answering.
    pub async fn start_answering_after(delay: Duration) -> Receiver {
        let received = Arc::new(Received {
            delay,
            ..Received::default()
        });
        let app = axum::Router::new()
            .route("/v1/traces", post(export))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, received }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) until `done` holds of the spans received, and returns them.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("the spans wanted did not arrive; received: {spans:#?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn export(State(received): State<Arc<Received>>, body: Bytes) -> (StatusCode, Vec<u8>) {
    tokio::time::sleep(received.delay).await;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|resource| &resource.attributes)
            .find(|attribute| attribute.key == "service.name")
            .map(|attribute| text(attribute.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|attribute| {
                            let value = attribute.value.as_ref().and_then(|v| v.value.as_ref());
                            (attribute.key.clone(), text(value))
                        })
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
                        .collect(),
                });
            }
        }
    }
    received.spans.lock().unwrap().extend(spans);
    (
        StatusCode::OK,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(text)) => text.clone(),
        Some(Any::BoolValue(value)) => value.to_string(),
        Some(Any::IntValue(value)) => value.to_string(),
        Some(Any::DoubleValue(value)) => value.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// (path, traceparent) of each request a [`Recorder`] passed on.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A forwarder in front of an upstream (the mock provider) that notes the `traceparent` of
/// every request, with its path, and passes the request on unchanged.
pub struct Recorder {
    pub url: String,
    seen: Seen,
}

impl Recorder {
    pub async fn start(upstream: &str) -> Recorder {
        let seen: Seen = Arc::default();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let upstream = upstream.trim_end_matches('/').to_owned();
        let state = (seen.clone(), client, upstream);
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::new(state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Recorder { url, seen }
    }

    /// (path, traceparent) of every request passed on so far.
    pub fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }
}

type Forwarding = Arc<(
    Arc<Mutex<Vec<(String, Option<String>)>>>,
    reqwest::Client,
    String,
)>;

async fn forward(
    State(state): State<Forwarding>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    let (seen, client, upstream) = &*state;
    let traceparent = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let path = uri
        .path_and_query()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    seen.lock()
        .unwrap()
        .push((uri.path().to_owned(), traceparent));
    let mut request = client
        .request(method, format!("{upstream}{path}"))
        .body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let response = request.send().await.unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let mut answer_headers = HeaderMap::new();
    for (name, value) in response.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            answer_headers.insert(name, value.clone());
        }
    }
    (status, answer_headers, response.bytes().await.unwrap())
}

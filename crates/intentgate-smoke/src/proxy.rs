//! The fault-injecting loopback proxy of `intentgate smoke --live`.
//!
//! It sits between the gate and one real (sandbox) upstream and forwards every request as
//! it is, except once per [`FaultProxy::arm`]: the next side-effecting request (any method
//! but GET, HEAD and OPTIONS) is forwarded, its response is read in full, so the provider
//! has committed whatever it was going to commit, and then the gate's connection is closed
//! without a byte of answer. That is the "committed, answer lost" failure, injected without
//! touching the sandbox. Closing a connection without answering is what hyper does when the
//! service fails, as in the mock provider's own accept loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Largest request or response body passed through: far above any tool call's, and a bound.
const BODY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Longest wait for the upstream's answer to one forwarded request. The gate's own timeout
/// (the tool's) ends the wait from its side first; this only stops a forgotten task.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
/// Headers of a hop, not of the request: never forwarded.
const HOP_HEADERS: [&str; 6] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
];

/// A running proxy to one upstream base URL.
pub struct FaultProxy {
    state: Arc<ProxyState>,
    url: String,
    stop: Option<oneshot::Sender<()>>,
}

struct ProxyState {
    /// The upstream's base URL, without a trailing slash; a request's path and query are
    /// appended to it.
    target: String,
    client: reqwest::Client,
    /// The next side-effecting request is to be cut after forwarding.
    armed: AtomicBool,
    /// Side-effecting requests forwarded to the upstream (cut ones included).
    side_effects: AtomicU64,
    /// Connections cut after forwarding.
    cuts: AtomicU64,
}

/// The service error that makes hyper close the connection without answering.
#[derive(Debug)]
struct Cut;

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the smoke test's proxy cut the connection (fault injection)")
    }
}

impl std::error::Error for Cut {}

impl FaultProxy {
    /// Listens on `127.0.0.1`, a free port, forwarding to `target`.
    pub async fn start(target: &str) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("the smoke test's proxy can't listen on a loopback port")?;
        let url = format!("http://{}", listener.local_addr()?);
        let client = intentgate_http::http_client().context("an HTTP client for the proxy")?;
        let state = Arc::new(ProxyState {
            target: target.trim_end_matches('/').to_owned(),
            client,
            armed: AtomicBool::new(false),
            side_effects: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
        });
        let (stop, mut stopped) = oneshot::channel::<()>();
        let serving = state.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut stopped => break,
                };
                let Ok((stream, _)) = accepted else { continue };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { state.forward(request).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FaultProxy {
            state,
            url,
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`: the base URL the gate is given instead of the upstream's.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Cut the answer to the next side-effecting request.
    pub fn arm(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Cut nothing more (the armed request never came).
    pub fn disarm(&self) {
        self.state.armed.store(false, Ordering::SeqCst);
    }

    pub fn side_effects(&self) -> u64 {
        self.state.side_effects.load(Ordering::SeqCst)
    }

    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl ProxyState {
    async fn forward(&self, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Cut> {
        let (parts, body) = request.into_parts();
        let side_effect = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        let cut = side_effect
            && self
                .armed
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok();
        let body = match Limited::new(body, BODY_BYTES_MAX).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return Ok(answer(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large",
                ));
            }
        };
        let path = parts
            .uri
            .path_and_query()
            .map(|path| path.as_str())
            .unwrap_or("/");
        let mut headers = parts.headers.clone();
        for name in HOP_HEADERS {
            headers.remove(name);
        }
        if side_effect {
            self.side_effects.fetch_add(1, Ordering::SeqCst);
        }
        let sent = self
            .client
            .request(parts.method.clone(), format!("{}{path}", self.target))
            .headers(headers)
            .body(body)
            .timeout(UPSTREAM_TIMEOUT)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(_) if cut => {
                self.cuts.fetch_add(1, Ordering::SeqCst);
                return Err(Cut);
            }
            // The upstream could not be reached: the gate sees a 502, an ambiguous answer
            // like any other (it is rare, and not the injected fault).
            Err(_) => {
                return Ok(answer(
                    StatusCode::BAD_GATEWAY,
                    "the upstream can't be reached",
                ));
            }
        };
        let status = response.status();
        let mut response_headers = response.headers().clone();
        let bytes = response.bytes().await;
        if cut {
            // The upstream answered (and committed, if it was going to): lose the answer.
            self.cuts.fetch_add(1, Ordering::SeqCst);
            return Err(Cut);
        }
        let Ok(bytes) = bytes else {
            return Ok(answer(
                StatusCode::BAD_GATEWAY,
                "the upstream's answer broke off",
            ));
        };
        for name in HOP_HEADERS {
            response_headers.remove(name);
        }
        let mut answer = Response::new(Full::new(bytes));
        *answer.status_mut() = status;
        *answer.headers_mut() = response_headers;
        Ok(answer)
    }
}

fn answer(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}

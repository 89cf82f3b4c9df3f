//! The mock provider's accept loop, on hyper's HTTP/1.1 connections rather than
//! `axum::serve`, for one reason: faults. A `timeout` holds the connection for the plan's
//! `timeout_hold_ms` and then cuts it, and a `dropped` cuts it after the request was read. A
//! cut is a response marked [`CutConnection`]: this loop turns it into a service error, on
//! which hyper closes the connection without writing a byte, so the client sees the
//! connection end before any status. Served by something else (say `axum::serve` of
//! [`MockProvider::router`]) the same response still breaks: its body fails on the first
//! read, which makes hyper abort the connection before flushing the headers; a server that
//! flushed them first would show a 500 whose body breaks, never a usable answer.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tower_service::Service as _;

use super::{MockOptions, MockProvider};

/// How long a client may take to send a request's headers (also closes idle keep-alive
/// connections that start a request and stall).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; further ones wait in the listen backlog. A storm of agents
/// in a demo opens a few hundred.
pub const CONNECTIONS_MAX: usize = 4096;
/// After the shutdown signal, how long connections in progress may finish (a held
/// `timeout` would otherwise keep the server up for `timeout_hold_ms`).
pub const SHUTDOWN_DRAIN_MAX: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` that is not about one connection (out of file
/// descriptors): retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// Serves a new provider until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    options: MockOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let provider = MockProvider::new(options)
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    serve_provider(listener, provider, shutdown).await
}

/// Serves `provider` until `shutdown` resolves, then lets connections in progress finish
/// for at most [`SHUTDOWN_DRAIN_MAX`].
pub async fn serve_provider(
    listener: TcpListener,
    provider: Arc<MockProvider>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = provider.router();
    let (stop, stopping) = watch::channel(false);
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        match accepted {
            Ok((stream, _)) => {
                connections.spawn(serve_connection(
                    stream,
                    router.clone(),
                    stopping.clone(),
                    slot,
                ));
            }
            Err(error) if is_connection_error(&error) => {}
            Err(_) => tokio::time::sleep(ACCEPT_ERROR_PAUSE).await,
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(SHUTDOWN_DRAIN_MAX, drained).await;
    connections.shutdown().await;
    Ok(())
}

/// Errors of `accept` that concern one connection, not the listener.
fn is_connection_error(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Marks a response that must not be sent: the connection is cut instead.
#[derive(Debug, Clone, Copy)]
pub struct CutConnection;

/// The service error that makes hyper close a connection without answering.
#[derive(Debug)]
struct ConnectionCut;

impl std::fmt::Display for ConnectionCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the mock provider cut the connection (fault injection)")
    }
}

impl std::error::Error for ConnectionCut {}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    mut stopping: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut router = router.clone();
        async move {
            let response = match router.call(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if response.extensions().get::<CutConnection>().is_some() {
                return Err(ConnectionCut);
            }
            Ok(response)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stopping.wait_for(|stop| *stop) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// A provider served on `127.0.0.1` on a free port, in this process: for tests and the demo.
pub struct MockServer {
    provider: Arc<MockProvider>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MockServer {
    /// Binds `127.0.0.1:0` and serves `provider` on a spawned task.
    pub async fn start(provider: Arc<MockProvider>) -> std::io::Result<MockServer> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_provider(listener, provider.clone(), async move {
            let _ = stopped.await;
        }));
        Ok(MockServer {
            provider,
            addr,
            stop: Some(stop),
            task,
        })
    }

    pub fn provider(&self) -> &Arc<MockProvider> {
        &self.provider
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drains (bounded) and waits for the server to end.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.map_err(std::io::Error::other)?
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

/// A body that fails when read: what a cut looks like if the response is sent anyway.
struct BrokenBody;

impl http_body::Body for BrokenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            ConnectionCut.to_string(),
        ))))
    }
}

/// The response that cuts its connection instead of being sent.
pub(super) fn cut_connection() -> Response {
    let mut response = Response::new(Body::new(BrokenBody));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.extensions_mut().insert(CutConnection);
    response
}

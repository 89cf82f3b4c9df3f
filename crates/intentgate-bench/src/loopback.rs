//! A benchmark's stand-in servers (a provider, a proxy, an MCP server): an HTTP app on a
//! free loopback port, in this process, stopped within a bound.

use std::pin::Pin;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Longest wait for a [`LoopbackServer`] to stop once asked: no call is running by then, so
/// it only has to close its idle connections.
const SERVER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Completes once a [`LoopbackServer`] is asked to stop.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// An HTTP app served on `127.0.0.1` on a free port, in this process, until stopped: a
/// benchmark's stand-in server (a provider, a proxy, an MCP server).
pub struct LoopbackServer {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub url: String,
    /// What it is, for errors ("the forwarding proxy").
    name: &'static str,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl LoopbackServer {
    /// Serves `app` with axum's server.
    pub async fn start(name: &'static str, app: axum::Router) -> anyhow::Result<LoopbackServer> {
        LoopbackServer::run(name, async move |listener, shutdown| {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        })
        .await
    }

    /// Listens on a free loopback port and runs `serve` on it in a task of its own, with a
    /// future that completes once [`LoopbackServer::stop`] is called.
    pub async fn run<F>(
        name: &'static str,
        serve: impl FnOnce(TcpListener, Shutdown) -> F,
    ) -> anyhow::Result<LoopbackServer>
    where
        F: Future<Output = std::io::Result<()>> + Send + 'static,
    {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .with_context(|| format!("can't listen on a loopback port for {name}"))?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(serve(listener, shutdown));
        Ok(LoopbackServer {
            url,
            name,
            stop,
            task,
        })
    }

    /// Stops accepting and waits, bounded, for the server to end.
    pub async fn stop(self) -> anyhow::Result<()> {
        let name = self.name;
        let _ = self.stop.send(());
        tokio::time::timeout(SERVER_STOP_TIMEOUT, self.task)
            .await
            .with_context(|| {
                format!(
                    "{name} did not stop within {} s",
                    SERVER_STOP_TIMEOUT.as_secs()
                )
            })?
            .with_context(|| format!("{name}'s task panicked"))?
            .with_context(|| format!("{name} failed"))
    }
}

//! What the binary's process tests share: starting `intentgate` commands as processes, a
//! config written from the example, an HTTP client, and a webhook receiver.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A child process that is killed when dropped.
pub struct Running {
    pub child: Child,
    pub url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The built binary, with the environment variables its flags read removed, so that the
/// developer's environment can't change what a test runs.
pub fn intentgate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_intentgate"));
    for name in [
        "RUST_LOG",
        "INTENTGATE_CONFIG",
        "INTENTGATE_LEDGER",
        "INTENTGATE_DURABILITY",
        "INTENTGATE_LISTEN",
        "INTENTGATE_ADMIN_TOKEN",
        "INTENTGATE_LOG_FORMAT",
        "INTENTGATE_BENCH_DIR",
    ] {
        command.env_remove(name);
    }
    command
}

/// Starts `intentgate ARGS` and reads the `... listening on http://ADDR` line it prints.
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut command = intentgate();
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("intentgate starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("it prints where it listens");
    let url = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "unexpected first line: {line:?}"
    );
    Running { child, url }
}

/// The quiet mock provider on a free port.
pub fn mock_provider() -> Running {
    start(
        &[
            "mock-provider",
            "--listen",
            "127.0.0.1:0",
            "--faults",
            "quiet",
        ],
        &[],
    )
}

/// The example config, edited by `edit`, written to `folder`.
pub fn example_config(folder: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/support-agent.yaml"
    ))
    .unwrap();
    let path = folder.join("support-agent.yaml");
    std::fs::write(&path, edit(example)).unwrap();
    path
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// A loopback HTTP server that keeps every JSON body posted to it, with when it arrived.
#[derive(Clone)]
pub struct Webhook {
    pub url: String,
    pub received: Arc<Mutex<Vec<(Instant, Value)>>>,
}

impl Webhook {
    pub async fn start() -> Webhook {
        use axum::Json;
        use axum::extract::State;
        type Received = Arc<Mutex<Vec<(Instant, Value)>>>;
        let received: Received = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |State(received): State<Received>, Json(body): Json<Value>| async move {
                        received.lock().unwrap().push((Instant::now(), body));
                        "ok"
                    },
                ),
            )
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Webhook { url, received }
    }

    /// The notices received so far.
    pub fn notices(&self) -> Vec<(Instant, Value)> {
        self.received.lock().unwrap().clone()
    }

    /// Waits up to `limit` for a notice `matches` accepts.
    pub async fn wait_for(
        &self,
        limit: Duration,
        matches: impl Fn(&Value) -> bool,
    ) -> Option<(Instant, Value)> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = self.notices().into_iter().find(|(_, body)| matches(body)) {
                return Some(found);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

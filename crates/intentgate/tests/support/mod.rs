//! What the binary's process tests share: starting `intentgate` commands as processes, a
//! config written from the example, an HTTP client and the calls made with it, waiting with
//! a deadline, a PostgreSQL schema of a test's own, and a webhook receiver.
#![allow(dead_code)]

pub mod otlp;

use std::fmt::Display;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The example config the tests start from.
pub const EXAMPLE_CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/support-agent.yaml"
);

/// A child process that is killed (SIGKILL) when dropped.
pub struct Running {
    pub child: Child,
    pub url: String,
}

impl Running {
    /// SIGKILLs it and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it with SIGTERM (a graceful shutdown) and reaps it; panics if it is still
    /// running after `limit`.
    pub fn terminate(&mut self, limit: Duration) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "it did not stop within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The hash key every command the tests start reads (`INTENTGATE_HASH_KEY`, named by the
/// example config's `gateway.hash_key`).
pub const HASH_KEY: &str = "0123456789abcdef0123456789abcdef-process-tests";

/// The built binary, with the environment variables its flags read removed, so that the
/// developer's environment can't change what a test runs, and the tests' hash key set.
pub fn intentgate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_intentgate"));
    without_settings_from_the_environment(&mut command);
    command
}

/// Removes from `command`'s environment the variables `intentgate`'s flags read (and sets the
/// tests' hash key), for a test that starts the binary through another program, a shell.
pub fn without_settings_from_the_environment(command: &mut Command) {
    for name in [
        "RUST_LOG",
        "INTENTGATE_CONFIG",
        "INTENTGATE_LEDGER",
        "INTENTGATE_LEDGER_SCHEMA",
        "INTENTGATE_DURABILITY",
        "INTENTGATE_LISTEN",
        "INTENTGATE_ADMIN_TOKEN",
        "INTENTGATE_LOG_FORMAT",
        "INTENTGATE_BENCH_DIR",
        // Traces stay off unless a test names its own collector.
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "OTEL_TRACES_EXPORTER",
        "OTEL_TRACES_SAMPLER",
        "OTEL_TRACES_SAMPLER_ARG",
    ] {
        command.env_remove(name);
    }
    command.env("INTENTGATE_HASH_KEY", HASH_KEY);
}

/// The stdout of a command that must have succeeded; its stderr in the panic when it did not.
pub fn success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Starts `intentgate ARGS` and reads the `... listening on http://ADDR` line it prints. Its
/// stderr is discarded.
pub fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
    start_with_stderr(args, env, Stdio::null())
}

/// [`start`], with the process's stderr going to `stderr` (a file, or piped for the test to
/// read).
pub fn start_with_stderr(args: &[&str], env: &[(&str, &str)], stderr: impl Into<Stdio>) -> Running {
    try_start_with_stderr(args, env, stderr).unwrap_or_else(|problem| panic!("{problem}"))
}

/// [`start_with_stderr`], answering what went wrong (how the process ended, or what it
/// printed instead of its address) rather than panicking.
pub fn try_start_with_stderr(
    args: &[&str],
    env: &[(&str, &str)],
    stderr: impl Into<Stdio>,
) -> Result<Running, String> {
    try_start_command(intentgate(), args, env, stderr)
}

/// [`try_start_with_stderr`] of `command` (the built binary, or another build of
/// `intentgate` with the same cleaned environment).
fn try_start_command(
    mut command: Command,
    args: &[&str],
    env: &[(&str, &str)],
    stderr: impl Into<Stdio>,
) -> Result<Running, String> {
    command.args(args).stdout(Stdio::piped()).stderr(stderr);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("intentgate starts");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("it prints where it listens");
    let url = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    if url.starts_with("http://127.0.0.1:") {
        return Ok(Running { child, url });
    }
    let _ = child.kill();
    let ended = child
        .wait()
        .map_or_else(|error| error.to_string(), |status| status.to_string());
    Err(format!(
        "intentgate {} printed {line:?} instead of its address ({ended})",
        args.first().unwrap_or(&"")
    ))
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

/// `intentgate serve` of `config` on `ledger` (a SQLite file or a PostgreSQL URL), on a free
/// port, with `env` (INTENTGATE_MOCK_URL, at least, names the upstream). Its stderr is
/// discarded.
pub fn serve(config: &str, ledger: &str, env: &[(&str, &str)]) -> Running {
    serve_with_stderr(config, ledger, env, Stdio::null())
}

/// [`serve`], with the gateway's stderr going to `stderr`.
pub fn serve_with_stderr(
    config: &str,
    ledger: &str,
    env: &[(&str, &str)],
    stderr: impl Into<Stdio>,
) -> Running {
    try_serve_with_stderr(config, ledger, env, stderr).unwrap_or_else(|problem| panic!("{problem}"))
}

/// [`serve_with_stderr`], answering what went wrong rather than panicking.
pub fn try_serve_with_stderr(
    config: &str,
    ledger: &str,
    env: &[(&str, &str)],
    stderr: impl Into<Stdio>,
) -> Result<Running, String> {
    try_serve_binary_with_stderr(None, config, ledger, env, stderr)
}

/// [`try_serve_with_stderr`] with `binary`, another build of `intentgate` (a previous
/// release), when given; the built binary otherwise.
pub fn try_serve_binary_with_stderr(
    binary: Option<&Path>,
    config: &str,
    ledger: &str,
    env: &[(&str, &str)],
    stderr: impl Into<Stdio>,
) -> Result<Running, String> {
    let command = match binary {
        Some(binary) => {
            let mut command = Command::new(binary);
            without_settings_from_the_environment(&mut command);
            command
        }
        None => intentgate(),
    };
    try_start_command(
        command,
        &[
            "serve",
            "--config",
            config,
            "--listen",
            "127.0.0.1:0",
            "--ledger",
            ledger,
        ],
        env,
        stderr,
    )
}

/// The mock provider and, in front of it, `intentgate serve` of the example config as
/// `edit` changes it, over a ledger in a temporary folder.
pub struct Stack {
    pub mock: Running,
    pub gateway: Running,
    pub client: reqwest::Client,
    pub folder: tempfile::TempDir,
}

pub fn stack(edit: impl Fn(String) -> String) -> Stack {
    let folder = tempfile::tempdir().unwrap();
    let mock = mock_provider();
    let config = example_config(folder.path(), edit);
    let ledger = folder.path().join("ledger.db");
    let gateway = serve(
        config.to_str().unwrap(),
        ledger.to_str().unwrap(),
        &[("INTENTGATE_MOCK_URL", &mock.url)],
    );
    Stack {
        mock,
        gateway,
        client: client(),
        folder,
    }
}

/// The mock provider and a ledger file for gateway processes the test starts itself, with the
/// example config, its tools' timeouts set to `tool_timeout_ms`, in a temporary folder.
pub struct LedgerFolder {
    pub folder: tempfile::TempDir,
    pub config: String,
    pub ledger: String,
    pub mock: Running,
    pub client: reqwest::Client,
}

impl LedgerFolder {
    pub fn new(tool_timeout_ms: u64) -> LedgerFolder {
        let folder = tempfile::tempdir().unwrap();
        let config = example_config(folder.path(), |text| {
            with_setting(&text, "timeout_ms", tool_timeout_ms)
        });
        let ledger = folder.path().join("ledger.db");
        LedgerFolder {
            config: config.to_str().unwrap().to_owned(),
            ledger: ledger.to_str().unwrap().to_owned(),
            folder,
            mock: mock_provider(),
            client: client(),
        }
    }

    /// Sets the mock provider's faults (see [`set_faults`]).
    pub async fn set_faults(&self, timeout_hold_ms: Option<u64>, plan: Value) {
        set_faults(&self.client, &self.mock, timeout_hold_ms, plan).await
    }
}

/// The text of the example config.
pub fn example() -> String {
    std::fs::read_to_string(EXAMPLE_CONFIG).unwrap()
}

/// The example config, edited by `edit`, written to `folder`.
pub fn example_config(folder: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let path = folder.join("support-agent.yaml");
    std::fs::write(&path, edit(example())).unwrap();
    path
}

/// `config` with every `NAME: ...` line, at any indent, set to `NAME: VALUE`.
pub fn with_setting(config: &str, name: &str, value: impl Display) -> String {
    let prefix = format!("{name}:");
    let mut text = String::new();
    for line in config.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        if line.trim_start().starts_with(&prefix) {
            text.push_str(&format!("{indent}{name}: {value}\n"));
        } else {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// `config` (the example's text) with its `auth: none` replaced by API keys, one per
/// `(name, key, tenant, scopes)`.
pub fn with_api_keys(config: &str, keys: &[(&str, &str, &str, &str)]) -> String {
    let mut section = String::from("auth:\n  api_keys:\n");
    for (name, key, tenant, scopes) in keys {
        section.push_str(&format!(
            "    - name: {name}\n      sha256: {}\n      tenant: {tenant}\n      scopes: [{scopes}]\n",
            intentgate_server::auth::ApiKey::digest_hex(key)
        ));
    }
    assert!(
        config.contains("\nauth: none\n"),
        "the example config has `auth: none`"
    );
    config.replace("\nauth: none\n", &format!("\n{section}"))
}

pub fn client() -> reqwest::Client {
    intentgate_test_support::http::client(Some(Duration::from_secs(30)))
}

/// The outcome of calling `tool` with `arguments` through the gateway at `gateway`, after
/// checking that the answer is a 200.
pub async fn call(client: &reqwest::Client, gateway: &str, tool: &str, arguments: Value) -> Value {
    intentgate_test_support::http::call_tool(client, gateway, tool, arguments).await
}

/// The JSON body of the answer to `request`.
pub async fn json_answer(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// The JSON body `url` answers a GET with.
pub async fn get_json(client: &reqwest::Client, url: impl reqwest::IntoUrl) -> Value {
    json_answer(client.get(url)).await
}

/// Sets the mock provider's faults: `plan`, over no latency, a 10 ms Retry-After and, when
/// given, how long a "timeout" answer holds the connection.
pub async fn set_faults(
    client: &reqwest::Client,
    mock: &Running,
    timeout_hold_ms: Option<u64>,
    plan: Value,
) {
    let mut full = json!({"latency_p50_ms": 0, "latency_p95_ms": 0, "retry_after_ms": 10});
    if let Some(hold) = timeout_hold_ms {
        full["timeout_hold_ms"] = json!(hold);
    }
    full.as_object_mut()
        .unwrap()
        .extend(plan.as_object().unwrap().clone());
    let response = client
        .put(format!("{}/admin/faults", mock.url))
        .json(&full)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{:?}",
        response.text().await
    );
}

/// Runs `attempt` every `every` until it answers `Ok`; that value, and how long it took.
/// Panics with the `Err` it answered once `limit` has passed.
pub async fn until<T>(
    limit: Duration,
    every: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, String>,
) -> (T, Duration) {
    let started = Instant::now();
    loop {
        match attempt().await {
            Ok(value) => return (value, started.elapsed()),
            Err(not_yet) => assert!(started.elapsed() < limit, "{not_yet}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// The PostgreSQL URL, or None (with a message) when `test` can't run here: DATABASE_URL is
/// unset. With CI=true that fails the test instead.
pub fn database_url(test: &str) -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: DATABASE_URL is unset, and with CI=true the PostgreSQL tests must \
                 run, not be skipped"
            );
            println!(
                "{test}: skipped: DATABASE_URL is unset (set it to a PostgreSQL URL such as \
                 postgres://postgres@127.0.0.1:5432/test to run it)"
            );
            None
        }
    }
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("PostgreSQL at DATABASE_URL accepts a connection");
    tokio::spawn(connection);
    client
}

/// A schema of the test's own (`INTENTGATE_LEDGER_SCHEMA`), dropped when this is dropped
/// (best effort; [`Schema::remove`] checks it).
pub struct Schema {
    pub name: String,
    url: String,
    removed: bool,
}

impl Schema {
    /// `NAME_PID`, dropped first in case an earlier run left it.
    pub fn fresh(url: &str, name: &str) -> Schema {
        let schema = Schema {
            name: format!("{name}_{}", std::process::id()),
            url: url.to_owned(),
            removed: false,
        };
        schema
            .drop_schema()
            .expect("PostgreSQL at DATABASE_URL drops the schema");
        schema
    }

    /// Drops the schema now, and panics if that fails.
    pub fn remove(mut self) {
        self.drop_schema().expect("the schema is dropped");
        self.removed = true;
    }

    /// Drops the schema, on a runtime of its own on its own thread: this may run inside the
    /// test's runtime.
    fn drop_schema(&self) -> Result<(), tokio_postgres::Error> {
        let (url, name) = (self.url.clone(), self.name.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (client, connection) =
                    tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await
            })
        })
        .join()
        .unwrap()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.drop_schema();
        }
    }
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

//! Traces of calls sent to an OpenTelemetry collector over OTLP (HTTP, protobuf).
//!
//! **Off by default, and free when off.** Traces are on only when a collector is named: the
//! standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, or the
//! config's `telemetry.endpoint` (`serve` and `mcp`). Off, no layer is installed and the
//! gate opens no phase span (`intentgate_gate::trace`). `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn them off whatever else is set.
//!
//! **A slow or dead collector never slows a call.** A finished span goes into a bounded
//! queue ([`QUEUE_SPANS_MAX`]) with a non-blocking send; when the queue is full the span is
//! dropped and counted in `intentgate_trace_spans_dropped_total`. One thread of its own
//! takes batches off the queue and exports them, each export bounded by
//! [`EXPORT_TIMEOUT`].
//!
//! **Settings.** The standard variables win over the config's `telemetry:` section:
//! `OTEL_EXPORTER_OTLP_HEADERS` (`name=value,...`, values percent-encoded),
//! `OTEL_SERVICE_NAME`, and `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG` (the
//! default is `parentbased_always_on`: a caller's unsampled trace stays unsampled).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use intentgate_config::TelemetryConfig;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};

/// Spans waiting for export at most; past it a finished span is dropped (and counted), so
/// memory stays bounded however long the collector is away. At a few hundred bytes a span,
/// a few MiB.
pub const QUEUE_SPANS_MAX: usize = 8192;
/// Spans sent in one export request at most.
pub const BATCH_SPANS_MAX: usize = 512;
/// Longest a finished span waits in the queue before its batch is sent.
pub const BATCH_DELAY: Duration = Duration::from_secs(1);
/// Longest one export request may take; the queue fills (and drops) meanwhile, calls don't
/// wait.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the process waits at exit for the last spans to be sent.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// The `service.name` when neither `OTEL_SERVICE_NAME` nor the config names one.
pub const SERVICE_NAME_DEFAULT: &str = "intentgate";
/// The path OTLP/HTTP takes traces on, added to a base endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// Where and how traces are exported, once decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The full URL spans are POSTed to.
    pub endpoint: String,
    pub headers: BTreeMap<String, String>,
    pub service_name: String,
    /// `OTEL_TRACES_SAMPLER`'s name and argument.
    pub sampler: (String, Option<f64>),
}

/// The export settings `env` (a variable lookup) and the config's `telemetry:` section ask
/// for, or `None` when traces are off. A variable set to what it can't be is an error that
/// names it.
pub fn settings(
    env: &dyn Fn(&str) -> Option<String>,
    config: &TelemetryConfig,
) -> Result<Option<Settings>, String> {
    let set = |name: &str| {
        env(name)
            .map(|value| value.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").is_some_and(|value| value.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|value| value.eq_ignore_ascii_case("none"))
    {
        return Ok(None);
    }
    if let Some(exporter) = set("OTEL_TRACES_EXPORTER")
        && !exporter.eq_ignore_ascii_case("otlp")
    {
        return Err(format!(
            "OTEL_TRACES_EXPORTER={exporter:?}: intentgate exports `otlp` or `none`"
        ));
    }
    let base = |url: String| format!("{}{TRACES_PATH}", url.trim_end_matches('/'));
    let endpoint = match (
        set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        config.endpoint.clone().filter(|url| !url.trim().is_empty()),
    ) {
        (Some(traces), _, _) => traces,
        (None, Some(url), _) | (None, None, Some(url)) => base(url),
        (None, None, None) => return Ok(None),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!(
            "the traces endpoint {endpoint:?} is not an http:// or https:// URL"
        ));
    }
    let mut headers = config.headers.clone();
    if let Some(list) =
        set("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or(set("OTEL_EXPORTER_OTLP_HEADERS"))
    {
        for pair in list.split(',').filter(|pair| !pair.trim().is_empty()) {
            let Some((name, value)) = pair.split_once('=') else {
                return Err("OTEL_EXPORTER_OTLP_HEADERS: each entry is `name=value`".to_owned());
            };
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| {
                    format!(
                        "OTEL_EXPORTER_OTLP_HEADERS: the value of {:?} is not UTF-8",
                        name.trim()
                    )
                })?;
            headers.insert(name.trim().to_owned(), value.into_owned());
        }
    }
    let service_name = set("OTEL_SERVICE_NAME")
        .or(config.service_name.clone())
        .unwrap_or_else(|| SERVICE_NAME_DEFAULT.to_owned());
    let sampler_name =
        set("OTEL_TRACES_SAMPLER").unwrap_or_else(|| "parentbased_always_on".to_owned());
    let argument = match set("OTEL_TRACES_SAMPLER_ARG") {
        None => None,
        Some(text) => match text.parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => Some(ratio),
            _ => {
                return Err(format!(
                    "OTEL_TRACES_SAMPLER_ARG={text:?} is not a ratio between 0 and 1"
                ));
            }
        },
    };
    // Checked now, so a misspelt sampler stops the start rather than sampling everything.
    sampler(&sampler_name, argument)?;
    Ok(Some(Settings {
        endpoint,
        headers,
        service_name,
        sampler: (sampler_name, argument),
    }))
}

/// The sampler `OTEL_TRACES_SAMPLER` names, with its ratio (1 when not given).
fn sampler(name: &str, ratio: Option<f64>) -> Result<Sampler, String> {
    let ratio = ratio.unwrap_or(1.0);
    Ok(match name {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::TraceIdRatioBased(ratio),
        "parentbased_always_on" => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        "parentbased_always_off" => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        "parentbased_traceidratio" => {
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
        }
        other => {
            return Err(format!(
                "OTEL_TRACES_SAMPLER={other:?} is not a sampler; use always_on, always_off, \
                 traceidratio or parentbased_always_on, parentbased_always_off, \
                 parentbased_traceidratio"
            ));
        }
    })
}

/// The installed exporter's tracer, for the log layer.
pub struct Tracing {
    pub tracer: opentelemetry_sdk::trace::Tracer,
}

/// The process's tracer provider, once [`start`] built one: [`shutdown`] sends what it
/// still queues.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Sends the spans still queued, waiting at most [`SHUTDOWN_TIMEOUT`]; nothing when traces
/// are off. Called as the process ends (also by commands that end it with `exit`).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        let _ = provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
    }
}

/// Builds the exporter `settings` describe: the OTLP/HTTP exporter behind a bounded queue.
pub fn start(settings: &Settings) -> Result<Tracing, String> {
    // The exporter's client may speak TLS; reqwest takes rustls's process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let headers: HashMap<String, String> = settings.headers.clone().into_iter().collect();
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_headers(headers)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| format!("the OTLP traces exporter could not be built: {error}"))?;
    // Given here, before the exporter moves to its thread: the processor never sees it.
    exporter.set_resource(&resource);
    let (name, ratio) = &settings.sampler;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BoundedBatch::new(exporter, QUEUE_SPANS_MAX))
        .with_sampler(sampler(name, *ratio)?)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("intentgate");
    let _ = PROVIDER.set(provider);
    intentgate_gate::trace::enable();
    Ok(Tracing { tracer })
}

/// What the export thread is asked to do besides exporting.
enum Command {
    Span(Box<SpanData>),
    /// Send everything queued, then answer.
    Flush(SyncSender<()>),
}

/// Fields that log lines carry but exported spans must not: an intent key is rendered from
/// argument values (`refund:8812:49.00`), so a span exports it only as
/// `intentgate.key_hash`. The OpenTelemetry layer turns every field of a span or an event
/// into an attribute; these are taken out before a span leaves the process.
const LOG_ONLY_FIELDS: [&str; 2] = ["key", "first_key"];

/// `span` without the [`LOG_ONLY_FIELDS`], on the span and on each of its events.
fn without_log_only_fields(span: &mut SpanData) {
    let exported =
        |attribute: &opentelemetry::KeyValue| !LOG_ONLY_FIELDS.contains(&attribute.key.as_str());
    span.attributes.retain(exported);
    for event in &mut span.events.events {
        event.attributes.retain(exported);
    }
}

/// A span processor with a bounded queue that never blocks the thread that ends a span:
/// full means dropped and counted. One thread exports batches of at most
/// [`BATCH_SPANS_MAX`] spans, at least every [`BATCH_DELAY`].
struct BoundedBatch {
    queue: SyncSender<Command>,
    /// The export thread, joined at shutdown.
    worker: Mutex<Option<JoinHandle<()>>>,
    shut_down: AtomicBool,
}

impl std::fmt::Debug for BoundedBatch {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("BoundedBatch")
            .finish_non_exhaustive()
    }
}

impl BoundedBatch {
    fn new<E: SpanExporter + 'static>(exporter: E, queue_spans_max: usize) -> BoundedBatch {
        let (queue, receiver) = sync_channel(queue_spans_max);
        let worker = thread::Builder::new()
            .name("intentgate-traces".to_owned())
            .spawn(move || export_loop(exporter, receiver))
            .expect("the traces thread starts");
        BoundedBatch {
            queue,
            worker: Mutex::new(Some(worker)),
            shut_down: AtomicBool::new(false),
        }
    }

    /// Asks the export thread to send what is queued and waits for it, at most `timeout`.
    fn flush(&self, timeout: Duration) -> OTelSdkResult {
        let (done, finished) = sync_channel(1);
        // A full queue: the flush request waits for room, as long as the timeout allows.
        let deadline = Instant::now() + timeout;
        let mut request = Command::Flush(done);
        loop {
            match self.queue.try_send(request) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return Err(OTelSdkError::AlreadyShutdown),
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return Err(OTelSdkError::Timeout(timeout));
                    }
                    request = back;
                    thread::sleep(Duration::from_millis(10));
                }
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        finished
            .recv_timeout(remaining)
            .map_err(|_| OTelSdkError::Timeout(timeout))
    }
}

impl SpanProcessor for BoundedBatch {
    fn on_start(
        &self,
        _span: &mut opentelemetry_sdk::trace::Span,
        _context: &opentelemetry::Context,
    ) {
    }

    fn on_end(&self, mut span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        without_log_only_fields(&mut span);
        match self.queue.try_send(Command::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                intentgate_gate::trace::spans_dropped().inc();
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.flush(EXPORT_TIMEOUT)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let flushed = self.flush(timeout);
        // The thread ends once every sender is gone; this processor holds the last one
        // until it is dropped, so the thread is left to end with the process.
        drop(self.worker.lock().map(|mut worker| worker.take()));
        flushed
    }
}

/// The export thread: collects spans into batches and exports each one as it fills or
/// when [`BATCH_DELAY`] has passed since its first span.
fn export_loop<E: SpanExporter>(exporter: E, receiver: Receiver<Command>) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH_SPANS_MAX);
    let mut first_at: Option<Instant> = None;
    loop {
        let wait = match first_at {
            Some(at) => BATCH_DELAY.saturating_sub(at.elapsed()),
            None => BATCH_DELAY,
        };
        match receiver.recv_timeout(wait) {
            Ok(Command::Span(span)) => {
                batch.push(*span);
                first_at.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH_SPANS_MAX {
                    export(&exporter, &mut batch);
                    first_at = None;
                }
            }
            Ok(Command::Flush(done)) => {
                export(&exporter, &mut batch);
                first_at = None;
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                export(&exporter, &mut batch);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                export(&exporter, &mut batch);
                return;
            }
        }
    }
}

/// Exports `batch` (emptying it); a failed export is lost, as the collector's own retry
/// advice would only grow the queue: the spans are counted as dropped.
fn export<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::take(batch);
    let count = spans.len() as u64;
    if block_on(exporter.export(spans)).is_err() {
        intentgate_gate::trace::spans_dropped().inc_by(count);
    }
}

/// Runs `future` to its end on this thread (the exporter's blocking client finishes its
/// request within the first poll).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(thread::current())).into();
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn off_unless_a_collector_is_named() {
        let none = settings(&env_of(&[]), &TelemetryConfig::default()).unwrap();
        assert_eq!(none, None);
        let disabled = settings(
            &env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ]),
            &TelemetryConfig::default(),
        )
        .unwrap();
        assert_eq!(disabled, None);
    }

    #[test]
    fn the_standard_variables_win_over_the_config() {
        let config = TelemetryConfig {
            endpoint: Some("http://collector:4318/".to_owned()),
            headers: BTreeMap::from([("x-team".to_owned(), "payments".to_owned())]),
            service_name: Some("gateway-eu".to_owned()),
        };
        let from_config = settings(&env_of(&[]), &config).unwrap().unwrap();
        assert_eq!(from_config.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(from_config.service_name, "gateway-eu");
        let from_env = settings(
            &env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "x-honeycomb-team=a%20key,x-team=refunds",
                ),
                ("OTEL_SERVICE_NAME", "gw"),
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ]),
            &config,
        )
        .unwrap()
        .unwrap();
        assert_eq!(from_env.endpoint, "http://other:4318/v1/traces");
        assert_eq!(from_env.headers["x-honeycomb-team"], "a key");
        assert_eq!(from_env.headers["x-team"], "refunds");
        assert_eq!(from_env.service_name, "gw");
        assert_eq!(
            from_env.sampler,
            ("parentbased_traceidratio".to_owned(), Some(0.25))
        );
        let traces_only = settings(
            &env_of(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom")]),
            &config,
        )
        .unwrap()
        .unwrap();
        assert_eq!(traces_only.endpoint, "http://t:4318/custom");
    }

    /// An exporter that says when an export has started, holds it until the test lets it
    /// go, and counts what it got.
    #[derive(Debug)]
    struct Held {
        started: Mutex<std::sync::mpsc::Sender<()>>,
        release: Mutex<Receiver<()>>,
        exported: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl SpanExporter for Held {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.started.lock().unwrap().send(());
            let _ = self.release.lock().unwrap().recv();
            self.exported.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    #[test]
    fn a_stuck_export_never_blocks_the_span_that_ends_and_what_does_not_fit_is_counted() {
        use opentelemetry::trace::{Span as _, Tracer as _};

        // Room for every release the test sends, so sending one never waits for an export.
        let (release, released) = sync_channel(16);
        let (export_started, started) = std::sync::mpsc::channel();
        let exported = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let exporter = Held {
            started: Mutex::new(export_started),
            release: Mutex::new(released),
            exported: exported.clone(),
        };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BoundedBatch::new(exporter, 2))
            .build();
        let tracer = provider.tracer("test");
        tracer.start("first").end();
        // The first span's export starts and is held.
        let flusher = {
            let provider = provider.clone();
            thread::spawn(move || provider.force_flush())
        };
        // Waits for the export to be held, rather than for a time that a slow machine may
        // not keep.
        started
            .recv_timeout(Duration::from_secs(30))
            .expect("the first span's export starts");
        let dropped_before = intentgate_gate::trace::spans_dropped().get();
        // Ending spans must not wait for the held export: were it to, they would wait for
        // ever, so they end on a thread of their own, watched with a generous bound.
        let (ended, spans_ended) = std::sync::mpsc::channel();
        let ending = {
            let tracer = provider.tracer("test");
            thread::spawn(move || {
                for _ in 0..5 {
                    tracer.start("while stuck").end();
                }
                let _ = ended.send(());
            })
        };
        spans_ended
            .recv_timeout(Duration::from_secs(30))
            .expect("ending spans waited for the held export");
        ending.join().unwrap();
        // Two fit the queue; the flush request waits for room behind them.
        assert_eq!(
            intentgate_gate::trace::spans_dropped().get() - dropped_before,
            3
        );
        for _ in 0..16 {
            release.send(()).unwrap();
        }
        let _ = flusher.join();
        assert!(exported.load(Ordering::SeqCst) >= 1);
    }

    #[test]
    fn settings_that_cant_be_are_errors_that_name_the_variable() {
        let endpoint = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
        for (name, value) in [
            ("OTEL_TRACES_SAMPLER", "sometimes"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ] {
            let pairs: &'static [(&str, &str)] =
                Box::leak(vec![endpoint[0], (name, value)].into_boxed_slice());
            let error = settings(&env_of(pairs), &TelemetryConfig::default()).unwrap_err();
            assert!(error.contains(name), "{error}");
        }
    }
}

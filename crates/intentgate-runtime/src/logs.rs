//! Logging: the format an operator picks, the filter that keeps `info` readable, and text log
//! fields that callers can't forge.
//!
//! **What `info` shows.** A call that goes well writes nothing at `info`; state changes that
//! need a person (an intent left unknown by a sweep, a conflict, a switched-off tool, an
//! alert) do. Two dependencies would drown them out, so the filter is adjusted here:
//!
//! - rmcp writes lines of its own for every MCP request at `info` (a service started and
//!   finished per Streamable HTTP request). Unless `RUST_LOG` names rmcp, it is held at
//!   `warn` ([`RMCP_DIRECTIVE_DEFAULT`]); `RUST_LOG=info,rmcp=debug` shows them again.
//! - rmcp logs an `ERROR` ("fail to response message", or "failed to send pending response
//!   during drain" when the session is closing) whenever an MCP client gave up on a call
//!   before its answer was ready (a client timeout, a closed response stream). That is
//!   normal operation: the call itself finished, and a repeat gets its outcome.
//!   [`AbandonedCalls`] replaces exactly those two events with a `debug` line of target
//!   [`ABANDONED_TARGET`], and lets every other rmcp error through.
//!
//! **Fields callers can't forge.** Log lines carry values that callers chose: a tenant, an
//! intent key or id, a tool name from a URL, argument values, header values, error messages
//! that quote them. Written as they are into a text log, a tenant
//! `evil status=admin_override` reads as a second field, and a value with a line break or a
//! terminal escape writes a line of its own. So the text format writes every field through
//! [`QuotedFields`]: a value that is a plain token (printable ASCII without spaces, quotes,
//! `=` or backslashes) as it is, anything else in double quotes with quotes, backslashes,
//! line breaks, control and invisible characters escaped. It covers every event and span
//! field of every crate, whichever way the field was recorded (`%`, `?` or a plain value), so
//! no call site can forget it. The message itself is written unquoted, with control and
//! invisible characters escaped, so it can't break a line either; callers' values belong in
//! fields, not in the message text.
//!
//! JSON logs need none of this: JSON escapes every string.

use std::fmt;
use std::io::{self, IsTerminal};
use std::sync::{Arc, OnceLock};

use opentelemetry::trace::TraceContextExt;
use tracing::field::{Field, Visit};
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};
use tracing_core::callsite::Callsite;
use tracing_core::dispatcher::WeakDispatch;
use tracing_core::field::FieldSet;
use tracing_core::metadata::Kind;
use tracing_core::subscriber::Interest;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// Log filter when `RUST_LOG` is unset: only what an operator must see, and what a
/// long-running command says when it starts (its port, ledger and admin API).
const LOG_FILTER_DEFAULT: &str = "warn,intentgate::startup=info";
/// rmcp's level when `RUST_LOG` does not name rmcp: at `info` it writes lines for every MCP
/// request, which an operator asking for `info` means to be about the gateway.
const RMCP_DIRECTIVE_DEFAULT: &str = "rmcp=warn";
/// The environment variable that picks the log format: `text` (the default) or `json`.
pub const LOG_FORMAT_ENV: &str = "INTENTGATE_LOG_FORMAT";
/// The environment variable that filters log lines.
pub const LOG_FILTER_ENV: &str = "RUST_LOG";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event, with its spans' fields, every field value a plain
    /// token or quoted ([`QuotedFields`]).
    Text,
    /// One JSON object per line: the event's fields at the top level, the current span's
    /// fields (a call's `tool`, `key` and `tenant`) under `span`.
    Json,
}

/// The log format [`LOG_FORMAT_ENV`] asks for; unset or empty is text.
fn log_format() -> Result<LogFormat, String> {
    let value = match std::env::var(LOG_FORMAT_ENV) {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => return Ok(LogFormat::Text),
        Err(std::env::VarError::NotUnicode(value)) => value.to_string_lossy().into_owned(),
    };
    match value.trim() {
        "" | "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!(
            "{LOG_FORMAT_ENV}={other:?} is not a log format; use `text` (the default) or `json`"
        )),
    }
}

/// The filter [`LOG_FILTER_ENV`] asks for: unset or empty is [`LOG_FILTER_DEFAULT`];
/// otherwise its directives, with rmcp held at `warn` unless one of them names rmcp or they
/// ask for no more than `warn` anyway. A value that is not a filter is an error that quotes
/// it.
fn log_filter() -> Result<EnvFilter, String> {
    let value = match std::env::var(LOG_FILTER_ENV) {
        Ok(value) => value,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(value)) => value.to_string_lossy().into_owned(),
    };
    filter_from(&value)
        .map_err(|error| format!("{LOG_FILTER_ENV}={value:?} is not a log filter: {error}"))
}

/// [`log_filter`] of the text `directives`.
fn filter_from(directives: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    let directives = directives.trim();
    if directives.is_empty() {
        return EnvFilter::builder().parse(LOG_FILTER_DEFAULT);
    }
    let filter = EnvFilter::builder().parse(directives)?;
    // Only ever quieter: `RUST_LOG=error` or `off` keeps rmcp as quiet as the rest.
    let verbose = default_level(directives).is_some_and(|level| level > LevelFilter::WARN);
    if names_rmcp(directives) || !verbose {
        return Ok(filter);
    }
    Ok(filter.add_directive(
        RMCP_DIRECTIVE_DEFAULT
            .parse()
            .expect("the rmcp directive is a valid directive"),
    ))
}

/// The level the comma-separated `directives` give every target they don't name: their
/// bare level (`info` in `info,intentgate_gate=debug`), if they have one.
fn default_level(directives: &str) -> Option<LevelFilter> {
    directives
        .split(',')
        .filter_map(|directive| directive.trim().parse::<LevelFilter>().ok())
        .next_back()
}

/// True when one of the comma-separated `directives` is about rmcp's targets: `rmcp`,
/// `rmcp=debug`, `rmcp::service[...]=info`.
fn names_rmcp(directives: &str) -> bool {
    directives.split(',').any(|directive| {
        let target = directive
            .trim()
            .split(['[', '='])
            .next()
            .unwrap_or_default();
        target == "rmcp" || target.starts_with("rmcp::")
    })
}

/// Installs the process's logger: stderr, filtered by [`log_filter`], in [`log_format`].
/// Either variable set to what it can't be is an error that says so; nothing is installed.
///
/// With a `tracer` (traces are on, `telemetry.rs`), spans of intentgate's crates are also
/// exported through it; log lines are then filtered on their own, and leave out the phase
/// spans (`intentgate_gate::trace::PHASE_TARGET`), so they read as they do without traces.
pub fn init(tracer: Option<opentelemetry_sdk::trace::Tracer>) -> Result<(), String> {
    let format = log_format()?;
    let filter = log_filter()?;
    // Logs go to stderr so that stdout stays the command's output (a table or JSON).
    match tracer {
        None => subscriber(format, filter, io::stderr).init(),
        Some(tracer) => traced_subscriber(format, filter, io::stderr, tracer).init(),
    }
    Ok(())
}

/// True when text lines may carry ANSI colours: stderr is a terminal and `NO_COLOR` is not
/// set. Lines redirected to a file or a pipe (a service's journal, `2> gateway.log`) stay
/// plain text.
fn colours_on_stderr() -> bool {
    io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// The log lines' layer, writing to `writer` in `format`.
fn lines<S, W>(format: LogFormat, writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => lines
            .fmt_fields(QuotedFields)
            .with_ansi(colours_on_stderr())
            .boxed(),
        LogFormat::Json => lines
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_ansi(false)
            .boxed(),
    }
}

/// [`subscriber`] that also exports intentgate's spans through `tracer`: every span of
/// intentgate's crates at `info`, `warn` or `error`, whatever `RUST_LOG` says (it filters
/// log lines only), and their `warn` and `error` events as span events.
fn traced_subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    tracer: opentelemetry_sdk::trace::Tracer,
) -> impl Subscriber + Send + Sync
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    let not_a_phase = tracing_subscriber::filter::filter_fn(|metadata| {
        metadata.target() != intentgate_gate::trace::PHASE_TARGET
    });
    let exported = tracing_subscriber::filter::filter_fn(|metadata| {
        let ours = metadata.target().starts_with("intentgate");
        let level = *metadata.level();
        ours && ((metadata.is_span() && level <= Level::INFO) || level <= Level::WARN)
    });
    let traces = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_error_records_to_exceptions(false)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(exported);
    let dispatch = Arc::new(OnceLock::new());
    let lines = match format {
        LogFormat::Text => lines(format, writer),
        // JSON lines also carry the trace and span ids of the call they are about.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .fmt_fields(JsonFields::new())
            .event_format(WithTraceIds {
                inner: tracing_subscriber::fmt::format()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_span_list(false),
                dispatch: dispatch.clone(),
            })
            .with_ansi(false)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(AbandonedCalls::default())
        .with(lines.with_filter(filter.and(not_a_phase)))
        .with(traces)
        .with(DispatchOf(dispatch))
}

/// The dispatcher a subscriber was registered as, for [`WithTraceIds`]. Weak: the
/// dispatcher owns its layers.
type DispatchCell = Arc<OnceLock<WeakDispatch>>;

/// The layer that notes the dispatcher it is part of in a [`DispatchCell`].
struct DispatchOf(DispatchCell);

impl<S: Subscriber> Layer<S> for DispatchOf {
    fn on_register_dispatch(&self, dispatch: &Dispatch) {
        let _ = self.0.set(dispatch.downgrade());
    }
}

/// A JSON event format that puts `trace_id` and `span_id` (of the span the line is about,
/// as exported) first in each line written inside a traced span, so logs and traces join
/// on them.
struct WithTraceIds<F> {
    inner: F,
    dispatch: DispatchCell,
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    N: for<'writer> FormatFields<'writer> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ids = context.lookup_current().and_then(|span| {
            let dispatch = self.dispatch.get()?.upgrade()?;
            let otel = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
            let span_context = otel.span().span_context().clone();
            span_context.is_valid().then(|| {
                (
                    span_context.trace_id().to_string(),
                    span_context.span_id().to_string(),
                )
            })
        });
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(context, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(context, Writer::new(&mut line), event)?;
        // The JSON format writes one object per event, never an empty one.
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

/// The logger [`init`] installs when traces are off, writing to `writer`.
fn subscriber<W>(format: LogFormat, filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::registry()
        .with(filter)
        .with(AbandonedCalls::default())
        .with(lines(format, writer))
}

/// The target of the `debug` line that stands for rmcp's error about an abandoned call:
/// `RUST_LOG=info,intentgate::abandoned=debug` shows them.
pub const ABANDONED_TARGET: &str = "intentgate::abandoned";
/// Its message.
const ABANDONED_MESSAGE: &str =
    "an MCP client went away before its answer was sent; the call itself finished";
/// The rmcp events that stand for an abandoned call: their target, level and messages. rmcp
/// writes one when the answer of a finished call can't be sent because the client's end is
/// gone (its response stream, or stdout of a stdio client): the first while the session
/// runs, the second while it is closing.
const RMCP_UNSENT_TARGET: &str = "rmcp::service";
const RMCP_UNSENT_LEVEL: Level = Level::ERROR;
const RMCP_UNSENT_MESSAGES: [&str; 2] = [
    "fail to response message",
    "failed to send pending response during drain",
];

/// The callsite of the line [`AbandonedCalls`] writes: a `debug` event of
/// [`ABANDONED_TARGET`] with a message and rmcp's `error`.
struct AbandonedCallsite;

static ABANDONED_CALLSITE: AbandonedCallsite = AbandonedCallsite;

static ABANDONED_METADATA: Metadata<'static> = Metadata::new(
    "abandoned MCP call",
    ABANDONED_TARGET,
    Level::DEBUG,
    Some(file!()),
    Some(line!()),
    Some(module_path!()),
    FieldSet::new(
        &["message", "error"],
        tracing_core::identify_callsite!(&ABANDONED_CALLSITE),
    ),
    Kind::EVENT,
);

impl Callsite for AbandonedCallsite {
    // Never registered: its one event is dispatched directly, after asking the dispatcher
    // whether it is enabled.
    fn set_interest(&self, _interest: Interest) {}

    fn metadata(&self) -> &Metadata<'_> {
        &ABANDONED_METADATA
    }
}

/// The layer that turns rmcp's `ERROR` about an abandoned MCP call into a `debug` line of
/// the gateway's own (module documentation). It matches those two events by target, level
/// and message, so every other rmcp error is written as rmcp wrote it.
#[derive(Default)]
struct AbandonedCalls {
    /// The dispatcher this layer is part of, where the `debug` line goes. Weak: the
    /// dispatcher owns this layer.
    dispatch: OnceLock<WeakDispatch>,
}

impl<S> Layer<S> for AbandonedCalls
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_register_dispatch(&self, dispatch: &Dispatch) {
        let _ = self.dispatch.set(dispatch.downgrade());
    }

    fn event_enabled(&self, event: &Event<'_>, _context: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if metadata.target() != RMCP_UNSENT_TARGET || *metadata.level() != RMCP_UNSENT_LEVEL {
            return true;
        }
        let mut fields = UnsentFields::default();
        event.record(&mut fields);
        if !fields
            .message
            .as_deref()
            .is_some_and(|message| RMCP_UNSENT_MESSAGES.contains(&message))
        {
            return true;
        }
        if let Some(dispatch) = self.dispatch.get().and_then(WeakDispatch::upgrade)
            && dispatch.enabled(&ABANDONED_METADATA)
        {
            let error = fields.error.unwrap_or_default();
            let names = ABANDONED_METADATA.fields();
            let message_field = names.field("message").expect("the callsite has `message`");
            let error_field = names.field("error").expect("the callsite has `error`");
            let values: [(&Field, Option<&dyn tracing::Value>); 2] = [
                (&message_field, Some(&ABANDONED_MESSAGE)),
                (&error_field, Some(&error.as_str())),
            ];
            // The event is dispatched here rather than through a macro: a macro would look
            // up the current dispatcher, which is busy with rmcp's event. `value_set` is
            // what every `tracing` macro expands to, so it is as stable as they are.
            dispatch.event(&Event::new(&ABANDONED_METADATA, &names.value_set(&values)));
        }
        false
    }
}

/// The message and `error` of an rmcp event.
#[derive(Default)]
struct UnsentFields {
    message: Option<String>,
    error: Option<String>,
}

impl UnsentFields {
    fn keep(&mut self, field: &Field, text: impl FnOnce() -> String) {
        match field.name() {
            "message" => self.message = Some(text()),
            "error" => self.error = Some(text()),
            _ => {}
        }
    }
}

impl Visit for UnsentFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, || value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%error` and the message arrive here, their Debug being their Display.
        self.keep(field, || format!("{value:?}"));
    }
}

/// The text format's field formatter (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct QuotedFields;

impl<'writer> FormatFields<'writer> for QuotedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = QuotingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct QuotingVisitor<'writer> {
    writer: Writer<'writer>,
    /// No field written yet: no separating space.
    first: bool,
    result: fmt::Result,
}

impl QuotingVisitor<'_> {
    fn write(&mut self, field: &Field, text: &str) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // Metadata of events from the `log` crate, already shown by the event formatter.
        if name.starts_with("log.") {
            return;
        }
        if !self.first {
            self.result = self.writer.write_char(' ');
        }
        self.first = false;
        self.result = self.result.and_then(|()| {
            if name == "message" {
                return write_escaped(&mut self.writer, text);
            }
            let name = name.strip_prefix("r#").unwrap_or(name);
            self.writer.write_str(name)?;
            self.writer.write_char('=')?;
            write_value(&mut self.writer, text)
        });
    }
}

impl Visit for QuotingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // The error and its causes, as one value.
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        self.write(field, &text);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` fields arrive here too, their Debug being their Display.
        self.write(field, &format!("{value:?}"));
    }
}

/// True for a value written as it is: printable ASCII with no space, `"`, `=` or `\`, so it
/// can't be read as more than one field or end a quoted one.
fn is_plain(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b'"' | b'=' | b'\\'))
}

/// Characters that print as nothing, or reorder the text around them (bidirectional
/// overrides and isolates, zero-width characters, line and paragraph separators): written
/// as is they make a log line read differently from what it holds.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Writes `c`, or its escape when it is a control or invisible character.
fn write_char_escaped(writer: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => writer.write_str("\\n"),
        '\r' => writer.write_str("\\r"),
        '\t' => writer.write_str("\\t"),
        c if c.is_control() || is_invisible(c) => write!(writer, "\\u{{{:x}}}", u32::from(c)),
        c => writer.write_char(c),
    }
}

/// A message: as it is, but with control and invisible characters escaped.
fn write_escaped(writer: &mut impl fmt::Write, text: &str) -> fmt::Result {
    text.chars().try_for_each(|c| write_char_escaped(writer, c))
}

/// A field value: as it is when plain, otherwise quoted with `"` and `\` escaped too.
fn write_value(writer: &mut impl fmt::Write, text: &str) -> fmt::Result {
    if is_plain(text) {
        return writer.write_str(text);
    }
    writer.write_char('"')?;
    for c in text.chars() {
        match c {
            '"' => writer.write_str("\\\"")?,
            '\\' => writer.write_str("\\\\")?,
            c => write_char_escaped(writer, c)?,
        }
    }
    writer.write_char('"')
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Where the test subscriber writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes through the text format, without time or colours.
    fn logged(log: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::INFO)
            .fmt_fields(QuotedFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    /// The JSON lines the process's logger writes for `log` under the filter `directives`
    /// (what `RUST_LOG` would hold).
    fn logged_as_json(directives: &str, log: impl FnOnce()) -> Vec<serde_json::Value> {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let filter = filter_from(directives).unwrap();
        let subscriber = subscriber(LogFormat::Json, filter, move || writer.clone());
        tracing::subscriber::with_default(subscriber, log);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// `(level, target, message)` of each line.
    fn summary(lines: &[serde_json::Value]) -> Vec<(String, String, String)> {
        lines
            .iter()
            .map(|line| {
                (
                    line["level"].as_str().unwrap().to_owned(),
                    line["target"].as_str().unwrap().to_owned(),
                    line["message"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    fn line(level: &str, target: &str, message: &str) -> (String, String, String) {
        (level.to_owned(), target.to_owned(), message.to_owned())
    }

    /// rmcp's per-request lines, and a line of the gateway's, at each level.
    fn rmcp_and_gateway_lines() {
        tracing::info!(target: "rmcp::service", "Service initialized as server");
        tracing::debug!(target: "rmcp::service", "received request");
        tracing::info!(target: "intentgate::startup", "listening");
        tracing::info!(target: "intentgate_gate::gate", "a gateway line");
        tracing::warn!(target: "rmcp::service", "timed out draining in-flight responses");
    }

    #[test]
    fn rmcp_is_held_at_warn_unless_the_filter_names_it() {
        assert_eq!(
            summary(&logged_as_json("", rmcp_and_gateway_lines)),
            [
                line("INFO", "intentgate::startup", "listening"),
                line(
                    "WARN",
                    "rmcp::service",
                    "timed out draining in-flight responses"
                ),
            ],
            "unset: warn, and the startup lines"
        );
        assert_eq!(
            summary(&logged_as_json("info", rmcp_and_gateway_lines)),
            [
                line("INFO", "intentgate::startup", "listening"),
                line("INFO", "intentgate_gate::gate", "a gateway line"),
                line(
                    "WARN",
                    "rmcp::service",
                    "timed out draining in-flight responses"
                ),
            ]
        );
        for names_rmcp in [
            "info,rmcp=info",
            "rmcp=debug,info",
            "info,rmcp::service=debug",
        ] {
            let lines = summary(&logged_as_json(names_rmcp, rmcp_and_gateway_lines));
            assert!(
                lines.contains(&line(
                    "INFO",
                    "rmcp::service",
                    "Service initialized as server"
                )),
                "{names_rmcp}: {lines:?}"
            );
        }
        let lines = summary(&logged_as_json("info,rmcp=debug", rmcp_and_gateway_lines));
        assert!(lines.contains(&line("DEBUG", "rmcp::service", "received request")));
        // Asking for less than warn is not made louder for rmcp.
        assert!(logged_as_json("off", rmcp_and_gateway_lines).is_empty());
        assert!(logged_as_json("error", rmcp_and_gateway_lines).is_empty());
        assert_eq!(
            summary(&logged_as_json(
                "error,intentgate_gate=info",
                rmcp_and_gateway_lines
            )),
            [line("INFO", "intentgate_gate::gate", "a gateway line")]
        );
        // A target that merely starts with the same letters is not rmcp.
        assert!(!names_rmcp("rmcpx=debug"));
    }

    /// An MCP client that gave up on a call made rmcp write an ERROR at any level; the
    /// gateway had done nothing wrong.
    #[test]
    fn an_abandoned_mcp_call_is_a_debug_line_and_other_rmcp_errors_stay_errors() {
        let abandoned_and_failed = || {
            let span = tracing::info_span!("serve_inner");
            let _entered = span.enter();
            tracing::error!(target: "rmcp::service", error = %"channel closed", "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", error = %"channel closed", "fail to response message");
            tracing::error!(target: "rmcp::service", e = %"broken pipe", "fail to close sink");
            tracing::error!(target: "rmcp::service", error = %"task panicked", "response send task failed during drain");
            tracing::error!(target: "another::crate", error = %"channel closed", "failed to send pending response during drain");
        };
        let others = [
            line("ERROR", "rmcp::service", "fail to close sink"),
            line(
                "ERROR",
                "rmcp::service",
                "response send task failed during drain",
            ),
            line(
                "ERROR",
                "another::crate",
                "failed to send pending response during drain",
            ),
        ];
        for directives in ["", "info", "info,rmcp=debug"] {
            assert_eq!(
                summary(&logged_as_json(directives, abandoned_and_failed)),
                others,
                "{directives:?}"
            );
        }
        for directives in ["info,intentgate::abandoned=debug", "debug"] {
            let lines = logged_as_json(directives, abandoned_and_failed);
            let abandoned = line("DEBUG", ABANDONED_TARGET, ABANDONED_MESSAGE);
            let mut expected = vec![abandoned.clone(), abandoned];
            expected.extend(others.iter().cloned());
            assert_eq!(summary(&lines), expected, "{directives:?}");
            for debug in &lines[..2] {
                assert_eq!(debug["error"], "channel closed");
                assert_eq!(debug["span"]["name"], "serve_inner", "it keeps rmcp's span");
            }
        }
    }

    #[test]
    fn a_filter_that_does_not_parse_is_an_error() {
        assert!(filter_from("info,rmcp=loud").is_err());
        assert!(filter_from("  ").is_ok());
    }

    /// The `name=value` fields of a logfmt text, values unquoted and unescaped.
    fn fields(text: &str) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        let mut chars = text.chars().peekable();
        while chars.peek().is_some() {
            let mut token = String::new();
            let mut quoted = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => quoted = !quoted,
                    '\\' if quoted => match chars.next() {
                        Some('n') => token.push('\n'),
                        Some(other) => token.push(other),
                        None => {}
                    },
                    ' ' if !quoted => break,
                    c => token.push(c),
                }
            }
            if let Some((name, value)) = token.split_once('=') {
                fields.push((name.to_owned(), value.to_owned()));
            }
        }
        fields
    }

    /// A tenant header `evil status=admin_override` was written unquoted and read as a
    /// second field, `status`.
    #[test]
    fn a_value_with_a_space_and_an_equals_sign_stays_one_quoted_field() {
        let text = logged(|| {
            let tenant = "evil status=admin_override";
            let span = tracing::info_span!("call", tool = %"refund_order", tenant = %tenant);
            let _entered = span.enter();
            tracing::info!(attempt = 1, "upstream answered");
        });
        assert!(
            text.contains(r#"call{tool=refund_order tenant="evil status=admin_override"}"#),
            "{text}"
        );
        assert!(text.contains("upstream answered attempt=1"), "{text}");
        let span_fields = text.split_once('{').unwrap().1.split_once('}').unwrap().0;
        assert_eq!(
            fields(span_fields),
            [
                ("tool".to_owned(), "refund_order".to_owned()),
                ("tenant".to_owned(), "evil status=admin_override".to_owned())
            ]
        );
    }

    #[test]
    fn a_value_with_a_line_break_stays_on_its_line() {
        let forged = "evil\nINFO intentgate: admin override granted status=admin_override";
        let text = logged(|| {
            tracing::warn!(tenant = %forged, "call refused");
            tracing::warn!(tenant = forged, "call refused");
            tracing::warn!(tenant = ?forged, "call refused");
        });
        assert_eq!(text.lines().count(), 3, "{text}");
        for line in text.lines() {
            let (_, after) = line.split_once("call refused ").unwrap();
            assert_eq!(fields(after).len(), 1, "{line}");
            assert!(after.starts_with("tenant=\""), "{line}");
        }
        assert!(
            text.lines().next().unwrap().ends_with(
                r#"tenant="evil\nINFO intentgate: admin override granted status=admin_override""#
            ),
            "{text}"
        );
    }

    #[test]
    fn quotes_backslashes_escapes_and_invisible_characters_are_escaped() {
        let text = logged(|| {
            tracing::info!(tenant = %"a\" status=\"x\\", key = %"\u{1b}[31mred\r\u{202e}", "seen");
        });
        assert!(
            text.contains(r#"tenant="a\" status=\"x\\" key="\u{1b}[31mred\r\u{202e}""#),
            "{text}"
        );
        assert!(!text.contains('\u{1b}') && !text.contains('\r') && !text.contains('\u{202e}'));
        assert_eq!(
            fields(text.split_once("seen ").unwrap().1.trim_end())[0],
            ("tenant".to_owned(), "a\" status=\"x\\".to_owned())
        );
    }

    #[test]
    fn a_message_can_not_break_its_line_and_plain_values_are_not_quoted() {
        let text = logged(|| {
            tracing::info!(
                tool = "refund_order",
                attempt = 2_u64,
                done = true,
                empty = "",
                "{}",
                "first\nsecond"
            );
        });
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.trim_end()
                .ends_with(r#"first\nsecond tool=refund_order attempt=2 done=true empty="""#),
            "{text}"
        );
    }

    #[test]
    fn an_error_is_one_value_with_its_causes() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("ledger unavailable")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::other("disk\nfull"));
        let text = logged(|| {
            tracing::error!(
                error = &error as &(dyn std::error::Error + 'static),
                "failed"
            );
        });
        assert!(
            text.contains(r#"failed error="ledger unavailable: disk\nfull""#),
            "{text}"
        );
    }
}

//! Logging: the format an operator picks, and text log fields that callers can't forge.
//!
//! Log lines carry values that callers chose: a tenant, an intent key or id, a tool name from
//! a URL, argument values, header values, error messages that quote them. Written as they
//! are into a text log, a tenant `evil status=admin_override` reads as a second field, and a
//! value with a line break or a terminal escape writes a line of its own. So the text format
//! writes every field through [`QuotedFields`]: a value that is a plain token (printable
//! ASCII without spaces, quotes, `=` or backslashes) as it is, anything else in double quotes
//! with quotes, backslashes, line breaks, control and invisible characters escaped. It covers
//! every event and span field of every crate, whichever way the field was recorded (`%`, `?`
//! or a plain value), so no call site can forget it. The message itself is written unquoted,
//! with control and invisible characters escaped, so it can't break a line either; callers'
//! values belong in fields, not in the message text.
//!
//! JSON logs need none of this: JSON escapes every string.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Log filter when `RUST_LOG` is unset: only what an operator must see, and what a
/// long-running command says when it starts (its port, ledger and admin API).
const LOG_FILTER_DEFAULT: &str = "warn,intentgate::startup=info";
/// The environment variable that picks the log format: `text` (the default) or `json`.
pub const LOG_FORMAT_ENV: &str = "INTENTGATE_LOG_FORMAT";

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
pub fn log_format() -> Result<LogFormat, String> {
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

/// Installs the process's logger: stderr, filtered by `RUST_LOG`, in `format`.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(LOG_FILTER_DEFAULT));
    // Logs go to stderr so that stdout stays the command's output (a table or JSON).
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.fmt_fields(QuotedFields).init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_ansi(false)
            .init(),
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

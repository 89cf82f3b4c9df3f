//! Config errors as an operator reads them: where, what is wrong, and what to change.
//!
//! Every error carries the file, line and column, a message that says what is wrong, and a
//! fix that says what to write instead. `ConfigErrors` displays them as one block, one error
//! per entry, in the `FILE:LINE:COLUMN: message` form that editors and CI logs link to.
//!
//! **Invariant:** no message or fix contains the value of an environment variable. They
//! quote only text written in the file (where `${NAME}` references are still unresolved).

use std::fmt;

use intentgate_core::text::printable;

use crate::source_map::{Position, Segment, SourceMap, segments};

/// One thing wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (its path as given, or the name passed to `load_str`).
    pub source: String,
    /// 1-based; 0 when the error is about the whole file (it can't be read).
    pub line: u64,
    /// 1-based; 0 when the line is 0.
    pub column: u64,
    /// What is wrong.
    pub message: String,
    /// What to change.
    pub fix: String,
}

/// Every error found in one config file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors {
    pub errors: Vec<ConfigError>,
}

impl ConfigErrors {
    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.errors.iter()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: ", printable(&self.source))?;
        } else {
            write!(
                f,
                "{}:{}:{}: ",
                printable(&self.source),
                self.line,
                self.column
            )?;
        }
        write!(
            f,
            "{}\n  fix: {}",
            printable(&self.message),
            printable(&self.fix)
        )
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.errors.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// A `${NAME}` reference whose variable is unset, in a config loaded with secrets optional
/// (`Secrets::Optional`): a warning for the commands that only read, an error for the ones
/// that call upstreams. Holds names only, never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsetVariable {
    /// The variable (`STRIPE_SECRET_KEY`).
    pub name: String,
    /// Where it is used (`upstreams.stripe.headers.Authorization`).
    pub field: String,
    /// The file, as in [`ConfigError::source`].
    pub source: String,
    /// 1-based line and column of the value that uses it.
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for UnsetVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: warning: environment variable `{}` (used in `{}`) is not set; serve, \
             mcp, smoke and reconcile refuse to start without it\n  fix: export {} where the \
             gateway runs (commands that only read the config or the ledger don't need it)",
            printable(&self.source),
            self.line,
            self.column,
            printable(&self.name),
            printable(&self.field),
            printable(&self.name),
        )
    }
}

/// Collects errors for one file, each at a position.
pub struct Errors<'a> {
    source: &'a str,
    errors: Vec<ConfigError>,
}

impl<'a> Errors<'a> {
    pub fn new(source: &'a str) -> Errors<'a> {
        Errors {
            source,
            errors: Vec::new(),
        }
    }

    pub fn push(&mut self, at: Position, message: impl Into<String>, fix: impl Into<String>) {
        self.errors.push(ConfigError {
            source: self.source.to_owned(),
            line: at.line,
            column: at.column,
            message: message.into(),
            fix: fix.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// The file the errors are about, as given.
    pub fn source(&self) -> &str {
        self.source
    }

    /// The errors in file order, at most [`ERRORS_MAX`](crate::limits::ERRORS_MAX) of them.
    pub fn finish(mut self) -> ConfigErrors {
        // Stable: two errors at one position keep the order the checks found them in.
        self.errors.sort_by_key(|error| (error.line, error.column));
        self.errors.dedup();
        let total = self.errors.len();
        if total > crate::limits::ERRORS_MAX {
            self.errors.truncate(crate::limits::ERRORS_MAX);
            let at = Position::default();
            let omitted = total - crate::limits::ERRORS_MAX;
            self.push(
                at,
                format!("{omitted} more errors not shown"),
                "fix the errors above and check again",
            );
        }
        ConfigErrors {
            errors: self.errors,
        }
    }

    /// Records what the YAML parser refused in `text`: a syntax error (with `map` absent) or
    /// a value of the wrong shape for its field.
    pub fn parser(&mut self, error: &serde_saphyr::Error, text: &str, map: Option<&SourceMap>) {
        let error = original(error);
        let mut at = error
            .location()
            .map(|location| Position {
                line: location.line(),
                column: location.column(),
            })
            .unwrap_or_default();
        if let (serde_saphyr::Error::SerdeMissingField { field, .. }, Some(map)) = (error, map) {
            // Reported at the mapping's start, naming the tool when it is one.
            let container = map.mapping_at(at);
            let segments = segments(&container);
            let owner = match (
                container.as_slice(),
                map.text(&[segments.as_slice(), &[Segment::Key("name")]].concat()),
            ) {
                ([tools, _], Some(name)) if tools == "tools" => format!("tool `{name}`"),
                ([], _) => "the config".to_owned(),
                (path, _) => format!("`{}`", field_name(path)),
            };
            self.push(
                map.value(&segments),
                format!("{owner} has no `{field}`"),
                format!("add {}", example(field)),
            );
            return;
        }
        let field = map.map(|map| map.path_at(at)).unwrap_or_default();
        let (message, fix) = describe(error, &field);
        if message.contains("tab") {
            // The scanner notices a tab while finishing the line before it; point at the tab.
            at = first_indenting_tab(text, at).unwrap_or(at);
        }
        self.push(at, message, fix);
    }
}

/// The first tab in the indentation of a line at or after `from`.
fn first_indenting_tab(text: &str, from: Position) -> Option<Position> {
    text.lines()
        .enumerate()
        .skip(usize::try_from(from.line).ok()?.saturating_sub(1))
        .find_map(|(index, line)| {
            let indentation = &line[..line.len() - line.trim_start().len()];
            indentation.find('\t').map(|column| Position {
                line: index as u64 + 1,
                column: column as u64 + 1,
            })
        })
}

/// The error itself, without the snippet or alias wrappers the parser adds.
fn original(error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match error.without_snippet() {
        serde_saphyr::Error::AliasError { error, .. } => original(error),
        other => other,
    }
}

/// A message and a fix for a parser error. `field` is the path of the value the parser was
/// reading (empty when unknown).
fn describe(error: &serde_saphyr::Error, field: &[String]) -> (String, String) {
    use serde_saphyr::{Error, MessageFormatter, UserMessageFormatter};
    let name = field_name(field);
    match error {
        Error::SerdeUnknownField {
            field: unknown,
            expected,
            ..
        } => {
            let message = match container(field) {
                Some(container) => format!("unknown field `{unknown}` in {container}"),
                None => format!("unknown field `{unknown}`"),
            };
            let fix = match closest(unknown, expected) {
                Some(suggestion) => {
                    format!("did you mean `{suggestion}`? Rename `{unknown}` to `{suggestion}`")
                }
                None => format!("remove `{unknown}`; the fields here are {}", list(expected)),
            };
            (message, fix)
        }
        Error::SerdeUnknownVariant {
            variant, expected, ..
        } => (
            format!("`{name}` can't be `{variant}`"),
            format!("write one of {}", list(expected)),
        ),
        Error::DuplicateMappingKey { key, .. } => {
            let key = key.as_deref().unwrap_or("this key");
            (
                format!("`{key}` is written twice in the same mapping"),
                format!("keep one `{key}` and remove the other"),
            )
        }
        Error::InvalidScalar { .. }
        | Error::SerdeInvalidType { .. }
        | Error::SerdeInvalidValue { .. }
        | Error::NullIntoString { .. }
        | Error::InvalidBooleanStrict { .. }
        | Error::SerdeInvalidLength { .. } => {
            let problem = UserMessageFormatter.format_message(error);
            let last = field.last().map(String::as_str).unwrap_or("value");
            (
                format!("`{name}` has the wrong type: {problem}"),
                format!("write {}", example_in(field, last)),
            )
        }
        // A list or a mapping where a string belongs (`name: [a, b]`): the type, not the
        // YAML, is wrong.
        Error::Unexpected { expected, .. } if !field.is_empty() && expected.contains("scalar") => {
            let last = field.last().map(String::as_str).unwrap_or("value");
            (
                format!("`{name}` has the wrong type: expected a {expected}"),
                format!("write {}", example_in(field, last)),
            )
        }
        Error::Budget { .. } => (
            UserMessageFormatter.format_message(error).into_owned(),
            format!(
                "a config is at most {} levels deep with at most {} aliases; split shared \
                 parts with fewer anchors, or flatten the nesting",
                crate::limits::CONFIG_DEPTH_MAX,
                crate::limits::CONFIG_ALIASES_MAX
            ),
        ),
        Error::MultipleDocuments { .. } => (
            "the file holds more than one YAML document".to_owned(),
            "remove the `---` separators: one config file is one document".to_owned(),
        ),
        _ => {
            let message = UserMessageFormatter.format_message(error);
            let fix = if message.contains("tab") {
                "indent with spaces; YAML does not allow tabs for indentation"
            } else {
                "correct the YAML syntax here or just above: check the indentation, and that \
                 every quote, `[` and `{` is closed"
            };
            (format!("invalid YAML: {message}"), fix.to_owned())
        }
    }
}

/// `tools[2].timeout_ms` for the path `tools/2/timeout_ms`.
fn field_name(field: &[String]) -> String {
    let mut name = String::new();
    for segment in field {
        if segment.parse::<usize>().is_ok() {
            name.push_str(&format!("[{segment}]"));
        } else {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(segment);
        }
    }
    if name.is_empty() {
        "this value".to_owned()
    } else {
        name
    }
}

/// The mapping that holds the field at `field` ("tools[2]"), for unknown-field messages.
fn container(field: &[String]) -> Option<String> {
    let parent = &field[..field.len().checked_sub(1)?];
    (!parent.is_empty()).then(|| format!("`{}`", field_name(parent)))
}

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The expected name closest to a misspelt one, when it is close enough to be the intent.
fn closest<'n>(written: &str, expected: &[&'n str]) -> Option<&'n str> {
    expected
        .iter()
        .map(|name| (edit_distance(written, name), *name))
        .filter(|(distance, name)| {
            // A typo (`efect`), or the name without its unit (`timeout` for `timeout_ms`).
            *distance <= 2.max(name.len() / 4) || (written.len() >= 4 && name.starts_with(written))
        })
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance; field names are short, so the quadratic table is small.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

/// What to write for the field at `field`, whose last name is `last`: [`example`], except
/// where a budget's field shares its name with another's (a tool's `name`, a list's
/// `subject`, an alert's `per`, a list's `amount`).
fn example_in(field: &[String], last: &str) -> String {
    if !field.iter().any(|segment| segment == "budgets") {
        return example(last);
    }
    match last {
        "name" => "`name: per-order` (1 to 64 lowercase letters, digits, `_` or `-`)".to_owned(),
        "subject" => "`subject: \"{order_id}\"` (a template of the arguments, quoted)".to_owned(),
        "per" => "`per: tenant` (or tool, subject)".to_owned(),
        "amount" => "`amount: \"5000.00\"` (an exact decimal, quoted)".to_owned(),
        _ => example(last),
    }
}

/// What to write for a field, by its name: `timeout_ms: 10000 (a whole number of
/// milliseconds, without quotes or units)`.
fn example(field: &str) -> String {
    let (value, note) = match field {
        "timeout_ms" => (
            "10000",
            "a whole number of milliseconds, without quotes or units",
        ),
        "retry_budget" => ("2", "a whole number from 0 to 10"),
        "retention_days" => ("30", "a whole number of days"),
        "body_limit_bytes" => ("1048576", "a whole number of bytes"),
        "concurrency_limit" => ("256", "a whole number"),
        "shutdown_grace_ms" => ("30000", "a whole number of milliseconds"),
        "header_read_timeout_ms" => ("10000", "a whole number of milliseconds"),
        "body_read_timeout_ms" => ("10000", "a whole number of milliseconds"),
        "idle_timeout_ms" => ("60000", "a whole number of milliseconds"),
        "connection_limit" => ("4096", "a whole number"),
        "connection_limit_per_address" => ("1024", "a whole number"),
        "key_window_hours" => ("24", "a whole number of hours"),
        "retry_after_cap_ms" => ("5000", "a whole number of milliseconds"),
        "listen" => ("127.0.0.1:8080", "an IP address and a port"),
        "durability" => ("strict", "or relaxed"),
        "idempotency_key" => ("required", "or optional"),
        "effect" => ("side_effect", "or read, idempotent"),
        "executor" => ("client", "or gateway"),
        "mcp" => ("hidden", "or listed"),
        "method" => ("POST", "or GET, PUT, PATCH, DELETE"),
        "retry_rejected" | "honours_idempotency_keys" | "destructive" | "open_world" | "log" => {
            ("true", "or false")
        }
        "name" => ("refund_order", "letters, digits, `_`, `-` or `.`"),
        "description" => (
            "Refund part or all of an order.",
            "what the tool does, for the model",
        ),
        "input_schema" => (
            "{type: object, properties: {order_id: {type: string}}, required: [order_id]}",
            "a JSON Schema of the arguments",
        ),
        "call" => (
            "{upstream: payments, method: POST, path: /v1/refunds}",
            "the request that performs the tool",
        ),
        "upstream" => ("payments", "the name of an entry of `upstreams`"),
        "path" => ("/v1/refunds", "a path template"),
        "base_url" => ("https://api.example.com", "an http or https URL"),
        "found" => ("/data/0", "a JSON pointer"),
        "items" => ("/data", "a JSON pointer"),
        "next_cursor" => ("/next_cursor", "a JSON pointer"),
        "has_more" => ("/has_more", "a JSON pointer to a boolean"),
        "limit_max" => ("100", "a whole number, the provider's largest page"),
        "subject" => (
            "[/payment_intent, /charge/customer]",
            "a JSON pointer, or a list of them",
        ),
        "intent_key" => ("/metadata/intent_key", "a JSON pointer"),
        "external_id" => ("/id", "a JSON pointer"),
        "record" => ("/order_id", "a JSON pointer into the provider's record"),
        "compare" => ("decimal", "or text"),
        "match" => (
            "{order_id: {record: /order_id}, amount: {record: /amount}}",
            "the arguments that pair a provider record with an intent, each with where the record holds it",
        ),
        "fields" => (
            "{intent_key: /metadata/intent_key, external_id: /id}",
            "pointers inside one listed record",
        ),
        "tools" => ("[{name: ..., effect: ..., call: ...}]", "a list of tools"),
        "headers" | "query" | "messages" | "upstreams" | "owners" => ("{name: value}", "a mapping"),
        "not_found_statuses" => ("[404]", "a list of HTTP statuses"),
        "approval" => (
            "{when: amount > 100.00}",
            "a mapping with optional `when`, `tenants` and `deadline`",
        ),
        "when" => ("amount > 100.00", "a condition over the arguments, as text"),
        "tenants" => ("[acme, globex]", "a list of tenant names"),
        "deadline" => ("4h", "a whole number and a unit: s, m, h or d"),
        "budgets" => (
            "[{name: per-order, per: subject, subject: \"{order_id}\", window: 24h, count: 2}]",
            "a list of budgets",
        ),
        "window" => ("1h", "a whole number and a unit: s, m, h or d"),
        "count" => ("10", "a whole number of intents per window, at least 1"),
        "amount_argument" => ("amount", "the argument that holds each call's amount"),
        "beyond" => ("approval", "or refuse"),
        _ => return format!("`{field}: ...` with a value of the type the JSON Schema gives"),
    };
    format!("`{field}: {value}` ({note})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_fields_get_a_suggestion() {
        assert_eq!(closest("efect", &["name", "effect", "key"]), Some("effect"));
        assert_eq!(
            closest("timeout", &["timeout_ms", "key"]),
            Some("timeout_ms")
        );
        assert_eq!(closest("colour", &["name", "effect"]), None);
    }

    #[test]
    fn display_is_one_entry_per_error_with_an_indented_fix() {
        let errors = ConfigErrors {
            errors: vec![
                ConfigError {
                    source: "a.yaml".into(),
                    line: 3,
                    column: 5,
                    message: "bad\nthing".into(),
                    fix: "do this".into(),
                },
                ConfigError {
                    source: "a.yaml".into(),
                    line: 0,
                    column: 0,
                    message: "unreadable".into(),
                    fix: "check the path".into(),
                },
            ],
        };
        assert_eq!(
            errors.to_string(),
            "a.yaml:3:5: bad\\nthing\n  fix: do this\na.yaml: unreadable\n  fix: check the path"
        );
    }
}

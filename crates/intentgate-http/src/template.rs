//! Request templates: how a tool's arguments become a path, query and header values and a
//! JSON or form body (and, through the same renderer, an MCP tool's `arguments`).
//!
//! Syntax (`intentgate_core::placeholder`, shared with intent keys): literal text with
//! placeholders `{name}` (an argument), `{a.b}` (a field of an object argument; `{items.0}` an
//! element of an array), `{name:.N}` (an exact decimal with N places, refused rather than
//! rounded when the value has more), `{name:minor(USD)}` or `{name:minor(currency)}` (the
//! exact decimal in a currency's minor units as an integer, `49.00` USD as `4900`, refused
//! when it has more places than the currency), and the gateway's own values `{intent_key}`,
//! `{idempotency_key}` and `{intent_id}`. `{{` and `}}` are literal braces. A gateway value's name wins over an argument of the same name.
//!
//! Each place a value lands has its own renderer, because each has its own way to be abused:
//!
//! - **Path**: every value is percent-encoded as exactly one path segment (everything but
//!   RFC 3986's unreserved `A-Za-z0-9-._~` is encoded), so `../`, `?`, `#`, `%2F`, spaces and
//!   newlines in an argument can never change which URL is called. An empty value and a
//!   segment that is `.` or `..` are refused: URL parsers remove dot segments, and an empty
//!   segment calls another route.
//! - **Text** (query values, header values): the raw text; the HTTP layer encodes query
//!   values. A query value that is exactly one placeholder of an object or array argument
//!   is written in bracket notation under the query's name (`filters[status]=open`,
//!   `expand[]=charge`). A header value with CR, LF or another control character is refused, naming the
//!   argument that holds it: it could add a header or end the head.
//! - **JSON body**: a string that is exactly one placeholder becomes the argument's JSON value
//!   with its type (a number stays a number; a decimal format such as `{amount:.2}` gives the
//!   string `"49.00"`, which a JSON number can't carry); any other string is rendered as
//!   text. Objects and arrays are rendered member by member; object keys are literal. A
//!   whole-value minor-units placeholder becomes a JSON integer.
//! - **Form body** (`body_format: form`): the JSON body, rendered as above, written as
//!   `application/x-www-form-urlencoded` in Stripe's bracket notation ([`form_encode`]).
//!
//! A value that is exactly one placeholder for an absent (or null) optional argument is left
//! out: the object member, query parameter or header is omitted. Anywhere else a missing
//! argument is an error that names it. In the body a null argument stays `null`, since there
//! JSON can say so. A lookup leaves nothing out: its query is its filter, so a placeholder
//! without a value fails the lookup rather than widen it ([`Absent::Refuse`]).
//!
//! Templates are parsed once, when the tools are loaded; [`check_template`] and
//! [`check_body_template`] also check that every placeholder names an argument of the tool
//! (or a gateway value), so that a bad config is refused before the gateway starts.
//!
//! Header templates may hold secrets (resolved from `${ENV}` when the config is loaded), so
//! neither a [`Template`]'s `Debug` output nor any [`TemplateError`] contains template text.

use std::fmt;

use intentgate_core::currency::{CurrencyError, CurrencySource};
use intentgate_core::decimal::DecimalError;
use intentgate_core::placeholder::{self, Format, Piece, Steps, SyntaxError, ValueError};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value};

/// Characters a path value keeps as they are: RFC 3986's unreserved set. Everything else,
/// `/`, `?`, `#`, `%`, spaces and control characters included, is percent-encoded, so a
/// value always stays inside its one segment.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The names of the gateway's own values, usable in every template of a tool.
pub const GATEWAY_VALUE_NAMES: [&str; 3] = ["intent_key", "idempotency_key", "intent_id"];

/// What a value that is exactly one placeholder does when the call has no value for it (a
/// query parameter or header of an HTTP request, a member of an MCP tool's arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absent {
    /// It is left out: an optional argument of a call, a list's cursor on the first page.
    LeaveOut,
    /// The request is not built: a lookup's query is its filter, and a filter left out
    /// would list everything (whose first record is somebody else's effect).
    Refuse,
}

/// The gateway's own values for one request. Any of them may be absent: reads have no intent,
/// lookups may run without the idempotency key, and most tools have no application intent id.
#[derive(Debug, Clone, Copy, Default)]
pub struct GatewayValues<'a> {
    /// The intent's key (`refund:8812:49.00`).
    pub intent_key: Option<&'a str>,
    /// The idempotency key sent to the provider for this intent.
    pub idempotency_key: Option<&'a str>,
    /// The application's intent id.
    pub intent_id: Option<&'a str>,
}

/// Everything a template may refer to for one request.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// The tool's validated arguments (a JSON object).
    pub arguments: &'a Value,
    pub gateway: GatewayValues<'a>,
}

/// Why a template can't be used, or can't be rendered for some arguments. No message holds
/// template text: header templates may hold secrets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template is malformed.
    #[error("{reason} at character {position}")]
    Syntax {
        position: usize,
        reason: &'static str,
    },
    /// A placeholder refers to something the request can't have.
    #[error(
        "placeholder {{{name}}} names neither an argument of the tool nor a gateway value \
         ({{intent_key}}, {{idempotency_key}}, {{intent_id}})"
    )]
    UnknownName { name: String },
    /// A placeholder refers to a gateway value where none exist (list requests).
    #[error("placeholder {{{name}}} is not available here; this template may use only {allowed}")]
    NotAvailableHere { name: String, allowed: String },
    /// A path template must be a path and nothing else.
    #[error("{0}")]
    BadPath(&'static str),
    /// A body template's problem, with where in the body it is.
    #[error("body at `{pointer}`: {error}")]
    InBody {
        pointer: String,
        error: Box<TemplateError>,
    },
    /// The call lacks an argument the request needs.
    #[error("the request needs argument `{0}`, which the call did not provide")]
    MissingArgument(String),
    /// The gateway has no such value for this call (e.g. `{idempotency_key}` on a read).
    #[error("the request needs {{{0}}}, which the gateway does not have for this call")]
    MissingGatewayValue(&'static str),
    /// An argument's value can't be written where the template puts it.
    #[error("argument `{name}` can't be placed in the request: {reason}")]
    BadValue { name: String, reason: &'static str },
    /// An argument declared as a decimal is not one, or has more places than declared.
    #[error("argument `{name}`: {error}")]
    Decimal { name: String, error: DecimalError },
    /// An amount in minor units can't be written: its currency is unknown or missing, or it
    /// has more places than the currency has.
    #[error("argument `{name}` in minor units: {error}")]
    Currency {
        name: String,
        error: Box<CurrencyError>,
    },
    /// A minor-units placeholder takes its currency from something that is not an argument.
    #[error(
        "placeholder {{{name}}} takes its currency from `{currency}`, which is not an argument \
         of the tool; name the argument that holds the ISO 4217 code, or write the code, \
         e.g. {{{name}:minor(USD)}}"
    )]
    UnknownCurrencyArgument { name: String, currency: String },
    /// A form body is a set of named fields: its template must be a mapping.
    #[error(
        "a form body is a mapping of field names to values (`amount: \"{{amount:minor(USD)}}\"`); \
         write `body` as a mapping, or use `body_format: json`"
    )]
    FormNotMapping,
    /// An empty path segment would call another route (`/orders/` instead of `/orders/7`).
    #[error("argument `{0}` is empty, and an empty path segment would call another URL")]
    EmptyPathSegment(String),
    /// A dot segment is removed by URL parsers, moving the request to another URL.
    #[error(
        "the path would hold the segment `{0}`, which URL parsers remove; refused so that an \
         argument can't change which URL is called"
    )]
    DotSegment(String),
    /// CR or LF in a header value could add a header or end the request head. `name` is the
    /// argument (or gateway value) that holds it.
    #[error(
        "`{name}` holds a line break (CR or LF), which header `{header}` can't carry (it could \
         add a header or end the request); refused, nothing was sent"
    )]
    HeaderLineBreak { header: String, name: String },
    /// Other control characters are not allowed in header values either.
    #[error(
        "`{name}` holds a control character, which header `{header}` can't carry; refused, \
         nothing was sent"
    )]
    HeaderControl { header: String, name: String },
    /// The rendered header is not a valid HTTP header value (a backstop: every value was
    /// checked on its own first).
    #[error("header `{0}` would not be a valid header value; refused, nothing was sent")]
    BadHeaderValue(String),
}

impl TemplateError {
    /// The argument (its dotted path) the error is about, when it is about one.
    pub fn argument(&self) -> Option<&str> {
        match self {
            TemplateError::MissingArgument(name)
            | TemplateError::EmptyPathSegment(name)
            | TemplateError::BadValue { name, .. }
            | TemplateError::Decimal { name, .. }
            | TemplateError::Currency { name, .. } => Some(name),
            TemplateError::InBody { error, .. } => error.argument(),
            _ => None,
        }
    }
}

/// One of the gateway's own values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GatewayValue {
    IntentKey,
    IdempotencyKey,
    IntentId,
}

impl GatewayValue {
    fn from_name(name: &str) -> Option<GatewayValue> {
        match name {
            "intent_key" => Some(GatewayValue::IntentKey),
            "idempotency_key" => Some(GatewayValue::IdempotencyKey),
            "intent_id" => Some(GatewayValue::IntentId),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            GatewayValue::IntentKey => "intent_key",
            GatewayValue::IdempotencyKey => "idempotency_key",
            GatewayValue::IntentId => "intent_id",
        }
    }

    fn get<'a>(self, gateway: &GatewayValues<'a>) -> Option<&'a str> {
        match self {
            GatewayValue::IntentKey => gateway.intent_key,
            GatewayValue::IdempotencyKey => gateway.idempotency_key,
            GatewayValue::IntentId => gateway.intent_id,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Placeholder {
    Argument {
        /// The field path: `["customer", "id"]` for `{customer.id}`.
        path: Vec<String>,
        format: Option<Format>,
    },
    Gateway(GatewayValue),
}

impl Placeholder {
    fn name(&self) -> String {
        match self {
            Placeholder::Argument { path, .. } => path.join("."),
            Placeholder::Gateway(value) => value.name().to_owned(),
        }
    }

    /// The error for a value the call does not have.
    fn missing(&self) -> TemplateError {
        match self {
            Placeholder::Argument { .. } => TemplateError::MissingArgument(self.name()),
            Placeholder::Gateway(value) => TemplateError::MissingGatewayValue(value.name()),
        }
    }

    /// The placeholder's value as JSON, or `None` when the call does not have it.
    fn resolve<'a>(&self, values: &Values<'a>) -> Option<Resolved<'a>> {
        match self {
            Placeholder::Argument { path, .. } => {
                placeholder::resolve(values.arguments, path, Steps::FieldsAndIndexes)
                    .map(Resolved::Json)
            }
            Placeholder::Gateway(value) => value.get(&values.gateway).map(Resolved::Gateway),
        }
    }

    /// The placeholder's value as text. `Ok(None)` when the call does not have it, or (with
    /// `null_is_absent`) when it is null.
    fn text(
        &self,
        values: &Values<'_>,
        null_is_absent: bool,
    ) -> Result<Option<String>, TemplateError> {
        let Some(resolved) = self.resolve(values) else {
            return Ok(None);
        };
        let value = match resolved {
            Resolved::Gateway(text) => return Ok(Some(text.to_owned())),
            Resolved::Json(value) => value,
        };
        if value.is_null() && null_is_absent {
            return Ok(None);
        }
        let format = match self {
            Placeholder::Argument { format, .. } => format.as_ref(),
            Placeholder::Gateway(_) => None,
        };
        placeholder::render_value(value, format, values.arguments, Steps::FieldsAndIndexes)
            .map(Some)
            .map_err(|error| match error {
                ValueError::Decimal(error) => TemplateError::Decimal {
                    name: self.name(),
                    error,
                },
                ValueError::Currency(error) => TemplateError::Currency {
                    name: self.name(),
                    error: Box::new(error),
                },
                ValueError::NoText(reason) => TemplateError::BadValue {
                    name: self.name(),
                    reason,
                },
            })
    }

    /// The placeholder's value in a JSON body when it is the whole string: the argument's
    /// own JSON value, a JSON integer for minor units, or a string for a decimal format and
    /// for gateway values.
    fn json(&self, values: &Values<'_>) -> Result<Option<Value>, TemplateError> {
        match (self, self.resolve(values)) {
            (_, None) => Ok(None),
            (Placeholder::Argument { format: None, .. }, Some(Resolved::Json(value))) => {
                Ok(Some(value.clone()))
            }
            (
                Placeholder::Argument {
                    format: Some(Format::MinorUnits(_)),
                    ..
                },
                _,
            ) => Ok(self.text(values, false)?.map(|text| {
                // Integer text, which a JSON number holds exactly (arbitrary precision).
                text.parse::<serde_json::Number>()
                    .map_or(Value::String(text), Value::Number)
            })),
            _ => Ok(self.text(values, false)?.map(Value::String)),
        }
    }

    /// The argument a minor-units placeholder takes its currency from, if it takes it from
    /// one.
    fn currency_argument(&self) -> Option<&[String]> {
        match self {
            Placeholder::Argument {
                format: Some(Format::MinorUnits(source @ CurrencySource::Argument(_))),
                ..
            } => source.argument(),
            _ => None,
        }
    }
}

enum Resolved<'a> {
    Json(&'a Value),
    Gateway(&'a str),
}

#[derive(Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Placeholder(Placeholder),
}

/// A parsed text template (a path, a query value or a header value).
#[derive(Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl fmt::Debug for Template {
    /// Placeholder names only: the literal text of a header template may be a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Template")
            .field(
                "placeholders",
                &self
                    .placeholders()
                    .map(Placeholder::name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Template {
    /// Parses a template; checks syntax only.
    pub fn parse(template: &str) -> Result<Template, TemplateError> {
        let syntax = |SyntaxError { position, reason }| TemplateError::Syntax { position, reason };
        let mut parts = Vec::new();
        for piece in placeholder::parse(template).map_err(syntax)? {
            parts.push(match piece {
                Piece::Literal(text) => Part::Literal(text),
                Piece::Placeholder(found) => Part::Placeholder(gateway_or_argument(found)?),
            });
        }
        Ok(Template { parts })
    }

    /// Refuses a placeholder that names neither one of `argument_names` (the top-level
    /// properties of the tool's input schema) nor a gateway value.
    pub fn check(&self, argument_names: &[&str]) -> Result<(), TemplateError> {
        self.check_names(argument_names, true)
    }

    /// Like [`Template::check`]; with `gateway_allowed` false, gateway values are refused too
    /// (list requests have no intent).
    pub(crate) fn check_names(
        &self,
        names: &[&str],
        gateway_allowed: bool,
    ) -> Result<(), TemplateError> {
        for placeholder in self.placeholders() {
            if let Some(currency) = placeholder.currency_argument()
                && !names.contains(&currency[0].as_str())
            {
                return Err(TemplateError::UnknownCurrencyArgument {
                    name: placeholder.name(),
                    currency: currency.join("."),
                });
            }
            match placeholder {
                Placeholder::Argument { path, .. } if names.contains(&path[0].as_str()) => {}
                Placeholder::Gateway(_) if gateway_allowed => {}
                Placeholder::Gateway(value) => {
                    return Err(TemplateError::NotAvailableHere {
                        name: value.name().to_owned(),
                        allowed: allowed_list(names),
                    });
                }
                Placeholder::Argument { .. } if !gateway_allowed => {
                    return Err(TemplateError::NotAvailableHere {
                        name: placeholder.name(),
                        allowed: allowed_list(names),
                    });
                }
                Placeholder::Argument { .. } => {
                    return Err(TemplateError::UnknownName {
                        name: placeholder.name(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Refuses a path template that is not a plain absolute path: it must start with `/`, and
    /// its literal text may hold only characters a path keeps as they are (a query belongs
    /// under `query`, never in the path).
    pub fn check_path(&self) -> Result<(), TemplateError> {
        match self.parts.first() {
            Some(Part::Literal(text)) if text.starts_with('/') => {}
            _ => return Err(TemplateError::BadPath("a path must start with `/`")),
        }
        for part in &self.parts {
            if let Part::Literal(text) = part
                && !text.bytes().all(is_path_literal_byte)
            {
                return Err(TemplateError::BadPath(
                    "a path may hold only letters, digits and -._~!$&'()*+,;=:@/% outside its \
                     placeholders; put query parameters under `query`",
                ));
            }
        }
        Ok(())
    }

    /// Renders a path: each value percent-encoded as one segment.
    pub fn render_path(&self, values: &Values<'_>) -> Result<String, TemplateError> {
        let mut path = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => path.push_str(text),
                Part::Placeholder(placeholder) => {
                    let text = placeholder
                        .text(values, false)?
                        .ok_or_else(|| placeholder.missing())?;
                    if text.is_empty() {
                        return Err(TemplateError::EmptyPathSegment(placeholder.name()));
                    }
                    path.extend(utf8_percent_encode(&text, PATH_SEGMENT));
                }
            }
        }
        // Unreserved characters include `.`, so a value `..` is still `..` here.
        if let Some(segment) = path.split('/').find(|segment| is_dot_segment(segment)) {
            return Err(TemplateError::DotSegment(segment.to_owned()));
        }
        Ok(path)
    }

    /// Renders text (a query value). `Ok(None)` when the template is exactly one placeholder
    /// whose value the call does not have (or is null): the parameter is then left out.
    pub fn render_text(&self, values: &Values<'_>) -> Result<Option<String>, TemplateError> {
        if let [Part::Placeholder(placeholder)] = self.parts.as_slice() {
            return placeholder.text(values, true);
        }
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(literal) => text.push_str(literal),
                Part::Placeholder(placeholder) => {
                    let value = placeholder
                        .text(values, false)?
                        .ok_or_else(|| placeholder.missing())?;
                    text.push_str(&value);
                }
            }
        }
        Ok(Some(text))
    }

    /// Renders a query parameter named `name`: its `(name, value)` pairs. A template that is
    /// exactly one placeholder of an object or array argument is written in bracket notation
    /// under the name (`filters[status]=open`, `expand[]=charge`); any other renders as
    /// [`Template::render_text`] does (`Ok(None)`: the parameter is left out).
    pub fn render_query(
        &self,
        name: &str,
        values: &Values<'_>,
    ) -> Result<Option<Vec<(String, String)>>, TemplateError> {
        if let Some(placeholder @ Placeholder::Argument { format: None, .. }) =
            self.single_placeholder()
            && let Some(Resolved::Json(value @ (Value::Object(_) | Value::Array(_)))) =
                placeholder.resolve(values)
        {
            let fields = form_fields(name, value)?;
            return Ok(Some(
                fields
                    .into_iter()
                    .map(|field| (field.raw_name(), field.value))
                    .collect(),
            ));
        }
        Ok(self
            .render_text(values)?
            .map(|text| vec![(name.to_owned(), text)]))
    }

    /// Renders a header value, refusing line breaks and other control characters (a tab is
    /// allowed, as in HTTP). Each value is checked on its own, so the error names the
    /// argument that holds the character; `header` is the header's name, for the error.
    pub fn render_header(
        &self,
        header: &str,
        values: &Values<'_>,
    ) -> Result<Option<String>, TemplateError> {
        for placeholder in self.placeholders() {
            // An absent value is render_text's to refuse or leave out, below.
            let Some(text) = placeholder.text(values, true)? else {
                continue;
            };
            if text.contains(['\r', '\n']) {
                return Err(TemplateError::HeaderLineBreak {
                    header: header.to_owned(),
                    name: placeholder.name(),
                });
            }
            if text.chars().any(|c| c != '\t' && c.is_control()) {
                return Err(TemplateError::HeaderControl {
                    header: header.to_owned(),
                    name: placeholder.name(),
                });
            }
        }
        let Some(text) = self.render_text(values)? else {
            return Ok(None);
        };
        if text.chars().any(|c| c != '\t' && c.is_control()) {
            return Err(TemplateError::BadHeaderValue(header.to_owned()));
        }
        Ok(Some(text))
    }

    /// The error for a template that is exactly one placeholder without a value: it names
    /// the placeholder (only ever called for such a template).
    pub(crate) fn missing(&self) -> TemplateError {
        self.single_placeholder()
            .expect("only a template of one placeholder renders to nothing")
            .missing()
    }

    /// True when a placeholder is the application's intent id (`{intent_id}`).
    pub(crate) fn uses_intent_id(&self) -> bool {
        self.placeholders()
            .any(|placeholder| *placeholder == Placeholder::Gateway(GatewayValue::IntentId))
    }

    /// The field paths of the arguments the template renders (`["customer", "id"]` for
    /// `{customer.id}`), in order: what a request built from it reveals of the arguments.
    pub fn argument_paths(&self) -> impl Iterator<Item = &[String]> {
        self.placeholders()
            .filter_map(|placeholder| match placeholder {
                Placeholder::Argument { path, .. } => Some(path.as_slice()),
                Placeholder::Gateway(_) => None,
            })
    }

    fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.parts.iter().filter_map(|part| match part {
            Part::Placeholder(placeholder) => Some(placeholder),
            Part::Literal(_) => None,
        })
    }

    /// The whole template when it is exactly one placeholder.
    fn single_placeholder(&self) -> Option<&Placeholder> {
        match self.parts.as_slice() {
            [Part::Placeholder(placeholder)] => Some(placeholder),
            _ => None,
        }
    }

    /// The text of a template without placeholders (braces unescaped).
    fn literal_text(&self) -> Option<String> {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => Some(text.as_str()),
                Part::Placeholder(_) => None,
            })
            .collect()
    }
}

/// A parsed JSON body template.
#[derive(Clone, PartialEq, Eq)]
pub struct BodyTemplate {
    root: Node,
}

impl fmt::Debug for BodyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyTemplate").finish_non_exhaustive()
    }
}

#[derive(Clone, PartialEq, Eq)]
enum Node {
    /// JSON without placeholders, sent as it is.
    Literal(Value),
    /// A string that is exactly one placeholder: the value keeps its JSON type.
    Whole(Placeholder),
    /// A string with placeholders and other text.
    Text(Template),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl BodyTemplate {
    /// Parses every string of a JSON body template; checks syntax only. An error says where
    /// in the body it is.
    pub fn parse(template: &Value) -> Result<BodyTemplate, TemplateError> {
        let mut pointer = String::new();
        let root = parse_node(template, &mut pointer)?;
        Ok(BodyTemplate { root })
    }

    /// Refuses a placeholder that names neither one of `names` nor (with `gateway_allowed`)
    /// a gateway value, saying where in the body it is.
    pub(crate) fn check_names(
        &self,
        names: &[&str],
        gateway_allowed: bool,
    ) -> Result<(), TemplateError> {
        let mut pointer = String::new();
        check_node(&self.root, names, gateway_allowed, &mut pointer)
    }

    /// Renders the body for one call.
    pub fn render(&self, values: &Values<'_>) -> Result<Value, TemplateError> {
        render_node(&self.root, values, Absent::LeaveOut)
    }

    /// Renders the body for one call; with [`Absent::Refuse`] a member that is exactly one
    /// placeholder without a value is an error rather than left out (a lookup's filter).
    pub fn render_with(&self, values: &Values<'_>, absent: Absent) -> Result<Value, TemplateError> {
        render_node(&self.root, values, absent)
    }

    /// True when the body can be a form: a mapping, or one placeholder (of an object
    /// argument, checked when rendered).
    pub(crate) fn can_be_form(&self) -> bool {
        matches!(self.root, Node::Object(_) | Node::Whole(_))
    }

    /// Renders the body as `application/x-www-form-urlencoded` in bracket notation (see
    /// [`form_encode`]).
    pub fn render_form(
        &self,
        values: &Values<'_>,
        absent: Absent,
    ) -> Result<String, TemplateError> {
        form_encode(&self.render_with(values, absent)?)
    }

    /// True when a placeholder anywhere in the body is the application's intent id.
    pub(crate) fn uses_intent_id(&self) -> bool {
        node_uses_intent_id(&self.root)
    }
}

fn node_uses_intent_id(node: &Node) -> bool {
    match node {
        Node::Literal(_) => false,
        Node::Whole(placeholder) => *placeholder == Placeholder::Gateway(GatewayValue::IntentId),
        Node::Text(template) => template.uses_intent_id(),
        Node::Array(items) => items.iter().any(node_uses_intent_id),
        Node::Object(members) => members
            .iter()
            .any(|(_, member)| node_uses_intent_id(member)),
    }
}

fn parse_node(template: &Value, pointer: &mut String) -> Result<Node, TemplateError> {
    let in_body = |error| TemplateError::InBody {
        pointer: pointer_or_root(pointer),
        error: Box::new(error),
    };
    Ok(match template {
        Value::String(text) => {
            let parsed = Template::parse(text).map_err(in_body)?;
            if let Some(placeholder) = parsed.single_placeholder() {
                Node::Whole(placeholder.clone())
            } else if let Some(literal) = parsed.literal_text() {
                Node::Literal(Value::String(literal))
            } else {
                Node::Text(parsed)
            }
        }
        Value::Array(items) => {
            let mut nodes = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                nodes.push(within(pointer, &index.to_string(), |pointer| {
                    parse_node(item, pointer)
                })?);
            }
            Node::Array(nodes)
        }
        Value::Object(members) => {
            let mut nodes = Vec::with_capacity(members.len());
            for (key, member) in members {
                let node = within(pointer, key, |pointer| parse_node(member, pointer))?;
                nodes.push((key.clone(), node));
            }
            Node::Object(nodes)
        }
        other => Node::Literal(other.clone()),
    })
}

fn check_node(
    node: &Node,
    names: &[&str],
    gateway_allowed: bool,
    pointer: &mut String,
) -> Result<(), TemplateError> {
    let in_body = |error, pointer: &String| TemplateError::InBody {
        pointer: pointer_or_root(pointer),
        error: Box::new(error),
    };
    match node {
        Node::Literal(_) => Ok(()),
        Node::Whole(placeholder) => {
            let template = Template {
                parts: vec![Part::Placeholder(placeholder.clone())],
            };
            template
                .check_names(names, gateway_allowed)
                .map_err(|error| in_body(error, pointer))
        }
        Node::Text(template) => template
            .check_names(names, gateway_allowed)
            .map_err(|error| in_body(error, pointer)),
        Node::Array(items) => items.iter().enumerate().try_for_each(|(index, item)| {
            within(pointer, &index.to_string(), |pointer| {
                check_node(item, names, gateway_allowed, pointer)
            })
        }),
        Node::Object(members) => members.iter().try_for_each(|(key, member)| {
            within(pointer, key, |pointer| {
                check_node(member, names, gateway_allowed, pointer)
            })
        }),
    }
}

fn render_node(node: &Node, values: &Values<'_>, absent: Absent) -> Result<Value, TemplateError> {
    match node {
        Node::Literal(value) => Ok(value.clone()),
        Node::Whole(placeholder) => placeholder
            .json(values)?
            .ok_or_else(|| placeholder.missing()),
        Node::Text(template) => {
            Ok(Value::String(template.render_text(values)?.expect(
                "a text node has more than one part, so it is never left out",
            )))
        }
        Node::Array(items) => items
            .iter()
            .map(|item| render_node(item, values, absent))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Node::Object(members) => {
            let mut object = Map::new();
            for (key, member) in members {
                // An optional argument the call left out leaves its member out.
                if let Node::Whole(placeholder) = member {
                    match placeholder.json(values)? {
                        Some(value) => {
                            object.insert(key.clone(), value);
                        }
                        None if absent == Absent::Refuse => return Err(placeholder.missing()),
                        None => {}
                    }
                    continue;
                }
                object.insert(key.clone(), render_node(member, values, absent)?);
            }
            Ok(Value::Object(object))
        }
    }
}

/// What a form field's name and value keep as they are: letters, digits and `*-._`; a space
/// becomes `+`, everything else `%XX` per UTF-8 byte (the form-urlencoded serializer's rule).
const FORM_KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// One step of a bracket-notation name after its first part.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FormStep {
    /// `[name]`: a member of an object.
    Member(String),
    /// `[0]`: an element of an array that holds objects or arrays.
    Index(usize),
    /// `[]`: an element of an array of scalars.
    Append,
}

/// One `name=value` field of a form or query, before encoding.
struct FormField {
    first: String,
    steps: Vec<FormStep>,
    value: String,
}

impl FormField {
    /// The name as text: `metadata[intent_key]`, `expand[]`, `items[0][price]`.
    fn raw_name(&self) -> String {
        let mut name = self.first.clone();
        for step in &self.steps {
            match step {
                FormStep::Member(member) => {
                    name.push('[');
                    name.push_str(member);
                    name.push(']');
                }
                FormStep::Index(index) => name.push_str(&format!("[{index}]")),
                FormStep::Append => name.push_str("[]"),
            }
        }
        name
    }

    /// `name=value`, each part of the name and the value encoded, the brackets that give the
    /// name its structure written as they are.
    fn encoded(&self) -> String {
        let mut text = form_encode_part(&self.first);
        for step in &self.steps {
            match step {
                FormStep::Member(member) => {
                    text.push('[');
                    text.push_str(&form_encode_part(member));
                    text.push(']');
                }
                FormStep::Index(index) => text.push_str(&format!("[{index}]")),
                FormStep::Append => text.push_str("[]"),
            }
        }
        text.push('=');
        text.push_str(&form_encode_part(&self.value));
        text
    }
}

fn form_encode_part(text: &str) -> String {
    // `%20` only ever stands for a space here: a `%` of the text is itself encoded (`%25`).
    utf8_percent_encode(text, FORM_KEPT)
        .to_string()
        .replace("%20", "+")
}

/// A rendered body as `application/x-www-form-urlencoded`, in the bracket notation Stripe
/// reads: `{"amount": 4900, "metadata": {"k": "v"}, "expand": ["charge"]}` is
/// `amount=4900&metadata[k]=v&expand[]=charge`. An array of scalars repeats `name[]`; an
/// array that holds objects or arrays numbers its elements (`items[0][price]=...`). A number
/// is its exact decimal text (as placeholders write numbers), a boolean `true` or `false`,
/// null an empty value (`name=`, which Stripe reads as "unset"); an empty object or array
/// writes nothing. Members are written sorted by name, whatever order the template or the
/// arguments gave them (JSON objects keep their members' order), so one intent's request is
/// the same bytes on every send.
pub fn form_encode(body: &Value) -> Result<String, TemplateError> {
    let Value::Object(members) = body else {
        return Err(TemplateError::FormNotMapping);
    };
    let mut fields = Vec::new();
    for (name, value) in by_name(members) {
        fields.extend(form_fields(name, value)?);
    }
    Ok(fields
        .iter()
        .map(FormField::encoded)
        .collect::<Vec<_>>()
        .join("&"))
}

/// An object's members sorted by name.
fn by_name(members: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
    sorted.sort_unstable_by_key(|(name, _)| *name);
    sorted
}

/// The fields `value` writes under `name`, in order.
fn form_fields(name: &str, value: &Value) -> Result<Vec<FormField>, TemplateError> {
    let mut fields = Vec::new();
    let mut steps = Vec::new();
    collect_form_fields(name, &mut steps, value, &mut fields)?;
    Ok(fields)
}

fn collect_form_fields(
    first: &str,
    steps: &mut Vec<FormStep>,
    value: &Value,
    fields: &mut Vec<FormField>,
) -> Result<(), TemplateError> {
    let leaf = |text: String, steps: &[FormStep], fields: &mut Vec<FormField>| {
        fields.push(FormField {
            first: first.to_owned(),
            steps: steps.to_vec(),
            value: text,
        });
    };
    match value {
        Value::Object(members) => {
            for (member, value) in by_name(members) {
                steps.push(FormStep::Member(member.clone()));
                collect_form_fields(first, steps, value, fields)?;
                steps.pop();
            }
        }
        Value::Array(items) => {
            let nested = items
                .iter()
                .any(|item| matches!(item, Value::Object(_) | Value::Array(_)));
            for (index, item) in items.iter().enumerate() {
                steps.push(if nested {
                    FormStep::Index(index)
                } else {
                    FormStep::Append
                });
                collect_form_fields(first, steps, item, fields)?;
                steps.pop();
            }
        }
        Value::Null => leaf(String::new(), steps, fields),
        Value::Number(number) => {
            // The exact decimal placeholders write (`4.9e1` is `49`); a number too long for
            // one as the caller wrote it.
            let text = placeholder::render_value(value, None, &Value::Null, Steps::FieldsOnly)
                .unwrap_or_else(|_| number.as_str().to_owned());
            leaf(text, steps, fields);
        }
        Value::String(text) => leaf(text.clone(), steps, fields),
        Value::Bool(flag) => leaf(flag.to_string(), steps, fields),
    }
    Ok(())
}

/// Runs `f` with `key` appended to the JSON pointer (escaped per RFC 6901).
fn within<T>(pointer: &mut String, key: &str, f: impl FnOnce(&mut String) -> T) -> T {
    let length = pointer.len();
    pointer.push('/');
    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
    let result = f(pointer);
    pointer.truncate(length);
    result
}

fn pointer_or_root(pointer: &str) -> String {
    if pointer.is_empty() {
        "/".to_owned()
    } else {
        pointer.to_owned()
    }
}

fn allowed_list(names: &[&str]) -> String {
    names
        .iter()
        .map(|name| format!("{{{name}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A gateway value when the placeholder is one's name (which wins over an argument of the
/// same name), else an argument.
fn gateway_or_argument(found: placeholder::Placeholder) -> Result<Placeholder, TemplateError> {
    let gateway = match found.path.as_slice() {
        [only] => GatewayValue::from_name(only),
        _ => None,
    };
    match gateway {
        Some(_) if found.format.is_some() => Err(TemplateError::Syntax {
            position: found.position,
            reason: "gateway values ({intent_key}, {idempotency_key}, {intent_id}) take no format",
        }),
        Some(value) => Ok(Placeholder::Gateway(value)),
        None => Ok(Placeholder::Argument {
            path: found.path,
            format: found.format,
        }),
    }
}

/// `.` and `..`, also written with `%2e`: URL parsers (WHATWG, RFC 3986) remove them.
fn is_dot_segment(segment: &str) -> bool {
    let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
    decoded == "." || decoded == ".."
}

/// RFC 3986 `pchar` and `/`, with `%` for escapes written by the operator.
fn is_path_literal_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&byte)
}

/// Checks a text template (path, query value or header value) when the config is loaded:
/// its syntax, and that every placeholder names one of `argument_names` (the top-level
/// properties of the tool's input schema) or a gateway value.
pub fn check_template(template: &str, argument_names: &[&str]) -> Result<(), TemplateError> {
    Template::parse(template)?.check(argument_names)
}

/// Checks a JSON body template when the config is loaded, like [`check_template`].
pub fn check_body_template(template: &Value, argument_names: &[&str]) -> Result<(), TemplateError> {
    BodyTemplate::parse(template)?.check_names(argument_names, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(arguments: &Value) -> Values<'_> {
        Values {
            arguments,
            gateway: GatewayValues {
                intent_key: Some("refund:8812:49.00"),
                idempotency_key: Some("refund_order:refund:8812:49.00"),
                intent_id: None,
            },
        }
    }

    fn path(template: &str, arguments: Value) -> Result<String, TemplateError> {
        Template::parse(template)?.render_path(&values(&arguments))
    }

    fn text(template: &str, arguments: Value) -> Result<Option<String>, TemplateError> {
        Template::parse(template)?.render_text(&values(&arguments))
    }

    fn body(template: Value, arguments: Value) -> Result<Value, TemplateError> {
        BodyTemplate::parse(&template)?.render(&values(&arguments))
    }

    #[test]
    fn path_values_are_one_encoded_segment_each() {
        let rows = [
            ("8812", "8812"),
            ("../admin", "..%2Fadmin"),
            ("a?b=c", "a%3Fb%3Dc"),
            ("x#top", "x%23top"),
            ("%2F", "%252F"),
            ("a b", "a%20b"),
            ("line\nbreak", "line%0Abreak"),
            ("é", "%C3%A9"),
            ("a-b.c_d~e", "a-b.c_d~e"),
        ];
        for (value, encoded) in rows {
            assert_eq!(
                path("/v1/orders/{id}/refunds", json!({ "id": value })).unwrap(),
                format!("/v1/orders/{encoded}/refunds"),
                "{value:?}"
            );
        }
        assert_eq!(
            path("/v1/orders/{id}", json!({"id": 7})).unwrap(),
            "/v1/orders/7"
        );
        assert_eq!(
            path("/v1/{customer.id}/x", json!({"customer": {"id": "c/1"}})).unwrap(),
            "/v1/c%2F1/x"
        );
    }

    #[test]
    fn path_values_that_would_move_the_request_are_refused() {
        for value in ["..", ".", "%2e%2e"] {
            let error = path("/v1/orders/{id}", json!({ "id": value }));
            // `%2e%2e` is encoded to `%252e%252e`, which is not a dot segment.
            if value == "%2e%2e" {
                assert_eq!(error.unwrap(), "/v1/orders/%252e%252e");
            } else {
                assert!(
                    matches!(error, Err(TemplateError::DotSegment(_))),
                    "{value}"
                );
            }
        }
        assert_eq!(
            path("/v1/orders/{id}", json!({"id": ""})),
            Err(TemplateError::EmptyPathSegment("id".into()))
        );
        assert_eq!(
            path("/v1/orders/{id}", json!({})),
            Err(TemplateError::MissingArgument("id".into()))
        );
        // A value with more text around it is not a dot segment.
        assert_eq!(path("/v1/o-{id}", json!({"id": ".."})).unwrap(), "/v1/o-..");
    }

    #[test]
    fn decimals_are_exact_and_refused_rather_than_rounded() {
        for amount in [json!(49), json!(49.0), json!("49.00")] {
            assert_eq!(
                text("{amount:.2}", json!({ "amount": amount }))
                    .unwrap()
                    .unwrap(),
                "49.00"
            );
        }
        let error = text("{amount:.2}", json!({"amount": 49.005})).unwrap_err();
        assert!(matches!(error, TemplateError::Decimal { ref name, .. } if name == "amount"));
        assert!(error.to_string().contains("round"), "{error}");
        assert_eq!(text("{n}", json!({"n": 49.0})).unwrap().unwrap(), "49");
        assert_eq!(text("{n}", json!({"n": 0.1})).unwrap().unwrap(), "0.1");
    }

    #[test]
    fn text_is_raw_and_a_lone_absent_placeholder_is_left_out() {
        assert_eq!(
            text("a b&c={x}", json!({"x": "1/2?#"})).unwrap().unwrap(),
            "a b&c=1/2?#"
        );
        assert_eq!(
            text("{flag}", json!({"flag": true})).unwrap().unwrap(),
            "true"
        );
        assert_eq!(text("{x}", json!({})).unwrap(), None);
        assert_eq!(text("{x}", json!({"x": null})).unwrap(), None);
        assert_eq!(
            text("id:{x}", json!({})),
            Err(TemplateError::MissingArgument("x".into()))
        );
        assert!(matches!(
            text("id:{x}", json!({"x": null})),
            Err(TemplateError::BadValue { .. })
        ));
        assert!(matches!(
            text("{x}", json!({"x": {"a": 1}})),
            Err(TemplateError::BadValue { .. })
        ));
        assert_eq!(
            text("{{literal}}", json!({})).unwrap().unwrap(),
            "{literal}"
        );
        assert_eq!(
            text("{items.1}", json!({"items": ["a", "b"]}))
                .unwrap()
                .unwrap(),
            "b"
        );
    }

    #[test]
    fn the_arguments_a_template_renders_are_listed() {
        let template = Template::parse("/v1/{customer.id}/{intent_key}?x={order_id:.2}").unwrap();
        let paths: Vec<String> = template
            .argument_paths()
            .map(|path| path.join("."))
            .collect();
        assert_eq!(paths, ["customer.id", "order_id"]);
    }

    #[test]
    fn gateway_values_render_and_are_named_when_missing() {
        assert_eq!(
            text("{idempotency_key}", json!({})).unwrap().unwrap(),
            "refund_order:refund:8812:49.00"
        );
        assert_eq!(
            text("k={intent_key}", json!({})).unwrap().unwrap(),
            "k=refund:8812:49.00"
        );
        assert_eq!(
            text("id={intent_id}", json!({})),
            Err(TemplateError::MissingGatewayValue("intent_id"))
        );
        assert_eq!(text("{intent_id}", json!({})).unwrap(), None);
    }

    #[test]
    fn header_values_with_line_breaks_are_refused() {
        let template = Template::parse("note {note}").unwrap();
        let line_break = TemplateError::HeaderLineBreak {
            header: "X-Note".into(),
            name: "note".into(),
        };
        for note in ["a\r\nX-Evil: 1", "a\nb", "a\rb"] {
            let arguments = json!({ "note": note });
            assert_eq!(
                template.render_header("X-Note", &values(&arguments)),
                Err(line_break.clone())
            );
        }
        for note in ["a\u{0}b", "a\u{7f}", "a\u{85}"] {
            let arguments = json!({ "note": note });
            assert_eq!(
                template.render_header("X-Note", &values(&arguments)),
                Err(TemplateError::HeaderControl {
                    header: "X-Note".into(),
                    name: "note".into()
                }),
                "{note:?}"
            );
        }
        // The value that holds the break is named, not just the header.
        let reference = Template::parse("{order_id}/{customer.email}").unwrap();
        let arguments =
            json!({"order_id": "8812", "customer": {"email": "a@example.com\r\nBcc: x"}});
        assert_eq!(
            reference.render_header("X-Ref", &values(&arguments)),
            Err(TemplateError::HeaderLineBreak {
                header: "X-Ref".into(),
                name: "customer.email".into()
            })
        );
        let arguments = json!({"note": "tab\tand é"});
        assert_eq!(
            template
                .render_header("X-Note", &values(&arguments))
                .unwrap()
                .unwrap(),
            "note tab\tand é"
        );
        let error = line_break.to_string();
        assert!(
            error.contains("line break") && error.contains("X-Note") && error.contains("`note`"),
            "{error}"
        );
    }

    #[test]
    fn a_body_keeps_json_types_and_leaves_out_absent_optional_members() {
        let template = json!({
            "order_id": "{order_id}",
            "amount": "{amount:.2}",
            "count": "{count}",
            "price": "{price}",
            "flag": "{flag}",
            "tags": "{tags}",
            "note": "refund for {order_id}",
            "reason": "{reason}",
            "explicit_null": "{nothing}",
            "literal": "{{not a placeholder}}",
            "list": ["{count}", 1, "x"],
            "metadata": {"intent_key": "{intent_key}", "intent_id": "{intent_id}"},
        });
        let arguments = json!({
            "order_id": "8812", "amount": 49, "count": 3, "price": 9.5, "flag": false,
            "tags": ["a"], "nothing": null,
        });
        let rendered = body(template, arguments).unwrap();
        assert_eq!(
            rendered,
            json!({
                "order_id": "8812",
                "amount": "49.00",
                "count": 3,
                "price": 9.5,
                "flag": false,
                "tags": ["a"],
                "note": "refund for 8812",
                "explicit_null": null,
                "literal": "{not a placeholder}",
                "list": [3, 1, "x"],
                "metadata": {"intent_key": "refund:8812:49.00"},
            })
        );
        assert!(rendered["count"].is_u64() && rendered["price"].is_f64());
    }

    #[test]
    fn a_body_refuses_missing_arguments_where_they_cant_be_left_out() {
        assert_eq!(
            body(json!({"note": "for {order_id}"}), json!({})),
            Err(TemplateError::MissingArgument("order_id".into()))
        );
        assert_eq!(
            body(json!(["{order_id}"]), json!({})),
            Err(TemplateError::MissingArgument("order_id".into()))
        );
        assert_eq!(
            body(json!("{order_id}"), json!({})),
            Err(TemplateError::MissingArgument("order_id".into()))
        );
    }

    #[test]
    fn templates_are_checked_against_the_tools_arguments() {
        let names = ["order_id", "amount", "customer"];
        check_template("/v1/orders/{order_id}", &names).unwrap();
        check_template("{customer.id}:{amount:.2}:{intent_key}:{intent_id}", &names).unwrap();
        check_template("{idempotency_key}", &names).unwrap();
        let error = check_template("/v1/orders/{order}", &names).unwrap_err();
        assert_eq!(
            error,
            TemplateError::UnknownName {
                name: "order".into()
            }
        );
        assert!(error.to_string().contains("{order}"), "{error}");

        let error = check_body_template(&json!({"metadata": {"k": "{nope}"}}), &names).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("body at `/metadata/k`: placeholder {nope}"),
            "{error}"
        );
        check_body_template(&json!({"a": ["{amount}", "x {order_id}"]}), &names).unwrap();
    }

    #[test]
    fn malformed_templates_are_refused_without_echoing_them() {
        for template in [
            "/v1/{order_id",
            "/v1/order_id}",
            "{}",
            "{a:2}",
            "{a:.x}",
            "{a b}",
            "{intent_key:.2}",
            "{a:.19}",
            "{a{b}",
        ] {
            let error = Template::parse(template).unwrap_err();
            assert!(matches!(error, TemplateError::Syntax { .. }), "{template}");
        }
        let error = check_body_template(&json!({"auth": "Bearer sk_live_{"}), &[]).unwrap_err();
        assert!(!error.to_string().contains("sk_live"), "{error}");
        assert!(error.to_string().contains("/auth"), "{error}");
        let template = Template::parse("Bearer sk_live_secret {x}").unwrap();
        assert!(!format!("{template:?}").contains("sk_live"));
    }

    #[test]
    fn paths_must_be_plain_absolute_paths() {
        Template::parse("/v1/orders/{id}/refunds")
            .unwrap()
            .check_path()
            .unwrap();
        for template in [
            "v1/orders",
            "{id}/x",
            "/v1/search?q={q}",
            "/v1/x#y",
            "/v1/a b",
        ] {
            assert!(
                matches!(
                    Template::parse(template).unwrap().check_path(),
                    Err(TemplateError::BadPath(_))
                ),
                "{template}"
            );
        }
    }

    fn form(template: Value, arguments: &str) -> Result<String, TemplateError> {
        // Parsed from text: numbers keep the text the caller wrote.
        let arguments: Value = serde_json::from_str(arguments).unwrap();
        BodyTemplate::parse(&template)?.render_form(&values(&arguments), Absent::LeaveOut)
    }

    #[test]
    fn a_form_body_is_stripes_bracket_notation() {
        let template = json!({
            "payment_intent": "{payment_intent}",
            "amount": "{amount:minor(USD)}",
            "metadata": {"intentgate_key": "{idempotency_key}", "order": "{order.id}"},
            "expand": ["charge", "charge.customer"],
            "items": "{items}",
            "reason": "{reason}",
            "note": "{note}",
            "count": "{count}",
            "price": "{price}",
            "confirm": true,
            "unset": "{nothing}",
            "empty": {},
        });
        let arguments = r#"{
            "payment_intent": "pi_1", "amount": "49.00", "order": {"id": "a&b=c[d] e"},
            "items": [{"price": "p_1", "quantity": 2}, {"price": "p_2"}],
            "note": "café ✓ 50%+", "count": 3, "price": 9.50, "nothing": null
        }"#;
        assert_eq!(
            form(template, arguments).unwrap(),
            "amount=4900&confirm=true&count=3\
             &expand[]=charge&expand[]=charge.customer\
             &items[0][price]=p_1&items[0][quantity]=2&items[1][price]=p_2\
             &metadata[intentgate_key]=refund_order%3Arefund%3A8812%3A49.00\
             &metadata[order]=a%26b%3Dc%5Bd%5D+e\
             &note=caf%C3%A9+%E2%9C%93+50%25%2B&payment_intent=pi_1&price=9.5&unset="
        );
        // Member names are encoded too, around the brackets that structure them.
        assert_eq!(
            form(
                json!({"a b": {"c&d": "{x}"}, "tags": "{tags}"}),
                r#"{"x": "1", "tags": ["x", null, 2]}"#
            )
            .unwrap(),
            "a+b[c%26d]=1&tags[]=x&tags[]=&tags[]=2"
        );
        assert_eq!(
            form(json!({"nested": "{n}"}), r#"{"n": [[1, 2], {"k": "v"}]}"#).unwrap(),
            "nested[0][]=1&nested[0][]=2&nested[1][k]=v"
        );
        // A whole body that is one object argument is a form; anything else is not.
        assert_eq!(
            form(json!("{params}"), r#"{"params": {"a": 1}}"#).unwrap(),
            "a=1"
        );
        assert_eq!(
            form(json!("{params}"), r#"{"params": [1]}"#),
            Err(TemplateError::FormNotMapping)
        );
        assert!(!BodyTemplate::parse(&json!(["{a}"])).unwrap().can_be_form());
        // Refused as in a JSON body: a missing argument inside text, extra places.
        assert_eq!(
            form(json!({"note": "for {order_id}"}), "{}"),
            Err(TemplateError::MissingArgument("order_id".into()))
        );
        assert!(matches!(
            form(json!({"amount": "{amount:minor(USD)}"}), r#"{"amount": 49.001}"#),
            Err(TemplateError::Currency { ref name, .. }) if name == "amount"
        ));
    }

    #[test]
    fn a_lookup_body_refuses_a_filter_without_a_value() {
        let template = BodyTemplate::parse(&json!({"query": {"order": "{order_id}"}})).unwrap();
        let arguments = json!({});
        assert_eq!(
            template.render_with(&values(&arguments), Absent::Refuse),
            Err(TemplateError::MissingArgument("order_id".into()))
        );
        assert_eq!(
            template.render(&values(&arguments)).unwrap(),
            json!({"query": {}})
        );
    }

    #[test]
    fn minor_units_are_an_integer_everywhere_and_a_json_number_in_a_json_body() {
        for amount in ["49", "49.0", "\"49.00\""] {
            let arguments: Value =
                serde_json::from_str(&format!(r#"{{"amount": {amount}, "currency": "usd"}}"#))
                    .unwrap();
            let rendered = body(
                json!({"amount": "{amount:minor(USD)}", "by_argument": "{amount:minor(currency)}",
                       "text": "{amount:minor(USD)} cents"}),
                arguments.clone(),
            )
            .unwrap();
            assert_eq!(
                rendered,
                json!({"amount": 4900, "by_argument": 4900, "text": "4900 cents"}),
                "{amount}"
            );
            assert!(rendered["amount"].is_u64());
            assert_eq!(
                path("/v1/{amount:minor(JPY)}", arguments.clone()).unwrap(),
                "/v1/49"
            );
        }
        let error = text(
            "{amount:minor(currency)}",
            json!({"amount": 1, "currency": "ZZZ"}),
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("`amount`") && error.to_string().contains("ZZZ"),
            "{error}"
        );
        let error = text("{amount:minor(currency)}", json!({"amount": 1})).unwrap_err();
        assert!(
            error.to_string().contains("`currency`")
                && error.to_string().contains("did not provide"),
            "{error}"
        );
        assert_eq!(error.argument(), Some("amount"));
        // Checked when loaded: the currency must come from an argument of the tool.
        check_template("{amount:minor(currency)}", &["amount", "currency"]).unwrap();
        let error = check_template("{amount:minor(curency)}", &["amount", "currency"]).unwrap_err();
        assert_eq!(
            error,
            TemplateError::UnknownCurrencyArgument {
                name: "amount".into(),
                currency: "curency".into()
            }
        );
        assert!(error.to_string().contains("minor(USD)"), "{error}");
        assert!(matches!(
            check_body_template(&json!({"a": "{amount:minor(cur)}"}), &["amount"]),
            Err(TemplateError::InBody { .. })
        ));
        assert!(matches!(
            Template::parse("{amount:minor(XYZ)}"),
            Err(TemplateError::Syntax { .. })
        ));
    }

    #[test]
    fn a_query_of_one_object_or_array_argument_is_written_in_brackets() {
        let template = Template::parse("{filters}").unwrap();
        let arguments =
            json!({"filters": {"status": "open", "created": {"gte": 5}}, "expand": ["a", "b"]});
        assert_eq!(
            template
                .render_query("filters", &values(&arguments))
                .unwrap()
                .unwrap(),
            [
                ("filters[created][gte]".to_owned(), "5".to_owned()),
                ("filters[status]".to_owned(), "open".to_owned())
            ]
        );
        assert_eq!(
            Template::parse("{expand}")
                .unwrap()
                .render_query("expand", &values(&arguments))
                .unwrap()
                .unwrap(),
            [
                ("expand[]".to_owned(), "a".to_owned()),
                ("expand[]".to_owned(), "b".to_owned())
            ]
        );
        // Scalars, and objects inside text, are as before.
        assert_eq!(
            Template::parse("{x}")
                .unwrap()
                .render_query("created[gte]", &values(&json!({"x": 7})))
                .unwrap()
                .unwrap(),
            [("created[gte]".to_owned(), "7".to_owned())]
        );
        assert!(matches!(
            Template::parse("f:{filters}")
                .unwrap()
                .render_query("q", &values(&arguments)),
            Err(TemplateError::BadValue { .. })
        ));
        assert_eq!(
            Template::parse("{absent}")
                .unwrap()
                .render_query("q", &values(&arguments))
                .unwrap(),
            None
        );
        // A header and a path still refuse an object.
        assert!(matches!(
            Template::parse("{filters}")
                .unwrap()
                .render_header("X-F", &values(&arguments)),
            Err(TemplateError::BadValue { .. })
        ));
        assert!(matches!(
            path("/v1/{filters}", arguments.clone()),
            Err(TemplateError::BadValue { .. })
        ));
    }

    #[test]
    fn list_templates_may_not_use_gateway_values() {
        let names = ["since_ms", "cursor"];
        let template = Template::parse("{intent_key}").unwrap();
        assert!(matches!(
            template.check_names(&names, false),
            Err(TemplateError::NotAvailableHere { .. })
        ));
        let template = Template::parse("{order_id}").unwrap();
        let error = template.check_names(&names, false).unwrap_err();
        assert!(
            error.to_string().contains("{since_ms}, {cursor}"),
            "{error}"
        );
        Template::parse("{cursor}")
            .unwrap()
            .check_names(&names, false)
            .unwrap();
    }
}
